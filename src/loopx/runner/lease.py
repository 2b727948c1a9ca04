"""The runner lease: an OS lock per goal so two ``loopx run`` processes never drive the same goal.

The lock file is ``.loopx/cache/runner-<hash of goal id>.lock`` (ids never become paths); the OS
releases it when the runner dies, so a crashed runner never blocks the next one. The holder's pid
is written into the file for the error message.
"""

from __future__ import annotations

import hashlib
import os

from loopx.errors import Conflict
from loopx.kernel.storage.fs import try_lock, unlock


class RunnerLock:
    def __init__(self, store, goal_id: str) -> None:
        self.goal_id = goal_id
        name = "runner-" + hashlib.sha256(goal_id.encode()).hexdigest()[:16] + ".lock"
        os.makedirs(store.path("cache"), exist_ok=True)
        self.path = store.path("cache", name)
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock now or raise Conflict (``runner_busy``, exit 4)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not try_lock(fd):
            try:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() if hasattr(os, "pread") else "?"
            except OSError:
                holder = "?"
            os.close(fd)
            raise Conflict(f"another runner (pid {holder or '?'}) is driving goal {self.goal_id}",
                           "wait for it to finish; under cron wrap the job in `flock -n`", code="runner_busy")
        if hasattr(os, "pwrite"):
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            try:
                unlock(self.fd)
            finally:
                os.close(self.fd)
                self.fd = None
