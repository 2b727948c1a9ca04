"""One record of ``.loopx/*.jsonl`` as its line and back (docs/file-format.md, "The record").

A line is compact JSON (``cjson.dumps``) whose last field is ``crc``: the CRC32 (8 lowercase hex
digits) of the line's UTF-8 bytes before ``,"crc":``. ``record`` puts a new record's fields in
their order, the chain fields (``node``, ``hlc``, ``prev``) included; ``decode`` checks the CRC,
the JSON, the record's shape (``fold.check_shape``) and its chain fields (``chain.check_fields``).
``order_key`` is the order in which a union-merged log is folded. No ``json`` import: the hot
read path decodes through ``cjson``.
"""

from __future__ import annotations

import zlib

from loopx.kernel.storage import cjson, fold

EVENT_VERSION = 1                 # the record's ``v``
CRC_KEY = b',"crc":"'
CONFLICT = (b"<<<<<<<", b"=======", b">>>>>>>", b"|||||||")  # git conflict markers at a line's start


def record(*, seq: int, rid: str, ts: str, node: str | None, hlc: list, prev: str | None, actor: str,
           type: str, goal: str | None, data: dict) -> dict:
    """A new record's fields in the order they are written (``crc`` is added by ``encode``)."""
    return {"v": EVENT_VERSION, "seq": seq, "id": rid, "ts": ts, "node": node, "hlc": hlc, "prev": prev,
            "actor": actor, "type": type, "goal": goal, "data": data}


def encode(rec: dict) -> bytes:
    """One record as its line (bytes, newline included): compact JSON whose last field is the CRC
    of what precedes it. Raises TypeError/ValueError for a value JSON cannot hold."""
    body = cjson.dumps(rec)
    head = body[:-1].encode("utf-8")
    return head + b',"crc":"%08x"}\n' % zlib.crc32(head)


EDITED = "crc mismatch on a well-formed record (the line was edited by hand)"


def _well_formed(line: bytes, loads) -> bool:
    """Whether a line whose CRC failed is otherwise a valid record (an edit, not damage). Only
    called on the skip path, never for a good line."""
    try:
        rec = loads(line)
        if not isinstance(rec, dict) or not isinstance(rec.get("type"), str) or not isinstance(rec.get("seq"), int):
            return False
        fold.check_shape(rec)
        if "node" in rec:
            from loopx.kernel.storage.chain import check_fields

            check_fields(rec)
    except (ValueError, UnicodeDecodeError, RecursionError, TypeError, KeyError):
        return False
    return True


def decode(line: bytes, loads=None) -> dict:
    """Parse one line (without its newline; a trailing CR and a leading BOM are tolerated).
    Raises ValueError naming what is wrong: no crc field, crc mismatch, not JSON, not an event
    record, a bad shape or bad chain fields. ``loads`` is a JSON parser (default ``cjson.loads``)."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    cut = line.rfind(CRC_KEY)
    if cut < 0 or len(line) != cut + len(CRC_KEY) + 10 or not line.endswith(b'"}'):
        raise ValueError("no crc field")
    want = line[cut + len(CRC_KEY):cut + len(CRC_KEY) + 8]
    try:
        crc_ok = zlib.crc32(line[:cut]) == int(want, 16)
    except ValueError:
        crc_ok = False
    if loads is None:
        loads = cjson.loads
    if not crc_ok:
        raise ValueError(EDITED if _well_formed(line, loads) else "crc mismatch (line was changed or damaged)")
    try:
        rec = loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:  # json's scanner on absurd nesting: a bad line like any other
        raise ValueError("not JSON: nested too deeply to read") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("type"), str) or not isinstance(rec.get("seq"), int):
        raise ValueError("not an event record")
    fold.check_shape(rec)
    if "node" in rec:
        from loopx.kernel.storage.chain import check_fields

        check_fields(rec)
    return rec


def clean_text(s: str) -> str:
    """``s`` made storable: lone surrogates (undecodable argv bytes) become U+FFFD."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)  # one U+FFFD per bad byte


def clean(value):
    """``value`` (JSON-like) with every string, keys included, made storable by ``clean_text``."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def order_key(rec: dict) -> tuple:
    """The order in which a union-merged log is folded. Store format 2: ``(hlc, node, id)``: the
    hybrid logical clock is strictly increasing per node and a writer takes one above every record it
    has seen (merged ones included), so each clone's records keep their order and a record written
    after a merge sorts after what the merge brought; ``node`` and the random ``id`` break ties
    deterministically. Records without a clock (format 1, before the migration) come first, by
    ``(seq, id)``, ``seq`` acting as a Lamport clock there."""
    hlc = rec.get("hlc")
    if isinstance(hlc, list) and len(hlc) == 2:
        return (1, hlc[0], hlc[1], str(rec.get("node") or ""), str(rec.get("id") or ""))
    return (0, rec.get("seq", 0), 0, "", str(rec.get("id") or ""))
