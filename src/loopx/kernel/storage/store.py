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

The store's parts, each in its own module: ``layout`` (every path), ``codec`` (a record as its
line: encode, decode, CRC, the chain fields), ``logfold`` (folding the files from an offset,
the merged order), ``caches`` (the snapshot, the live view, the checkpoints), ``fs`` (the atomic
write and the lock). ``Store`` holds one ``.loopx/``: opening and creating it, its format and node
id, the read-only rule, ``load``/``read``, ``transact`` (lock, repair, migrate, housekeeping,
plan, append, rotate), iteration over the lines and the blobs.
"""

from __future__ import annotations

import os

from loopx import __version__
from loopx.config import seconds
from loopx.errors import LoopxError, NotConnected, ReadOnlyStore, StateError
from loopx.kernel.storage import caches, cjson, clock, fold, ids, layout, logfold
from loopx.kernel.storage.caches import SNAPSHOT_EVERY
from loopx.kernel.storage.codec import clean, decode, encode, record
from loopx.kernel.storage.fs import (
    MOST_SMALL,
    append_fd,
    atomic_write,
    find_root,
    locked,
    open_file,
    read_bytes,
)
from loopx.kernel.storage.layout import DIRNAME, STREAMS

FORMAT = 2                    # store format this loopx writes (format 1 stores are read, migrated on write)
SEGMENT_BYTES = 8 << 20       # the open segment (``events.jsonl``) is closed into ``events/`` past this size
GITIGNORE = "# written by loopx: machine-local files\n" + "".join(x + "\n" for x in layout.LOCAL)


def lock_timeout() -> float:
    """Seconds a writer waits for the lock (``LOOPX_LOCK_TIMEOUT``, default 10; UsageError when malformed)."""
    return seconds("LOOPX_LOCK_TIMEOUT")


class Draft:
    """An event to append: ``type`` (noun.past_tense), ``goal`` id or None, ``data`` dict, ``stream``."""

    __slots__ = ("type", "goal", "data", "stream")

    def __init__(self, type: str, goal: str | None, data: dict, stream: str = "events") -> None:
        self.type, self.goal, self.data, self.stream = type, goal, data, stream


_Draft = Draft  # for annotations inside Store, whose attribute ``Draft`` shadows the name


class Store:
    """One project's ``.loopx/`` directory. ``root`` is the path of ``.loopx`` itself."""

    # the line codec (codec.py), for modules the store itself calls (migrate, chain) without importing it back
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
        fpath = store.path(layout.FORMAT)
        if not os.path.exists(fpath):
            info = {"format": FORMAT, "created_by": f"loopx {__version__}",
                    "project_id": "p-" + os.urandom(6).hex(), "created_at": clock.now_iso()}
            import json

            atomic_write(fpath, (json.dumps(info, indent=2) + "\n").encode())
            created = True
        for sub in (layout.BLOBS, layout.CACHE, layout.QUARANTINE):
            os.makedirs(store.path(sub), exist_ok=True)
        for name in (*map(layout.open_log, STREAMS), layout.LOCK):
            p = store.path(name)
            if not os.path.exists(p):
                os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
        gi = store.path(layout.GITIGNORE)
        if not os.path.exists(gi):
            atomic_write(gi, GITIGNORE.encode())
        store.format_info()
        return store, created

    def path(self, *parts: str) -> str:
        """``parts`` (names from ``layout``, or path pieces) joined under ``.loopx/``."""
        return os.path.join(self.root, *parts)

    def segment_path(self, stream: str, number: int) -> str:
        """The closed segment ``number`` (1-based) of ``stream``: ``<stream>/000001.jsonl``."""
        return os.path.join(self.root, layout.segment(stream, number))

    def closed_segments(self, stream: str) -> int:
        """How many closed segments ``stream`` has (they are numbered 1..n without gaps)."""
        n = 0
        try:
            names = os.listdir(self.path(stream))
        except (FileNotFoundError, NotADirectoryError):
            return 0
        have = {x for x in names if layout.is_segment_name(x)}
        while layout.segment_name(n + 1) in have:
            n += 1
        return n

    def stream_paths(self, stream: str) -> list[str]:
        """Every file of ``stream`` oldest first: the closed segments, then the open ``<stream>.jsonl``."""
        return [self.segment_path(stream, i) for i in range(1, self.closed_segments(stream) + 1)] + \
            [self.path(layout.open_log(stream))]

    def node_id(self, *, create: bool = False) -> str | None:
        """This clone's node id from ``.loopx/node``, or None when there is none: the file missing or
        holding no valid id (hand-edited; a FIFO or a device there never held one). With ``create``
        (writers, under the lock) such a clone gets a fresh id. Raises StateError when the file is
        there but cannot be read (its permissions, an I/O error): a new id then would hand this
        clone's open runs and claims to a node that is no longer here, as if another machine's."""
        from loopx.kernel.storage import chain

        if self._node is not None:
            return self._node
        try:
            text = read_bytes(self.path(layout.NODE), 64).decode("ascii", "replace").strip()
            if chain.valid_node(text):
                self._node = text
                return text
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != 22:  # EINVAL: not a regular file (fs.read_bytes), which holds no id
                raise StateError(f"{self.path(layout.NODE)} cannot be read: {exc.strerror or exc}",
                                 "make it readable again (it names this clone; deleting it gives the clone "
                                 "a new node id, and its open runs and claims stay with the old one)",
                                 details={"reason": "node_unreadable"}) from None
        if not create:
            return None
        node = chain.new_node()
        atomic_write(self.path(layout.NODE), (node + "\n").encode(), follow=False)  # loopx's own: a link there is replaced
        self._node = node
        return node

    def format_info(self) -> dict:
        """``format.json`` as a dict. Raises StateError when it is missing or unreadable."""
        if self._format is None:
            try:
                raw = read_bytes(self.path(layout.FORMAT), most=MOST_SMALL)
                # strict UTF-8 (a lone surrogate is unreadable, not a project id); a leading BOM is dropped
                info = cjson.loads(raw[3:].decode("utf-8") if raw.startswith(b"\xef\xbb\xbf") else raw.decode("utf-8"))
                if not isinstance(info, dict) or not isinstance(info.get("format"), int):
                    raise ValueError("no integer 'format' field")
            except FileNotFoundError:
                raise StateError(f"{self.path(layout.FORMAT)} is missing",
                                 "connect again to recreate it (events are kept)", details={"reason": "format_missing"}) from None
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc  # the path is said once
                raise StateError(f"{self.path(layout.FORMAT)} is unreadable: {why}",
                                 "restore it from git or check the store", details={"reason": "format_unreadable"}) from None
            self._format = info
        return self._format

    def format_number(self) -> int:
        """``format.json``'s ``format``, read without importing ``json`` when the file is plain (the
        hot read path); anything unusual goes through ``format_info`` (and its errors)."""
        if self._format is not None:
            return self._format["format"]
        try:
            raw = read_bytes(self.path(layout.FORMAT), 4096)
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
            live = caches.load_live(self)
            if live is not None:
                return live
            if save_snapshot:
                save_snapshot = "refresh"  # so the next live read finds a view that fits
        state, offsets = caches.load_snapshot(self)
        folded = 0
        torn = {}
        for name in STREAMS:
            n, tail = logfold.fold_stream(self, state, name, offsets.get(name, 0))
            folded += n
            if tail:
                torn[name] = tail
        if any(m.get("unordered") for m in state["meta"]["files"].values()):
            state, folded = logfold.fold_merged(self), SNAPSHOT_EVERY  # saved: the next read folds the tail only
        state["meta"]["torn"] = torn
        if save_snapshot == "refresh" or (save_snapshot and folded >= SNAPSHOT_EVERY):
            caches.save_snapshot(self, state)
        state["meta"]["read_only"] = self.read_only_reason(state)
        state["meta"]["self_node"] = self.node_id()  # whose claims and runs are "mine" (kernel.storage.machines)
        return state

    def read(self, fn, state: dict | None = None, *, as_saved: bool = True):
        """``fn(state)`` on ``state`` (default: the live view, ``load(view="live")``), and once more
        on the full state when it looks up a record the view left out (``fold.NotInLiveView``): the
        reader's rule of the live view, as ``transact`` is the writer's. A live view with lines
        folded past it is pruned first (``caches.as_saved``: what it lists is what a saved view
        lists); ``as_saved=False`` for a reader whose answer does not depend on what was pruned
        (the pre-tool guard: the full state's answer either way, tests/test_live_property.py).
        Returns what ``fn`` returns; a NotInLiveView never escapes (on the full state every
        collection is a plain dict). Raises what ``load`` and ``fn`` raise."""
        if state is None:
            state = self.load(view="live")
        if fold.is_live(state):
            if as_saved:
                state = caches.as_saved(state)
            try:
                return fn(state)
            except fold.NotInLiveView:
                state = self.load()
        return fn(state)

    # ----------------------------------------------------------------- writing
    def lock(self, timeout: float | None = None) -> locked:
        """``with store.lock():`` holds the store's OS lock. Raises StoreBusy (exit 4) after
        ``timeout`` seconds. The OS drops the lock when the holder dies, so a killed writer never
        blocks others."""
        return locked(self.path(layout.LOCK), lock_timeout() if timeout is None else timeout)

    def transact(self, plan, *, actor: str, reap: bool = True, seen: dict | None = None) -> tuple[list[dict], dict]:
        """Run one compare-and-append transaction.

        ``plan(state, now)`` sees the state folded under the lock and returns a list of Draft
        (or raises a LoopxError to refuse). Evidence drafts are written before control events.
        Before the plan runs, the writer does the store's housekeeping and writes it even when
        the plan then refuses: torn tails are repaired and, with ``reap``, the registered housekeeping
        runs (``register_housekeeping``: the write layer's run reaper closes runs whose lease ended as
        failed and releases their claims), so the plan sees the state after that.
        ``seen``: a live view this process read moments ago (``load(view="live")``) and left
        unchanged; it stands for the state under the lock when no byte was appended since
        (``caches.still_current``), which saves reading the view a second time (``next``,
        ``turn finish``). The transaction then changes and saves it.
        Returns (records written, state after). Raises StoreBusy, ReadOnlyStore, StateError.
        """
        with self.lock():
            repairs = self.repair_torn_tails() + self._migrate()
            # the live view when it is current (a write then reads and rewrites only what is open),
            # else the full state; see docs/architecture.md "Flat cost"
            state = None
            if self.format_number() >= FORMAT:
                if seen is not None and not repairs and caches.still_current(self, seen):
                    state = seen
                    state["meta"]["read_only"] = self.read_only_reason(state)
                else:
                    state = caches.load_live(self)
            live = state is not None
            if state is None:
                state = self.load(save_snapshot=False)
            reason = state["meta"]["read_only"]
            if reason:
                raise ReadOnlyStore(f"the store is read-only: {reason}",
                                    "nothing was written; check the store", details={"reason": "store_read_only"})
            now = clock.now()
            malformed = state["meta"].get("malformed", 0)
            repairs += self._housekeeping(state, now, reap)
            records = self._append(state, list(repairs), now, actor) if repairs else []
            state, live, drafts = self._plan(plan, state, live, now)
            records += self._append(state, drafts, now, actor)
            if live and state["meta"].get("malformed", 0) != malformed:
                state, live = self.load(save_snapshot=False), False  # a record touched what the view left out
            rotated = self._rotate(state)
            if live:
                caches.after_write(self, state, len(records), rotated)
            else:
                lines = sum(m["lines"] for m in state["meta"]["files"].values())
                caches.save_snapshot(self, state, full=rotated or lines - state["meta"].get("snap_lines", 0) >= SNAPSHOT_EVERY)
                if records:
                    caches.keep_heads(self, state)
        if records and self._anchor_due():  # at most daily, the chain heads are anchored (never raises)
            from loopx.kernel.storage import anchors

            anchors.maybe_daily(self)
        return records, state

    def _anchor_due(self) -> bool:
        """``anchors.maybe_daily``'s one ``stat``, made before importing that module (and the git
        adapter behind it) on every write: False only when the data folder's anchors file of this
        project is younger than a day; maybe_daily decides again in any other case."""
        try:
            pid = self.format_info().get("project_id")
            if not pid:
                return False
            from loopx.config import data_home

            age = clock.now().timestamp() - os.stat(os.path.join(data_home(), layout.anchors(pid))).st_mtime
        except Exception:  # noqa: BLE001 - missing, unreadable, a bad clock: let maybe_daily decide
            return True
        return age >= 86400.0  # anchors.DAY

    def _migrate(self) -> list[_Draft]:
        """Under the lock: migrate a format-1 store (writable, older format) to this format; the
        ``store.migrated`` draft to record it, or []."""
        if self.format_number() >= FORMAT or self.read_only_reason():
            return []
        from loopx.kernel.storage import migrate

        done = migrate.run(self)
        if not done:
            return []
        self.migrated = done
        return [Draft("store.migrated", None, {
            "from": 1, "to": FORMAT, "records": done["records"], "legacy_node": done["node"],
            "backup": os.path.relpath(done["backup"], self.root)})]

    def _housekeeping(self, state: dict, now, reap: bool) -> list[_Draft]:
        """Under the lock, before the plan: the registered housekeeping (with ``reap``) and this
        machine's ``node.registered`` once the store holds another machine's records."""
        drafts: list[_Draft] = []
        if reap:
            for housekeeping in HOUSEKEEPING:
                drafts += list(housekeeping(state, now))
        chain = state["meta"].get("chain")
        if chain and (len(chain) > 1 or self.node_id() not in chain):  # another machine's records
            from loopx.kernel.storage import machines

            named = machines.registration(state, self.node_id(), (self.migrated or {}).get("node"))
            if named is not None:
                drafts.append(Draft("node.registered", None, named))
        return drafts

    def _plan(self, plan, state: dict, live: bool, now) -> tuple[dict, bool, list[_Draft]]:
        """(state, live, drafts): ``plan`` asked on the live view, and again on the full state when
        it needs a record the view left out (a lookup raised fold.NotInLiveView, a KeyError) or
        refused (the full state gives the real refusal)."""
        if not live:
            return state, live, list(plan(state, now) or [])
        ids.HIDDEN = state.get("hidden", 0)
        try:
            return state, live, list(plan(state, now) or [])
        except (LoopxError, KeyError):
            ids.HIDDEN = 0
            state = self.load(save_snapshot=False)
            return state, False, list(plan(state, now) or [])
        finally:
            ids.HIDDEN = 0

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
            os.rename(self.path(layout.open_log(name)), dest)
            os.close(os.open(self.path(layout.open_log(name)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            meta["segments"], meta["offset"], meta["tail"], meta["mtime"] = k, 0, "", None
            done = True
            if name == "events":
                caches.write_checkpoint(self, state, k)
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
                rec = record(seq=seq, rid=ids.event_id(), ts=ts, node=node, hlc=hlc,
                             prev=head["hash"] if head else None, actor=actor,
                             type=d.type, goal=d.goal, data=redact(clean(d.data)))
                line = encode(rec)
                chunks.append(line)
                records.append(rec)
                top["hlc"] = meta["hlc_top"] = hlc
                chain[node] = {"hash": sha256(line[:-1]).hexdigest(), "hlc": hlc, "seq": seq, "stream": stream}
            blob = b"".join(chunks)
            fd = append_fd(self.path(layout.open_log(stream)))
            try:
                written = os.write(fd, blob)
                while written < len(blob):  # a short write on a regular file is rare; finish it
                    written += os.write(fd, blob[written:])
                os.fsync(fd)
                st = os.fstat(fd)  # as logfold records them on a read (caches.still_current compares all three)
                meta["mtime"], meta["ctime"], meta["ino"] = st.st_mtime_ns, st.st_ctime_ns, st.st_ino
            finally:
                os.close(fd)
            for rec, chunk in zip(records[-len(mine):], chunks, strict=True):
                fold.apply(state, rec)
                meta["lines"] += 1
                meta["offset"] += len(chunk)
            meta["last_seq"] = seq
            meta["tail"] = (bytes.fromhex(meta.get("tail", "")) + blob)[-32:].hex()
        return records

    def repair_torn_tails(self) -> list[_Draft]:
        """Under the lock (every transaction, and ``doctor --fix``): move an unterminated last line
        of each open log to quarantine/ and truncate it; the ``store.repaired`` drafts to record."""
        drafts = []
        for name in STREAMS:
            p = self.path(layout.open_log(name))
            try:
                size = os.path.getsize(p)
            except FileNotFoundError:
                continue
            if size == 0:
                continue
            with open_file(p, "rb+") as fh:
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
                os.makedirs(self.path(layout.QUARANTINE), exist_ok=True)
                qname = f"{name}-{clock.now().strftime('%Y%m%dT%H%M%SZ')}-{os.urandom(3).hex()}.torn"
                atomic_write(self.path(layout.quarantined(qname)), torn)
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
            drafts.append(Draft("store.repaired", None,
                                {"file": layout.open_log(name), "bytes": len(torn), "offset": keep,
                                 "quarantine": layout.quarantined(qname)}))
        return drafts

    # ----------------------------------------------------------------- helpers
    def iter_lines(self, stream: str = "events"):
        """Yield every complete line of ``stream`` (bytes, without its newline) in file order,
        streaming the closed segments and then the open file; an unterminated last line is left out."""
        for path in self.stream_paths(stream):
            try:
                fh = open_file(path)  # closed by the with below
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
                fh = open_file(path)  # closed by the with below
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
        p = self.path(layout.blob(digest))
        if not os.path.exists(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)
            atomic_write(p, data)
        return digest


# Housekeeping registered by higher layers (``loopx.kernel.write`` registers the run reaper), so the
# storage layer never imports them: each is ``fn(state, now) -> list[Draft]`` run inside every
# transaction (unless ``reap=False``) before the plan.
HOUSEKEEPING: list = []


def register_housekeeping(fn) -> None:
    """Run ``fn(state, now) -> list[Draft]`` in every transaction before its plan (idempotent)."""
    if fn not in HOUSEKEEPING:
        HOUSEKEEPING.append(fn)
