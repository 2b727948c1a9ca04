"""File-system helpers shared by every layer: the one upward search, project-root discovery, the
one OS lock and the one atomic file write. Every file loopx replaces whole goes through
``atomic_write``, every lock it takes through ``locked`` (tests/test_fs.py checks that no other
module renames a temporary file into place or calls ``flock``).

``find_up`` is the only upward walk in loopx (the store's ``.loopx`` discovery, git's ``.git``,
doctor's project, the skills installer's scope and the hooks' store all use it).

``atomic_write(path, data, mode=None, sync=True)`` writes a whole file so a reader sees either
the old or the new content, never a mix, and never loses the old file to a crash or a full disk:

- the data goes to a temporary file next to the *target* (``<name>.<pid>.<hex>.tmp``), is fsync'd
  (unless ``sync`` is False: disposable caches), then renamed over the target;
- a symlink is followed: the link stays a link and its target gets the new content (a
  ``CLAUDE.md -> AGENTS.md`` or a settings file kept in a dotfiles repo survive an install);
- the target's permission bits are kept (a ``0600`` settings file stays ``0600``); a new file gets
  ``mode`` or, when ``mode`` is None, ``0o666`` minus the umask, as ``open()`` would;
- on any failure (``ENOSPC``, ``EDQUOT``, a signal turned into an exception) the temporary file is
  removed and the error re-raised (OSError); the target is untouched. The folder must exist.

A process killed between creating and renaming the temporary file leaves it behind;
``stale_temporaries`` finds those (``loopx doctor`` reports them, ``--fix`` removes them).

``locked(path, timeout)`` is the OS lock on the file ``path`` (created if missing; its folder must
exist): ``with locked(path, timeout):`` waits up to ``timeout`` seconds (longer while the lock keeps
changing hands) and raises StoreBusy (exit 4) when one holder kept it that long;
``locked.now(path)`` takes it without waiting or returns None (a job that another process is
already doing is skipped, not queued). The OS drops the lock when its holder dies, so a killed
process never blocks the others. The holder writes its pid at the start of the file
(``holder(path)`` reads it back for a message); the file is never deleted.
"""

from __future__ import annotations

import os
import sys
import time

from loopx.kernel.storage import layout
from loopx.kernel.storage.layout import DIRNAME  # fs.find_root searches for it


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


def ensure_lines(path: str, lines) -> None:
    """Append each of ``lines`` that the text file ``path`` lacks (as a whole, stripped line),
    creating the file when missing; an unreadable file is left alone (``.gitignore`` entries of
    stores made by an older loopx)."""
    try:
        with open_file(path, "r", encoding="utf-8") as fh:  # a FIFO there is unreadable: left alone, never waited on
            text = fh.read()
    except FileNotFoundError:
        text = ""
    except (OSError, ValueError):
        return
    have = {line.strip() for line in text.splitlines()}
    add = [x for x in lines if x not in have]
    if add:
        atomic_write(path, (text + ("" if not text or text.endswith("\n") else "\n")
                            + "".join(x + "\n" for x in add)).encode())


def find_root(start: str) -> str | None:
    """The nearest ``.loopx`` directory at or above ``start`` (like git's discovery), or None.
    Inside a parallel run's worktree (``<project>/.loopx/worktrees/<run-id>/...``) it is the
    project's own ``.loopx``, never the copy a worktree checks out when ``.loopx/`` is committed."""
    root = find_up(start, DIRNAME)
    if root is None:
        return None
    marker = os.sep + DIRNAME + os.sep + layout.WORKTREES + os.sep
    at = os.path.abspath(root).find(marker)
    if at >= 0:
        outer = os.path.abspath(root)[:at + len(os.sep + DIRNAME)]
        if os.path.isdir(outer):
            return outer
    return root


def project_dir(start: str | None = None) -> str | None:
    """The project directory (the folder holding ``.loopx/``) at or above ``start`` (default: the
    current directory), or None when there is none."""
    root = find_root(start or os.getcwd())
    return os.path.dirname(root) if root else None


TMP_SUFFIX = ".tmp"
STALE_AFTER = 600.0  # seconds; a temporary younger than this may belong to a writer in flight


def resolve(path: str) -> str:
    """The file a write to ``path`` should replace: ``path`` itself, or the end of its symlink
    chain (relative links are resolved against the link's folder). Raises OSError on a loop."""
    p = os.fspath(path)
    for _ in range(40):
        if not os.path.islink(p):
            return p
        link = os.readlink(p)
        p = link if os.path.isabs(link) else os.path.join(os.path.dirname(p), link)
    raise OSError(40, "too many levels of symbolic links", path)


def _umask() -> int:
    if os.name == "nt":  # pragma: no cover
        return 0
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path, data: bytes | str, *, mode: int | None = None, sync: bool = True,
                 follow: bool = True) -> str:
    """Replace the file at ``path`` (following symlinks) with ``data`` atomically.

    ``data``: bytes, or str written as UTF-8 exactly (no newline translation). ``mode``: permission
    bits for a *new* file (an existing target keeps its own bits unless ``mode`` is given). ``sync``:
    fsync the file before the rename (off only for disposable caches). ``follow``: False for a file
    only loopx writes (everything under ``.loopx/cache/``): a symlink found at ``path`` is replaced
    by the new file, never written through (one planted there would aim the write at any file its
    owner may write; a user's own config may well be a link, and is followed). Returns the path
    actually written (the symlink's target when followed). Raises OSError (the temporary file is
    removed first)."""
    import stat

    target = resolve(os.fspath(path)) if follow else os.fspath(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        st = os.stat(target) if follow else os.lstat(target)
        keep = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) or follow else None
    except FileNotFoundError:
        keep = None
    final = mode if mode is not None else keep if keep is not None else 0o666 & ~_umask()
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f"{name}.{os.getpid()}.{os.urandom(3).hex()}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if hasattr(os, "fchmod"):
                os.fchmod(fd, final)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if not hasattr(os, "fchmod"):  # pragma: no cover - Windows
            os.chmod(tmp, final)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def _regular(path, missing_ok: bool = False) -> None:
    """Raise OSError (EINVAL, "not a regular file") when something other than a regular file is at
    ``path`` (a symlink is followed); FileNotFoundError when nothing is, unless ``missing_ok``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    if mode & 0o170000 != 0o100000:
        raise OSError(22, "not a regular file", os.fspath(path))  # EINVAL


_OPEN_FLAGS = getattr(os, "O_BINARY", 0)  # not inheritable by child processes either way (PEP 446)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # none on Windows, which has no FIFO to wait on
LEASE_WAIT = 50.0  # seconds a file another process holds a lease on is waited for (the kernel breaks one after 45)
# bytes past which a file loopx reads whole is damage, not data (``most=``): a sparse file of 50 GB
# costs no disk space and made the read fail for memory, on every command (a helper's finding)
MOST_SMALL = 1 << 20  # a file a person or loopx writes by the line: format.json, config.toml, a hook's counter
MOST_CACHE = 1 << 30  # a cache or kept answer (the live view, decisions, git's and usage's answers, sync state)


def _open_regular(path, flags: int, mode: int = 0o666, most: int | None = None) -> tuple[int, os.stat_result]:
    """``(descriptor, its fstat)`` of the regular file at ``path``, opened with ``flags``
    (``os.O_RDONLY``, ``os.O_RDWR``, or ``os.O_WRONLY | os.O_APPEND | os.O_CREAT``: then created
    with ``mode`` when missing) and ``O_NONBLOCK``, which stays set (``_blocking`` clears it).

    A FIFO planted at a store path would make an ordinary open wait for a writer (or a reader)
    forever, and every hot command and host hook with it; a device could act on being opened. So: a
    ``stat`` first (a device is never opened, a symlink to one included), then an open that never
    waits (``O_NONBLOCK``: a FIFO swapped in after the ``stat`` opens at once, or refuses a writer
    with ENXIO) checked on the descriptor itself (``fstat``). A file another process holds a lease
    on (``fcntl`` ``F_SETLEASE``: the open says EWOULDBLOCK and the kernel asks the holder to let
    go) is tried again every 10 ms for up to ``LEASE_WAIT`` seconds, where an ordinary open would
    have waited for it; never with an open that waits, which a FIFO swapped in meanwhile would hold
    for good. Raises FileNotFoundError when nothing is there (and nothing is created), OSError
    (EINVAL, "not a regular file") for a FIFO, socket, device or folder, OSError (EFBIG, "File too
    large") for one of more than ``most`` bytes, BlockingIOError when a lease outlasted the wait,
    and what ``os.open`` raises."""
    _regular(path, missing_ok=bool(flags & os.O_CREAT))
    deadline = None
    while True:
        try:
            fd = os.open(path, flags | _OPEN_FLAGS | _NONBLOCK, mode)
            break
        except BlockingIOError:
            now = time.monotonic()
            deadline = deadline or now + LEASE_WAIT
            if now >= deadline:
                raise
            time.sleep(0.01)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000:
            raise OSError(22, "not a regular file", os.fspath(path))  # EINVAL
        if most is not None and st.st_size > most:
            raise OSError(27, "File too large", os.fspath(path))  # EFBIG
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _blocking(fd: int) -> int:
    """``fd`` with ``O_NONBLOCK`` cleared, for a file object or the log's writer, which expect
    ordinary reads and writes; ``fd`` is closed when that fails."""
    if _NONBLOCK:
        try:
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
    return fd


def open_file(path, mode: str = "rb", encoding: str | None = None, errors: str | None = None,
              most: int | None = None):
    """``open(path, mode)`` for reading a file of the store (a log, ``format.json``, ``node``, a
    cache, a hook's counter): only a regular file, opened as ``_open_regular`` opens it (never a
    device; a FIFO, even one swapped in after the check, never makes it wait). ``mode``: ``"rb"``,
    ``"rb+"`` or ``"r"`` (with ``encoding`` and ``errors``); ``most``: the largest size accepted
    (``MOST_SMALL``, ``MOST_CACHE``). Raises FileNotFoundError when nothing is there, OSError (EINVAL,
    "not a regular file") for a FIFO, socket, device or folder, OSError (EFBIG) past ``most``, and
    what ``open`` raises."""
    def opener(_path, _flags) -> int:  # the file object owns the descriptor from here on
        return _blocking(_open_regular(path, os.O_RDWR if "+" in mode else os.O_RDONLY, most=most)[0])
    return open(path, mode, encoding=encoding, errors=errors, opener=opener)


def read_at(path, offset: int = 0, length: int | None = None, most: int | None = None) -> tuple[bytes, os.stat_result]:
    """``(data, stat)``: the bytes of the regular file at ``path`` from ``offset`` (up to ``length``
    of them, by default to its end), read up to the size the file had when opened (a file that
    grows meanwhile gives that much, one cut shorter its end), and the file's ``fstat`` then.
    Opened as ``open_file`` opens it, but read without a file object: a hot command reads a dozen
    files (the logs' tails, caches, ``format.json``, ``node``), and a file object costs six system
    calls more each (its own ``fstat``, a terminal check, two to clear ``O_NONBLOCK``, a seek, a
    read to find the end). A read that returns less (a signal, a network file system, 2 GiB at most
    per call) is continued. Raises what ``open_file`` raises (``most`` as there)."""
    fd, st = _open_regular(path, os.O_RDONLY, most=most)
    try:
        end = st.st_size if length is None else min(st.st_size, offset + length)
        want = max(0, end - offset)
        if want and offset:
            os.lseek(fd, offset, os.SEEK_SET)
        chunks = []
        got = 0
        while got < want:
            more = os.read(fd, want - got)
            if not more:
                break
            chunks.append(more)
            got += len(more)
        return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), st
    finally:
        os.close(fd)


def read_bytes(path, limit: int | None = None, most: int | None = None) -> bytes:
    """The content of the regular file at ``path`` (at most its first ``limit`` bytes), as
    ``read_at`` reads it (``most`` as there)."""
    return read_at(path, 0, limit, most)[0]


def open_append(path):
    """``open(path, "ab")`` (created if missing) for a file loopx appends to, opened as
    ``open_file`` opens a file (a FIFO swapped in after the check refuses the open instead of
    waiting for a reader). Raises OSError."""
    def opener(_path, _flags) -> int:
        return _blocking(_open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)[0])
    return open(path, "ab", opener=opener)


def append_fd(path) -> int:
    """``open_append`` as a descriptor (``O_WRONLY | O_APPEND | O_CREAT``, 0644 for a new file): the
    log writer's. Raises OSError."""
    return _blocking(_open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)[0])


def move_into_place(src: str, dst: str) -> None:
    """Replace ``dst`` with the complete file ``src`` in one rename (a migration's prepared files);
    ``src`` must already be written and fsynced. Raises OSError."""
    os.replace(src, dst)


def stale_temporaries(folder: str, *, older_than: float = STALE_AFTER, now: float | None = None) -> list[str]:
    """Paths of ``*.tmp`` files under ``folder`` (recursively) last modified more than
    ``older_than`` seconds before ``now`` (default: the wall clock), sorted. Missing folder: []."""
    import time

    cutoff = (time.time() if now is None else now) - older_than
    out = []
    for base, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(base, d))]
        for n in names:
            if not n.endswith(TMP_SUFFIX):
                continue
            p = os.path.join(base, n)
            try:
                if os.lstat(p).st_mtime < cutoff:
                    out.append(p)
            except OSError:
                continue
    return sorted(out)


PATIENCE = 30  # a waiter gives up after this many lock timeouts even while the lock changes hands
_pwrite = getattr(os, "pwrite", None)


def _holder(fd: int) -> bytes:
    """The token the current holder of the lock file wrote (pid and a clock reading), or b""."""
    try:
        return os.pread(fd, 64, 0) if hasattr(os, "pread") else b""
    except OSError:
        return b""


class locked:
    """``with locked(path, timeout):`` holds the OS lock on file ``path`` (created if missing),
    polling with back-off for up to ``timeout`` seconds, longer while the lock keeps changing hands
    (each holder writes a token; a waiter that sees a new one waits another ``timeout``, at most
    PATIENCE of them), then raises StoreBusy (exit 4): one holder kept it that long. The OS
    drops the lock when the holder dies, so a killed process never blocks others (``fcntl.flock``;
    ``msvcrt.locking`` on Windows). A class, not ``contextlib.contextmanager``: contextlib and the
    functools and collections it imports cost every writer about 3 ms at start-up."""

    __slots__ = ("path", "timeout", "fd")

    def __init__(self, path: str, timeout: float) -> None:
        self.path, self.timeout, self.fd = path, timeout, -1

    @classmethod
    def now(cls, path: str) -> locked | None:
        """The lock on ``path`` taken without waiting (use it in a ``with`` block, or ``release``
        it), or None when another process holds it. Raises OSError when the file cannot be opened."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if not try_lock(fd):
            os.close(fd)
            return None
        held = cls(path, 0.0)
        held.fd = fd
        _stamp(fd)
        return held

    def __enter__(self) -> None:
        if self.fd >= 0:  # taken by ``now``
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            start = time.monotonic()
            deadline = start + self.timeout
            delay = 0.002
            holder = _holder(fd)
            while not try_lock(fd):
                now = time.monotonic()
                if now >= deadline:
                    # the wait adapts to contention: while the lock changes hands (thirty claimers
                    # taking turns) each holder is making progress, so wait another `timeout`;
                    # StoreBusy means one holder kept it the whole time (a hang, a deadlock)
                    seen = _holder(fd)
                    if seen != holder and now - start < self.timeout * PATIENCE:
                        holder, deadline = seen, now + self.timeout
                        continue
                    from loopx.errors import StoreBusy

                    raise StoreBusy(f"the store is busy (another loopx process held the lock for {self.timeout:g}s)",
                                    "retry in a moment; raise LOOPX_LOCK_TIMEOUT if this persists")
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            _stamp(fd)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Let the lock go (again: nothing)."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        try:
            unlock(fd)
        finally:
            os.close(fd)


def _stamp(fd: int) -> None:
    """Write who holds the lock now: ``<pid> <monotonic ns>``, for the waiters' progress test and
    ``holder``'s messages."""
    if _pwrite is not None:
        try:
            _pwrite(fd, b"%d %d\n" % (os.getpid(), time.monotonic_ns()), 0)
        except OSError:
            pass


def holder(path: str) -> str:
    """The pid the current (or last) holder of the lock file ``path`` wrote, or "?"."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return "?"
    try:
        text = _holder(fd).decode("ascii", "replace").split()
    finally:
        os.close(fd)
    return text[0] if text else "?"


# The lock modules are imported on first use: a command that only reads never loads them.
if sys.platform == "win32":  # pragma: no cover - exercised on the Windows CI leg (mypy reads sys.platform)
    def try_lock(fd: int) -> bool:
        import msvcrt

        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def unlock(fd: int) -> None:
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
else:
    def try_lock(fd: int) -> bool:
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def unlock(fd: int) -> None:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)
