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

from loopx import __version__
from loopx.config import env
from loopx.errors import LoopxError, NotConnected, ReadOnlyStore, StateError
from loopx.kernel.storage import cjson, clock, fold, ids
from loopx.kernel.storage.fs import DIRNAME, atomic_write, find_root, locked, stale_temporaries

FORMAT = 2                    # store format this loopx writes (format 1 stores are read, migrated on write)
STREAMS = ("events", "evidence")
SEGMENT_BYTES = 8 << 20       # the open segment (``events.jsonl``) is closed into ``events/`` past this size
EVENT_VERSION = 1
SNAPSHOT_VERSION = 3
SNAPSHOT_FILE = "snapshot.bin"
LIVE_FILE = "live.bin"
SNAPSHOT_EVERY = 200          # fold at most this many tail lines before refreshing the snapshot
BAD_SAMPLES = 20
_CRC_KEY = b',"crc":"'
_CONFLICT = (b"<<<<<<<", b"=======", b">>>>>>>", b"|||||||")
GITIGNORE = "# written by loopx: machine-local files\nlock\ncache/\nnode\nbackup/\nworktrees/\n"


def lock_timeout() -> float:
    """Seconds a writer waits for the lock (``LOOPX_LOCK_TIMEOUT``, default 10)."""
    try:
        return max(0.0, float(env("LOOPX_LOCK_TIMEOUT") or "10"))
    except ValueError:
        return 10.0


def encode(rec: dict) -> bytes:
    """One record as its line: compact JSON whose last field is the CRC of what precedes it."""
    body = cjson.dumps(rec)
    head = body[:-1].encode("utf-8")
    return head + b',"crc":"%08x"}\n' % zlib.crc32(head)


def decode(line: bytes, loads=None) -> dict:
    """Parse one line (without its newline). Raises ValueError naming what is wrong.
    ``loads`` is a JSON parser (default ``loopx.kernel.storage.cjson.loads``: no `json` import)."""
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
        loads = cjson.loads
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


_Draft = Draft  # for annotations inside Store, whose attribute ``Draft`` shadows the name


class Store:
    """One project's ``.loopx/`` directory. ``root`` is the path of ``.loopx`` itself."""

    # the line codec, for modules the store itself calls (migrate, chain) without importing it back
    decode = staticmethod(decode)
    encode = staticmethod(encode)
    Draft = Draft
    FORMAT = FORMAT

    def __init__(self, root: str) -> None:
        self.root = root
        self.project_dir = os.path.dirname(root)
        self._format: dict | None = None
        self.migrated: dict | None = None  # set by the write that migrated a format-1 store
        self._node: str | None = None  # this clone's node id, once read

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, project: str | None = None) -> Store:
        """The store of ``project`` (a directory) or the nearest one above the cwd.
        Raises NotConnected (exit 3) when there is none."""
        if project:
            root = os.path.join(os.path.abspath(project), DIRNAME)
            if not os.path.isdir(root):
                raise NotConnected(f"{os.path.abspath(project)} is not connected to loopx",
                                   "connect it first", details={"reason": "connect_project", "project": project})
        else:
            found = find_root(os.getcwd())
            if found is None:
                raise NotConnected("no .loopx/ here or in any parent directory",
                                   "connect the project from its root", details={"reason": "connect_here"})
            root = found
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

    def segment_path(self, stream: str, number: int) -> str:
        """The closed segment ``number`` (1-based) of ``stream``: ``<stream>/000001.jsonl``."""
        return os.path.join(self.root, stream, f"{number:06d}.jsonl")

    def closed_segments(self, stream: str) -> int:
        """How many closed segments ``stream`` has (they are numbered 1..n without gaps)."""
        n = 0
        try:
            names = os.listdir(self.path(stream))
        except (FileNotFoundError, NotADirectoryError):
            return 0
        have = {x for x in names if len(x) == 12 and x.endswith(".jsonl") and x[:6].isdigit()}
        while f"{n + 1:06d}.jsonl" in have:
            n += 1
        return n

    def stream_paths(self, stream: str) -> list[str]:
        """Every file of ``stream`` oldest first: the closed segments, then the open ``<stream>.jsonl``."""
        return [self.segment_path(stream, i) for i in range(1, self.closed_segments(stream) + 1)] + \
            [self.path(f"{stream}.jsonl")]

    def node_id(self, *, create: bool = False) -> str | None:
        """This clone's node id from ``.loopx/node``; with ``create`` (writers, under the lock) a
        missing or unreadable file gets a fresh id."""
        from loopx.kernel.storage import chain

        if self._node is not None:
            return self._node
        try:
            with open(self.path(chain.NODE_FILE), "rb") as fh:
                text = fh.read(64).decode("ascii", "replace").strip()
            if chain.valid_node(text):
                self._node = text
                return text
        except OSError:
            pass
        if not create:
            return None
        node = chain.new_node()
        atomic_write(self.path(chain.NODE_FILE), (node + "\n").encode())
        self._node = node
        return node

    def format_info(self) -> dict:
        """``format.json`` as a dict. Raises StateError when it is missing or unreadable."""
        if self._format is None:
            try:
                with open(self.path("format.json"), "rb") as fh:
                    raw = fh.read()
                # strict UTF-8 (a lone surrogate is unreadable, not a project id); a leading BOM is dropped
                info = cjson.loads(raw[3:].decode("utf-8") if raw.startswith(b"\xef\xbb\xbf") else raw.decode("utf-8"))
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

    def format_number(self) -> int:
        """``format.json``'s ``format``, read without importing ``json`` when the file is plain (the
        hot read path); anything unusual goes through ``format_info`` (and its errors)."""
        if self._format is not None:
            return self._format["format"]
        try:
            with open(self.path("format.json"), "rb") as fh:
                raw = fh.read(4096)
        except OSError:
            return self.format_info()["format"]
        key = raw.find(b'"format"')
        if key >= 0 and raw.count(b'"format"') == 1 and len(raw) < 4096:
            rest = raw[key + 8:].lstrip(b" \t\r\n")
            if rest.startswith(b":"):
                rest = rest[1:].lstrip(b" \t\r\n")
                digits = len(rest) - len(rest.lstrip(b"0123456789"))
                if 0 < digits < 6 and rest[digits:digits + 1] in (b",", b"}", b" ", b"\n", b"\r", b"\t"):
                    return int(rest[:digits])
        return self.format_info()["format"]

    def read_only_reason(self, state: dict | None = None) -> str | None:
        """Why this store must not be written now, or None."""
        fmt = self.format_number()
        if fmt > FORMAT:
            return (f"this store has format {fmt}; this loopx {__version__} understands format {FORMAT}"
                    " (upgrade loopx: `loopx update plan`)")
        if state is not None:
            for name, meta in state["meta"]["files"].items():
                if meta.get("conflict"):
                    return f"{name}.jsonl contains git conflict markers (resolve the merge, then `loopx doctor`)"
        return None

    # ----------------------------------------------------------------- reading
    def load(self, *, save_snapshot: bool | str = True, view: str = "full") -> dict:
        """The folded state (a plain dict, see loopx.kernel.storage.fold). Lock-free.
        ``state["meta"]`` reports bad lines, torn tails, unknown types and the read-only reason.

        ``view="live"`` may return the smaller live view instead (see ``fold.live_view``: no closed
        todos, decided gates, old runs or old evidence, plus ``closed`` counts per goal), which is
        what ``status`` needs; it falls back to the full state whenever the live snapshot is missing,
        stale by more than SNAPSHOT_EVERY lines, or its tail touches a record the view left out. A
        live view's ``todos``/``gates``/``runs``/``evidence`` are ``fold.Partial``: a lookup of an id
        they do not hold raises ``fold.NotInLiveView``; read through ``Store.read`` to get the full
        state's answer then (docs/architecture.md, "Lookups on the live view")."""
        self.format_number()
        if view == "live":
            live = self._load_live()
            if live is not None:
                return live
            if save_snapshot:
                save_snapshot = "refresh"  # so the next live read finds a view that fits
        state, offsets = self._load_snapshot()
        folded = 0
        torn = {}
        for name in STREAMS:
            n, tail = self._fold_stream(state, name, offsets.get(name, 0))
            folded += n
            if tail:
                torn[name] = tail
        if any(m.get("unordered") for m in state["meta"]["files"].values()):
            state, folded = self._fold_merged(state), SNAPSHOT_EVERY  # saved: the next read folds the tail only
        state["meta"]["torn"] = torn
        if save_snapshot == "refresh" or (save_snapshot and folded >= SNAPSHOT_EVERY):
            self._save_snapshot(state)
        state["meta"]["read_only"] = self.read_only_reason(state)
        state["meta"]["self_node"] = self.node_id()  # whose claims and runs are "mine" (kernel.storage.machines)
        return state

    def read(self, fn, state: dict | None = None):
        """``fn(state)`` on ``state`` (default: the live view, ``load(view="live")``), and once more
        on the full state when it looks up a record the view left out (``fold.NotInLiveView``): the
        reader's rule of the live view, as ``transact`` is the writer's. Returns what ``fn``
        returns; a NotInLiveView never escapes (on the full state every collection is a plain
        dict). Raises what ``load`` and ``fn`` raise."""
        if state is None:
            state = self.load(view="live")
        if fold.is_live(state):
            try:
                return fn(state)
            except fold.NotInLiveView:
                state = self.load()
        return fn(state)

    def _fold_stream(self, state: dict, name: str, offset: int, collect: list | None = None) -> tuple[int, int]:
        """Fold ``name`` from where the state stopped: ``offset`` in the file that was open when the
        state was folded (closed since if a segment numbered past ``meta["segments"]`` exists), then
        every later segment and the open file. Returns (lines folded, torn-tail bytes). With ``collect``
        (a list), records are appended to it instead of folded (``_fold_merged`` sorts them)."""
        meta = state["meta"]["files"][name]
        total = 0
        while os.path.exists(self.segment_path(name, meta.get("segments", 0) + 1)):
            k = meta.get("segments", 0) + 1
            n, _ = self._fold_file(state, name, offset, self.segment_path(name, k), collect)
            total += n
            meta["segments"] = k
            meta["offset"], meta["tail"], offset = 0, "", 0
        n, torn = self._fold_file(state, name, offset, None, collect)
        return total + n, torn

    def _fold_file(self, state: dict, name: str, offset: int, path: str | None = None,
                   collect: list | None = None) -> tuple[int, int]:
        """Fold ``name`` (the open file, or ``path``) from byte ``offset``; return (lines folded,
        torn-tail bytes). A record whose ``seq`` is not above the last one marks the stream
        ``unordered`` (a union-merged log, or records imported by ``loopx sync``; the caller folds
        again through ``_fold_merged``, which sorts by ``order_key`` and drops duplicate ids). With
        ``collect`` the records are appended to that list instead of folded."""
        meta = state["meta"]["files"][name]
        try:
            with open(path or self.path(f"{name}.jsonl"), "rb") as fh:
                if path is None:
                    meta["mtime"] = os.fstat(fh.fileno()).st_mtime_ns
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
        loads = cjson.loads
        pos = offset
        count = 0
        apply = fold.apply
        ordered = collect is not None
        if collect is not None:
            sink = collect
            apply = lambda state, rec: sink.append(rec)  # noqa: E731 - sorted and folded by _fold_merged
        heads: dict = {}
        top = None
        last_hlc = meta.get("hlc_top")
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
            node = rec.get("node")
            if node is not None:
                hlc = rec["hlc"]
                if last_hlc is not None and hlc <= last_hlc and not ordered:
                    meta["unordered"] = True  # records imported by `loopx sync` behind this clone's own
                if last_hlc is None or hlc > last_hlc:
                    last_hlc = hlc
                heads[node] = (hlc, seq, line)
                if top is None or hlc > top:
                    top = hlc
            apply(state, rec)
        if heads and top is not None:  # top is set with the first head
            _note_heads(state["meta"], name, heads, top)
            meta["hlc_top"] = last_hlc
        meta["offset"] = pos
        meta["tail"] = data[max(0, end - 32):end].hex() if end else meta.get("tail", "")
        return count, torn

    def _fold_merged(self, seen: dict) -> dict:
        """The whole state again, each stream (closed segments and open file) folded in
        ``order_key`` order without duplicate ids (a union-merged log or records imported by
        ``loopx sync``: see the module docstring). ``seen`` is the state the plain fold made."""
        state = fold.empty()
        for name in STREAMS:
            collected: list[dict] = []
            self._fold_stream(state, name, 0, collected)
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

    def _load_live(self) -> dict | None:
        state, offsets = self._load_snapshot(LIVE_FILE)
        checkpoint = False
        if not offsets:  # no usable cache (a fresh clone, a deleted cache): start from a checkpoint
            state, offsets = self._load_checkpoint()
            if not offsets:
                return None
            checkpoint = True
        malformed = state["meta"].get("malformed", 0)
        torn = {}
        for name in STREAMS:
            n, tail = self._fold_stream(state, name, offsets[name])
            if (n >= SNAPSHOT_EVERY and not checkpoint) or state["meta"].get("malformed", 0) != malformed \
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
        state["meta"]["self_node"] = self.node_id()  # whose claims and runs are "mine" (kernel.storage.machines)
        if checkpoint:
            self._save_snapshot(state, full=False)
        return fold.guarded(state)

    def _load_checkpoint(self) -> tuple[dict, dict]:
        """The live view saved when the newest closed events segment was closed
        (``events/NNNNNN.live.json``), if it still matches the files; else (empty, {})."""
        k = self.closed_segments("events")
        path = self.segment_path("events", k)[:-len(".jsonl")] + ".live.json" if k else None
        if path is None or not os.path.exists(path):
            return fold.empty(), {}
        try:
            loads = cjson.loads
            with open(path, "rb") as fh:
                snap = loads(fh.read())
            if not isinstance(snap, dict) or snap.get("fold") != fold.FOLD_VERSION:
                raise ValueError("old checkpoint")
            return snap["state"], self._check_offsets(snap["state"])
        except (OSError, ValueError, TypeError, KeyError):
            return fold.empty(), {}

    def _write_checkpoint(self, state: dict, number: int) -> None:
        """Under the lock, right after closing events segment ``number``: keep the live view next to
        it, so a clone without a cache starts from there instead of folding the whole history.
        Derived data like the cache (rebuilt by any full read); written once, never changed."""
        import json

        view = fold.live_view({**state, "meta": {k: v for k, v in state["meta"].items()
                                                 if k not in ("torn", "read_only")}}, clock.now_iso())
        body = json.dumps({"fold": fold.FOLD_VERSION, "state": view}, separators=(",", ":"), sort_keys=True)
        try:
            atomic_write(self.segment_path("events", number)[:-len(".jsonl")] + ".live.json", body.encode())
        except OSError:
            pass

    def _check_offsets(self, state: dict) -> dict:
        """{stream: offset} when every stream still holds the bytes ``state`` recorded before its
        offset (in the segment that open file became, if it was closed since). Raises ValueError."""
        offsets = {}
        for name in STREAMS:
            meta = state["meta"]["files"][name]
            off = meta["offset"]
            tail = bytes.fromhex(meta.get("tail", ""))
            closed = self.segment_path(name, meta.get("segments", 0) + 1)
            is_open = not os.path.exists(closed)
            where = self.path(f"{name}.jsonl") if is_open else closed
            with open(where, "rb") as fh:
                if is_open and meta.get("mtime"):
                    st = os.fstat(fh.fileno())
                    if st.st_mtime_ns != meta["mtime"] and st.st_size == off:
                        # changed since the cache saw it, yet nothing was appended: edited in place
                        raise ValueError("file rewritten under the snapshot")
                if off:
                    fh.seek(max(0, off - len(tail)))
                    if fh.read(len(tail)) != tail:
                        raise ValueError("file changed under the snapshot")
                elif tail:
                    raise ValueError("bad snapshot")
            offsets[name] = off
        return offsets

    def _load_snapshot(self, filename: str = SNAPSHOT_FILE) -> tuple[dict, dict]:
        try:
            with open(self.path("cache", filename), "rb") as fh:
                raw = fh.read()  # one read: marshal.load(fh) reads piecemeal, several times slower
            snap = _unmarshal(raw)
            if (not isinstance(snap, dict) or snap.get("v") != SNAPSHOT_VERSION
                    or snap.get("fold") != fold.FOLD_VERSION):
                raise ValueError("old snapshot")
            return snap["state"], self._check_offsets(snap["state"])
        except (OSError, ValueError, EOFError, TypeError, KeyError):
            return fold.empty(), {}

    def _save_snapshot(self, state: dict, *, full: bool = True) -> None:
        """Write the snapshots atomically: the full state (unless ``full`` is False or ``state`` is
        itself a live view) and the live view derived from it. The cache is disposable, so
        failures are ignored."""
        import marshal
        meta = state["meta"]
        is_live = "closed" in state
        saved = {k: v for k, v in meta.items() if k not in ("torn", "read_only")}
        body = dict(state)
        body["meta"] = saved
        try:
            os.makedirs(self.path("cache"), exist_ok=True)
            if full and not is_live:
                meta["snap_lines"] = saved["snap_lines"] = sum(m["lines"] for m in meta["files"].values())
                data = marshal.dumps({"v": SNAPSHOT_VERSION, "fold": fold.FOLD_VERSION, "state": body})
                atomic_write(self.path("cache", SNAPSHOT_FILE), data, sync=False)
                self._sweep_cache()
            view = fold.live_view(body, clock.now_iso())
            live = marshal.dumps({"v": SNAPSHOT_VERSION, "fold": fold.FOLD_VERSION, "state": view})
            atomic_write(self.path("cache", LIVE_FILE), live, sync=False)
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
    def lock(self, timeout: float | None = None) -> locked:
        """``with store.lock():`` holds the store's OS lock. Raises StoreBusy (exit 4) after
        ``timeout`` seconds. The OS drops the lock when the holder dies, so a killed writer never
        blocks others."""
        return locked(self.path("lock"), lock_timeout() if timeout is None else timeout)

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
            if self.format_number() < FORMAT and not self.read_only_reason():
                from loopx.kernel.storage import migrate

                done = migrate.run(self)
                if done:
                    self.migrated = done
                    repairs = list(repairs) + [Draft("store.migrated", None, {
                        "from": 1, "to": FORMAT, "records": done["records"], "legacy_node": done["node"],
                        "backup": os.path.relpath(done["backup"], self.root)})]
            # the live view when it is current (a write then reads and rewrites only what is open),
            # else the full state; see docs/architecture.md "Flat cost"
            state = self._load_live() if self.format_number() >= FORMAT else None
            live = state is not None
            if state is None:
                state = self.load(save_snapshot=False)
            reason = state["meta"]["read_only"]
            if reason:
                raise ReadOnlyStore(f"the store is read-only: {reason}",
                                    "nothing was written; check the store", details={"reason": "store_read_only"})
            now = clock.now()
            malformed = state["meta"].get("malformed", 0)
            if reap:
                for housekeeping in HOUSEKEEPING:
                    repairs = list(repairs) + list(housekeeping(state, now))
            chain = state["meta"].get("chain")
            if chain and (len(chain) > 1 or self.node_id() not in chain):  # another machine's records
                from loopx.kernel.storage import machines

                named = machines.registration(state, self.node_id(), (self.migrated or {}).get("node"))
                if named is not None:
                    repairs = list(repairs) + [Draft("node.registered", None, named)]
            records = self._append(state, list(repairs), now, actor) if repairs else []
            if live:
                ids.HIDDEN = state.get("hidden", 0)
                try:
                    drafts = list(plan(state, now) or [])
                except (LoopxError, KeyError):
                    # the plan may need a record the live view left out (a done todo, an old
                    # run): a lookup of it raised fold.NotInLiveView (a KeyError), or the plan
                    # refused; ask again on the full state, which also gives the real refusal
                    ids.HIDDEN = 0
                    state, live = self.load(save_snapshot=False), False
                    drafts = list(plan(state, now) or [])
                finally:
                    ids.HIDDEN = 0
            else:
                drafts = list(plan(state, now) or [])
            records += self._append(state, drafts, now, actor)
            if live and state["meta"].get("malformed", 0) != malformed:
                state, live = self.load(save_snapshot=False), False  # a record touched what the view left out
            rotated = self._rotate(state)
            if live:
                self._save_snapshot(state, full=False)
            else:
                lines = sum(m["lines"] for m in state["meta"]["files"].values())
                self._save_snapshot(state, full=rotated or lines - state["meta"].get("snap_lines", 0) >= SNAPSHOT_EVERY)
        if records:  # at most daily, the chain heads are anchored (one stat when not due; never raises)
            from loopx.kernel.storage import anchors

            anchors.maybe_daily(self)
        return records, state

    def _rotate(self, state: dict) -> bool:
        """Under the lock: close each open file grown past SEGMENT_BYTES into ``<stream>/NNNNNN.jsonl``
        (renamed whole, never rewritten) and start an empty open file. True when one was closed."""
        done = False
        for name in STREAMS:
            meta = state["meta"]["files"][name]
            if meta["offset"] < SEGMENT_BYTES:
                continue
            k = meta.get("segments", 0) + 1
            os.makedirs(self.path(name), exist_ok=True)
            dest = self.segment_path(name, k)
            if os.path.exists(dest):
                continue  # never overwrite a closed segment; doctor reports the odd numbering
            os.rename(self.path(f"{name}.jsonl"), dest)
            os.close(os.open(self.path(f"{name}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            meta["segments"], meta["offset"], meta["tail"], meta["mtime"] = k, 0, "", None
            done = True
            if name == "events":
                self._write_checkpoint(state, k)
        return done

    def _append(self, state: dict, drafts: list[_Draft], now, actor: str) -> list[dict]:
        from loopx.kernel.storage.chain import next_hlc, sha256, wall_ms
        from loopx.kernel.storage.redact import redact

        for d in drafts:  # what the event table refuses never reaches a file (kernel.storage.events)
            fold.check_data(d.type, clean(d.data))
        ts = clock.iso(now)
        wall = wall_ms(now)
        node = self.node_id(create=True)
        state["meta"]["self_node"] = node
        top = state["meta"]
        chain = top.setdefault("chain", {})
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
                head = chain.get(node)
                hlc = next_hlc(top.get("hlc"), wall)
                rec = {"v": EVENT_VERSION, "seq": seq, "id": ids.event_id(), "ts": ts, "node": node, "hlc": hlc,
                       "prev": head["hash"] if head else None, "actor": actor,
                       "type": d.type, "goal": d.goal, "data": redact(clean(d.data))}
                line = encode(rec)
                chunks.append(line)
                records.append(rec)
                top["hlc"] = meta["hlc_top"] = hlc
                chain[node] = {"hash": sha256(line[:-1]).hexdigest(), "hlc": hlc, "seq": seq, "stream": stream}
            blob = b"".join(chunks)
            fd = os.open(self.path(f"{stream}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, blob)
                while written < len(blob):  # a short write on a regular file is rare; finish it
                    written += os.write(fd, blob[written:])
                os.fsync(fd)
                meta["mtime"] = os.fstat(fd).st_mtime_ns
            finally:
                os.close(fd)
            for rec, chunk in zip(records[-len(mine):], chunks, strict=True):
                fold.apply(state, rec)
                meta["lines"] += 1
                meta["offset"] += len(chunk)
            meta["last_seq"] = seq
            meta["tail"] = (bytes.fromhex(meta.get("tail", "")) + blob)[-32:].hex()
        return records

    def _repair_torn_tails(self) -> list[_Draft]:
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
                fh.seek(size - 1)
                if fh.read(1) == b"\n":
                    continue  # the common case: one byte read, whatever the file's size
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
    def iter_lines(self, stream: str = "events"):
        """Yield every complete line of ``stream`` (bytes, without its newline) in file order,
        streaming the closed segments and then the open file; an unterminated last line is left out."""
        for path in self.stream_paths(stream):
            try:
                fh = open(path, "rb")  # noqa: SIM115 - closed by the with below
            except FileNotFoundError:
                continue
            with fh:
                for line in fh:
                    if not line.endswith(b"\n"):
                        break
                    yield line[:-1]

    def iter_records(self, stream: str = "events"):
        """Yield every good record of ``stream`` in file order (for history, reports and doctor)."""
        loads = cjson.loads
        for body in self.iter_lines(stream):
            try:
                yield decode(body, loads)
            except ValueError:
                continue

    def iter_records_newest(self, stream: str = "events", block: int = 1 << 16, match: tuple[bytes, ...] = ()):
        """Yield every good record of ``stream`` newest first, reading the files backwards in
        ``block``-byte pieces (``history --limit N`` reads only the end of the log). With ``match``,
        only lines holding one of those byte strings are decoded (a type such as ``b"run."``: loopx
        writes JSON without escaping ASCII, so only a hand-edited line could hide a type from it)."""
        loads = cjson.loads
        for path in reversed(self.stream_paths(stream)):
            try:
                fh = open(path, "rb")  # noqa: SIM115 - closed by the with below
            except FileNotFoundError:
                continue
            with fh:
                end = fh.seek(0, os.SEEK_END)
                rest = b""
                first = True
                while end > 0:
                    start = max(0, end - block)
                    fh.seek(start)
                    chunk = fh.read(end - start) + rest
                    end = start
                    lines = chunk.split(b"\n")
                    rest = lines[0] if start > 0 else b""
                    body = lines[1:] if start > 0 else lines
                    if first:  # the part after the last newline is a torn tail (or nothing)
                        body = body[:-1]
                        first = False
                    for line in reversed(body):
                        if match and not any(m in line for m in match):
                            continue
                        if line.strip():
                            try:
                                yield decode(line, loads)
                            except ValueError:
                                continue
                if rest.strip() and (not match or any(m in rest for m in match)):
                    try:
                        yield decode(rest, loads)
                    except ValueError:
                        pass

    def write_blob(self, data: bytes) -> str:
        """Store ``data`` content-addressed under ``blobs/``; returns the sha256 hex. Write-once."""
        import hashlib

        digest = hashlib.sha256(data).hexdigest()
        p = self.path("blobs", digest[:2], digest)
        if not os.path.exists(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)
            atomic_write(p, data)
        return digest


def _note_heads(meta: dict, stream: str, heads: dict, top: list) -> None:
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
