"""``LOOPX_*`` numbers of seconds have one parser, ``config.seconds`` (issue 25): unset or empty is
the ``VARS`` default, below the floor counts as the floor, and a value that is not a finite number
stops the command that reads it with a one-line usage error (exit 2, code ``bad_env``) naming the
variable: never a traceback, never a silent default (docs/cli.md, "Environment").

Each variable's malformed case goes through the real CLI, in a process of its own."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import run_loopx, subprocess_env
from loopx import config
from loopx.cli import main
from loopx.errors import UsageError
from loopx.kernel.storage.store import Store

SECONDS = ("LOOPX_LOCK_TIMEOUT", "LOOPX_NOTIFY_BUDGET", "LOOPX_SYNC_EVERY", "LOOPX_SYNC_TIMEOUT")


def refused(r, name: str) -> None:
    """A one-line error naming ``name``, its hint, exit 2, no traceback."""
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == f"loopx: error: {name} must be a number of seconds, not '10s'"
    assert lines[1].startswith("hint: ") and f"{name}=" in lines[1]


@pytest.mark.parametrize("name", SECONDS)
def test_seconds_reads_the_default_a_number_and_the_floor(name, monkeypatch):
    default = float(config.VARS[name][0] or "nan")
    monkeypatch.delenv(name, raising=False)
    assert config.seconds(name) == default
    monkeypatch.setenv(name, "")
    assert config.seconds(name) == default
    monkeypatch.setenv(name, "2.5")
    assert config.seconds(name) == 2.5
    monkeypatch.setenv(name, "-4")
    assert config.seconds(name) == 0.0 and config.seconds(name, 1.0) == 1.0


@pytest.mark.parametrize("value", ["10s", "ten", "inf", "-inf", "nan", "1,5"])
def test_seconds_refuses_what_is_not_a_finite_number(value, monkeypatch):
    monkeypatch.setenv("LOOPX_LOCK_TIMEOUT", value)
    with pytest.raises(UsageError) as exc:
        config.seconds("LOOPX_LOCK_TIMEOUT")
    assert exc.value.code == "bad_env" and exc.value.details == {"variable": "LOOPX_LOCK_TIMEOUT"}
    assert "LOOPX_LOCK_TIMEOUT" in exc.value.message and repr(value) in exc.value.message


def test_every_seconds_variable_has_a_numeric_default():
    for name in SECONDS:
        assert float(config.VARS[name][0] or "x") > 0


def test_a_malformed_lock_timeout_stops_a_store_write_before_it_writes(goal, project):
    def titles():
        return sorted(t["title"] for t in Store.open(str(project)).load()["todos"].values())

    before = titles()
    refused(run_loopx(["todo", "add", "never written"], project, env={"LOOPX_LOCK_TIMEOUT": "10s"}),
            "LOOPX_LOCK_TIMEOUT")
    assert titles() == before
    assert run_loopx(["todo", "add", "written"], project, env={"LOOPX_LOCK_TIMEOUT": "2.5"}).code == 0
    assert titles() == sorted([*before, "written"])


def test_a_malformed_lock_timeout_stops_a_user_config_write(tmp_path):
    """``config.set_user_value`` locks the data folder with the same variable (it was a traceback)."""
    refused(run_loopx(["notify", "set", "--desktop", "on"], tmp_path, env={"LOOPX_LOCK_TIMEOUT": "10s"}),
            "LOOPX_LOCK_TIMEOUT")
    assert not config.load_user_config()
    assert run_loopx(["notify", "set", "--desktop", "on"], tmp_path).code == 0
    assert config.load_user_config()["notify"]["desktop"] is True


def test_a_malformed_notify_budget_stops_every_recorded_should_run(goal, project):
    """Also a poll the decision cache answers: the budget is read before the cache, since the send
    after a decision swallows its own errors (a bad budget there would mean silently no notices)."""
    ok = run_loopx(["quota", "should-run"], project)
    assert ok.code in (0, 1) and not ok.err, ok.err
    for _ in range(2):
        refused(run_loopx(["quota", "should-run"], project, env={"LOOPX_NOTIFY_BUDGET": "10s"}),
                "LOOPX_NOTIFY_BUDGET")
    # --no-record sends nothing, so it does not read the budget
    assert run_loopx(["quota", "should-run", "--no-record"], project, env={"LOOPX_NOTIFY_BUDGET": "10s"}).code in (0, 1)


def git(cwd, *args) -> None:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


@pytest.fixture
def shared_clone(tmp_path, monkeypatch):
    """A clone of a bare remote with a started goal g1 marked shared and synced once."""
    remote, clone = tmp_path / "remote.git", tmp_path / "a"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    (clone / "README").write_text("project\n")
    git(clone, "add", "README")
    git(clone, "commit", "-q", "-m", "init")
    git(clone, "push", "-q", "origin", "main")
    monkeypatch.chdir(clone)
    pre = ["--project", str(clone), "--quiet"]
    assert main([*pre, "connect"]) == 0
    assert main([*pre, "start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--todo", "one"]) == 0
    assert main([*pre, "goal", "update", "g1", "--shared"]) == 0
    assert main([*pre, "sync"]) == 0
    return clone


def test_a_malformed_sync_timeout_stops_sync_and_a_shared_should_run(shared_clone):
    """``loopx sync`` reads it for its git calls; should-run on a shared goal reads it before it
    syncs, so it is exit 2 there too, not the "shared goal not synced" warning of a slow remote."""
    refused(run_loopx(["sync"], shared_clone, env={"LOOPX_SYNC_TIMEOUT": "10s"}), "LOOPX_SYNC_TIMEOUT")
    refused(run_loopx(["quota", "should-run"], shared_clone, env={"LOOPX_SYNC_TIMEOUT": "10s", "LOOPX_SYNC_EVERY": "0"}),
            "LOOPX_SYNC_TIMEOUT")
    ok = run_loopx(["--format", "json", "quota", "should-run"], shared_clone,
                   env={"LOOPX_SYNC_TIMEOUT": "20", "LOOPX_SYNC_EVERY": "0"})
    assert ok.code in (0, 1) and json.loads(ok.out)["warnings"] == [], ok.out


def test_a_malformed_sync_every_stops_a_shared_should_run(shared_clone):
    refused(run_loopx(["quota", "should-run"], shared_clone, env={"LOOPX_SYNC_EVERY": "10s"}), "LOOPX_SYNC_EVERY")
