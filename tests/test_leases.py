"""Leases and fencing with a simulated clock, real processes (issue 2, acceptance 10).

``LOOPX_NOW`` moves the clock between commands: a live lease blocks other agents (exit 4 naming the
holder and the expiry), the holder can renew it, it expires exactly at ``lease_until``, another
agent can then take the todo over, and every later write by the fenced-out holder exits 4.
"""

from __future__ import annotations

import pytest

from conftest import run_loopx
from test_store_concurrency import check_file

T0 = "2026-03-01T09:00:00Z"


def at(minutes: float) -> str:
    from datetime import datetime, timedelta

    t = datetime(2026, 3, 1, 9, 0, 0) + timedelta(minutes=minutes)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond:06d}" if t.microsecond else "") + "Z"


def lx(project, minutes, *args, agent=None):
    env = {"LOOPX_NOW": at(minutes)}
    if agent:
        env["LOOPX_AGENT"] = agent
    return run_loopx([*args, "--format", "json"], project, env=env)


@pytest.fixture
def claimed(project):
    r = lx(project, 0, "start-goal", "--goal-text", "lease test", "--goal-id", "g", "--todo", "work")
    assert r.code == 0, r.err
    todo = r.data["todo_ids"][0]
    c = lx(project, 0, "todo", "claim", todo, "--lease", "30m", agent="alice")
    assert c.code == 0, c.err
    assert c.data["lease_until"] == at(30)
    return todo, c.data["fence"]


def test_live_lease_blocks_others_until_it_expires(project, claimed):
    todo, fence = claimed
    r = lx(project, 29, "todo", "claim", todo, agent="bob")
    assert r.code == 4
    err = r.json["error"]
    assert err["code"] == "claimed_by_other"
    assert "agent:alice" in err["message"] and at(30) in err["message"] and err["hint"]
    text = run_loopx(["todo", "claim", todo], project, env={"LOOPX_NOW": at(29), "LOOPX_AGENT": "bob"})
    assert text.code == 4 and "agent:alice" in text.err and at(30) in text.err and "hint:" in text.err
    # one second before the end it is still live; at lease_until it has expired
    assert lx(project, 30 - 1 / 60, "todo", "claim", todo, agent="bob").code == 4
    listed = lx(project, 30, "todo", "list").data["todos"]
    assert [t["status"] for t in listed if t["id"] == todo] == ["expired"]
    listed = lx(project, 29, "todo", "list").data["todos"]
    assert [(t["status"], t["holder"]) for t in listed if t["id"] == todo] == [("claimed", "agent:alice")]
    took = lx(project, 30, "todo", "claim", todo, "--lease", "10m", agent="bob")
    assert took.code == 0, took.err
    assert took.data["fence"] > fence and took.data["lease_until"] == at(40)


def test_a_lease_is_live_to_its_last_second_and_over_at_lease_until(project, claimed):
    """The boundary, through every reader an agent relies on: at lease_until - 1 s the todo is
    the holder's (listed as claimed and among the holder's holdings, withheld by should-run and
    next, refused to a claim); at lease_until it is free for anyone."""
    todo, _fence = claimed
    last = 30 - 1 / 60
    for minute, live in ((last, True), (30, False)):
        listed = lx(project, minute, "todo", "list").data["todos"]
        assert [t["status"] for t in listed if t["id"] == todo] == (["claimed"] if live else ["expired"]), minute
        should = lx(project, minute, "quota", "should-run", "--goal-id", "g", "--no-record", agent="bob").data
        assert (should["decision"], should["todo_id"]) == (("wait", None) if live else ("run", todo)), minute
        nxt = lx(project, minute, "next", "--goal-id", "g", "--dry-run", agent="bob").data["decision"]
        assert nxt["todo_id"] == (None if live else todo), minute
        holds = {a["name"]: a["holds"] for a in lx(project, minute, "agent", "list").data["agents"]}
        assert holds["alice"] == ([todo] if live else []), minute
    refused = lx(project, last, "todo", "claim", todo, agent="bob")
    assert refused.code == 4 and refused.json["error"]["code"] == "claimed_by_other"
    assert lx(project, 30, "todo", "claim", todo, agent="bob").code == 0


def test_renewal_moves_the_expiry(project, claimed):
    todo, fence = claimed
    r = lx(project, 20, "todo", "renew", todo, "--lease", "30m", "--fence", str(fence), agent="alice")
    assert r.code == 0, r.err
    assert r.data["lease_until"] == at(50)
    assert lx(project, 45, "todo", "claim", todo, agent="bob").code == 4
    status = lx(project, 45, "status").data
    assert status["goals"][0]["claimed"][0]["holder"] == "agent:alice"
    assert lx(project, 50, "todo", "claim", todo, agent="bob").code == 0


def test_fenced_out_holder_cannot_write(project, claimed):
    todo, old_fence = claimed
    ev = lx(project, 10, "evidence", "add", "--kind", "test", "--summary", "green", "--exit-code", "0", "--todo", todo,
            agent="alice")
    assert ev.code == 0, ev.err
    ev_id = ev.data["evidence_id"]
    took = lx(project, 31, "todo", "claim", todo, "--lease", "1h", agent="bob")
    assert took.code == 0, took.err
    before = (project / ".loopx" / "events.jsonl").read_bytes()
    attempts = [
        ("todo", "done", todo, "--evidence", ev_id, "--fence", str(old_fence)),
        ("todo", "done", todo, "--evidence", ev_id),
        ("todo", "renew", todo, "--fence", str(old_fence)),
        ("todo", "renew", todo),
        ("todo", "release", todo, "--fence", str(old_fence)),
        ("todo", "release", todo),
        ("todo", "block", todo, "--reason", "mine"),
        ("todo", "update", todo, "--title", "hijacked"),
        ("todo", "update", todo, "--reopen"),
        ("todo", "claim", todo),
    ]
    for args in attempts:
        r = lx(project, 32, *args, agent="alice")
        assert r.code == 4, (args, r.code, r.out)
        assert r.json["ok"] is False and r.json["error"]["code"] in ("stale_fence", "claimed_by_other")
        assert "agent:bob" in r.json["error"]["message"] or "fence" in r.json["error"]["message"], r.json["error"]
    text = run_loopx(["todo", "done", todo, "--evidence", ev_id, "--fence", str(old_fence)], project,
                     env={"LOOPX_NOW": at(32), "LOOPX_AGENT": "alice"})
    assert text.code == 4 and text.err.startswith("loopx: error: ") and "stale fence" in text.err
    assert (project / ".loopx" / "events.jsonl").read_bytes() == before, "a refused write must not append"
    # the new holder's writes with its own fence go through
    done = lx(project, 33, "todo", "done", todo, "--evidence", ev_id, "--fence", str(took.data["fence"]),
              agent="bob")
    assert done.code == 0, done.err
    recs = check_file(project / ".loopx" / "events.jsonl")
    completed = [r for r in recs if r["type"] == "todo.completed"]
    assert len(completed) == 1 and completed[0]["actor"] == "agent:bob"


def test_expired_but_untaken_lease_can_be_renewed_by_its_holder(project, claimed):
    todo, fence = claimed
    r = lx(project, 40, "todo", "renew", todo, "--fence", str(fence), "--lease", "5m", agent="alice")
    assert r.code == 0, r.err
    assert r.data["lease_until"] == at(45)
    assert lx(project, 41, "todo", "claim", todo, agent="bob").code == 4


@pytest.mark.parametrize("lease", ["0s", "-5m", "8d", "soon", ""])
def test_bad_lease_durations_are_usage_errors(project, claimed, lease):
    todo, _ = claimed
    r = lx(project, 1, "todo", "renew", todo, "--lease", lease, agent="alice")
    assert r.code == 2, r.out


def test_bad_loopx_now_is_a_usage_error(project, claimed):
    r = run_loopx(["todo", "list"], project, env={"LOOPX_NOW": "yesterday"})
    assert r.code == 2 and "LOOPX_NOW" in r.err and "hint:" in r.err


def test_a_fence_before_any_claim_says_nobody_holds_it(project):
    r = lx(project, 0, "start-goal", "--goal-text", "lease test", "--goal-id", "g", "--todo", "work")
    todo = r.data["todo_ids"][0]
    text = run_loopx(["--agent", "shell", "todo", "done", todo, "--fence", "5"], project, env={"LOOPX_NOW": at(1)})
    assert text.code == 4, text.err
    assert "nobody holds a claim" in text.err and "claim it with `loopx next`" in text.err, text.err
    assert "taken over" not in text.err, text.err
