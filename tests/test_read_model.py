"""One read model: status, ``quota show``, should-run, the turn packet, the dashboard API and
``loopx.api`` report the same budget, holdings and readiness for the same store, whatever happened
in it (hypothesis builds the stores from random sequences of real operations)."""

from __future__ import annotations

import json
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopx import api
from loopx.cli import main
from loopx.kernel.policy import packet, turn
from loopx.kernel.storage import actors, clock
from loopx.kernel.storage.store import Store
from loopx.kernel.write import gates, goals, todos

H = "human:tester"
AGENTS = ("ada", "bob")
OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 1)),
    st.tuples(st.just("claim"), st.sampled_from(AGENTS), st.integers(0, 5)),
    st.tuples(st.just("turn"), st.sampled_from(AGENTS), st.booleans()),
    st.tuples(st.just("turn"), st.sampled_from(AGENTS), st.just(True)),
    st.tuples(st.just("gate"), st.integers(0, 1)),
    st.tuples(st.just("wait"), st.integers(1, 7200)),
), min_size=1, max_size=12)


def _cli(*args) -> dict:
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        main([*args, "--format", "json"])
    return json.loads(buf.getvalue())["data"]


def _build(store: Store, ops, clk) -> None:
    goals.start_goal(store, H, objective="a", goal_id="g1", quota={"slots": 2, "window": 3600},
                     verify=f"{sys.executable} -c pass", todos=["first", "second"])
    goals.start_goal(store, H, objective="b", goal_id="g2", quota={"slots": 2, "window": 7200}, todos=["other"])
    for op in ops:
        state = store.load()
        open_todos = [t for t in state["todos"].values() if t["status"] in ("open", "claimed")]
        try:
            if op[0] == "add":
                todos.add(store, H, ("g1", "g2")[op[1]], f"todo {len(state['todos'])}")
            elif op[0] == "claim" and open_todos:
                todos.claim(store, actors.agent(op[1]), open_todos[op[2] % len(open_todos)]["id"])
            elif op[0] == "turn":
                t = turn.next_turn(store, actors.agent(op[1]), goal_id="g1")
                if t.get("started"):
                    rid = t["run_id"]
                    turn.finish(store, actors.agent(op[1]), rid, "progress", verify=op[2])
                    turn.spend_slot(store, actors.agent(op[1]), rid)
            elif op[0] == "gate":
                gates.open_gate(store, H, ("g1", "g2")[op[1]], kind="merge", question="merge?")
            elif op[0] == "wait":
                clk.advance(op[1])
        except Exception as exc:  # a clean refusal (busy claim, nothing ready) is part of the game
            from loopx.errors import LoopxError

            assert isinstance(exc, LoopxError), exc


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS)
def test_every_client_reports_the_same_budget_holdings_and_readiness(ops, tmp_path_factory, monkeypatch):
    from datetime import UTC, datetime

    from conftest import Clock
    from loopx.dashboard.api import Api, budget_chart, project_key

    proj = tmp_path_factory.mktemp("rm")
    monkeypatch.chdir(proj)
    clk = Clock(monkeypatch, datetime(2026, 6, 1, 9, 0, tzinfo=UTC))
    assert main(["connect", "--quiet"]) == 0
    store = Store.open(str(proj))
    _build(store, ops, clk)
    now_iso = clock.now_iso()
    state = store.load()

    status = {g["id"]: g for g in _cli("status")["goals"]}
    shown = {q["goal_id"]: q for q in _cli("quota", "show", "--goal-id", "g1")["quotas"]}
    shown.update({q["goal_id"]: q for q in _cli("quota", "show", "--goal-id", "g2")["quotas"]})
    conn = api.connect(str(proj))
    via_api = {g["id"]: g for g in api.status(conn).goals}
    for gid in ("g1", "g2"):
        b = status[gid]["budget"]
        assert (b["spent"], b["left"], b["slots"]) == (shown[gid]["spent"], shown[gid]["left"], shown[gid]["slots"])
        assert via_api[gid]["budget"] == b
        assert budget_chart(state, state["goals"][gid], now_iso)["spent"] == b["spent"]
        assert shown[gid]["next_slot_at"] == b["frees_at"]
        d = _cli("quota", "should-run", "--goal-id", gid, "--no-record")
        if d.get("budget"):
            assert (d["budget"]["spent"], d["budget"]["left"]) == (b["spent"], b["left"])
        p = packet.build(state, gid, None, "run-x", None, H, clock.now())
        assert (p["budget"]["spent"], p["budget"]["left"]) == (b["spent"], b["left"])
        ready_ids = [t["id"] for t in status[gid]["ready"]]
        assert ready_ids == [t["id"] for t in via_api[gid]["ready"]]
        if d["decision"] == "run" and d.get("todo_id"):
            assert d["todo_id"] in ready_ids

    # holdings: status, `agent list`, the dashboard's agents page and the kernel agree on live leases
    listed = {a["name"]: sorted(a["holds"]) for a in _cli("agent", "list")["agents"]}
    in_status = {a["name"]: sorted(a["holds"]) for a in _cli("status")["agents"]}
    board = Api().agents(now_iso)
    mine = project_key(str(proj))  # hypothesis examples share one LOOPX_HOME: look at this project only
    dash = {a["name"]: sorted(h["id"] for h in a["holds"] if h["live"])
            for p in board["projects"] if p["key"] == mine for a in p["agents"]}
    for name in AGENTS:
        if name in listed:
            assert listed[name] == in_status.get(name, []) == dash.get(name, [])
