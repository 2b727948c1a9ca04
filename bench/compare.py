"""Compare this checkout with an earlier commit on the same machine, at the same time.

A shared virtual machine drifts: the same code measured hours apart can differ by 0.4x of a bare
interpreter's start (docs/performance.md), more than most changes move it. So "no slower than
before" is only shown side by side: this script checks out REV into a temporary worktree with its
own virtual environment, and this checkout into another made the same way (pip upgraded, then
``pip install --no-deps -e``, like the README's install: an older pip's console script imports
``re``, which alone moves a row by 0.5x), then runs this checkout's ``bench/flat.py`` (copied into
REV's worktree, so the same harness and rows measure both) for the chosen rows alternately with
REV's code and this checkout's, ROUNDS
times, on the same stores (``--keep``), and prints each row's median CPU ratio for both.

Usage: python bench/compare.py REV [--only status,next,...] [--sizes 1000,100000] [--runs 9]
                                   [--rounds 2] [--keep DIR]

Prints one line per command and size: ``command size  before: X.XXx  now: Y.YYx  (change)``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ROWS = "status,should-run warm,should-run after write,todo add,next,turn finish,hook pre-tool,hook stop"


def _flat(python: str, checkout: str, only: str, sizes: str, runs: int, keep: str) -> list[dict]:
    """bench/flat.py of ``checkout`` run by ``python`` (whose console script runs that checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([python, os.path.join(checkout, "bench", "flat.py"), "--only", only, "--sizes", sizes,
                          "--runs", str(runs), "--keep", keep], cwd=checkout, env=env, capture_output=True,
                         text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _venv(work: str, name: str, checkout: str) -> str:
    """A fresh venv with an upgraded pip and ``checkout`` installed editable; its python."""
    py = os.path.join(work, name, "bin", "python")
    subprocess.run([sys.executable, "-m", "venv", os.path.join(work, name)], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "-e", checkout], check=True)
    return py


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rev", help="the commit to compare with (e.g. HEAD~3, a tag)")
    ap.add_argument("--only", default=ROWS, help="bench/flat.py rows (comma-separated)")
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=2, help="times each side runs, alternately")
    ap.add_argument("--keep", default=None, help="the stores (built there once and reused)")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="loopx-bench-compare-")
    keep = args.keep or os.path.join(work, "stores")
    before = os.path.join(work, "before")
    try:
        subprocess.run(["git", "-C", REPO, "worktree", "add", "-q", "--detach", before, args.rev], check=True)
        for name in ("flat.py", "gitrepo.py", "storebuild.py"):  # one harness measures both sides (and REV
            shutil.copy(os.path.join(HERE, name), os.path.join(before, "bench", name))  # lacks the newer rows)
        # both sides in a venv made the same way, as the README installs (pip upgraded first): the
        # console script an older pip writes imports `re`, 0.5x of a bare start on its own
        sides = (("before", _venv(work, "before", before), before), ("now", _venv(work, "now", REPO), REPO))
        got: dict = {}
        launchers: dict = {}
        for _ in range(args.rounds):
            for side, py, checkout in sides:
                for row in _flat(py, checkout, args.only, args.sizes, args.runs, keep):
                    got.setdefault((row["command"], row["events"]), {}).setdefault(side, []).append(row["cpu_ratio"])
                    launchers.setdefault(side, set()).add(row.get("launcher"))
        if len(set().union(*launchers.values())) != 1:
            print(f"# the sides ran loopx differently: {launchers}", file=sys.stderr)
            return 1
        for (command, size), sides in got.items():
            b, n = statistics.median(sides.get("before", [0])), statistics.median(sides.get("now", [0]))
            print(f"{command:24s} {size:>8}  before: {b:.2f}x  now: {n:.2f}x  ({n - b:+.2f}x)")
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", before], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
