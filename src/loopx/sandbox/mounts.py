"""Read-only views of protected paths inside a writable tree (Linux mount namespace).

Landlock only grants, per tree, so on its own it cannot make the project writable but for
``.loopx/`` and ``.git/``. The launcher therefore first enters a private mount namespace
(``unshare(CLONE_NEWNS)``; as another user than root together with a user namespace that maps
only the caller's own ids) and there binds each protected path onto itself read-only; then
Landlock grants the whole tree. Landlock forbids a restricted process to mount, unmount or
pivot_root, so the views cannot be undone. A protected path is a mount point, so it cannot be
renamed, removed or replaced (EBUSY), and no hard link reaches it from outside (EXDEV); every
folder between the tree's root and a protected path is made a mount point as well, so the folder
holding ``.git/config`` cannot be renamed away and rebuilt. Nothing propagates back: the new
namespace's mounts are private.

``setup(roots, ro, rw, hide=()) -> bool``: True when the views are in place, False when this
system does not allow it (then the caller falls back to granting the tree child by child). Each
``hide`` path (an experiment's holdout data) gets an empty view last, over every other mount: a
folder an empty read-only ``tmpfs``, a file ``/dev/null`` on a ``nodev`` mount (opening it fails),
so a read, a symbolic link to it or a hard link of it (EXDEV: another mount) shows nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _unshare(libc) -> bool:
    if libc.unshare(CLONE_NEWNS) == 0:
        return True
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNS | CLONE_NEWUSER) != 0:
        return False
    try:  # only our own ids exist inside: after exec the agent holds no capability
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        with open("/proc/self/uid_map", "w") as fh:
            fh.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as fh:
            fh.write(f"{gid} {gid} 1")
    except OSError:
        return False
    return True


def _mount(libc, src, target, flags) -> None:
    if libc.mount(src, target, None, ctypes.c_ulong(flags), None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {target.decode()}: {os.strerror(e)}")


def _hide(libc, path: str) -> None:
    b = os.fsencode(path)
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    if os.path.isdir(path) and not os.path.islink(path):
        if libc.mount(b"tmpfs", b, b"tmpfs", ctypes.c_ulong(flags), b"size=4k,mode=0500") != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"mount tmpfs {path}: {os.strerror(e)}")
        return
    _mount(libc, b"/dev/null", b, MS_BIND)
    _mount(libc, b"none", b, MS_REMOUNT | MS_BIND | flags)


def _show_at(libc, view: dict) -> None:
    """Show a turn's private clone (``tree``) at the project's own path (``at``): the project's
    objects read-only at ``tree/.git/project-objects`` (the clone's alternates entry), the clone
    over the project's checkout (its files and its ``.git``: the project's are not visible at all),
    the project's own files git ignores (``shared``) back at their place, and the project's store
    read-only at its usual place. Paths, the host's trust and settings
    keyed by the project's folder, and every absolute path the agent sees stay what they are."""
    ro = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    tree, at = os.fsencode(view["tree"]), os.fsencode(view["at"])
    objs = os.open(view["objects"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    store = os.open(view["store"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    # the project's own files git ignores, opened before the clone covers them
    shared = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in view.get("shared") or () if os.path.exists(p)]
    try:
        target = os.path.join(tree, b".git", b"project-objects")
        _mount(libc, b"/proc/self/fd/%d" % objs, target, MS_BIND)
        _mount(libc, b"none", target, ro)
        _mount(libc, tree, at, MS_BIND | MS_REC)
        for path, fd in shared:
            _mount(libc, b"/proc/self/fd/%d" % fd, os.fsencode(path), MS_BIND | MS_REC)
        shown = os.path.join(at, os.fsencode(os.path.relpath(view["store"], view["at"])))
        _mount(libc, b"/proc/self/fd/%d" % store, shown, MS_BIND | MS_REC)
        _mount(libc, b"none", shown, ro)
    finally:
        for fd in [objs, store, *(fd for _, fd in shared)]:
            os.close(fd)


def setup(roots: list[str], ro: list[str], rw: list[str], hide=(), view: dict | None = None) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    ro = [p for p in ro if os.path.lexists(p) and not os.path.islink(p) and any(_under(p, r) for r in roots)]
    if not _unshare(libc):  # always a namespace of our own: own_pids() remounts /proc inside it
        return False
    try:
        _mount(libc, b"none", b"/", MS_REC | MS_PRIVATE)
        pins: set[str] = set()
        for p in ro:
            root = max((r for r in roots if _under(p, r)), key=len)
            d = os.path.dirname(p)
            while _under(d, root) and d != root:
                pins.add(d)
                d = os.path.dirname(d)
        ops = [(p, "pin") for p in pins] + [(p, "ro") for p in ro]
        ops += [(p, "rw") for p in rw if os.path.isdir(p) and any(_under(p, q) for q in ro)]
        order = {"pin": 0, "ro": 1, "rw": 2}
        ops.sort(key=lambda op: (op[0].count(os.sep), order[op[1]]))
        for path, kind in ops:
            b = os.fsencode(path)
            _mount(libc, b, b, MS_BIND | MS_REC)
            if kind == "ro":
                _mount(libc, b"none", b, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
            elif kind == "rw":
                _mount(libc, b"none", b, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
        if view:
            _show_at(libc, view)
        for path in sorted(p for p in hide if os.path.lexists(p)):
            _hide(libc, path)
    except OSError:
        return False
    return True


def forwarder(pid: int):
    """A signal handler that passes the signal on to ``pid``. The child may be gone already: a
    signal sent to the whole process group (``kill -INT -PGID``, systemd's ``KillSignal``) reaches
    it too, and it can end (and be reaped) before or while the signal is passed on; that is no
    error, the exit status is what ``own_pids`` leaves with."""
    def handler(signum: int, _frame) -> None:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    return handler


def own_pids() -> int | None:
    """Move what runs next into a new PID namespace with its own ``/proc``, so the sandboxed
    command sees only its own processes: not the environment or files of ``loopx run`` and the
    user's other processes (Landlock alone does not hide ``/proc/PID/environ`` of its ancestors on
    every kernel). Forks: returns None in the child (pid 1 of the new namespace, ``/proc``
    remounted), or in the parent the exit status to leave with once the child ended (signals are
    passed on to it). Returns -1 (and does not fork) when this system does not allow it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID) != 0:
        return -1
    pid = os.fork()
    if pid == 0:
        try:
            if libc.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None) != 0:
                os._exit(126)
        except OSError:
            os._exit(126)
        return None
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forwarder(pid))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)
