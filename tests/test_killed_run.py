"""A ``loopx run`` SIGKILLed mid-turn does not wedge the next one (docs/loop.md, "A runner
killed mid-turn"): the next ``loopx run`` brings the killed turn's private workspace back (the
agent's commit onto the user's branch, its uncommitted file into the checkout), closes the stale
run, and takes its own turn; ``loopx doctor`` names the leftover before that, with the fix.

Real processes: a real ``loopx run`` whose scripted agent commits, writes a file, then waits; the
test waits for the agent's marker file (no sleeps as synchronisation), kills the runner with
SIGKILL, waits until the agent's process group is gone (the runner's guard ends it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_loopx, subprocess_env
from loopx.kernel.storage import agentproc
from loopx.kernel.storage.store import Store
from loopx.sandbox import landlock

ABI = landlock.abi() if sys.platform.startswith("linux") else 0
pytestmark = pytest.mark.skipif(ABI < 1, reason="a sequential turn works in a private clone only under the sandbox")

AGENT = ("sed -i 's/a - b/a + b/' src/calc.py && git add src/calc.py && git commit -q -m 'fix add'\n"
         "echo 'NOTE = 1' > src/extra.py\n"
         "echo ready > ready.tmp && mv ready.tmp ready\n"  # the test's signal: committed and written
         "sleep 600 & wait\n")


def git(cwd, *args, check=True) -> str:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture
def proj(project, cli, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = t\n\temail = t@t\n")
    monkeypatch.setenv("HOME", str(home))
    git(project, "init", "-q", "-b", "main")
    (project / "src").mkdir()
    (project / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (project / "test_calc.py").write_text("import unittest\nfrom src.calc import add\n\n\nclass T(unittest.TestCase):\n"
                                         "    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n")
    git(project, "add", "src", "test_calc.py")
    git(project, "commit", "-q", "-m", "init")
    assert cli("start-goal", "--goal-text", "Fix add", "--goal-id", "g1", "--done-when", "tests pass",
               "--scope", "src/**", "--scope", "*.py", "--todo", "fix add",
               "--todo-verify", f"{sys.executable} -m unittest -q test_calc", "--todo", "later").code == 0
    (project / "agent.sh").write_text(AGENT)
    (project / "notes.txt").write_text("the user's own draft\n")  # untracked: carried in, left alone
    return project


def _env(proj) -> dict:
    return {"HOME": os.environ["HOME"]}


def _kill_mid_turn(proj) -> dict:
    """Start a real `loopx run`, wait for its agent's marker, SIGKILL the runner, wait until the
    agent's process group is gone. Returns the killed run."""
    runner = subprocess.Popen([sys.executable, "-m", "loopx", "--agent", "bot", "run", "--once", "--agent-cmd",
                               "sh agent.sh"], cwd=proj, env=subprocess_env(_env(proj)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wts = proj / ".loopx" / "worktrees"
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end and runner.poll() is None:
            if any((w / "ready").exists() for w in wts.glob("run-*") if w.is_dir()):
                break
            time.sleep(0.05)
        assert runner.poll() is None, runner.stderr.read().decode() if runner.stderr else ""
        runs = [r for r in Store.open(str(proj)).load()["runs"].values() if r.get("process")]
        assert len(runs) == 1, runs
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    end = time.monotonic() + 120
    while agentproc.alive(runs[0]["process"]) and time.monotonic() < end:
        time.sleep(0.05)
    assert not agentproc.alive(runs[0]["process"])
    return runs[0]


def test_the_next_run_brings_a_killed_turns_work_back_and_takes_its_turn(proj):
    main_before = git(proj, "rev-parse", "main")
    killed = _kill_mid_turn(proj)
    rid = killed["id"]
    assert (proj / ".loopx" / "worktrees" / rid).is_dir()
    assert Store.open(str(proj)).load()["runs"][rid]["finished"] is None  # the run is still open

    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert found["status"] == "warning" and rid in found["finding"], found
    assert "loopx run" in found["fix"] and "worktree remove" not in found["fix"], found

    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    assert r.code == 0, r.out + r.err
    assert "Traceback" not in r.err
    # the agent's commit is on the user's branch, its uncommitted file in the checkout, uncommitted
    log = git(proj, "log", "--format=%s", f"{main_before}..main").splitlines()
    assert log == ["fix add"], log
    assert "a + b" in (proj / "src" / "calc.py").read_text()
    assert (proj / "src" / "extra.py").read_text() == "NOTE = 1\n"
    assert (proj / "notes.txt").read_text() == "the user's own draft\n"
    status = set(git(proj, "status", "--porcelain").splitlines())
    assert {"?? src/extra.py", "?? ready", "?? notes.txt"} <= status, status
    # the workspace is gone, the stale run closed, the new turn ran
    assert not (proj / ".loopx" / "worktrees" / rid).exists()
    state = Store.open(str(proj)).load()
    assert state["runs"][rid]["finished"] and state["runs"][rid]["result"] == "failed"
    assert r.data["turns"] and r.data["turns"][0]["run_id"] != rid
    assert r.data["recovered"][0]["run_id"] == rid
    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert found["status"] == "ok", found
