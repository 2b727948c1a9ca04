"""Interrupts (Ctrl-C, SIGTERM, SIGINT to a whole process group) never leave a traceback, a
measure or verify command running without its parent, or a turn that blocks the next one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import run_loopx, subprocess_env

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and process groups")


@posix_only
def test_the_sandbox_launchers_signal_forwarding_tolerates_a_child_that_is_gone():
    """``kill -INT -PGID`` reaches the launcher and its child at once: the child can end and be
    reaped before the launcher passes the signal on (it was a ProcessLookupError traceback)."""
    from loopx.sandbox import mounts

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # ended and reaped: its pid names no process now
    handler = mounts.forwarder(child.pid)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler(sig, None)  # no exception


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1"}
# The measure: a plain measurement unless the file `slow` is in its folder; then it says so
# (the test's signal) and blocks until it is killed. Its command line carries the test's token,
# which is how the test finds it in /proc (inside the sandbox it has a pid of its own namespace).
MEASURE = """\
import os, sys, time
if os.path.exists("slow"):
    ready = sys.argv[2]
    open(ready + ".tmp", "w").write(str(os.getpid()))
    os.replace(ready + ".tmp", ready)
    time.sleep(600)
print("val_acc: 0.5")
"""


def _git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=subprocess_env(GIT_ENV)).stdout


def _with_token(token: str) -> list[int]:
    """The pids (as this test sees them) whose command line holds ``token``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if token.encode() in fh.read():
                    with open(f"/proc/{name}/stat", "rb") as st:
                        if st.read().rsplit(b")", 1)[-1].split()[0] != b"Z":
                            found.append(int(name))
        except OSError:
            continue
    return found


def _gone(token: str, bound: float = 120.0) -> list[int]:
    """Wait (at most ``bound`` s, polling) until no process holds ``token``; what is left then."""
    end = time.monotonic() + bound
    while _with_token(token) and time.monotonic() < end:
        time.sleep(0.05)
    return _with_token(token)


def _interrupt_when_ready(argv, cwd, env, ready, sig) -> tuple[int, str]:
    """Start loopx, send ``sig`` once the measure wrote ``ready``; loopx's exit code and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "loopx", *argv], cwd=cwd, env=subprocess_env(env),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 300
        while not ready.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert ready.exists(), (proc.poll(), proc.stderr.read().decode() if proc.poll() is not None else "")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode("utf-8", "replace")


needs_proc_and_git = pytest.mark.skipif(
    not os.path.isdir("/proc/self") or subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="needs Linux /proc and git")


@pytest.fixture
def exp_repo(tmp_path, monkeypatch):
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    proj, mark = tmp_path / "proj", tmp_path / "mark"
    proj.mkdir()
    mark.mkdir()
    (proj / "measure.py").write_text(MEASURE)
    _git(proj, "init", "-q", "-b", "main")
    _git(proj, "add", "-A")
    _git(proj, "commit", "-q", "-m", "init")
    env = {"LOOPX_SANDBOX_WRITE": str(mark)}  # where the sandboxed measure may say it is ready
    assert run_loopx(["connect", "--quiet"], cwd=proj, env=env).code == 0
    return proj, mark, env


def _start_argv(token: str, ready) -> list[str]:
    return ["start-goal", "--goal-text", "slow", "--goal-id", "slow", "--experiment", "--metric", "val_acc",
            "--measure", f"{sys.executable} measure.py {token} {ready}", "--trial-timeout", "10m"]


@posix_only
@needs_proc_and_git
def test_ctrl_c_while_a_trial_is_measured_ends_the_measure_before_loopx_exits_130(exp_repo):
    proj, mark, env = exp_repo
    token, ready = f"measure-{uuid.uuid4().hex}", mark / "ready"
    assert run_loopx(_start_argv(token, ready), cwd=proj, env=env, timeout=300).code == 0  # the baseline measured
    agent = f"{sys.executable} -c \"open('slow', 'w').write('1')\""  # the trial's measure will block
    code, err = _interrupt_when_ready(["run", "--agent-cmd", agent, "--once"], proj, env, ready, signal.SIGINT)
    try:
        assert code == 130, err
        assert "Traceback" not in err, err
        assert _gone(token) == [], "the measure command outlived loopx"
    finally:
        for pid in _with_token(token):
            os.kill(pid, signal.SIGKILL)


@posix_only
@needs_proc_and_git
def test_sigterm_while_the_baseline_is_measured_ends_the_measure_before_loopx_exits_130(exp_repo):
    proj, mark, env = exp_repo
    (proj / "slow").write_text("1")  # the unchanged code's measure blocks
    _git(proj, "add", "slow")
    _git(proj, "commit", "-q", "-m", "slow")
    token, ready = f"measure-{uuid.uuid4().hex}", mark / "ready"
    code, err = _interrupt_when_ready(_start_argv(token, ready), proj, env, ready, signal.SIGTERM)
    try:
        assert code == 130, err
        assert "Traceback" not in err, err
        assert _gone(token) == [], "the baseline's measure command outlived loopx"
    finally:
        for pid in _with_token(token):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def plain_goal(project, cli, tmp_path, monkeypatch):
    """A goal with one todo and no verify command in a git project: a turn that changes nothing is
    `no_progress` and leaves the fingerprint as it was."""
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("needs git")
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    mark = tmp_path / "mark"
    mark.mkdir()
    (project / "app.py").write_text("X = 1\n")
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "app.py")
    _git(project, "commit", "-q", "-m", "init")
    assert cli("start-goal", "--goal-text", "Fix it", "--goal-id", "g1", "--todo", "fix it").code == 0
    return project, mark, {"LOOPX_SANDBOX_WRITE": str(mark)}


def _next_run_takes_a_turn(proj, env) -> None:
    sr = run_loopx(["quota", "should-run", "--json"], cwd=proj, env=env)
    assert sr.data["decision"] == "run", sr.data
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "true", "--json"], cwd=proj, env=env,
                  timeout=300)
    assert r.code == 0, r.out + r.err
    assert len(r.data["turns"]) == 1 and r.data["turns"][0]["result"] == "no_progress", r.data


@posix_only
def test_after_an_interrupted_turn_the_next_run_takes_a_turn(plain_goal):
    """An interrupted turn is no attempt at the work: the next `loopx run` (as its hint says) runs
    a turn, never `skip (no_change)`."""
    proj, mark, env = plain_goal
    ready = mark / "ready"
    agent = (f"{sys.executable} -c \"import os, time; open({str(ready) + '.tmp'!r}, 'w').close(); "
             f"os.replace({str(ready) + '.tmp'!r}, {str(ready)!r}); time.sleep(600)\"")
    proc = subprocess.Popen([sys.executable, "-m", "loopx", "--agent", "bot", "run", "--once", "--agent-cmd", agent],
                            cwd=proj, env=subprocess_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 300
        while not ready.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert ready.exists(), proc.stderr.read().decode() if proc.poll() is not None else "no marker"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    assert "run `loopx run` again to continue" in err.decode()
    _next_run_takes_a_turn(proj, env)
    # and a turn that was judged (no progress, nothing changed since) still makes the next one a skip
    sr = run_loopx(["quota", "should-run", "--json"], cwd=proj, env=env)
    assert (sr.data["decision"], sr.data["reason"]) == ("skip", "no_change"), sr.data


def test_after_an_agent_command_that_does_not_exist_the_next_run_takes_a_turn(plain_goal):
    proj, _mark, env = plain_goal
    r = run_loopx(["--agent", "bot", "run", "--once", "--agent-cmd", "no-such-agent-cmd-4e1f", "--json"], cwd=proj,
                  env=env, timeout=300)
    assert r.code == 1 and r.data["turns"][0]["agent_exit"] == 127, r.out + r.err
    _next_run_takes_a_turn(proj, env)


@posix_only
@needs_proc_and_git
def test_a_measure_that_times_out_says_so_and_the_turns_duration_covers_the_measure(exp_repo):
    proj, mark, env = exp_repo
    token, ready = f"measure-{uuid.uuid4().hex}", mark / "ready"
    argv = _start_argv(token, ready)
    argv[argv.index("--trial-timeout") + 1] = "2s"
    assert run_loopx(argv, cwd=proj, env=env, timeout=300).code == 0
    agent = f"{sys.executable} -c \"open('slow', 'w').write('1')\""  # the trial's measure blocks: a timeout
    r = run_loopx(["run", "--agent-cmd", agent, "--once", "--json"], cwd=proj, env=env, timeout=300)
    assert r.code == 0, r.out + r.err
    t = r.data["turns"][0]
    assert t["trial"]["decision"] == "crash" and "timed out after 2s" in t["trial"]["reason"], t
    # the turn took at least the measure's time limit; the agent's part is reported beside it
    assert t["duration"] >= 2 and t["agent_duration"] <= t["duration"], t
    shown = run_loopx(["trial", "show", t["trial"]["trial_id"]], cwd=proj, env=env)
    assert "loopx: timed out after 2s; its process group was killed" in shown.out, shown.out
    assert _gone(token) == []


@posix_only
@needs_proc_and_git
def test_sigterm_to_turn_finish_while_its_verify_runs_ends_the_verify_command(project, cli, tmp_path):
    """The runner stops an agent's whole group with SIGTERM: a `loopx turn finish --verify` in it
    ends its verify command (a process group of its own) before it exits 130."""
    mark = tmp_path / "mark"
    mark.mkdir()
    token, ready = f"verify-{uuid.uuid4().hex}", mark / "ready"
    (project / "slow").write_text("1")
    (project / "measure.py").write_text(MEASURE)
    assert cli("start-goal", "--goal-text", "Fix it", "--goal-id", "g1", "--todo", "fix it", "--todo-verify",
               f"{sys.executable} measure.py {token} {ready}").code == 0
    env = {"LOOPX_SANDBOX_WRITE": str(mark)}
    nxt = run_loopx(["--agent", "bot", "next", "--json"], cwd=project, env=env)
    assert nxt.code == 0, nxt.out + nxt.err
    run_id = nxt.data["run_id"]
    code, err = _interrupt_when_ready(["--agent", "bot", "turn", "finish", "--run", run_id, "--result", "progress",
                                       "--verify"], project, env, ready, signal.SIGTERM)
    try:
        assert code == 130, err
        assert "Traceback" not in err, err
        assert _gone(token) == [], "the verify command outlived loopx"
    finally:
        for pid in _with_token(token):
            os.kill(pid, signal.SIGKILL)
