"""Whether a clone shares a goal through a git remote: the one small read that lets the hot paths
(``quota should-run`` answering from the decision cache) skip importing the sync layer."""

from __future__ import annotations

import os

from loopx.kernel.storage import layout
from loopx.kernel.storage.fs import MOST_CACHE, open_file


def is_shared(root: str) -> bool:
    """True when the clone whose ``.loopx`` directory is ``root`` has a shared goal: its
    ``cache/sync.json`` (written by ``loopx.sync.transport``) says so. Never raises."""
    try:
        with open_file(os.path.join(root, layout.SYNC), most=MOST_CACHE) as fh:
            return b'"shared": true' in fh.read()
    except OSError:
        return False


def goal_is_shared(state: dict, goal_id: str | None) -> bool:
    """True when goal ``goal_id`` of ``state`` is shared through the remote (``goal.shared``): its
    gates, claims and spends then go through ``loopx.sync.shared``."""
    return bool((state["goals"].get(goal_id or "") or {}).get("shared"))
