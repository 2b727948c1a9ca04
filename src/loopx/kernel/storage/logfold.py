"""Folding the log files into a state from where it stopped (the store's reader; docs/file-format.md).

``fold_stream`` reads one stream from a byte offset: the segments closed since, then the open
file. Each complete line is decoded (``codec.decode``) and applied (``fold.apply``); a bad line is
counted and sampled in the file's meta, never dropped silently; an unterminated last line is a torn
tail, left for the next writer. A ``seq`` not above the last one marks the stream ``unordered``
(a union-merged log, or records ``loopx sync`` imported): ``fold_merged`` then folds every stream
again in ``codec.order_key`` order with duplicate ids dropped.
"""

from __future__ import annotations

import os

from loopx.kernel.storage import cjson, fold, layout
from loopx.kernel.storage.codec import CONFLICT, decode, order_key
from loopx.kernel.storage.fs import read_at

BAD_SAMPLES = 20   # bad lines described per file in the meta (all are counted)


def fold_stream(store, state: dict, name: str, offset: int, collect: list | None = None) -> tuple[int, int]:
    """Fold ``name`` from where the state stopped: ``offset`` in the file that was open when the
    state was folded (closed since if a segment numbered past ``meta["segments"]`` exists), then
    every later segment and the open file. Returns (lines folded, torn-tail bytes). With ``collect``
    (a list), records are appended to it instead of folded (``fold_merged`` sorts them)."""
    meta = state["meta"]["files"][name]
    total = 0
    while os.path.exists(store.segment_path(name, meta.get("segments", 0) + 1)):
        k = meta.get("segments", 0) + 1
        n, _ = fold_file(store, state, name, offset, store.segment_path(name, k), collect)
        total += n
        meta["segments"] = k
        meta["offset"], meta["tail"], offset = 0, "", 0
    n, torn = fold_file(store, state, name, offset, None, collect)
    return total + n, torn


def _read(store, meta: dict, name: str, offset: int, path: str | None) -> bytes:
    """The bytes of ``name``'s open file (or ``path``) from ``offset``; b"" when missing."""
    try:
        data, st = read_at(path or store.path(layout.open_log(name)), offset)
    except FileNotFoundError:
        return b""
    if path is None:  # what caches.still_current compares (ctime and inode: a file put in its place, cp -p)
        meta["mtime"], meta["ctime"], meta["ino"] = st.st_mtime_ns, st.st_ctime_ns, st.st_ino
    return data


class _FileFold:
    """One pass over one file's new lines: the meta's counters, the order checks, the chain heads."""

    __slots__ = ("meta", "state", "apply", "ordered", "heads", "top", "last_hlc")

    def __init__(self, state: dict, meta: dict, collect: list | None) -> None:
        self.state, self.meta = state, meta
        self.ordered = collect is not None
        self.apply = fold.apply if collect is None else (lambda state, rec: collect.append(rec))
        self.heads: dict = {}         # node -> (hlc, seq, line) of its newest record in this file
        self.top = None               # the newest clock in this file
        self.last_hlc = meta.get("hlc_top")

    def bad(self, line: bytes, line_start: int, exc: ValueError) -> None:
        meta = self.meta
        if line.startswith(CONFLICT):
            meta["conflict"] = True
        meta["bad"] += 1
        if len(meta["bad_samples"]) < BAD_SAMPLES:
            meta["bad_samples"].append({"line": meta["lines"], "offset": line_start,
                                        "reason": str(exc), "text": line[:80].decode("utf-8", "replace")})

    def order(self, rec: dict, line: bytes) -> None:
        """Note ``rec``'s place: a seq or clock going back marks the file unordered (unless the
        records are being collected for sorting), a skipped seq counts as a gap."""
        meta, ordered = self.meta, self.ordered
        seq = rec["seq"]
        if seq <= meta["last_seq"] and not ordered:
            meta["unordered"] = True
        elif seq != meta["last_seq"] + 1 and not ordered:
            meta["seq_gaps"] = meta.get("seq_gaps", 0) + 1
        if seq > meta["last_seq"]:
            meta["last_seq"] = seq
        node = rec.get("node")
        if node is None:
            return
        hlc = rec["hlc"]
        if self.last_hlc is not None and hlc <= self.last_hlc and not ordered:
            meta["unordered"] = True  # records imported by `loopx sync` behind this clone's own
        if self.last_hlc is None or hlc > self.last_hlc:
            self.last_hlc = hlc
        self.heads[node] = (hlc, seq, line)
        if self.top is None or hlc > self.top:
            self.top = hlc

    def lines(self, data: bytes, pos: int) -> int:
        """Fold every complete line of ``data`` (read from byte ``pos``); returns the end offset."""
        meta, loads, state, apply = self.meta, cjson.loads, self.state, self.apply
        for line in data.split(b"\n")[:-1]:
            line_start = pos
            pos += len(line) + 1
            meta["lines"] += 1
            if line.endswith(b"\r"):
                meta["crlf"] = meta.get("crlf", 0) + 1
            if not line.strip():
                continue
            try:
                rec = decode(line, loads)
            except ValueError as exc:
                self.bad(line, line_start, exc)
                continue
            self.order(rec, line)
            apply(state, rec)
        return pos


def fold_file(store, state: dict, name: str, offset: int, path: str | None = None,
              collect: list | None = None) -> tuple[int, int]:
    """Fold ``name`` (the open file, or ``path``) from byte ``offset``; return (lines folded,
    torn-tail bytes). A record whose ``seq`` is not above the last one marks the stream
    ``unordered`` (the caller folds again through ``fold_merged``). With ``collect`` the records
    are appended to that list instead of folded."""
    meta = state["meta"]["files"][name]
    data = _read(store, meta, name, offset, path)
    if not data:
        return 0, 0
    end = data.rfind(b"\n") + 1
    if offset == 0 and data.startswith(b"\xef\xbb\xbf"):
        meta["bom"] = True
    lines_before = meta["lines"]
    run = _FileFold(state, meta, collect)
    meta["offset"] = run.lines(data[:end], offset)
    if run.heads and run.top is not None:  # top is set with the first head
        note_heads(state["meta"], name, run.heads, run.top)
        meta["hlc_top"] = run.last_hlc
    meta["tail"] = data[max(0, end - 32):end].hex() if end else meta.get("tail", "")
    return meta["lines"] - lines_before, len(data) - end


def note_heads(meta: dict, stream: str, heads: dict, top: list) -> None:
    """Record in ``meta`` each node's newest record among ``heads`` ({node: (hlc, seq, line)}) and
    the newest clock value ``top``; only the winning lines are hashed."""
    from loopx.kernel.storage.chain import line_hash

    chain = meta.setdefault("chain", {})
    for node, (hlc, seq, line) in heads.items():
        cur = chain.get(node)
        if cur is None or hlc > cur["hlc"]:
            chain[node] = {"hash": line_hash(line), "hlc": hlc, "seq": seq, "stream": stream}
    if meta.get("hlc") is None or top > meta["hlc"]:
        meta["hlc"] = top


def fold_merged(store) -> dict:
    """The whole state again, each stream (closed segments and open file) folded in
    ``order_key`` order without duplicate ids (a union-merged log or records imported by
    ``loopx sync``: see the module docstring)."""
    state = fold.empty()
    for name in layout.STREAMS:
        collected: list[dict] = []
        fold_stream(store, state, name, 0, collected)
        meta = state["meta"]["files"][name]
        seen_ids: set = set()
        for rec in sorted(collected, key=order_key):
            rid = rec.get("id") or (rec["seq"], rec.get("crc"))
            if rid in seen_ids:
                meta["duplicates"] = meta.get("duplicates", 0) + 1
                continue
            seen_ids.add(rid)
            fold.apply(state, rec)
        meta["merged"] = True
        meta.pop("unordered", None)
    return state
