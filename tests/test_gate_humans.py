"""Only humans decide gates (issue 2, acceptance 11), with real processes and a real pseudo-terminal.

An agent environment (``--agent``, ``LOOPX_AGENT`` or the markers agent hosts set) is refused even
with ``--confirm`` and even on a terminal; a human on a terminal approves by typing the gate's code;
a human in a non-agent shell can pass ``--confirm ID``. The event records the human and the channel.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import pytest

from conftest import HUMAN, run_loopx, subprocess_env
from test_store_concurrency import check_file

AGENT_ENVS = [{"LOOPX_AGENT": "bot"}, {"CLAUDECODE": "1"}, {"CLAUDE_CODE_ENTRYPOINT": "cli"},
              {"CODEX_SANDBOX": "seatbelt"}, {"CODEX_SANDBOX_NETWORK_DISABLED": "1"}, {"CODEX_THREAD_ID": "abc"},
              {"CURSOR_AGENT": "1"}, {"CURSOR_TRACE_ID": "abc"}, {"GEMINI_CLI": "1"}, {"OPENCODE": "1"}]


@pytest.fixture
def gate(goal, project):
    r = run_loopx(["--agent", "bot", "gate", "open", "--kind", "merge", "--question", "Merge PR #12 into main?",
                   "--format", "json"], project)
    assert r.code == 0, r.err
    return r.data["gate_id"]


def events(project):
    return check_file(project / ".loopx" / "events.jsonl")


def decisions(project):
    return [e for e in events(project) if e["type"] in ("gate.approved", "gate.rejected")]


def run_detached(args, cwd, env=None, input_text=""):
    """A real process with no controlling terminal (as under cron or an agent's tool call)."""
    proc = subprocess.run([sys.executable, "-m", "loopx", *args], cwd=cwd, env=subprocess_env(env),
                          input=input_text, capture_output=True, text=True, timeout=60, start_new_session=True)
    return proc.returncode, proc.stdout, proc.stderr


def run_on_pty(args, cwd, env=None, answer: str | None = None, timeout: float = 30) -> tuple[int, str]:
    """Run loopx on a fresh pseudo-terminal that is its controlling terminal; when the prompt shows,
    type ``answer``. Returns (exit code, everything the terminal showed)."""
    import pty

    full_env = subprocess_env(env)
    pid, fd = pty.fork()
    if pid == 0:  # child: the pty is now stdin/stdout/stderr and the controlling terminal
        try:
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "loopx", *args], full_env)
        finally:
            os._exit(127)
    seen = b""
    answered = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            if answer is not None and not answered and (b"to APPROVE" in seen or b"to REJECT" in seen):
                os.write(fd, answer.encode() + b"\n")
                answered = True
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode("utf-8", "replace")


@pytest.mark.parametrize("agent_env", AGENT_ENVS, ids=lambda e: next(iter(e)))
@pytest.mark.parametrize("action", ["approve", "reject"])
def test_agent_environments_cannot_decide(project, gate, agent_env, action):
    args = ["gate", action, gate, "--confirm", gate, "--note", "looks fine"]
    r = run_loopx(args, project, env=agent_env)
    assert r.code == 4, (r.code, r.err)
    assert r.err.startswith("loopx: error: ") and "human" in r.err and "hint:" in r.err
    j = run_loopx([*args, "--format", "json"], project, env=agent_env)
    assert j.code == 4 and j.json["error"]["code"] == "human_required"
    assert decisions(project) == []


def test_agent_flag_cannot_decide(project, gate):
    r = run_loopx(["--agent", "claude", "gate", "approve", gate, "--confirm", gate], project)
    assert r.code == 4 and "human" in r.err
    assert decisions(project) == []


@pytest.mark.skipif(os.name == "nt", reason="pty is POSIX")
def test_agent_on_a_terminal_is_still_refused(project, gate):
    code = gate.split("-", 1)[1]
    rc, shown = run_on_pty(["gate", "approve", gate], project, env={"CLAUDECODE": "1"}, answer=code)
    assert rc == 4, shown
    assert "to APPROVE" not in shown, "an agent must not even be offered the prompt"
    assert decisions(project) == []


@pytest.mark.skipif(os.name == "nt", reason="pty is POSIX")
def test_human_terminal_approves_by_typing_the_code(project, gate):
    code = gate.split("-", 1)[1]
    rc, shown = run_on_pty(["gate", "approve", gate, "--note", "ship it"], project, answer=code)
    assert rc == 0, shown
    assert "Merge PR #12 into main?" in shown and f"type {code} (or the full id) to APPROVE" in shown
    (ev,) = decisions(project)
    assert ev["type"] == "gate.approved" and ev["actor"] == HUMAN
    assert ev["data"]["channel"] == "terminal" and ev["data"]["note"] == "ship it"
    show = run_loopx(["gate", "show", gate, "--format", "json"], project).data["gate"]
    assert (show["status"], show["decided_by"], show["channel"]) == ("approved", HUMAN, "terminal")
    assert run_loopx(["gate", "check", "--action", "merge"], project).code == 0


@pytest.mark.skipif(os.name == "nt", reason="pty is POSIX")
def test_human_terminal_rejects_with_a_note(project, gate):
    code = gate.split("-", 1)[1]
    rc, shown = run_on_pty(["gate", "reject", gate, "--note", "not before the release"], project, answer=code)
    assert rc == 0, shown
    (ev,) = decisions(project)
    assert ev["type"] == "gate.rejected" and ev["data"]["channel"] == "terminal"
    assert run_loopx(["gate", "check", "--action", "merge"], project).code == 1


@pytest.mark.skipif(os.name == "nt", reason="pty is POSIX")
def test_wrong_code_on_the_terminal_writes_nothing(project, gate):
    rc, shown = run_on_pty(["gate", "approve", gate], project, answer="nope")
    assert rc == 2, shown
    assert "not confirmed" in shown
    assert decisions(project) == []


def test_confirm_flag_from_a_human_shell(project, gate):
    assert run_loopx(["gate", "check", "--action", "merge"], project).code == 1
    rc, out, err = run_detached(["gate", "approve", gate, "--confirm", gate, "--format", "json"], project)
    assert rc == 0, err
    (ev,) = decisions(project)
    assert ev["actor"] == HUMAN and ev["data"]["channel"] == "confirm-flag"
    assert run_loopx(["gate", "check", "--action", "merge"], project).code == 0
    # the short code works too, for a second gate; the name is the OS account's, whatever USER says
    g2 = run_loopx(["gate", "open", "--kind", "release", "--question", "Release 1.0?", "--format", "json"],
                   project).data["gate_id"]
    rc, _, err = run_detached(["gate", "reject", g2, "--confirm", g2.split("-", 1)[1], "--note", "not yet"],
                              project, env={"USER": "alice", "LOGNAME": "alice", "LOOPX_HUMAN": "alice"})
    assert rc == 0, err
    assert decisions(project)[-1]["actor"] == HUMAN != "human:alice"


def test_human_name_comes_from_the_os_account_not_the_environment(project, gate):
    """`env -i` (no USER at all) and a forged USER both record the account's real name."""
    import pwd

    account = pwd.getpwuid(os.getuid()).pw_name
    assert f"human:{account}" == HUMAN and account not in ("", "human")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": subprocess_env()["PYTHONPATH"],
           "LOOPX_HOME": os.environ["LOOPX_HOME"]}
    proc = subprocess.run([sys.executable, "-m", "loopx", "gate", "approve", gate, "--confirm", gate],
                          cwd=project, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    assert decisions(project)[-1]["actor"] == f"human:{account}"


def test_no_terminal_and_no_confirm_is_refused(project, gate):
    rc, _, err = run_detached(["gate", "approve", gate], project, input_text=gate.split("-", 1)[1] + "\n")
    assert rc == 4 and "terminal" in err and "--confirm" in err, err
    rc, out, _ = run_detached(["gate", "approve", gate, "--format", "json"], project)
    assert rc == 4
    assert decisions(project) == []


def test_wrong_confirm_and_double_decisions(project, gate):
    rc, _, err = run_detached(["gate", "approve", gate, "--confirm", "gate-000000"], project)
    assert rc == 2 and "hint:" in err
    assert decisions(project) == []
    rc, _, err = run_detached(["gate", "reject", gate, "--confirm", gate], project)
    assert rc == 2, err      # a rejection needs a note
    assert run_detached(["gate", "approve", gate, "--confirm", gate], project)[0] == 0
    rc, _, err = run_detached(["gate", "reject", gate, "--confirm", gate, "--note", "changed my mind"], project)
    assert rc == 4 and "already approved" in err and HUMAN in err
    assert len(decisions(project)) == 1


def test_human_terminal_accepts_the_full_gate_id_too(project, gate):
    rc, shown = run_on_pty(["gate", "approve", gate], project, answer=gate)
    assert rc == 0, shown
    assert "approved gate" in shown
