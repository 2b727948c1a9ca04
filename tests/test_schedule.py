"""Issue 9 item 10: `loopx schedule --cron|--systemd` prints recipes that work under cron's minimal
PATH (absolute loopx, a PATH that finds the agent), and the cron wrapper names the PATH problem."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

import pytest

from conftest import REPO

posix_only = pytest.mark.skipif(os.name == "nt", reason="cron and systemd are POSIX")


def test_loopx_executable_is_absolute_and_runs_without_path(tmp_path):
    from loopx.resources import loopx_executable

    exe = loopx_executable()
    argv = shlex.split(exe)
    assert os.path.isabs(argv[0])
    if len(argv) > 1:
        assert argv[1:] == ["-m", "loopx"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([*argv, "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("loopx ")


@posix_only
def test_schedule_cron_fills_in_the_absolute_executable_and_a_path(goal, cli, project):
    from loopx.resources import loopx_executable

    r = cli("--agent", "codex", "schedule", "--cron", "--goal-id", goal, "--every", "10m", json=True)
    assert r.code == 0, r.out
    d = r.data
    exe = loopx_executable()
    assert d["executable"] == exe
    lines = d["recipe"].splitlines()
    path_line = next(x for x in lines if x.startswith("PATH="))
    job = next(x for x in lines if x.startswith("*/10 * * * *"))
    assert f"cd {project} && flock -n -E 0 .loopx/cache/cron.lock {exe} --agent codex run --once" in job
    assert job.endswith(f"--goal-id {goal}")
    first = shlex.split(exe)[0]
    assert os.path.dirname(first) in path_line.split("=", 1)[1].split(":")
    text = cli("--agent", "codex", "schedule", "--cron").out
    assert text.startswith("# loopx: one governed turn every 15m") and "crontab -e" in text


@posix_only
def test_schedule_systemd_units_name_loopx_by_its_path(goal, cli, project):
    r = cli("schedule", "--systemd", "--every", "2h", json=True)
    assert r.code == 0, r.out
    d = r.data
    assert d["unit"] == "loopx-proj" and "OnCalendar=0/2:00" in d["timer"]
    assert f"WorkingDirectory={project}" in d["service"]
    cond = next(x for x in d["service"].splitlines() if x.startswith("ExecCondition="))
    assert f"{d['executable']} quota should-run" in cond and "exit 255" in cond
    assert d["install"][-1] == "systemctl --user enable --now loopx-proj.timer"


def test_schedule_errors(goal, cli, project):
    assert cli("schedule", json=True).code == 2
    r = cli("schedule", "--cron", "--every", "7m", json=True)
    assert r.code == 2 and "5m" in r.json["error"]["hint"]
    r = cli("schedule", "--cron", "--goal-id", "nope", json=True)
    assert r.code == 2
    r = cli("--agent", "robot", "schedule", "--cron", json=True)
    assert r.code == 2 and "--agent-cmd" in r.json["error"]["hint"]
    assert cli("--agent", "robot", "schedule", "--cron", "--agent-cmd", "./agent.sh {prompt_file}").code == 0


@posix_only
def test_cron_wrapper_names_the_path_problem_and_works_with_loopx_bin(goal, cli, project, tmp_path):
    from loopx.resources import loopx_executable

    script = REPO / "examples" / "cron" / "loopx-turn.sh"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LOOPX_HOME": os.environ["LOOPX_HOME"]}
    if shutil.which("loopx", path=env["PATH"]):
        pytest.skip("a loopx is installed in /usr/bin here")
    proc = subprocess.run(["sh", str(script), str(project)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 127
    assert "'loopx' is not on PATH (PATH=/usr/bin:/bin)" in proc.stderr and "loopx schedule --cron" in proc.stderr
    assert "see loopx doctor" not in proc.stderr
    exe = loopx_executable()
    if " " in exe or not shutil.which("flock"):
        pytest.skip("the wrapper's LOOPX_BIN takes one path; flock is needed")
    cli("goal", "pause", goal)  # should-run answers a clean "no": the wrapper exits 0 quietly
    env.update(LOOPX_BIN=exe, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run(["sh", str(script), str(project)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
