"""The sandbox session's private folder (``/tmp/loopx-sbx-*``: ``broker.sock``, ``tmp/``,
``verify-policy.json``): a normal ``loopx run`` exit removes its own; a runner that is killed
(SIGKILL: no ``finally`` runs) leaves it, and the next session removes it once its owner is gone,
never a folder whose owner still runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_loopx, subprocess_env

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self") or
                                subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
                                reason="needs Linux /proc and git")

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def _folders(tmp) -> list[str]:
    return sorted(n for n in os.listdir(tmp) if n.startswith("loopx-sbx-"))


def test_a_normal_exit_removes_the_folder_and_a_killed_runners_folder_is_reaped_later(tmp_path):
    from loopx.sandbox import session

    tmp, proj, mark = tmp_path / "tmp", tmp_path / "proj", tmp_path / "mark"
    tmp.mkdir()
    proj.mkdir()
    mark.mkdir()
    env = {**GIT_ENV, "TMPDIR": str(tmp), "LOOPX_SANDBOX_WRITE": str(mark)}
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=proj, check=True, env=subprocess_env(env), capture_output=True)
    assert run_loopx(["connect", "--quiet"], cwd=proj, env=env).code == 0
    assert run_loopx(["start-goal", "--goal-text", "t", "--todo", "one", "--todo", "two", "--todo", "three"],
                     cwd=proj, env=env).code == 0
    r = run_loopx(["run", "--agent-cmd", "true", "--once"], cwd=proj, env=env, timeout=120)
    assert r.code in (0, 1), r.err
    assert _folders(tmp) == []  # a normal exit leaves nothing behind
    # a runner killed while its agent works: its folder stays ...
    agent = f"{sys.executable} -c \"open('{mark / 'started'}', 'w').close(); import time; time.sleep(300)\""
    runner = subprocess.Popen([sys.executable, "-m", "loopx", "run", "--agent-cmd", agent, "--once"], cwd=proj,
                              env=subprocess_env(env), start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(1200):  # until the agent runs (a bound, not a timing assertion)
            if (mark / "started").exists() or runner.poll() is not None:
                break
            time.sleep(0.1)
        assert (mark / "started").exists(), "the agent never started"
        live = _folders(tmp)
        assert len(live) == 1 and os.path.exists(tmp / live[0] / session.OWNER)
        assert session.reap_stale(str(tmp)) == [] and _folders(tmp) == live  # its owner runs: kept
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    assert _folders(tmp) == live
    # ... until the next session starts (another agent: the killed run is still open), which removes
    # it (and its own at its exit)
    r = run_loopx(["--agent", "second", "run", "--agent-cmd", "true", "--once"], cwd=proj, env=env, timeout=120)
    assert r.code in (0, 1), r.err
    assert _folders(tmp) == []
