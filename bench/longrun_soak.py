"""Soak issue 21's long-run simulator (tests/longrun.py) longer than the suite does: many seeds,
many ticks, each in a fresh connected project under a temporary LOOPX_HOME. An invariant that
breaks stops the soak with the seed and the assertion, so the walk can be replayed.

Prints one JSON line per seed: ``{"seed", "ticks", "seconds", "turns", "idle_ticks", "agreements",
"ended", "refused_claims", "out_of_scope", "stalls_seen"}``, then ``{"ok": true, "seeds": n}``.

Usage: python bench/longrun_soak.py [--seeds 1,2,3 | --count N] [--ticks 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "src"), str(HERE.parent / "tests")]


def one(seed: int, ticks: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="loopx-soak-") as tmp:
        os.environ.update(LOOPX_HOME=os.path.join(tmp, "home"), CODEX_HOME=os.path.join(tmp, "codex"),
                          CLAUDE_CONFIG_DIR=os.path.join(tmp, "claude"), LOOPX_NO_UPDATE_CHECK="1",
                          LOOPX_NOW="2026-06-01T08:00:00Z")
        proj = os.path.join(tmp, "proj")
        os.makedirs(proj)
        from loopx.cli import main

        cwd = os.getcwd()
        os.chdir(proj)
        try:
            assert main(["connect", "--quiet"]) == 0
            from longrun import simulate

            t0 = time.monotonic()
            stats = simulate(proj, seed, ticks)
            stats["seconds"] = round(time.monotonic() - t0, 1)
        finally:
            os.chdir(cwd)
    return stats


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", help="comma-separated seeds")
    ap.add_argument("--count", type=int, default=5, help="seeds 1..N when --seeds is not given")
    ap.add_argument("--ticks", type=int, default=5000)
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else list(range(1, a.count + 1))
    for seed in seeds:
        try:
            s = one(seed, a.ticks)
        except AssertionError as exc:
            print(json.dumps({"ok": False, "seed": seed, "invariant": str(exc)[:2000]}))
            return 1
        print(json.dumps({"seed": seed, **{k: s[k] for k in ("ticks", "seconds", "turns", "idle_ticks", "agreements",
                                                          "ended", "refused_claims", "out_of_scope", "stalls_seen")}}),
              flush=True)
    print(json.dumps({"ok": True, "seeds": len(seeds)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
