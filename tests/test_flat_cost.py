"""Issue 11, acceptance 2: a hot command's cost does not depend on the length of the history.

Counted, not timed: the bytes a ``todo add`` process reads (``rchar`` in ``/proc/self/io``, every
``read`` the process makes, its own imports included) on a 100k-event store must not exceed what
it reads on a 1k-event store by more than a constant; and the hot commands must not import
argparse, json or re when they do not need them (``python -X importtime``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, subprocess_env

LINUX_IO = Path("/proc/self/io")


def _builder():
    spec = importlib.util.spec_from_file_location("storebuild", REPO / "bench" / "storebuild.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("flat")
    build = _builder().build
    return {n: Path(build(str(root), n)) for n in (1_000, 100_000)}


_COUNT = r"""
import sys
from loopx.cli import main

def rchar():
    with open("/proc/self/io", "rb") as fh:
        for line in fh.read().split(b"\n"):
            if line.startswith(b"rchar:"):
                return int(line.split()[1])

before = rchar()
code = main(sys.argv[1:])
after = rchar()
sys.stderr.write(f"\nRCHAR {after - before} {code}\n")
"""


# The stores are shared by this module's tests, which change them (todos added, a todo claimed, a
# gate opened), so a test cannot count on what the tests before it ran. Two calls bring any of them
# to the poll of an unchanged store: the first records a decision that differs from the last one
# (decision_cache saves nothing for a call that recorded), the second writes the caches.
WARM = 2


def _bytes_read(proj: Path, *args: str) -> int:
    env = subprocess_env({"LOOPX_HOME": str(proj / "home")})
    proc = subprocess.run([sys.executable, "-c", _COUNT, *args], cwd=proj, env=env, capture_output=True,
                          text=True, timeout=600)
    line = [x for x in proc.stderr.splitlines() if x.startswith("RCHAR ")][-1]
    _, n, code = line.split()
    assert code == "0", proc.stderr
    return int(n)


@pytest.mark.skipif(not LINUX_IO.exists(), reason="needs /proc/self/io (Linux)")
def test_todo_add_reads_no_more_on_a_100k_store_than_on_a_1k_store(stores):
    add = ("todo", "add", "measured", "--goal-id", "goal-0", "--quiet")
    read = {}
    for n, proj in stores.items():
        _bytes_read(proj, *add)  # the first command after a clone folds the log and writes the cache
        _bytes_read(proj, *add)
        read[n] = _bytes_read(proj, *add)
    events = sum((stores[100_000] / ".loopx" / f).stat().st_size for f in ("events.jsonl", "evidence.jsonl"))
    assert read[100_000] <= read[1_000] + 64 * 1024, read
    assert read[100_000] < events / 10, read  # far from reading the history (or the full snapshot)


@pytest.mark.skipif(not LINUX_IO.exists(), reason="needs /proc/self/io (Linux)")
def test_status_and_should_run_read_no_more_on_a_100k_store(stores):
    for args in (("status",), ("quota", "should-run", "--goal-id", "goal-0", "--skip-exit", "0")):
        read = {}
        for n, proj in stores.items():
            for _ in range(WARM):
                _bytes_read(proj, *args)
            read[n] = _bytes_read(proj, *args)
        assert read[100_000] <= read[1_000] + 64 * 1024, (args, read)


# ---------------------------------------------------------------------- start-up imports
def _imports(proj: Path, args: list[str], stdin: str | None = None, agent: str | None = None) -> set[str]:
    # -S: no site module, so no .pth file of the machine's site-packages (some import re at start-up)
    # is blamed on loopx; subprocess_env puts src/ on PYTHONPATH and loopx has no runtime dependencies.
    # Started as the console script of pip >= 25 starts it (`python -m` would add runpy's imports).
    env = subprocess_env({"LOOPX_HOME": str(proj / "home"), **({"LOOPX_AGENT": agent} if agent else {})})
    script = f"import sys\nsys.argv = ['loopx', *{args!r}]\nfrom loopx.cli import entry\nentry()\n"
    proc = subprocess.run([sys.executable, "-S", "-X", "importtime", "-c", script], cwd=proj, env=env,
                          capture_output=True, text=True, input=stdin, timeout=120)
    mods = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            mods.add(line.rsplit("|", 1)[1].strip())
    assert mods, proc.stderr
    return mods


def _hook_payload(event: str, proj: Path, **extra) -> str:
    import json

    return json.dumps({"session_id": "s", "transcript_path": "/t.jsonl", "cwd": str(proj), "hook_event_name": event,
                       "permission_mode": "default", **extra})


# what none of these needs at start-up: the parser, the pure-Python json and re, datetime.py (the
# clock takes the C types), and what contextlib, functools and importlib would pull in
NOTHING = {"argparse", "json", "re", "datetime", "contextlib", "functools", "collections", "importlib", "fnmatch",
           "typing", "enum", "dataclasses", "shlex"}
HOT = [
    # (command, modules it must not import, stdin, agent)
    (["status"], NOTHING, None, None),
    # a poll of an unchanged store answers from the decision cache before the rules or the store load
    (["quota", "should-run", "--goal-id", "goal-0", "--skip-exit", "0"],
     NOTHING | {"loopx.kernel.policy.decide", "loopx.kernel.storage.store"}, None, None),
    (["todo", "add", "imports", "--goal-id", "goal-0", "--quiet"], NOTHING, None, None),
    (["evidence", "add", "--goal-id", "goal-0", "--kind", "note", "--summary", "s", "--quiet"], NOTHING, None, None),
    (["gate", "open", "--goal-id", "goal-3", "--kind", "custom", "--question", "q?", "--quiet"], NOTHING, None, None),
    (["history", "--limit", "20"], NOTHING, None, None),
    (["next", "--goal-id", "goal-1", "--format", "json"], NOTHING, None, "imports-next"),
    (["hook", "stop", "--host", "claude-code"], NOTHING, "Stop", None),
    (["hook", "session-start", "--host", "claude-code"], NOTHING, "SessionStart", None),
    # an `ls`: the guard parses it, finds no write and no protected action, and compiles no pattern
    (["hook", "pre-tool", "--host", "claude-code"], NOTHING, "PreToolUse", None),
]


@pytest.mark.parametrize("args,banned,event,agent", HOT, ids=[" ".join(a[:2]) for a, *_ in HOT])
def test_hot_commands_do_not_import_what_they_do_not_need(stores, args, banned, event, agent):
    proj = stores[1_000]
    stdin = None
    if event:
        extra = {"tool_name": "Bash", "tool_input": {"command": "ls"}} if event == "PreToolUse" else {}
        stdin = _hook_payload(event, proj, **extra)
    for _ in range(WARM):
        _imports(proj, args, stdin, agent)
    found = _imports(proj, args, stdin, agent) & banned
    assert not found, f"`loopx {' '.join(args)}` imports {sorted(found)}"


def test_the_fast_path_falls_back_to_argparse_for_what_it_does_not_know(stores):
    proj = stores[1_000]
    env = subprocess_env({"LOOPX_HOME": str(proj / "home")})
    bad = subprocess.run([sys.executable, "-m", "loopx", "todo", "add", "--goal-id", "goal-0"], cwd=proj, env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "title" in bad.stderr and "Traceback" not in bad.stderr
    twice = subprocess.run([sys.executable, "-m", "loopx", "todo", "add", "a", "--depends-on", "t-x", "--goal-id",
                            "goal-0"], cwd=proj, env=env, capture_output=True, text=True, timeout=60)
    assert twice.returncode == 2 and "t-x" in twice.stderr  # argparse parsed it; the kernel refused the id
    assert os.path.isdir(proj / ".loopx")
