"""loopx history: filtered events (text, json, jsonl) and the rounds view."""

from __future__ import annotations

import json

import pytest

from loopx.kernel.policy import turn
from loopx.kernel.storage.store import Store
from test_decide import start


@pytest.fixture
def store(project, clk):
    s = Store.open(str(project))
    start(s, clk)
    t = turn.next_turn(s, "agent:bot", goal_id="g1")
    clk.advance(90)
    turn.finish(s, "agent:bot", t["run_id"], "completion", verify=True)
    turn.spend_slot(s, "agent:bot", t["run_id"])
    clk.advance(3600)
    t2 = turn.next_turn(s, "agent:bot", goal_id="g1")
    clk.advance(30)
    turn.finish(s, "agent:bot", t2["run_id"], "no_progress")
    clk.advance(60)
    from loopx.kernel.policy import decide

    decide.should_run(s, goal_id="g1")  # records the skip
    return s


def test_rounds_show_each_turn_and_decision(store, cli):
    r = cli("history", "--goal-id", "g1", "--rounds", json=True)
    assert r.code == 0
    rows = r.data["rounds"]
    runs = [x for x in rows if x["kind"] == "run"]
    assert [(x["result"], x["verified"], x["slots"], x["duration"]) for x in runs] == \
        [("completion", True, 1, 90.0), ("no_progress", False, 0, 30.0)]
    assert runs[0]["agent"] == "agent:bot" and runs[0]["evidence"] == 1 and runs[0]["todo_id"].startswith("t-")
    assert rows[-1]["kind"] == "decision" and rows[-1]["decision"] == "skip"
    text = cli("history", "--goal-id", "g1")
    assert "ROUNDS" in text.out and "completion" in text.out and "skip" in text.out and "1m" in text.out
    assert "EVENTS" in text.out


def test_events_filters(store, cli):
    r = cli("history", "--type", "run.", "--limit", "0", json=True)
    types = [e["type"] for e in r.data["events"]]
    assert types and all(t.startswith("run.") for t in types)
    assert r.data["rounds"] == []  # a type filter shows events only
    r = cli("history", "--limit", "2", "--events", json=True)
    assert len(r.data["events"]) == 2
    assert r.data["events"][-1]["type"] == "decision.recorded"
    r = cli("history", "--since", "45s", "--events", json=True)
    assert [e["type"] for e in r.data["events"]] == ["decision.recorded"]
    both = cli("history", "--limit", "0", "--events", json=True).data["events"]
    assert any(e["type"] == "evidence.added" for e in both)  # the evidence stream is merged in
    assert [e["ts"] for e in both] == sorted(e["ts"] for e in both)


def test_jsonl_prints_one_record_per_line(store, cli):
    r = cli("history", "--type", "todo.", "--format", "jsonl")
    lines = [json.loads(x) for x in r.out.splitlines()]
    assert r.code == 0 and len(lines) >= 2
    assert all(x["type"].startswith("todo.") for x in lines[:-1])
    assert lines[-1]["command"] == "history" and lines[-1]["data"]["count"] == len(lines) - 1


@pytest.mark.parametrize("args", [["--limit", "-3"], ["--limit", "many"], ["--since", "yesterday-ish"],
                                  ["--goal-id", "nope"], ["--rounds", "--events"]])
def test_bad_input_is_a_usage_error(store, cli, args):
    r = cli("history", *args)
    assert r.code == 2 and "hint:" in r.err


def test_agent_text_is_made_safe(store, cli, clk):
    from loopx.kernel.write import todos

    todos.add(store, "agent:bot", "g1", "evil \x1b[31mred\x1b[0m title")
    r = cli("history", "--events", "--limit", "1")
    assert "\x1b" not in r.out and "\\u001b" in r.out
