"""What loading its code costs a hot command, against the work it does: instructions of ``next``
(on the claim path) or ``turn finish``, split into the interpreter's start, the loading of the
loopx modules the command uses (in stages) and the rest, counted with ``valgrind --tool=cachegrind``.

The modules are those the command loads from the code file (``loopx.codecache``), in the order
their code finishes running; each stage is a separate process that imports ``loopx`` (the finder)
and then, with the cyclic collector paused and ``os._exit`` at the end as a hot command has:

- ``start``: nothing more (the interpreter, ``site`` and ``import loopx``);
- ``extensions``: the C extension modules the command imports (``_datetime``, ``zlib`` ...);
- ``unmarshal``: also each module's code read from the file and unmarshalled (its own entry);
- ``set``: instead of that, the command's set read and unmarshalled in one piece (when it has one);
- ``bodies``: also each module's code run in a fresh module object, without the import system;
- ``imported``: instead, each module imported by name through the import system (``find_spec``,
  the source's ``stat``, specs and locks), in the same order.

Each row says what it adds to the stage it extends (``set`` and ``imported`` to ``extensions``,
``bodies`` to ``unmarshal``); the command itself (the store, caches and repository put back first,
as ``bench/inclusive.py`` does) is counted last, against ``imported``: its work, plus what its own
order of imports costs more or less. The figures say where a command's
instructions go, not what it costs as a user runs it (``bench/flat.py``).

Usage: python bench/loadcost.py [--events 10000] [--keep DIR] [--command next|turn-finish]
Prints one JSON line per stage ``{"stage", "instructions_m", "added_m"}``, then a table. Needs valgrind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from inclusive import _put_back, claim_path  # noqa: E402 - the command's store, put back before each count
from instructions import Bench, count  # noqa: E402

# Prints the loopx modules the command served from the code file, in the order their code finished.
ORDER = """\
import json, sys
import loopx
from loopx import codecache
done = []
real = codecache.Finder.exec_module
def traced(self, module):
    real(self, module)
    done.append(module.__name__)
codecache.Finder.exec_module = traced
sys.argv = ["loopx", *sys.argv[1:]]
from loopx.cli import main
main(sys.argv[1:])
ext = sorted(n for n, m in sys.modules.items() if not n.startswith("loopx") and
             getattr(m, "__file__", "") and m.__file__.endswith(".so"))
print(json.dumps({"order": done, "ext": ext, "key": codecache.command_key(["loopx", *sys.argv[1:]])}))
"""

STAGE = """\
import gc, marshal, os, sys
gc.disable()
stage, order, ext, key = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), sys.argv[4]
import loopx
from loopx import codecache
f = next(x for x in sys.meta_path if isinstance(x, codecache.Finder))
if stage != "start":
    for name in filter(None, ext):
        __import__(name)
if stage in ("unmarshal", "bodies"):
    codes = {name: marshal.loads(f.code_bytes(f.entries[name])) for name in order}
if stage == "set":
    got = f.sets[key]
    marshal.loads(os.pread(f.fd, got[1], f.base + got[0]))
if stage == "bodies":
    for name in order:
        if name in sys.modules:
            continue
        parent = name.rpartition(".")[0]
        if parent not in sys.modules:
            __import__(parent)
        if name in sys.modules:
            continue
        e = f.entries[name]
        m = type(sys)(name)
        m.__file__ = codecache.source_of(name, e[5])
        if e[5]:
            m.__path__, m.__package__ = [os.path.dirname(m.__file__)], name
        else:
            m.__package__ = parent
        sys.modules[name] = m
        exec(codes[name], m.__dict__)
        setattr(sys.modules[parent], name.rpartition(".")[2], m)
if stage == "imported":
    for name in order:
        __import__(name)
os._exit(0)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--command", choices=["next", "turn-finish"], default="next")
    ap.add_argument("--keep", metavar="DIR", help="build the store here and keep it (reused when present)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench/loadcost.py needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    root = args.keep or tempfile.mkdtemp(prefix="loopx-bench-load-")
    b = Bench(root, args.events)
    cmd, saved = claim_path(b, root, args.command)
    for _ in range(3):  # the code file and the command's set written, as after a few turns
        _put_back(b.proj, saved)
        b.plain(cmd, b.agent)
    _put_back(b.proj, saved)
    import subprocess

    got = subprocess.run([b.py, "-c", ORDER, *cmd], cwd=b.proj, env=b.agent, capture_output=True, text=True)
    facts = json.loads(got.stdout.strip().splitlines()[-1])
    order, ext, key = ",".join(facts["order"]), ",".join(facts["ext"]), facts["key"] or ""
    # what each stage adds to: the stage it extends
    before = {"extensions": "start", "unmarshal": "extensions", "set": "extensions", "bodies": "unmarshal",
              "imported": "extensions", "the command": "imported"}
    totals: dict[str, float] = {}
    for stage in ("start", "extensions", "unmarshal", "set", "bodies", "imported"):
        if stage == "set" and not key:
            continue
        totals[stage] = count([b.py, "-c", STAGE, stage, order, ext, key], b.proj, b.agent)[0]
    _put_back(b.proj, saved)
    totals["the command"] = count(b.lx + cmd, b.proj, b.agent)[0]
    rows = [(stage, n, n - totals[before[stage]] if stage in before else 0.0) for stage, n in totals.items()]
    for stage, total, added in rows:
        print(json.dumps({"stage": stage, "instructions_m": round(total, 1), "added_m": round(added, 1)}))
    print(f"\n`{' '.join(cmd[:2] if args.command == 'turn-finish' else cmd[:1])}`, {len(facts['order'])} modules "
          f"from the code file, extensions {facts['ext']}, set {key!r}")
    print("| stage | instructions | added |\n|---|---|---|")
    for stage, total, added in rows:
        print(f"| {stage} | {total:.1f}M | {added:+.1f}M |")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
