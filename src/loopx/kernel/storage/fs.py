"""File-system helpers shared by every layer: the one upward search and project-root discovery.

``find_up`` is the only upward walk in loopx (the store's ``.loopx`` discovery, git's ``.git``,
doctor's project, the skills installer's scope and the hooks' store all use it).
"""

from __future__ import annotations

import os

DIRNAME = ".loopx"


def find_up(start: str, name: str, *, dir_only: bool = True, limit: int | None = None) -> str | None:
    """The nearest ``name`` at or above ``start`` (a directory, or with ``dir_only=False`` any kind
    of entry, as git's worktree ``.git`` files), or None. ``limit`` caps the number of levels."""
    test = os.path.isdir if dir_only else os.path.exists
    cur = os.path.abspath(start)
    level = 0
    while limit is None or level < limit:
        cand = os.path.join(cur, name)
        if test(cand):
            return cand
        parent = os.path.dirname(cur)
        if parent == cur:
            return None
        cur, level = parent, level + 1
    return None


def find_root(start: str) -> str | None:
    """The nearest ``.loopx`` directory at or above ``start`` (like git's discovery), or None."""
    return find_up(start, DIRNAME)


def project_dir(start: str | None = None) -> str | None:
    """The project directory (the folder holding ``.loopx/``) at or above ``start`` (default: the
    current directory), or None when there is none."""
    root = find_root(start or os.getcwd())
    return os.path.dirname(root) if root else None


def git_dir(start: str) -> str | None:
    """The nearest ``.git`` (directory, or a worktree's ``.git`` file) at or above ``start``."""
    return find_up(start, ".git", dir_only=False)
