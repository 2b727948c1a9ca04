"""Benchmark: how long ``loopx status`` and ``loopx todo add`` take on stores of 1k, 10k and 100k
events, next to a bare ``python -c pass`` (issue 2; docs/testing.md: a figure, not a test).

The stores hold a realistic mix written with the store's own encoder: a few goals, and for each
unit of work a todo added, claimed, a run started, evidence recorded, the run finished, a slot
spent and the todo done, with decisions, gates, handoffs and renewals sprinkled in; about 30 todos
stay open. Each command runs as a fresh process (``python -m loopx``), as a cron job or an agent
would run it. The first ``status`` after building folds the whole log and writes the snapshot
(reported as ``cold``); the medians are over the warm runs.

Usage: python bench/status.py [--sizes 1000,10000,100000] [--runs 15] [--keep DIR]
Ends with one JSON line per store size and command:
{"command": ..., "events": N, "median_s": ..., "baseline_s": ..., "ratio": ...}
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from loopx.kernel.storage import clock  # noqa: E402
from loopx.kernel.storage.codec import encode  # noqa: E402
from loopx.kernel.storage.store import Store  # noqa: E402

AGENTS = ["claude-code", "codex", "cursor", "shell"]
START = datetime(2026, 1, 1, tzinfo=UTC)


class Writer:
    """Appends records with gap-free seq per stream and a moving clock."""

    def __init__(self, store: Store, rng: random.Random) -> None:
        self.fh = {s: open(store.path(f"{s}.jsonl"), "ab") for s in ("events", "evidence")}  # noqa: SIM115
        self.seq = {"events": 0, "evidence": 0}
        self.count = 0
        self.now = START
        self.rng = rng

    def ts(self) -> str:
        self.now += timedelta(seconds=self.rng.randint(5, 120))
        return clock.iso(self.now)

    def add(self, type_: str, goal: str | None, data: dict, actor: str = "human:bench", stream: str = "events") -> int:
        self.seq[stream] += 1
        rec = {"v": 1, "seq": self.seq[stream], "id": f"e-{self.count:016x}", "ts": self.ts(), "actor": actor,
               "type": type_, "goal": goal, "data": data}
        self.fh[stream].write(encode(rec))
        self.count += 1
        return self.seq[stream]

    def close(self) -> None:
        for fh in self.fh.values():
            fh.close()


def build(root: str, events: int, seed: int = 7) -> str:
    """Create a project under ``root`` whose store holds ``events`` records; returns its path."""
    rng = random.Random(seed)
    proj = os.path.join(root, f"proj-{events}")
    os.makedirs(proj)
    store, _ = Store.create(proj)
    w = Writer(store, rng)
    goals = [f"goal-{i}" for i in range(4)]
    for i, gid in enumerate(goals):
        w.add("goal.started", gid, {"objective": f"Objective number {i}: make the thing work well",
                                    "done_when": "all tests pass", "verify": "pytest -q", "priority": i,
                                    "scope": {"allow": ["src/**", "tests/**"], "deny": ["secrets/**"],
                                              "protect": ["merge", "release"]},
                                    "quota": {"slots": 48, "window": 86400, "cooldown": 0, "stall_after": 3}})
    for name in AGENTS:
        w.add("agent.registered", None, {"name": name, "kind": name})
    backlog: list[tuple[str, str]] = []
    n = 0
    while w.count < events:
        gid = rng.choice(goals)
        while len(backlog) < 30:
            tid = f"t-{n:06x}"
            n += 1
            w.add("todo.added", gid, {"todo_id": tid, "title": f"Work item {n}: fix one part of the system",
                                      "priority": rng.randint(0, 3), "detail": "see the issue tracker"})
            backlog.append((tid, gid))
        tid, gid = backlog.pop(rng.randrange(len(backlog)))
        agent = "agent:" + rng.choice(AGENTS)
        until = clock.iso(w.now + timedelta(minutes=30))
        w.add("decision.recorded", gid, {"decision": "run", "reason": "ready", "todo": tid}, actor=agent)
        fence = w.add("todo.claimed", gid, {"todo_id": tid, "holder": agent, "lease_until": until}, actor=agent)
        rid = f"run-{n:06x}"
        w.add("run.started", gid, {"run_id": rid, "todo_id": tid, "agent": agent, "lease_until": until,
                                   "fingerprint": f"{rng.getrandbits(64):016x}", "mode": "work", "fence": fence},
              actor=agent)
        if rng.random() < 0.2:
            w.add("todo.renewed", gid, {"todo_id": tid, "lease_until": clock.iso(w.now + timedelta(minutes=30))},
                  actor=agent)
        eid = f"ev-{n:08x}"
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
            gate = f"gate-{n:06x}"
            w.add("gate.opened", gid, {"gate_id": gate, "kind": "merge", "question": "Merge the branch?", "blocks": []},
                  actor=agent)
            w.add("gate.approved", gid, {"gate_id": gate, "note": "ok", "channel": "terminal"})
        if rng.random() < 0.02:
            w.add("handoff.recorded", gid, {"from": agent, "to": "agent:codex", "todo": None, "note": "over to you"},
                  actor=agent)
    w.close()
    return proj


def timed(cmd: list[str], cwd: str, env: dict) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--keep", metavar="DIR", help="build the stores here and keep them")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    root = args.keep or tempfile.mkdtemp(prefix="loopx-bench-")
    os.makedirs(root, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "src"), LOOPX_HOME=os.path.join(root, "home"),
               NO_COLOR="1", LOOPX_NO_UPDATE_CHECK="1")
    # measure what a user gets: bytecode caching on (a CI image may turn it off), no agent markers
    for var in ("LOOPX_AGENT", "CLAUDECODE", "CODEX_SANDBOX", "LOOPX_NOW", "PYTHONDONTWRITEBYTECODE"):
        env.pop(var, None)
    py = sys.executable
    lines = []
    try:
        timed([py, "-m", "loopx", "--help"], root, env)   # compile and cache the bytecode once
        print(f"interpreter: {py} (Python {sys.version.split()[0]}); {args.runs} runs per figure")
        for size in sizes:
            t = time.perf_counter()
            proj = build(root, size)
            built = time.perf_counter() - t
            st = Store(os.path.join(proj, ".loopx"))
            total = 0
            for stream in ("events", "evidence"):
                with open(st.path(f"{stream}.jsonl"), "rb") as fh:
                    total += sum(1 for _ in fh)
            cold = timed([py, "-m", "loopx", "status"], proj, env)
            for name, cmd in (("status", ["status"]), ("todo add", ["todo", "add", "benchmark todo", "--goal-id",
                                                                     "goal-0", "--quiet"])):
                runs, base = [], []
                for _ in range(args.runs):   # interleaved, so load from other processes hits both alike
                    base.append(timed([py, "-c", "pass"], proj, env))
                    runs.append(timed([py, "-m", "loopx", *cmd], proj, env))
                med, baseline = statistics.median(runs), statistics.median(base)
                print(f"{total:>7} events  {name:<9} median {med * 1000:6.1f} ms  (python -c pass {baseline * 1000:.1f} ms,"
                      f" x{med / baseline:.2f};"
                      f" min {min(runs) * 1000:.1f}, max {max(runs) * 1000:.1f})"
                      + (f"  cold first status {cold * 1000:.0f} ms, store built in {built:.1f}s" if name == "status" else ""))
                lines.append({"command": name, "events": total, "median_s": round(med, 5),
                              "baseline_s": round(baseline, 5), "ratio": round(med / baseline, 2)})
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    for rec in lines:
        print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
