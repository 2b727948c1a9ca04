"""Issue 22, item 5: the human channels without a sandbox (a host started by hand with hooks only).

Real processes: a stand-in agent host (a shell carrying CLAUDECODE=1 that calls loopx's hook, as
Claude Code does) re-parents ``loopx gate approve`` with ``setsid -f`` and a double fork; loopx's
broker and sandbox variables count as agent markers; the governance commands need the human
check; one approval authorises one protected action even inside a compound command. A human
shell, a cron-like script and the test's own set-up still act as a human.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_loopx, subprocess_env
from loopx.guard import verdicts
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: the re-parent checks are Linux's")


def _gate(cli) -> str:
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g1", "--done-when", "x", "--todo", "a",
               "--protect", "merge").code == 0
    return cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "Merge?", json=True).data["gate_id"]


def _status(project, gate) -> str:
    return Store.open(str(project)).load()["gates"][gate]["status"]


def _agent_host(project: Path, script: str, timeout: float = 60) -> str:
    """Run ``script`` in a stand-in agent host: a shell with CLAUDECODE=1 whose hooks ran first
    (session-start), which waits until ``script`` wrote ``done`` before it exits. The output."""
    payload = json.dumps({"hook_event_name": "SessionStart", "session_id": "s1", "cwd": str(project)})
    loopx = f"{sys.executable} -m loopx"
    host = (f"echo '{payload}' | {loopx} hook session-start --host claude-code >/dev/null; "
            f"{script}; i=0; while [ ! -f done ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done")
    env = subprocess_env({"CLAUDECODE": "1"})
    p = subprocess.run(["bash", "-c", host], cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    return p.stdout + p.stderr


def test_setsid_reparented_self_approval_is_refused_and_a_human_still_approves(project, cli):
    gate = _gate(cli)
    out = _agent_host(project, f"( setsid -f env -u CLAUDECODE sh -c '{sys.executable} -m loopx gate approve "
                               f"{gate} --confirm {gate} > approve.out 2>&1; touch done' )")
    assert _status(project, gate) == "pending", out
    text = (project / "approve.out").read_text()
    assert "human_required" in text or "humans only" in text, text
    # the agent session has ended: the human's own terminal command (this process) approves
    assert cli("gate", "approve", gate, "--confirm", gate).code == 0
    assert _status(project, gate) == "approved"


@pytest.mark.parametrize("how", ["awk", "a renamed program", "an exited leader"])
def test_any_program_leading_a_detached_session_is_refused(project, cli, how, tmp_path):
    """Whatever program leads the detached session: a list of launchers (shells, env, interpreters)
    let ``setsid -f awk 'BEGIN{system(...)}'`` approve (a reviewer's finding), and a program copied
    under another name, or a leader that exits and leaves its child to pid 1, walk past any list."""
    import shutil

    gate = _gate(cli)
    approve = f"{sys.executable} -m loopx gate approve {gate} --confirm {gate} > approve.out 2>&1; touch done"
    if how == "awk":
        awk = shutil.which("awk")
        assert awk, "awk (Debian: mawk, always installed)"
        program = approve.replace('"', '\\"')
        launch = f"setsid -f env -u CLAUDECODE {awk} 'BEGIN{{system(\"{program}\")}}'"
    elif how == "a renamed program":
        leader = tmp_path / "gnome-session"
        shutil.copy(shutil.which("sh"), leader)
        launch = f"setsid -f env -u CLAUDECODE {leader} -c '{approve}'"
    else:
        # the subshell waits until its leader (the sh, $$) is gone, so pid 1 has adopted it
        launch = (f"setsid -f env -u CLAUDECODE sh -c '( while kill -0 $$ 2>/dev/null; do sleep 0.05; done; "
                  f"{approve} ) & exit 0'")
    out = _agent_host(project, launch)
    assert (project / "approve.out").exists(), out
    text = (project / "approve.out").read_text()
    assert _status(project, gate) == "pending", (out, text)
    assert "human_required" in text or "humans only" in text, text


def test_double_fork_that_keeps_the_session_is_refused(project, cli):
    gate = _gate(cli)
    helper = project / "df.py"
    helper.write_text("import os, sys\nif os.fork(): sys.exit(0)\nif os.fork(): sys.exit(0)\n"
                      "os.execvp(sys.argv[1], sys.argv[1:])\n")
    out = _agent_host(project, f"env -u CLAUDECODE {sys.executable} df.py sh -c '{sys.executable} -m loopx gate "
                               f"approve {gate} --confirm {gate} > approve.out 2>&1; touch done'")
    assert _status(project, gate) == "pending", out
    assert "human" in (project / "approve.out").read_text()


def test_a_process_with_a_loopx_broker_variable_is_an_agent(project, cli):
    gate = _gate(cli)
    for var in ("LOOPX_BROKER", "LOOPX_SANDBOXED"):  # in the process, or only in a parent that started it
        r = run_loopx(["gate", "approve", gate, "--confirm", gate], cwd=project, env={var: "/tmp/x.sock"})
        assert r.code in (3, 4) and ("human" in r.err or "broker" in r.err), r.err
        p = subprocess.run(["bash", "-c", f"env -u {var} {sys.executable} -m loopx gate approve {gate} --confirm {gate}; exit $?"],
                           cwd=project, env=subprocess_env({var: "/tmp/x.sock"}), capture_output=True, text=True)
        assert p.returncode == 4 and "human" in p.stderr, p.stderr
    assert _status(project, gate) == "pending"
    # a cron-like script (no terminal, no marker, no agent session running) still acts as a human
    r = run_loopx(["gate", "approve", gate, "--confirm", gate], cwd=project)
    assert r.code == 0, r.err


@pytest.mark.parametrize("args", [
    ["start-goal", "--goal-text", "x", "--done-when", "x", "--scope", "**"],
    ["goal", "update", "g1", "--verify", "true"],
    ["doctor", "--fix"],
])
def test_governance_commands_need_the_human_check(project, cli, args):
    _gate(cli)
    r = run_loopx(args, cwd=project, env={"CLAUDECODE": "1"})
    assert r.code == 4 and "human" in r.err, (args, r.out, r.err)
    assert run_loopx(args, cwd=project).code in (0, 1), args  # a human may


def test_resuming_a_stopped_goal_is_a_humans_call_pausing_is_not(project, cli):
    _gate(cli)
    assert cli("goal", "stop", "g1", "--note", "enough").code == 0
    r = run_loopx(["goal", "resume", "g1"], cwd=project, env={"CLAUDECODE": "1"})
    assert r.code == 4 and "human" in r.err, r.err
    assert Store.open(str(project)).load()["goals"]["g1"]["status"] == "stopped"
    assert cli("goal", "resume", "g1").code == 0
    assert cli("--agent", "bot", "goal", "pause", "g1").code == 0
    assert cli("--agent", "bot", "goal", "resume", "g1").code == 0


def test_a_dashboard_spawned_from_an_agent_session_gets_no_decision_rights(project, monkeypatch):
    from loopx.errors import HumanRequired
    from loopx.kernel import humans

    monkeypatch.setenv("LOOPX_DASHBOARD_STARTED_BY", "an agent session (CLAUDECODE set)")
    with pytest.raises(HumanRequired):
        humans.dashboard_channel("test")
    monkeypatch.delenv("LOOPX_DASHBOARD_STARTED_BY")
    assert humans.dashboard_channel("test").via == "dashboard"
    # the spawner judges before it detaches: its parents are still visible then
    from loopx.dashboard import service

    seen = {}

    class P:
        pid, returncode = -1, 0

        def poll(self):
            return 0

        def kill(self):
            pass

    def popen(args, **kw):
        seen["env"] = kw["env"]
        raise OSError("stop here")

    monkeypatch.setattr(service.subprocess, "Popen", popen)
    monkeypatch.setenv("CLAUDECODE", "1")
    with pytest.raises(OSError):
        service.spawn(0, fallback=True)
    assert "CLAUDECODE" in seen["env"]["LOOPX_DASHBOARD_STARTED_BY"]


def git(cwd, *args) -> str:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def test_one_approval_authorises_one_action_in_a_compound_command(project, cli, tmp_path):
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(project, "init", "-q", "-b", "main")
    (project / "a.txt").write_text("a\n")
    git(project, "add", "a.txt")
    git(project, "commit", "-q", "-m", "a")
    git(project, "remote", "add", "origin", str(origin))
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g1", "--done-when", "x", "--protect", "merge").code == 0
    twice = "git push origin main; git push origin main"

    def verdict():
        return verdicts.evaluate(Store.open(str(project)).load(), commands=[twice], project_dir=str(project))

    g1 = cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "Push?", json=True).data["gate_id"]
    assert cli("gate", "approve", g1, "--confirm", g1).code == 0
    v = verdict()
    assert not v["allow"] and "more than once" in v["reason"], v
    g2 = cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "Push again?", json=True).data["gate_id"]
    assert cli("gate", "approve", g2, "--confirm", g2).code == 0
    v = verdict()
    assert v["allow"] and sorted(u["gate_id"] for u in v["uses"]) == sorted([g1, g2]), v
    # through the real hook: both approvals are used, a third push then needs a third
    payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": twice},
                          "cwd": str(project), "session_id": "s"})
    h = run_loopx(["hook", "pre-tool", "--host", "claude-code"], cwd=project, env={"CLAUDECODE": "1"}, input=payload)
    assert "deny" not in h.out, h.out
    state = Store.open(str(project)).load()
    assert state["gates"][g1].get("used") and state["gates"][g2].get("used")
    assert not verdicts.evaluate(state, commands=["git push origin main"], project_dir=str(project))["allow"]
