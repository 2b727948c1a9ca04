"""In-place migration of a format-1 store to format 2 (docs/file-format.md, "Versioning and migration"), run by the first write.

``run(store)`` (the caller holds the store's lock and has repaired torn tails):

1. copies ``format.json``, ``events.jsonl`` and ``evidence.jsonl`` to ``.loopx/backup/format-1/``
   (a fresh ``format-1-<time>/`` when that one already holds other bytes), fsyncs, reads the copies
   back and compares their SHA-256 with the originals; any difference stops the migration
   (StateError, nothing changed);
2. streams both files once, in the order the records were written (by ``ts``, evidence before
   events within a second, as a transaction writes them), and gives every record the chain fields
   of a *legacy node* derived from the project id (``n-`` + the first 16 hex digits of
   SHA-256(project_id + ":format-1")), so two clones that migrate the same history write the same
   bytes): ``hlc`` from ``ts``, ``prev`` chained. Every other field, the file order and ``seq`` are
   kept; lines that cannot be read are carried over byte for byte (they stay reported);
3. writes ``<stream>.jsonl.format2``, checks that each holds the same records (count and ids, in
   order), writes a journal ``migrating.json``, renames both files into place, writes
   ``format.json`` with ``"format": 2`` and removes the journal. A migration interrupted after the
   journal was written is finished by the next writer (``resume``).

Returns ``{"backup": path, "records": n, "node": legacy node}`` or None when nothing was to do.
"""

from __future__ import annotations

import heapq
import json
import os
from json import loads

from loopx import __version__
from loopx.errors import StateError
from loopx.kernel.storage import clock, layout
from loopx.kernel.storage.chain import next_hlc, sha256
from loopx.kernel.storage.fs import atomic_write, ensure_lines, move_into_place

JOURNAL = "migrating.json"


def legacy_node(project_id: str) -> str:
    return "n-" + sha256(f"{project_id}:format-1".encode()).hexdigest()[:16]


def _copy_verified(src: str, dest: str) -> str:
    h = sha256()
    with open(src, "rb") as fi, open(dest, "wb") as fo:
        while True:
            chunk = fi.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
            fo.write(chunk)
        fo.flush()
        os.fsync(fo.fileno())
    back = sha256()
    with open(dest, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            back.update(chunk)
    if back.hexdigest() != h.hexdigest():
        raise StateError(f"the backup copy {dest} does not match {src}; the store was not migrated",
                         "check the disk (free space, errors) and retry")
    return h.hexdigest()


def _backup(store) -> str:
    names = [n for n in (layout.FORMAT, *map(layout.open_log, layout.STREAMS)) if os.path.exists(store.path(n))]
    base = store.path(layout.FORMAT1_BACKUP)
    dest = base
    if os.path.isdir(base) and os.listdir(base):
        same = True
        for n in names:
            try:
                with open(store.path(n), "rb") as a, open(os.path.join(base, n), "rb") as b:
                    same = same and a.read() == b.read()
            except OSError:
                same = False
        if same:
            return base  # an earlier, interrupted migration already kept exactly these bytes
        dest = f"{base}-{clock.now().strftime('%Y%m%dT%H%M%SZ')}-{os.urandom(2).hex()}"
    os.makedirs(dest, exist_ok=True)
    for n in names:
        _copy_verified(store.path(n), os.path.join(dest, n))
    return dest


def _lines(path: str, stream: str, rank: int, decode):
    """(key, stream, raw line, record | None) for each line of ``path``; unreadable lines inherit the
    key of the record before them, so they keep their place."""
    key = ("", rank, 0)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            if not line.endswith(b"\n"):
                line += b"\n"  # the caller repaired torn tails; a last line without newline is kept whole
            rec = None
            if line.strip():
                try:
                    rec = decode(line.rstrip(b"\n"), loads)
                except ValueError:
                    rec = None
            if rec is not None:
                key = (rec["ts"], rank, rec["seq"])
            yield key, stream, line, rec


FIELDS = ("v", "seq", "id", "ts", "node", "hlc", "prev")


def _upgrade(rec: dict, node: str, hlc: list, prev: str | None) -> dict:
    out = {k: rec[k] for k in ("v", "seq", "id", "ts") if k in rec}
    out.update(node=node, hlc=hlc, prev=prev)
    for k, v in rec.items():
        if k not in out and k != "crc":
            out[k] = v
    return out


def resume(store) -> bool:
    """Finish a migration whose journal exists (the new files are complete); True when one was."""
    jpath = store.path(JOURNAL)
    try:
        with open(jpath, "rb") as fh:
            journal = json.loads(fh.read())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return False  # unreadable journal: leave it for doctor, never guess
    for stream in ("events", "evidence"):
        new = store.path(layout.open_log(stream) + ".format2")
        if os.path.exists(new):
            move_into_place(new, store.path(layout.open_log(stream)))
    atomic_write(store.path(layout.FORMAT), (json.dumps(journal["format"], indent=2) + "\n").encode())
    os.unlink(jpath)
    store._format = None
    return True


def run(store) -> dict | None:
    """Migrate ``store`` to format 2 (see the module docstring). Call with the lock held."""
    FORMAT, decode, encode = store.FORMAT, store.decode, store.encode

    if resume(store):
        return None
    info = dict(store.format_info())
    if info["format"] >= FORMAT:
        return None
    backup = _backup(store)
    node = legacy_node(str(info.get("project_id") or store.root))
    outs = {s: open(store.path(f"{s}.jsonl.format2"), "wb") for s in ("events", "evidence")}  # noqa: SIM115
    digest = {s: sha256() for s in ("events", "evidence")}
    counts = {"events": 0, "evidence": 0}
    last_hlc, prev, total = None, None, 0
    try:
        merged = heapq.merge(_lines(store.path(layout.open_log("evidence")), "evidence", 0, decode),
                             _lines(store.path(layout.open_log("events")), "events", 1, decode), key=lambda x: x[0])
        for _key, stream, line, rec in merged:
            if rec is None or "node" in rec:
                outs[stream].write(line)
                if rec is not None:
                    counts[stream] += 1
                    digest[stream].update(rec["id"].encode() + b"\n")
                continue
            try:
                ms = int(clock.parse_ts(rec["ts"]).timestamp() * 1000)
            except Exception:  # noqa: BLE001 - an odd ts still gets a place in the chain
                ms = last_hlc[0] if last_hlc else 0
            last_hlc = next_hlc(last_hlc, ms)
            new = encode(_upgrade(rec, node, last_hlc, prev))
            prev = sha256(new[:-1]).hexdigest()
            outs[stream].write(new)
            counts[stream] += 1
            total += 1
            digest[stream].update(rec["id"].encode() + b"\n")
        for fh in outs.values():
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        for fh in outs.values():
            fh.close()
    for stream in ("events", "evidence"):  # read the new files back: same records, same order
        check, n = sha256(), 0
        with open(store.path(f"{stream}.jsonl.format2"), "rb") as back:
            for line in back:
                try:
                    rec = decode(line.rstrip(b"\n"))
                except ValueError:
                    continue
                n += 1
                check.update(rec["id"].encode() + b"\n")
        if n != counts[stream] or check.hexdigest() != digest[stream].hexdigest():
            for s in ("events", "evidence"):
                try:
                    os.unlink(store.path(f"{s}.jsonl.format2"))
                except FileNotFoundError:
                    pass
            raise StateError(f"migrating {stream}.jsonl to format 2 did not keep every record; nothing was changed",
                             f"the store stays in format 1 (a copy is in {os.path.relpath(backup, store.project_dir)}); "
                             "check the store and report this", code="migration_lost_records",
                             details={"backup": os.path.relpath(backup, store.project_dir)})
    info.update(format=FORMAT, migrated_from=1, migrated_at=clock.now_iso(), migrated_by=f"loopx {__version__}",
                legacy_node=node, backup=os.path.relpath(backup, store.root))
    atomic_write(store.path(JOURNAL), json.dumps({"format": info}).encode())
    resume(store)
    _ignore_new_files(store)
    return {"backup": backup, "records": total, "node": node}


def _ignore_new_files(store) -> None:
    """Add format 2's machine-local entries (``node``, ``backup/``) to ``.loopx/.gitignore``."""
    ensure_lines(store.path(layout.GITIGNORE), (layout.NODE, layout.BACKUP + "/"))
