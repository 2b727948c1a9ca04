"""Issue 14, acceptance 1 and 5: turns report what they cost, and a host that cannot work is a
setup problem for a human, scoped to its agent.

Fake ``claude``, ``codex``, ``gemini`` and ``cursor-agent`` executables print the shapes the real
CLIs print (docs/usage.md records the verified ones), and ``loopx run`` drives them as real
processes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import run_loopx
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="fake hosts are shell scripts")


def _goal(cli, todos=("first", "second")):
    args = ["start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--verify", "test -f done.txt"]
    for t in todos:
        args += ["--todo", t]
    assert cli(*args).code == 0
    assert cli("goal", "update", "g1", "--permission-mode", "edit").code == 0


def _host(bindir: Path, name: str, stdout: str, code: int = 0, touch: bool = True, hang: bool = False) -> None:
    """A fake host: swallows the packet, maybe makes the verified change, prints ``stdout``."""
    bindir.mkdir(exist_ok=True)
    out = bindir / f"{name}.out"
    out.write_text(stdout)
    exe = bindir / name
    exe.write_text("#!/bin/sh\ncat >/dev/null\n" + ("touch done.txt\n" if touch else "") + f"cat '{out}'\n"
                   + ("sleep 120 & wait\n" if hang else "") + f"exit {code}\n")
    exe.chmod(0o755)


def _run(project, bindir, preset, *extra, timeout="5m"):
    # the fake hosts write what they saw beside the project: a folder the sandbox must let them write
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "LOOPX_SANDBOX_WRITE": str(project.parent)}
    r = run_loopx(["--agent", preset, "run", "--once", "--timeout", timeout, "--json", *extra], cwd=project, env=env,
                  timeout=120)
    assert r.err == "" or "Traceback" not in r.err, r.err
    return r, json.loads(r.out)


def _run_record(project, run_id):
    return Store.open(str(project)).load()["runs"][run_id]


CLAUDE_OK = json.dumps({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 2100,
                        "num_turns": 3, "result": "Done.", "session_id": "5f0c-claude", "total_cost_usd": 0.4213,
                        "usage": {"input_tokens": 120, "cache_creation_input_tokens": 2000,
                                  "cache_read_input_tokens": 15000, "output_tokens": 800,
                                  "service_tier": "standard"},
                        "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 120, "outputTokens": 800,
                                                             "costUSD": 0.4213}}})
CLAUDE_ERR = json.dumps({"type": "result", "subtype": "error_during_execution", "is_error": True, "num_turns": 1,
                         "result": "Tool execution failed badly", "session_id": "s-err", "total_cost_usd": 0.05,
                         "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 0}})
CODEX_OK = "\n".join(json.dumps(x) for x in (
    {"type": "thread.started", "thread_id": "0199-codex-thread"}, {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "done"}},
    {"type": "turn.completed", "usage": {"input_tokens": 24000, "cached_input_tokens": 20000, "output_tokens": 900}}))
CODEX_ERR = "\n".join(json.dumps(x) for x in (
    {"type": "thread.started", "thread_id": "t-2"}, {"type": "turn.started"},
    {"type": "turn.failed", "error": {"message": "unexpected status 500 Internal Server Error"}}))
GEMINI_OK = json.dumps({"session_id": "g-1", "response": "ok", "stats": {"models": {"gemini-2.5-pro": {
    "api": {"totalRequests": 2}, "tokens": {"prompt": 9000, "candidates": 300, "total": 9350, "cached": 4000,
                                            "thoughts": 50, "tool": 0}}}}}, indent=2)
GEMINI_ERR = json.dumps({"session_id": "g-2", "error": {"type": "ApiError", "message": "Internal error", "code": 500}},
                        indent=2)
CURSOR_OK = json.dumps({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 900,
                        "result": "ok", "session_id": "c-1", "request_id": "r-1"})
CURSOR_ERR = json.dumps({"type": "result", "subtype": "error", "is_error": True, "result": "model crashed",
                         "session_id": "c-2"})


@pytest.mark.parametrize("preset,exe,stdout,code,expect", [
    ("claude-code", "claude", CLAUDE_OK, 0,
     {"input_tokens": 120, "output_tokens": 800, "cache_read_tokens": 15000, "cache_write_tokens": 2000,
      "total_tokens": 17920, "cost_usd": 0.4213, "model": "claude-sonnet-4-5", "session_id": "5f0c-claude",
      "num_turns": 3}),
    ("codex", "codex", CODEX_OK, 0,
     {"input_tokens": 4000, "output_tokens": 900, "cache_read_tokens": 20000, "cache_write_tokens": None,
      "total_tokens": 24900, "cost_usd": None, "session_id": "0199-codex-thread"}),
    ("gemini", "gemini", GEMINI_OK, 0,
     {"input_tokens": 5000, "output_tokens": 350, "cache_read_tokens": 4000, "total_tokens": 9350,
      "cost_usd": None, "model": "gemini-2.5-pro", "session_id": "g-1"}),
])
def test_success_records_tokens_and_cost(project, cli, tmp_path, preset, exe, stdout, code, expect):
    _goal(cli)
    bindir = tmp_path / "bin"
    _host(bindir, exe, stdout, code)
    r, doc = _run(project, bindir, preset)
    assert r.code == 0, r.out + r.err
    t = doc["data"]["turns"][0]
    assert t["result"] == "completion" and t["verified"] and t["setup_error"] is None
    for k, v in expect.items():
        assert t["usage"][k] == v, k
    run = _run_record(project, t["run_id"])
    assert run["usage"] == t["usage"] and run["host"] == preset and run["permission_mode"] == "edit"
    assert run["wall_time"] == t["agent_duration"] and t["duration"] >= t["agent_duration"]  # the host's part of the turn
    hist = cli("history", "--rounds", json=True).data["rounds"]
    row = next(x for x in hist if x.get("run_id") == t["run_id"])
    assert row["usage"]["total_tokens"] == expect["total_tokens"] and row["permission_mode"] == "edit"
    text = cli("history", "--rounds").out
    assert f"{expect['total_tokens']:,}" in text


@pytest.mark.parametrize("preset,exe,stdout", [
    ("claude-code", "claude", CLAUDE_ERR), ("codex", "codex", CODEX_ERR), ("gemini", "gemini", GEMINI_ERR),
    ("cursor", "cursor-agent", CURSOR_ERR)])
def test_error_result_is_a_crashed_host_with_its_message(project, cli, tmp_path, preset, exe, stdout):
    _goal(cli)
    bindir = tmp_path / "bin"
    _host(bindir, exe, stdout, code=1, touch=False)
    r, doc = _run(project, bindir, preset)
    assert r.code == 1
    t = doc["data"]["turns"][0]
    assert t["result"] == "failed" and t["setup_error"]["reason"] == "host_crashed"
    run = _run_record(project, t["run_id"])
    assert run["setup_error"]["message"] in ("Tool execution failed badly", "unexpected status 500 Internal Server Error",
                                             "Internal error", "model crashed")
    if preset == "claude-code":  # a failed turn still cost money: recorded
        assert run["usage"]["cost_usd"] == 0.05


@pytest.mark.parametrize("preset,exe", [("claude-code", "claude"), ("codex", "codex"), ("gemini", "gemini"),
                                        ("cursor", "cursor-agent")])
def test_malformed_report_is_usage_unknown_never_a_crash(project, cli, tmp_path, preset, exe):
    _goal(cli)
    bindir = tmp_path / "bin"
    _host(bindir, exe, '{"type": "result", "usage": {"input_tokens": 12, "outp', 0)
    r, doc = _run(project, bindir, preset)
    assert r.code == 0, r.out + r.err
    t = doc["data"]["turns"][0]
    assert t["usage"] is None and t["result"] == "completion"
    assert "usage unknown" in cli("history", "--rounds").out or "?" in cli("history", "--rounds").out
    assert _run_record(project, t["run_id"])["usage"] is None  # unknown, never 0
    assert Store.open(str(project)).load()["costs"] == {}


def test_cursor_success_without_usage_says_unknown(project, cli, tmp_path):
    _goal(cli)
    bindir = tmp_path / "bin"
    _host(bindir, "cursor-agent", CURSOR_OK, 0)
    r, doc = _run(project, bindir, "cursor")
    t = doc["data"]["turns"][0]
    assert r.code == 0 and t["usage"] is None and t["result"] == "completion"


def test_changes_of_the_turn_are_recorded(project, cli, tmp_path):
    import subprocess

    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    for k, v in (("user.email", "t@example.com"), ("user.name", "t")):
        subprocess.run(["git", "config", k, v], cwd=project, check=True)
    (project / "a.txt").write_text("one\n")
    subprocess.run(["git", "add", "a.txt"], cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=project, check=True)
    _goal(cli)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "claude.out").write_text(CLAUDE_OK)
    (bindir / "claude").write_text(
        "#!/bin/sh\ncat >/dev/null\nprintf 'one\\ntwo\\nthree\\n' > a.txt\ngit add a.txt\n"
        "git commit -qm change\ntouch done.txt\n" f"cat '{bindir / 'claude.out'}'\n")
    (bindir / "claude").chmod(0o755)
    r, doc = _run(project, bindir, "claude-code")
    t = doc["data"]["turns"][0]
    c = t["changes"]
    assert c["commit_count"] == 1 and c["files"] == 1 and (c["added"], c["removed"]) == (2, 0)


def test_a_preset_needs_a_permission_mode(project, cli, tmp_path):
    assert cli("start-goal", "--goal-text", "x", "--goal-id", "g1", "--todo", "a").code == 0
    bindir = tmp_path / "bin"
    _host(bindir, "claude", CLAUDE_OK)
    _host(bindir, "cursor-agent", CURSOR_OK)
    r = run_loopx(["--agent", "claude-code", "run", "--once"], cwd=project,
                  env={"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    assert r.code == 2 and "permission mode" in r.err and "hint:" in r.err
    r = run_loopx(["--agent", "cursor", "run", "--once", "--permission-mode", "read-only"], cwd=project,
                  env={"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    assert r.code == 2 and "no read-only setting" in r.err


@pytest.mark.parametrize("disguise", [{"LOOPX_AGENT": "bot"}, {"CLAUDECODE": "1"}, {"CODEX_THREAD_ID": "t"}])
def test_permission_mode_is_human_only(project, cli, tmp_path, disguise):
    assert cli("start-goal", "--goal-text", "x", "--goal-id", "g1", "--todo", "a").code == 0
    r = run_loopx(["goal", "update", "g1", "--permission-mode", "full"], cwd=project, env=disguise)
    assert r.code == 4 and "human" in r.err
    r = run_loopx(["--agent", "claude-code", "run", "--once", "--permission-mode", "full"], cwd=project, env=disguise)
    assert r.code == 4 and "human" in r.err
    r = run_loopx(["--agent", "bot", "goal", "update", "g1", "--permission-mode", "full"], cwd=project)
    assert r.code == 4
    assert Store.open(str(project)).load()["goals"]["g1"].get("permission_mode") is None


def test_packet_header_names_the_permission_mode(project, cli, tmp_path):
    _goal(cli)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "claude.out").write_text(CLAUDE_OK)
    (bindir / "claude").write_text(f"#!/bin/sh\nprintf '%s' \"$2\" > '{tmp_path / 'packet.txt'}'\ntouch done.txt\n"
                                   f"cat '{bindir / 'claude.out'}'\n")
    (bindir / "claude").chmod(0o755)
    _run(project, bindir, "claude-code", "--permission-mode", "read-only")
    assert "permissions read-only" in (tmp_path / "packet.txt").read_text().splitlines()[0]


# ---------------------------------------------------------------- acceptance 5: hosts that cannot work
FAILURES = [
    # (preset, exe, stdout, exit, hang, reason, message part) - the real CLIs' behaviour, run offline
    ("claude-code", "claude", "Not logged in · Please run /login", 1, False, "host_not_logged_in", "Not logged in"),
    ("claude-code", "claude", json.dumps({"type": "result", "subtype": "success", "is_error": True,
                                          "result": "Not logged in · Please run /login", "total_cost_usd": 0,
                                          "usage": {"input_tokens": 0, "output_tokens": 0}}), 1, False,
     "host_not_logged_in", "Please run /login"),
    ("gemini", "gemini", json.dumps({"session_id": "x", "error": {
        "type": "Error", "message": "Please set an Auth method in your /home/u/.gemini/settings.json or specify one "
                                    "of the following environment variables before running: GEMINI_API_KEY",
        "code": 41}}, indent=2), 41, False, "host_not_logged_in", "Auth method"),
    ("codex", "codex", "\n".join(json.dumps(x) for x in (
        {"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
        {"type": "error", "message": "Reconnecting... 2/5 (stream disconnected before completion: failed to lookup "
                                     "address information: Name does not resolve)"},
        {"type": "error", "message": "Reconnecting... waiting for network (Connection failed: error sending request)"}
    )), 0, True, "host_offline", "waiting for network"),
    ("claude-code", "claude", "Claude AI usage limit reached|1772366400", 1, False, "host_rate_limited",
     "usage limit"),
    ("claude-code", "claude", "", 0, True, "host_timed_out", "time limit"),
    ("claude-code", "claude", "", 0, False, "host_idle", "without any output"),
    ("opencode", "opencode", "Segmentation fault", 139, False, "host_crashed", "Segmentation fault"),
    ("codex", "codex", "Not inside a trusted directory and --skip-git-repo-check was not specified.", 1, False,
     "host_crashed", "trusted directory"),
]


def _pi_like(bindir):
    """A host that prints a login hint and exits 0 (Pi's behaviour), driven as a custom command."""
    exe = bindir / "pi"
    exe.write_text("#!/bin/sh\ncat >/dev/null\necho 'No API key found. Run /login or set ANTHROPIC_API_KEY'\nexit 0\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.parametrize("preset,exe,stdout,code,hang,reason,part", FAILURES,
                         ids=[f"{f[0]}-{f[5]}" for f in FAILURES])
def test_host_failure_is_classified_for_a_human_and_scoped_to_its_agent(project, cli, clk, tmp_path, preset, exe,
                                                                        stdout, code, hang, reason, part):
    _goal(cli)
    bindir = tmp_path / "bin"
    _host(bindir, exe, stdout, code, touch=False, hang=hang)
    r, doc = _run(project, bindir, preset, timeout="2s" if hang else "5m")
    assert r.code == 1
    t = doc["data"]["turns"][0]
    assert t["result"] == "failed" and t["setup_error"]["reason"] == reason, t
    assert part in t["setup_error"]["message"]
    if reason == "host_rate_limited":
        assert t["setup_error"]["reset_at"] == "2026-03-01T12:00:00Z"
    _assert_needs_human_and_scoped(project, cli, preset, reason, part)


def test_login_hint_with_exit_0_is_not_logged_in(project, cli, tmp_path):
    _goal(cli)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    cmd = _pi_like(bindir)
    r = run_loopx(["--agent", "pi", "run", "--once", "--agent-cmd", cmd, "--json"], cwd=project)
    t = json.loads(r.out)["data"]["turns"][0]
    assert r.code == 1 and t["setup_error"]["reason"] == "host_not_logged_in"
    assert "Run /login" in t["setup_error"]["message"]
    _assert_needs_human_and_scoped(project, cli, "pi", "host_not_logged_in", "/login")


def _assert_needs_human_and_scoped(project, cli, agent, reason, part):
    mine = cli("--agent", agent, "quota", "should-run", json=True)
    d = mine.data
    assert mine.code == 1 and d["reason"] == reason and part in d["message"]
    assert d["decision"] == ("wait" if reason == "host_rate_limited" else "wait_human")
    assert d["next_check_at"]
    other = cli("--agent", "other-bot", "quota", "should-run", json=True)  # another agent is unaffected
    assert other.code == 0 and other.data["decision"] == "run", other.data
    assert cli("quota", "should-run", json=True).data["decision"] == "run"  # not "skip no_change"
    st = cli("status", json=True).data
    assert reason in json.dumps(st) and part.split()[0] in json.dumps(st)


def test_host_error_clears_after_its_retry_time_and_after_a_working_turn(project, cli, tmp_path, monkeypatch):
    from datetime import UTC, datetime

    from conftest import Clock

    clk = Clock(monkeypatch, datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    _goal(cli)
    bindir = tmp_path / "bin"
    _host(bindir, "claude", "Not logged in · Please run /login", 1, touch=False)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "LOOPX_NOW": clk.iso}
    run_loopx(["--agent", "claude-code", "run", "--once", "--json"], cwd=project, env=env)
    assert cli("--agent", "claude-code", "quota", "should-run", json=True).data["reason"] == "host_not_logged_in"
    clk.advance(60)
    assert cli("goal", "update", "g1", "--priority", "1").code == 0  # a human says "fixed": try again at once
    assert cli("--agent", "claude-code", "quota", "should-run", json=True).data["decision"] == "run"
    assert cli("goal", "update", "g1", "--priority", "0").code == 0
    env["LOOPX_NOW"] = clk.advance(60)
    run_loopx(["--agent", "claude-code", "run", "--once", "--json"], cwd=project, env=env)
    assert cli("--agent", "claude-code", "quota", "should-run", json=True).data["reason"] == "host_not_logged_in"
    clk.advance(6 * 3600 + 1)  # the host's state can have changed: try again
    assert cli("--agent", "claude-code", "quota", "should-run", json=True).data["decision"] == "run"
    _host(bindir, "claude", CLAUDE_OK, 0)
    env["LOOPX_NOW"] = clk.iso
    r = run_loopx(["--agent", "claude-code", "run", "--once", "--json"], cwd=project, env=env)
    assert r.code == 0, r.out
    assert Store.open(str(project)).load()["host_errors"] == {}


def test_every_turn_has_a_default_time_limit_stated_in_help(project, cli):
    r = cli("run", "--help")
    assert "default 30m" in r.out
    from loopx.commands import run as runmod

    assert runmod.DEFAULT_TIMEOUT == 1800


def test_report_parsers_never_raise_on_odd_output():
    from loopx.runner import report

    odd = ["", "null", "[]", '{"type": "result", "usage": []}', '{"usage": {"input_tokens": -5}}',
           '{"stats": {"models": {"m": {"tokens": "x"}}}}', "\x00\xff garbage", '{"type":"turn.completed","usage":7}',
           '{"type": "step_finish", "part": {"tokens": {"input": "a"}}}', "{" * 5000]
    for name in report.PARSERS:
        for text in odd:
            out = report.parse(name, text)
            assert set(out) == {"usage", "is_error", "error", "text", "malformed"}
            assert out["usage"] is None or out["usage"]["total_tokens"] is not None


def test_opencode_and_pi_usage_shapes_are_read():
    from loopx.runner import report

    oc = "\n".join(json.dumps(x) for x in (
        {"type": "step_start", "sessionID": "ses_1", "part": {"type": "step-start"}},
        {"type": "step_finish", "sessionID": "ses_1", "part": {"type": "step-finish", "cost": 0.012,
                                                               "tokens": {"input": 100, "output": 20, "reasoning": 5,
                                                                          "cache": {"read": 1000, "write": 50}}}},
        {"type": "step_finish", "sessionID": "ses_1", "part": {"type": "step-finish", "cost": 0.003,
                                                               "tokens": {"input": 10, "output": 2, "reasoning": 0,
                                                                          "cache": {"read": 0, "write": 0}}}}))
    u = report.parse("opencode-jsonl", oc)["usage"]
    assert (u["input_tokens"], u["output_tokens"], u["cache_read_tokens"], u["cache_write_tokens"]) == (110, 27, 1000, 50)
    assert abs(u["cost_usd"] - 0.015) < 1e-9 and u["session_id"] == "ses_1"
    pi = json.dumps({"type": "message_end", "message": {"role": "assistant", "model": "claude-x", "usage": {
        "input": 7, "output": 3, "cacheRead": 100, "cacheWrite": 0, "cost": {"total": 0.002}}}})
    u = report.parse("pi-jsonl", pi)["usage"]
    assert (u["total_tokens"], u["cost_usd"], u["model"]) == (110, 0.002, "claude-x")
    assert sys.maxsize  # keep the import used on every platform


def test_a_plain_argv_preset_still_works(monkeypatch, tmp_path):
    from loopx.runner import presets

    monkeypatch.setitem(presets.PRESETS, "pi", ["pi", "-p", "{packet}"])
    exe = tmp_path / "pi"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert presets.argv_for("pi", "PKT", "/f", "edit") == ["pi", "-p", "PKT"]
    assert presets.spec("pi")["report"] is None
    with pytest.raises(Exception, match="no read-only setting"):
        presets.argv_for("pi", "PKT", "/f", "read-only")


def test_outcome_does_not_misread_a_working_turn():
    from datetime import UTC, datetime

    from loopx.runner import outcome, report

    now = datetime(2026, 3, 1, tzinfo=UTC)
    ok = report.parse("claude-json", CLAUDE_OK)
    # a successful report that talks about rate limits or logins is still a successful turn
    assert outcome.classify(0, False, CLAUDE_OK + "\nfixed the rate limit and the please log in page", ok,
                            preset="claude-code", now=now) is None
    # a custom command that changed files and mentions a login page worked
    assert outcome.classify(0, False, "updated the 'please log in' banner", report.parse(None, ""), preset=None,
                            now=now, changed=True) is None
    # a custom command that fails for its own reasons is not a host problem
    assert outcome.classify(3, False, "assertion failed", report.parse(None, ""), preset=None, now=now) is None
    for text, when in (("Claude AI usage limit reached|1772366400", "2026-03-01T12:00:00Z"),
                       ("You've hit your usage limit. Try again in 2 hours 5 minutes.", "2026-03-01T02:05:00Z"),
                       ("rate limited; resets at 2026-03-01T06:30:00Z", "2026-03-01T06:30:00Z")):
        got = outcome.classify(1, False, text, report.parse(None, ""), preset="codex", now=now)
        assert (got["reason"], got["reset_at"]) == ("host_rate_limited", when), text


def test_dashboard_puts_a_host_failure_under_needs_you_with_its_message(project, cli, tmp_path):
    from loopx.dashboard.api import Api, project_key
    from loopx.kernel.storage import clock

    _goal(cli)
    bindir = tmp_path / "bin"
    _host(bindir, "claude", "Not logged in · Please run /login", 1, touch=False)
    r, _doc = _run(project, bindir, "claude-code")
    assert r.code == 1
    api = Api()
    now = clock.now_iso()
    (p,) = [x for x in api.status(now)["projects"] if x["key"] == project_key(str(project))]
    (g,) = p["goals"]
    # the row renders should-run's answer without an agent (a host error is the failed agent's,
    # issue 21: every client says the same); the failure is detail on the row and the goal page
    sr = cli("quota", "should-run", "--goal-id", "g1", "--no-record", json=True).data
    assert (g["decision"], g["decision_reason"]) == (sr["decision"], sr["reason"])
    assert g["host_errors"][0]["reason"] == "host_not_logged_in" and "Not logged in" in g["host_errors"][0]["message"]
    page = api.goal(p["key"], "g1", now)
    run = page["runs"][0]
    assert run["setup_error"]["reason"] == "host_not_logged_in" and run["host"] == "claude-code"
    assert run["permission_mode"] == "edit" and run["usage"] is None  # plain text output: usage unknown


def test_review_packet_and_status_show_what_turns_cost(project, cli, tmp_path):
    _goal(cli)
    bindir = tmp_path / "bin"
    _host(bindir, "claude", CLAUDE_OK, 0)
    r, _doc = _run(project, bindir, "claude-code")
    assert r.code == 0
    md = cli("review-packet").out
    assert "Reported cost of the period: 0.42 USD, 17,920 tokens." in md
    assert "17,920 tokens, 0.42 USD (claude-sonnet-4-5)" in md
    st = cli("status").out
    assert "0.42 USD" in st and "17,920 tokens" in st
    data = cli("review-packet", json=True).data
    assert data["rounds"]["cost_usd"] == 0.4213 and data["rounds"]["usage_unknown"] == 0


def test_schedule_names_the_missing_permission_mode(project, cli):
    assert cli("start-goal", "--goal-text", "x", "--goal-id", "g1", "--todo", "a").code == 0
    r = cli("--agent", "codex", "schedule", "--cron", json=True)
    assert r.code == 0 and any("permission mode" in n for n in r.data["notes"])
    assert cli("goal", "update", "g1", "--permission-mode", "edit").code == 0
    r = cli("--agent", "codex", "schedule", "--cron", json=True)
    assert not any("permission mode" in n for n in r.data["notes"])


@pytest.mark.parametrize("preset,exe,takes_stdin", [("gemini", "gemini", False), ("claude-code", "claude", False),
                                                    ("codex", "codex", True)])
def test_the_packet_reaches_the_host_once(project, cli, tmp_path, preset, exe, takes_stdin):
    """Hosts append piped stdin to their ``-p`` prompt: a preset that passes the packet as an
    argument gets an empty stdin, one that reads the prompt from stdin (``codex exec -``) gets it there."""
    _goal(cli)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    seen = tmp_path / "stdin.txt"
    (bindir / exe).write_text(f"#!/bin/sh\ncat > '{seen}'\ntouch done.txt\necho '{CLAUDE_OK}'\n")
    (bindir / exe).chmod(0o755)
    r, _ = _run(project, bindir, preset)
    got = seen.read_text()
    assert ("GOAL" in got or "g1" in got) if takes_stdin else got == "", got[:200]
