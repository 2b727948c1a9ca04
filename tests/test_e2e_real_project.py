"""Issue 9 acceptance: a small real project (a pytest suite of three failing tests, three todos
each with its own verify command), driven by a scripted agent through `loopx run` under
`env -i` with a minimal PATH, as cron would run it.

- with the test runner on PATH: three verified, charged turns, one merge gate, then the goal's own
  verify command passes and the goal is ready for a human's `loopx goal done` (it protects merges);
- with the test runner missing from PATH: the first turn ends in *needs you* with reason
  ``verify_broken``, recorded with the PATH it ran under, and doctor reports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.skipif(os.name != "posix", reason="env -i and shell scripts are POSIX here")

CALC = '''\
def add(a, b):
    return a - b  # BUG add


def sub(a, b):
    return a + b  # BUG sub


def mul(a, b):
    return a + b  # BUG mul
'''
FIXES = {"add": "return a + b", "sub": "return a - b", "mul": "return a * b"}
AGENT = '''\
import json, os, subprocess, sys

packet = json.load(open(os.environ["LOOPX_PACKET_JSON"]))
title = packet["todo"]["title"]            # "fix add" ...
name = title.split()[-1]
fixes = {fixes!r}
src = open("calc.py").read().splitlines()
src = [("    " + fixes[name]) if line.endswith("# BUG " + name) else line for line in src]
open("calc.py", "w").write("\\n".join(src) + "\\n")
if name == "mul":  # the last fix: finish the run, then ask a human before merging
    loopx = [sys.executable, "-m", "loopx", "--format", "json"]
    run = os.environ["LOOPX_RUN_ID"]
    subprocess.run(loopx + ["turn", "finish", "--run", run, "--result", "completion", "--verify"], check=True)
    subprocess.run(loopx + ["gate", "open", "--kind", "merge", "--question", "merge the three fixes into main?",
                            "--run", run], check=True)
'''


def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=project, check=True,
                   capture_output=True)


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    """The project and the folder holding its test runner `ptest` (kept off PATH on purpose)."""
    project = tmp_path / "calcproj"
    (project / "tests").mkdir(parents=True)
    (project / "calc.py").write_text(CALC)
    for name, (a, b, want) in {"add": (2, 3, 5), "sub": (5, 3, 2), "mul": (4, 3, 12)}.items():
        (project / "tests" / f"test_{name}.py").write_text(
            f"import calc\n\n\ndef test_{name}():\n    assert calc.{name}({a}, {b}) == {want}\n")
    (project / ".gitignore").write_text("__pycache__/\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    ptest = tools / "ptest"
    ptest.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pytest -q -p no:cacheprovider "$@"\n')
    ptest.chmod(0o755)
    (tmp_path / "agent.py").write_text(AGENT.format(fixes=FIXES))
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "a calculator with three bugs")
    return project, tools


def _cron(project: Path, path: str, *args: str) -> subprocess.CompletedProcess:
    """`loopx ARGS` the way cron starts it: an empty environment but for a minimal PATH."""
    env = ["env", "-i", f"PATH={path}", f"HOME={project.parent}", f"LOOPX_HOME={os.environ['LOOPX_HOME']}",
           f"PYTHONPATH={REPO / 'src'}", "LOOPX_NO_UPDATE_CHECK=1"]
    return subprocess.run([*env, sys.executable, "-m", "loopx", *args], cwd=project, capture_output=True, text=True,
                          timeout=300)


def _start(project: Path) -> None:
    r = _cron(project, "/usr/bin:/bin", "connect", "--quiet")
    assert r.returncode == 0, r.stderr
    args = ["start-goal", "--goal-text", "Make the calculator correct", "--goal-id", "calc",
            "--done-when", "the whole suite passes", "--verify", "ptest", "--protect", "merge"]
    for name in ("add", "sub", "mul"):
        args += ["--todo", f"fix {name}", "--todo-verify", f"ptest tests/test_{name}.py"]
    r = _cron(project, "/usr/bin:/bin", *args)
    assert r.returncode == 0, r.stderr


def _state(project: Path) -> dict:
    from loopx.kernel.storage.store import Store

    return Store.open(str(project)).load()


def _agent(tmp_path: Path) -> str:
    return f"{sys.executable} {tmp_path / 'agent.py'}"


def test_three_verified_charged_turns_one_merge_gate_then_done(tmp_path):
    project, tools = _setup(tmp_path)
    _start(project)
    path = f"{tools}:/usr/bin:/bin"
    r = _cron(project, path, "run", "--agent-cmd", _agent(tmp_path), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)["data"]
    assert [(t["result"], t["verified"], t["slots"]) for t in d["turns"]] == [("completion", True, 1)] * 3
    assert d["stop"]["reason"] == "gate_pending"
    state = _state(project)
    assert sorted(t["title"] for t in state["todos"].values() if t["status"] == "done") == \
        ["fix add", "fix mul", "fix sub"]
    for t in state["todos"].values():  # each todo was proven by its own command, not by the suite
        cmds = {state["evidence"][e].get("command") for e in t["evidence"]}
        assert cmds == {t["verify"]}, (t["title"], cmds)
    assert sum(e[1] for e in state["spends"]["calc"]) == 3
    (gate,) = state["gates"].values()
    assert (gate["kind"], gate["status"]) == ("merge", "pending")

    # a human approves the merge; the next cron run checks the goal's own command and closes the goal
    ok = _cron(project, path, "gate", "approve", gate["id"], "--confirm", gate["id"])
    assert ok.returncode == 0, ok.stderr
    r = _cron(project, path, "run", "--agent-cmd", _agent(tmp_path), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)["data"]
    # the goal protects merges, so finishing it is a human's call (`loopx goal done` on a terminal)
    assert d["turns"] == [] and d["goal_verify"]["passed"] is True
    assert d["goal_verify"]["human_closes"] == "loopx goal done calc"
    state = _state(project)
    assert state["goals"]["calc"]["status"] == "active"
    assert [r["verified"] for r in state["runs"].values()] == [True, True, True]
    assert sum(e[1] for e in state["spends"]["calc"]) == 3


def test_verify_command_missing_from_path_ends_in_needs_you_within_one_turn(tmp_path):
    project, tools = _setup(tmp_path)
    _start(project)
    r = _cron(project, "/usr/bin:/bin", "run", "--agent-cmd", _agent(tmp_path), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)["data"]
    assert len(d["turns"]) == 1 and d["turns"][0]["slots"] == 0
    assert (d["stop"]["decision"], d["stop"]["reason"]) == ("wait_human", "verify_broken")
    run = _state(project)["runs"][d["turns"][0]["run_id"]]
    err = run["setup_error"]
    assert err["reason"] == "verify_broken" and err["exit_code"] == 127
    assert err["path"] == "/usr/bin:/bin" and err["resolved"] == {"ptest": None}

    # cron keeps asking: still needs you, and nothing runs
    again = _cron(project, "/usr/bin:/bin", "quota", "should-run", "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["data"]["reason"] == "verify_broken"
    # status and doctor report it from the run's record, whatever PATH they run under
    st = json.loads(_cron(project, "/usr/bin:/bin", "status", "--json").stdout)["data"]
    assert st["goals"][0]["setup_error"]["reason"] == "verify_broken"
    doc = _cron(project, f"{tools}:/usr/bin:/bin", "doctor")
    assert doc.returncode == 1 and "verify_broken" in doc.stdout and "PATH=/usr/bin:/bin" in doc.stdout
    # fixing cron's PATH retries at once
    fixed = _cron(project, f"{tools}:/usr/bin:/bin", "quota", "should-run", "--json")
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["data"]["decision"] == "run"
