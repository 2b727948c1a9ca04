"""Issue 23, item 7: a host that only retries is stopped and classified from its own retry lines
(not at the turn's timeout), a 529 "Overloaded" is a short wait rather than "needs you", and a model
without a price costs "unknown", never 0.00 USD.

The lines below are what the real CLIs print (captured against tests/scripted_model.py with the
endpoint down or answering 429; tests/test_real_hosts.py drives the real CLIs themselves). The fake
hosts here print them and then wait for ever: only the runner's retry watch ends the turn."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_loopx
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="fake hosts are shell scripts")

GEMINI_429 = ('Attempt {n} failed with status 429. Retrying with backoff... _ApiError: {{"error":{{"message":'
              '"Rate limit reached; try again in 20s","type":"rate_limit_exceeded","code":429,'
              '"status":"RESOURCE_EXHAUSTED"}}}}')
GEMINI_DOWN = "Attempt {n} failed. Retrying with backoff... Error: exception TypeError: fetch failed sending request"
OPENCODE_DOWN = ('timestamp=2026-12-02T02:19:45.406Z level=ERROR run=61a24f65 message="stream error" providerID=fake '
                 'modelID=m1 session.id=ses_1 small=false agent=build mode=primary error.error="AI_APICallError: '
                 'Cannot connect to API: Unable to connect. Is the computer able to access the url? (cause: Error: '
                 'Unable to connect. Is the computer able to access the url?)"')
OPENCODE_429 = ('timestamp=2026-12-02T02:19:45.836Z level=ERROR run=bcb1c36b message="stream error" providerID=fake '
                'modelID=m1 session.id=ses_1 small=false agent=build mode=primary error.error="AI_APICallError: '
                'Rate limit reached; try again in 20s"')
STACK = "    at throwErrorIfNotOK (file:///x/bundle/chunk.js:267833:24)"


# ------------------------------------------------------------------ the watch itself
def _watch(rules, text: str):
    from loopx.runner.process import RetryWatch

    w = RetryWatch(rules)
    data = text.encode()
    for i in range(0, len(data), 7):  # lines arrive in pieces
        w.feed(data[i:i + 7])
    return w


def test_gemini_is_given_up_on_at_its_third_attempt_line_not_before():
    from loopx.runner import presets

    rules = presets.retrying("gemini")
    two = "\n".join(GEMINI_429.format(n=n) + "\n" + STACK for n in (1, 2)) + "\n"
    assert not _watch(rules, two).hit
    w = _watch(rules, two + GEMINI_429.format(n=3) + "\n")
    assert w.hit and "Attempt 3" in w.lines[-1]


def test_opencode_retry_lines_count_in_a_row_and_a_json_event_starts_again():
    from loopx.runner import presets

    rules = presets.retrying("opencode")
    progress = json.dumps({"type": "step_finish", "part": {"type": "step-finish"}})
    assert not _watch(rules, "\n".join([OPENCODE_DOWN, OPENCODE_DOWN, progress, OPENCODE_DOWN, OPENCODE_DOWN, ""])).hit
    assert _watch(rules, "\n".join([OPENCODE_DOWN] * 3 + [""])).hit


def test_codex_gives_up_at_its_first_waiting_for_network_line():
    from loopx.runner import presets

    line = json.dumps({"type": "error", "message": "Reconnecting... waiting for network (Connection failed)"})
    assert _watch(presets.retrying("codex"), line + "\n").hit


@pytest.mark.parametrize("lines, reason, words, reset", [
    ([GEMINI_429.format(n=n) for n in (1, 2, 3)], "host_rate_limited", "Rate limit reached; try again in 20s", True),
    ([GEMINI_DOWN.format(n=n) for n in (1, 2, 3)], "host_offline", "fetch failed", False),
    ([OPENCODE_429] * 3, "host_rate_limited", "AI_APICallError: Rate limit reached; try again in 20s", True),
    ([OPENCODE_DOWN] * 3, "host_offline", "Unable to connect", False),
    (['level=ERROR message="stream error" error.error="AI_APICallError: Overloaded"'] * 3, "host_overloaded",
     "Overloaded", False),
    (['level=ERROR message="stream error" error.error="AI_APICallError: Bad Gateway"'] * 3, "host_offline",
     "Bad Gateway", False),
])
def test_a_host_that_only_retried_is_classified_from_its_retry_lines(lines, reason, words, reset):
    from datetime import UTC, datetime

    from loopx.runner import outcome

    now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    # the whole output also holds an unrelated start-up error: the retry lines decide
    got = outcome.classify(-15, False, "Failed to fetch models.dev: Unable to connect\n" + "\n".join(lines), None,
                           preset="gemini", now=now, retry_lines=lines)
    assert got["reason"] == reason and words in got["message"], got
    assert (got["reset_at"] == "2026-03-01T09:00:20Z") if reset else got["reset_at"] is None


# ------------------------------------------------------------------ through `loopx run`
def _goal(cli):
    assert cli("start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--todo", "one").code == 0
    assert cli("goal", "update", "g1", "--permission-mode", "full").code == 0


def _retrying_host(bindir: Path, name: str, lines: list[str]) -> None:
    """A host that prints its retry lines on stderr and then waits for ever (as the real one does)."""
    bindir.mkdir(exist_ok=True)
    (bindir / f"{name}.err").write_text("".join(x + "\n" + STACK + "\n" for x in lines))
    exe = bindir / name
    exe.write_text(f"#!/bin/sh\ncat '{bindir / (name + '.err')}' >&2\nexec sleep 600\n")
    exe.chmod(0o755)


def _run(project, bindir, agent):
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "LOOPX_SANDBOX_WRITE": str(project.parent)}
    r = run_loopx(["--agent", agent, "run", "--once", "--timeout", "10m", "--json"], cwd=project, env=env, timeout=300)
    assert "Traceback" not in r.err, r.err
    return r, json.loads(r.out)["data"]["turns"][0]


@pytest.mark.parametrize("agent, exe, lines, reason, decision", [
    ("gemini", "gemini", [GEMINI_429.format(n=n) for n in (1, 2, 3)], "host_rate_limited", "wait"),
    ("opencode", "opencode", [OPENCODE_DOWN] * 3, "host_offline", "wait_human"),
])
def test_loopx_run_stops_a_host_that_only_retries_and_records_why(project, cli, tmp_path, agent, exe, lines, reason,
                                                                 decision):
    _goal(cli)
    _retrying_host(tmp_path / "bin", exe, lines)
    r, turn = _run(project, tmp_path / "bin", agent)
    assert r.code == 1 and not turn["timed_out"], turn  # stopped by the watch, long before the 10 minutes
    assert turn["setup_error"]["reason"] == reason, turn["setup_error"]
    d = cli("--agent", agent, "quota", "should-run", json=True).data
    assert (d["decision"], d["reason"]) == (decision, reason), d


CLAUDE_529 = json.dumps({"type": "result", "subtype": "success", "is_error": True, "api_error_status": 529,
                         "num_turns": 1, "session_id": "s-529", "total_cost_usd": 0,
                         "result": "API Error: 529 Overloaded. This is a server-side issue, usually temporary — try "
                                   "again in a moment. If it persists, check your inference gateway (127.0.0.1:4227).",
                         "usage": {"input_tokens": 0, "output_tokens": 0}})


def test_a_529_overloaded_is_a_short_wait_not_a_human_problem(project, cli, tmp_path):
    _goal(cli)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "claude.out").write_text(CLAUDE_529)
    exe = bindir / "claude"
    exe.write_text(f"#!/bin/sh\ncat >/dev/null\ncat '{bindir / 'claude.out'}'\nexit 1\n")
    exe.chmod(0o755)
    r, turn = _run(project, bindir, "claude-code")
    err = turn["setup_error"]
    assert err["reason"] == "host_overloaded" and "529 Overloaded" in err["message"], err
    d = cli("--agent", "claude-code", "quota", "should-run", json=True).data
    assert (d["decision"], d["reason"]) == ("wait", "host_overloaded") and d["next_check_at"], d
    from loopx.kernel import reasons

    st = cli("status", json=True).data
    assert "host_overloaded" in json.dumps(st)
    assert not reasons.needs_you({"decision": d["decision"], "reason": d["reason"]})  # not under NEEDS YOU


OPENCODE_UNPRICED = "\n".join(json.dumps(x) for x in (
    {"type": "step_start", "sessionID": "ses_1", "part": {"type": "step-start"}},
    {"type": "step_finish", "sessionID": "ses_1", "part": {"type": "step-finish", "cost": 0, "tokens": {
        "total": 110, "input": 100, "output": 10, "reasoning": 0, "cache": {"read": 0, "write": 0}}}}))


def test_an_unpriced_opencode_model_costs_unknown_everywhere_never_zero(project, cli, tmp_path):
    _goal(cli)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "opencode.out").write_text(OPENCODE_UNPRICED)
    exe = bindir / "opencode"
    exe.write_text(f"#!/bin/sh\ncat >/dev/null\ncat '{bindir / 'opencode.out'}'\n")
    exe.chmod(0o755)
    r, turn = _run(project, bindir, "opencode")
    run = Store.open(str(project)).load()["runs"][turn["run_id"]]
    assert run["usage"]["input_tokens"] == 100 and run["usage"]["cost_usd"] is None, run["usage"]  # the run record
    row = next(ln for ln in cli("history", "--rounds").out.splitlines() if " 110 " in ln)  # its TOKENS cell
    assert " ? " in row and "0.00" not in row, row  # and its USD cell: unknown
    st = cli("status").out
    assert "0.00 USD" not in st and "cost unknown" in st, st  # the goal's budget line
    q = cli("quota", "show").out
    assert "0.00 USD" not in q and "cost in the window: unknown" in q, q
    assert cli("quota", "show", json=True).data["quotas"][0]["unpriced_runs"] == 1
    md = cli("review-packet").out
    assert "Reported cost of the period: unknown, 110 tokens." in md, md
