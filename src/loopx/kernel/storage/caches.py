"""The store's derived, disposable copies of its state (docs/architecture.md, "Flat cost").

- ``cache/snapshot.bin``: the full folded state and the file offsets it covers (marshal);
- ``cache/live.bin``: the live view (``fold.live_view``: what is still open) and its offsets,
  rewritten by a write once its tail reaches ``LIVE_EVERY`` lines (``behind``);
- ``cache/heads.bin``: the last write's chain heads and open files' lengths (``keep_heads``: what
  ``doctor`` compares the log's end with, and ``load_live`` the files);
- ``events/NNNNNN.live.json``: the checkpoint, the live view kept beside each closed events
  segment so a clone without a cache starts from there (written once, never changed).

A cache is used only while the files still hold the bytes it recorded before its offsets
(``check_offsets``) and its ``fold`` and format versions are current; anything else reads as no
cache (``fold.empty(), {}``) and the caller folds from the start. Writes are atomic and their
failures ignored: a cache can always be rebuilt from the logs.
"""

from __future__ import annotations

import os

from loopx.kernel.storage import cjson, clock, fold, layout, quotas
from loopx.kernel.storage.fs import (
    MOST_CACHE,
    atomic_write,
    open_file,
    read_at,
    read_bytes,
    stale_temporaries,
)

SNAPSHOT_VERSION = 3
SNAPSHOT_EVERY = 200          # fold at most this many tail lines before refreshing the snapshot
# A write rewrites the live view only once this many lines lie past it: rewriting it costs a writer
# about 3 ms at 10k events (deriving it, marshal, the file), folding a tail line ~15 us for each
# reader (docs/architecture.md, "The live view").
LIVE_EVERY = 32
_UNSAVED = ("torn", "read_only", "behind")  # meta fields of one read, never cached


def unmarshal(raw: bytes):
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


def load_snapshot(store, name: str = layout.SNAPSHOT) -> tuple[dict, dict]:
    """(state, {stream: offset}) from the snapshot ``name`` (``layout.SNAPSHOT`` or
    ``layout.LIVE``) when it is current, else (``fold.empty()``, {})."""
    try:
        # one read (marshal.load(fh) reads piecemeal); a live view past MOST_CACHE is damage, and a
        # snapshot too large to hold is no snapshot either
        snap = unmarshal(read_bytes(store.path(name), most=MOST_CACHE if name == layout.LIVE else None))
        if not isinstance(snap, dict) or snap.get("v") != SNAPSHOT_VERSION or not _same_fold(snap):
            raise ValueError("old snapshot")
        return snap["state"], check_offsets(store, snap["state"])
    except (OSError, ValueError, EOFError, TypeError, KeyError, MemoryError):
        return fold.empty(), {}


def _same_fold(snap: dict) -> bool:
    """Whether cache ``snap`` was folded under this code's ``fold.FOLD_VERSION``: written under
    this process's ``fold.CODE_STAMP``, it was folded by this very code, and its version is this
    code's without computing it (the check Python makes of a ``.pyc`` against its source: an edit
    of the event table that keeps ``events.py``'s size and mtime goes unseen, as there; a
    reducer's cannot, its digest is in the stamp); under another stamp, the versions are compared."""
    stamp = snap.get("code")
    return (stamp is not None and stamp == fold.CODE_STAMP) or snap.get("fold") == fold.FOLD_VERSION


def save_snapshot(store, state: dict, *, full: bool = True) -> None:
    """Write the snapshots atomically: the full state (unless ``full`` is False or ``state`` is
    itself a live view) and the live view derived from it. Failures are ignored."""
    import marshal
    meta = state["meta"]
    is_live = "closed" in state
    saved = {k: v for k, v in meta.items() if k not in _UNSAVED}
    body = dict(state)
    body["meta"] = saved
    try:
        os.makedirs(store.path(layout.CACHE), exist_ok=True)
        if full and not is_live:
            meta["snap_lines"] = saved["snap_lines"] = sum(m["lines"] for m in meta["files"].values())
            data = marshal.dumps({"v": SNAPSHOT_VERSION, "fold": fold.FOLD_VERSION, "code": fold.CODE_STAMP,
                                  "state": body})
            atomic_write(store.path(layout.SNAPSHOT), data, sync=False, follow=False)
            sweep(store)
        view = fold.live_view(body, clock.now_iso())
        live = marshal.dumps({"v": SNAPSHOT_VERSION, "fold": fold.FOLD_VERSION, "code": fold.CODE_STAMP, "state": view})
        atomic_write(store.path(layout.LIVE), live, sync=False, follow=False)
    except (OSError, ValueError):
        pass


def sweep(store, older_than: float = 600.0) -> None:
    """Delete temp files that a process killed mid-write left in ``cache/`` (at most one snapshot
    each); only old ones, so a concurrent writer's file in flight is never touched."""
    for path in stale_temporaries(store.path(layout.CACHE), older_than=older_than):
        try:
            os.unlink(path)
        except OSError:
            pass


def check_offsets(store, state: dict) -> dict:
    """{stream: offset} when every stream still holds the bytes ``state`` recorded before its
    offset (in the segment that open file became, if it was closed since). Raises ValueError
    (and OSError when a file is gone)."""
    offsets = {}
    for name in layout.STREAMS:
        meta = state["meta"]["files"][name]
        off = meta["offset"]
        tail = bytes.fromhex(meta.get("tail", ""))
        closed = store.segment_path(name, meta.get("segments", 0) + 1)
        is_open = not os.path.exists(closed)
        where = store.path(layout.open_log(name)) if is_open else closed
        start = max(0, off - len(tail))
        data, st = read_at(where, start, len(tail))
        if is_open and meta.get("mtime") and st.st_mtime_ns != meta["mtime"] and st.st_size == off:
            # changed since the cache saw it, yet nothing was appended: edited in place
            raise ValueError("file rewritten under the snapshot")
        if off:
            if data != tail:
                raise ValueError("file changed under the snapshot")
        elif tail:
            raise ValueError("bad snapshot")
        offsets[name] = off
    return offsets


def load_checkpoint(store) -> tuple[dict, dict]:
    """The live view saved when the newest closed events segment was closed
    (``events/NNNNNN.live.json``), if it still matches the files; else (empty, {})."""
    k = store.closed_segments("events")
    path = store.path(layout.checkpoint(k)) if k else None
    if path is None or not os.path.exists(path):
        return fold.empty(), {}
    try:
        with open_file(path) as fh:
            snap = cjson.loads(fh.read())
        if not isinstance(snap, dict) or snap.get("fold") != fold.FOLD_VERSION:
            raise ValueError("old checkpoint")
        return snap["state"], check_offsets(store, snap["state"])
    except (OSError, ValueError, TypeError, KeyError):
        return fold.empty(), {}


def write_checkpoint(store, state: dict, number: int) -> None:
    """Under the lock, right after closing events segment ``number``: keep the live view next to
    it. Written once, never changed; a failure is ignored (any full read rebuilds the cache)."""
    import json

    view = fold.live_view({**state, "meta": {k: v for k, v in state["meta"].items() if k not in _UNSAVED}},
                          clock.now_iso())
    body = json.dumps({"fold": fold.FOLD_VERSION, "state": view}, separators=(",", ":"), sort_keys=True)
    try:
        atomic_write(store.path(layout.checkpoint(number)), body.encode(), follow=False)  # a name known in advance
    except OSError:
        pass


def load_live(store) -> dict | None:
    """The live view brought up to date with the files' tails, or None when it cannot stand for
    the state: no cache and no checkpoint, more than SNAPSHOT_EVERY lines behind, a tail record
    touching what the view left out, an unordered tail, or a quota window wider than the spends
    the view kept. Saves the view when it was rebuilt from a checkpoint."""
    from loopx.kernel.storage.logfold import fold_stream

    state, offsets = load_snapshot(store, layout.LIVE)
    checkpoint = False
    if not offsets:  # no usable cache (a fresh clone, a deleted cache): start from a checkpoint
        state, offsets = load_checkpoint(store)
        if not offsets:
            return None
        checkpoint = True
    malformed = state["meta"].get("malformed", 0)
    torn = {}
    behind = 0
    for name in layout.STREAMS:
        n, tail = fold_stream(store, state, name, offsets[name])
        if (n >= SNAPSHOT_EVERY and not checkpoint) or state["meta"].get("malformed", 0) != malformed \
                or state["meta"]["files"][name].get("unordered"):
            return None  # too far behind, or the tail refers to something the view left out
        behind += n
        if tail:
            torn[name] = tail
    if not _window_kept(state):
        return None  # a wider window (or an earlier clock) needs ledger entries the view dropped
    if behind and not checkpoint and _edited_in_place(store, state):
        return None  # the full read counts the edited line as bad, as it would have at any time
    state["meta"]["torn"] = torn
    state["meta"]["read_only"] = store.read_only_reason(state)
    state["meta"]["self_node"] = store.node_id()  # whose claims and runs are "mine" (kernel.storage.machines)
    state["meta"]["behind"] = 0 if checkpoint else behind  # lines folded past the saved view
    if checkpoint:
        save_snapshot(store, state, full=False)
    return fold.guarded(state)


def as_saved(state: dict) -> dict:
    """The live view ``state`` as a write would save it now: pruned again (``fold.live_view``) when
    lines were folded past the saved view, so what a reader lists (recently closed todos, gates,
    runs) never depends on when the view was saved last; else ``state`` itself."""
    if not state["meta"].get("behind"):
        return state
    return fold.guarded(fold.live_view(state, clock.now_iso()))


def after_write(store, state: dict, written: int, rotated: bool) -> None:
    """Under the lock, after a write of ``written`` lines into the live view ``state``: save the view
    when ``LIVE_EVERY`` lines or more now lie past the saved one (or a segment was closed), and
    keep the write's chain heads (``keep_heads``). Failures are ignored, as for every cache."""
    meta = state["meta"]
    behind = meta.get("behind", 0) + written
    if rotated or behind >= LIVE_EVERY:
        save_snapshot(store, state, full=False)
        behind = 0
    if written:
        keep_heads(store, state)
    meta["behind"] = behind


def keep_heads(store, state: dict) -> None:
    """After a write: its chain heads and each open file's length, mtime and inode in
    ``cache/heads.bin``, newer than any view a reader saves later (a reader that finds the log cut
    folds it again and saves what it found; ``doctor`` compares the log with these heads too, and
    ``load_live`` the files, for a line edited in place under the tail). Failures are ignored."""
    import marshal

    meta = state["meta"]
    files = {n: [m.get("segments", 0), m["offset"], m.get("mtime"), m.get("ino")] for n, m in meta["files"].items()}
    try:
        atomic_write(store.path(layout.HEADS), marshal.dumps({"v": 2, "chain": meta.get("chain") or {}, "files": files}),
                     sync=False, follow=False)
    except (OSError, ValueError):
        pass


def _heads_file(store) -> dict:
    """``cache/heads.bin`` as written by ``keep_heads``: {"v", "chain": {node: head}, "files":
    {stream: [segments, offset (bytes), mtime_ns, inode]}}, or {} when missing or not one."""
    try:
        raw = read_bytes(store.path(layout.HEADS), 1 << 16)
        import marshal

        got = marshal.loads(raw)
        return got if isinstance(got, dict) and got.get("v") == 2 else {}
    except (OSError, ValueError, EOFError, TypeError, MemoryError, SystemError):
        return {}


def saved_heads(store) -> dict:
    """The chain heads the last write kept in ``cache/heads.bin`` ({node: head}), or {}."""
    heads = _heads_file(store).get("chain")
    return heads if isinstance(heads, dict) else {}


def _edited_in_place(store, state: dict) -> bool:
    """Whether an open file still has the length the last write left it at (``cache/heads.bin``),
    in the same file (segment count, inode), yet another mtime: rewritten in place since, which
    ``check_offsets`` sees only for a file that ends where the saved view does."""
    left = _heads_file(store).get("files")
    if not isinstance(left, dict):
        return False
    for name, m in state["meta"]["files"].items():
        rec = left.get(name)
        if (isinstance(rec, list) and len(rec) == 4 and rec[0] == m.get("segments", 0) and rec[1] == m["offset"]
                and rec[3] == m.get("ino") and rec[2] != m.get("mtime")):
            return True
    return False


def _window_kept(state: dict) -> bool:
    """Whether every goal's quota window still starts after what the live view dropped of its
    spends (``spends_cut``) at the current time."""
    now = clock.now()
    for gid, cut in state.get("spends_cut", {}).items():
        window = quotas.value(state["goals"].get(gid), "window")
        if clock.iso(now - clock.timedelta(seconds=window)) < cut:
            return False
    return True


def still_current(store, state: dict) -> bool:
    """Whether the live view ``state``, read by this process moments ago and not changed since,
    is what ``load_live`` would return now (the caller holds the lock, so nothing can be appended
    meanwhile): no torn tail, no segment closed since, each open file of the size and mtime the
    view recorded (and of its inode and ctime: another file put in its place, or one whose mtime was
    set back as ``cp -p`` does, is not current; a same-size write in place within one timestamp tick
    still is), and its quota windows still covered. One ``stat`` per stream instead of reading
    and unmarshalling the view again."""
    meta = state["meta"]
    if not fold.is_live(state) or meta.get("torn") or not _window_kept(state):
        return False
    for name in layout.STREAMS:
        m = meta["files"][name]
        if m.get("mtime") is None or os.path.exists(store.segment_path(name, m.get("segments", 0) + 1)):
            return False
        try:
            st = os.stat(store.path(layout.open_log(name)))
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) != (m["offset"], m["mtime"], m.get("ctime"), m.get("ino")):
            return False
    return True
