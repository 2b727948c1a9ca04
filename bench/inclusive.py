"""Where a hot command's instructions go, function by function: the inclusive count of each named
function on the path of ``next`` or ``turn finish``, counted with ``valgrind --tool=cachegrind``.

A function's count is the difference between two runs of the command from the same copy of the
store: one where every call of the function is made ``K`` more times (their results dropped) and
one where it is not (``K`` = 0), divided by ``K``. Both runs import the function's module before
the command starts, since the order of imports alone moves a count by about 1M instructions; the
store, the repository and the caches are put back before each run, so a count repeats to about
0.1M. The figure is the cost of all the calls of the function in one command, everything they
call included.

Only for functions a command may call again without changing what it does (readers, renderers,
checks): a writer called again writes again, and a function that keeps a result for later calls
(a memo) shows only the cost of a call that finds it.

The store is ``bench/flat.py``'s, set up as ``bench/instructions.py`` sets it up (``Bench``);
``next`` is counted on the claim path (a ``turn finish`` and a ``todo add`` before it), ``turn
finish`` right after a ``next``.

Usage: python bench/inclusive.py [--events 10000] [--keep DIR] [--command next|turn-finish] [--k 2] SPEC...
SPEC: ``module:function`` or ``module:Class.method`` (``loopx.kernel.read.gitstatus:listing``).
Prints one JSON line per SPEC ``{"command", "spec", "base_m", "inclusive_m"}`` (millions of
instructions), then a table. Needs valgrind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from instructions import Bench, count  # noqa: E402 - the bench's store and the count of one process

# Run loopx with the functions of argv[1] (comma-separated SPECs) each called argv[2] more times per call.
WRAPPER = """\
import importlib, sys
specs, k, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for spec in specs.split(","):
    mod, name = spec.split(":")
    owner = importlib.import_module(mod)
    if "." in name:
        cls, name = name.split(".")
        owner = getattr(owner, cls)
    real = getattr(owner, name)
    def again(*a, _real=real, **kw):
        for _ in range(k):
            _real(*a, **kw)
        return _real(*a, **kw)
    if k:
        setattr(owner, name, again)
sys.argv = ["loopx", *args]
from loopx.cli import entry
entry()
"""


def _put_back(proj: str, saved: str) -> None:
    """``proj``'s ``.loopx/`` as it was when ``saved`` was copied from it (the folder itself is kept:
    its parent's mtime is part of ``git status``'s stat cache)."""
    store = os.path.join(proj, ".loopx")
    for name in os.listdir(store):
        path = os.path.join(store, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    shutil.copytree(saved, store, symlinks=True, dirs_exist_ok=True)


def claim_path(b: Bench, root: str, command: str) -> tuple[list[str], str]:
    """Set ``b``'s store up for ``command`` (``next``: the claim path, a finished turn and a new todo;
    ``turn-finish``: right after such a ``next``) and keep a copy of it (``_put_back``).
    Returns (the command's arguments, the copy's folder)."""
    claim = ["next", "--goal-id", "goal-0", "--format", "json"]
    run_id = json.loads(b.plain(claim, b.agent))["data"]["run_id"]
    b.plain(["turn", "finish", "--run", run_id, "--result", "progress", "--quiet"], b.agent)
    b.plain(["todo", "add", "b", "--goal-id", "goal-0", "--quiet"])
    if command == "turn-finish":
        run_id = json.loads(b.plain(claim, b.agent))["data"]["run_id"]
        cmd = ["turn", "finish", "--run", run_id, "--result", "progress", "--quiet"]
    else:
        cmd = claim
    saved = os.path.join(root, "saved-store")
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(os.path.join(b.proj, ".loopx"), saved, symlinks=True)
    time.sleep(2.5)  # git's racy rule, as in Bench
    return cmd, saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+", metavar="SPEC")
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--command", choices=["next", "turn-finish"], default="next")
    ap.add_argument("--k", type=int, default=2, help="extra calls per call (default 2)")
    ap.add_argument("--keep", metavar="DIR", help="build the store here and keep it (reused when present)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench/inclusive.py needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    root = args.keep or tempfile.mkdtemp(prefix="loopx-bench-incl-")
    b = Bench(root, args.events)
    cmd, saved = claim_path(b, root, args.command)

    def counted(spec: str, k: int) -> float:
        _put_back(b.proj, saved)
        n, out = count([b.py, "-c", WRAPPER, spec, str(k), *cmd], b.proj, b.agent)
        if args.command == "next" and '"started": true' not in out:
            raise SystemExit(f"next did not start a turn with {spec} (k={k}): {out[:300]}")
        return n

    rows = []
    for spec in args.specs:
        base = counted(spec, 0)
        more = counted(spec, args.k)
        rec = {"command": args.command, "spec": spec, "base_m": round(base, 2),
               "inclusive_m": round((more - base) / args.k, 2)}
        rows.append(rec)
        print(json.dumps(rec), flush=True)
    print(f"\n| `{args.command.replace('-', ' ')}`: function | instructions, all its calls |\n|---|---|")
    for r in rows:
        print(f"| `{r['spec']}` | {r['inclusive_m']}M |")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
