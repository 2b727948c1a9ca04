"""Soak: 240 simulated hours of the governed loop, driven in process with LOOPX_NOW.

A tick every 10 minutes asks should-run; on `run` a simulated agent takes the turn and makes
progress on some turns, fails or makes none on others. A scripted human adds work every 12 hours,
nudges the goal when it stalls, and approves a merge gate 30 simulated hours after it opens.
At the end the invariants a user relies on must hold."""

from __future__ import annotations

import os
import random
import shutil
import sys
from datetime import UTC, datetime, timedelta

from conftest import human_channel
from loopx.kernel.policy import decide, turn
from loopx.kernel.storage import clock
from loopx.kernel.storage.store import Store
from loopx.kernel.write import evidence, gates, goals, todos

START = datetime(2026, 4, 1, 0, 0, tzinfo=UTC)
TICK = timedelta(minutes=10)
HOURS = 240
SLOTS, WINDOW = 6, 86400


class Sim:
    def __init__(self, store, monkeypatch):
        self.store, self.mp = store, monkeypatch
        self.rng = random.Random(20260401)
        self.now = START
        self.stats = {"ticks": 0, "turns": 0, "skipped": 0, "spent": 0, "decisions": {}}
        self.gate_opened_at = None
        self.gate_id = None
        self.stalled_since = None
        self.completed = 0

    def at(self, when):
        self.now = when
        self.mp.setenv("LOOPX_NOW", clock.iso(when))

    def agent_turn(self, d):
        t = turn.next_turn(self.store, "agent:sim", goal_id="g1", lease="30m")
        assert t["started"], t["decision"]
        self.stats["turns"] += 1
        self.at(self.now + timedelta(minutes=4))
        roll = self.rng.random()
        if self.completed == 8 and self.gate_id is None:
            g = gates.open_gate(self.store, "agent:sim", "g1", kind="merge", question="merge the first batch?",
                                run=t["run_id"])
            self.gate_id, self.gate_opened_at = g["gate_id"], self.now
            turn.finish(self.store, "agent:sim", t["run_id"], "blocked", note="asked for the merge gate")
            return
        if roll < 0.45:
            fin = turn.finish(self.store, "agent:sim", t["run_id"], "completion", verify=True)
            self.completed += fin["todo_status"] == "done"
        elif roll < 0.6:
            ev = evidence.add(self.store, "agent:sim", "g1", kind="note", summary="partial work", run=t["run_id"])
            fin = turn.finish(self.store, "agent:sim", t["run_id"], "progress", evidence=[ev["evidence_id"]],
                              verify=True)
        elif roll < 0.85:
            fin = turn.finish(self.store, "agent:sim", t["run_id"], "failed", note="tool error")
        else:
            fin = turn.finish(self.store, "agent:sim", t["run_id"], "no_progress")
        if fin["verified"] and fin["result"] in ("progress", "completion"):
            receipt = turn.spend_slot(self.store, "agent:sim", t["run_id"])
            self.stats["spent"] += receipt["slots"] if receipt["spent"] and not receipt["repeat"] else 0

    def human(self, d, tick: int):
        if tick % 72 == 0 and tick:  # new work every 12 hours
            todos.add(self.store, "human:pat", "g1", f"new request at tick {tick}")
        if (self.gate_id and self.now - self.gate_opened_at >= timedelta(hours=30)
                and self.store.load()["gates"][self.gate_id]["status"] == "pending"):
            gates.decide(self.store, "human:pat", self.gate_id, approve=True, channel="confirm-flag", human=human_channel())
        if d["reason"] == "stalled":
            self.stalled_since = self.stalled_since or self.now
            if self.now - self.stalled_since >= timedelta(hours=2):
                goals.update_goal(self.store, "human:pat", "g1", done_when=f"all requests handled (nudged at {tick})")
                self.stalled_since = None

    def check_cache(self, d):
        """A cached answer must equal a fresh evaluation at the same moment."""
        self.stats["cached"] = self.stats.get("cached", 0) + d["cached"]
        fresh = decide.should_run(self.store, goal_id="g1", agent="sim", record=False, cache=False)
        fields = ("decision", "reason", "todo_id", "gate_id", "next_check_at", "scheduler_hint", "budget", "mode")
        assert {f: d.get(f) for f in fields} == {f: fresh.get(f) for f in fields}, self.now

    def run(self):
        for tick in range(HOURS * 6):
            self.at(START + tick * TICK)
            self.stats["ticks"] += 1
            d = decide.should_run(self.store, goal_id="g1", agent="sim")
            self.check_cache(d)
            self.stats["decisions"][d["decision"]] = self.stats["decisions"].get(d["decision"], 0) + 1
            if d["decision"] == "run":
                self.agent_turn(d)
            else:
                self.stats["skipped"] += 1
            self.human(d, tick)


def test_soak_240_hours(project, monkeypatch, capsys):
    monkeypatch.setenv("LOOPX_NOW", clock.iso(START))
    store = Store.open(str(project))
    goals.start_goal(store, "human:pat", objective="Work through the request queue", goal_id="g1", verify=f'"{sys.executable}" -c pass',
                     todos=[f"request {i}" for i in range(30)], protect=["merge"],
                     quota=goals.quota_policy(slots=SLOTS, window="24h", stall_after=3))
    sim = Sim(store, monkeypatch)
    sim.run()
    state = store.load()
    s = sim.stats
    with capsys.disabled():
        print(f"\nsoak: {s['ticks']} ticks, {s['turns']} turns run, {s['skipped']} ticks skipped, "
              f"{s['spent']} slots spent, {s.get('cached', 0)} answers from the decision cache, "
              f"decisions {s['decisions']}")

    # budget never exceeded in any window
    ledger = state["spends"].get("g1", [])
    for ts, _slots, _run in ledger:
        end = clock.parse_ts(ts)
        inside = [e for e in ledger if end - timedelta(seconds=WINDOW) < clock.parse_ts(e[0]) <= end]
        assert sum(e[1] for e in inside) <= SLOTS, ts
    assert s["spent"] == sum(e[1] for e in ledger) > 0
    # every spent slot is backed by a verified run that made progress; one spend per run
    runs = state["runs"]
    assert len({e[2] for e in ledger}) == len(ledger)
    for _ts, _slots, rid in ledger:
        assert runs[rid]["verified"] and runs[rid]["result"] in ("progress", "completion")
    # no todo done without evidence
    done = [t for t in state["todos"].values() if t["status"] == "done"]
    assert done
    for t in done:
        assert t["evidence"] and all(e in state["evidence"] for e in t["evidence"])
    # the gate was approved by the scripted human about 30 hours after it opened
    gate = state["gates"][sim.gate_id]
    assert gate["status"] == "approved" and gate["decided_by"] == "human:pat"
    assert clock.parse_ts(gate["decided"]) - clock.parse_ts(gate["created"]) >= timedelta(hours=30)
    # no event lost: gap-free, no bad lines, and a full replay equals the incremental state
    for name, meta in state["meta"]["files"].items():
        assert meta["bad"] == 0 and not meta.get("seq_gaps"), name
        assert meta["last_seq"] == meta["lines"], name
    shutil.rmtree(store.path("cache"))
    os.makedirs(store.path("cache"))
    replay = Store.open(str(project)).load()
    for key in ("goals", "todos", "gates", "runs", "spends", "evidence"):
        assert replay[key] == state[key], key
    assert all(r["finished"] for r in runs.values())
    assert s["turns"] == len(runs)
    # idle ticks outnumber turns by far, and skips were recorded as a handful of decision lines
    decisions = sum(1 for r in store.iter_records() if r["type"] == "decision.recorded")
    assert decisions < s["ticks"] / 4
