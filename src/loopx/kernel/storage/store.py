"""The append-only store under ``.loopx/`` (docs/architecture.md#store; docs/file-format.md).

Two JSONL streams, ``events.jsonl`` (control events) and ``evidence.jsonl`` (evidence records),
one compact JSON object per line ending in a ``crc`` field: the CRC32 (8 hex digits) of the line's
UTF-8 bytes before ``,"crc":``. ``seq`` is gap-free per file and assigned under the lock.

Writers take an OS lock on ``.loopx/lock`` (bounded wait, then StoreBusy, exit 4), repair a torn
tail (quarantine + truncate + a ``store.repaired`` event), catch up on what other writers
appended, let the caller validate against the current state (compare-and-append), then write each
file's new lines with one ``os.write`` and ``fsync``. Readers never lock: they load the snapshot in
``cache/`` when it still matches the files, fold only the tail, and ignore an unterminated last
line. Bad lines are skipped, counted and reported, never silently dropped.

A log may also be the union of several clones' logs (git's ``merge=union``, which ``loopx
connect`` sets for ``.loopx/*.jsonl``): both sides' new lines, each side's in its own order, with
``seq`` numbers that repeat. A reader that meets a ``seq`` not above the last one folds that file
again in ``order_key`` order with duplicate ids dropped (``merged`` in the file's meta), so every
clone with the same records computes the same state whatever order git wrote them in; the next
``seq`` is one above the largest, a Lamport clock over the clones.
"""

from __future__ import annotations

import os
import zlib
from contextlib import contextmanager

from loopx import __version__
from loopx.config import env
from loopx.errors import NotConnected, ReadOnlyStore, StateError
from loopx.kernel.storage import clock, fold, ids
from loopx.kernel.storage.fs import DIRNAME, atomic_write, find_root, locked, stale_temporaries

FORMAT = 1
STREAMS = ("events", "evidence")
EVENT_VERSION = 1
SNAPSHOT_VERSION = 3
SNAPSHOT_FILE = "snapshot.bin"
LIVE_FILE = "live.bin"
SNAPSHOT_EVERY = 200          # fold at most this many tail lines before refreshing the snapshot
BAD_SAMPLES = 20
_CRC_KEY = b',"crc":"'
_CONFLICT = (b"<<<<<<<", b"=======", b">>>>>>>", b"|||||||")
GITIGNORE = "# written by loopx: machine-local files\nlock\ncache/\nworktrees/\n"


def lock_timeout() -> float:
    """Seconds a writer waits for the lock (``LOOPX_LOCK_TIMEOUT``, default 10)."""
    try:
        return max(0.0, float(env("LOOPX_LOCK_TIMEOUT") or "10"))
    except ValueError:
        return 10.0


def encode(rec: dict) -> bytes:
    """One record as its line: compact JSON whose last field is the CRC of what precedes it."""
    import json

    body = json.dumps(rec, ensure_ascii=False, separators=(",", ":"))
    head = body[:-1].encode("utf-8")
    return head + b',"crc":"%08x"}\n' % zlib.crc32(head)


def decode(line: bytes, loads=None) -> dict:
    """Parse one line (without its newline). Raises ValueError naming what is wrong.
    ``loads`` is ``json.loads``, passed in by loops so `json` is imported only when a line is read."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    cut = line.rfind(_CRC_KEY)
    if cut < 0 or len(line) != cut + len(_CRC_KEY) + 10 or not line.endswith(b'"}'):
        raise ValueError("no crc field")
    want = line[cut + len(_CRC_KEY):cut + len(_CRC_KEY) + 8]
    try:
        crc_ok = zlib.crc32(line[:cut]) == int(want, 16)
    except ValueError:
        crc_ok = False
    if not crc_ok:
        raise ValueError("crc mismatch (line was changed or damaged)")
    if loads is None:
        from json import loads
    try:
        rec = loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("type"), str) or not isinstance(rec.get("seq"), int):
        raise ValueError("not an event record")
    fold.check_shape(rec)
    return rec


def clean_text(s: str) -> str:
    """``s`` made storable: lone surrogates (undecodable argv bytes) become U+FFFD."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)  # one U+FFFD per bad byte


def clean(value):
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


class Draft:
    """An event to append: ``type`` (noun.past_tense), ``goal`` id or None, ``data`` dict, ``stream``."""

    __slots__ = ("type", "goal", "data", "stream")

    def __init__(self, type: str, goal: str | None, data: dict, stream: str = "events") -> None:
        self.type, self.goal, self.data, self.stream = type, goal, data, stream


class Store:
    """One project's ``.loopx/`` directory. ``root`` is the path of ``.loopx`` itself."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.project_dir = os.path.dirname(root)
        self._format: dict | None = None

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, project: str | None = None) -> Store:
        """The store of ``project`` (a directory) or the nearest one above the cwd.
        Raises NotConnected (exit 3) when there is none."""
        if project:
            root = os.path.join(os.path.abspath(project), DIRNAME)
            if not os.path.isdir(root):
                raise NotConnected(f"{os.path.abspath(project)} is not connected to loopx",
                                   f"run `loopx connect --project {project}`")
        else:
            root = find_root(os.getcwd())
            if root is None:
                raise NotConnected("no .loopx/ here or in any parent directory",
                                   "run `loopx connect` in the project's root")
        return cls(root)

    @classmethod
    def create(cls, project: str) -> tuple[Store, bool]:
        """Create (or attach to) ``project/.loopx``. Returns (store, created). Idempotent."""
        root = os.path.join(os.path.abspath(project), DIRNAME)
        created = False
        if not os.path.isdir(root):
            os.makedirs(root, exist_ok=True)
            created = True
        store = cls(root)
        fpath = store.path("format.json")
        if not os.path.exists(fpath):
            info = {"format": FORMAT, "created_by": f"loopx {__version__}",
                    "project_id": "p-" + os.urandom(6).hex(), "created_at": clock.now_iso()}
            import json

            atomic_write(fpath, (json.dumps(info, indent=2) + "\n").encode())
            created = True
        for sub in ("blobs", "cache", "quarantine"):
            os.makedirs(store.path(sub), exist_ok=True)
        for name in ("events.jsonl", "evidence.jsonl", "lock"):
            p = store.path(name)
            if not os.path.exists(p):
                os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
        gi = store.path(".gitignore")
        if not os.path.exists(gi):
            atomic_write(gi, GITIGNORE.encode())
        store.format_info()
        return store, created

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def format_info(self) -> dict:
        """``format.json`` as a dict. Raises StateError when it is missing or unreadable."""
        if self._format is None:
            try:
                with open(self.path("format.json"), "rb") as fh:
                    raw = fh.read()
                import json

                info = json.loads(raw.decode("utf-8-sig"))
                if not isinstance(info, dict) or not isinstance(info.get("format"), int):
                    raise ValueError("no integer 'format' field")
            except FileNotFoundError:
                raise StateError(f"{self.path('format.json')} is missing",
                                 "run `loopx connect` to recreate it (events are kept)") from None
            except (OSError, ValueError) as exc:
                raise StateError(f"{self.path('format.json')} is unreadable: {exc}",
                                 "restore it from git or run `loopx doctor`") from None
            self._format = info
        return self._format

    def read_only_reason(self, state: dict | None = None) -> str | None:
        """Why this store must not be written now, or None."""
        fmt = self.format_info()["format"]
        if fmt > FORMAT:
            return (f"this store has format {fmt}; this loopx {__version__} understands format {FORMAT}"
                    " (upgrade loopx: `loopx update plan`)")
        if state is not None:
            for name, meta in state["meta"]["files"].items():
                if meta.get("conflict"):
                    return f"{name}.jsonl contains git conflict markers (resolve the merge, then `loopx doctor`)"
        return None

    # ----------------------------------------------------------------- reading
    def load(self, *, save_snapshot: bool = True, view: str = "full") -> dict:
        """The folded state (a plain dict, see loopx.kernel.storage.fold). Lock-free.
        ``state["meta"]`` reports bad lines, torn tails, unknown types and the read-only reason.

        ``view="live"`` may return the smaller live view instead (see ``fold.live_view``: no closed
        todos, decided gates, old runs or old evidence, plus ``closed`` counts per goal), which is
        what ``status`` needs; it falls back to the full state whenever the live snapshot is missing,
        stale by more than SNAPSHOT_EVERY lines, or its tail touches a record the view left out."""
        self.format_info()
        if view == "live":
            live = self._load_live()
            if live is not None:
                return live
            save_snapshot = "refresh"  # so the next live read finds a view that fits
        state, offsets = self._load_snapshot()
        folded = 0
        torn = {}
        for name in STREAMS:
            n, tail = self._fold_file(state, name, offsets.get(name, 0))
            folded += n
            if tail:
                torn[name] = tail
        if any(m.get("unordered") for m in state["meta"]["files"].values()):
            state, folded = self._fold_merged(state), SNAPSHOT_EVERY  # saved: the next read folds the tail only
        state["meta"]["torn"] = torn
        if save_snapshot == "refresh" or (save_snapshot and folded >= SNAPSHOT_EVERY):
            self._save_snapshot(state)
        state["meta"]["read_only"] = self.read_only_reason(state)
        return state

    def _fold_file(self, state: dict, name: str, offset: int, ordered: bool = False) -> tuple[int, int]:
        """Fold ``name`` from byte ``offset``; return (lines folded, torn-tail bytes). A record whose
        ``seq`` is not above the last one marks the file ``unordered`` (a union-merged log; the
        caller folds again with ``ordered``, which sorts by ``order_key`` and drops duplicate ids)."""
        meta = state["meta"]["files"][name]
        try:
            with open(self.path(f"{name}.jsonl"), "rb") as fh:
                if offset:
                    fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return 0, 0
        if not data:
            return 0, 0
        end = data.rfind(b"\n") + 1
        torn = len(data) - end
        if offset == 0 and data.startswith(b"\xef\xbb\xbf"):
            meta["bom"] = True
        from json import loads

        pos = offset
        count = 0
        apply = fold.apply
        if ordered:
            collected: list[dict] = []
            apply = lambda _state, rec: collected.append(rec)  # noqa: E731 - sorted and folded below
        for line in data[:end].split(b"\n")[:-1]:
            line_start = pos
            pos += len(line) + 1
            meta["lines"] += 1
            count += 1
            if line.endswith(b"\r"):
                meta["crlf"] = meta.get("crlf", 0) + 1
            if not line.strip():
                continue
            try:
                rec = decode(line, loads)
            except ValueError as exc:
                if line.startswith(_CONFLICT):
                    meta["conflict"] = True
                meta["bad"] += 1
                if len(meta["bad_samples"]) < BAD_SAMPLES:
                    meta["bad_samples"].append({"line": meta["lines"], "offset": line_start,
                                                "reason": str(exc), "text": line[:80].decode("utf-8", "replace")})
                continue
            seq = rec["seq"]
            if seq <= meta["last_seq"] and not ordered:
                meta["unordered"] = True
            elif seq != meta["last_seq"] + 1 and not ordered:
                meta["seq_gaps"] = meta.get("seq_gaps", 0) + 1
            if seq > meta["last_seq"]:
                meta["last_seq"] = seq
            apply(state, rec)
        if ordered:
            seen: set = set()
            keep = []
            for rec in sorted(collected, key=order_key):
                rid = rec.get("id") or (rec["seq"], rec.get("crc"))
                if rid in seen:
                    meta["duplicates"] = meta.get("duplicates", 0) + 1
                    continue
                seen.add(rid)
                keep.append(rec)
            meta["merged"] = True
            for rec in keep:
                fold.apply(state, rec)
        meta["offset"] = pos
        meta["tail"] = data[max(0, end - 32):end].hex() if end else meta.get("tail", "")
        return count, torn

    def _fold_merged(self, seen: dict) -> dict:
        """The whole state again, each file folded in ``order_key`` order without duplicate ids
        (a union-merged log: see the module docstring). ``seen`` is the state the plain fold made."""
        state = fold.empty()
        for name in STREAMS:
            merged = seen["meta"]["files"][name].get("unordered") or seen["meta"]["files"][name].get("merged")
            self._fold_file(state, name, 0, ordered=bool(merged))
        return state

    def _load_live(self) -> dict | None:
        state, offsets = self._load_snapshot(LIVE_FILE)
        if not offsets:
            return None
        malformed = state["meta"].get("malformed", 0)
        torn = {}
        for name in STREAMS:
            n, tail = self._fold_file(state, name, offsets[name])
            if n >= SNAPSHOT_EVERY or state["meta"].get("malformed", 0) != malformed \
                    or state["meta"]["files"][name].get("unordered"):
                return None  # too far behind, or the tail refers to something the view left out
            if tail:
                torn[name] = tail
        now = clock.now()
        for gid, cut in state.get("spends_cut", {}).items():
            window = state["goals"].get(gid, {}).get("quota", {}).get("window", 86400)
            if clock.iso(now - clock.timedelta(seconds=window)) < cut:
                return None  # a wider window (or an earlier clock) needs ledger entries the view dropped
        state["meta"]["torn"] = torn
        state["meta"]["read_only"] = self.read_only_reason(state)
        return state

    def _load_snapshot(self, filename: str = SNAPSHOT_FILE) -> tuple[dict, dict]:
        try:
            with open(self.path("cache", filename), "rb") as fh:
                raw = fh.read()  # one read: marshal.load(fh) reads piecemeal, several times slower
            snap = _unmarshal(raw)
            if (not isinstance(snap, dict) or snap.get("v") != SNAPSHOT_VERSION
                    or snap.get("fold") != fold.FOLD_VERSION):
                raise ValueError("old snapshot")
            offsets = {}
            for name in STREAMS:
                meta = snap["state"]["meta"]["files"][name]
                off = meta["offset"]
                tail = bytes.fromhex(meta.get("tail", ""))
                with open(self.path(f"{name}.jsonl"), "rb") as fh:
                    if off:
                        fh.seek(max(0, off - len(tail)))
                        if fh.read(len(tail)) != tail:
                            raise ValueError("file changed under the snapshot")
                    elif tail:
                        raise ValueError("bad snapshot")
                offsets[name] = off
            return snap["state"], offsets
        except (OSError, ValueError, EOFError, TypeError, KeyError):
            return fold.empty(), {}

    def _save_snapshot(self, state: dict) -> None:
        """Write the snapshot atomically; the cache is disposable so failures are ignored."""
        import marshal
        meta = state["meta"]
        meta["snap_lines"] = sum(m["lines"] for m in meta["files"].values())
        saved = {k: v for k, v in meta.items() if k not in ("torn", "read_only")}
        body = dict(state)
        body["meta"] = saved
        try:
            os.makedirs(self.path("cache"), exist_ok=True)
            data = marshal.dumps({"v": SNAPSHOT_VERSION, "fold": fold.FOLD_VERSION, "state": body})
            atomic_write(self.path("cache", SNAPSHOT_FILE), data, sync=False)
            view = fold.live_view(body, clock.now_iso())
            live = marshal.dumps({"v": SNAPSHOT_VERSION, "fold": fold.FOLD_VERSION, "state": view})
            atomic_write(self.path("cache", LIVE_FILE), live, sync=False)
            self._sweep_cache()
        except (OSError, ValueError):
            pass

    def _sweep_cache(self, older_than: float = 600.0) -> None:
        """Delete temp files that a process killed mid-write left in ``cache/`` (at most one snapshot
        each); only old ones, so a concurrent writer's file in flight is never touched."""
        for path in stale_temporaries(self.path("cache"), older_than=older_than):
            try:
                os.unlink(path)
            except OSError:
                pass

    # ----------------------------------------------------------------- writing
    @contextmanager
    def lock(self, timeout: float | None = None):
        """Hold the store's OS lock. Raises StoreBusy (exit 4) after ``timeout`` seconds.
        The OS drops the lock when the holder dies, so a killed writer never blocks others."""
        with locked(self.path("lock"), lock_timeout() if timeout is None else timeout):
            yield

    def transact(self, plan, *, actor: str, reap: bool = True) -> tuple[list[dict], dict]:
        """Run one compare-and-append transaction.

        ``plan(state, now)`` sees the state folded under the lock and returns a list of Draft
        (or raises a LoopxError to refuse). Evidence drafts are written before control events.
        Before the plan runs, the writer does the store's housekeeping and writes it even when
        the plan then refuses: torn tails are repaired and, with ``reap``, the registered housekeeping
        runs (``register_housekeeping``: the write layer's run reaper closes runs whose lease ended as
        failed and releases their claims), so the plan sees the state after that.
        Returns (records written, state after). Raises StoreBusy, ReadOnlyStore, StateError.
        """
        with self.lock():
            repairs = self._repair_torn_tails()
            state = self.load(save_snapshot=False)
            reason = state["meta"]["read_only"]
            if reason:
                raise ReadOnlyStore(f"the store is read-only: {reason}",
                                    "nothing was written; see `loopx doctor`")
            now = clock.now()
            if reap:
                for housekeeping in HOUSEKEEPING:
                    repairs = list(repairs) + list(housekeeping(state, now))
            records = self._append(state, list(repairs), now, actor) if repairs else []
            records += self._append(state, list(plan(state, now) or []), now, actor)
            lines = sum(m["lines"] for m in state["meta"]["files"].values())
            if lines - state["meta"].get("snap_lines", 0) >= SNAPSHOT_EVERY:
                self._save_snapshot(state)
            return records, state

    def _append(self, state: dict, drafts: list[Draft], now, actor: str) -> list[dict]:
        from loopx.kernel.storage.redact import redact

        ts = clock.iso(now)
        records: list[dict] = []
        for stream in ("evidence", "events"):
            mine = [d for d in drafts if d.stream == stream]
            if not mine:
                continue
            meta = state["meta"]["files"][stream]
            seq = meta["last_seq"]
            chunks = []
            for d in mine:
                seq += 1
                rec = {"v": EVENT_VERSION, "seq": seq, "id": ids.event_id(), "ts": ts, "actor": actor,
                       "type": d.type, "goal": d.goal, "data": redact(clean(d.data))}
                chunks.append(encode(rec))
                records.append(rec)
            blob = b"".join(chunks)
            fd = os.open(self.path(f"{stream}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, blob)
                while written < len(blob):  # a short write on a regular file is rare; finish it
                    written += os.write(fd, blob[written:])
                os.fsync(fd)
            finally:
                os.close(fd)
            for rec, chunk in zip(records[-len(mine):], chunks, strict=True):
                fold.apply(state, rec)
                meta["lines"] += 1
                meta["offset"] += len(chunk)
            meta["last_seq"] = seq
            meta["tail"] = (bytes.fromhex(meta.get("tail", "")) + blob)[-32:].hex()
        return records

    def _repair_torn_tails(self) -> list[Draft]:
        """Under the lock: move an unterminated last line to quarantine/ and truncate."""
        drafts = []
        for name in STREAMS:
            p = self.path(f"{name}.jsonl")
            try:
                size = os.path.getsize(p)
            except FileNotFoundError:
                continue
            if size == 0:
                continue
            with open(p, "rb+") as fh:
                back = min(size, 1 << 20)
                fh.seek(size - back)
                chunk = fh.read(back)
                if chunk.endswith(b"\n"):
                    continue
                nl = chunk.rfind(b"\n")
                if nl < 0 and back < size:
                    continue  # a single line longer than 1 MiB: leave it for doctor
                keep = size - back + nl + 1
                torn = chunk[nl + 1:]
                os.makedirs(self.path("quarantine"), exist_ok=True)
                qname = f"{name}-{clock.now().strftime('%Y%m%dT%H%M%SZ')}-{os.urandom(3).hex()}.torn"
                atomic_write(self.path("quarantine", qname), torn)
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
            drafts.append(Draft("store.repaired", None,
                                {"file": f"{name}.jsonl", "bytes": len(torn), "offset": keep,
                                 "quarantine": f"quarantine/{qname}"}))
        return drafts

    # ----------------------------------------------------------------- helpers
    def iter_records(self, stream: str = "events"):
        """Yield every good record of ``stream`` in file order (for history and reports)."""
        try:
            fh = open(self.path(f"{stream}.jsonl"), "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError:
            return
        with fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break
                try:
                    yield decode(line[:-1])
                except ValueError:
                    continue

    def write_blob(self, data: bytes) -> str:
        """Store ``data`` content-addressed under ``blobs/``; returns the sha256 hex. Write-once."""
        import hashlib

        digest = hashlib.sha256(data).hexdigest()
        p = self.path("blobs", digest[:2], digest)
        if not os.path.exists(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)
            atomic_write(p, data)
        return digest


def order_key(rec: dict) -> tuple:
    """The order in which a union-merged log is folded: ``(seq, id)``. ``seq`` acts as a Lamport
    clock (a writer takes one above the largest it has seen, merged records included), so each
    clone's own records keep their order and a record written after a merge sorts after what the
    merge brought; ``id`` (random) breaks ties between clones deterministically. Store format 2
    replaces this with ``(hlc, node, id)``."""
    return (rec.get("seq", 0), str(rec.get("id") or ""))


def _unmarshal(raw: bytes):
    """``marshal.loads`` with the cyclic GC paused: a big snapshot is ~10^5 fresh containers and
    the collector would otherwise walk them several times while they are created (none are cyclic)."""
    import gc
    import marshal

    was = gc.isenabled()
    gc.disable()
    try:
        return marshal.loads(raw)
    finally:
        if was:
            gc.enable()


# Housekeeping registered by higher layers (``loopx.kernel.write`` registers the run reaper), so the
# storage layer never imports them: each is ``fn(state, now) -> list[Draft]`` run inside every
# transaction (unless ``reap=False``) before the plan.
HOUSEKEEPING: list = []


def register_housekeeping(fn) -> None:
    """Run ``fn(state, now) -> list[Draft]`` in every transaction before its plan (idempotent)."""
    if fn not in HOUSEKEEPING:
        HOUSEKEEPING.append(fn)
