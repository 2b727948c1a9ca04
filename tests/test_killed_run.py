"""A ``loopx run`` SIGKILLed mid-turn does not wedge the next one (docs/loop.md, "A runner
killed mid-turn"): the next ``loopx run`` brings the killed turn's private workspace back (the
agent's commit onto the user's branch, its uncommitted file into the checkout), closes the stale
run, and takes its own turn; ``loopx doctor`` names the leftover before that, with the fix.

Real processes: a real ``loopx run`` whose scripted agent commits, writes a file, then waits; the
test waits for the agent's marker file (no sleeps as synchronisation), kills the runner with
SIGKILL, waits until the agent's process group is gone (the runner's guard ends it)."""

from __future__ import annotations

import json
import os
import shutil
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


def _kill_mid_turn(proj, agent: str = "bot", sig: int = signal.SIGKILL) -> dict:
    """Start a real `loopx run`, wait for its agent's marker, SIGKILL the runner, wait until the
    agent's process group is gone. Returns the killed run."""
    runner = subprocess.Popen([sys.executable, "-m", "loopx", "--agent", agent, "run", "--once", "--agent-cmd",
                               "sh \"$LOOPX_PROJECT_DIR/agent.sh\""], cwd=proj, env=subprocess_env(_env(proj)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wts = proj / ".loopx" / "worktrees"
    try:
        end = time.monotonic() + 300
        runs: list = []
        while time.monotonic() < end and runner.poll() is None:  # the marker, and the agent's group recorded
            if any((w / "ready").exists() for w in wts.glob("run-*") if w.is_dir()):
                runs = [r for r in Store.open(str(proj)).load()["runs"].values() if r.get("process")]
                if runs:
                    break
            time.sleep(0.05)
        assert runner.poll() is None, runner.stderr.read().decode() if runner.stderr else ""
        assert len(runs) == 1, runs
        runner.send_signal(sig)
        runner.wait(timeout=300)
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
    packet = proj / ".loopx" / "cache" / f"{rid}.packet.txt"
    assert packet.exists()  # the killed runner never removed it

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
    assert not (proj / ".loopx" / "worktrees" / rid).exists() and not packet.exists()
    state = Store.open(str(proj)).load()
    assert state["runs"][rid]["finished"] and state["runs"][rid]["result"] == "failed"
    assert r.data["turns"] and r.data["turns"][0]["run_id"] != rid
    assert r.data["recovered"][0]["run_id"] == rid
    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert found["status"] == "ok", found


def test_a_killed_turn_after_the_user_committed_lands_as_a_merge_with_its_uncommitted_work_committed(proj):
    """The user's branch moved while the runner was dead: as at a normal turn end, the agent's
    uncommitted file cannot be written as uncommitted work over a checkout that moved, so loopx
    commits it in the workspace and the branch lands as a merge commit; nothing of either side lost."""
    killed = _kill_mid_turn(proj)
    (proj / "USER.md").write_text("the user's commit\n")
    git(proj, "add", "USER.md")
    git(proj, "commit", "-q", "-m", "the user's commit")
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true"], cwd=proj, env=_env(proj), timeout=600)
    assert r.code == 0, r.out + r.err
    assert f"run {killed['id']}, killed mid-turn: closed as failed; its workspace brought back" in r.err, r.err
    log = git(proj, "log", "--format=%s", "main").splitlines()
    assert "fix add" in log and "the user's commit" in log, log
    assert any(s.startswith(f"loopx: {killed['id']}") for s in log), log
    assert git(proj, "show", "main:src/extra.py") == "NOTE = 1"
    assert "a + b" in git(proj, "show", "main:src/calc.py")
    assert not (proj / ".loopx" / "worktrees" / killed["id"]).exists()


def _open_run(cli) -> str:
    r = cli("--agent", "bot", "next", json=True)
    assert r.code == 0 and r.data["started"], r.out + r.err
    return r.data["run_id"]


def test_a_workspace_left_while_loopx_was_still_making_it_is_removed_and_its_run_closed(proj, cli):
    """Killed between the record and the agent's start: no agent ran in that clone (the carried
    copies of the user's files are the user's, still in the checkout): it is removed."""
    rid = _open_run(cli)
    ws = proj / ".loopx" / "worktrees" / rid
    ws.mkdir(parents=True)
    (ws / "notes.txt").write_text("the user's own draft\n")
    (ws.parent / f"{rid}.json").write_text(json.dumps({"run_id": rid, "sequential": True, "creating": True}))
    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert found["status"] == "warning" and f"{rid} (killed mid-turn)" in found["finding"], found
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    assert r.code == 0, r.out + r.err
    assert r.data["recovered"] == [{"run_id": rid, "closed": True, "kept": False, "merge": None,
                                    "note": "an unfinished workspace removed"}]
    assert not ws.exists() and not (ws.parent / f"{rid}.json").exists()
    assert Store.open(str(proj)).load()["runs"][rid]["result"] == "failed"
    assert (proj / "notes.txt").read_text() == "the user's own draft\n"


def test_a_workspace_without_a_record_in_the_way_of_a_resumed_run_is_a_one_line_conflict(proj, cli):
    """A leftover no runner can vouch for (an older loopx's, or its agent still running): the
    resumed turn stops with a one-line error and a hint (exit 4), never git's clone message."""
    rid = _open_run(cli)
    (proj / ".loopx" / "worktrees" / rid).mkdir(parents=True)
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true"], cwd=proj, env=_env(proj), timeout=600)
    assert r.code == 4, r.out + r.err
    assert f"the workspace of run {rid} is still there" in r.err and "hint:" in r.err and "rm -rf" in r.err, r.err
    assert "Traceback" not in r.err and "git clone" not in r.err
    assert Store.open(str(proj)).load()["runs"][rid]["finished"] is None  # nothing closed behind its back


def test_doctor_tells_how_to_remove_a_parallel_runs_clone(proj):
    """A parallel run's workspace is a private clone: `git worktree remove` does not apply to it."""
    ws = proj / ".loopx" / "worktrees" / "run-abc123"
    ws.parent.mkdir(parents=True, exist_ok=True)
    git(proj, "clone", "-q", "--shared", str(proj), str(ws))
    git(proj, "branch", "loopx/run-abc123")
    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert found["status"] == "warning" and "run-abc123 (a failed run's, kept for a look)" in found["finding"]
    assert found["fix"].endswith(f"when done: rm -rf {ws} && git branch -D loopx/run-abc123"), found
    assert "worktree remove" not in found["fix"]


def test_a_workspace_a_runner_kept_for_a_human_is_left_alone_and_named_with_why(proj, cli):
    """A turn whose work could not all be brought back keeps its workspace (marked kept in its
    record): the next run does not try again (no repeated merges or conflict todos), doctor names
    it with why and how to remove the clone."""
    from loopx.kernel.policy import turn

    rid = _open_run(cli)
    turn.close(Store.open(str(proj)), "agent:bot", rid, "failed", "test")
    ws = proj / ".loopx" / "worktrees" / rid
    ws.parent.mkdir(parents=True, exist_ok=True)
    git(proj, "clone", "-q", "--shared", str(proj), str(ws))
    (ws / "left.txt").write_text("not brought back\n")
    (ws.parent / f"{rid}.json").write_text(json.dumps({"run_id": rid, "sequential": True,
                                                       "kept": "workspace kept: 1 uncommitted file(s) not brought back"}))
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    assert r.code == 0, r.out + r.err
    assert "recovered" not in r.data and (ws / "left.txt").exists()
    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert f"{rid} (kept: workspace kept: 1 uncommitted file(s) not brought back)" in found["finding"], found
    assert f"rm -rf {ws}" in found["fix"] and "loopx run" not in found["fix"], found


def test_a_record_this_loopx_cannot_use_keeps_the_workspace_named_never_deleted(proj, cli):
    rid = _open_run(cli)
    ws = proj / ".loopx" / "worktrees" / rid
    ws.parent.mkdir(parents=True, exist_ok=True)
    git(proj, "clone", "-q", "--shared", str(proj), str(ws))
    (ws / "work.txt").write_text("the agent's\n")
    (ws.parent / f"{rid}.json").write_text(json.dumps({"run_id": rid, "sequential": True}))  # no base: unusable
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    assert r.code == 0, r.out + r.err
    got = r.data["recovered"]
    assert [(g["run_id"], g["closed"], g["kept"]) for g in got] == [(rid, True, True)], got
    assert (ws / "work.txt").read_text() == "the agent's\n"
    assert json.loads((ws.parent / f"{rid}.json").read_text())["kept"].startswith("workspace kept")
    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert f"{rid} (kept: workspace kept" in found["finding"] and f"rm -rf {ws}" in found["fix"], found
    again = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                      timeout=600)
    assert again.code == 0 and "recovered" not in again.data, again.out + again.err


def test_a_killed_parallel_runners_clone_is_kept_named_and_its_slot_runs_again(proj, cli):
    """A goal that allows two runners: each works in its own clone on `loopx/<run>`. Killed
    mid-turn, the next runner on that slot closes the run as failed and keeps its clone for a
    look (as for a failed parallel run: its commit is there), instead of failing on it."""
    assert cli("goal", "update", "g1", "--max-parallel", 2).code == 0
    killed = _kill_mid_turn(proj)
    rid = killed["id"]
    assert killed["agent"] == "agent:bot-1", killed["agent"]
    ws = proj / ".loopx" / "worktrees" / rid
    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert f"{rid} (killed mid-turn)" in found["finding"] and "loopx run" in found["fix"], found
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    assert r.code == 0, r.out + r.err
    assert [(g["run_id"], g["closed"], g["kept"]) for g in r.data["recovered"]] == [(rid, True, True)]
    assert r.data["turns"] and r.data["turns"][0]["run_id"] != rid
    assert Store.open(str(proj)).load()["runs"][rid]["result"] == "failed"
    assert "fix add" in git(ws, "log", "--format=%s", "-1") and (ws / "src" / "extra.py").exists()
    doc = run_loopx(["doctor", "--json"], cwd=proj, env=_env(proj))
    found = [c for c in doc.data["checks"] if c["id"] == "worktrees"][0]
    assert f"{rid} (kept: workspace kept: a --parallel run whose runner died mid-turn" in found["finding"], found
    assert f"rm -rf {ws}" in found["fix"], found


def test_after_ctrl_c_the_next_run_brings_the_interrupted_turns_work_back(proj):
    """Ctrl-C closes the run as failed (exit 130) before its work is brought back: the next run
    brings it back as for a killed runner."""
    main_before = git(proj, "rev-parse", "main")
    stopped = _kill_mid_turn(proj, sig=signal.SIGINT)
    run = Store.open(str(proj)).load()["runs"][stopped["id"]]
    assert run["result"] == "failed" and "interrupted" in run["note"], run
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    assert r.code == 0, r.out + r.err
    assert [(g["run_id"], g["closed"], g["kept"]) for g in r.data["recovered"]] == [(stopped["id"], False, False)]
    assert git(proj, "log", "--format=%s", f"{main_before}..main").splitlines() == ["fix add"]
    assert (proj / "src" / "extra.py").read_text() == "NOTE = 1\n"


def test_a_workspace_loopx_could_not_remove_is_kept_and_the_users_files_are_never_touched(proj):
    """After a normal turn loopx removes its workspace; when part of it cannot be removed (here a
    file the agent made immutable), its .git and the carried copies are gone but the folder stays.
    Taking that for a killed turn's workspace would run git in the project's own repository (git
    walks up) and delete the user's files as "removed by the agent": it is kept and named instead."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    agent = "sh -c 'echo \"X = 1\" > src/stuck.py && chattr +i src/stuck.py'"
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", agent, "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    stuck = list((proj / ".loopx" / "worktrees").glob("run-*/src/stuck.py"))
    try:
        if not stuck:
            pytest.skip(f"chattr +i did not hold here: {r.out[-300:]} {r.err[-300:]}")
        assert r.code in (0, 1), r.out + r.err
        (proj / "wip.py").write_text("the user's work in progress\n")
        again = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj,
                          env=_env(proj), timeout=600)
        assert again.code in (0, 1) and "Traceback" not in again.err, again.out + again.err
        assert (proj / "notes.txt").read_text() == "the user's own draft\n"
        assert (proj / "wip.py").read_text() == "the user's work in progress\n"
        assert not (again.data or {}).get("recovered"), again.data
        rid = stuck[0].parent.parent.name
        assert "could not remove" in json.loads((stuck[0].parent.parent.parent / f"{rid}.json").read_text())["kept"]
    finally:
        for f in stuck:
            subprocess.run(["chattr", "-i", str(f)], check=False)


def test_a_record_of_a_run_the_live_view_no_longer_holds_does_not_stop_the_runner(proj, cli):
    """A stray record (its run unknown here, or finished and left out of the live view) is looked
    up in the whole history, never an internal error on every start."""
    ws = proj / ".loopx" / "worktrees" / "run-0000stray"
    ws.mkdir(parents=True)
    (ws.parent / "run-0000stray.json").write_text(json.dumps({"run_id": "run-0000stray", "sequential": True}))
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    assert r.code == 0 and "internal error" not in r.err, r.out + r.err
    assert r.data["turns"], r.data


def test_a_killed_turn_is_closed_unjudged_so_the_next_turn_is_not_skipped_for_no_change(proj, cli):
    rid = _open_run(cli)
    ws = proj / ".loopx" / "worktrees" / rid
    ws.mkdir(parents=True)
    (ws.parent / f"{rid}.json").write_text(json.dumps({"run_id": rid, "sequential": True, "creating": True}))
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=_env(proj),
                  timeout=600)
    assert r.code == 0, r.out + r.err
    run = Store.open(str(proj)).load()["runs"][rid]
    assert run["result"] == "failed" and run.get("unjudged") is True, run
