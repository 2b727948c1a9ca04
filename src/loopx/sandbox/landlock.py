"""Linux Landlock through ``ctypes`` system calls (no dependency): an unprivileged process limits
itself, and every process it starts, to the file trees and TCP ports a policy grants.

- ``abi() -> int``: the kernel's Landlock ABI version (0: not available: not Linux, a kernel
  before 5.13, Landlock not enabled at boot, or a container's seccomp filter forbids the calls).
- ``apply(policy) -> dict``: restrict the calling process (and its future children) to
  ``policy`` (``loopx.sandbox.policy``'s dict). Sets ``no_new_privs`` first (Landlock needs it
  without CAP_SYS_ADMIN, and it stops a set-uid binary from escaping). Returns
  ``{"abi", "fs", "net", "scoped"}`` (what was enforced). Raises OSError when the kernel refuses.

What each ABI adds (the kernel's documentation, userspace-api/landlock): 1 file-system access
rights, 2 ``REFER`` (renames and links across directories), 3 ``TRUNCATE``, 4 TCP ``bind`` and
``connect`` by port, 5 ioctl on devices, 6 scoping of abstract unix sockets and signals. Root is
restricted like anyone else: Landlock does not look at capabilities once a domain is in force.
A restricted process also cannot change the mount topology (mount, umount, pivot_root), so it
cannot get around the rules by remounting.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

# syscall numbers: the generic table (aarch64, riscv) and x86_64 share them for Landlock
_NR = {"x86_64": (444, 445, 446), "amd64": (444, 445, 446), "aarch64": (444, 445, 446), "arm64": (444, 445, 446)}
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38

FS = {"execute": 1 << 0, "write_file": 1 << 1, "read_file": 1 << 2, "read_dir": 1 << 3, "remove_dir": 1 << 4,
      "remove_file": 1 << 5, "make_char": 1 << 6, "make_dir": 1 << 7, "make_reg": 1 << 8, "make_sock": 1 << 9,
      "make_fifo": 1 << 10, "make_block": 1 << 11, "make_sym": 1 << 12, "refer": 1 << 13, "truncate": 1 << 14,
      "ioctl_dev": 1 << 15}
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


def _fs_all(abi: int) -> int:
    bits = (1 << 13) - 1
    if abi >= 2:
        bits |= FS["refer"]
    if abi >= 3:
        bits |= FS["truncate"]
    if abi >= 5:
        bits |= FS["ioctl_dev"]
    return bits


FILE_ONLY = FS["execute"] | FS["write_file"] | FS["read_file"] | FS["truncate"] | FS["ioctl_dev"]
READ = FS["execute"] | FS["read_file"] | FS["read_dir"]
WRITE_FILE = FS["write_file"] | FS["truncate"]


class _Ruleset(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _numbers():
    return _NR.get(platform.machine().lower())


def abi() -> int:
    """The Landlock ABI version of this kernel, 0 when Landlock cannot be used here."""
    if not sys.platform.startswith("linux"):
        return 0
    nr = _numbers()
    if nr is None:
        return 0
    try:
        v = _libc().syscall(nr[0], None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return v if v > 0 else 0


def _err(what: str) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, f"landlock {what}: {os.strerror(e)}")


def apply(policy: dict) -> dict:
    """Restrict this process to ``policy``: ``read`` (trees readable and executable), ``write``
    (trees fully writable), ``read_files``/``write_files`` (single files), ``connect`` (TCP ports
    that may be connected to; None: the network is not filtered), ``scope_signals`` (bool: no
    signal to a process outside the sandbox). Paths that do not exist are skipped. Raises OSError."""
    v = abi()
    if v < 1:
        raise OSError(95, "Landlock is not available on this kernel")
    libc = _libc()
    create, add, restrict = _numbers()
    handled = _fs_all(v)
    attr = _Ruleset(handled, 0, 0)
    size = 8
    net = policy.get("connect")
    if v >= 4 and net is not None:
        attr.handled_access_net = NET_CONNECT_TCP
        size = 16
    if v >= 6:
        attr.scoped = (SCOPE_SIGNAL if policy.get("scope_signals", True) else 0) | SCOPE_ABSTRACT_UNIX_SOCKET
        size = 24
    fd = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise _err("create_ruleset")
    try:
        rw = handled
        grants = [(p, READ | (FS["ioctl_dev"] if v >= 5 else 0)) for p in policy.get("read", ())]
        grants += [(p, rw) for p in policy.get("write", ())]
        grants += [(p, READ & FILE_ONLY) for p in policy.get("read_files", ())]
        grants += [(p, (READ | WRITE_FILE | FS["ioctl_dev"]) & FILE_ONLY & handled) for p in policy.get("write_files", ())]
        for path, access in grants:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path that does not exist grants nothing
            try:
                if not os.path.isdir(path):
                    access &= FILE_ONLY
                rule = _PathBeneath(access & handled, pfd)
                if libc.syscall(add, ctypes.c_int(fd), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule),
                                ctypes.c_uint32(0)) != 0:
                    raise _err(f"add_rule {path}")
            finally:
                os.close(pfd)
        if attr.handled_access_net:
            for port in net or ():
                net_rule = _NetPort(NET_CONNECT_TCP, int(port))
                if libc.syscall(add, ctypes.c_int(fd), ctypes.c_int(RULE_NET_PORT), ctypes.byref(net_rule),
                                ctypes.c_uint32(0)) != 0:
                    raise _err(f"add_rule port {port}")
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _err("no_new_privs")
        if libc.syscall(restrict, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise _err("restrict_self")
    finally:
        os.close(fd)
    return {"abi": v, "fs": True, "net": bool(attr.handled_access_net), "scoped": bool(attr.scoped)}
