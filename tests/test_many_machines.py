"""Issue 24: schedules, usage windows and many machines as people run them. Real git clones of a
bare remote on disk; time from LOOPX_NOW. docs/multi-agent.md, "One agent name on many machines"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopx.cli import main
from loopx.kernel.storage.store import Store
from test_sync import git


def lx(clone: Path, *args, agent: str | None = None, host: str | None = None, monkeypatch=None) -> int:
    if host is not None:
        monkeypatch.setenv("LOOPX_HOST", host)
    pre = ["--project", str(clone), "--quiet"] + (["--agent", agent] if agent else [])
    return main([*pre, *args])


def lx_json(clone: Path, *args, capsys, agent: str | None = None, host: str | None = None, monkeypatch=None) -> dict:
    if host is not None:
        monkeypatch.setenv("LOOPX_HOST", host)
    capsys.readouterr()
    pre = ["--project", str(clone), "--format", "json"] + (["--agent", agent] if agent else [])
    main([*pre, *args])
    return json.loads(capsys.readouterr().out)


def make_clones(tmp_path: Path, monkeypatch, n: int, todos: int) -> tuple[Path, list[Path]]:
    """A bare remote and ``n`` clones of one project; goal g1 with ``todos`` ready todos, synced to
    every clone (clone i's machine is ``host-i``)."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(remote), str(seed))
    (seed / "README").write_text("project\n")
    git(seed, "add", "README")
    git(seed, "commit", "-q", "-m", "init")
    git(seed, "push", "-q", "origin", "main")
    clones = []
    for i in range(n):
        c = tmp_path / f"m{i}"
        git(tmp_path, "clone", "-q", str(remote), str(c))
        clones.append(c)
    monkeypatch.chdir(tmp_path)
    a = clones[0]
    assert lx(a, "connect", host="host-0", monkeypatch=monkeypatch) == 0
    assert lx(a, "start-goal", "--goal-text", "Ship", "--goal-id", "g1", host="host-0", monkeypatch=monkeypatch) == 0
    for i in range(todos):
        assert lx(a, "todo", "add", f"task {i}", "--goal-id", "g1", host="host-0", monkeypatch=monkeypatch) == 0
    assert lx(a, "sync", host="host-0", monkeypatch=monkeypatch) == 0
    for i, c in enumerate(clones[1:], 1):
        assert lx(c, "connect", host=f"host-{i}", monkeypatch=monkeypatch) == 0
        assert lx(c, "sync", host=f"host-{i}", monkeypatch=monkeypatch) == 0
    return remote, clones


# ------------------------------------------------------------------ 1. the machine is part of the agent
def test_ten_clones_with_one_agent_name_are_ten_holders(tmp_path, monkeypatch, capsys):
    remote, clones = make_clones(tmp_path, monkeypatch, 10, 12)
    first = {}
    for i, c in enumerate(clones):  # round 1: every machine asks for work under the same agent name
        assert lx(c, "sync", host=f"host-{i}", monkeypatch=monkeypatch) == 0
        got = lx_json(c, "next", "--sync", capsys=capsys, agent="claude-code", host=f"host-{i}", monkeypatch=monkeypatch)
        assert got["exit_code"] == 0, got
        assert not got["data"].get("resumed"), f"host-{i} resumed another machine's run: {got['data']['run_id']}"
        first[i] = (got["data"]["run_id"], got["data"]["todo_id"])
    assert len({t for _, t in first.values()}) == 10  # ten todos, one per machine
    for i, c in enumerate(clones):  # round 2: after a sync each machine resumes its own run, and only that
        assert lx(c, "sync", host=f"host-{i}", monkeypatch=monkeypatch) == 0
        got = lx_json(c, "next", "--sync", capsys=capsys, agent="claude-code", host=f"host-{i}", monkeypatch=monkeypatch)
        assert got["exit_code"] == 0 and got["data"]["resumed"] is True
        assert (got["data"]["run_id"], got["data"]["todo_id"]) == first[i]
    for i, c in enumerate(clones):
        assert lx(c, "sync", host=f"host-{i}", monkeypatch=monkeypatch) == 0
    state = Store.open(str(clones[3])).load()
    claims = [t["claim"] for t in state["todos"].values() if t["status"] == "claimed"]
    assert len(claims) == 10 and len({c["node"] for c in claims}) == 10  # no todo held twice, no machine twice
    open_runs = [r for r in state["runs"].values() if r["finished"] is None]
    assert len(open_runs) == 10 and len({r["todo"] for r in open_runs}) == 10
    # status names the machine of each holder once more than one machine takes part
    st = lx_json(clones[3], "status", capsys=capsys, host="host-3", monkeypatch=monkeypatch)
    held = st["data"]["goals"][0]["claimed"]
    assert sorted(h["machine"] for h in held) == sorted(f"host-{i}" for i in range(10))
    capsys.readouterr()
    main(["--project", str(clones[3]), "status"])
    text = capsys.readouterr().out
    assert "by agent:claude-code@host-0 until" in text and "by agent:claude-code@host-9 until" in text


def test_a_run_of_another_machine_is_neither_resumed_nor_finished_here(tmp_path, monkeypatch, capsys):
    remote, (a, b) = make_clones(tmp_path, monkeypatch, 2, 3)
    ra = lx_json(a, "next", capsys=capsys, agent="claude-code", host="host-0", monkeypatch=monkeypatch)["data"]
    assert lx(a, "sync", host="host-0", monkeypatch=monkeypatch) == 0
    assert lx(b, "sync", host="host-1", monkeypatch=monkeypatch) == 0
    rb = lx_json(b, "next", capsys=capsys, agent="claude-code", host="host-1", monkeypatch=monkeypatch)
    assert rb["exit_code"] == 0 and not rb["data"].get("resumed")
    assert rb["data"]["run_id"] != ra["run_id"] and rb["data"]["todo_id"] != ra["todo_id"]
    # host-1's agent cannot finish host-0's run, nor release or complete host-0's claim
    fin = lx_json(b, "turn", "finish", "--run", ra["run_id"], "--result", "progress", capsys=capsys, agent="claude-code",
                  host="host-1", monkeypatch=monkeypatch)
    assert fin["exit_code"] == 4 and fin["error"]["code"] == "run_not_yours"
    assert "claude-code@host-0" in fin["error"]["message"]
    rel = lx_json(b, "todo", "release", ra["todo_id"], capsys=capsys, agent="claude-code", host="host-1",
                  monkeypatch=monkeypatch)
    assert rel["exit_code"] == 4 and rel["error"]["code"] == "claimed_by_other"
    assert "agent:claude-code@host-0" in rel["error"]["message"]
    # its own run it finishes as always
    own = lx_json(b, "turn", "finish", "--run", rb["data"]["run_id"], "--result", "progress", capsys=capsys,
                  agent="claude-code", host="host-1", monkeypatch=monkeypatch)
    assert own["exit_code"] == 0


# ------------------------------------------------------------------ 2. leases that survive skew
def _iso(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_clone_ten_minutes_ahead_cannot_steal_a_five_minute_lease_and_doctor_names_it(tmp_path, monkeypatch, capsys):
    from datetime import datetime, timedelta, timezone

    remote, (a, b, c) = make_clones(tmp_path, monkeypatch, 3, 1)  # one todo: nothing else to take
    monkeypatch.delenv("LOOPX_NOW", raising=False)
    got = lx_json(a, "next", "--sync", "--lease", "5m", capsys=capsys, agent="claude-code", host="host-0",
                  monkeypatch=monkeypatch)
    assert got["exit_code"] == 0
    tid = got["data"]["todo_id"]
    ahead = _iso(datetime.now(timezone.utc) + timedelta(minutes=10))
    monkeypatch.setenv("LOOPX_NOW", ahead)  # host-1's clock runs ten minutes ahead
    stolen = lx_json(b, "next", "--sync", "--lease", "5m", capsys=capsys, agent="claude-code", host="host-1",
                     monkeypatch=monkeypatch)
    assert stolen["exit_code"] == 1, stolen  # a clean no: the only todo is held on host-0
    assert stolen["data"]["todo_id"] is None and stolen["data"]["run_id"] is None
    st = Store.open(str(b)).load()
    assert st["todos"][tid]["claim"]["node"] != st["meta"]["self_node"]
    assert all(r["finished"] is None for r in st["runs"].values())  # host-1 did not reap host-0's run either
    assert lx(b, "todo", "add", "written ahead", "--goal-id", "g1", host="host-1", monkeypatch=monkeypatch) == 0
    assert lx(b, "sync", host="host-1", monkeypatch=monkeypatch) == 0
    monkeypatch.delenv("LOOPX_NOW")
    for clone, host in ((a, "host-0"), (c, "host-2")):  # the healthy clones name host-1, not themselves
        assert lx(clone, "sync", host=host, monkeypatch=monkeypatch) == 0
        doc = lx_json(clone, "doctor", capsys=capsys, host=host, monkeypatch=monkeypatch)
        check = next(x for x in doc["data"]["checks"] if x["id"] == "clock")
        assert check["status"] == "warning", check
        assert "host-1" in check["finding"] and "ahead" in check["finding"]
        assert "behind" not in check["finding"]
        [who] = check["details"]["ahead"]
        assert who["host"] == "host-1" and 9 * 60 <= who["seconds"] <= 10 * 60


# ------------------------------------------------------------------ 3. contention without failure
def test_thirty_concurrent_claimers_on_one_clone_all_get_an_answer(tmp_path, monkeypatch, capsys):
    """Thirty agents ask for work at once (three per clone on ten machines, here all on one clone)
    with a short lock wait: each gets a claim or a clean "nothing free" (exit 1), none store_busy."""
    import subprocess
    import sys

    from conftest import subprocess_env

    project = tmp_path / "p"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    monkeypatch.chdir(project)
    assert main(["--project", str(project), "--quiet", "connect"]) == 0
    assert main(["--project", str(project), "--quiet", "start-goal", "--goal-text", "Ship", "--goal-id", "g1"]) == 0
    for i in range(12):
        assert main(["--project", str(project), "--quiet", "todo", "add", f"task {i}", "--goal-id", "g1"]) == 0
    # a lock wait shorter than thirty turns at the lock take, far longer than one turn
    env = subprocess_env({"LOOPX_LOCK_TIMEOUT": "1"})
    procs = [subprocess.Popen([sys.executable, "-m", "loopx", "--project", str(project), "--format", "json",
                               "--agent", f"agent-{i}", "next", "--goal-id", "g1"], cwd=project, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(30)]
    answers = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert "Traceback" not in err, err
        answers.append(json.loads(out))
    busy = [a for a in answers if a["exit_code"] == 4]
    assert not busy, busy[0]
    got = [a for a in answers if a["exit_code"] == 0]
    no = [a for a in answers if a["exit_code"] == 1]
    assert len(got) + len(no) == 30
    assert len(got) == 12 and len({a["data"]["todo_id"] for a in got}) == 12  # every todo once
    assert all(a["data"]["decision"]["decision"] in ("wait", "stop") for a in no)


_WAITER = """
import sys, time
from loopx.kernel.storage.fs import locked
from loopx.errors import StoreBusy
print("waiting", flush=True)
try:
    with locked(sys.argv[1], float(sys.argv[2])):
        print("got it", flush=True)
except StoreBusy:
    print("store_busy", flush=True)
"""


def _waiter(path, timeout):
    import subprocess
    import sys

    from conftest import subprocess_env

    p = subprocess.Popen([sys.executable, "-c", _WAITER, str(path), str(timeout)], env=subprocess_env(),
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "waiting"
    return p


def test_a_lock_held_by_one_process_for_the_whole_wait_is_store_busy(tmp_path):
    """A real hang (one holder that never lets go) still ends the wait with store_busy."""
    import os

    from loopx.kernel.storage import fs

    path = tmp_path / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    assert fs.try_lock(fd)
    os.pwrite(fd, b"1 1\n", 0)
    try:
        p = _waiter(path, 0.3)
        assert p.stdout.readline().strip() == "store_busy"  # the holder never changed and never let go
        p.wait(timeout=120)
    finally:
        fs.unlock(fd)
        os.close(fd)


def test_a_waiter_keeps_waiting_while_the_lock_changes_hands(tmp_path):
    """While the lock changes hands (each new holder writes its token) a waiter waits past its
    timeout; it gets the lock when it comes free. Here the test plays the holders: it keeps the lock
    for several timeouts, writing a new holder's token far more often than once per timeout."""
    import os
    import time

    from loopx.kernel.storage import fs

    path = tmp_path / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    assert fs.try_lock(fd)
    try:
        p = _waiter(path, 2.0)
        for i in range(100):  # 5 s of turns, a new holder every 0.05 s: 40 per timeout
            os.pwrite(fd, b"%d %d\n" % (1000 + i, i), 0)
            time.sleep(0.05)
    finally:
        fs.unlock(fd)
        os.close(fd)
    assert p.stdout.readline().strip() == "got it"
    p.wait(timeout=120)
