"""The user-level registry of connected projects (read by the dashboard).

Lives in ``LOOPX_HOME`` when set, else the platform's data folder: ``$XDG_DATA_HOME/loopx`` or
``~/.local/share/loopx`` on Linux, ``~/Library/Application Support/loopx`` on macOS,
``%LOCALAPPDATA%\\loopx`` on Windows. ``projects.json``: ``{"projects": {abs_path: {"project_id",
"added", "last_seen"}}}``, rewritten atomically under ``registry.lock``.
"""

from __future__ import annotations

import json
import os

from loopx.kernel.storage import clock


def home() -> str:
    """The user-level data folder (created on demand by writers); see ``loopx.config.data_home``."""
    from loopx.config import data_home

    return data_home()


def _path() -> str:
    return os.path.join(home(), "projects.json")


def load() -> dict:
    """``{abs_path: info}``; an unreadable registry reads as empty (it is rebuilt by `connect`)."""
    try:
        with open(_path(), encoding="utf-8") as fh:
            data = json.load(fh)
        projects = data.get("projects") if isinstance(data, dict) else None
        return projects if isinstance(projects, dict) else {}
    except (OSError, ValueError):
        return {}


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
        atomic_write(_path(), (json.dumps({"projects": projects}, indent=2, ensure_ascii=False) + "\n").encode())
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
            atomic_write(_path(), (json.dumps({"projects": projects}, indent=2, ensure_ascii=False) + "\n").encode())
    return gone
