"""What a sync reads, incrementally (docs/architecture.md, "Sync through git", cost).

A node ref (``refs/loopx/nodes/<node>``) is a chain of commits, one per sync that had something
new, each holding only the lines that sync pushed (``events.jsonl``, ``evidence.jsonl``). So:

- **push**: the lines appended to the local logs since the last push are read from the position
  remembered in ``.loopx/cache/sync-heads.json`` (per stream: closed segments already read, bytes
  of the open file read, and the last bytes before that offset to check the file was only appended
  to); a segment closed since is read from that offset, newer ones whole;
- **import**: each other node's commits after the head imported last (``git rev-list
  old..new``), their blobs in one ``git cat-file --batch``.

When the positions do not hold (no cache yet, another node id, a log rewritten by a union merge or
a repair), one full pass rebuilds them: every local line is read and the node's own chain is read
to leave out what it already carries. Duplicates by id are never appended: in the incremental
path every line of a node with a ref arrives once through that node's chain; a line of a node
without a ref of its own (carried by another node) makes the import check the store's ids.
"""

from __future__ import annotations

import json
import os
from json import loads

from loopx.kernel.storage import layout
from loopx.kernel.storage.codec import decode
from loopx.kernel.storage.fs import atomic_write, open_file

STREAMS = ("events", "evidence")
TAIL = 32  # bytes before a remembered offset that must still be there


# ------------------------------------------------------------------ the cache
def read_heads(store) -> dict:
    """``cache/sync-heads.json``: {"node", "push": {stream: {"seg", "off", "tail"}}, "heads":
    {node: commit imported last}}; {} when absent or unreadable."""
    try:
        with open_file(store.path(layout.SYNC_HEADS)) as fh:
            data = json.loads(fh.read())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_heads(store, data: dict) -> None:
    os.makedirs(store.path(layout.CACHE), exist_ok=True)
    atomic_write(store.path(layout.SYNC_HEADS), json.dumps(data, sort_keys=True).encode(), sync=False, follow=False)


# ------------------------------------------------------------------ local lines
def _read_range(path: str, start: int, tail: bytes = b"") -> bytes | None:
    """The bytes of ``path`` from ``start`` on (b"" when the file is missing and start is 0), or
    None when the file is shorter than ``start`` or the ``tail`` bytes before ``start`` changed."""
    try:
        fh = open_file(path)  # closed by the with below; a missing file is not an error
    except FileNotFoundError:
        return b"" if start == 0 else None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size < start:
            return None
        if tail:
            fh.seek(start - len(tail))
            if fh.read(len(tail)) != tail:
                return None
        fh.seek(start)
        return fh.read(size - start)


def _tail_of(path: str, off: int) -> str:
    try:
        with open_file(path) as fh:
            fh.seek(max(0, off - TAIL))
            return fh.read(min(TAIL, off)).hex()
    except OSError:
        return ""


def new_lines(store, pos: dict | None) -> tuple[dict[str, list[bytes]], dict] | None:
    """({stream: complete lines appended since ``pos``}, the position after them), or None when
    ``pos`` does not hold (use ``all_lines``). ``pos`` None means nothing read yet."""
    if not pos:
        return None
    out, after = {}, {}
    for stream in STREAMS:
        p = pos.get(stream)
        if not isinstance(p, dict):
            return None
        try:
            k, off, tail = int(p["seg"]), int(p["off"]), bytes.fromhex(p.get("tail") or "")
        except (KeyError, TypeError, ValueError):
            return None
        segs = store.closed_segments(stream)
        if segs < k:
            return None
        open_path = store.path(layout.open_log(stream))
        first = open_path if segs == k else store.segment_path(stream, k + 1)
        data = _read_range(first, off, tail)
        if data is None:
            return None
        parts = [data]
        if segs > k:
            for i in range(k + 2, segs + 1):
                parts.append(_read_range(store.segment_path(stream, i), 0) or b"")
            last = _read_range(open_path, 0) or b""
            base = 0
        else:
            last, parts = data, []
            base = off
        cut = last.rfind(b"\n") + 1  # a line still being written is left for the next sync
        blob = b"".join(parts) + last[:cut]
        out[stream] = [x for x in blob.split(b"\n") if x]
        end = base + cut
        after[stream] = {"seg": segs, "off": end, "tail": _tail_of(open_path, end) if end else ""}
    return out, after


def all_lines(store) -> tuple[dict[str, list[bytes]], dict]:
    """({stream: every complete line of the local logs}, the position after them)."""
    out, after = {}, {}
    for stream in STREAMS:
        segs = store.closed_segments(stream)
        parts = [_read_range(store.segment_path(stream, i), 0) or b"" for i in range(1, segs + 1)]
        open_path = store.path(layout.open_log(stream))
        last = _read_range(open_path, 0) or b""
        cut = last.rfind(b"\n") + 1
        blob = b"".join(x if x.endswith(b"\n") or not x else x + b"\n" for x in parts) + last[:cut]
        out[stream] = [x for x in blob.split(b"\n") if x]
        after[stream] = {"seg": segs, "off": cut, "tail": _tail_of(open_path, cut) if cut else ""}
    return out, after


def pick(lines: dict[str, list[bytes]], others, skip_ids=frozenset()) -> dict[str, list[tuple]]:
    """The good lines whose ``node`` is not one of ``others`` (the nodes that carry their own
    records) and whose id is not in ``skip_ids``: {stream: [(id, node, line)]}, each id once."""
    out: dict[str, list[tuple]] = {}
    seen = set()
    for stream, group in lines.items():
        keep = []
        for line in group:
            try:
                rec = decode(line, loads)
            except ValueError:
                continue
            rid, node = rec.get("id"), rec.get("node")
            if node in others or rid in seen or rid in skip_ids:
                continue
            seen.add(rid)
            keep.append((rid, node, line))
        out[stream] = keep
    return out


# ------------------------------------------------------------------ node chains
def chain_blobs(git, new: str, old: str | None = None) -> list[dict[str, bytes]]:
    """The blobs of the commits of a node chain after ``old`` up to ``new``, oldest first
    ([{stream: bytes}]); the whole chain when ``old`` is None or unknown (node refs only move
    forward, so ``old..new`` is what was added)."""
    if old and old == new:
        return []
    p = git.run("rev-list", "--reverse", f"{old}..{new}" if old else new, check=False)
    if p.returncode != 0:  # the old head is gone (a node ref rewritten): read the whole chain
        p = git.run("rev-list", "--reverse", new)
    commits = p.stdout.decode().split()
    return _cat(git, commits)


def chains(git, new: dict[str, str], old: dict[str, str]) -> tuple[list[dict[str, bytes]], list[str]]:
    """The blobs added to several node chains ({node: new head}) since ``old`` ({node: head
    imported last}), in two git calls: one ``git log`` over every range (the chains are disjoint,
    each commit names its node in its subject) and one ``cat-file --batch``. Returns (blobs
    oldest first per node, the node of each). Falls back to ``chain_blobs`` per node when an old
    head is unknown."""
    want = {n: h for n, h in new.items() if old.get(n) != h}
    if not want:
        return [], []
    args = [h for h in want.values()] + [f"^{old[n]}" for n in want if old.get(n)]
    p = git.run("log", "--topo-order", "--reverse", "--format=%H %s", *args, "--", check=False)
    blobs, carriers = [], []
    if p.returncode != 0:
        for n, h in want.items():
            for files in chain_blobs(git, h, old.get(n)):
                blobs.append(files)
                carriers.append(n)
        return blobs, carriers
    commits = []
    for line in p.stdout.decode().splitlines():
        sha, _, subject = line.partition(" ")
        commits.append((sha, subject.rsplit(" ", 1)[-1]))
    blobs = _cat(git, [c for c, _ in commits])
    return blobs, [n for _, n in commits]


def _cat(git, commits: list[str]) -> list[dict[str, bytes]]:
    """{stream: blob} of each commit, in one ``git cat-file --batch``."""
    if not commits:
        return []
    query = "".join(f"{c}:{s}.jsonl\n" for c in commits for s in STREAMS).encode()
    raw = git.run("cat-file", "--batch", data=query).stdout
    blobs: list[dict[str, bytes]] = []
    i = 0
    for _ in commits:
        files = {}
        for s in STREAMS:
            nl = raw.index(b"\n", i)
            head = raw[i:nl].split()
            i = nl + 1
            if len(head) == 3 and head[1] == b"blob":
                size = int(head[2])
                files[s] = raw[i:i + size]
                i += size + 1
            else:
                files[s] = b""
        blobs.append(files)
    return blobs
