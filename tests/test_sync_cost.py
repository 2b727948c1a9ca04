"""Issue 16: a sync reads only what changed since the last sync, not the whole store.

Counted, not timed (as tests/test_flat_cost.py counts): the bytes one ``exchange`` (push this
node's new records, fetch, import the other nodes' new records) reads in its process (``rchar``
in ``/proc/self/io``: files and git's output through pipes) after one new record on each side,
on a 1k-event store and on a 30k-event store, must not differ by more than a constant (64 KiB,
as for the hot commands) and must stay far below the store's size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env
from test_flat_cost import LINUX_IO, _builder
from test_sync import git, lx

_MEASURE = r"""
import sys
from loopx.sync import transport as gs
from loopx.kernel.storage.store import Store

def rchar():
    with open("/proc/self/io", "rb") as fh:
        for line in fh.read().split(b"\n"):
            if line.startswith(b"rchar:"):
                return int(line.split()[1])

store = Store.open(sys.argv[1])
g = gs.project_git(store, None)
before = rchar()
with gs.sync_lock(store):
    out = gs.exchange(store, g)
after = rchar()
sys.stderr.write(f"\nRCHAR {after - before} {out['pushed']} {out['imported']}\n")
"""


def _exchange_reads(clone: Path) -> tuple[int, int, int]:
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(clone)], cwd=clone, env=subprocess_env(),
                          capture_output=True, text=True, timeout=600)
    line = [x for x in proc.stderr.splitlines() if x.startswith("RCHAR ")]
    assert line, proc.stderr
    _, n, pushed, imported = line[-1].split()
    return int(n), int(pushed), int(imported)


def _pair(root: Path, events: int) -> tuple[Path, Path]:
    """A project of ``events`` records on machine a (a clone of a bare remote), and machine b, a
    second clone; both synced once (the first sync of each reads everything)."""
    proj = Path(_builder().build(str(root), events))
    remote = root / f"remote-{events}.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(remote))
    git(proj, "init", "-q", "-b", "main")
    (proj / "README").write_text("p\n")
    git(proj, "add", "README")
    git(proj, "commit", "-q", "-m", "init")
    git(proj, "remote", "add", "origin", str(remote))
    git(proj, "push", "-q", "origin", "main")
    b = root / f"b-{events}"
    git(root, "clone", "-q", str(remote), str(b))
    assert lx(proj, "sync") == 0
    assert lx(b, "connect") == 0 and lx(b, "sync") == 0 and lx(proj, "sync") == 0
    return proj, b


@pytest.mark.skipif(not LINUX_IO.exists(), reason="needs /proc/self/io (Linux)")
def test_a_sync_reads_what_changed_not_the_store(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.mktemp("synccost")
    monkeypatch.chdir(root)
    read = {}
    for n in (1_000, 30_000):
        a, b = _pair(root, n)
        goal = "goal-0"
        for _ in range(2):  # the second round runs on positions and heads the first one remembered
            assert lx(b, "todo", "add", "from b", "--goal-id", goal) == 0
            assert _exchange_reads(b)[1] == 1
            assert lx(a, "todo", "add", "from a", "--goal-id", goal) == 0
            got, pushed, imported = _exchange_reads(a)
            assert pushed == 1 and imported == 1
        read[n] = got
    size = sum(f.stat().st_size for f in (a / ".loopx").rglob("*.jsonl"))
    # the same constant as tests/test_flat_cost.py: the live view (read when the machine's name is
    # checked) holds a few more open items on the bigger store; the history is never read
    assert read[30_000] <= read[1_000] + 64 * 1024, read
    assert read[30_000] < size / 10, (read, size)  # far from reading the history


def _ids(lines: dict) -> list[str]:
    import json

    return [json.loads(x)["id"] for s in ("events", "evidence") for x in lines[s]]


def test_new_lines_follow_segments_closed_between_syncs(project, monkeypatch):
    """The open file closed into a segment after the last push (and another one after it): the
    next read starts at the remembered offset inside the closed segment and misses nothing."""
    from loopx.cli import main
    from loopx.kernel.storage import store as storemod
    from loopx.sync import streams

    st = storemod.Store.open(str(project))
    assert main(["--quiet", "start-goal", "--goal-text", "g", "--goal-id", "g1"]) == 0
    _, pos = streams.all_lines(st)
    before = set(_ids(streams.all_lines(st)[0]))
    monkeypatch.setattr(storemod, "SEGMENT_BYTES", 600)
    for i in range(12):
        assert main(["--quiet", "todo", "add", f"t{i}", "--goal-id", "g1"]) == 0
    assert st.closed_segments("events") >= 2
    got, after = streams.new_lines(st, pos)
    everything = _ids(streams.all_lines(st)[0])
    assert _ids(got) == [x for x in everything if x not in before] and len(_ids(got)) >= 12
    assert streams.new_lines(st, after)[0] == {"events": [], "evidence": []}
    # a log rewritten under the remembered offset (a union merge, a repair): the position no longer holds
    path = project / ".loopx" / "events.jsonl"
    path.write_bytes(b"x" * path.stat().st_size)
    assert streams.new_lines(st, after) is None
