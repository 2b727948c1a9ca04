"""The user-level registry of connected projects (read by the dashboard).

Lives in ``LOOPX_HOME`` when set, else the platform's data folder: ``$XDG_DATA_HOME/loopx`` or
``~/.local/share/loopx`` on Linux, ``~/Library/Application Support/loopx`` on macOS,
``%LOCALAPPDATA%\\loopx`` on Windows. ``projects.json``: ``{"projects": {abs_path: {"project_id",
"added", "last_seen"}}}``, rewritten atomically under ``registry.lock``.
"""

from __future__ import annotations

import os

from loopx.kernel.storage import cjson, clock, layout


def project_key(path: str) -> str:
    """The stable short key of a project folder (16 hex digits of the SHA-256 of its absolute
    path): the dashboard's URLs and the notifications' links name a project by it."""
    from loopx.kernel.storage.chain import sha256

    return sha256(os.path.abspath(path).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def home() -> str:
    """The user-level data folder (created on demand by writers); see ``loopx.config.data_home``."""
    from loopx.config import data_home

    return data_home()


def _path() -> str:
    return os.path.join(home(), layout.PROJECTS)


def load() -> dict:
    """``{abs_path: info}``; an unreadable registry reads as empty (it is rebuilt by `connect`)."""
    from loopx.kernel.storage.fs import MOST_CACHE, read_bytes

    try:
        data = cjson.loads(read_bytes(_path(), most=MOST_CACHE))  # a regular file only: a FIFO there is no registry, never a wait
        projects = data.get("projects") if isinstance(data, dict) else None
        return projects if isinstance(projects, dict) else {}
    except (OSError, ValueError):
        return {}


def _text(projects: dict) -> bytes:
    import json  # for indent (a person may read the file); only writers pay for it

    return (json.dumps({"projects": projects}, indent=2, ensure_ascii=False) + "\n").encode()


def add(project_dir: str, project_id: str) -> bool:
    """Register ``project_dir``; returns True when it was not registered before."""
    from loopx.kernel.storage.fs import atomic_write
    from loopx.kernel.storage.store import Store

    os.makedirs(home(), exist_ok=True)
    lock_store = Store(home())  # reuse the store's OS lock on <home>/lock
    with lock_store.lock():
        projects = load()
        key = os.path.abspath(project_dir)
        new = key not in projects
        entry = projects.get(key) or {"project_id": project_id, "added": clock.now_iso()}
        entry["project_id"] = project_id
        entry["last_seen"] = clock.now_iso()
        projects[key] = entry
        atomic_write(_path(), _text(projects))
    return new


def remove(project_dir: str) -> bool:
    from loopx.kernel.storage.fs import atomic_write
    from loopx.kernel.storage.store import Store

    if not os.path.isdir(home()):
        return False
    with Store(home()).lock():
        projects = load()
        gone = projects.pop(os.path.abspath(project_dir), None) is not None
        if gone:
            atomic_write(_path(), _text(projects))
    return gone


def governing_entry(where: str, projects: dict | None = None) -> tuple[str, dict] | None:
    """The registered project at or above ``where`` (the nearest), as ``(path, info)``, or None."""
    projects = load() if projects is None else projects
    here = os.path.abspath(where)
    best = None
    for path, info in projects.items():
        inside = here == path or here.startswith(path.rstrip(os.sep) + os.sep)
        if isinstance(info, dict) and inside and (best is None or len(path) > len(best[0])):
            best = (path, info)
    return best


def store_problem(where: str, store) -> str | None:
    """Why the store governing ``where`` cannot be trusted, or None. The registry remembers each
    connected project's store id, so a hook can tell when ``.loopx/`` was removed, moved away or
    replaced by another store (a different ``project_id``). ``store``: the Store found at or above
    ``where`` (None when none was found)."""
    projects = load()
    entry = governing_entry(where, projects)
    if store is None:
        if entry is None:
            return None
        return (f"the store of {entry[0]} (project id {entry[1].get('project_id') or '?'}) is gone or was moved "
                "away; a human must run `loopx connect` there")
    try:
        pid = store.format_info().get("project_id")
    except Exception:  # a missing or unreadable format.json: the caller reports the unreadable store
        return None
    if entry is not None and os.path.abspath(store.project_dir) == entry[0] and entry[1].get("project_id") \
            and pid != entry[1]["project_id"]:
        return (f"the store in {entry[0]} was replaced (project id {pid}, connected as "
                f"{entry[1]['project_id']}); a human must run `loopx connect` there")
    if entry is not None and len(entry[0]) > len(os.path.abspath(store.project_dir)):
        return (f"{entry[0]} was connected but its store is gone (the nearest store is {store.project_dir}); "
                "a human must run `loopx connect` there")
    return None
