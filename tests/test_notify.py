"""Notifications (issue 13, acceptance 4): a gate opened queues one webhook notification, delivered
exactly once even with two loopx processes at once; with the server down nothing blocks and the
notification is retried later, then delivered. Servers bind 127.0.0.1 only."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import subprocess_env


class Hook:
    """A local webhook receiver on 127.0.0.1 that records every POST."""

    def __init__(self, port: int = 0):
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        hook = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                hook.headers.append(dict(self.headers))
                try:
                    hook.bodies.append(json.loads(raw))
                except ValueError:
                    hook.bodies.append({"raw": raw.decode("utf-8", "replace")})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), H)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.close()


def _goal(cli):
    r = cli("start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--todo", "build", json=True)
    assert r.code == 0, r.out


def _open_gate(cli, question="Merge PR #12 into main?"):
    r = cli("--agent", "bot", "gate", "open", "--goal-id", "g1", "--kind", "merge", "--question", question, json=True)
    assert r.code == 0, r.out
    return r.data["gate_id"]


def test_gate_opened_is_delivered_exactly_once_with_two_processes(project, cli, clk, hook):
    _goal(cli)
    assert cli("notify", "set", "--webhook", hook.url).code == 0
    clk.advance(60)
    gid = _open_gate(cli)
    lst = cli("notify", "list", json=True).data
    assert lst["channels"] == ["webhook"]
    queued = [n for n in lst["notifications"] if n["type"] == "gate.opened"]
    assert len(queued) == 1 and queued[0]["deliveries"] == {}
    assert not hook.bodies  # opening the gate sent nothing itself
    env = subprocess_env({"LOOPX_NOW": clk.iso})
    procs = [subprocess.Popen([sys.executable, "-m", "loopx", "quota", "should-run", "--json"], cwd=project, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [1, 1], outs  # wait_human for the gate
    for _ in range(3):  # later ticks find it delivered and send nothing
        clk.advance(60)
        cli("quota", "should-run")
    assert len(hook.bodies) == 1
    body = hook.bodies[0]
    assert body["type"] == "gate.opened" and body["goal"] == "g1" and "Merge PR #12" in body["body"]
    assert hook.headers[0]["X-Loopx-Event"] == body["event_id"]
    hist = cli("history", "--type", "notify.", json=True).data
    events = hist.get("events") or []
    assert [e["type"] for e in events] == ["notify.delivered"]
    assert gid in cli("notify", "list").out or "gate" in cli("notify", "list").out


def test_server_down_never_blocks_and_is_retried_then_delivered(project, cli, clk):
    _goal(cli)
    h = Hook()
    port, url = h.port, h.url
    h.close()  # the server is down
    assert cli("notify", "set", "--webhook", url, "--preset", "json").code == 0
    clk.advance(60)
    _open_gate(cli)
    r = cli("quota", "should-run", json=True)
    assert r.code == 1 and r.data["decision"] == "wait_human"  # the failed delivery changes nothing
    n = cli("notify", "list", json=True).data["notifications"][0]
    d = n["deliveries"]["webhook"]
    assert d["status"] == "failed" and d["attempts"] == 1
    assert d["retry_at"] == "2026-03-01T09:01:30Z"  # 30 s after the failed attempt
    retry_at = d["retry_at"]
    # before the retry time nothing is sent again
    clk.advance(10)
    cli("quota", "should-run")
    assert cli("notify", "list", json=True).data["notifications"][0]["deliveries"]["webhook"]["attempts"] == 1
    h2 = Hook(port)
    try:
        from loopx.kernel.storage import clock

        clk.set(clock.parse_ts(retry_at) + timedelta(seconds=1))
        cli("quota", "should-run")
        assert len(h2.bodies) == 1 and h2.bodies[0]["type"] == "gate.opened"
        clk.advance(3600)
        cli("quota", "should-run")
        assert len(h2.bodies) == 1
    finally:
        h2.close()
    n = cli("notify", "list", json=True).data["notifications"][0]
    assert n["deliveries"]["webhook"]["status"] == "delivered" and n["deliveries"]["webhook"]["attempts"] == 2
    types = [e["type"] for e in cli("history", "--type", "notify.", json=True).data["events"]]
    assert types == ["notify.failed", "notify.delivered"]


@pytest.mark.parametrize("preset,check", [
    ("slack", lambda b: b["text"].startswith("*loopx: gate")),
    ("discord", lambda b: b["content"].startswith("**loopx: gate")),
    ("ntfy", lambda b: "Merge" in b["raw"]),
])
def test_presets(project, cli, clk, hook, preset, check):
    _goal(cli)
    assert cli("notify", "set", "--webhook", hook.url, "--preset", preset).code == 0
    clk.advance(60)
    _open_gate(cli)
    assert cli("notify", "send", json=True).data["sent"] == 1
    assert check(hook.bodies[0])
    if preset == "ntfy":
        assert hook.headers[0]["Title"].startswith("loopx: gate")


def test_template_and_redaction(project, cli, clk, hook):
    _goal(cli)
    assert cli("notify", "set", "--webhook", hook.url, "--template", '{"msg": "{title}: {body}", "g": "{goal}"}').code == 0
    clk.advance(60)
    token = "ghp_" + "Qx7" * 12
    _open_gate(cli, f'Deploy with "{token}"?')
    assert cli("notify", "send").code == 0
    b = hook.bodies[0]
    assert b["g"] == "g1" and token not in json.dumps(b) and "REDACTED" in b["msg"]


def test_events_from_before_setup_are_not_sent(project, cli, clk, hook):
    _goal(cli)
    _open_gate(cli, "an old question")
    clk.advance(60)
    assert cli("notify", "set", "--webhook", hook.url).code == 0
    cli("quota", "should-run")
    assert hook.bodies == []


def test_notify_test_and_bad_input(project, cli, hook, monkeypatch):
    r = cli("notify", "test", json=True)
    assert r.code == 1 and r.data["channels"] == []
    for argv in (["notify", "set"], ["notify", "set", "--webhook", "ftp://x"], ["notify", "set", "--webhook", "not a url"],
                 ["notify", "set", "--preset", "telegram"]):
        r = cli(*argv, json=True)
        assert r.code == 2 and r.json["error"]["hint"], (argv, r.out)
    assert cli("notify", "set", "--webhook", hook.url).code == 0
    r = cli("notify", "test", json=True)
    assert r.code == 0 and r.data["results"][0]["ok"] and hook.bodies[0]["type"] == "notify.test"
    monkeypatch.setenv("PATH", "/nonexistent")  # no notify-send: the desktop is skipped silently
    assert cli("notify", "set", "--desktop", "on").code == 0
    r = cli("notify", "test", json=True)
    desk = [x for x in r.data["results"] if x["channel"] == "desktop"][0]
    assert desk["ok"] and desk["skipped"]


@pytest.mark.parametrize("how", ["flag", "env", "marker"])
def test_agents_cannot_change_notification_targets(project, cli, monkeypatch, how):
    pre = ["--agent", "bot"] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("LOOPX_AGENT", "bot")
    elif how == "marker":
        monkeypatch.setenv("CODEX_SANDBOX", "seatbelt")
    r = cli(*pre, "notify", "set", "--webhook", "http://127.0.0.1:9/x", json=True)
    assert r.code == 4 and r.json["error"]["code"] == "human_required"
    assert cli("notify", "list", json=True).data["channels"] == []


def test_stalled_goal_and_finished_goal_notify(project, cli, clk, hook):
    _goal(cli)
    assert cli("notify", "set", "--webhook", hook.url).code == 0
    clk.advance(60)
    assert cli("quota", "set", "--goal-id", "g1", "--stall-after", "1").code == 0
    clk.advance(60)
    r = cli("--agent", "bot", "next", json=True)
    assert cli("--agent", "bot", "turn", "finish", "--run", r.data["run_id"], "--result", "no_progress").code == 0
    d = cli("quota", "should-run", json=True).data
    assert d["reason"] == "stalled"
    assert [b["reason"] for b in hook.bodies] == ["stalled"]
    assert cli("goal", "done", "g1", "--note", "shipped").code == 0
    cli("notify", "send")
    assert [b["reason"] for b in hook.bodies] == ["stalled", "goal_done"]


def test_a_hook_never_sends(project, cli, clk, hook):
    """The Stop hook stays a fast pure read: it neither runs checks nor sends notifications."""
    _goal(cli)
    assert cli("notify", "set", "--webhook", hook.url).code == 0
    clk.advance(60)
    _open_gate(cli)
    from conftest import run_loopx

    r = run_loopx(["hook", "stop"], project, {"LOOPX_NOW": clk.iso}, input='{"stop_hook_active": false}')
    assert r.code == 0, r.err
    assert hook.bodies == []


def test_the_dashboard_service_sends_queued_notifications(project, cli, clk, hook):
    """Without any cron job, the dashboard service's pass over registered projects delivers them."""
    from loopx.dashboard.service import flush_all

    _goal(cli)
    assert cli("notify", "set", "--webhook", hook.url).code == 0
    clk.advance(60)
    _open_gate(cli)
    assert flush_all() == 1
    assert flush_all() == 0
    assert len(hook.bodies) == 1 and hook.bodies[0]["type"] == "gate.opened"


@pytest.mark.parametrize("text", ["[notify\nbroken", '[notify]\nsince = 5\nwebhook = "x"\ndesktop = "yes"\n'])
def test_a_bad_user_config_never_breaks_should_run(project, cli, clk, text):
    from loopx.config import config_path

    _goal(cli)
    _open_gate(cli)
    import os

    os.makedirs(os.path.dirname(config_path()), exist_ok=True)
    with open(config_path(), "w") as fh:
        fh.write(text)
    r = cli("quota", "should-run", json=True)
    assert r.code == 1 and r.data["decision"] == "wait_human"
    r = cli("notify", "list", json=True)
    if "broken" in text:
        assert r.code == 3 and "config" in r.json["error"]["message"] and r.json["error"]["hint"]
    else:
        assert r.code == 0 and r.data["channels"] == []
