"""A full, lock-free integrity scan of ``.loopx/`` and the two safe store repairs doctor may make.

Unlike ``Store.load`` (which needs a readable ``format.json`` and trusts the snapshot), the scan
reads every line of each stream from byte 0, so it works on a broken store: a missing or corrupt
``format.json``, git conflict markers, a newer format.

``scan(root) -> dict``::

    {"format": {"ok": bool, "format": int | None, "error": str | None},
     "streams": {"events": StreamScan, "evidence": StreamScan}}

``StreamScan``: ``{exists, size, lines, good, bad_count, bad: [{line, offset, reason, text}]
(first 20), conflict (bool), torn_bytes, bom (bool), crlf (int), last_seq, missing_seqs (int,
unexplained by quarantined lines), missing_sample [int], dup_seqs (int), dup_ids (int),
unknown_types {type: count}, newest_ts (str | None)}``.
"""

from __future__ import annotations

import json
import os
import re

from loopx.kernel.storage import fold
from loopx.kernel.storage.fs import atomic_write
from loopx.kernel.storage.store import _CONFLICT, STREAMS, Draft, decode

BAD_SAMPLES = 20
_SEQ = re.compile(rb'"seq":(\d+)')


def read_format(root: str) -> dict:
    """``format.json`` as ``{ok, format, error, info}`` (never raises)."""
    path = os.path.join(root, "format.json")
    try:
        with open(path, "rb") as fh:
            info = json.loads(fh.read().decode("utf-8-sig"))
        if not isinstance(info, dict) or not isinstance(info.get("format"), int):
            raise ValueError("no integer 'format' field")
        return {"ok": True, "format": info["format"], "error": None, "info": info}
    except FileNotFoundError:
        return {"ok": False, "format": None, "error": "format.json is missing", "info": None}
    except (OSError, ValueError) as exc:
        return {"ok": False, "format": None, "error": f"format.json is unreadable: {exc}", "info": None}


def _empty(exists: bool, size: int) -> dict:
    return {"exists": exists, "size": size, "lines": 0, "good": 0, "bad_count": 0, "bad": [],
            "conflict": False, "torn_bytes": 0, "bom": False, "crlf": 0, "last_seq": 0,
            "missing_seqs": 0, "missing_sample": [], "dup_seqs": 0, "dup_ids": 0,
            "unknown_types": {}, "newest_ts": None, "_seqs": set(), "_explained": {}}


def scan_stream(path: str, segments: list[str] | None = None) -> dict:
    """Scan one JSONL stream (see the module docstring for the shape): its closed ``segments``
    (oldest first) and then the open file ``path``; a bad line's sample names its ``file``."""
    out = None
    ids: set[str] = set()
    for seg in segments or []:
        out = _scan_file(seg, out, ids, closed=True)
    return _scan_file(path, out, ids)


def _scan_file(path: str, out: dict | None, ids: set, closed: bool = False) -> dict:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return out if out is not None else _empty(False, 0)
    except OSError as exc:  # permissions, a folder in the file's place, an I/O error
        out = out if out is not None else _empty(True, 0)
        out["unreadable"] = f"{exc.strerror or exc}"
        return out
    if out is None:
        out = _empty(True, len(data))
    else:
        out["exists"] = True
        out["size"] += len(data)
    end = data.rfind(b"\n") + 1
    if closed and end < len(data):
        out.setdefault("segment_torn", []).append(os.path.basename(path))
    else:
        out["torn_bytes"] = len(data) - end
    out["bom"] = out["bom"] or data.startswith(b"\xef\xbb\xbf")
    seqs: set[int] = out["_seqs"]
    offset = 0
    fname = os.path.relpath(path, os.path.dirname(os.path.dirname(path))) if closed else os.path.basename(path)
    for n, line in enumerate(data[:end].split(b"\n")[:-1], start=1):
        start, offset = offset, offset + len(line) + 1
        out["lines"] += 1
        if line.endswith(b"\r"):
            out["crlf"] += 1
        if not line.strip():
            continue
        try:
            rec = decode(line)
        except ValueError as exc:
            conflict = line.startswith(_CONFLICT)
            out["conflict"] = out["conflict"] or conflict
            out["bad_count"] += 1
            if len(out["bad"]) < BAD_SAMPLES:
                out["bad"].append({"line": n, "offset": start, "reason": str(exc), "conflict": conflict,
                                   "text": line[:80].decode("utf-8", "replace"), "file": fname})
            continue
        out["good"] += 1
        _note_record(out, rec, seqs, ids)
    return out


def _note_record(out: dict, rec: dict, seqs: set, ids: set) -> None:
    seq = rec["seq"]
    if seq in seqs:
        out["dup_seqs"] += 1
    seqs.add(seq)
    out["last_seq"] = max(out["last_seq"], seq)
    rid = rec.get("id")
    if rid in ids:
        out["dup_ids"] += 1
    elif rid:
        ids.add(rid)
    if rec["type"] not in fold.REDUCERS:
        out["unknown_types"][rec["type"]] = out["unknown_types"].get(rec["type"], 0) + 1
    ts = rec.get("ts")
    if isinstance(ts, str) and (out["newest_ts"] is None or ts > out["newest_ts"]):
        out["newest_ts"] = ts
    if rec["type"] == "store.repaired" and isinstance(rec.get("data"), dict):
        d = rec["data"]
        explained = out["_explained"].setdefault(str(d.get("file", "")), set())
        explained.update(s for s in d.get("seqs") or [] if isinstance(s, int))


def _segments(root: str, name: str) -> list[str]:
    out = []
    while os.path.exists(os.path.join(root, name, f"{len(out) + 1:06d}.jsonl")):
        out.append(os.path.join(root, name, f"{len(out) + 1:06d}.jsonl"))
    return out


def scan(root: str) -> dict:
    """Scan ``root`` (the ``.loopx`` directory). Never raises on damaged content."""
    streams = {name: scan_stream(os.path.join(root, f"{name}.jsonl"), _segments(root, name)) for name in STREAMS}
    explained: dict[str, set] = {}
    for s in streams.values():
        for fname, seqs in s.pop("_explained").items():
            explained.setdefault(fname, set()).update(seqs)
    for name, s in streams.items():
        seqs = s.pop("_seqs")
        missing = sorted(set(range(1, s["last_seq"] + 1)) - seqs - explained.get(f"{name}.jsonl", set()))
        s["missing_seqs"] = len(missing)
        s["missing_sample"] = missing[:10]
    return {"format": read_format(root), "streams": streams}


# --------------------------------------------------------------------- repairs (under the lock)
def quarantine_bad_lines(store, name: str, stamp: str) -> Draft | None:
    """Move the undecodable lines of ``name``.jsonl (not git conflict markers) to ``quarantine/``
    and rewrite the file without them. Call with ``store.lock()`` held and the torn tail already
    repaired. Returns the ``store.repaired`` Draft to append, or None when nothing was bad."""
    path = store.path(f"{name}.jsonl")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    if not data.endswith(b"\n"):
        return None  # a torn tail is repaired first, by the store itself
    keep, bad, seqs = [], [], []
    for line in data.split(b"\n")[:-1]:
        if not line.strip():
            keep.append(line)
            continue
        try:
            decode(line)
            keep.append(line)
        except ValueError:
            if line.startswith(_CONFLICT):
                return None  # a merge to resolve by hand; never rewrite around it
            bad.append(line)
            m = _SEQ.search(line)
            if m:
                seqs.append(int(m.group(1)))
    if not bad:
        return None
    os.makedirs(store.path("quarantine"), exist_ok=True)
    qname = f"{name}-{stamp}-{os.urandom(3).hex()}.bad"
    atomic_write(store.path("quarantine", qname), b"\n".join(bad) + b"\n")
    atomic_write(path, b"".join(line + b"\n" for line in keep))
    return Draft("store.repaired", None, {"file": f"{name}.jsonl", "reason": "bad lines", "lines": len(bad),
                                          "bytes": sum(len(b) + 1 for b in bad), "seqs": seqs,
                                          "quarantine": f"quarantine/{qname}"})
