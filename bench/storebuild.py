"""Build a realistic loopx store of N events for the benchmarks (store format 2).

The mix is what a governed loop writes: a few goals, agents registered, and per unit of work a
decision, a todo claimed, a run started, evidence recorded, the run finished, a slot spent and the
todo done (or released after no progress), with renewals, gates and handoffs sprinkled in; about
30 todos stay open. Records carry ``node``, ``hlc`` and a valid ``prev`` chain, so doctor's chain
check passes. The clock advances 5-120 s per event and the history *ends at the current time*
(it starts about ``events * 62.5 s`` before now and ends shortly before it), so leases, windows and the live view look like a real
store's, not like one a year in the future.

    from storebuild import build
    proj = build(root, 100_000)        # -> root/proj-100000 with .loopx/
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
from datetime import UTC, datetime, timedelta

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from loopx.kernel.storage import caches, clock, fold, layout, logfold  # noqa: E402
from loopx.kernel.storage.codec import encode  # noqa: E402
from loopx.kernel.storage.store import SEGMENT_BYTES, Store  # noqa: E402

AGENTS = ["claude-code", "codex", "cursor", "shell"]
MEAN_STEP = 62.5  # seconds between events, the mean of randint(5, 120)


class Writer:
    """Appends format-2 records with gap-free seq per stream, one node's hash chain, a moving
    clock, and segment rotation at the store's own threshold."""

    def __init__(self, store: Store, rng: random.Random, start: datetime) -> None:
        self.store = store
        self.fh = {s: open(store.path(layout.open_log(s)), "ab") for s in ("events", "evidence")}  # noqa: SIM115
        self.size = {"events": 0, "evidence": 0}
        self.segments = {"events": 0, "evidence": 0}
        self.seq = {"events": 0, "evidence": 0}
        self.count = 0
        self.now = start
        self.rng = rng
        self.node = store.node_id(create=True)
        self.prev = None
        self.hlc = None
        self.state = fold.empty()

    def ts(self) -> str:
        self.now += timedelta(seconds=self.rng.randint(5, 120))
        return clock.iso(self.now)

    def add(self, type_: str, goal: str | None, data: dict, actor: str = "human:bench", stream: str = "events") -> int:
        self.seq[stream] += 1
        ts = self.ts()
        ms = int(self.now.timestamp() * 1000)
        self.hlc = [ms, 0] if self.hlc is None or ms > self.hlc[0] else [self.hlc[0], self.hlc[1] + 1]
        rec = {"v": 1, "seq": self.seq[stream], "id": f"e-{self.count:016x}", "ts": ts, "node": self.node,
               "hlc": self.hlc, "prev": self.prev, "actor": actor, "type": type_, "goal": goal, "data": data}
        line = encode(rec)
        self.prev = hashlib.sha256(line[:-1]).hexdigest()
        self.fh[stream].write(line)
        self.size[stream] += len(line)
        if self.size[stream] >= SEGMENT_BYTES:
            self._rotate(stream)
        self.count += 1
        return self.seq[stream]

    def _rotate(self, stream: str) -> None:
        """Close the open file as the next segment, as ``Store._rotate`` does, with the checkpoint
        (the live view at that point) that loopx writes next to a closed events segment."""
        for fh in self.fh.values():
            fh.flush()
        if stream == "events":  # fold what was written so far (incrementally) for the checkpoint
            for name in ("events", "evidence"):
                logfold.fold_stream(self.store, self.state, name, self.state["meta"]["files"][name]["offset"])
        self.fh[stream].close()
        self.segments[stream] += 1
        os.makedirs(self.store.path(stream), exist_ok=True)
        os.rename(self.store.path(layout.open_log(stream)), self.store.segment_path(stream, self.segments[stream]))
        self.fh[stream] = open(self.store.path(layout.open_log(stream)), "ab")  # noqa: SIM115
        self.size[stream] = 0
        meta = self.state["meta"]["files"][stream]
        if stream == "events":
            meta["segments"], meta["offset"], meta["tail"] = self.segments[stream], 0, ""
            caches.write_checkpoint(self.store, self.state, self.segments[stream])

    def close(self) -> None:
        for fh in self.fh.values():
            fh.close()


def build(root: str, events: int, seed: int = 7, end: datetime | None = None) -> str:
    """Create ``root/proj-<events>`` whose store holds ``events`` records ending about ``end``
    (default now); returns the project path."""
    rng = random.Random(seed)
    proj = os.path.join(root, f"proj-{events}")
    os.makedirs(proj)
    store, _ = Store.create(proj)
    end = end or datetime.now(UTC)
    # start early enough that the random walk ends before ``end`` (mean plus three standard deviations)
    w = Writer(store, rng, end - timedelta(seconds=events * (MEAN_STEP + 100 / max(1, events) ** 0.5)))
    goals = [f"goal-{i}" for i in range(4)]
    for i, gid in enumerate(goals):
        w.add("goal.started", gid, {"objective": f"Objective number {i}: make the thing work well",
                                    "done_when": "all tests pass", "verify": "true", "priority": i,
                                    "scope": {"allow": ["src/**", "tests/**"], "deny": ["secrets/**"],
                                              "protect": ["merge", "release"]},
                                    "quota": {"slots": 100000, "window": 86400, "cooldown": 0, "stall_after": 3}})
    for name in AGENTS:
        w.add("agent.registered", None, {"name": name, "kind": name})
    backlog: list[tuple[str, str]] = []
    n = 0
    turns = 0
    while w.count < events:
        turns += 1
        gid = rng.choice(goals)
        while len(backlog) < 30:
            tid = f"t-{n:06x}"
            n += 1
            w.add("todo.added", gid, {"todo_id": tid, "title": f"Work item {n}: fix one part of the system",
                                      "priority": rng.randint(0, 3), "detail": "see the issue tracker"})
            backlog.append((tid, gid))
        tid, gid = backlog.pop(rng.randrange(len(backlog)))
        agent = "agent:" + rng.choice(AGENTS)
        until = clock.iso(w.now + timedelta(minutes=5))
        w.add("decision.recorded", gid, {"decision": "run", "reason": "ready", "todo": tid}, actor=agent)
        fence = w.add("todo.claimed", gid, {"todo_id": tid, "holder": agent, "lease_until": until}, actor=agent)
        rid = f"run-{turns:06x}"
        w.add("run.started", gid, {"run_id": rid, "todo_id": tid, "agent": agent, "lease_until": until,
                                   "fingerprint": f"{rng.getrandbits(64):016x}", "mode": "work", "fence": fence},
              actor=agent)
        if rng.random() < 0.2:
            w.add("todo.renewed", gid, {"todo_id": tid, "lease_until": clock.iso(w.now + timedelta(minutes=5))},
                  actor=agent)
        eid = f"ev-{turns:08x}"
        w.add("evidence.added", gid, {"evidence_id": eid, "kind": "test", "summary": "12 passed, 0 failed",
                                      "todo": tid, "run": rid, "command": "pytest -q", "exit_code": 0,
                                      "excerpt": "....\n12 passed in 0.31s\n", "sha256": f"{rng.getrandbits(256):064x}",
                                      "bytes": 40}, actor=agent, stream="evidence")
        result = rng.choice(["progress", "progress", "completion", "no_progress"])
        w.add("run.finished", gid, {"run_id": rid, "result": result, "verified": True, "evidence": [eid],
                                    "fingerprint": f"{rng.getrandbits(64):016x}"}, actor=agent)
        w.add("quota.spent", gid, {"run_id": rid, "slots": 1}, actor=agent)
        if result == "no_progress":
            w.add("todo.released", gid, {"todo_id": tid, "note": "no progress"}, actor=agent)
            backlog.append((tid, gid))
        else:
            w.add("todo.completed", gid, {"todo_id": tid, "evidence": [eid], "note": None}, actor=agent)
        if rng.random() < 0.03:
            gate = f"gate-{turns:06x}"
            w.add("gate.opened", gid, {"gate_id": gate, "kind": "merge", "question": "Merge the branch?", "blocks": []},
                  actor=agent)
            w.add("gate.approved", gid, {"gate_id": gate, "note": "ok", "channel": "terminal"})
        if rng.random() < 0.02:
            w.add("handoff.recorded", gid, {"from": agent, "to": "agent:codex", "todo": None, "note": "over to you"},
                  actor=agent)
    w.close()
    return proj
