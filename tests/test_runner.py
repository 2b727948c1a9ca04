"""loopx run with shell agents (--agent-cmd), as real processes: timeouts, failures, progress,
the packet on stdin and in {prompt_file}, the runner lease, Ctrl-C, dry runs and bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_loopx, subprocess_env
from loopx.errors import UsageError
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="shell agents and signals are POSIX here")


def _goal(cli, verify="test -f done.txt", todos=("first", "second")):
    args = ["start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--verify", verify]
    for t in todos:
        args += ["--todo", t]
    assert cli(*args).code == 0


def _state(project: Path) -> dict:
    return Store.open(str(project)).load()


def test_hanging_agent_is_stopped_at_the_timeout(project, cli):
    _goal(cli)
    r = run_loopx(["run", "--agent-cmd", "sleep 120 & wait", "--timeout", "1s", "--json"], cwd=project, timeout=60)
    assert r.code == 1, r.err
    d = json.loads(r.out)["data"]
    assert d["stopped_because"] == "agent_failed"
    t = d["turns"][0]
    assert t["timed_out"] and t["result"] == "failed" and t["slots"] == 0
    state = _state(project)
    run = state["runs"][t["run_id"]]
    assert run["result"] == "failed" and "timed out" in run["note"]
    assert state["spends"] == {}
    assert state["todos"][t["todo_id"]]["claim"] is None


def test_failing_agent_is_recorded_and_spends_nothing(project, cli):
    _goal(cli)
    r = run_loopx(["run", "--agent-cmd", "echo oops >&2; exit 3", "--json"], cwd=project)
    assert r.code == 1
    t = json.loads(r.out)["data"]["turns"][0]
    assert (t["agent_exit"], t["result"], t["slots"]) == (3, "failed", 0)
    assert _state(project)["spends"] == {}


def test_verified_progress_spends_one_slot_and_gets_the_packet(project, cli):
    _goal(cli)
    agent = "cat > stdin.txt; cp {prompt_file} prompt.txt; echo $LOOPX_RUN_ID > run.txt; touch done.txt"
    r = run_loopx(["run", "--agent-cmd", agent, "--once", "--json"], cwd=project)
    assert r.code == 0, r.err
    d = json.loads(r.out)["data"]
    t = d["turns"][0]
    assert (t["result"], t["verified"], t["slots"]) == ("completion", True, 1)
    assert d["stopped_because"] == "once"
    run_id = (project / "run.txt").read_text().strip()
    assert run_id == t["run_id"]
    assert (project / "stdin.txt").read_text() == (project / "prompt.txt").read_text()
    packet = (project / "stdin.txt").read_text()
    assert run_id in packet
    assert "just exit" in packet and "spend-slot" not in packet  # the runner verifies, finishes and spends
    state = _state(project)
    assert state["todos"][t["todo_id"]]["status"] == "done"
    assert [e[2] for e in state["spends"]["g1"]] == [run_id]


def test_loop_runs_until_should_run_says_no(project, cli):
    _goal(cli, verify="true")
    r = run_loopx(["run", "--agent-cmd", "echo nothing to do", "--json"], cwd=project)
    assert r.code == 0
    d = json.loads(r.out)["data"]
    assert [t["result"] for t in d["turns"]] == ["completion", "completion"]  # not a git repo: verify decides
    assert d["goal_verify"]["completed"] is True  # the goal's verify passed: done, and the loop stops
    assert d["stop"]["decision"] == "stop" and _state(project)["goals"]["g1"]["status"] == "done"


def test_no_change_stops_with_skip_and_exit_0(project, cli):
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    _goal(cli, verify="true")
    r = run_loopx(["run", "--agent-cmd", "true", "--json"], cwd=project)
    assert r.code == 0
    d = json.loads(r.out)["data"]
    # one try per todo (an unchanged no-progress todo does not hold back the other one), then skip
    assert [t["result"] for t in d["turns"]] == ["no_progress", "no_progress"]
    assert len({t["todo_id"] for t in d["turns"]}) == 2
    assert d["stop"]["decision"] == "skip"
    assert _state(project)["spends"] == {}


def test_agent_that_finishes_its_own_run(project, cli):
    _goal(cli)
    cmd = f"{sys.executable} -m loopx turn finish --run $LOOPX_RUN_ID --result no_progress --note tried"
    r = run_loopx(["run", "--agent-cmd", cmd, "--once", "--json"], cwd=project)
    assert r.code == 0, r.err
    t = json.loads(r.out)["data"]["turns"][0]
    assert t["result"] == "no_progress" and t["note"] == "finished by the agent"
    run = _state(project)["runs"][t["run_id"]]
    assert run["agent"] == "agent:shell" and run["note"] == "tried"


def _wait_for_open_run(project: Path, deadline: float = 30.0) -> str:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        runs = [r for r in _state(project)["runs"].values() if r["finished"] is None]
        if runs:
            return runs[0]["id"]
        time.sleep(0.05)
    raise AssertionError("the runner never opened a run")


def test_second_runner_exits_at_once_and_ctrl_c_closes_the_run(project, cli):
    _goal(cli)
    first = subprocess.Popen([sys.executable, "-m", "loopx", "run", "--agent-cmd", "sleep 120 & wait", "--goal-id", "g1"],
                             cwd=project, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = _wait_for_open_run(project)
        second = run_loopx(["run", "--agent-cmd", "true", "--goal-id", "g1", "--once"], cwd=project, timeout=30)
        assert second.code == 4 and "another runner" in second.err
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, err
    run = _state(project)["runs"][run_id]
    assert run["result"] == "failed" and "interrupted" in run["note"]
    assert _state(project)["spends"] == {}


def test_dry_run_prints_the_packet_and_writes_nothing(project, cli):
    _goal(cli)
    events = project / ".loopx" / "events.jsonl"
    cli("quota", "should-run")
    before = events.read_bytes()
    r = run_loopx(["run", "--agent-cmd", "touch done.txt", "--dry-run"], cwd=project)
    assert r.code == 0 and "YOUR TODO:" in r.out and "dry run" in r.out
    assert events.read_bytes() == before
    assert not (project / "done.txt").exists()


@pytest.mark.parametrize("args,code,text", [
    (["run"], 2, "no agent"),
    (["--agent", "mybot", "run"], 2, "not a preset"),
    (["run", "--agent-cmd", "true", "--timeout", "soon"], 2, "duration"),
    (["run", "--agent-cmd", "true", "--max-turns", "0"], 2, "--max-turns"),
])
def test_bad_input(project, cli, args, code, text):
    _goal(cli)
    r = cli(*args)
    assert r.code == code and text in r.err


def test_preset_binary_missing(project, cli, monkeypatch):
    _goal(cli)
    monkeypatch.setenv("PATH", str(project))
    r = cli("--agent", "gemini", "run", "--once")
    assert r.code == 2 and "gemini" in r.err and "--agent-cmd" in r.err
    assert not _state(project)["runs"]


def test_presets_build_documented_command_lines(tmp_path, monkeypatch):
    from loopx.runner import presets

    for name in presets.names():
        exe = tmp_path / presets.spec(name)["argv"][0]
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    from loopx.exe import loopx_command

    # edit: acceptEdits refuses shell commands headless, so loopx's write-back and the verify command are allowed
    assert presets.argv_for("claude-code", "PKT", "/f", "edit", verify="pytest -q") == \
        ["claude", "-p", "PKT", "--output-format", "json", "--permission-mode", "acceptEdits",
         "--allowedTools", f"Bash({loopx_command()}:*)", "--allowedTools", "Bash(pytest -q)"]
    assert presets.argv_for("claude-code", "PKT", "/f", "edit")[-2:] == ["--allowedTools", f"Bash({loopx_command()}:*)"]
    assert presets.argv_for("claude-code", "PKT", "/f", "read-only")[-1] == "plan"
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # Claude Code exits at once in bypassPermissions as root
        monkeypatch.delenv("IS_SANDBOX", raising=False)
        with pytest.raises(UsageError, match="as root") as exc:
            presets.argv_for("claude-code", "PKT", "/f", "full")
        assert "IS_SANDBOX=1" in exc.value.hint
        monkeypatch.setenv("IS_SANDBOX", "1")
    assert presets.argv_for("claude-code", "PKT", "/f", "full")[-1] == "bypassPermissions"
    assert presets.argv_for("codex", "PKT", "/f", "edit") == \
        ["codex", "exec", "--json", "-", "--sandbox", "workspace-write"]
    assert presets.argv_for("codex", "PKT", "/f", "read-only")[-1] == "read-only"
    assert presets.argv_for("codex", "PKT", "/f", "full")[-1] == "danger-full-access"
    assert presets.argv_for("cursor", "PKT", "/f", "full") == \
        ["cursor-agent", "-p", "PKT", "--output-format", "json", "--force"]
    # a named session (no uncounted title request), its model errors on stderr (the retry watch)
    assert presets.argv_for("opencode", "PKT", "/f", "edit") == \
        ["opencode", "run", "--format", "json", "--title", "loopx turn", "--print-logs", "--log-level", "WARN", "PKT"]
    # auto_edit has no shell headless: loopx's write-back and the verify command are allowed
    assert presets.argv_for("gemini", "PKT", "/f", "edit", verify="pytest -q") == \
        ["gemini", "-p", "PKT", "--output-format", "json", "--approval-mode", "auto_edit",
         "--allowed-tools", f"run_shell_command({loopx_command()})", "--allowed-tools", "run_shell_command(pytest -q)"]
    assert presets.argv_for("gemini", "PKT", "/f", "edit")[-2:] == \
        ["--allowed-tools", f"run_shell_command({loopx_command()})"]
    assert presets.argv_for("gemini", "PKT", "/f", "read-only")[-1] == "plan"
    assert presets.argv_for("gemini", "PKT", "/f", "full")[-1] == "yolo"
    with pytest.raises(UsageError, match="no read-only setting"):
        presets.argv_for("cursor", "PKT", "/f", "read-only")
    with pytest.raises(UsageError, match="unknown permission mode"):
        presets.argv_for("claude-code", "PKT", "/f", "yolo")
    assert presets.fill("a {prompt_file} {run_id} {other}", {"prompt_file": "/x y", "run_id": "run-1"}) == \
        "a '/x y' run-1 {other}"


@pytest.mark.skipif(not __import__("shutil").which("flock"), reason="needs flock(1)")
def test_cron_recipe_runs_one_turn_then_skips_quietly(project, cli, tmp_path):
    from conftest import REPO

    _goal(cli, todos=("only",))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "loopx").write_text(f"#!/bin/sh\nexec {sys.executable} -m loopx \"$@\"\n")
    cli("goal", "update", "g1", "--permission-mode", "edit")  # a human chooses what the host may do
    (bindir / "claude").write_text(  # a fake headless host that reports its usage like Claude Code
        "#!/bin/sh\ncat >/dev/null\ntouch done.txt\n"
        "echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\",'"
        "'\"total_cost_usd\":0.01,\"usage\":{\"input_tokens\":5,\"output_tokens\":7}}'\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    script = REPO / "examples" / "cron" / "loopx-turn.sh"
    env = subprocess_env({"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    first = subprocess.run(["sh", str(script), str(project)], env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    state = _state(project)
    assert [r["result"] for r in state["runs"].values()] == ["completion"]
    second = subprocess.run(["sh", str(script), str(project)], env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0 and second.stdout == ""  # goal complete: a clean, silent no
    assert len(_state(project)["runs"]) == 1


def test_planning_turn_counts_added_todos_as_progress(project, cli):
    _goal(cli, verify="false", todos=())
    cmd = f"{sys.executable} -m loopx todo add 'first step' --goal-id g1"
    r = run_loopx(["run", "--agent-cmd", cmd, "--once", "--json"], cwd=project)
    assert r.code == 0, r.err
    t = json.loads(r.out)["data"]["turns"][0]
    assert (t["mode"], t["result"], t["verified"], t["slots"]) == ("plan", "progress", False, 0)
    assert t["note"] == "planned 1 todo(s)"
    nxt = cli("quota", "should-run", json=True)
    assert nxt.data["decision"] == "run" and nxt.data["mode"] == "work"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="POSIX signals and /proc")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_close_the_run_and_stop_the_agent(project, cli, signame):
    _goal(cli)
    marker = project / "agent-alive"
    agent = f"sh -c 'echo $$ > {marker}; exec sleep 120'"
    # unsandboxed: inside the sandbox the agent has its own PID namespace, so its $$ is not a pid out here
    first = subprocess.Popen([sys.executable, "-m", "loopx", "run", "--agent-cmd", agent, "--goal-id", "g1", "--once"],
                             cwd=project, env=subprocess_env({"LOOPX_SANDBOX": "off"}), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        run_id = _wait_for_open_run(project)
        end = time.monotonic() + 30
        while not (marker.exists() and marker.read_text().strip()) and time.monotonic() < end:
            time.sleep(0.05)  # the shell creates the file before it writes the pid
        agent_pid = int(marker.read_text().strip())
        started = _start_time(agent_pid)
        first.send_signal(getattr(signal, signame))
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, err
    assert _state(project)["runs"][run_id]["result"] == "failed"
    assert not _alive(agent_pid, started)


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (FileNotFoundError, IndexError):
        return None


def _alive(pid: int, started: str | None, wait: float = 60.0) -> bool:
    """True while the process ``pid`` that started at ``started`` runs (a zombie waiting for a reaper
    counts as dead, and so does another process that got the same pid: pids wrap at 32768 here)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            if fields[0] == "Z" or fields[19] != started:
                return False
        except (FileNotFoundError, IndexError):
            return False
        time.sleep(0.05)
    return True


def test_a_custom_agent_that_ran_out_of_time_does_not_lock_itself_out(project, cli):
    """The turn's time limit is the user's: a custom agent command that exceeds it failed its turn;
    it is no host setup error (those make the agent wait 30 minutes for a human), so the next
    `loopx run` starts a turn."""
    _goal(cli)
    r = run_loopx(["run", "--agent-cmd", "sleep 120 & wait", "--timeout", "1s", "--once", "--json"],
                  cwd=project, timeout=60)
    first = json.loads(r.out)["data"]["turns"][0]
    assert first["timed_out"] and not first.get("setup_error"), first
    r = run_loopx(["run", "--agent-cmd", "touch done.txt", "--once", "--json"], cwd=project, timeout=60)
    d = json.loads(r.out)["data"]
    assert d["turns"], d  # a turn ran: not held back by a host error
    assert "host_timed_out" not in json.dumps(d), d
