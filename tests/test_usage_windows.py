"""Issue 14, acceptance 2, 3, 4 and 6: should-run sees the subscription's windows and the budget in
real units. Host folders are built by the tests under CODEX_HOME / CLAUDE_CONFIG_DIR."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import run_loopx
from loopx.kernel.storage.store import Store

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _epoch(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def _todo_goal(cli, n=2, **quota):
    args = ["start-goal", "--goal-text", "Ship it", "--goal-id", "g1"]
    for i in range(n):
        args += ["--todo", f"step {i}"]
    assert cli(*args).code == 0


# ---------------------------------------------------------------- acceptance 2: Codex's own windows
def _codex_session(used: float, resets_at: str | None = None, resets_in: int | None = None, when="2026-03-01T08:59:00Z",
                   name="rollout-2026-03-01T08-00-00-0199aaaa.jsonl", extra_lines=()):
    home = Path(os.environ["CODEX_HOME"])
    d = home / "sessions" / "2026" / "03" / "01"
    d.mkdir(parents=True, exist_ok=True)
    primary = {"used_percent": used, "window_minutes": 300}
    if resets_at:
        primary["resets_at"] = _epoch(resets_at)
    if resets_in is not None:
        primary["resets_in_seconds"] = resets_in
    lines = [{"timestamp": "2026-03-01T08:00:00Z", "type": "session_meta", "payload": {"id": "0199aaaa"}},
             {"timestamp": "2026-03-01T08:30:00Z", "type": "event_msg",
              "payload": {"type": "token_count", "info": None, "rate_limits": {
                  "primary": {"used_percent": 10.0, "window_minutes": 300, "resets_at": _epoch("2026-03-01T11:00:00Z")},
                  "secondary": {"used_percent": 20.0, "window_minutes": 10080}}}},
             {"timestamp": when, "type": "event_msg",
              "payload": {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 5}},
                          "rate_limits": {"primary": primary,
                                          "secondary": {"used_percent": 40.0, "window_minutes": 10080,
                                                        "resets_at": _epoch("2026-03-05T00:00:00Z")}}}}]
    text = "\n".join(json.dumps(x) for x in lines) + "\n" + "".join(f"{x}\n" for x in extra_lines)
    (d / name).write_text(text)
    return d / name


def test_codex_at_97_percent_waits_until_the_reset_then_runs(project, cli, clk):
    _todo_goal(cli)
    _codex_session(97.0, resets_at="2026-03-01T11:00:00Z", extra_lines=["not json at all", '{"type": "other"}'])
    r = cli("--agent", "codex", "quota", "should-run", json=True)
    d = r.data
    assert (r.code, d["decision"], d["reason"]) == (1, "wait", "host_window")
    assert d["next_check_at"] == "2026-03-01T11:00:00Z"
    assert "97%" in d["message"] and "primary" in d["message"]
    ex = cli("--agent", "codex", "quota", "should-run", "--explain", json=True).data
    wins = ex["host_windows"][0]["windows"]
    assert [(w["name"], w["used_percent"]) for w in wins] == [("primary", 97.0), ("secondary", 40.0)]
    assert "host:   codex: primary 97%, secondary 40%" in cli("--agent", "codex", "quota", "should-run", "--explain").out
    # without --agent: the goal's default host, else every host whose window is known
    assert cli("quota", "should-run", json=True).data["reason"] == "host_window"
    assert cli("goal", "update", "g1", "--host", "claude-code").code == 0
    assert cli("quota", "should-run", json=True).data["decision"] == "run"  # Claude's window is unknown here
    clk.set(datetime(2026, 3, 1, 11, 0, 1, tzinfo=UTC))
    r = cli("--agent", "codex", "quota", "should-run", json=True)
    assert (r.code, r.data["decision"]) == (0, "run")
    usage = cli("usage", "--host", "codex", json=True).data["hosts"][0]
    assert usage["known"] and usage["as_of"] == "2026-03-01T08:59:00Z" and usage["age_seconds"] == 7261
    assert "reset since" in cli("usage", "--host", "codex").out


def test_codex_at_50_percent_runs_and_the_reserve_is_a_human_setting(project, cli, clk):
    _todo_goal(cli)
    _codex_session(50.0, resets_in=3600)  # the older relative form
    r = cli("--agent", "codex", "quota", "should-run", json=True)
    assert (r.code, r.data["decision"]) == (0, "run")
    assert cli("quota", "set", "--host-reserve", "60").code == 0  # raising the reserve tightens: anyone may
    r = cli("--agent", "codex", "quota", "should-run", json=True)
    assert (r.data["reason"], r.data["next_check_at"]) == ("host_window", "2026-03-01T09:59:00Z")
    assert cli("--agent", "codex", "quota", "set", "--host-reserve", "5").code == 4  # an agent may not loosen
    assert cli("quota", "set", "--host-reserve", "5").code == 0


def test_use_leftover_runs_only_when_a_window_resets_soon(project, cli, clk):
    _todo_goal(cli)
    _codex_session(50.0, resets_at="2026-03-01T13:00:00Z")
    assert cli("quota", "set", "--use-leftover", "2h").code == 0
    r = cli("--agent", "codex", "quota", "should-run", json=True)
    assert (r.data["reason"], r.data["next_check_at"]) == ("leftover_not_due", "2026-03-01T11:00:00Z")
    clk.set(datetime(2026, 3, 1, 11, 30, tzinfo=UTC))
    assert cli("--agent", "codex", "quota", "should-run", json=True).data["decision"] == "run"


def test_codex_files_that_are_odd_never_break_a_decision(project, cli, clk):
    _todo_goal(cli)
    home = Path(os.environ["CODEX_HOME"]) / "sessions" / "2026" / "03" / "01"
    home.mkdir(parents=True)
    (home / "rollout-a.jsonl").write_bytes(b"\xff\xfe garbage\n{\"payload\": {\"rate_limits\": 7}}\n" + b"x" * 70000)
    (home / "rollout-b.jsonl").write_text('{"payload": {"rate_limits": {"primary": {"used_percent": "lots"}}}}')
    r = cli("--agent", "codex", "quota", "should-run", json=True)
    assert r.code == 0 and r.data["decision"] == "run"
    u = cli("usage", "--host", "codex", json=True)
    assert u.code == 0 and u.data["hosts"][0]["host"] == "codex"


# ---------------------------------------------------------------- acceptance 3: Claude's blocks
def _line(ts, mid, rid, inp, out, cw=0, cr=0, side=False, model="claude-sonnet-4-5"):
    return json.dumps({"type": "assistant", "timestamp": ts, "requestId": rid, "isSidechain": side,
                       "sessionId": "s", "uuid": f"u-{mid}-{ts}",
                       "message": {"id": mid, "model": model, "role": "assistant",
                                   "usage": {"input_tokens": inp, "output_tokens": out,
                                             "cache_creation_input_tokens": cw, "cache_read_input_tokens": cr}}})


def _claude_folder() -> Path:
    root = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects"
    p1, p2 = root / "-home-u-proj1", root / "-home-u-proj2"
    (p1 / "aaa" / "subagents").mkdir(parents=True)
    p2.mkdir(parents=True)
    (p1 / "aaa.jsonl").write_text("\n".join([
        json.dumps({"type": "user", "timestamp": "2026-03-08T10:14:00Z", "message": {"role": "user", "content": "hi"}}),
        _line("2026-03-08T10:15:00Z", "msg_1", "req_1", 100, 50),
        _line("2026-03-08T10:20:00Z", "msg_2", "req_2", 200, 100, cw=1000, cr=500),
    ]) + "\n")
    (p1 / "aaa" / "subagents" / "agent-x.jsonl").write_text(
        _line("2026-03-08T10:30:00Z", "msg_5", "req_5", 1, 2, cw=3, cr=4, side=True) + "\n")
    (p2 / "bbb.jsonl").write_text("\n".join([
        _line("2026-03-08T11:00:00Z", "msg_2", "req_2", 200, 100, cw=1000, cr=500),  # resumed: the same response
        _line("2026-03-08T11:05:00Z", "msg_3", "req_3", 10, 20, cr=300),
        "this line is not JSON",
    ]) + "\n" + _line("2026-03-08T11:06:00Z", "msg_4", "req_4", 99, 1)[:60])  # torn: still being written
    (p1 / "ccc.jsonl").write_text("\n".join([
        _line("2026-02-28T10:00:00Z", "msg_8", "req_8", 5000, 2000),      # 8 days ago: outside the week
        _line("2026-03-05T08:10:00Z", "msg_6", "req_6", 1000, 1000),
        _line("2026-03-05T09:00:00Z", "msg_7", "req_7", 250, 250),
    ]) + "\n")
    return p2 / "bbb.jsonl"


def _claude(cli):
    r = cli("usage", "--host", "claude-code", json=True)
    assert r.code == 0, r.err
    return r.data["hosts"][0]


def test_claude_block_and_week_totals_by_hand(project, cli, clk):
    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    torn = _claude_folder()
    h = _claude(cli)
    block, week = h["windows"]
    # block: the first message after the 2026-03-05 block ended, floored to the hour: 10:00-15:00
    # 150 (msg_1) + 1800 (msg_2, once) + 10 (sidechain msg_5) + 330 (msg_3) = 2290; the torn msg_4 waits
    assert (block["starts_at"], block["resets_at"], block["tokens"]) == \
        ("2026-03-08T10:00:00Z", "2026-03-08T15:00:00Z", 2290)
    assert block["messages"] == 4
    # no limit set: compared with the largest finished block seen (2026-02-28: 7000)
    assert (block["limit"], block["limit_source"], block["used_percent"]) == (7000, "largest block seen", 32.7)
    # week: after 2026-03-01T12:30Z: 2290 + 2000 + 500 = 4790
    assert (week["tokens"], week["limit"], week["used_percent"]) == (4790, None, None)
    assert h["skipped_lines"] == 1 and h["files"] == 4
    # a human sets the limits (user config, not the project)
    assert cli("usage", "set", "--host", "claude-code", "--block-tokens", "3000", "--week-tokens", "10000").code == 0
    h = _claude(cli)
    block, week = h["windows"]
    assert (block["limit_source"], block["used_percent"], week["used_percent"]) == ("usage set", 76.3, 47.9)
    assert h["bytes_read"] == 0  # new limits, same transcripts: recomputed from the remembered messages
    # the torn line completes: only the new bytes are read, and it counts
    before = torn.stat().st_size
    rest = _line("2026-03-08T11:06:00Z", "msg_4", "req_4", 99, 1)[60:] + "\n"
    with torn.open("a") as fh:
        fh.write(rest)
    h = _claude(cli)
    assert h["windows"][0]["tokens"] == 2390
    assert h["bytes_read"] == len(rest.encode()) + 60 and h["bytes_read"] < before


def test_claude_window_gates_should_run(project, cli, clk):
    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    _claude_folder()
    _todo_goal(cli)
    assert cli("usage", "set", "--host", "claude-code", "--block-tokens", "2500").code == 0
    r = cli("--agent", "claude-code", "quota", "should-run", json=True)  # 2290/2500 = 91.6% > 90%
    assert (r.data["reason"], r.data["next_check_at"]) == ("host_window", "2026-03-08T15:00:00Z")
    cli("--agent", "claude-code", "quota", "should-run", json=True)  # unchanged: remembered
    assert cli("--agent", "claude-code", "quota", "should-run", json=True).data["cached"] is True
    assert cli("usage", "set", "--host", "claude-code", "--block-tokens", "5000").code == 0
    assert cli("--agent", "claude-code", "quota", "should-run", json=True).data["decision"] == "run"


@pytest.mark.parametrize("disguise", [{"LOOPX_AGENT": "bot"}, {"CLAUDE_CODE_ENTRYPOINT": "cli"}])
def test_usage_limits_are_human_only(project, disguise):
    r = run_loopx(["usage", "set", "--host", "claude-code", "--block-tokens", "99999999"], cwd=project, env=disguise)
    assert r.code == 4 and "human" in r.err and "hint:" in r.err


def test_usage_bad_input(project, cli):
    assert cli("usage", "--host", "nope").code == 2
    assert cli("usage", "set", "--host", "codex", "--block-tokens", "5").code == 2
    assert cli("usage", "set", "--host", "claude-code", "--block-tokens", "-5").code == 2
    assert cli("usage", "set", "--host", "claude-code").code == 2
    assert cli("usage", "--block-tokens", "5").code == 2


def test_a_broken_user_config_is_a_clear_error(project, cli):
    from loopx import config

    Path(config.config_path()).parent.mkdir(parents=True, exist_ok=True)
    Path(config.config_path()).write_text("[usage\nbroken = ")
    _claude_folder()
    r = cli("usage", "--host", "claude-code")
    assert r.code == 3 and "config" in r.err and "hint:" in r.err


# ---------------------------------------------------------------- acceptance 6: incremental reading
def test_second_usage_reads_no_transcript_bytes(project, cli, clk):
    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    root = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects" / "-p"
    root.mkdir(parents=True)
    for f in range(5):
        lines = [_line(f"2026-03-08T0{f}:{m % 60:02d}:00Z", f"m{f}-{m}", f"r{f}-{m}", 10, 1) for m in range(2000)]
        (root / f"s{f}.jsonl").write_text("\n".join(lines) + "\n")
    total = sum(p.stat().st_size for p in root.iterdir())
    first = _claude(cli)
    assert first["bytes_read"] == total
    second = _claude(cli)
    assert second["bytes_read"] == 0
    assert second["windows"] == first["windows"]
    assert cli("usage", json=True).data["bytes_read"] == 0


# ---------------------------------------------------------------- acceptance 4: money over the window
CLAUDE_040 = json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "ok",
                         "total_cost_usd": 0.40, "session_id": "s",
                         "usage": {"input_tokens": 1000, "output_tokens": 500, "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 0}})


@pytest.mark.skipif(os.name != "posix", reason="fake hosts are shell scripts")
def test_one_dollar_a_day_allows_two_turns_of_forty_cents_then_waits(project, cli, clk, tmp_path):
    args = ["start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--verify", "true"]
    for i in range(4):
        args += ["--todo", f"step {i}"]
    assert cli(*args).code == 0
    assert cli("goal", "update", "g1", "--permission-mode", "edit").code == 0
    assert cli("quota", "set", "--max-usd", "1.00", "--window", "24h").code == 0
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "claude.out").write_text(CLAUDE_040)
    (bindir / "claude").write_text(f"#!/bin/sh\ncat >/dev/null\ndate >> work.txt\ncat '{bindir / 'claude.out'}'\n")
    (bindir / "claude").chmod(0o755)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    first_at = clk.iso
    turns = []
    for _ in range(3):
        r = run_loopx(["--agent", "claude-code", "run", "--once", "--json"], cwd=project, env=env)
        turns += json.loads(r.out)["data"]["turns"]
        clk.advance(600)
    assert [t["usage"]["cost_usd"] for t in turns] == [0.40, 0.40]
    r = cli("quota", "should-run", json=True)
    d = r.data
    assert (r.code, d["decision"], d["reason"]) == (1, "wait", "budget_usd")
    assert d["next_check_at"] == "2026-03-02T09:00:00Z" and first_at == "2026-03-01T09:00:00Z"
    assert (d["budget"]["spent_usd"], d["budget"]["max_usd"], d["budget"]["turn_usd"]) == (0.8, 1.0, 0.4)
    assert "0.80 USD of 1.00 USD" in d["message"]
    show = cli("quota", "show", json=True).data["quotas"][0]
    assert (show["spent_usd"], show["costed_runs"]) == (0.8, 2)
    assert "0.80/1.00 USD" in cli("status").out
    clk.set(datetime(2026, 3, 2, 9, 0, 1, tzinfo=UTC))
    assert cli("quota", "should-run", json=True).data["decision"] == "run"
    # raising the limit is human-only; lowering it is not
    assert cli("--agent", "bot", "quota", "set", "--max-usd", "5").code == 4
    assert run_loopx(["quota", "set", "--max-usd", "off"], cwd=project, env={"CODEX_SANDBOX": "seatbelt"}).code == 4
    assert cli("--agent", "bot", "quota", "set", "--max-usd", "0.50").code == 0
    assert Store.open(str(project)).load()["goals"]["g1"]["quota"]["max_usd"] == 0.5


def test_token_budget_waits_with_its_own_reason(project, cli, clk):
    _todo_goal(cli, n=3)
    store = Store.open(str(project))
    from loopx.kernel.policy import turn

    assert cli("quota", "set", "--max-tokens", "2500").code == 0
    for _ in range(2):
        t = turn.next_turn(store, "agent:bot")
        turn.finish(store, "agent:bot", t["run_id"], "progress",
                    report={"usage": {"total_tokens": 1000, "cost_usd": None, "input_tokens": 1000}})
        clk.advance(60)
    d = cli("quota", "should-run", json=True).data
    assert (d["decision"], d["reason"]) == ("wait", "budget_tokens")
    assert d["next_check_at"] == "2026-03-02T09:00:00Z"


@pytest.mark.parametrize("args", [["--max-usd", "lots"], ["--max-usd", "-1"], ["--max-usd", "nan"],
                                  ["--max-tokens", "1.5"], ["--host-reserve", "101"], ["--use-leftover", "soon"]])
def test_quota_set_bad_real_units(project, cli, args):
    _todo_goal(cli)
    r = cli("quota", "set", *args)
    assert r.code == 2 and "hint:" in r.err


def test_usage_needs_no_project_and_survives_damaged_caches(tmp_path, clk):
    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    _claude_folder()
    r = run_loopx(["usage", "--format", "json"], cwd=tmp_path)
    assert r.code == 0, r.err
    first = json.loads(r.out)["data"]["hosts"][0]
    from loopx import config

    cache = Path(config.data_home()) / "cache" / "usage"
    for f in cache.iterdir():  # a killed writer, a full disk, a hand edit
        f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])
    r = run_loopx(["usage", "--format", "json"], cwd=tmp_path)
    assert r.code == 0, r.err
    again = json.loads(r.out)["data"]["hosts"][0]
    assert again["windows"] == first["windows"] and again["bytes_read"] > 0  # read again from the start


def test_a_huge_codex_rollout_is_read_from_its_end_only(project, cli, clk):
    path = _codex_session(97.0, resets_at="2026-03-01T11:00:00Z")
    body = path.read_text()
    filler = json.dumps({"timestamp": "2026-03-01T08:10:00Z", "type": "response_item",
                         "payload": {"type": "message", "content": "x" * 2000}}) + "\n"
    path.write_text(filler * 10000 + body)  # 20 MB of history before the newest figure
    h = cli("usage", "--host", "codex", json=True).data["hosts"][0]
    assert h["windows"][0]["used_percent"] == 97.0
    assert 0 < h["bytes_read"] <= 256 * 1024
    assert cli("usage", "--host", "codex", json=True).data["hosts"][0]["bytes_read"] == 0


def test_the_largest_block_heuristic_says_so_when_it_gates(project, cli, clk):
    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    root = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects" / "-p"
    root.mkdir(parents=True)
    (root / "s.jsonl").write_text("\n".join([
        _line("2026-03-07T01:00:00Z", "a", "ra", 500, 500),     # a finished block of 1000
        _line("2026-03-08T11:00:00Z", "b", "rb", 600, 400),     # the active block: 1000 = 100%
    ]) + "\n")
    _todo_goal(cli)
    d = cli("--agent", "claude-code", "quota", "should-run", json=True).data
    assert d["reason"] == "host_window" and "largest block seen" in d["message"]
    assert d["next_check_at"] == "2026-03-08T16:00:00Z"


def test_the_host_of_a_turn():
    from loopx.kernel.read import hosts

    state = {"agents": {"nightly": {"kind": "codex"}, "odd": {"kind": "custom"}}}
    goal = {"id": "g1", "host": None}
    assert hosts.kinds(state, goal, "nightly") == ["codex"]          # the registered kind
    assert hosts.kinds(state, goal, "claude-code") == ["claude-code"]  # a host's own name
    assert hosts.kinds(state, goal, "odd") == ["claude-code", "codex"]  # unknown: every readable host
    assert hosts.kinds(state, dict(goal, host="gemini"), "odd") == ["gemini"]  # the goal's default host
    assert hosts.kinds(state, dict(goal, host="gemini"), None) == ["gemini"]


# ---------------------------------------------------------------- a FIFO among a host's files
@pytest.mark.parametrize("host", ["claude-code", "codex"])
def test_a_fifo_named_like_a_session_file_is_skipped_never_waited_on(project, cli, clk, host):
    """A FIFO named like a host's session file (``*.jsonl`` under Claude Code's projects,
    ``rollout-*.jsonl`` under Codex's sessions: folders the host's agent writes). A plain ``open()``
    of it waited for a writer forever, so should-run (cron's, a hook's), ``status`` and ``usage``
    hung. It is skipped like any unreadable file, and the real files beside it still count."""
    _todo_goal(cli)
    if host == "claude-code":
        clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
        _claude_folder()
        fifo = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects" / "-home-u-proj1" / "zzz.jsonl"
    else:
        real = _codex_session(97.0, resets_at="2026-03-01T11:00:00Z")
        fifo = real.parent / "rollout-2026-03-01T08-59-30-0199ffff.jsonl"  # the newest: read first
    os.mkfifo(fifo)
    env = {"LOOPX_AGENT": host}
    for args in (["quota", "should-run"], ["status"]):
        r = run_loopx(args, cwd=project, env=env, timeout=30)
        assert r.code in (0, 1) and "Traceback" not in r.err, (args, r.code, r.err)
    r = run_loopx(["usage", "--host", host, "--format", "json"], cwd=project, env=env, timeout=30)
    assert r.code == 0, r.err
    h = json.loads(r.out)["data"]["hosts"][0]
    if host == "claude-code":
        assert h["windows"][0]["tokens"] == 2290 and h["files"] == 5  # the FIFO is listed, never read
    else:
        assert [w["used_percent"] for w in h["windows"]] == [97.0, 40.0]


def test_a_fifo_at_a_usage_cache_is_no_cache(project, cli, clk):
    """The usage readers' own caches (``$LOOPX_HOME/cache/usage/``: the quick answers and the
    counted messages) as FIFOs are no caches: the answer is counted again, never waited on."""
    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    _claude_folder()
    _codex_session(50.0, resets_in=3600)
    assert _claude(cli)["windows"][0]["tokens"] == 2290
    assert cli("usage", "--host", "codex").code == 0
    folder = Path(os.environ["LOOPX_HOME"]) / "cache" / "usage"
    caches = sorted(p for p in folder.iterdir() if p.is_file())
    assert len(caches) >= 3, caches  # Claude's state and quick answer, Codex's answer
    for p in caches:
        p.unlink()
        os.mkfifo(p)
    for host in ("claude-code", "codex"):
        r = run_loopx(["usage", "--host", host, "--format", "json"], cwd=project, timeout=30)
        assert r.code == 0 and "Traceback" not in r.err, (host, r.err)
        h = json.loads(r.out)["data"]["hosts"][0]
        assert h["known"] and (host == "codex" or h["windows"][0]["tokens"] == 2290), h


def test_a_sparse_transcript_without_newlines_is_skipped_in_linear_time(project, cli, clk):
    """A 1 GiB sparse file named like a transcript (no disk space, no newline: an agent makes one in
    no time): its pieces were joined to every new chunk, the square of its size, so the scan never
    ended and every should-run and stop hook hung. Now it is one bad line, skipped across its hole."""
    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    _claude_folder()
    with open(Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects" / "-home-u-proj2" / "sparse.jsonl", "wb") as fh:
        fh.truncate(1 << 30)
    r = run_loopx(["usage", "--host", "claude-code", "--format", "json"], cwd=project, timeout=60)
    assert r.code == 0, r.err
    h = json.loads(r.out)["data"]["hosts"][0]
    assert h["windows"][0]["tokens"] == 2290 and h["skipped_lines"] == 2 and h["files"] == 5, h
    assert h["bytes_read"] < 200 << 20  # up to the longest line kept, then the hole is skipped
    r = run_loopx(["--agent", "claude-code", "quota", "should-run"], cwd=project, timeout=30)
    assert r.code in (0, 1), r.err


def test_a_line_past_the_limit_is_one_bad_line_and_what_follows_counts(project, cli, clk, monkeypatch):
    from loopx.usage import claudescan

    monkeypatch.setattr(claudescan, "MAX_LINE", 1000)
    monkeypatch.setattr(claudescan, "READ_CHUNK", 256)
    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    _claude_folder()
    long = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects" / "-home-u-proj2" / "long.jsonl"
    # the lines after it fill more than a file object's read-ahead (8 KiB): a skip that moved the
    # descriptor under a buffered reader read bytes twice (a reviewer's finding)
    after = "".join(_line("2026-03-08T12:00:00Z", f"msg_l{i}", f"req_l{i}", 7, 3) + "\n" for i in range(400))
    long.write_text("x" * 5000 + "\n" + after)
    h = _claude(cli)
    assert h["windows"][0]["tokens"] == 2290 + 4000 and h["skipped_lines"] == 2, h


def test_a_scan_stopped_by_its_budget_goes_on_at_the_next_check_to_the_same_totals(project, cli, clk, monkeypatch):
    """``MAX_SCAN`` bytes a call: a file it stops in (at the end of the line it was reading, here with
    64-byte reads) is read on from there at the next check, and the quick answer is not kept
    meanwhile; the totals end as one unbounded scan gives them."""
    from loopx.usage import claudescan

    clk.set(datetime(2026, 3, 8, 12, 30, tzinfo=UTC))
    _claude_folder()
    monkeypatch.setattr(claudescan, "READ_CHUNK", 64)
    monkeypatch.setattr(claudescan, "MAX_SCAN", 1)  # one read a call
    seen = []
    for _ in range(200):
        h = _claude(cli)
        seen.append(h["bytes_read"])
        if h["bytes_read"] == 0:
            break
    assert len(seen) > 3 and seen[-1] == 0, seen  # several partial calls, then the quick answer
    # each call stops after the line it was in when the budget ran out (a line is under 400 bytes
    # here): a check made only between whole chunks let a call read on to the end of the file
    assert max(seen) <= 400 + 64, seen
    assert h["windows"][0]["tokens"] == 2290 and h["windows"][1]["tokens"] == 4790 and h["skipped_lines"] == 1, h
