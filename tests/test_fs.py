"""``fs.atomic_write`` and ``fs.locked`` are the only ways loopx replaces a file whole and takes a
lock: every writer that was a copy leaves the old file and no temporary behind when the disk is
full, no other module renames a temporary into place or calls the OS lock, and ``locked.now``
skips a job another process holds."""

from __future__ import annotations

import ast
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.kernel.storage import fs

SRC = Path(fs.__file__).resolve().parents[2]  # src/loopx

# the renames that are not a write: closing a log segment, rotating the dashboard's log
RENAMES_ALLOWED = {"kernel/storage/store.py", "dashboard/service.py"}
LOCK_CALLS = {"try_lock", "unlock", "flock", "lockf", "locking"}


def _full_disk(fd, data):
    raise OSError(errno.ENOSPC, "No space left on device")


def _hook_report(path: Path) -> None:
    from loopx.hosts import entry

    class _Store:
        def path(self, name):
            return str(path.parent.parent.parent / name)  # .loopx/ of cache/hooks/<report>

    entry._add_report(_Store(), "an edit the guard reported")


def _usage_save(path: Path) -> None:
    from loopx.usage import files

    files.save(str(path), {"new": 1})


def _usage_save_quick(path: Path) -> None:
    from loopx.usage import files

    files.save_quick(str(path), {"new": 1})


def _trace_write(path: Path) -> None:
    from loopx.errors import UsageError
    from loopx.ops import trace

    with pytest.raises(UsageError):
        trace._write(str(path), str(path), {"manifest.json": b"{}"})


@pytest.mark.parametrize("writer", [_hook_report, _usage_save, _usage_save_quick, _trace_write])
def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, writer):
    folder = tmp_path / ".loopx" / "cache" / "hooks"
    folder.mkdir(parents=True)
    from loopx.kernel.storage import layout

    path = tmp_path / ".loopx" / layout.EDIT_REPORT if writer is _hook_report else folder / "file"
    path.write_bytes(b'["keep me"]')
    with monkeypatch.context() as m:
        m.setattr(os, "write", _full_disk)
        writer(path)  # each is best effort (or a one-line UsageError): never a traceback
    assert path.read_bytes() == b'["keep me"]'
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            yield node, (f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")


def test_no_module_but_fs_renames_into_place_or_locks():
    found = []
    for f in SRC.rglob("*.py"):
        rel = f.relative_to(SRC).as_posix()
        if rel == "kernel/storage/fs.py":
            continue
        for node, name in _calls(ast.parse(f.read_text(encoding="utf-8"))):
            if name in ("replace", "rename") and isinstance(node.func, ast.Attribute) \
                    and getattr(node.func.value, "id", "") == "os" and rel not in RENAMES_ALLOWED:
                found.append(f"{rel}:{node.lineno}: os.{name} (use fs.atomic_write)")
            if name in LOCK_CALLS:
                found.append(f"{rel}:{node.lineno}: {name} (use fs.locked)")
    assert not found, "\n".join(found)


HOLD = """
import sys
from loopx.kernel.storage import fs
with fs.locked(sys.argv[1], 5):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_locked_now_skips_a_lock_another_process_holds_and_names_it(tmp_path):
    path = str(tmp_path / "job.lock")
    child = subprocess.Popen([sys.executable, "-c", HOLD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert fs.locked.now(path) is None
        assert fs.holder(path) == str(child.pid)
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    held = fs.locked.now(path)  # the holder is gone: taken at once
    assert held is not None
    with held:
        assert fs.holder(path) == str(os.getpid())
    again = fs.locked.now(path)
    assert again is not None
    again.release()


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 70_000])
def test_read_bytes_gives_the_whole_file_or_its_first_bytes(tmp_path, size):
    path = tmp_path / "f.bin"
    data = os.urandom(size)
    path.write_bytes(data)
    assert fs.read_bytes(path) == data
    for limit in (0, 1, 64, size, size + 1):
        assert fs.read_bytes(path, limit) == data[:limit]
    for offset, length in ((0, None), (1, None), (size // 2, 10), (size, None), (size + 5, 3)):
        got, st = fs.read_at(path, offset, length)
        assert got == data[offset:None if length is None else offset + length] and st.st_size == size
    with fs.open_file(path) as fh:
        assert fh.read() == data


def test_read_bytes_reads_the_size_the_file_had_when_opened(tmp_path, monkeypatch):
    """The files read this way are replaced whole (``atomic_write``), never appended to: one that
    grows between the ``fstat`` and the read gives what it held when opened, a whole snapshot."""
    path = tmp_path / "live.bin"
    path.write_bytes(b"a" * 100)
    real = os.fstat

    def grown(fd):
        st = real(fd)
        with open(path, "ab") as fh:
            fh.write(b"b" * 70_000)
        return st
    monkeypatch.setattr(fs.os, "fstat", grown)
    assert fs.read_bytes(path) == b"a" * 100


def test_read_bytes_continues_a_short_read(tmp_path, monkeypatch):
    """A read may return less than asked without the file ending (a signal, a network file
    system, and Linux gives at most about 2 GiB per call): the rest is read, never cut off."""
    path = tmp_path / "snapshot.bin"
    data = os.urandom(10_000)
    path.write_bytes(data)
    real = os.read
    monkeypatch.setattr(fs.os, "read", lambda fd, n: real(fd, min(n, 999)))
    assert fs.read_bytes(path) == data
    assert fs.read_bytes(path, 5000) == data[:5000]


def test_open_file_gives_the_path_and_an_error_of_its_own(tmp_path):
    """The file object names its path, and an error while it is made (an unknown encoding) is
    that error, with the descriptor closed once (not an EBADF from closing it twice)."""
    path = tmp_path / "format.json"
    path.write_text("{}")
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    with fs.open_file(path, "r", encoding="utf-8") as fh:
        assert fh.name == str(path) and fh.read() == "{}"
    with pytest.raises(LookupError):
        fs.open_file(path, "r", encoding="no-such-codec")
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds


SWAPPED = """
import os, sys
from loopx.kernel.storage import fs
fs._regular = lambda path, missing_ok=False: None  # the stat saw a regular file; a FIFO took its place since
path = sys.argv[1]
for read in (lambda: fs.read_bytes(path), lambda: fs.open_file(path).read(), lambda: fs.open_file(path, "rb+")):
    try:
        read()
    except OSError as exc:
        print(exc.errno, exc.strerror)
if sys.argv[2:] == ["write"]:  # the log's writers: a FIFO without a reader refuses the open
    for write in (lambda: fs.append_fd(path), lambda: fs.open_append(path)):
        try:
            write()
        except OSError as exc:
            print(exc.errno, exc.strerror)
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_swapped_in_after_the_check_is_refused_without_waiting(tmp_path):
    """The stat before the open is a check an attacker could race (a FIFO put in place between
    the two): the open itself never waits, and the descriptor is checked again."""
    path = tmp_path / "live.bin"
    os.mkfifo(path)
    out = subprocess.run([sys.executable, "-c", SWAPPED, str(path), "write"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(Path(fs.__file__).parents[3])})
    lines = out.stdout.splitlines()
    assert lines[:3] == [f"{errno.EINVAL} not a regular file"] * 3, (out.stdout, out.stderr)
    assert [int(line.split()[0]) for line in lines[3:]] == [errno.ENXIO] * 2, (out.stdout, out.stderr)


LEASED = """
import os, sys
from loopx.kernel.storage import fs
fs._regular = lambda path, missing_ok=False: None  # the stat saw a regular file; a FIFO took its place since
calls = []
real = os.open
def leased(path, flags, mode=0o777):
    calls.append(flags)
    if len(calls) == 1:
        raise BlockingIOError(11, "a lease holder was asked to let go")
    return real(path, flags, mode)
fs.os.open = leased
try:
    fs.read_bytes(sys.argv[1])
except OSError as exc:
    print(exc.errno, all(f & os.O_NONBLOCK for f in calls), len(calls))
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_lease_is_waited_for_without_an_open_that_could_wait_on_a_fifo(tmp_path):
    """A file another process holds a lease on answers the open with EWOULDBLOCK while the holder
    lets go: it is tried again, each time without waiting, so a FIFO swapped in meanwhile is refused
    like any other (an ordinary open there would wait for a writer for good)."""
    path = tmp_path / "heads.bin"
    os.mkfifo(path)
    out = subprocess.run([sys.executable, "-c", LEASED, str(path)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(fs.__file__).parents[3])})
    assert out.stdout.split() == [str(errno.EINVAL), "True", "2"], (out.stdout, out.stderr)


HOLDER = """
import fcntl, os, signal, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
except OSError as exc:
    print("no lease", exc.errno, flush=True)
    sys.exit(0)
signal.signal(signal.SIGIO, lambda *a: None)
print("held", flush=True)
signal.sigwait({signal.SIGIO}) if hasattr(signal, "sigwait") else signal.pause()
time.sleep(0.3)  # a holder that takes its time to let go
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="leases are Linux's")
def test_a_file_under_a_lease_is_read_once_its_holder_lets_go(tmp_path):
    path = tmp_path / "node"
    path.write_bytes(b"n-0123456789abcdef\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        said = holder.stdout.readline().strip()
        if said != "held":
            pytest.skip(f"this file system gives no leases ({said})")
        assert fs.read_bytes(path) == b"n-0123456789abcdef\n"
    finally:
        holder.kill()
        holder.wait(timeout=30)
