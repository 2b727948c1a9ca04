"""Benchmark: ``loopx trial list`` (the table, ``--format json`` and ``--format tsv``), ``loopx
experiment show`` and ``status`` on an experiment goal with 10,000 recorded trials, as the CPU
ratio to a bare ``python -c pass`` (issue 20, acceptance 7, and issue 26: a figure, not a test;
docs/performance.md).

The store is written with the store's own encoder (``storebuild.Writer``: format 2, a valid hash
chain): one experiment goal and, per trial, a hypothesis, a run started and finished and the
``trial.recorded`` record (about 1 in 6 kept, 1 in 20 crashed). Each command runs as a fresh
process of what cron and the hooks run (``flat.launcher``: the console script of this checkout),
paired with a bare interpreter run right before it (``flat.measure``: both see the same load; the
CPU time is user + system of the child, ``os.wait4``); the first call after the store was built
folds the log and writes the caches (``cold_s``, wall), the medians are over the calls after it.

Usage: python bench/trials.py [--trials 10000] [--runs 11] [--keep DIR]
Prints one JSON line per command, as bench/flat.py does (``events`` is the number of trials):
{"command", "events", "median_s", "baseline_s", "ratio", "cpu_ratio", "rss_mb", "runs", "cpu_s", "load", "cold_s"}
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from storebuild import Writer  # noqa: E402

from loopx.kernel.storage.store import Store  # noqa: E402


def build(root: str, trials: int, seed: int = 20) -> str:
    rng = random.Random(seed)
    proj = os.path.join(root, f"exp-{trials}")
    os.makedirs(proj)
    store, _ = Store.create(proj)
    start = datetime.now(UTC) - timedelta(seconds=trials * 4 * 62.5)
    w = Writer(store, rng, start)
    gid = "knn"
    w.add("goal.started", gid, {"objective": "raise val_acc", "priority": 0, "scope": {"allow": [], "deny": [], "protect": []},
                                "quota": {"slots": 100000, "window": 86400, "cooldown": 0, "stall_after": 3}})
    w.add("experiment.started", gid, {"metric": "val_acc", "direction": "max", "measure": "python eval.py",
                                      "min_delta": 0.001, "plateau": 0, "trial_timeout": 600, "worktree": ".loopx/worktrees/exp-knn",
                                      "branch": "loopx/exp/knn", "base_branch": "main", "base_commit": "0" * 40})
    front, commit = 0.5, "0" * 40
    for i in range(trials):
        rid, tid = f"run-{i:08x}", f"tr-{i:08x}"
        agent = "agent:researcher"
        hyp = f"idea {i}: change parameter {rng.choice('abcdefgh')} by {rng.random():.3f}"
        w.add("trial.hypothesized", gid, {"run_id": rid, "hypothesis": hyp, "claims": {}}, actor=agent)
        w.add("run.started", gid, {"run_id": rid, "todo_id": None, "agent": agent, "lease_until": w.ts(), "mode": "trial"},
              actor=agent)
        r = rng.random()
        new = f"{rng.getrandbits(160):040x}"
        if i == 0:
            decision, value = "keep", front
        elif r < 0.05:
            decision, value = "crash", None
        elif r < 0.22:
            decision, value = "keep", front + rng.random() * 0.001 + 0.0011
        else:
            decision, value = "discard", front - rng.random() * 0.05
        w.add("trial.recorded", gid, {"trial_id": tid, "run": rid, "hypothesis": hyp, "agent": agent, "commit": new,
                                      "parent": commit, "parent_value": front, "metrics": {} if value is None else {"val_acc": value},
                                      "value": value, "delta": None if value is None else value - front, "decision": decision,
                                      "reason": "bench", "guard": None, "duration": rng.random() * 30, "baseline": i == 0,
                                      "claims": {}}, actor=agent)
        w.add("run.finished", gid, {"run_id": rid, "result": "progress" if decision == "keep" else "no_progress",
                                    "verified": decision == "keep", "evidence": []}, actor=agent)
        if decision == "keep":
            front, commit = value, new
    w.close()
    return proj


def main(argv=None) -> int:
    import flat

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--keep", metavar="DIR", help="build the store here and keep it (reused when present)")
    a = ap.parse_args(argv)
    root = a.keep or tempfile.mkdtemp(prefix="loopx-bench-trials-")
    os.makedirs(root, exist_ok=True)
    env = dict(os.environ, LOOPX_HOME=os.path.join(root, "home"), NO_COLOR="1", LOOPX_NO_UPDATE_CHECK="1")
    for var in ("LOOPX_AGENT", "LOOPX_NOW", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH"):
        env.pop(var, None)
    py = sys.executable
    lx, how = flat.launcher(py, env)
    if not how.startswith("console script"):
        env["PYTHONPATH"] = os.path.join(flat.REPO, "src")
    flat.LAUNCHER[0] = how
    try:
        proj = os.path.join(root, f"exp-{a.trials}")
        if not os.path.isdir(proj):
            t0 = time.perf_counter()
            build(root, a.trials)
            print(f"# built {a.trials} trials in {time.perf_counter() - t0:.1f}s: {proj}", file=sys.stderr)
            # one write, as any real store has had since its last trial: writers save the live view
            # (a store fresh from the builder has none, and every read would fold the full snapshot)
            flat.run_rss(lx + ["evidence", "add", "--goal-id", "knn", "--kind", "note", "--summary", "bench"], proj, env)
        for name, args in (("trial list", ["trial", "list"]), ("trial list --format json", ["trial", "list", "--format", "json"]),
                           ("trial list --format tsv", ["trial", "list", "--format", "tsv"]),
                           ("experiment show", ["experiment", "show"]), ("status", ["status"])):
            t = time.perf_counter()
            flat.run_rss(lx + args, proj, env)
            cold = time.perf_counter() - t
            row = flat.measure(name, a.trials, lambda args=args: (lx + args, None), proj, env, a.runs, py)
            row["cold_s"] = round(cold, 3)
            print(json.dumps(row), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
