"""Which agent process a run started, and whether it still runs (for "never reclaim a todo whose
previous agent is alive").

``describe(pid)`` -> ``{"pid", "pgid", "host", "boot_id", "start"}``: the process-group leader
``loopx run`` started for the turn (its guard, see ``runner.guard``), the machine's host name, the
Linux boot id and the process start time in clock ticks since boot (``/proc/<pid>/stat`` field
22; None elsewhere). It is recorded in the run (``run.attached``).

``alive(info)`` is True when, on this machine and since the same boot, the process group still has
a running member (Linux: a process in ``/proc`` with that group that is not a zombie; elsewhere
``killpg(pgid, 0)``, where a group of another user counts as alive). Another host, another
boot, Windows, or a malformed record: False (loopx cannot see it, and a guess must not block work
for ever).
"""

from __future__ import annotations

import os


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def describe(pid: int) -> dict:
    """The record of process ``pid`` (a group leader) for ``run.attached``."""
    import socket

    try:
        pgid = os.getpgid(pid) if hasattr(os, "getpgid") else pid
    except OSError:
        pgid = pid
    return {"pid": pid, "pgid": pgid, "host": socket.gethostname(), "boot_id": _boot_id(),
            "start": _start_ticks(pid)}


def alive(info) -> bool:
    """Whether the process group ``info`` describes still has a live member here (see above)."""
    import socket

    if os.name != "posix" or not isinstance(info, dict):
        return False
    pgid = info.get("pgid")
    if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 1:
        return False
    if info.get("host") != socket.gethostname():
        return False
    boot = _boot_id()
    if boot and info.get("boot_id") and info["boot_id"] != boot:
        return False
    if os.path.isdir("/proc/self"):  # Linux: a group of zombies nobody reaped yet is not alive
        return _group_running(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs (state other than zombie/dead), from ``/proc``."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return False
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read()
            fields = raw[raw.rindex(b")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
        except (OSError, ValueError, IndexError):
            continue
    return False
