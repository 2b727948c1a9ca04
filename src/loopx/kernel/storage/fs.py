"""File-system helpers shared by every layer: the one upward search and project-root discovery.

``find_up`` is the only upward walk in loopx (the store's ``.loopx`` discovery, git's ``.git``,
doctor's project, the skills installer's scope and the hooks' store all use it).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

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


def atomic_write(path: str, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (temp file in the same folder, fsync unless
    ``sync`` is False, rename). Raises OSError; the temp file is removed on failure."""
    tmp = f"{path}.{os.getpid()}.{os.urandom(3).hex()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextmanager
def locked(path: str, timeout: float):
    """Hold the OS lock on file ``path`` (created if missing), polling with back-off for up to
    ``timeout`` seconds, then raise StoreBusy (exit 4). The OS drops the lock when the holder dies,
    so a killed process never blocks others (``fcntl.flock``; ``msvcrt.locking`` on Windows)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        delay = 0.002
        while not try_lock(fd):
            if time.monotonic() >= deadline:
                from loopx.errors import StoreBusy

                raise StoreBusy(f"the store is busy (another loopx process held the lock for {timeout:g}s)",
                                "retry in a moment; raise LOOPX_LOCK_TIMEOUT if this persists")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)


if os.name == "nt":  # pragma: no cover - exercised on the Windows CI leg
    import msvcrt

    def try_lock(fd: int) -> bool:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
