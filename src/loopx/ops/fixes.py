"""Doctor's safe fixes. Each takes (target, actor) and returns one line saying what it did, or
raises (the caller reports it as not applied). Store fixes run under the store's lock and record
a ``store.repaired`` event; none runs on a read-only store (newer format, conflict markers)."""

from __future__ import annotations

import contextlib
import os
import shutil

from loopx.errors import ReadOnlyStore
from loopx.kernel.storage import caches, clock, layout
from loopx.kernel.storage.fs import atomic_write
from loopx.kernel.storage.layout import STREAMS
from loopx.ops.hostcheck import refresh
from loopx.ops.hostcheck import rewrite_hooks as rewrite
from loopx.ops.storechecks import missing_ignore_rules, stale_temporaries
from loopx.ops.storescan import quarantine_bad_lines


def _writable(store) -> None:
    store.format_info()
    reason = store.read_only_reason()
    if reason:
        raise ReadOnlyStore(reason)


def repair_store(t, actor: str) -> str:
    """Quarantine a torn tail (the store's own repair) and undecodable lines, under the lock."""
    store = t.store()
    _writable(store)
    with store.lock():
        drafts = store.repair_torn_tails()
        stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
        for name in STREAMS:
            d = quarantine_bad_lines(store, name, stamp)
            if d is not None:
                drafts.append(d)
                # lines left the middle of the file: drop the snapshot rather than trust its offsets
                for snap in (layout.SNAPSHOT, layout.LIVE):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(store.path(snap))
        if not drafts:
            return "nothing to repair"
        state = store.load(save_snapshot=False)
        if state["meta"]["read_only"]:
            raise RuntimeError(state["meta"]["read_only"])
        store._append(state, drafts, clock.now(), actor)
    return "; ".join(f"moved {d.data.get('lines', 1)} line(s) ({d.data['bytes']} bytes) of {d.data['file']} "
                     f"to .loopx/{d.data['quarantine']}" for d in drafts)


def rebuild_cache(t, actor: str) -> str:
    store = t.store()
    cache = store.path(layout.CACHE)
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache, exist_ok=True)
    state = store.load(save_snapshot=False)
    caches.save_snapshot(store, state)
    return "rebuilt .loopx/cache/ from the log"


def add_ignore_rules(t, actor: str) -> str:
    missing = missing_ignore_rules(t.root)
    if not missing:
        return "already ignored"
    path = os.path.join(t.root, layout.GITIGNORE)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except FileNotFoundError:
        text = "# written by loopx: machine-local files\n"
    if text and not text.endswith("\n"):
        text += "\n"

    atomic_write(path, text + "".join(r + "\n" for r in missing))
    return f"added {', '.join(missing)} to .loopx/.gitignore"


def remove_temporaries(t, actor: str) -> str:
    """Delete the stale ``*.tmp`` files doctor found (never a file younger than STALE_AFTER)."""
    removed = 0
    for path in stale_temporaries(t):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
            removed += 1
    return f"removed {removed} stale temporary file(s) from .loopx/"


def refresh_skills(t, actor: str) -> str:
    return refresh(t.project_dir)


def rewrite_hooks(t, actor: str) -> str:
    return rewrite(t.project_dir)


FIXES = {"repair_torn_tail": repair_store, "quarantine_bad_lines": repair_store,
         "rebuild_cache": rebuild_cache, "remove_temporaries": remove_temporaries, "add_ignore_rules": add_ignore_rules, "refresh_skills": refresh_skills,
         "rewrite_hooks": rewrite_hooks}
# repair first (it changes the files the cache is keyed on), the cache last
ORDER = ("repair_torn_tail", "quarantine_bad_lines", "remove_temporaries", "add_ignore_rules", "refresh_skills",
         "rewrite_hooks", "rebuild_cache")
