"""Issue 9 item 19: `kill -9` of `loopx run` must not leave its agent working, the run records the
agent's process group, and no todo is taken again while its previous agent still runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from conftest import subprocess_env
from loopx.kernel.policy import turn
from loopx.kernel.storage import agentproc, clock
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX")

AGENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()} {child.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may not reap at once)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        return raw[raw.rindex(b")") + 2:].split()[0] != b"Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _wait_for(cond, what: str, limit: float = 60.0):
    """Wait for a condition (bounded only so a broken build fails instead of hanging)."""
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def _goal(cli):
    assert cli("start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--verify", "true",
               "--todo", "only").code == 0


def test_kill_9_of_the_runner_ends_the_agent_and_its_children(project, cli, tmp_path):
    _goal(cli)
    pidfile = tmp_path / "agent.pid"
    (tmp_path / "agent.py").write_text(AGENT)
    cmd = f"{sys.executable} {tmp_path / 'agent.py'} {pidfile}"
    # unsandboxed: the agent writes its pid outside the project and the pid must be one out here
    # (test_sandbox.py checks that a sandboxed agent's group ends with its runner too)
    runner = subprocess.Popen([sys.executable, "-m", "loopx", "--agent", "bot", "run", "--once", "--agent-cmd", cmd],
                              cwd=project, env=subprocess_env({"LOOPX_SANDBOX": "off"}), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_for(pidfile.exists, "the agent to start")
        agent_pid, child_pid = map(int, pidfile.read_text().split())
        state = Store.open(str(project)).load()
        (run,) = state["runs"].values()
        proc = run["process"]  # the run records the process group that holds the agent
        assert proc["pgid"] == os.getpgid(agent_pid) == os.getpgid(child_pid) and proc["pid"] == proc["pgid"]
        assert agentproc.alive(proc)
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        _wait_for(lambda: not _running(agent_pid) and not _running(child_pid), "the orphaned agent to end")
        _wait_for(lambda: not agentproc.alive(proc), "the guard to end the whole group")
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_a_todo_is_not_taken_while_its_previous_agent_still_runs(project, cli, monkeypatch):
    _goal(cli)
    store = Store.open(str(project))
    first = turn.next_turn(store, "agent:a1")
    assert first["started"]
    # an agent process that outlived its runner (say it left the guard's reach): its own group
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        turn.attach(store, "agent:a1", first["run_id"], agentproc.describe(orphan.pid))
        later = clock.parse_ts(first["lease_until"]) + timedelta(hours=1)
        monkeypatch.setenv("LOOPX_NOW", clock.iso(later))  # the lease lapsed long ago
        second = turn.next_turn(store, "agent:a2")
        assert second["started"] is False
        d = second["decision"]
        assert (d["decision"], d["reason"], d["todo_id"]) == ("wait", "agent_alive", first["todo_id"])
        assert f"process group {orphan.pid}" in d["message"] and f"kill -TERM -{orphan.pid}" in d["hint"]
        state = store.load()
        assert state["runs"][first["run_id"]]["finished"] is not None  # reaped, but the todo stays untouched
        assert not [r for r in state["runs"].values() if r["agent"] == "agent:a2"]
        r = cli("--agent", "a2", "run", "--once", "--agent-cmd", "true", json=True)
        assert r.data["turns"] == [] and r.data["stop"]["reason"] == "agent_alive"
    finally:
        orphan.kill()
        orphan.wait()
    third = turn.next_turn(store, "agent:a2")
    assert third["started"] and third["todo_id"] == first["todo_id"]


def test_a_run_its_runner_closed_never_blocks_the_todo(project, cli):
    """A run that ended normally is not checked, even if a helper it left behind still runs."""
    _goal(cli)
    r = cli("--agent", "a1", "run", "--once", "--agent-cmd", "exit 0", json=True)
    assert r.code == 0, r.out
    (run,) = Store.open(str(project)).load()["runs"].values()
    assert run["process"]["pid"] > 1 and run["finished"] is not None and not run.get("reaped")


def test_alive_is_false_for_other_hosts_and_bad_records():
    me = agentproc.describe(os.getpid())
    assert agentproc.alive(me)
    assert not agentproc.alive(dict(me, host="elsewhere"))
    assert not agentproc.alive(dict(me, boot_id="another-boot")) or me["boot_id"] is None
    for bad in (None, {}, {"pgid": "12"}, {"pgid": 1}, {"pgid": True}, json.loads('{"pgid": -5}')):
        assert not agentproc.alive(bad)
