"""Store format 2's record chain: node ids, the hybrid logical clock and the per-node hash chain.

Every record of a format-2 store carries (docs/architecture.md#flat-cost; docs/file-format.md):

- ``node``: the id of the clone that wrote it (``n-`` + 16 hex, kept in ``.loopx/node``, which is
  machine-local and git-ignored, so two clones never write as the same node);
- ``hlc``: ``[wall milliseconds, counter]``, strictly increasing over the records a node writes and
  past every record the store holds (so records merged from other machines are never overtaken);
- ``prev``: the SHA-256 (hex) of the previous record written by the same node (its line's bytes
  without the newline), ``null`` for a node's first record. The chain spans both streams and all
  segments: a node's records, ordered by ``hlc``, form one chain.

The merged order of a store's records is ``(hlc, node, id)``; ``seq`` stays a per-stream position.

``chain_heads(store)`` gives each node's newest record (what anchors record). Checking a whole
stream's chain (``verify``, what ``doctor`` runs) lives in ``chainwalk``: no hot command needs it.
"""

from __future__ import annotations

import os

_HEX = frozenset("0123456789abcdef")


def new_node() -> str:
    """A fresh random node id: ``n-`` + 16 lowercase hex digits."""
    return "n-" + os.urandom(8).hex()


def valid_node(text: str) -> bool:
    return isinstance(text, str) and len(text) == 18 and text.startswith("n-") and set(text[2:]) <= _HEX


def canonical(line: bytes) -> bytes:
    """The bytes a record's hash covers: its line without the newline, a CR or a leading BOM."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    return line


_SHA256 = None


def sha256(data: bytes = b""):
    """A SHA-256 hash object from the interpreter's built-in module when there is one (importing
    ``hashlib`` loads OpenSSL, several ms on every write), else from ``hashlib``."""
    global _SHA256
    if _SHA256 is None:
        try:
            from _sha256 import sha256 as impl  # CPython 3.11
        except ImportError:
            try:
                impl = __import__("_sha2").sha256  # CPython 3.12+ (a built-in module, not a dependency)
            except (ImportError, AttributeError):  # pragma: no cover - other interpreters
                from hashlib import sha256 as impl
        _SHA256 = impl
    return _SHA256(data)


def line_hash(line: bytes) -> str:
    """SHA-256 hex of ``canonical(line)``."""
    return sha256(canonical(line)).hexdigest()


def next_hlc(last: list | None, wall_ms: int) -> list:
    """The clock value after ``last`` (the newest ``[ms, counter]`` the store holds, or None) at
    wall time ``wall_ms``: the wall time when it moved past ``last``, else ``last`` + 1 tick."""
    if last is None or wall_ms > last[0]:
        return [wall_ms, 0]
    return [last[0], last[1] + 1]


def wall_ms(now) -> int:
    """``now`` (an aware datetime) in milliseconds since the epoch."""
    return int(now.timestamp() * 1000)


def check_fields(rec: dict) -> None:
    """Raise ValueError when a record's chain fields have the wrong type (absent fields are a
    format-1 record, which is fine)."""
    if "node" not in rec:
        return
    hlc = rec.get("hlc")
    if not valid_node(rec["node"]):
        raise ValueError("node is not a node id")
    if (not isinstance(hlc, list) or len(hlc) != 2 or not all(type(x) is int and x >= 0 for x in hlc)):
        raise ValueError("hlc is not [milliseconds, counter]")
    prev = rec.get("prev")
    if prev is not None and (not isinstance(prev, str) or len(prev) != 64):
        raise ValueError("prev is not a SHA-256 hex digest")


# ----------------------------------------------------------------------- heads
def chain_heads(store) -> dict:
    """Each node's newest record: ``{node: {"seq": int, "hash": str, "stream": "events"|"evidence",
    "hlc": [ms, counter]}}``. Read from the live view (no history is folded when the cache is
    current). Empty for a format-1 store. Raises what ``Store.load`` raises."""
    state = store.load(view="live")
    return {node: dict(head) for node, head in (state["meta"].get("chain") or {}).items()}
