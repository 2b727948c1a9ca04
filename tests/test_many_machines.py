"""Issue 24: schedules, usage windows and many machines as people run them. Real git clones of a
bare remote on disk; time from LOOPX_NOW. docs/multi-agent.md, "One agent name on many machines"."""

from __future__ import annotations

import json
from datetime import UTC
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
    from datetime import datetime, timedelta

    remote, (a, b, c) = make_clones(tmp_path, monkeypatch, 3, 1)  # one todo: nothing else to take
    monkeypatch.delenv("LOOPX_NOW", raising=False)
    got = lx_json(a, "next", "--sync", "--lease", "5m", capsys=capsys, agent="claude-code", host="host-0",
                  monkeypatch=monkeypatch)
    assert got["exit_code"] == 0
    tid = got["data"]["todo_id"]
    ahead = _iso(datetime.now(UTC) + timedelta(minutes=10))
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
    # a lock wait shorter than thirty turns at the lock take, far longer than one turn (3 s: one
    # transaction of 30 started at once on a loaded 2-core machine holds the lock well under that)
    env = subprocess_env({"LOOPX_LOCK_TIMEOUT": "3"})
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


# ------------------------------------------------------------------ 4. usage from the newest figure
def _rollout_line(ts: str, used: float, reset: str) -> str:
    from datetime import datetime

    epoch = int(datetime.fromisoformat(reset.replace("Z", "+00:00")).timestamp())
    return json.dumps({"timestamp": ts, "type": "event_msg", "payload": {
        "type": "token_count", "info": {"total_token_usage": {"input_tokens": 5}},
        "rate_limits": {"primary": {"used_percent": used, "window_minutes": 300, "resets_at": epoch},
                        "secondary": {"used_percent": 30.0, "window_minutes": 10080}}}})


def test_codex_usage_is_the_newest_figure_not_the_newest_file(tmp_path, monkeypatch, capsys):
    import os

    home = tmp_path / "codex"
    monkeypatch.setenv("CODEX_HOME", str(home))
    monkeypatch.setenv("LOOPX_NOW", "2026-03-02T10:00:00Z")
    monkeypatch.setenv("LOOPX_HOME", str(tmp_path / "data"))
    meta = json.dumps({"timestamp": "2026-02-20T08:00:00Z", "type": "session_meta", "payload": {"id": "0199old"}})
    old = home / "sessions" / "2026" / "02" / "20" / "rollout-2026-02-20T08-00-00-0199old.jsonl"
    old.parent.mkdir(parents=True)
    # an old session that got a new prompt this morning: its newest figure is at the end of an old file
    old.write_text("\n".join([meta, _rollout_line("2026-02-20T08:30:00Z", 12.0, "2026-02-20T12:00:00Z"),
                              _rollout_line("2026-03-02T09:58:00Z", 92.0, "2026-03-02T12:00:00Z")]) + "\n")
    # newer session files: one ended hours ago, one forked a minute ago that replays the old 12% line
    day = home / "sessions" / "2026" / "03" / "02"
    day.mkdir(parents=True)
    (day / "rollout-2026-03-02T05-00-00-0199mid.jsonl").write_text(
        _rollout_line("2026-03-02T05:10:00Z", 30.0, "2026-03-02T09:00:00Z") + "\n")
    fork = day / "rollout-2026-03-02T09-59-00-0199fork.jsonl"
    fork.write_text("\n".join([meta, _rollout_line("2026-02-20T08:30:00Z", 12.0, "2026-02-20T12:00:00Z"),
                               json.dumps({"timestamp": "2026-03-02T09:59:00Z", "type": "response_item",
                                           "payload": {"type": "message", "content": "forked"}})]) + "\n")
    base = 1_900_000_000
    os.utime(old, (base + 10, base + 10))
    os.utime(day / "rollout-2026-03-02T05-00-00-0199mid.jsonl", (base, base))
    os.utime(fork, (base + 20, base + 20))  # the newest file is the fork
    for _ in range(2):  # the second read answers from the per-file cache
        capsys.readouterr()
        assert main(["usage", "--host", "codex", "--format", "json"]) == 0
        h = json.loads(capsys.readouterr().out)["data"]["hosts"][0]
        assert h["windows"][0]["used_percent"] == 92.0 and h["as_of"].startswith("2026-03-02T09:58:00")
    assert h["bytes_read"] == 0


def _claude_line(ts: str, mid: str, tokens: int) -> str:
    return json.dumps({"type": "assistant", "timestamp": ts, "requestId": f"req_{mid}", "isSidechain": False,
                       "sessionId": "s1", "uuid": f"u-{mid}", "cwd": "/home/u/proj",
                       "message": {"id": f"msg_{mid}", "model": "claude-sonnet-4-5", "role": "assistant",
                                   "usage": {"input_tokens": tokens, "output_tokens": 7,
                                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})


def _ccusage_style_active_block(messages: list[tuple[float, int]], now: float) -> tuple[float, int] | None:
    """A count in the manner of ccusage, from every message on disk: a block starts at the first
    message (floored to the hour) after the previous one ended (5 h) or after a 5 h gap."""
    start = last = None
    tokens = 0
    for t, n in sorted(messages):
        if start is None or t >= start + 5 * 3600 or t - last >= 5 * 3600:
            start, tokens = t - t % 3600, 0
        last = t
        tokens += n
    if start is None or now >= start + 5 * 3600 or now - last >= 5 * 3600:
        return None
    return start, tokens


def test_claude_blocks_do_not_move_when_old_history_ages_out(tmp_path, monkeypatch, capsys):
    from datetime import UTC, datetime

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("LOOPX_HOME", str(tmp_path / "data"))
    folder = tmp_path / "claude" / "projects" / "-home-u-proj"
    folder.mkdir(parents=True)
    t0 = datetime(2026, 3, 1, 0, 17, tzinfo=UTC).timestamp()
    messages = []  # round-the-clock use: a message every 47 minutes for 12 days
    t, i = t0, 0
    while t < t0 + 12 * 86400:
        messages.append((t, 100 + i % 13 + 7))
        t, i = t + 47 * 60, i + 1

    def write_until(until: float) -> None:
        lines = [_claude_line(datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"), str(k), n - 7)
                 for k, (t, n) in enumerate(messages) if t <= until]
        (folder / "session.jsonl").write_text("\n".join(lines) + "\n")

    def block_at(now: float) -> dict:
        monkeypatch.setenv("LOOPX_NOW", datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        capsys.readouterr()
        assert main(["usage", "--host", "claude-code", "--format", "json"]) == 0
        return json.loads(capsys.readouterr().out)["data"]["hosts"][0]["windows"][0]

    day9 = t0 + 9 * 86400 + 1000
    write_until(day9)
    first = block_at(day9)  # the cache is made while the whole history is on hand
    ref = _ccusage_style_active_block([m for m in messages if m[0] <= day9], day9)
    assert first["tokens"] == ref[1] and first["starts_at"].startswith(
        datetime.fromtimestamp(ref[0], UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    for hours in (20, 41, 62):  # days later: the first days are pruned from the cache meanwhile
        now = day9 + hours * 3600
        write_until(now)
        got = block_at(now)
        start, tokens = _ccusage_style_active_block([m for m in messages if m[0] <= now], now)
        assert got["tokens"] == tokens
        assert got["starts_at"].startswith(datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
        assert got["resets_at"].startswith(datetime.fromtimestamp(start + 5 * 3600, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    # with no new history the reset time stays where it is as time passes
    left = datetime.fromisoformat(got["resets_at"].replace("Z", "+00:00")).timestamp() - now
    later = [block_at(now + left * f)["resets_at"] for f in (0.1, 0.5, 0.9)]
    assert later == [got["resets_at"]] * 3


# ------------------------------------------------------------------ 5. local time for people
def _at(monkeypatch, iso: str) -> None:
    monkeypatch.setenv("LOOPX_NOW", iso)


def _run(capsys, *args, agent: str | None = None) -> dict:
    capsys.readouterr()
    main([*(["--agent", agent] if agent else []), *args, "--format", "json"])
    return json.loads(capsys.readouterr().out)


def _daily_turn(capsys) -> None:
    got = _run(capsys, "next", "--goal-id", "daily", agent="bot")
    assert got["exit_code"] == 0, got
    ev = _run(capsys, "evidence", "add", "--goal-id", "daily", "--run", got["data"]["run_id"], "--todo",
              got["data"]["todo_id"], "--kind", "test", "--summary", "report written", "--exit-code", "0", agent="bot")
    assert _run(capsys, "todo", "done", got["data"]["todo_id"], "--evidence", ev["data"]["evidence_id"],
                agent="bot")["exit_code"] == 0


@pytest.mark.parametrize("days, zone_by", [
    # autumn: 09:00 CEST is 07:00Z; after the October change 09:00 CET is 08:00Z
    (("2026-10-23T07:00:00Z", "2026-10-24T07:00:00Z", "2026-10-25T08:00:00Z", "2026-10-26T08:00:00Z"), "goal"),
    # spring: 09:00 CET is 08:00Z; after the March change 09:00 CEST is 07:00Z
    (("2026-03-27T08:00:00Z", "2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z"), "user"),
])
def test_a_daily_todo_stays_at_nine_local_across_a_dst_change(tmp_path, monkeypatch, capsys, days, zone_by):
    project = tmp_path / "p"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.delenv("TZ", raising=False)
    _at(monkeypatch, days[0])
    assert main(["--quiet", "connect"]) == 0
    assert main(["--quiet", "start-goal", "--goal-text", "Daily report", "--goal-id", "daily"]) == 0
    if zone_by == "goal":
        assert main(["--quiet", "goal", "update", "daily", "--tz", "Europe/Berlin"]) == 0
    else:
        monkeypatch.setenv("LOOPX_TZ", "Europe/Berlin")
    tid = _run(capsys, "todo", "add", "write the daily report", "--every", "1d")["data"]["todo_id"]
    for i, day in enumerate(days[:-1]):
        _at(monkeypatch, day)
        d = _run(capsys, "quota", "should-run")
        assert (d["data"]["decision"], d["data"]["todo_id"]) == ("run", tid), (day, d["data"])
        _daily_turn(capsys)
        d = _run(capsys, "quota", "should-run")["data"]
        assert (d["decision"], d["reason"]) == ("skip", "watching")
        assert d["next_check_at"] == days[i + 1]  # 09:00 in Berlin, whatever the offset that day


def test_a_daily_watch_checks_at_the_same_local_time_after_the_change(tmp_path, monkeypatch, capsys):
    project = tmp_path / "p"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("LOOPX_TZ", "Europe/Berlin")
    _at(monkeypatch, "2026-10-24T07:00:00Z")  # 09:00 CEST
    assert main(["--quiet", "connect"]) == 0
    assert main(["--quiet", "start-goal", "--goal-text", "Nightly", "--goal-id", "w"]) == 0
    assert main(["--quiet", "watch", "add", "--goal-id", "w", "--every", "1d", "--check", "true", "--name", "nightly"]) == 0
    assert _run(capsys, "quota", "should-run")["data"]["reason"] == "watching"  # runs the first check
    [row] = _run(capsys, "watch", "list")["data"]["watches"]
    assert row["next_due"] == "2026-10-25T08:00:00Z"  # 09:00 CET


# ------------------------------------------------------------------ 7. nothing slow inside should-run
def _gone(pid: int) -> bool:
    """The process has ended (a zombie waiting for a reaper that is not loopx counts as ended)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _loopx(project: Path, *args: str, env: dict | None = None, agent: str | None = None):
    import subprocess
    import sys

    from conftest import subprocess_env

    pre = ["--project", str(project), "--format", "json"] + (["--agent", agent] if agent else [])
    # the limit is far above what the command needs with the fix, far below what it takes without it
    p = subprocess.run([sys.executable, "-m", "loopx", *pre, *args], cwd=project, env=subprocess_env(env),
                       capture_output=True, text=True, timeout=150)
    assert "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def _plain_project(tmp_path: Path, monkeypatch) -> Path:
    project = tmp_path / "p"
    project.mkdir()
    monkeypatch.chdir(project)
    assert main(["--project", str(project), "--quiet", "connect"]) == 0
    return project


def test_a_watch_check_with_background_children_does_not_hold_should_run(tmp_path, monkeypatch):
    import os
    import signal

    project = _plain_project(tmp_path, monkeypatch)
    assert main(["--project", str(project), "--quiet", "start-goal", "--goal-text", "Watch", "--goal-id", "w"]) == 0
    # one child stays in the check's process group, one leaves it (setsid); both keep the output open
    check = ("sleep 600 & echo $! > bg.pid; setsid sh -c 'echo $$ > esc.pid; exec sleep 600' & "
             "while [ ! -s esc.pid ]; do :; done; echo checked")
    assert main(["--project", str(project), "--quiet", "watch", "add", "--goal-id", "w", "--every", "5m",
                 "--check", check, "--timeout", "5s", "--name", "bg"]) == 0
    esc = None
    try:
        d = _loopx(project, "quota", "should-run")  # returns although both children still hold the output
        esc = int((project / "esc.pid").read_text())
        assert d["data"]["reason"] == "watching"
        [row] = _loopx(project, "watch", "list")["data"]["watches"]
        assert row["outcome"] == "pass" and "checked" in (row.get("excerpt") or "")
        assert _gone(int((project / "bg.pid").read_text()))  # the child in its group was killed with it
    finally:
        if esc is None and (project / "esc.pid").exists():
            esc = int((project / "esc.pid").read_text())
        if esc:
            try:
                os.kill(esc, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_verify_command_with_a_background_child_does_not_hold_turn_finish(tmp_path, monkeypatch):
    project = _plain_project(tmp_path, monkeypatch)
    assert main(["--project", str(project), "--quiet", "start-goal", "--goal-text", "Ship", "--goal-id", "g1",
                 "--todo", "build", "--verify", "sleep 600 & echo $! > bg.pid; true"]) == 0
    got = _loopx(project, "next", agent="bot")
    fin = _loopx(project, "turn", "finish", "--run", got["data"]["run_id"], "--result", "progress", "--verify",
                 agent="bot")
    assert fin["exit_code"] == 0 and fin["data"]["verified"] is True
    assert _gone(int((project / "bg.pid").read_text()))


def test_a_webhook_that_never_answers_costs_should_run_one_bounded_attempt(tmp_path, monkeypatch):
    import socket

    project = _plain_project(tmp_path, monkeypatch)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections are accepted by the kernel; nothing ever answers them
    try:
        port = silent.getsockname()[1]
        env = {"LOOPX_NOTIFY_BUDGET": "1"}
        assert main(["--project", str(project), "--quiet", "start-goal", "--goal-text", "Ship", "--goal-id", "g1",
                     "--todo", "build"]) == 0
        assert main(["--project", str(project), "--quiet", "notify", "set", "--webhook",
                     f"http://127.0.0.1:{port}/hook"]) == 0
        for i in range(6):
            assert main(["--project", str(project), "--quiet", "--agent", "bot", "gate", "open", "--goal-id", "g1",
                         "--kind", "custom", "--question", f"question {i}?"]) == 0
        d = _loopx(project, "quota", "should-run", env=env)
        assert d["data"]["decision"] == "wait_human"
        hist = _loopx(project, "history", "--type", "notify.", env=env)["data"].get("events") or []
        # one attempt, given up at the budget (the socket's own 5 s timeout never came into it);
        # the other five stay queued for the next decision, `notify flush` or the dashboard
        assert [e["type"] for e in hist] == ["notify.failed"]
        listed = _loopx(project, "notify", "list", env=env)["data"]["notifications"]
        gates = [n for n in listed if n["type"] == "gate.opened"]
        assert len(gates) == 6 and sum(1 for n in gates if n["deliveries"]) == 1
        failed = next(n for n in gates if n["deliveries"])["deliveries"]["webhook"]
        assert "notification budget (given up" in (failed.get("error") or "")
    finally:
        silent.close()


# ------------------------------------------------------------------ 6. notifications you can act on
def test_a_gate_notification_carries_project_goal_question_link_and_command(tmp_path, monkeypatch, capsys):
    from loopx.dashboard.api import project_key
    from test_notify import Hook

    project = tmp_path / "billing-service"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("LOOPX_DASHBOARD_PORT", "47123")
    hook = Hook()
    try:
        assert main(["--quiet", "connect"]) == 0
        assert main(["--quiet", "start-goal", "--goal-text", "Ship invoices v2", "--goal-id", "g1", "--todo", "x"]) == 0
        assert main(["--quiet", "notify", "set", "--webhook", hook.url]) == 0
        gid = _run(capsys, "gate", "open", "--goal-id", "g1", "--kind", "merge", "--question",
                   "Merge loopx/run-1 into main?", agent="bot")["data"]["gate_id"]
        assert _run(capsys, "quota", "should-run")["data"]["decision"] == "wait_human"
        [body] = hook.bodies
        path = str(project)
        assert body["project"] == "billing-service" and body["project_path"] == path
        assert body["goal"] == "g1" and body["goal_objective"] == "Ship invoices v2"
        assert body["question"] == "Merge loopx/run-1 into main?" and body["gate_id"] == gid
        assert body["command"] == f"loopx --project {path} gate approve {gid}"
        assert body["link"] == f"http://127.0.0.1:47123/#/goal/{project_key(path)}/g1/{gid}"
        assert "token" not in json.dumps(body)  # no secret: deciding there needs the human's own session
        for part in ("billing-service", "Ship invoices v2", "Merge loopx/run-1 into main?", body["command"], body["link"]):
            assert part in body["body"]  # every preset's text (ntfy, Slack, Discord, desktop) shows them too
        # the command is for a human's terminal: run from an agent's shell it is refused
        refused = _run(capsys, "gate", "approve", gid, agent="bot")
        assert refused["exit_code"] == 4
        inbox = _run(capsys, "inbox")["data"]["items"]
        gate_item = next(i for i in inbox if i.get("gate_id") == gid)
        assert gate_item["command"] == body["command"] and gate_item["link"] == body["link"]
    finally:
        hook.close()


# ------------------------------------------------------------------ 8. any remote
def test_sync_to_a_second_remote_pushes_what_it_lacks_and_git_errors_reach_the_user(tmp_path, monkeypatch, capsys):
    remote, (a, b) = make_clones(tmp_path, monkeypatch, 2, 3)  # both synced through origin
    backup = tmp_path / "backup.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(backup))
    for c in (a, b):
        git(c, "remote", "add", "backup", str(backup))
    before = Store.open(str(a)).load()
    got = lx_json(a, "sync", "--remote", "backup", capsys=capsys, host="host-0", monkeypatch=monkeypatch)
    assert got["exit_code"] == 0, got
    assert got["data"]["remote"] == "backup"
    # everything host-0 wrote went to the backup (origin's push position does not count there)
    mine = sum(1 for s in ("events", "evidence") for r in Store.open(str(a)).iter_records(s)
               if r.get("node") == before["meta"]["self_node"])
    assert got["data"]["pushed"] == mine > 0
    assert lx_json(a, "sync", "--remote", "backup", capsys=capsys, host="host-0",
                   monkeypatch=monkeypatch)["data"]["pushed"] == 0  # and nothing twice
    # a third clone that knows only the backup gets host-0's records from it
    c = tmp_path / "only-backup"
    git(tmp_path, "clone", "-q", "-o", "backup", str(backup), str(c))
    assert lx(c, "connect", host="host-9", monkeypatch=monkeypatch) == 0
    assert lx(c, "sync", "--remote", "backup", host="host-9", monkeypatch=monkeypatch) == 0
    st = Store.open(str(c)).load()
    assert len([t for t in st["todos"].values() if t["goal"] == "g1"]) == 3
    assert lx(a, "sync", host="host-0", monkeypatch=monkeypatch) == 0  # origin still works as before
    # an unreachable remote: git's whole message, not only its last line
    git(a, "remote", "add", "dead", str(tmp_path / "no-such-remote.git"))
    bad = lx_json(a, "sync", "--remote", "dead", capsys=capsys, host="host-0", monkeypatch=monkeypatch)
    assert bad["exit_code"] == 3
    msg = bad["error"]["message"]
    assert "does not appear to be a git repository" in msg and "the repository exists" in msg
    assert "\n" not in msg


def test_a_human_hands_a_run_of_a_lost_machine_over_to_this_one(tmp_path, monkeypatch, capsys):
    remote, (a, b) = make_clones(tmp_path, monkeypatch, 2, 3)
    ra = lx_json(a, "next", "--sync", capsys=capsys, agent="claude-code", host="host-0", monkeypatch=monkeypatch)["data"]
    assert lx(b, "sync", host="host-1", monkeypatch=monkeypatch) == 0
    # an agent may not move it
    refused = lx_json(b, "turn", "handover", "--run", ra["run_id"], capsys=capsys, agent="claude-code",
                      host="host-1", monkeypatch=monkeypatch)
    assert refused["exit_code"] == 4 and refused["error"]["code"] == "human_required"
    moved = lx_json(b, "turn", "handover", "--run", ra["run_id"], capsys=capsys, host="host-1", monkeypatch=monkeypatch)
    assert moved["exit_code"] == 0 and moved["data"]["moved"] is True
    again = lx_json(b, "next", capsys=capsys, agent="claude-code", host="host-1", monkeypatch=monkeypatch)
    assert again["data"]["resumed"] is True and again["data"]["run_id"] == ra["run_id"]
    assert again["data"]["fence"] is not None  # the todo's claim came with it
    fin = lx_json(b, "turn", "finish", "--run", ra["run_id"], "--result", "progress", capsys=capsys,
                  agent="claude-code", host="host-1", monkeypatch=monkeypatch)
    assert fin["exit_code"] == 0 and fin["data"]["todo_status"] == "open"
