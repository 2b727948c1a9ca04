"""The turn: next (claim + run + packet), turn finish (verify, evidence, claim), lease expiry."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import pytest

from loopx.kernel.policy import turn
from loopx.kernel.storage import clock, ids
from loopx.kernel.storage.store import Draft, Store
from loopx.kernel.write import gates, goals


@pytest.fixture
def store(project, clk):
    return Store.open(str(project))


def start(store, clk, verify=f'"{sys.executable}" -c pass', titles=("first", "second")):
    goals.start_goal(store, "human:tester", objective="Make the tests pass", goal_id="g1", verify=verify,
                     done_when="the suite passes", todos=list(titles), protect=["merge"])
    clk.advance()


def test_next_claims_opens_a_run_and_prints_the_packet(store, clk, cli):
    start(store, clk)
    r = cli("--agent", "bot", "next", json=True)
    assert r.code == 0
    d = r.data
    assert d["started"] and d["run_id"].startswith("run-") and d["todo_id"].startswith("t-")
    assert d["lease_until"] == clock.iso(clk.now + timedelta(minutes=30))
    state = store.load()
    t = state["todos"][d["todo_id"]]
    assert t["status"] == "claimed" and t["claim"]["holder"] == "agent:bot"
    assert state["runs"][d["run_id"]]["finished"] is None
    p = d["packet"]
    assert p["objective"] == "Make the tests pass" and p["done_when"] == "the suite passes"
    assert p["todo"]["id"] == d["todo_id"] and p["protected"] == [{"action": "merge", "gate": "none", "gate_id": None,
                                                                                     "standing": False}]
    cmds = p["commands"]
    assert f"turn finish --run {d['run_id']}" in cmds["finish"]
    assert f"todo done {d['todo_id']} --evidence EV" in cmds["done"]
    assert f"--run {d['run_id']}" in cmds["evidence"] and os.path.basename(cmds["evidence"].split()[0]) == "loopx" \
        and cmds["evidence"].split(" ", 1)[1].startswith("--agent bot ")  # the absolute loopx (issue 23)
    text = cli("--agent", "bot2", "next")
    assert text.code == 0 and "YOUR TODO:" in text.out and "WRITE BACK" in text.out


def test_next_without_run_decision_exits_1_and_claims_nothing(store, clk, cli, project):
    start(store, clk)
    gates.open_gate(store, "agent:bot", "g1", kind="merge", question="Merge?")
    before = (project / ".loopx" / "events.jsonl").read_text()
    r = cli("--agent", "bot", "next", json=True)
    assert r.code == 1 and r.data["started"] is False and r.data["decision"]["decision"] == "wait_human"
    state = Store.open(str(project)).load()
    assert all(t["claim"] is None for t in state["todos"].values())
    assert not state["runs"]
    after = (project / ".loopx" / "events.jsonl").read_text()
    assert all('"decision.recorded"' in line for line in after[len(before):].splitlines())
    assert "no turn: wait_human" in cli("--agent", "bot", "next").out


def test_dry_run_writes_nothing(store, clk, cli, project):
    start(store, clk)
    cli("quota", "should-run")  # record the decision first
    before = (project / ".loopx" / "events.jsonl").read_bytes()
    r = cli("--agent", "bot", "next", "--dry-run", json=True)
    assert r.code == 0 and r.data["run_id"] == "run-dry-run" and r.data["packet"]["todo"]
    assert (project / ".loopx" / "events.jsonl").read_bytes() == before


def test_packet_stays_small_for_a_big_goal(store, clk):
    start(store, clk, titles=())
    long = "x" * 3000

    def plan(state, now):
        drafts = [Draft("goal.updated", "g1", {"objective": "O" * 5000, "done_when": "D" * 5000})]
        taken = set()
        for i in range(200):
            tid = ids.new_id("todo", taken)
            taken.add(tid)
            drafts.append(Draft("todo.added", "g1", {"todo_id": tid, "title": f"todo {i} " + long, "detail": long,
                                                    "acceptance": long}))
        for i in range(5000):
            drafts.append(Draft("evidence.added", "g1", {"evidence_id": f"ev-{i:08x}", "kind": "test",
                                                        "summary": f"run {i} " + long[:290], "exit_code": 0},
                                stream="evidence"))
        for i in range(20):
            drafts.append(Draft("gate.opened", "g1", {"gate_id": f"gate-{i:06x}", "kind": "custom",
                                                     "question": long, "blocks": [sorted(taken)[i]]}))
        return drafts

    store.transact(plan, actor="human:tester")
    clk.advance()
    res = turn.next_turn(store, "agent:bot", goal_id="g1")
    assert res["started"]
    assert len(res["packet_text"]) <= 6000, len(res["packet_text"])
    import json

    assert len(json.dumps(res["packet"])) <= 8000
    assert res["run_id"] in res["packet_text"] and res["todo_id"] in res["packet_text"]


def test_the_packet_queue_shows_the_next_ready_todos_in_order_with_short_titles(store, clk):
    titles = [f"item {i} " + "word " * 40 for i in range(9)]
    start(store, clk, titles=titles)
    res = turn.next_turn(store, "agent:bot", goal_id="g1")
    queue = res["packet"]["queue"]
    # the claimed todo is not in its own queue; the next five follow in queue order, each title cut
    assert [q["title"].split()[:2] for q in queue] == [["item", str(i)] for i in range(1, 6)]
    assert res["todo_id"] not in {q["id"] for q in queue}
    assert all(len(q["title"]) <= 80 and q["title"].endswith("…") for q in queue)


def test_finish_with_verify_records_evidence_and_completes(store, clk, cli):
    start(store, clk)
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    r = cli("--agent", "bot", "turn", "finish", "--run", t["run_id"], "--result", "completion", "--verify", json=True)
    assert r.code == 0
    d = r.data
    assert d["verified"] is True and d["verify"]["exit_code"] == 0 and d["todo_status"] == "done"
    state = store.load()
    ev = state["evidence"][d["verify"]["evidence_id"]]
    assert ev["run"] == t["run_id"] and ev["kind"] == "test" and ev["exit_code"] == 0
    assert state["todos"][t["todo_id"]]["evidence"] == [ev["id"]]
    # a retry with the same result is a no-op; a different result is a conflict
    again = cli("--agent", "bot", "turn", "finish", "--run", t["run_id"], "--result", "completion", json=True)
    assert again.code == 0 and again.data["repeat"] is True
    assert cli("--agent", "bot", "turn", "finish", "--run", t["run_id"], "--result", "failed").code == 4


def test_failing_verify_is_not_verified_and_keeps_the_todo_open(store, clk, cli):
    start(store, clk, verify=f'"{sys.executable}" -c "raise SystemExit(3)"')
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    fin = turn.finish(store, "agent:bot", t["run_id"], "completion", verify=True)
    assert fin["verified"] is False and fin["verify"]["exit_code"] == 3
    assert fin["todo_status"] == "open" and fin["warnings"]
    assert turn.spend_slot(store, "agent:bot", t["run_id"])["reason"] == "not_verified"


def test_completion_without_evidence_does_not_complete_the_todo(store, clk):
    start(store, clk)
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    fin = turn.finish(store, "agent:bot", t["run_id"], "completion")
    assert fin["todo_status"] == "open"
    assert store.load()["todos"][t["todo_id"]]["status"] == "open"


def test_finish_errors(store, clk, cli):
    start(store, clk)
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    assert cli("--agent", "bot", "turn", "finish", "--run", t["run_id"], "--result", "great").code == 2
    assert cli("--agent", "bot", "turn", "finish", "--run", "run-zzz", "--result", "progress").code == 2
    r = cli("--agent", "eve", "turn", "finish", "--run", t["run_id"], "--result", "progress")
    assert r.code == 4 and "belongs to agent:bot" in r.err
    goals.update_goal(store, "human:tester", "g1", verify="  ")
    goals_state = store.load()["goals"]["g1"]
    if not goals_state["verify"]:
        r = cli("--agent", "bot", "turn", "finish", "--run", t["run_id"], "--result", "progress", "--verify")
        assert r.code == 2 and "no verify command" in r.err


def test_run_left_open_past_its_lease_is_closed_by_the_next_writer(store, clk):
    start(store, clk, titles=("only",))
    t = turn.next_turn(store, "agent:crashy", goal_id="g1", lease="10m")
    clk.advance(11 * 60)
    nxt = turn.next_turn(store, "agent:bot", goal_id="g1")
    assert nxt["started"] and nxt["todo_id"] == t["todo_id"]
    state = store.load()
    old = state["runs"][t["run_id"]]
    assert old["result"] == "failed" and "lease expired" in old["note"]
    assert state["todos"][t["todo_id"]]["claim"]["holder"] == "agent:bot"


@pytest.mark.parametrize("writer", ["todo add", "gate open", "evidence add"])
def test_any_writer_closes_a_run_left_open_past_its_lease(store, clk, cli, writer):
    start(store, clk, titles=("only",))
    t = turn.next_turn(store, "agent:crashy", goal_id="g1", lease="10m")
    clk.advance(11 * 60)
    args = {"todo add": ["todo", "add", "another"],
            "gate open": ["gate", "open", "--kind", "merge", "--question", "Merge?"],
            "evidence add": ["evidence", "add", "--kind", "note", "--summary", "looked at it"]}[writer]
    assert cli(*args).code == 0
    state = store.load()
    old = state["runs"][t["run_id"]]
    assert old["result"] == "failed" and "lease expired" in old["note"]
    assert state["todos"][t["todo_id"]]["status"] == "open" and state["todos"][t["todo_id"]]["claim"] is None


def test_a_refused_write_still_closes_expired_runs(store, clk, cli):
    start(store, clk, titles=("only",))
    t = turn.next_turn(store, "agent:crashy", goal_id="g1", lease="10m")
    clk.advance(11 * 60)
    assert cli("todo", "add", "x", "--goal-id", "nope").code == 2
    assert store.load()["runs"][t["run_id"]]["result"] == "failed"


def test_renew_extends_run_and_claim(store, clk, cli):
    start(store, clk)
    t = turn.next_turn(store, "agent:bot", goal_id="g1", lease="10m")
    clk.advance(5 * 60)
    r = cli("--agent", "bot", "turn", "renew", "--run", t["run_id"], "--lease", "10m", json=True)
    assert r.code == 0
    state = store.load()
    assert state["runs"][t["run_id"]]["lease_until"] == r.data["lease_until"]
    assert state["todos"][t["todo_id"]]["claim"]["lease_until"] == r.data["lease_until"]
    turn.finish(store, "agent:bot", t["run_id"], "no_progress")
    assert cli("--agent", "bot", "turn", "renew", "--run", t["run_id"]).code == 4


def test_blocked_result_releases_without_blocking_the_todo(store, clk):
    start(store, clk, titles=("only",))
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    gates.open_gate(store, "agent:bot", "g1", kind="merge", question="ok?", blocks=[t["todo_id"]])
    fin = turn.finish(store, "agent:bot", t["run_id"], "blocked", note="waiting")
    assert fin["todo_status"] == "open"
    assert store.load()["todos"][t["todo_id"]]["claim"] is None


@pytest.mark.parametrize("args", [["next", "--lease", "forever"], ["next", "--lease", "0s"], ["next", "--goal-id", "zz"],
                                  ["turn", "finish", "--result", "progress"], ["turn", "finish", "--run", "x"],
                                  ["turn", "renew", "--run", "run-nope"]])
def test_bad_input(store, clk, cli, args):
    start(store, clk)
    r = cli("--agent", "bot", *args)
    assert r.code == 2 and "hint:" in r.err
    assert not store.load()["runs"]


def test_concurrent_next_calls_take_distinct_todos(project, cli):
    import json
    import subprocess

    from conftest import subprocess_env

    r = cli("start-goal", "--goal-text", "Parallel", "--goal-id", "g1", *sum((["--todo", f"t{i}"] for i in range(4)), []))
    assert r.code == 0
    procs = [subprocess.Popen([sys.executable, "-m", "loopx", "--agent", f"a{i}", "next", "--json"], cwd=project,
                              env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        docs.append(json.loads(out)["data"])
    assert all(d["started"] for d in docs)
    assert len({d["todo_id"] for d in docs}) == 4 and len({d["run_id"] for d in docs}) == 4
    state = Store.open(str(project)).load()
    holders = {t["claim"]["holder"] for t in state["todos"].values()}
    assert holders == {f"agent:a{i}" for i in range(4)}


def test_more_agents_than_todos(project, cli):
    import json
    import subprocess

    from conftest import subprocess_env

    assert cli("start-goal", "--goal-text", "Few", "--goal-id", "g1", "--todo", "only").code == 0
    procs = [subprocess.Popen([sys.executable, "-m", "loopx", "--agent", f"a{i}", "next", "--json"], cwd=project,
                              env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(3)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        results.append((p.returncode, json.loads(out)["data"]))
    assert sorted(code for code, _ in results) == [0, 1, 1]
    for code, d in results:
        if code == 1:
            assert d["started"] is False and d["decision"]["decision"] == "wait"


def test_asking_again_for_work_you_hold_resumes_the_same_run(store, clk, cli):
    start(store, clk)
    first = turn.next_turn(store, "agent:same", goal_id="g1")
    for _ in range(4):
        again = turn.next_turn(store, "agent:same", goal_id="g1")
        assert again["resumed"] and again["run_id"] == first["run_id"] and again["todo_id"] == first["todo_id"]
    state = store.load()
    assert [r["id"] for r in state["runs"].values()] == [first["run_id"]]
    other = turn.next_turn(store, "agent:other", goal_id="g1")
    assert other["started"] and other["todo_id"] != first["todo_id"]  # nobody was stalled


def test_finish_after_todo_done_verifies_with_the_todos_own_command(project, cli):
    """``todo done`` closes the todo, so the live view leaves it out; ``turn finish --verify`` must
    still find it (its own verify command, its status), not fall back to the goal's command."""
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g1", "--verify", "false",
               "--todo", "one", "--todo-verify", "true", "--todo", "two").code == 0
    nxt = cli("--agent", "bot", "next", json=True).data
    tid, rid = nxt["todo_id"], nxt["run_id"]
    assert cli("--agent", "bot", "todo", "done", tid).code == 0
    fin = cli("--agent", "bot", "turn", "finish", "--run", rid, "--result", "progress", "--verify", json=True).data
    assert fin["verified"] is True and fin["todo_status"] == "done", fin


def _counting_evaluate(monkeypatch) -> list:
    from loopx.kernel.policy import decide

    calls: list = []
    real = decide.evaluate

    def evaluate(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(decide, "evaluate", evaluate)
    return calls


def test_a_claim_on_an_unchanged_store_evaluates_the_rules_once(store, clk, monkeypatch):
    """Nothing was written between the decision and the lock: the same files give the same answer,
    so the claim does not evaluate the rules a second time under the lock (issue 26)."""
    start(store, clk)
    calls = _counting_evaluate(monkeypatch)
    d = turn.next_turn(store, "agent:once", goal_id="g1")
    assert d["started"] and d["decision"]["decision"] == "run" and d["decision"]["todo_id"] == d["todo_id"]
    assert "recorded" not in d["decision"] and "cached" not in d["decision"]  # what a fresh evaluation returns
    assert len(calls) == 1


def test_a_write_between_the_decision_and_the_lock_is_evaluated_again(store, clk, monkeypatch):
    """Another agent claims the todo this one was offered after its decision and before its lock:
    the decision is evaluated again on what the lock sees, and the two never hold one todo."""
    from loopx.kernel.policy import decide

    start(store, clk, titles=("only",))
    real = decide.should_run
    stolen: list = []

    def should_run(*a, **kw):
        d = real(*a, **kw)
        if kw.get("agent") == "slow" and not stolen:  # the other agent's whole `next` lands in between
            stolen.append(turn.next_turn(store, "agent:quick", goal_id="g1"))
        return d

    monkeypatch.setattr(decide, "should_run", should_run)
    calls = _counting_evaluate(monkeypatch)
    slow = turn.next_turn(store, "agent:slow", goal_id="g1")
    assert stolen[0]["started"]
    assert slow["started"] is False and slow["decision"]["decision"] == "wait", slow["decision"]
    assert len(calls) >= 3  # quick's decision, slow's, and slow's again under the lock
    holders = [t["claim"]["holder"] for t in store.load()["todos"].values() if t.get("claim")]
    assert holders == ["agent:quick"]
