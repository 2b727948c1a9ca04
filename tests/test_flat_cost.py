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
import time
from pathlib import Path

import pytest

from conftest import REPO, subprocess_env

LINUX_IO = Path("/proc/self/io")


def _bench(name: str):
    """``bench/<name>.py`` as a module (bench/ on the path while it loads: its scripts import each other)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(REPO / "bench"))
    return mod


def _builder():
    return _bench("storebuild")


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
    if RUN in args:  # `turn finish`: the agent's `next` opens the run it finishes (untimed, not counted)
        args = [_open_run(proj, env) if a == RUN else a for a in args]
    if VERIFIED in args:  # `quota spend-slot`: a turn taken and finished with its verify command first
        args = [_verified_run(proj, env) if a == VERIFIED else a for a in args]
    if TODO in args:  # `todo done`: a todo and its passing test, added first (not counted)
        todo, ev = _todo_with_evidence(proj, env)
        args = [{TODO: todo, EVIDENCE: ev}.get(a, a) for a in args]
    script = f"import sys\nsys.argv = ['loopx', *{args!r}]\nfrom loopx.cli import entry\nentry()\n"
    proc = subprocess.run([sys.executable, "-S", "-X", "importtime", "-c", script], cwd=proj, env=env,
                          capture_output=True, text=True, input=stdin, timeout=120)
    mods = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            mods.add(line.rsplit("|", 1)[1].strip())
    # the command ran to its answer (0, or 1: a clean "no"): a usage or state error would import less
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert mods, proc.stderr
    return mods


RUN = "{run}"  # in a HOT command: the id of a run the same agent's `next` just opened
TODO, EVIDENCE = "{todo}", "{evidence}"  # in a HOT command: a new todo of goal-0 and a passing test citing it
VERIFIED = "{verified}"  # in a HOT command: a run the same agent opened and finished, verified


def _todo_with_evidence(proj: Path, env: dict) -> tuple[str, str]:
    import json

    def run(*args: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "loopx", *args, "--format", "json"], cwd=proj, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["data"]

    todo = run("todo", "add", "imports done", "--goal-id", "goal-0")["todo_id"]
    ev = run("evidence", "add", "--goal-id", "goal-0", "--todo", todo, "--kind", "test", "--summary", "pytest -q: 3 passed",
             "--command", "pytest -q", "--exit-code", "0")["evidence_id"]
    return todo, ev


def _verified_run(proj: Path, env: dict) -> str:
    rid = _open_run(proj, env)
    done = subprocess.run([sys.executable, "-m", "loopx", "turn", "finish", "--run", rid, "--result", "progress",
                           "--verify", "--quiet"], cwd=proj, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return rid


def _open_run(proj: Path, env: dict) -> str:
    import json

    proc = subprocess.run([sys.executable, "-m", "loopx", "next", "--goal-id", "goal-2", "--format", "json"], cwd=proj,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"]["run_id"]


def _hook_payload(event: str, proj: Path, **extra) -> str:
    import json

    return json.dumps({"session_id": "s", "transcript_path": "/t.jsonl", "cwd": str(proj), "hook_event_name": event,
                       "permission_mode": "default", **extra})


# what none of these needs at start-up: the parser, the pure-Python json and re, datetime.py (the
# clock takes the C types), what contextlib, functools and importlib would pull in, and tomllib (the
# user config is read from its parsed copy)
NOTHING = {"argparse", "json", "re", "datetime", "contextlib", "functools", "collections", "importlib", "fnmatch",
           "typing", "enum", "dataclasses", "shlex", "tomllib"}
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
    (["todo", "list"], NOTHING, None, None),
    (["next", "--goal-id", "goal-1", "--format", "json"], NOTHING, None, "imports-next"),
    # the end of every turn: no experiment, sync or sandbox code unless the store has an experiment worktree
    (["turn", "finish", "--run", RUN, "--result", "progress", "--quiet"],
     NOTHING | {"loopx.kernel.policy.trialstep", "loopx.sync.shared", "loopx.sandbox", "loopx.guard"}, None,
     "imports-finish"),
    # the write-backs every turn's packet lists, and what the loopx skill asks before an edit
    (["todo", "done", TODO, "--evidence", EVIDENCE, "--quiet"], NOTHING, None, None),
    (["scope", "check", "src/pkg1/mod1.py", "--goal-id", "goal-0"], NOTHING | {"zoneinfo"}, None, None),
    # a goal that is not shared is charged here: no remote ledger (json, git transport)
    (["quota", "spend-slot", "--run", VERIFIED, "--quiet"], NOTHING | {"loopx.sync.shared", "hashlib", "random"}, None,
     "imports-spend"),
    (["hook", "stop", "--host", "claude-code"], NOTHING, "Stop", None),
    (["hook", "session-start", "--host", "claude-code"], NOTHING, "SessionStart", None),
    # an `ls`: the guard parses it, finds no write and no protected action, and compiles no pattern
    (["hook", "pre-tool", "--host", "claude-code"], NOTHING, "PreToolUse", None),
    # an agent's most common commands: `git status` is git's own (no alias lookup, no git process),
    # `python -c` code that names no command is not searched for commands
    (["hook", "pre-tool", "--host", "claude-code"], NOTHING | {"subprocess"}, "PreToolUse:git status", None),
    (["hook", "pre-tool", "--host", "claude-code"], NOTHING | {"subprocess"}, "PreToolUse:python -c 'print(1)'",
     None),
    # the plugin hosts start the hook for every tool call; only installing their plugin needs json
    (["hook", "pre-tool", "--host", "opencode"], NOTHING, "PreToolUse", None),
    (["hook", "pre-tool", "--host", "pi"], NOTHING, "PreToolUse", None),
]


@pytest.fixture(scope="module")
def worked_in(stores, tmp_path_factory):
    """The 1k store in a git work tree where the agent changed a file outside its goals' scope (the
    scopes allow ``src/**`` and ``tests/**``), as in a user's project mid-goal: `next` and `turn
    finish` then check changed paths against the scope's globs (kernel/read/turnscope.py)."""
    import shutil

    proj = tmp_path_factory.mktemp("worked") / "proj"
    shutil.copytree(stores[1_000], proj)
    _git_repo(proj)
    (proj / "notes.txt").write_text("changed outside the scope\n")
    # a user who set anything has a config.toml, which should-run, next and every turn read: from its
    # parsed copy, never through tomllib (re, typing); the copy is kept once the file is 2 s old
    (proj / "home").mkdir(exist_ok=True)
    (proj / "home" / "config.toml").write_text("[usage.claude-code]\nblock_tokens = 5000000\n", encoding="utf-8")
    time.sleep(2.1)
    return proj


# a research experiment's listing (issue 20: `trial list` within 2.0x at 10,000 trials): a reader
# of the live view and its cached rows; the trial step, the sandbox and the metric reader are for
# the commands that run trials
TRIAL_HOT = [["trial", "list"], ["trial", "list", "--format", "json"], ["trial", "list", "--format", "tsv"],
             ["experiment", "show"]]
TRIAL_BANNED = NOTHING | {"subprocess", "shutil", "loopx.kernel.policy.trialstep", "loopx.sandbox",
                          "loopx.kernel.read.metrics"}


def _trials_builder():
    return _bench("trials")


@pytest.fixture(scope="module")
def experiment_store(tmp_path_factory):
    """An experiment goal with 200 recorded trials (bench/trials.py's store)."""
    return Path(_trials_builder().build(str(tmp_path_factory.mktemp("trials")), 200))


@pytest.mark.parametrize("args", TRIAL_HOT, ids=" ".join)
def test_the_experiment_listings_do_not_import_the_trial_step(experiment_store, args):
    for _ in range(WARM):
        _imports(experiment_store, args)
    mods = _imports(experiment_store, args)
    assert "loopx.commands.trial" in mods  # the command ran (an empty set would pass for nothing)
    assert not mods & TRIAL_BANNED, f"`loopx {' '.join(args)}` imports {sorted(mods & TRIAL_BANNED)}"


@pytest.mark.parametrize("args,banned,event,agent", HOT,
                         ids=[" ".join(a[:2] + a[3:4]) + (f" ({e.partition(':')[2]})" if e and ":" in e else "")
                              for a, _, e, _ in HOT])
def test_hot_commands_do_not_import_what_they_do_not_need(worked_in, args, banned, event, agent):
    proj = worked_in
    stdin = None
    if event:
        event, _, command = event.partition(":")
        extra = {"tool_name": "Bash", "tool_input": {"command": command or "ls"}} if event == "PreToolUse" else {}
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


# ---------------------------------------------------------------------- full-state reads (issue 26)
# Counted, not timed: how many times a process folds the full state (``Store.load`` returning
# something that is not the live view). The paths a user hits per tool call, per poll and per turn
# must read only the live view once it exists; before issue 26 each of these folded the history.
_FULL = r"""
import os
import sys
if os.environ.get("TEST_GIT_RACY_NS"):  # the git status cache's racy window (kernel/read/gitstatus.py)
    from loopx.kernel.read import gitstatus
    gitstatus.RACY_NS = int(os.environ["TEST_GIT_RACY_NS"])
from loopx.kernel.storage import fold
from loopx.kernel.storage.store import Store

FULL = [0]
LOADS = [0]
_load = Store.load

def load(self, *a, **kw):
    state = _load(self, *a, **kw)
    LOADS[0] += 1
    if not fold.is_live(state):
        FULL[0] += 1
    return state

Store.load = load
TX = [0]
_transact = Store.transact

def transact(self, *a, **kw):
    TX[0] += 1
    return _transact(self, *a, **kw)

Store.transact = transact
import subprocess
GIT = [0]
_init = subprocess.Popen.__init__

def init(self, args, *a, **kw):
    if isinstance(args, (list, tuple)) and args and args[0] == "git":
        GIT[0] += 1
    _init(self, args, *a, **kw)

subprocess.Popen.__init__ = init
import os
_spawn = getattr(os, "posix_spawnp", None)

def spawnp(path, argv, *a, **kw):
    if path == "git":
        GIT[0] += 1
    return _spawn(path, argv, *a, **kw)

if _spawn is not None:
    os.posix_spawnp = spawnp
try:
    if sys.argv[1] == "--api":
        from loopx.dashboard.api import Api
        from loopx.kernel.storage import clock
        import threading
        api = Api()
        if sys.argv[2] == "notices":
            threads = [threading.Thread(target=api.notices, args=(clock.now_iso(),)) for _ in range(8)]
            [t.start() for t in threads]
            [t.join() for t in threads]
        code = 0
    elif sys.argv[1] == "--lib":  # a custom runner's turn through loopx.api, counted after the claim
        from loopx import api
        conn = api.connect(agent="lib")
        turn = api.next_turn(conn, sys.argv[2])
        assert turn.started, turn.decision
        FULL[0] = LOADS[0] = 0
        api.add_evidence(conn, turn.run_id, kind="note", summary="ran")
        api.open_gate(conn, "custom", "ok?", run=turn.run_id)
        api.finish_turn(conn, turn.run_id, "progress")
        code = 0
    else:
        from loopx.cli import main
        code = main(sys.argv[1:])
finally:
    sys.stderr.write(f"\nFULL {FULL[0]} {code if 'code' in dir() else 'x'} {LOADS[0]} {TX[0]} {GIT[0]}\n")
"""


def _full_reads(proj: Path, *args: str, stdin: str | None = None, env: dict | None = None, loads: list | None = None) -> int:
    """How many full states a ``loopx args`` process folded (``loads``: gets the number of loads)."""
    env = subprocess_env({"LOOPX_HOME": str(proj / "home"), **(env or {})})
    proc = subprocess.run([sys.executable, "-c", _FULL, *args], cwd=proj, env=env, capture_output=True, text=True,
                          input=stdin, timeout=600)
    line = [x for x in proc.stderr.splitlines() if x.startswith("FULL ")]
    assert line, proc.stderr[-2000:]
    _, n, code, total, tx, git = line[-1].split()
    assert code in ("0", "1"), proc.stderr[-2000:]
    if loads is not None:
        loads.extend((int(total), int(tx), int(git)))
    LAST_OUT[:] = [proc.stdout]
    return int(n)


LAST_OUT = [""]


@pytest.fixture()
def small(stores, tmp_path):
    import shutil

    proj = tmp_path / "proj"
    shutil.copytree(stores[1_000], proj)
    _full_reads(proj, "status")  # the live view exists from here on (as after any command)
    return proj


def _pre_tool(proj: Path, tool: str, tool_input: dict) -> str:
    return _hook_payload("PreToolUse", proj, tool_name=tool, tool_input=tool_input)


def test_a_denied_tool_call_reads_the_live_view_only(small):
    # twice: the bench store's single-use merge approvals are used by the first push, so the
    # second is denied by the gate state (the path that used to ask the full state before denying)
    push = _pre_tool(small, "Bash", {"command": "git push origin main"})
    _full_reads(small, "hook", "pre-tool", "--host", "claude-code", stdin=push)
    for payload in (push, _pre_tool(small, "Bash", {"command": "rm -rf .loopx"}),
                    _pre_tool(small, "Edit", {"file_path": str(small / "secrets" / "k"), "old_string": "a",
                                              "new_string": "b"})):
        out = subprocess.run([sys.executable, "-m", "loopx", "hook", "pre-tool", "--host", "claude-code"], cwd=small,
                             env=subprocess_env({"LOOPX_HOME": str(small / "home")}), input=payload,
                             capture_output=True, text=True, timeout=120)
        assert '"deny"' in out.stdout, out.stdout  # the verdict is a denial
        assert _full_reads(small, "hook", "pre-tool", "--host", "claude-code", stdin=payload) == 0


def test_connect_on_an_existing_store_reads_the_live_view_only(small):
    assert _full_reads(small, "connect") == 0


def test_the_dashboard_notices_read_the_live_view_once_for_concurrent_requests(small):
    _full_reads(small, "connect")  # registers the project in this LOOPX_HOME
    loads: list = []
    assert _full_reads(small, "--api", "notices", loads=loads) == 0
    assert loads[0] == 1  # eight concurrent requests, one read of the store


@pytest.mark.parametrize("args", [("todo", "list", "--ready"), ("todo", "list", "--status", "open"), ("agent", "list"),
                                  ("scope", "check", "src/a.py", "--goal-id", "goal-0"),  # asked before an edit
                                  ("scope", "show", "--goal-id", "goal-0")])
def test_open_work_listings_read_the_live_view_only(small, args):
    assert _full_reads(small, *args) == 0


def test_a_custom_runners_turn_through_the_library_reads_the_live_view_only(small):
    # loopx.api's add_evidence and open_gate with a run id looked the run up in the full state
    assert _full_reads(small, "--lib", "goal-0") == 0


def test_a_runner_turn_reads_the_live_view_only(small):
    # `loopx run` used to fold the full state four or five times per turn (the permission mode, the
    # todos before, settling, charging the slot, looking for approved merges)
    n = _full_reads(small, "run", "--agent-cmd", "true", "--once", "--goal-id", "goal-0")
    assert n == 0, n


def _git_repo(proj: Path) -> None:
    """``proj`` as a git repository with its files committed; the test's LOOPX_HOME (``home/``, in
    the project only for the test's sake) is excluded, as a user's ``~/.loopx`` is outside it."""
    env = subprocess_env({})
    subprocess.run(["git", "init", "-q"], cwd=proj, env=env, check=True, capture_output=True)
    with open(proj / ".git" / "info" / "exclude", "a", encoding="utf-8") as fh:
        fh.write("/home/\n")
    for args in (["add", "-A", "."], ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "tracked"]):
        subprocess.run(["git", *args], cwd=proj, env=env, check=True, capture_output=True)


def test_a_claim_is_one_write_and_one_git_call_in_a_git_repository(small):
    """`next` claiming a todo wrote the decision and the claim in two transactions and started four
    git processes for the fingerprint (HEAD, refs, status, top); `turn finish` four too."""
    import json

    _git_repo(small)
    _full_reads(small, "todo", "add", "warm", "--goal-id", "goal-1", "--quiet")  # the day's anchor goes to git once
    counts: list = []
    agent = {"LOOPX_AGENT": "counted", "TEST_GIT_RACY_NS": str(1 << 62)}  # git status is never kept: counted
    assert _full_reads(small, "next", "--goal-id", "goal-0", "--format", "json", env=agent, loads=counts) == 0
    run = json.loads(LAST_OUT[0])["data"]
    assert run["started"] and run["decision"]["decision"] == "run"
    # one transaction; one git process: the fingerprint's `git status`, whose listing also says what
    # was already changed outside the goal's scope when the run opened (this goal has a scope;
    # kernel/read/turnscope.py); HEAD, refs and the top are read from git's files
    assert counts == [1, 1, 1], counts  # one read of the live view (the decision uses the one `next` resumes from)
    counts.clear()
    _full_reads(small, "turn", "finish", "--run", run["run_id"], "--result", "progress", "--quiet", env=agent,
                loads=counts)
    assert counts[2] == 1, counts  # one status for the fingerprint and the scope check (HEAD did not move: no diff)


def test_a_settled_project_is_polled_without_starting_git(small):
    """The fingerprint's `git status` is kept while the work tree's stat data is unchanged
    (kernel/read/gitstatus.py): once the files settled, `status` and should-run start no git
    process; a new file makes the next one ask git again."""
    import time

    _git_repo(small)
    quick = {"TEST_GIT_RACY_NS": str(50_000_000)}  # 50 ms instead of 2 s: the test waits less
    time.sleep(0.1)
    counts: list = []
    _full_reads(small, "status", env=quick, loads=counts)
    first = LAST_OUT[0]
    assert counts[2] == 1, counts
    _full_reads(small, "quota", "should-run", "--goal-id", "goal-0", env=quick)  # records (and anchors) once
    for args in (["status"], ["quota", "should-run", "--goal-id", "goal-0"]):
        counts.clear()
        _full_reads(small, *args, env=quick, loads=counts)
        assert counts[2] == 0, (args, counts)
    assert LAST_OUT[0] and first
    (small / "notes.txt").write_text("a new file\n")
    counts.clear()
    _full_reads(small, "status", env=quick, loads=counts)
    assert counts[2] == 1, counts


def test_the_shared_git_status_still_sees_each_file_of_a_new_folder_outside_the_scope(small):
    """The fingerprint's `git status` collapses a wholly untracked folder to `dir/`; the scope check
    that reuses it must still name every file the turn created there (one more, narrow, `git status`
    for such folders only), and nothing else."""
    import json

    _git_repo(small)
    (small / "src").mkdir()
    (small / "src" / "ok.py").write_text("x = 1\n")  # inside the scope (src/**): never named
    agent = {"LOOPX_AGENT": "counted"}
    _full_reads(small, "next", "--goal-id", "goal-0", "--format", "json", env=agent)
    run = json.loads(LAST_OUT[0])["data"]
    (small / "notes" / "deep").mkdir(parents=True)  # a new folder outside the scope, two files deep
    (small / "notes" / "a.txt").write_text("a\n")
    (small / "notes" / "deep" / "b.txt").write_text("b\n")
    counts: list = []
    _full_reads(small, "turn", "finish", "--run", run["run_id"], "--result", "progress", "--format", "json",
                env=agent, loads=counts)
    done = json.loads(LAST_OUT[0])["data"]
    assert done["out_of_scope"] == ["notes/a.txt", "notes/deep/b.txt"], done
    assert done["verified"] is False
    assert counts[2] == 2, counts  # the shared status, and one for the collapsed folders


def test_the_cache_expiry_is_the_one_a_loop_over_every_ledger_entry_gives(stores, monkeypatch):
    """decision_cache.valid_until parses one stamp per ledger instead of one per entry (issue 26);
    its answer must be the per-entry loop's, at times inside, at the edge of and past the window."""
    from loopx.kernel.policy import decision_cache as dc
    from loopx.kernel.storage import clock
    from loopx.kernel.storage.clock import timedelta
    from loopx.kernel.storage.store import Store

    state = Store.open(str(stores[1_000])).load()

    def every_entry(stamps, seconds, now, now_iso):  # the loop it replaced: every end after now
        ends = [clock.iso(clock.parse_ts(ts) + timedelta(seconds=seconds)) for ts in stamps]
        return [e for e in ends if e > now_iso]

    stamps = sorted(e[0] for entries in state["spends"].values() for e in entries)
    assert len(stamps) > 50 and state["handoffs"]
    window = state["goals"]["goal-0"]["quota"]["window"]
    for ts in (stamps[0], stamps[len(stamps) // 2], stamps[-1], state["handoffs"][-1]["ts"]):
        for shift in (-1, 0, 1, 1799, 1800, 1801, window - 1, window, window + 1):
            now = clock.parse_ts(ts) + timedelta(seconds=shift)
            got = dc.valid_until(state, now)
            with monkeypatch.context() as m:
                m.setattr(dc, "_first_ends", every_entry)
                assert got == dc.valid_until(state, now), (ts, shift)


def test_todo_done_reads_the_live_view_only(small):
    """Agents close a todo every turn; it used to fold the full state to look the todo up."""
    import json

    _full_reads(small, "todo", "add", "closable", "--goal-id", "goal-0", "--format", "json")
    tid = json.loads(LAST_OUT[0])["data"]["todo_id"]
    _full_reads(small, "evidence", "add", "--goal-id", "goal-0", "--todo", tid, "--kind", "test", "--summary", "ok",
                "--command", "true", "--exit-code", "0", "--format", "json")
    ev = json.loads(LAST_OUT[0])["data"]["evidence_id"]
    assert _full_reads(small, "todo", "done", tid, "--evidence", ev, "--format", "json") == 0
    assert json.loads(LAST_OUT[0])["data"]["todo_id"] == tid


def test_plain_todo_list_reads_the_live_view_and_counts_the_done_todos_it_leaves_out(small):
    """`todo list` without a filter listed every done todo of the history (a fold: 688 MB at 1M
    events); it now lists the live view's todos (open work and the recently closed) and counts the
    older done ones, which `--status done` (an explicit full report) lists."""
    import json

    assert _full_reads(small, "todo", "list", "--format", "json") == 0
    plain = json.loads(LAST_OUT[0])["data"]
    assert _full_reads(small, "todo", "list", "--status", "done", "--format", "json") == 1
    every_done = json.loads(LAST_OUT[0])["data"]
    listed_done = {t["id"] for t in plain["todos"] if t["status"] == "done"}
    assert plain["older_done"] > 0
    assert plain["older_done"] + len(listed_done) == every_done["count"]
    assert listed_done <= {t["id"] for t in every_done["todos"]}
    _full_reads(small, "todo", "list", "--status", "open", "--format", "json")
    opened = {t["id"] for t in json.loads(LAST_OUT[0])["data"]["todos"]}
    assert opened and opened <= {t["id"] for t in plain["todos"]}  # all open work is listed
    assert _full_reads(small, "todo", "list") == 0
    assert f"{plain['older_done']:,} older done todos not listed: `loopx todo list --status done`" in LAST_OUT[0]


def test_a_stop_hook_after_a_continuation_reads_the_live_view_only(small):
    """The stop hook looked up the run its previous continuation started in the full state (a fold
    per turn: 78 MB at 100k events); the live view keeps every open run."""
    # a session of its own: the module's earlier hook calls (session "s") left their continuation noted
    payload = _hook_payload("Stop", small, stop_hook_active=False, session_id="flat-cost-stop")
    assert _full_reads(small, "hook", "stop", "--host", "claude-code", stdin=payload) == 0
    assert '"decision": "block"' in LAST_OUT[0]  # a continuation started a run and noted it
    # the agent stopped without finishing it: the next stop closes that run, on the live view
    assert _full_reads(small, "hook", "stop", "--host", "claude-code", stdin=payload) == 0
    from loopx.kernel.storage.store import Store

    runs = [r for r in Store.open(str(small)).load()["runs"].values() if r.get("agent") == "agent:claude-code"]
    assert any(r["result"] == "no_progress" and "stopped without finishing" in (r.get("note") or "") for r in runs), runs
