"""Benchmark: median wall time of ``loopx quota should-run`` on stores of 1k, 10k and 100k events,
next to a bare ``python -c pass`` (issue 3; a figure, not a test). Target: within 1.5x of the bare
interpreter at 100k events.

The stores are the same realistic mix ``bench/status.py`` builds (goals, todos claimed and done,
runs, evidence, spends, decisions, gates, handoffs). Each call is a fresh process, as a cron job
would run it; the first call folds the log, writes the snapshot and records the decision (reported
as ``cold``), the medians are over the warm calls that follow (the decision no longer changes, so
they write nothing).

Usage: python bench/should_run.py [--sizes 1000,10000,100000] [--runs 15] [--keep DIR]
Ends with one JSON line per store size, as bench/status.py does:
{"command": "quota should-run", "events": N, "median_s": ..., "baseline_s": ..., "ratio": ...}
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import status as fixture  # noqa: E402  (bench/status.py: the store builder and the timer)

CMD = ["quota", "should-run", "--goal-id", "goal-0", "--skip-exit", "0"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--keep", metavar="DIR", help="build the stores here and keep them")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    root = args.keep or tempfile.mkdtemp(prefix="loopx-bench-sr-")
    os.makedirs(root, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(fixture.REPO, "src"), LOOPX_HOME=os.path.join(root, "home"),
               NO_COLOR="1", LOOPX_NO_UPDATE_CHECK="1")
    for var in ("LOOPX_AGENT", "CLAUDECODE", "CODEX_SANDBOX", "LOOPX_NOW"):
        env.pop(var, None)
    py = sys.executable
    lines = []
    try:
        base = [fixture.timed([py, "-c", "pass"], root, env) for _ in range(args.runs)]
        baseline = statistics.median(base)
        print(f"python -c pass: median {baseline * 1000:.1f} ms over {args.runs} runs ({py})")
        for size in sizes:
            t = time.perf_counter()
            proj = fixture.build(root, size)
            built = time.perf_counter() - t
            total = 0
            for s in ("events", "evidence"):
                with open(os.path.join(proj, ".loopx", f"{s}.jsonl"), "rb") as fh:
                    total += sum(1 for _ in fh)
            cold = fixture.timed([py, "-m", "loopx", *CMD], proj, env)
            runs = [fixture.timed([py, "-m", "loopx", *CMD], proj, env) for _ in range(args.runs)]
            med = statistics.median(runs)
            print(f"{total:>7} events  should-run median {med * 1000:6.1f} ms  (x{med / baseline:.2f} of bare python;"
                  f" min {min(runs) * 1000:.1f}, max {max(runs) * 1000:.1f})  cold first call {cold * 1000:.0f} ms,"
                  f" store built in {built:.1f}s")
            lines.append({"command": "quota should-run", "events": total, "median_s": round(med, 5),
                          "baseline_s": round(baseline, 5), "ratio": round(med / baseline, 2)})
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    for rec in lines:
        print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
