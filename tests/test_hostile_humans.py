"""Human-only changes of governance against a hostile agent (issue 12, item 1 and acceptance 1).

Each bypass from the issue is run as the agent would run it: a shell started with the agent
host's markers, then the disguised loopx command. Every one is refused by the CLI (exit 4,
``human_required``) and denied by the pre-tool guard; the kernel refuses a ``human:`` actor
without a human channel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, human_channel, run_loopx, subprocess_env
from loopx.errors import HumanRequired
from loopx.guard import verdicts
from loopx.kernel import humans
from loopx.kernel.storage.store import Store
from loopx.kernel.write import gates, goals, todos


@pytest.fixture
def shim(tmp_path) -> Path:
    """A directory with a ``loopx`` executable that runs this checkout."""
    d = tmp_path / "bin"
    d.mkdir()
    exe = d / "loopx"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={REPO / 'src'} exec {sys.executable} -m loopx \"$@\"\n")
    exe.chmod(0o755)
    return d


@pytest.fixture
def gate_id(goal, project, cli) -> str:
    r = cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "Merge it?", json=True)
    assert r.code == 0, r.err
    return r.data["gate_id"]


def agent_shell(command: str, project: Path, shim: Path, marker=("CLAUDECODE", "1")) -> subprocess.CompletedProcess:
    """``sh -c COMMAND`` as an agent host runs it: its environment carries the host's marker."""
    env = subprocess_env({marker[0]: marker[1], "CLAUDE_CODE_ENTRYPOINT": "cli",
                          "PATH": f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"})
    return subprocess.run(["sh", "-c", command], cwd=project, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def gate_status(project: Path, gid: str) -> str:
    return Store(str(project / ".loopx")).load()["gates"][gid]["status"]


def guard_denies(project: Path, command: str) -> str:
    state = Store(str(project / ".loopx")).load()
    v = verdicts.evaluate(state, commands=[command], project_dir=str(project), cwd=str(project))
    assert not v["allow"], f"the guard allowed {command!r}"
    return v["reason"]


APPROVALS = [
    "env -u CLAUDECODE -u CLAUDE_CODE_ENTRYPOINT loopx gate approve {g} --confirm {g}",
    "env -i PATH=\"$PATH\" USER=alice HOME=/tmp loopx gate approve {g} --confirm {g}",
    "unset CLAUDECODE CLAUDE_CODE_ENTRYPOINT; loopx gate approve {g} --confirm {g}",
    "script -qc 'env -u CLAUDECODE -u CLAUDE_CODE_ENTRYPOINT loopx gate approve {g}' /dev/null",
    "setsid env -u CLAUDECODE -u CLAUDE_CODE_ENTRYPOINT loopx gate approve {g} --confirm {g}",
    "L=loopx; env -u CLAUDECODE -u CLAUDE_CODE_ENTRYPOINT $L gate reject {g} --note no --confirm {g}",
    "sh -c 'env -u CLAUDECODE -u CLAUDE_CODE_ENTRYPOINT loopx --format json gate approve {g} --confirm {g}'",
    "env -u CLAUDECODE -u CLAUDE_CODE_ENTRYPOINT " + sys.executable +
    " -c \"from loopx.cli import main; raise SystemExit(main(['gate', 'approve', '{g}', '--confirm', '{g}']))\"",
]


@pytest.mark.parametrize("template", APPROVALS)
def test_an_agent_cannot_decide_a_gate_however_it_hides(template, gate_id, project, shim):
    command = template.format(g=gate_id)
    proc = agent_shell(command, project, shim)
    assert proc.returncode != 0 or command.startswith("script")  # script(1) exits 0 whatever its child did
    assert "human" in (proc.stdout + proc.stderr).lower()
    assert gate_status(project, gate_id) == "pending"
    assert "loopx" in guard_denies(project, command)


def test_importing_the_kernel_cannot_record_a_human_decision(gate_id, project):
    store = Store(str(project / ".loopx"))
    with pytest.raises(HumanRequired):
        gates.decide(store, "human:alice", gate_id, approve=True, channel="terminal")
    with pytest.raises(HumanRequired):
        gates.decide(store, "human:alice", gate_id, approve=True, channel="terminal", human=object())
    with pytest.raises(HumanRequired):
        humans.HumanChannel("human:alice", "terminal")  # only the CLI's terminal path and the dashboard mint one
    assert gate_status(project, gate_id) == "pending"


def test_the_kernel_refuses_an_agent_actor_even_with_a_human_channel(gate_id, project):
    """Defence in depth: were a client fooled into minting a channel for an agent's call, the
    kernel's own check of the actor still refuses (kernel/write/gates.py), before anything is read
    or written."""
    store = Store(str(project / ".loopx"))
    log = project / ".loopx" / "events.jsonl"
    before = log.read_bytes()
    for actor in ("agent:bot", "agent:codex", "codex", "system:runner"):
        with pytest.raises(HumanRequired, match="only a human"):
            gates.decide(store, actor, gate_id, approve=True, channel="terminal", human=human_channel("terminal"))
        with pytest.raises(HumanRequired, match="only a human"):
            gates.decide(store, actor, gate_id, approve=False, note="no", channel="terminal",
                         human=human_channel("terminal"))
        with pytest.raises(HumanRequired, match="only a human"):
            gates.precheck(store.load(), actor, gate_id, approve=True, human=human_channel("terminal"))
    assert log.read_bytes() == before
    assert gate_status(project, gate_id) == "pending"


def test_the_python_api_cannot_approve_either(gate_id, project):
    code = ("from loopx import api; from loopx.kernel.write import gates; c = api.connect('.', create=False); "
            f"gates.decide(c.store, c.actor, {gate_id!r}, approve=True, channel='dashboard')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, env=subprocess_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "HumanRequired" in proc.stderr
    assert gate_status(project, gate_id) == "pending"


GOVERNANCE_OFF = [
    ("loopx hooks --rules --add-rule 'none=git push*'", "pre-tool guard"),
    ("loopx scope set --allow '**'", "widening"),
    ("loopx scope set --protect release", "widening"),  # drops merge
    ("loopx scope set --clear-protect", "widening"),
    ("loopx goal stop g1", "stopping or finishing"),
    ("loopx goal done g1", "stopping or finishing"),
    ("loopx quota set --slots 1000", "budget"),
    ("loopx hooks --remove --host claude-code", "removing loopx's hooks"),
]


@pytest.mark.parametrize("command,words", GOVERNANCE_OFF)
def test_an_agent_cannot_switch_governance_off_with_loopx_itself(command, words, goal, project, shim, cli):
    assert cli("scope", "set", "--allow", "src/**").code == 0  # a human narrowed it first
    before = Store(str(project / ".loopx")).load()["goals"]["g1"]
    proc = agent_shell(command + " --format json", project, shim)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["error"]["code"] == "human_required" and words in doc["error"]["message"]
    after = Store(str(project / ".loopx")).load()["goals"]["g1"]
    assert (after["scope"], after["status"], after["quota"], after.get("guard")) == \
        (before["scope"], before["status"], before["quota"], before.get("guard"))
    assert "only a human may do" in guard_denies(project, command)


def test_narrowing_is_still_open_to_agents(goal, project, shim, cli):
    proc = agent_shell("loopx scope set --deny 'secrets/**' --format json", project, shim)
    assert proc.returncode == 0, proc.stdout  # narrowing needs no human (the guard still keeps agents off `scope set`)
    store = Store(str(project / ".loopx"))
    assert store.load()["goals"]["g1"]["scope"]["deny"] == ["secrets/**"]
    goals.set_scope(store, "agent:bot", "g1", deny=["secrets/**", "keys/**"])
    with pytest.raises(HumanRequired):
        goals.set_scope(store, "agent:bot", "g1", deny=[])
    goals.set_scope(store, "human:tester", "g1", deny=[], human=human_channel())


def test_reopening_a_todo_is_human_only(goal, project, cli):
    store = Store(str(project / ".loopx"))
    tid = cli("todo", "list", json=True).data["todos"][0]["id"]
    assert cli("todo", "block", tid, "--reason", "flaky").code == 0
    with pytest.raises(HumanRequired):
        todos.update(store, "agent:bot", tid, reopen=True)
    r = run_loopx(["todo", "update", tid, "--reopen", "--format", "json"], project, env={"CODEX_THREAD_ID": "t"})
    assert r.code == 4 and r.json["error"]["code"] == "human_required"
    assert cli("todo", "update", tid, "--reopen").code == 0  # a human


@pytest.mark.parametrize("command", [
    "loopx gate approve gate-1234 --confirm gate-1234", "python -m loopx gate approve gate-1234",
    "uvx loopx gate reject gate-1234 --note x", "/opt/venv/bin/loopx --project . gate approve gate-1234",
    "bash -c 'loopx --format=json scope set --allow \"**\"'", "loopx todo update t-1 --reopen",
    "loopx watch add --every 5m -- make deploy", "loopx watch remove w-1", "loopx notify set --webhook x",
    "loopx disconnect", "loopx forget .", "loopx goal share g1",
    "loopx turn finish --run r-1 --force-unverified", "echo ok && $(echo loopx) gate approve gate-1",
    "loopx connect", "loopx hooks --rules --protect-branch nothing",
])
def test_the_guard_denies_human_only_loopx_commands_however_wrapped(goal, project, command):
    guard_denies(project, command)


@pytest.mark.parametrize("command", ["loopx status", "loopx gate open --kind merge --question 'ok?'",
                                     "loopx notify list", "loopx watch list", "loopx inbox",
                                     "loopx hooks --rules --try 'git push origin main'", "loopx todo done t-1",
                                     "loopx evidence add --kind test --summary ok", "loopx scope show"])
def test_ordinary_loopx_commands_pass_the_guard(goal, project, command):
    state = Store(str(project / ".loopx")).load()
    assert verdicts.evaluate(state, commands=[command], project_dir=str(project), cwd=str(project))["allow"]


def test_a_human_in_a_plain_shell_still_approves_with_confirm(gate_id, project, shim):
    env = subprocess_env({"PATH": f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"})
    proc = subprocess.run(["sh", "-c", f"loopx gate approve {gate_id} --confirm {gate_id}"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert gate_status(project, gate_id) == "approved"


def test_the_packet_and_dashboard_show_which_approval_a_turn_may_use(gate_id, project, cli):
    from loopx.dashboard.api import _gate
    from loopx.kernel.write import gates as kgates

    assert cli("gate", "approve", gate_id, "--confirm", gate_id).code == 0
    store = Store(str(project / ".loopx"))
    assert _gate(store.load()["gates"][gate_id])["approval"] == "once"
    nxt = cli("--agent", "bot", "next", json=True).data
    assert {"action": "merge", "gate": "approved", "gate_id": gate_id, "standing": False} in nxt["packet"]["protected"]
    assert "approved once (this turn may use it)" in nxt["packet_text"]
    assert kgates.use(store, "guard:test", gate_id, "git push origin main")
    assert not kgates.use(store, "guard:test", gate_id, "git push origin main")  # once
    assert _gate(store.load()["gates"][gate_id])["approval"] == "used"
    assert cli("gate", "list", "--status", "approved").out.count("approved (used)") == 1


# ------------------------------------------------------------------ the store vanishes (item 5)
def push_hook(project: Path, env=None):
    body = json.dumps({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash", "cwd": str(project),
                       "tool_input": {"command": "git push origin main"}})
    return run_loopx(["hook", "pre-tool", "--host", "claude-code"], cwd=project, input=body, env=env)


def hook_denies(r) -> str:
    assert r.code == 0, r.err
    out = json.loads(r.out)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    return out["permissionDecisionReason"]


@pytest.mark.parametrize("how", ["moved", "removed", "replaced"])
def test_protected_actions_stay_denied_when_the_store_vanishes(how, goal, project, shim, cli):
    import shutil

    assert "protected action" in hook_denies(push_hook(project))
    if how == "moved":
        (project / ".loopx").rename(project.parent / "stash")
    elif how == "removed":
        shutil.rmtree(project / ".loopx")
    else:
        shutil.rmtree(project / ".loopx")
        Store.create(str(project))  # a fresh, empty store: no goals, nothing protected
    reason = hook_denies(push_hook(project))
    assert ("gone" in reason or "replaced" in reason) and "loopx connect" in reason
    # an agent cannot reconnect it; the guard would not let it try, and the CLI refuses too
    proc = agent_shell("loopx connect --format json", project, shim)
    assert proc.returncode == 4 and json.loads(proc.stdout)["error"]["code"] == "human_required"
    hook_denies(push_hook(project))
    # a human reconnects: the project is governed by the new store from now on
    assert cli("connect").code == 0
    r = push_hook(project)
    assert r.code == 0 and r.out == ""  # the new store has no goal protecting merge


def test_an_unregistered_project_without_a_store_is_not_governed(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    r = push_hook(d)
    assert r.code == 0 and r.out == ""


def test_a_dashboard_started_from_an_agent_session_cannot_decide(monkeypatch):
    assert humans.dashboard_channel("test").via == "dashboard"
    monkeypatch.setenv("CURSOR_AGENT", "1")
    with pytest.raises(HumanRequired):
        humans.dashboard_channel("test")


@pytest.mark.parametrize("args", [["watch", "add", "--every", "5m", "--check", "true"], ["notify", "set", "--desktop", "on"],
                                  ["disconnect"]])
def test_other_issues_human_only_commands_see_through_env_u(args, goal, project, shim):
    """watch add, notify set and disconnect use the same check: markers in a parent count."""
    import shlex

    proc = agent_shell("env -u CLAUDECODE -u CLAUDE_CODE_ENTRYPOINT loopx --format json " + shlex.join(args), project, shim)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["error"]["code"] == "human_required"


def test_an_older_standing_approval_still_covers_when_a_newer_one_was_used(goal, project, cli):
    """The hook reads the live view, which keeps only each goal's newest approval per kind; before it
    denies, it asks the full state, so a standing approval behind a used one still counts."""
    from loopx.hosts import entry

    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=project, check=True)
    opened = [cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", q, json=True).data["gate_id"]
              for q in ("standing merges?", "this one merge?")]
    assert cli("gate", "approve", opened[0], "--confirm", opened[0], "--standing").code == 0
    assert cli("gate", "approve", opened[1], "--confirm", opened[1]).code == 0
    store = Store(str(project / ".loopx"))
    assert gates.use(store, "guard:test", opened[1], "git push origin main")  # the newest is used up
    store.load()  # refresh the snapshots so the hook reads a live view
    payload = {"tool_name": "Bash", "tool_input": {"command": "git push origin main"}, "cwd": str(project)}
    response, info = entry.pre_tool(payload, "claude-code", project=str(project))
    assert info.get("allow"), info
