"""A full, lock-free integrity scan of ``.loopx/`` and the two safe store repairs doctor may make.

Unlike ``Store.load`` (which needs a readable ``format.json`` and trusts the snapshot), the scan
reads every line of each stream from byte 0 (``ops.segscan``: once, over the cores), so it works
on a broken store: a missing or corrupt
``format.json``, git conflict markers, a newer format.

``scan(root) -> dict``::

    {"format": {"ok": bool, "format": int | None, "error": str | None},
     "streams": {"events": StreamScan, "evidence": StreamScan}}

``StreamScan``: ``{exists, size, lines, good, bad_count, edited (bad lines that are well-formed
records whose CRC no longer matches: edited by hand), bad: [{line, offset, reason, text}]
(first 20, each naming its ``file``), conflict (bool), torn_bytes, segment_torn [names] (only when a
closed segment does not end on a line end), unreadable (str, only when a file cannot be read), bom (bool), crlf (int), last_seq, missing_seqs (int,
unexplained by quarantined lines), missing_sample [int], dup_seqs (int), dup_ids (int),
unknown_types {type: count}, newest_ts (str | None)}``.
"""

from __future__ import annotations

import json
import os
import re

from loopx.kernel.storage import layout
from loopx.kernel.storage.codec import CONFLICT, EDITED, decode
from loopx.kernel.storage.fs import atomic_write, open_file
from loopx.kernel.storage.store import Draft
from loopx.ops import segscan

_SEQ = re.compile(rb'"seq":(\d+)')


def read_format(root: str) -> dict:
    """``format.json`` as ``{ok, format, error, info}`` (never raises)."""
    path = os.path.join(root, layout.FORMAT)
    try:
        with open_file(path) as fh:
            info = json.loads(fh.read().decode("utf-8-sig"))
        if not isinstance(info, dict) or not isinstance(info.get("format"), int):
            raise ValueError("no integer 'format' field")
        return {"ok": True, "format": info["format"], "error": None, "info": info}
    except FileNotFoundError:
        return {"ok": False, "format": None, "error": "format.json is missing", "info": None}
    except (OSError, ValueError) as exc:
        return {"ok": False, "format": None, "error": f"format.json is unreadable: {exc}", "info": None}


def scan(root: str) -> dict:
    """Scan ``root`` (the ``.loopx`` directory) in one pass over every line (``ops.segscan``).
    Never raises on damaged content. Besides ``format`` and ``streams`` (the module
    docstring), the result holds ``chain`` (``segscan._chain``), ``anchors`` and ``gates``."""
    facts = segscan.scan_store(root)
    return {"format": read_format(root), **facts}


# --------------------------------------------------------------------- repairs (under the lock)
def quarantine_bad_lines(store, name: str, stamp: str) -> Draft | None:
    """Move the undecodable lines of ``name``.jsonl (not git conflict markers) to ``quarantine/``
    and rewrite the file without them. A line edited by hand (a well-formed record whose CRC no
    longer matches) stays where it is: only the person who edited it can undo the edit. Call with
    ``store.lock()`` held and the torn tail already repaired. Returns the ``store.repaired`` Draft
    to append, or None when nothing was bad."""
    path = store.path(layout.open_log(name))
    try:
        with open_file(path) as fh:
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
        except ValueError as exc:
            if line.startswith(CONFLICT):
                return None  # a merge to resolve by hand; never rewrite around it
            if str(exc) == EDITED:
                keep.append(line)  # never dropped: the user undoes the edit (doctor says how)
                continue
            bad.append(line)
            m = _SEQ.search(line)
            if m:
                seqs.append(int(m.group(1)))
    if not bad:
        return None
    os.makedirs(store.path(layout.QUARANTINE), exist_ok=True)
    qname = f"{name}-{stamp}-{os.urandom(3).hex()}.bad"
    atomic_write(store.path(layout.quarantined(qname)), b"\n".join(bad) + b"\n")
    atomic_write(path, b"".join(line + b"\n" for line in keep))
    return Draft("store.repaired", None, {"file": layout.open_log(name), "reason": "bad lines", "lines": len(bad),
                                          "bytes": sum(len(b) + 1 for b in bad), "seqs": seqs,
                                          "quarantine": layout.quarantined(qname)})
