"""The live view's one promise, as a property: for any sequence of real operations (goals, todos
added, claimed, done, released, handed off, gates opened, decided and used, evidence, turns, quota
changes, time passing, snapshots taken), every reader gives the same answer on the live view as on
the full state. Two live views are checked: one pruned from the full state just now
(``fold.live_view``) and the one a read really gets (the cached view with the tail folded onto it,
``Store.load(view="live")``). A reader that looks up a record the view left out raises
``NotInLiveView`` and is asked again on the full state, as ``Store.read`` does.

Bounded by examples and steps, never by time (``deadline=None``)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from conftest import human_channel
from loopx.errors import LoopxError
from loopx.guard import verdicts as guard
from loopx.kernel.policy import decide, packet, turn
from loopx.kernel.read import approvals, budget, fingerprint, notices, queries, stall, status
from loopx.kernel.storage import actors, caches, clock, fold
from loopx.kernel.storage.store import Store
from loopx.kernel.write import agents, evidence, gates, goals, todos

H = "human:tester"
GOALS = ("g1", "g2")
AGENTS = ("ada", "bob")
KINDS = ("merge", "release")
START = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def _ask(fn, view: dict, full: dict):
    """``fn`` on the live view, or on the full state when it looks up a record the view left out."""
    try:
        return fn(view)
    except fold.NotInLiveView:
        return fn(full)


def _readers(full: dict, now: datetime) -> dict:
    """name -> reader(state): every reader a hot command or a client runs on the live view."""
    now_iso = clock.iso(now)
    out = {
        "status": lambda s: {k: v for k, v in status.summary(s, now_iso).items() if k != "store"},
        "holdings": lambda s: queries.holdings(s, now_iso, expired=True),
        "notices": lambda s: (notices.pending(s, ["webhook", "desktop"], now_iso), notices.recent(s),
                              notices.maybe_pending(s, now_iso), notices.next_retry(s)),
        "agents": lambda s: sorted(s["agents"].items()),
    }
    for gid in GOALS:
        out[f"decide {gid}"] = lambda s, g=gid: decide.evaluate(
            s, now, goal_id=g, agent="ada", fingerprint=lambda x, s=s: fingerprint.state_part(s, x))
        out[f"fingerprint {gid}"] = lambda s, g=gid: fingerprint.state_part(s, g)
        out[f"budget {gid}"] = lambda s, g=gid: (budget.budget(s, s["goals"][g], now),
                                                 budget.turn_units(s, s["goals"][g], now),
                                                 budget.real_units(s, s["goals"][g], now))
        out[f"stall {gid}"] = lambda s, g=gid: stall.stalled(s, s["goals"][g])
        out[f"queries {gid}"] = lambda s, g=gid: (
            [t["id"] for t in queries.ready_todos(s, g, now_iso)], [t["id"] for t in queries.candidates(s, g, now_iso)],
            queries.gate_blocked(s, g), [x["id"] for x in queries.pending_gates(s, g)],
            [r["id"] for r in queries.open_runs(s, g)], [e["id"] for e in queries.recent_evidence(s, g)],
            decide.goal_verify_failed(s, s["goals"][g]), decide.goal_verify_passed(s, s["goals"][g]))
        for kind in KINDS:
            out[f"guard {gid} {kind}"] = lambda s, g=gid, k=kind: _guard(s, full, g, k)
        run = full["runs"].get(full["goals"][gid].get("last_run") or "")
        if run is not None:  # the packet of the goal's newest turn, as `loopx turn` would build it again
            out[f"packet {gid}"] = lambda s, g=gid, r=run: packet.build(
                s, g, r["todo"], r["id"], r["lease_until"], r["agent"] or "agent:ada", now, mode=r["mode"])
    for tid in full["todos"]:
        out[f"todo {tid}"] = lambda s, t=tid: (turn.previous_agent_alive(s, t), queries.deps_done(s, s["todos"][t]))
    return out


def _guard(state: dict, full: dict, goal_id: str, kind: str):
    """What the pre-tool guard reads, with the hook's rule (hosts.entry): a view that left out
    usable approvals of this kind (``approvals_left``) answers a denial by asking the full state."""
    def read(s):
        return guard.gate_state(s, goal_id, kind), approvals.last_used(s, goal_id, kind)

    answer = read(state)
    if answer[0][0] != "approved" and fold.is_live(state) and (
            not state.get("approvals") or state.get("approvals_left", {}).get(goal_id, {}).get(kind)):
        return read(full)
    return answer


class LiveViewMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="loopx-live-")
        self.now = START
        self._set_clock()
        self.store, _ = Store.create(self.dir)
        self.evidence: list[str] = []

    def teardown(self):
        try:
            if self.store.load(save_snapshot=False)["goals"]:  # the run got past ``start``
                self.every_reader_agrees()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _set_clock(self):
        os.environ["LOOPX_NOW"] = clock.iso(self.now)

    def _state(self) -> dict:
        return self.store.load(save_snapshot=False)

    def _todos(self, *statuses) -> list[str]:
        # in the order they were added, not by their random ids: a replayed example picks the same ones
        return [t["id"] for t in sorted(self._state()["todos"].values(), key=lambda t: t["seq"])
                if not statuses or t["status"] in statuses]

    def _try(self, fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except LoopxError:  # a clean refusal (a busy claim, nothing ready, no evidence) is part of the game
            return None

    @initialize()
    def start(self):
        goals.start_goal(self.store, H, objective="a", goal_id="g1", quota={"slots": 6, "window": 3600, "stall_after": 2},
                         verify=f"{sys.executable} -c pass", todos=["first", "second"])
        goals.start_goal(self.store, H, objective="b", goal_id="g2", quota={"slots": 4, "window": 7200}, todos=["other"])
        for gid in GOALS:
            self.evidence.append(evidence.add(self.store, H, gid, kind="test", summary="green", exit_code=0)["evidence_id"])

    @rule(goal=st.sampled_from(GOALS), n=st.integers(1, 4),
          result=st.sampled_from(("progress", "progress", "no_progress", "completion")))
    def history(self, goal, n, result):
        """A stretch of work that a live view can leave out: todos added and done with fresh
        evidence, turns run (verified on g1, whose check passes) and charged."""
        for i in range(n):
            tid = todos.add(self.store, H, goal, f"step {i}")["todo_id"]
            self._turn("ada", goal, result, verify=goal == "g1", spend=True)
            self.add_evidence(goal, ok=True, check=False)
            self._try(todos.done, self.store, H, tid, [self.evidence[-1]])
            self.now += timedelta(seconds=600)
            self._set_clock()

    # ------------------------------------------------------------------ todos
    @rule(goal=st.sampled_from(GOALS), dep=st.integers(0, 20), every=st.booleans())
    def add_todo(self, goal, dep, every):
        done = self._todos("done", "archived")
        deps = [done[dep % len(done)]] if done and dep % 3 == 0 else None  # a dependency on a closed todo
        self._try(todos.add, self.store, H, goal, f"todo {self.now.isoformat()}", depends_on=deps,
                  every=3600 if every and dep % 5 == 0 else None)

    @rule(agent=st.sampled_from(AGENTS), pick=st.integers(0, 20))
    def claim(self, agent, pick):
        open_ = self._todos("open")
        if open_:
            self._try(todos.claim, self.store, actors.agent(agent), open_[pick % len(open_)])

    @rule(pick=st.integers(0, 20), by_agent=st.booleans())
    def done(self, pick, by_agent):
        live = self._todos("open", "claimed")
        if not live or not self.evidence:
            return
        tid = live[pick % len(live)]
        holder = (self._state()["todos"][tid].get("claim") or {}).get("holder")
        who = holder if by_agent and holder else H
        self._try(todos.done, self.store, who, tid, [self.evidence[-1]])

    @rule(pick=st.integers(0, 20), archive=st.booleans())
    def release_or_archive(self, pick, archive):
        claimed = self._todos("claimed") if not archive else self._todos("open")
        if claimed:
            tid = claimed[pick % len(claimed)]
            if archive:
                self._try(todos.archive, self.store, H, tid)
            else:
                holder = self._state()["todos"][tid]["claim"]["holder"]
                self._try(todos.release, self.store, holder, tid)

    @rule(pick=st.integers(0, 20))
    def reopen(self, pick):
        closed = self._todos("done", "archived")
        if closed:  # touches a todo a live view may have left out
            self._try(todos.update, self.store, H, closed[pick % len(closed)], reopen=True, human=human_channel())

    @rule(frm=st.sampled_from(AGENTS), to=st.sampled_from(AGENTS))
    def handoff(self, frm, to):
        held = [k for k, t in self._state()["todos"].items() if (t.get("claim") or {}).get("holder") == actors.agent(frm)]
        if held and frm != to:
            self._try(agents.handoff, self.store, actors.agent(frm), to=to, todo=held[0], note="over to you")

    # ------------------------------------------------------------------ gates
    @rule(goal=st.sampled_from(GOALS), kind=st.sampled_from(KINDS))
    def open_gate(self, goal, kind):
        self._try(gates.open_gate, self.store, H, goal, kind=kind, question=f"{kind}?")

    @rule(goal=st.sampled_from(GOALS), kind=st.sampled_from(KINDS), standing=st.booleans(), use=st.booleans())
    def approval(self, goal, kind, standing, use):
        """A gate opened and approved at once (and maybe used): approvals pile up for the view to prune."""
        g = self._try(gates.open_gate, self.store, H, goal, kind=kind, question=f"{kind}?")
        if g:
            self._try(gates.decide, self.store, H, g["gate_id"], approve=True, channel="confirm-flag",
                      human=human_channel(), standing=standing)
            if use:
                self._try(gates.use, self.store, "agent:ada", g["gate_id"], f"git push ({kind})")

    @rule(pick=st.integers(0, 20), approve=st.booleans(), standing=st.booleans())
    def decide_gate(self, pick, approve, standing):
        pending = [g["id"] for g in sorted(self._state()["gates"].values(), key=lambda g: g["seq"]) if g["status"] == "pending"]
        if pending:
            self._try(gates.decide, self.store, H, pending[pick % len(pending)], approve=approve,
                      channel="confirm-flag", human=human_channel(), standing=standing and approve)

    @rule(goal=st.sampled_from(GOALS), kind=st.sampled_from(KINDS))
    def use_gate(self, goal, kind):
        g = approvals.covering_gate(self._state(), goal, kind)
        if g is not None:
            self._try(gates.use, self.store, "agent:ada", g["id"], f"git push ({kind})")

    # ------------------------------------------------------------------ evidence, turns, quota, time
    @rule(goal=st.sampled_from(GOALS), ok=st.booleans(), check=st.booleans())
    def add_evidence(self, goal, ok, check):
        out = self._try(evidence.add, self.store, H, goal, kind="test", summary="ran", exit_code=0 if ok else 1,
                        command="pytest -q" if check else None)
        if out and ok and not check:
            self.evidence.append(out["evidence_id"])

    @rule(agent=st.sampled_from(AGENTS), goal=st.sampled_from(GOALS),
          result=st.sampled_from(("progress", "no_progress", "failed", "completion", "blocked")), verify=st.booleans(),
          spend=st.booleans())
    def turn(self, agent, goal, result, verify, spend):
        self._turn(agent, goal, result, verify, spend)

    def _turn(self, agent, goal, result, verify, spend):
        who = actors.agent(agent)
        t = self._try(turn.next_turn, self.store, who, goal_id=goal)
        if t and t.get("started"):
            self._try(turn.finish, self.store, who, t["run_id"], result, verify=verify and result == "progress")
            if spend:
                self._try(turn.spend_slot, self.store, who, t["run_id"])

    @rule(goal=st.sampled_from(GOALS), hours=st.sampled_from((1, 2, 24)))
    def set_window(self, goal, hours):
        self._try(goals.set_quota, self.store, H, goal, goals.quota_policy(window=f"{hours}h"), human=human_channel())

    @rule(seconds=st.sampled_from((60, 1800, 4000, 90000)))
    def wait(self, seconds):
        self.now += timedelta(seconds=seconds)
        self._set_clock()

    @rule()
    def snapshot(self):
        """Save the live view now: later reads fold the tail onto it (what every hot command reads)."""
        self.store.load(view="live", save_snapshot="refresh")

    # ------------------------------------------------------------------ the property
    @rule()
    def check(self):
        """The property, at a point hypothesis picks (and once more at the end, ``teardown``)."""
        self.every_reader_agrees()

    def every_reader_agrees(self):
        full = self.store.load(save_snapshot=False)
        now = clock.now()
        pruned = fold.guarded(fold.live_view(full, clock.iso(now)))
        cached = self.store.load(view="live", save_snapshot=False)
        for name, reader in _readers(full, now).items():
            want = reader(full)
            for label, view in (("pruned", pruned), ("cached", cached)):
                got = _ask(reader, view, full)
                assert got == want, f"{name} differs on the {label} live view:\n{got!r}\n!=\n{want!r}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("live_every", [1, 5])
def test_every_reader_gives_the_same_answer_on_the_live_view_and_the_full_state(monkeypatch, live_every):
    """``live_every``: every write saves the view (each step's view freshly pruned), or a write
    every few lines (readers see a saved view and a tail past it, as with caches.LIVE_EVERY)."""
    monkeypatch.setattr(fold, "APPROVALS_KEPT", 1)  # so a few gates are enough to leave approvals out
    monkeypatch.setattr(caches, "LIVE_EVERY", live_every)
    monkeypatch.delenv("LOOPX_NOW", raising=False)
    run_state_machine_as_test(LiveViewMachine, settings=settings(
        max_examples=25 if live_every == 1 else 12, stateful_step_count=40, deadline=None, derandomize=True, database=None,
        suppress_health_check=list(HealthCheck)))

