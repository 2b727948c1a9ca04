"""should-run: every decision of docs/architecture.md#the-governed-loop with its reason, exit code and next_check_at."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from conftest import human_channel
from loopx.kernel.policy import decide, turn
from loopx.kernel.storage import clock
from loopx.kernel.storage.store import Store
from loopx.kernel.write import agents, gates, goals, todos

BASE = datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC)


@pytest.fixture
def store(project, clk):
    return Store.open(str(project))


def start(store, clk, *, todos_=("first", "second"), verify=f'"{sys.executable}" -c pass', **quota):
    goals.start_goal(store, "human:tester", objective="Make the tests pass", goal_id="g1", verify=verify,
                     todos=list(todos_), protect=["merge"], quota=goals.quota_policy(**quota) if quota else None)
    clk.advance()
    return "g1"


def work_turn(store, clk, result="progress", verify=False, agent="agent:bot", spend=False):
    t = turn.next_turn(store, agent, goal_id="g1")
    assert t["started"], t["decision"]
    clk.advance(60)
    fin = turn.finish(store, agent, t["run_id"], result, verify=verify)
    clk.advance(60)
    if spend:
        turn.spend_slot(store, agent, t["run_id"])
        clk.advance(1)
    return t, fin


def should(cli, *args):
    r = cli("quota", "should-run", *args, json=True)
    return r.code, r.json


def test_run_ready_names_the_first_todo(store, clk, cli):
    start(store, clk)
    code, doc = should(cli, "--goal-id", "g1")
    d = doc["data"]
    assert (code, d["decision"], d["reason"], d["mode"]) == (0, "run", "ready", "work")
    assert d["todo_id"] == todos.queries.goal_todos(store.load(), "g1")[0]["id"]
    assert d["next_check_at"] == clk.iso
    assert {k: d["budget"][k] for k in ("slots", "window", "spent", "left")} == \
        {"slots": 48, "window": 86400, "spent": 0, "left": 48}
    assert (d["budget"]["max_usd"], d["budget"]["spent_usd"], d["budget"]["costed_runs"]) == (None, 0, 0)


def test_run_in_plan_mode_without_todos(store, clk, cli):
    start(store, clk, todos_=())
    code, doc = should(cli)
    assert (code, doc["data"]["decision"], doc["data"]["reason"], doc["data"]["mode"]) == (0, "run", "plan", "plan")
    assert doc["data"]["todo_id"] is None and doc["data"]["next_check_at"] == clk.iso


def test_error_for_a_newer_store_format(store, clk, cli, project):
    start(store, clk)
    fmt = project / ".loopx" / "format.json"
    fmt.write_text(json.dumps({"format": 99}))
    code, doc = should(cli)
    assert code == 3 and doc["ok"] is False
    assert doc["error"]["code"] == "store_read_only"
    assert doc["error"]["details"]["decision"]["decision"] == "error"
    assert doc["error"]["details"]["decision"]["next_check_at"] is None


def test_error_for_an_unreadable_format_file(store, clk, cli, project):
    start(store, clk)
    (project / ".loopx" / "format.json").write_text("{not json")
    code, doc = should(cli)
    assert code == 3 and doc["error"]["code"] == "store_unreadable"


def test_not_connected_is_exit_3(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    r = cli("quota", "should-run")
    assert r.code == 3 and "loopx connect" in r.err


@pytest.mark.parametrize("status,decision,reason", [("done", "stop", "goal_done"), ("stopped", "stop", "goal_stopped"),
                                                    ("paused", "pause", "goal_paused")])
def test_goal_status(store, clk, cli, status, decision, reason):
    start(store, clk)
    goals.set_status(store, "human:tester", "g1", status, human=human_channel())
    code, doc = should(cli, "--goal-id", "g1")
    assert (code, doc["data"]["decision"], doc["data"]["reason"]) == (1, decision, reason)
    assert doc["data"]["next_check_at"] is None
    assert doc["data"]["scheduler_hint"] == 3600


def test_zero_slots_pauses(store, clk, cli):
    start(store, clk)
    r = cli("quota", "set", "--goal-id", "g1", "--slots", "0")
    assert r.code == 0 and "paused" in r.out
    code, doc = should(cli)
    assert (code, doc["data"]["decision"], doc["data"]["reason"]) == (1, "pause", "quota_zero")


def test_gate_blocking_the_goal_waits_for_a_human(store, clk, cli):
    start(store, clk)
    g = gates.open_gate(store, "agent:bot", "g1", kind="merge", question="Merge the branch?")
    code, doc = should(cli)
    d = doc["data"]
    assert (code, d["decision"], d["reason"], d["gate_id"]) == (1, "wait_human", "gate_pending", g["gate_id"])
    assert d["question"] == "Merge the branch?"
    assert d["next_check_at"] == clock.iso(clk.now + timedelta(seconds=d["scheduler_hint"]))


def test_gate_blocking_every_ready_todo_waits(store, clk, cli):
    start(store, clk)
    tids = [t["id"] for t in todos.queries.goal_todos(store.load(), "g1")]
    gates.open_gate(store, "agent:bot", "g1", kind="custom", question="ok?", blocks=[tids[0]])
    code, doc = should(cli)
    assert doc["data"]["decision"] == "run" and doc["data"]["todo_id"] == tids[1]
    gates.open_gate(store, "agent:bot", "g1", kind="custom", question="and this?", blocks=[tids[1]])
    code, doc = should(cli)
    assert (code, doc["data"]["decision"], doc["data"]["reason"]) == (1, "wait_human", "gate_pending")


def test_all_claimed_by_others_waits_until_the_first_lease_ends(store, clk, cli):
    start(store, clk)
    for t in todos.queries.goal_todos(store.load(), "g1"):
        todos.claim(store, "agent:other", t["id"], lease="20m")
    until = clock.iso(clk.now + timedelta(minutes=20))
    clk.advance(60)
    r = cli("--agent", "bot", "quota", "should-run", json=True)
    d = r.data
    assert (r.code, d["decision"], d["reason"], d["next_check_at"]) == (1, "wait", "claimed", until)


def test_handed_off_work_is_left_to_the_receiver(store, clk, cli):
    start(store, clk, todos_=("only",))
    tid = todos.queries.goal_todos(store.load(), "g1")[0]["id"]
    todos.claim(store, "agent:alice", tid)
    agents.handoff(store, "agent:alice", to="carol", todo=tid, note="yours")
    clk.advance(60)
    r = cli("--agent", "bob", "quota", "should-run", json=True)
    assert (r.code, r.data["decision"], r.data["reason"]) == (1, "handoff", "handed_off")
    assert r.data["next_check_at"] == clock.iso(clk.now + timedelta(seconds=300))
    r = cli("--agent", "carol", "quota", "should-run", json=True)
    assert (r.code, r.data["decision"]) == (0, "run")
    clk.advance(3600)  # the reservation lapses
    r = cli("--agent", "bob", "quota", "should-run", json=True)
    assert r.data["decision"] == "run"


def test_all_done_stops_as_complete(store, clk, cli):
    start(store, clk, todos_=("only",))
    work_turn(store, clk, "completion", verify=True)
    code, doc = should(cli)
    assert (code, doc["data"]["decision"], doc["data"]["reason"]) == (1, "stop", "complete")
    assert doc["data"]["next_check_at"] is None
    assert "looks complete" in doc["data"]["message"]


def test_blocked_todos_need_a_human(store, clk, cli):
    start(store, clk, todos_=("only",))
    tid = todos.queries.goal_todos(store.load(), "g1")[0]["id"]
    todos.block(store, "human:tester", tid, "needs keys")
    code, doc = should(cli)
    assert (code, doc["data"]["decision"], doc["data"]["reason"]) == (1, "wait_human", "todos_blocked")
    assert doc["data"]["next_check_at"] == clock.iso(clk.now + timedelta(seconds=300))


def test_budget_fourth_verified_run_is_refused(store, clk, cli):
    start(store, clk, todos_=("a", "b", "c", "d", "e"), slots=3, window="24h")
    receipts = []
    for _ in range(2):
        t, fin = work_turn(store, clk, "progress", verify=True)
        receipts.append(turn.spend_slot(store, "agent:bot", t["run_id"]))
        clk.advance(600)
    t3, _ = work_turn(store, clk, "progress", verify=True)
    t4, fin4 = work_turn(store, clk, "progress", verify=True)  # both verified before either is charged
    assert fin4["verified"]
    assert cli("quota", "spend-slot", "--run", t3["run_id"], json=True).code == 0
    r = cli("quota", "spend-slot", "--run", t4["run_id"], json=True)
    assert r.code == 1 and r.data["spent"] is False and r.data["reason"] == "budget_exhausted"
    code, doc = should(cli)
    d = doc["data"]
    expect = clock.iso(clock.parse_ts(receipts[0]["ts"]) + timedelta(hours=24))
    assert (code, d["decision"], d["reason"], d["next_check_at"]) == (1, "wait", "budget_exhausted", expect)
    assert r.data["next_check_at"] == expect
    assert {k: d["budget"][k] for k in ("slots", "window", "spent", "left")} == \
        {"slots": 3, "window": 86400, "spent": 3, "left": 0}
    clk.set(clock.parse_ts(expect) + timedelta(seconds=1))
    assert should(cli)[1]["data"]["decision"] == "run"
    assert cli("quota", "spend-slot", "--run", t4["run_id"], json=True).code == 0


def test_a_spent_slot_budget_holds_back_every_way_to_start_work(store, clk, cli):
    """slots=2: with one slot spent should-run still says run; with both spent, todos still open,
    should-run (for the goal and for all goals) says wait budget_exhausted with exit 1 and next
    starts nothing, until the first spend leaves the window."""
    start(store, clk, todos_=("a", "b", "c", "d"), slots=2, window="6h")
    t1, _ = work_turn(store, clk, "progress", verify=True, spend=True)
    first = store.load()["spends"]["g1"][0][0]
    code, doc = should(cli, "--goal-id", "g1")
    assert (code, doc["data"]["decision"], doc["data"]["budget"]["left"]) == (0, "run", 1)
    work_turn(store, clk, "progress", verify=True, spend=True)
    assert queries_open(store) >= 2  # work is left
    for args in (("--goal-id", "g1"), ()):
        code, doc = should(cli, *args)
        d = doc["data"]
        assert (code, d["decision"], d["reason"], d["todo_id"]) == (1, "wait", "budget_exhausted", None), args
        assert d["budget"]["spent"] == 2 and d["budget"]["left"] == 0
        assert d["next_check_at"] == clock.iso(clock.parse_ts(first) + timedelta(hours=6))
    r = cli("--agent", "bot", "next", "--goal-id", "g1", json=True)
    assert r.code == 1 and r.data["started"] is False and r.data["decision"]["reason"] == "budget_exhausted"
    assert not [x for x in store.load()["runs"].values() if x["finished"] is None]  # no run was opened
    clk.set(clock.parse_ts(first) + timedelta(hours=6))
    code, doc = should(cli, "--goal-id", "g1")
    assert (code, doc["data"]["decision"], doc["data"]["budget"]["left"]) == (0, "run", 1)


def queries_open(store) -> int:
    return sum(t["status"] == "open" for t in store.load()["todos"].values())


def test_spend_needs_verification_and_charges_once(store, clk, cli):
    start(store, clk)
    t, fin = work_turn(store, clk, "progress")
    r = cli("quota", "spend-slot", "--run", t["run_id"], json=True)
    assert r.code == 1 and r.data["reason"] == "not_verified"
    t2, fin2 = work_turn(store, clk, "progress", verify=True)
    first = cli("quota", "spend-slot", "--run", t2["run_id"], json=True)
    clk.advance(60)
    again = cli("quota", "spend-slot", "--run", t2["run_id"], json=True)
    assert first.code == again.code == 0
    assert again.data["repeat"] is True and again.data["ts"] == first.data["ts"]
    assert store.load()["spends"]["g1"] == [[first.data["ts"], 1, t2["run_id"]]]
    assert cli("quota", "spend-slot", "--run", "run-nope").code == 2


def test_spend_refuses_an_open_run(store, clk, cli):
    start(store, clk)
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    r = cli("quota", "spend-slot", "--run", t["run_id"], json=True)
    assert r.code == 1 and r.data["reason"] == "run_open"


def test_spend_slot_refuses_over_budget(store, clk, cli):
    start(store, clk, todos_=("a", "b", "c"), slots=1, window="24h")
    t1, _ = work_turn(store, clk, "progress", verify=True)
    t2, _ = work_turn(store, clk, "progress", verify=True)  # started before the first spend
    assert turn.spend_slot(store, "agent:bot", t1["run_id"])["spent"]
    r = cli("quota", "spend-slot", "--run", t2["run_id"], json=True)
    assert r.code == 1 and r.data["reason"] == "budget_exhausted" and r.data["next_check_at"]
    assert sum(e[1] for e in store.load()["spends"]["g1"]) == 1


def test_cooldown_waits(store, clk, cli):
    start(store, clk, cooldown="30m")
    work_turn(store, clk, "progress")
    code, doc = should(cli)
    d = doc["data"]
    last = store.load()["runs"][store.load()["goals"]["g1"]["last_run"]]
    expect = clock.iso(clock.parse_ts(last["finished"]) + timedelta(minutes=30))
    assert (code, d["decision"], d["reason"], d["next_check_at"]) == (1, "wait", "cooldown", expect)


def test_no_progress_then_no_change_skips(store, clk, cli):
    start(store, clk, todos_=("first",))  # one todo: its no-progress run leaves nothing else
    work_turn(store, clk, "no_progress")
    code, doc = should(cli)
    d = doc["data"]
    assert (code, d["decision"], d["reason"]) == (1, "skip", "no_change")
    assert d["next_check_at"] == clock.iso(clk.now + timedelta(seconds=d["scheduler_hint"]))
    r = cli("quota", "should-run", "--skip-exit", "0", json=True)
    assert r.code == 0 and r.data["decision"] == "skip"


def test_the_fingerprint_is_asked_only_for_the_todos_before_the_one_that_runs(store, clk):
    """The value rule needs the fingerprint (a `git status`) for a todo whose last turn made no
    progress; once a todo ahead of it runs, the answer does not depend on it, so a plain decision
    never asks (a cached answer then needs no git call), while --explain still traces every todo."""
    start(store, clk, todos_=("first",))
    work_turn(store, clk, "no_progress")  # "first" is unchanged since its turn
    urgent = todos.add(store, "human:tester", "g1", "urgent", priority=5)["todo_id"]
    state = store.load()
    first = next(t["id"] for t in todos.queries.goal_todos(state, "g1") if t["title"] == "first")
    same = next(r["fp_after"] for r in state["runs"].values() if r["todo"] == first)  # nothing changed since
    asked = []

    def fingerprint(goal_id):
        asked.append(goal_id)
        return same

    d = decide.evaluate(state, clk.now, goal_id="g1", fingerprint=fingerprint)
    assert (d["decision"], d["todo_id"], asked) == ("run", urgent, [])
    d = decide.evaluate(state, clk.now, goal_id="g1", fingerprint=fingerprint, explain=True)
    assert (d["decision"], d["todo_id"], asked) == ("run", urgent, ["g1"])
    assert [r["detail"] for r in d["rules"] if r["rule"] == "value"] == [f"1 todo(s) worth a turn ({first} unchanged)"]
    # the todo ahead is taken: now the unchanged one decides, and the fingerprint is asked
    todos.claim(store, "agent:other", urgent, lease="10m")
    asked.clear()
    d = decide.evaluate(store.load(), clk.now, goal_id="g1", fingerprint=fingerprint)
    assert (d["decision"], d["reason"], asked) == ("skip", "no_change", ["g1"])


def test_new_todo_turns_skip_into_run(store, clk, cli):
    start(store, clk, todos_=("first",))  # one todo: its no-progress run leaves nothing else
    work_turn(store, clk, "no_progress")
    assert should(cli)[1]["data"]["decision"] == "skip"
    todos.add(store, "human:tester", "g1", "a fresh idea")
    assert should(cli)[1]["data"]["decision"] == "run"


def test_approved_gate_turns_skip_into_run(store, clk, cli):
    start(store, clk)
    g = gates.open_gate(store, "agent:bot", "g1", kind="custom", question="may I?",
                        blocks=[todos.queries.goal_todos(store.load(), "g1")[1]["id"]])
    work_turn(store, clk, "no_progress")
    assert should(cli)[1]["data"]["decision"] == "skip"
    gates.decide(store, "human:tester", g["gate_id"], approve=True, channel="confirm-flag", human=human_channel())
    assert should(cli)[1]["data"]["decision"] == "run"


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_new_commit_turns_skip_into_run(store, clk, cli, project):
    _git(project, "init", "-q")
    (project / "a.txt").write_text("one\n")
    _git(project, "add", "a.txt")
    _git(project, "commit", "-q", "-m", "one")
    start(store, clk, todos_=("first",))  # one todo: its no-progress run leaves nothing else
    work_turn(store, clk, "no_progress")
    assert should(cli)[1]["data"]["decision"] == "skip"
    (project / "a.txt").write_text("two\n")
    _git(project, "commit", "-q", "-am", "two")
    code, doc = should(cli)
    assert (code, doc["data"]["decision"]) == (0, "run")


def test_stall_after_consecutive_no_progress(store, clk, cli):
    start(store, clk, stall_after=3, todos_=("first",))  # one todo: a stall is per todo (issue 21)
    for i in range(3):
        work_turn(store, clk, "failed" if i == 1 else "no_progress")
        todos.update(store, "human:tester", todos.queries.goal_todos(store.load(), "g1")[0]["id"], detail=f"hint {i}")
        clk.advance(60)
    code, doc = should(cli)
    d = doc["data"]
    assert (code, d["decision"], d["reason"]) == (1, "wait_human", "stalled")
    assert d["next_check_at"] == clock.iso(clk.now + timedelta(seconds=d["scheduler_hint"]))
    # a human change (a new todo) clears the stall
    todos.add(store, "human:tester", "g1", "smaller step")
    assert should(cli)[1]["data"]["decision"] == "run"


def test_explain_lists_every_rule(store, clk, cli):
    start(store, clk)
    r = cli("quota", "should-run", "--explain")
    assert r.code == 0
    rules = ["store", "status", "gates", "work", "setup", "host", "budget", "window", "value", "run"]
    for rule in rules:
        assert f"] {rule}" in r.out
    doc = cli("quota", "should-run", "--explain", json=True).data
    assert [x["rule"] for x in doc["rules"]] == rules
    assert doc["rules"][-1]["outcome"] == "decides"


def test_best_goal_wins_without_goal_id(store, clk, cli):
    start(store, clk)
    goals.start_goal(store, "human:tester", objective="Other", goal_id="g2", todos=["x"], priority=5)
    code, doc = should(cli)
    assert doc["data"]["goal_id"] == "g2" and doc["data"]["decision"] == "run"  # higher priority first
    t = turn.next_turn(store, "agent:bot", goal_id="g2")
    clk.advance(60)
    turn.finish(store, "agent:bot", t["run_id"], "no_progress")
    clk.advance(60)
    code, doc = should(cli)
    assert (code, doc["data"]["goal_id"], doc["data"]["decision"]) == (0, "g1", "run")
    assert {g["goal_id"]: g["decision"] for g in doc["data"]["goals"]} == {"g2": "skip", "g1": "run"}
    goals.set_status(store, "human:tester", "g1", "paused")
    code, doc = should(cli)
    assert (code, doc["data"]["goal_id"], doc["data"]["decision"]) == (1, "g2", "skip")


def test_unknown_goal_is_a_usage_error(store, clk, cli):
    start(store, clk)
    r = cli("quota", "should-run", "--goal-id", "nope")
    assert r.code == 2 and "hint:" in r.err


def test_bad_skip_exit_is_a_usage_error(store, clk, cli):
    start(store, clk)
    assert cli("quota", "should-run", "--skip-exit", "x").code == 2


def test_idle_burn_1440_checks_after_a_no_progress_run(store, clk, project):
    start(store, clk, todos_=("first",))  # one todo: its no-progress run leaves nothing else
    work_turn(store, clk, "no_progress")
    events = project / ".loopx" / "events.jsonl"
    before = events.read_text().count("\n")
    runs = 0
    for _ in range(1440):
        clk.advance(60)
        d = decide.should_run(store, goal_id="g1")
        runs += d["decision"] == "run"
    after = events.read_text().count("\n")
    assert runs == 0
    assert after - before <= 5
    assert d["scheduler_hint"] == 3600  # backed off to an hour


def test_evaluate_is_pure(store, clk):
    start(store, clk)
    state = store.load()
    before = json.dumps(state, sort_keys=True, default=str)
    d1 = decide.evaluate(state, clk.now, explain=True)
    d2 = decide.evaluate(state, clk.now, explain=True)
    assert d1 == d2
    assert json.dumps(state, sort_keys=True, default=str) == before


def test_quota_show_and_set(store, clk, cli):
    start(store, clk)
    r = cli("quota", "set", "--goal-id", "g1", "--slots", "5", "--window", "12h", "--cooldown", "10m",
            "--stall-after", "2", json=True)
    assert r.code == 0 and r.data["quota"] == {"slots": 5, "window": 43200, "cooldown": 600, "stall_after": 2}
    t, _ = work_turn(store, clk, "progress", verify=True, spend=True)
    shown = cli("quota", "show", json=True).data["quotas"][0]
    assert (shown["spent"], shown["left"], shown["ledger"][0]["run_id"]) == (1, 4, t["run_id"])
    text = cli("quota", "show").out
    assert "1/5 slots spent in the last 12h (4 left), cooldown 10m, stall after 2" in text


@pytest.mark.parametrize("args", [["--slots", "-1"], ["--slots", "many"], ["--window", "30s"], ["--window", "soon"],
                                  ["--stall-after", "0"], ["--cooldown", "x"], []])
def test_quota_set_bad_input(store, clk, cli, args):
    start(store, clk)
    r = cli("quota", "set", "--goal-id", "g1", *args)
    assert r.code == 2 and "hint:" in r.err
    assert store.load()["goals"]["g1"]["quota"]["slots"] == 48


def test_quota_show_without_a_goal(project, cli):
    r = cli("quota", "show")
    assert r.code == 2 and "start-goal" in r.err


def test_no_record_writes_nothing(store, clk, cli, project):
    start(store, clk)
    events = project / ".loopx" / "events.jsonl"
    before = events.read_bytes()
    assert cli("quota", "should-run", "--no-record").code == 0
    assert events.read_bytes() == before
    assert cli("quota", "should-run").code == 0
    assert events.read_bytes() != before


def test_decision_cache_answers_an_unchanged_store(store, clk, cli, project):
    start(store, clk, todos_=("first",))  # one todo: its no-progress run leaves nothing else
    work_turn(store, clk, "no_progress")
    first = decide.should_run(store, goal_id="g1")
    assert first["recorded"] and not first["cached"]
    second = decide.should_run(store, goal_id="g1")  # nothing recorded: the answer is cached
    third = decide.should_run(store, goal_id="g1")
    assert (second["cached"], third["cached"]) == (False, True)
    assert third["decision"] == "skip" and third["evaluated_at"] == clk.iso
    # a damaged cache file is a miss, never an error
    (project / ".loopx" / "cache" / "decisions.bin").write_bytes(b"{garbage")
    assert decide.should_run(store, goal_id="g1")["cached"] is False
    # a clock that goes backwards misses too
    clk.set(clk.now - timedelta(hours=1))
    assert decide.should_run(store, goal_id="g1")["cached"] is False


def test_decision_cache_sees_a_new_commit(store, clk, project):
    _git(project, "init", "-q")
    (project / "a.txt").write_text("one\n")
    _git(project, "add", "a.txt")
    _git(project, "commit", "-q", "-m", "one")
    start(store, clk, todos_=("first",))  # one todo: its no-progress run leaves nothing else
    work_turn(store, clk, "no_progress")
    for _ in range(3):
        d = decide.should_run(store, goal_id="g1")
    assert d["decision"] == "skip" and d["cached"]
    (project / "a.txt").write_text("two\n")
    assert decide.should_run(store, goal_id="g1")["decision"] == "run"  # dirty file: the git part differs
    _git(project, "commit", "-q", "-am", "two")
    assert decide.should_run(store, goal_id="g1")["decision"] == "run"


def test_decision_cache_expires_with_a_lease(store, clk):
    start(store, clk, todos_=("only",))
    tid = todos.queries.goal_todos(store.load(), "g1")[0]["id"]
    todos.claim(store, "agent:other", tid, lease="10m")
    for _ in range(3):
        d = decide.should_run(store, goal_id="g1", agent="bot")
    assert (d["decision"], d["cached"]) == ("wait", True)
    clk.advance(11 * 60)  # no write at all: only time passed
    d = decide.should_run(store, goal_id="g1", agent="bot")
    assert d["decision"] == "run" and not d["cached"]


def test_explain_never_uses_the_cache(store, clk):
    start(store, clk)
    for _ in range(3):
        decide.should_run(store)
    d = decide.should_run(store, explain=True)
    assert d["cached"] is False and d["rules"]


def _edit_cached_entries(project, edit) -> None:
    """Hand-edit every entry of ``.loopx/cache/decisions.bin`` (a person or a tool poking at it)."""
    import marshal

    path = project / ".loopx" / "cache" / "decisions.bin"
    raw = path.read_bytes()
    data = marshal.loads(raw)
    if isinstance(data.get("body"), bytes):  # the entries are wrapped with a checksum: edit the inner blob
        inner = marshal.loads(data["body"])
        for e in inner.values():
            edit(e)
        data["body"] = marshal.dumps(inner)
    else:
        for e in data.values():
            edit(e)
    path.write_bytes(marshal.dumps(data))


@pytest.mark.parametrize("edit", [
    lambda e: e.update(hosts=[1, 2]),                          # a list where a dict was
    lambda e: e.update(decision={"decision": "run"}),          # a decision without its message
    lambda e: e["decision"].update(budget={"slots": "many"}),  # a budget the text renderer cannot print
], ids=["hosts-list", "decision-without-message", "odd-budget"])
def test_a_hand_edited_decision_cache_is_a_miss_never_an_internal_error(goal, project, edit):
    from conftest import run_loopx

    for fmt in (["--format", "json"], []):
        for _ in range(3):  # the second call saves the answer, the third is the quick path's hit
            warm = run_loopx(["quota", "should-run", "--format", "json"], project)
        assert warm.code == 0 and json.loads(warm.out)["data"]["cached"], warm.err
        _edit_cached_entries(project, edit)
        r = run_loopx(["quota", "should-run", *fmt], project)
        assert r.code == 0 and "internal error" not in r.err, r.err
        if fmt:
            assert json.loads(r.out)["data"]["cached"] is False
        else:
            assert r.out.startswith("run: ")


@pytest.mark.parametrize("args,env", [
    ([], {}),
    (["--goal-id", "g1", "--skip-exit", "0"], {}),
    (["--agent", "bot"], {}),
    ([], {"LOOPX_AGENT": "bot"}),
    ([], {"PATH": "/usr/bin:/bin"}),
], ids=["plain", "goal-skip-exit", "agent-flag", "agent-env", "other-path"])
def test_the_quick_path_answers_as_the_full_path_does(store, clk, cli, project, monkeypatch, args, env):
    """A cached poll answered before the store is opened (decision_cache.quick) gives the envelope,
    exit code and text the full path gives when it finds the same entry."""
    from conftest import run_loopx
    from loopx.kernel.policy import decision_cache

    start(store, clk, todos_=("first",))  # one todo: its no-progress run leaves nothing else
    work_turn(store, clk, "no_progress")  # a `skip`: exit 1, or 0 with --skip-exit 0
    env = {"LOOPX_NOW": clk.iso, **env}
    for fmt in (["--format", "json"], []):
        for _ in range(3):
            quick = run_loopx(["quota", "should-run", *args, *fmt], project, env=env)
        with monkeypatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            mp.setattr(decision_cache, "quick", lambda *a: None)  # the full path, its cache hit
            full = cli("quota", "should-run", *args, *fmt)
        assert (quick.code, quick.out, quick.err) == (full.code, full.out, full.err)
    assert json.loads(run_loopx(["quota", "should-run", *args, "--format", "json"], project, env=env).out
                      )["data"]["cached"] is True


def test_status_keeps_its_answers_like_should_run_and_says_what_should_run_says(store, clk, cli, monkeypatch):
    """`status` asks each goal's decision through decide.for_client with the decision cache's
    stamps: a second `status` on an unchanged store evaluates nothing, a write or the clock passing
    a lease's end makes it evaluate again, and the answer is should-run's (issue 21) either way."""
    start(store, clk)
    evaluated = []
    real = decide.evaluate
    monkeypatch.setattr(decide, "evaluate", lambda *a, **kw: evaluated.append(1) or real(*a, **kw))

    def status_decision():
        n = len(evaluated)
        r = cli("status", json=True)
        assert r.code == 0, r.err
        return next(g for g in r.data["goals"] if g["id"] == "g1")["decision"], len(evaluated) - n

    first, n = status_decision()
    assert n == 1
    again, n = status_decision()
    assert n == 0 and (again["decision"], again["reason"], again["todo_id"]) == \
        (first["decision"], first["reason"], first["todo_id"])
    assert turn.next_turn(store, "agent:bot", goal_id="g1")["started"]  # a write: the stamps move
    after, n = status_decision()
    assert n == 1
    _, doc = should(cli, "--goal-id", "g1", "--no-record")
    assert (after["decision"], after["reason"], after["todo_id"]) == \
        (doc["data"]["decision"], doc["data"]["reason"], doc["data"]["todo_id"])
    assert status_decision()[1] == 0  # kept again
    clk.advance(48 * 3600)  # past the claim's lease and the cache's hour: evaluated anew
    later, n = status_decision()
    _, doc = should(cli, "--goal-id", "g1", "--no-record")
    assert n == 1 and later["todo_id"] == doc["data"]["todo_id"] == first["todo_id"]  # the claim ran out


def test_a_kept_answer_is_a_copy_a_caller_may_change(store, clk):
    """The cache file is read once per process; a caller that edits a nested dict of one answer
    (a long-lived `loopx.api` user) must not change the next one (found by a reviewer)."""
    start(store, clk)
    for _ in range(3):
        d = decide.should_run(store, goal_id="g1")
    assert d["cached"]
    left = d["budget"]["left"]
    d["budget"]["left"] = -999
    again = decide.should_run(store, goal_id="g1")
    assert again["cached"] and again["budget"]["left"] == left


def test_a_wait_is_kept_no_later_than_the_time_it_names(store, clk):
    """A `wait` that names its own next check (the start of a leftover period, a lease's end) may
    change then; a kept answer must not outlive it (a reviewer's case: `--use-leftover` kept
    `wait leftover_not_due` until the window reset, through the only time the goal may run)."""
    from loopx.kernel.policy import decision_cache as dc

    start(store, clk)
    state = store.load()
    files = dc.stamp(store)
    named = clock.iso(clk.now + timedelta(minutes=30))
    d = dict(decide.evaluate(state, clk.now, goal_id="g1"), decision="wait", reason="leftover_not_due",
             next_check_at=named)
    dc.save(store, "k", files, d, state, clk.now, None)
    assert dc.lookup(store, "k", files, clk.now + timedelta(minutes=29))["decision"] == "wait"
    assert dc.lookup(store, "k", files, clk.now + timedelta(minutes=31)) is None


def test_the_watch_book_is_part_of_the_stamp_and_an_idle_tick_leaves_it(store, clk, project):
    """`watch run` may move a watch's next due time by writing only cache/watches.json: the kept
    answers must see it; and a should-run with no check due must not rewrite that file (or no
    answer of a store with a watch would ever be kept)."""
    from loopx.kernel.policy import decision_cache as dc
    from loopx.kernel.storage import fs
    from loopx.kernel.write import watches as wwrite

    start(store, clk)
    wwrite.add(store, "human:tester", "g1", name="ci", check=f'"{sys.executable}" -c pass', every=3600)
    clk.advance()
    decide.should_run(store, goal_id="g1", tick=True)  # the first check runs and writes the book
    book = project / ".loopx" / "cache" / "watches.json"
    before = (book.stat().st_mtime_ns, book.stat().st_ino)
    stamped = dc.stamp(store)
    clk.advance(60)
    for _ in range(3):
        d = decide.should_run(store, goal_id="g1", tick=True)
    assert (book.stat().st_mtime_ns, book.stat().st_ino) == before and dc.stamp(store) == stamped
    assert d["cached"]
    fs.atomic_write(book, book.read_bytes())  # as `loopx watch run` rewrites it (a new file in its place)
    assert dc.stamp(store) != stamped
    assert decide.should_run(store, goal_id="g1", tick=True)["cached"] is False


def test_status_on_many_goals_keeps_should_runs_answers_and_writes_once(store, clk, cli, project, monkeypatch):
    """The views' answers have their own room in the cache: a `status` over 70 goals neither
    pushes out should-run's kept answers nor evicts its own (it used to rewrite the file once per
    goal and miss on every call: a reviewer's case)."""
    from loopx.kernel.policy import decision_cache as dc
    from loopx.kernel.storage import fs

    start(store, clk)
    for i in range(70):
        goals.start_goal(store, "human:tester", objective=f"goal {i}", goal_id=f"x{i:02d}", todos=["t"])
    clk.advance()
    for _ in range(2):
        decide.should_run(store, goal_id="g1")
    assert decide.should_run(store, goal_id="g1")["cached"]
    writes = []
    real = fs.atomic_write
    monkeypatch.setattr(fs, "atomic_write", lambda path, *a, **kw: writes.append(str(path)) or real(path, *a, **kw))
    assert cli("status", json=True).code == 0
    assert sum(w.endswith("decisions.bin") for w in writes) == 1
    evaluated = []
    monkeypatch.setattr(decide, "evaluate", lambda *a, **kw: evaluated.append(1) or real_eval(*a, **kw))
    assert cli("status", json=True).code == 0 and evaluated == []
    assert decide.should_run(store, goal_id="g1")["cached"]
    assert dc.KEEP_VIEWS >= 71


real_eval = decide.evaluate
