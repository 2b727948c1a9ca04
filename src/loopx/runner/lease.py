"""The runner lease: OS locks per goal so no more than ``max_parallel`` ``loopx run`` processes
drive the same goal (one by default).

Slot 1's lock file is ``.loopx/cache/runner-<hash of goal id>.lock`` (ids never become paths),
slot ``i`` > 1 adds ``-<i>``; a runner takes the first free slot and keeps it until it ends (its
agent name is then ``<name>-<slot>`` when the goal allows several runners). The OS releases a lock
when a runner dies, so a crashed runner never blocks the next one. The holder's pid is written
into the file for the error message.
"""

from __future__ import annotations

import hashlib
import os

from loopx.errors import Conflict
from loopx.kernel.storage import layout
from loopx.kernel.storage.fs import holder, locked


class RunnerLock:
    def __init__(self, store, goal_id: str, slots: int = 1) -> None:
        self.goal_id = goal_id
        self.slots = max(1, int(slots))
        self.stem = "runner-" + hashlib.sha256(goal_id.encode()).hexdigest()[:16]
        os.makedirs(store.path(layout.CACHE), exist_ok=True)
        self.store = store
        self.path = store.path(layout.slot_lock(self.stem))
        self.held: locked | None = None
        self.slot: int | None = None

    def _slot_path(self, i: int) -> str:
        return self.store.path(layout.slot_lock(self.stem, i))

    def acquire(self) -> int:
        """Take the first free slot now and return its number (1-based), or raise Conflict
        (``runner_busy``, exit 4) when all ``slots`` are held."""
        holders = []
        for i in range(1, self.slots + 1):
            path = self._slot_path(i)
            held = locked.now(path)
            if held is None:
                holders.append(holder(path))
                continue
            self.held, self.slot, self.path = held, i, path
            return i
        if self.slots == 1:
            raise Conflict(f"another runner (pid {holders[0]}) is driving goal {self.goal_id}",
                           "wait for it to finish; under cron wrap the job in `flock -n`", code="runner_busy")
        raise Conflict(f"all {self.slots} runner slots of goal {self.goal_id} are taken (pids {', '.join(holders)})",
                       "wait for one to finish, or (a human) raise `loopx goal update --max-parallel N`",
                       code="runner_busy")

    def take(self, i: int) -> bool:
        """Take slot ``i`` now when it is free (``loopx.runner.recover``: no runner is on it)."""
        path = self._slot_path(i)
        held = locked.now(path)
        if held is None:
            return False
        self.held, self.slot, self.path = held, i, path
        return True

    def release(self) -> None:
        if self.held is not None:
            self.held.release()
            self.held = None
