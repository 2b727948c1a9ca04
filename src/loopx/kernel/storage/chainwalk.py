"""Walking a store's record chain end to end: ``verify(store)`` streams every record of both
streams and reports the first broken link of each node's chain (``chain``: what a link is), and
``check_heads`` compares the heads it found with heads recorded elsewhere. ``doctor`` and the
anchors run these; no hot command does, so they live apart from ``chain``, which every write
loads. Nothing here raises on damaged content.
"""

from __future__ import annotations

import heapq
import re
import zlib
from json import loads

from loopx.kernel.storage.chain import canonical, sha256

_HEAD = None


def header_match():
    """The compiled pattern ``header`` matches a line's start with (``.match``); groups: seq, id,
    node, hlc ms, hlc counter, prev (``null`` or the quoted hex)."""
    global _HEAD
    if _HEAD is None:
        _HEAD = re.compile(rb'\{"v":\d+,"seq":(\d+),"id":"([A-Za-z0-9_-]*)","ts":"[0-9TZ:.+-]*","node":"(n-[0-9a-f]{16})",'
                           rb'"hlc":\[(\d+),(\d+)\],"prev":(null|"[0-9a-f]{64}"),')
    return _HEAD.match


def header(line: bytes):
    """(seq, id, node, hlc, prev) read straight from a line loopx wrote (fixed key order, CRC
    checked), or None when the line has any other shape (the caller then decodes it as JSON).
    A line that repeats a key later (a JSON reader keeps the last one) gains nothing from it here:
    its header still has to extend the chain of the node it names, and the line checks report it
    if the rest is not a valid record."""
    m = header_match()(line)
    if m is None:
        return None
    cut = line.rfind(b',"crc":"')
    if cut < 0 or len(line) != cut + 18 or not line.endswith(b'"}'):
        return None
    try:
        if zlib.crc32(line[:cut]) != int(line[cut + 8:cut + 16], 16):
            return None
    except ValueError:
        return None
    prev = m.group(6)
    return (int(m.group(1)), m.group(2).decode(), m.group(3).decode(), [int(m.group(4)), int(m.group(5))],
            None if prev == b"null" else prev[1:-1].decode())


def records(store, stream: str):
    """(key, stream, seq, rec, line) for every decodable line of ``stream``, in file order; ``rec``
    holds only the chain fields when the line could be read without JSON (``header``)."""
    decode = store.decode
    for body in store.iter_lines(stream):
        line = body + b"\n"
        head = header(body)
        if head is not None:
            seq, rid, node, hlc, prev = head
            yield (hlc, node, rid), stream, seq, {"node": node, "hlc": hlc, "prev": prev}, line
            continue
        try:
            rec = decode(body, loads)
        except ValueError:
            continue  # counted and reported by the line checks
        hlc = rec.get("hlc")
        key = (hlc, rec.get("node") or "", rec.get("id") or "") if "node" in rec else None
        yield key, stream, rec["seq"], rec, line


def verify(store) -> dict:
    """Check every node's hash chain over both streams and every segment, one node at a time.

    Each node's records must form one chain: the node's first record has ``prev`` null, every other
    record's ``prev`` is the hash of another record of the same node with an earlier clock, no two
    records claim the same predecessor, and within one file a node's records keep their clock order.
    Records of other nodes may sit anywhere in between (a log that ``loopx sync`` imported into, or
    that git's ``merge=union`` put together from two clones, in any interleaving), and a line that
    appears twice byte for byte (a criss-cross merge, a cherry-pick) counts once.

    Returns ``{"records": n, "chained": n, "nodes": {node: records}, "unchained": n,
    "duplicates": n, "broken": None | {"stream", "seq", "node", "reason"}, "breaks": [same, one per
    broken node, earliest first], "heads": {node: {"hash", "stream", "seq", "hlc"}}}``. A break is
    where the damage starts: a removed line breaks at the record after it, an edited line at the
    record that pointed to it, a forged or inserted line at itself, reordered lines at the first one
    out of place. ``unchained`` counts records without chain fields (a format-1 store, or lines added
    by hand). A store whose last records were cut off entirely is not a broken link here: the chain
    heads recorded elsewhere (the cache, anchors in git) show it; see ``check_heads``. Memory: the
    chain pieces not yet joined; only when that walk finds a fault does a second walk keep the hash of
    every record, to tell a duplicate line (a merge) from damage."""
    out = _walk(store, dedupe=False)
    return _walk(store, dedupe=True) if out["breaks"] else out


def _walk(store, dedupe: bool) -> dict:
    walk = _Walk(dedupe)

    def keyed(stream):
        last = None
        for key, s, seq, rec, line in records(store, stream):
            if key is None:
                yield (last or ([0, 0], "", ""), 1), s, seq, rec, line
            else:
                last = key
                yield (key, 0), s, seq, rec, line

    # both streams roughly in clock order, so pieces join as they come in the common case
    for _k, stream, seq, rec, line in heapq.merge(keyed("evidence"), keyed("events"), key=lambda x: x[0]):
        walk.add(stream, seq, rec, line)
    return walk.result()


class _Walk:
    """``_walk``'s state: chain pieces being joined as records come, and each node's faults.
    A piece is ``[node, start prev, start (hlc, stream, seq), end hash, end hlc, end (stream, seq)]``."""

    def __init__(self, dedupe: bool) -> None:
        self.dedupe = dedupe
        self.out: dict = {"records": 0, "chained": 0, "nodes": {}, "unchained": 0, "duplicates": 0,
                          "broken": None, "breaks": []}
        self.seen: set = set()                 # with dedupe: sha256 digests of every chained line met
        self.by_start: dict[tuple, list] = {}  # (node, prev of the piece's first record) -> piece
        self.by_end: dict[tuple, list] = {}    # (node, hash of the piece's last record) -> piece
        self.faults: dict[str, tuple] = {}     # node -> (hlc, stream, seq, reason) of its earliest fault
        self.order: dict[tuple, tuple] = {}    # (node, stream) -> (hlc, seq) of the node's last record in that file
        self.newest: dict[str, tuple] = {}     # node -> (hlc, hash, stream, seq)
        self.unchained_first: tuple | None = None

    def fault(self, node, hlc, stream, seq, reason) -> None:
        old = self.faults.get(node)
        if old is None or hlc < old[0]:
            self.faults[node] = (hlc, stream, seq, reason)

    def add(self, stream: str, seq: int, rec: dict, line: bytes) -> None:
        out = self.out
        out["records"] += 1
        node = rec.get("node")
        if node is None:
            out["unchained"] += 1
            if self.unchained_first is None:
                self.unchained_first = (stream, seq)
            return
        digest = sha256(canonical(line)).digest()
        if self.dedupe:
            if digest in self.seen:
                out["duplicates"] += 1
                return
            self.seen.add(digest)
        out["chained"] += 1
        out["nodes"][node] = out["nodes"].get(node, 0) + 1
        hlc, prev, h = rec["hlc"], rec.get("prev"), digest.hex()
        top = self.newest.get(node)
        if top is None or hlc > top[0]:
            self.newest[node] = (hlc, h, stream, seq)
        last = self.order.get((node, stream))
        if last is not None and hlc <= last[0]:
            self.fault(node, hlc, stream, seq,
                       f"it comes after {stream} seq {last[1]} of node {node} in the file but carries an earlier "
                       "clock: lines were reordered (or a line was inserted) here")
        else:
            self.order[(node, stream)] = (hlc, seq)
        piece = self._place(node, hlc, prev, h, stream, seq)
        if piece is not None:
            self._join(piece, node, hlc, h, stream, seq)

    def _place(self, node, hlc, prev, h, stream, seq) -> list | None:
        """The piece this record now ends: one it extends, or a new one it starts (None when it
        claims a start another record already claimed: a fault)."""
        piece = self.by_end.pop((node, prev), None) if prev is not None else None
        if piece is not None:  # extends a piece
            if hlc <= piece[4]:
                self.fault(node, hlc, stream, seq, f"its clock does not move past the record before it from node "
                                                   f"{node} ({piece[5][0]} seq {piece[5][1]})")
            piece[3], piece[4], piece[5] = h, hlc, (stream, seq)
            return piece
        # starts a piece: the node's first record, or a record whose predecessor is not joined yet
        other = self.by_start.get((node, prev))
        if other is not None:
            what = "the node's first record" if prev is None else "the same predecessor"
            at_stream, at_seq = (stream, seq) if hlc >= other[2][0] else other[2][1:]
            self.fault(node, max(hlc, other[2][0]), at_stream, at_seq,
                       f"two records of node {node} claim {what} ({other[2][1]} seq {other[2][2]} and {stream} seq "
                       f"{seq}): a line was forged or inserted here")
            return None
        piece = [node, prev, (hlc, stream, seq), h, hlc, (stream, seq)]
        self.by_start[(node, prev)] = piece
        return piece

    def _join(self, piece: list, node, hlc, h, stream, seq) -> None:
        """Join onto ``piece`` the piece waiting for this record (hash ``h``), if any."""
        follow = self.by_start.get((node, h))
        if follow is not None and follow is not piece:
            del self.by_start[(node, h)]
            self.by_end.pop((node, follow[3]), None)
            if follow[2][0] <= hlc:
                self.fault(node, follow[2][0], follow[2][1], follow[2][2],
                           f"its clock does not move past the record before it from node {node} ({stream} seq {seq})")
            piece[3], piece[4], piece[5] = follow[3], follow[4], follow[5]
        self.by_end[(node, piece[3])] = piece

    def result(self) -> dict:
        out = self.out
        for (node, prev), piece in self.by_start.items():
            if prev is None:
                continue
            hlc, stream, seq = piece[2]
            if (node, None) in self.by_start:
                reason = (f"its prev does not match any record of node {node} before it: a line was removed, "
                          "inserted, reordered or rewritten here")
            else:
                reason = (f"the first record of node {node} points to a record that is not in the store (the log "
                          "was cut before it, or the line was forged)")
            self.fault(node, hlc, stream, seq, reason)
        breaks = [{"stream": f[1], "seq": f[2], "node": node, "reason": f[3]}
                  for node, f in sorted(self.faults.items(), key=lambda x: (x[1][0], x[0]))]
        if self.unchained_first is not None and out["chained"]:
            stream, seq = self.unchained_first
            breaks.append({"stream": stream, "seq": seq, "node": None,
                           "reason": "a record without node, hlc and prev in a format-2 store (added by hand or "
                                     "by an old loopx after the migration)"})
        out["breaks"] = breaks
        out["broken"] = breaks[0] if breaks else None
        out["heads"] = {n: {"hash": t[1], "stream": t[2], "seq": t[3], "hlc": t[0]} for n, t in self.newest.items()}
        return out


def check_heads(found: dict, recorded: dict) -> dict | None:
    """Compare the heads ``verify`` found with heads recorded earlier (the cache, an anchor):
    the first node whose recorded head is missing from the log, as ``{"node", "stream", "seq",
    "reason"}``, or None. A recorded head the log has moved past is fine only when the log still
    holds that record, which ``verify`` cannot see; so this checks what it can: a recorded head
    newer than the log's head (records cut off the end) or the same seq with another hash."""
    for node, rec_head in recorded.items():
        head = found.get(node)
        if head is None:
            return {"node": node, "stream": rec_head.get("stream"), "seq": rec_head.get("seq"),
                    "reason": f"node {node}'s records are gone from the log (cut off or rewritten)"}
        if head["hlc"] < rec_head["hlc"]:
            return {"node": node, "stream": rec_head.get("stream"), "seq": head["seq"] + 1 if head["stream"] ==
                    rec_head.get("stream") else rec_head.get("seq"),
                    "reason": f"the log ends before node {node}'s record {rec_head.get('stream')} seq "
                              f"{rec_head.get('seq')} that was seen earlier (the end was cut off)"}
        if head["hlc"] == rec_head["hlc"] and head["hash"] != rec_head["hash"]:
            return {"node": node, "stream": head["stream"], "seq": head["seq"],
                    "reason": f"node {node}'s newest record was rewritten since it was seen"}
    return None
