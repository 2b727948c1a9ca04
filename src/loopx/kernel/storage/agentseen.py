"""Agent sessions seen by loopx's hooks, so a process that left the agent's process tree is
still known to be the agent's (issue 22, item 5).

``setsid -f env -u CLAUDECODE loopx gate approve ...`` from an agent's shell re-parents the
command to pid 1: walking its parents finds no agent marker. So each hook call made with an
agent marker records, once per session, ``{"sid", "host", "start", "markers"}`` (the hook's
session id, the host process: the topmost parent still carrying a marker, and its start time)
in ``<data folder>/agent-sessions.json``. Then, while such a host process lives:

- ``in_agent_session()``: this process's session id is a recorded agent session's (a double
  fork that kept the session);
- ``detached()``: no process from this one up to its session's leader, or up to the first one
  adopted by pid 1 (a session whose leader exited), has a controlling terminal: what ``setsid``, a
  daemonising double fork or an exited leader leaves, whatever program leads (a person's shell has a
  terminal). A list of launchers (shells, ``env``, interpreters) was tried first, and ``setsid -f
  awk 'BEGIN{system(...)}'`` walked past it: any program that can start another can lead. A cron
  job, a systemd service, ``ssh host cmd`` without ``-t`` or an editor's task without a terminal
  looks the same, so they are refused too, but only while an agent session recorded in the same
  data folder is running (the refusal says to use a terminal or the dashboard).

Linux only (``/proc``); elsewhere nothing is recorded and both are False. Outside a sandbox the
file is as writable by the agent as anything of the user's: this closes the measured holes, it is
not a boundary (docs/security.md).
"""

from __future__ import annotations

import json
import os

from loopx.config import data_home
from loopx.kernel.storage import layout
from loopx.kernel.storage.actors import AGENT_ENV_MARKERS
from loopx.kernel.storage.fs import MOST_CACHE, atomic_write, open_file


def _path() -> str:
    return os.path.join(data_home(), layout.AGENT_SESSIONS)


def _stat(pid: int) -> dict | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    comm = raw[raw.index(b"(") + 1:raw.rindex(b")")].decode("utf-8", "replace")
    f = raw[raw.rindex(b")") + 2:].split()
    return {"pid": pid, "comm": comm, "ppid": int(f[1]), "sid": int(f[3]), "tty": int(f[4]), "start": f[19].decode()}


def _has_marker(pid: int, markers) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = b"\0" + fh.read()
    except OSError:
        return False
    return any(b"\0" + m.encode() + b"=" in env for m in markers)


def _load() -> dict:
    try:
        with open_file(_path(), "r", encoding="utf-8", most=MOST_CACHE) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _alive(e: dict) -> bool:
    st = _stat(int(e.get("host") or 0)) if str(e.get("host", "")).isdigit() else None
    return st is not None and st["start"] == e.get("start")


def note(markers: list[str]) -> None:
    """Record this process's agent session (called by the hooks; cheap when already recorded)."""
    if not markers or not os.path.isdir("/proc/self"):
        return
    sid = os.getsid(0)
    data = _load()
    if str(sid) in data and _alive(data[str(sid)]):
        return

    host = os.getpid()
    pid = os.getppid()
    for _ in range(40):  # the topmost parent still carrying a marker: the host, not its short-lived shell
        if pid <= 1 or not _has_marker(pid, AGENT_ENV_MARKERS):
            break
        host = pid
        st = _stat(pid)
        if st is None:
            break
        pid = st["ppid"]
    st = _stat(host)
    if st is None:
        return
    data = {k: v for k, v in data.items() if isinstance(v, dict) and _alive(v)}
    data[str(sid)] = {"sid": sid, "host": host, "start": st["start"], "markers": list(markers)}

    try:
        os.makedirs(os.path.dirname(_path()), exist_ok=True)
        atomic_write(_path(), json.dumps(data, sort_keys=True), sync=False)
    except OSError:
        pass


def live() -> list[dict]:
    if not os.path.isdir("/proc/self"):
        return []
    return [e for e in _load().values() if isinstance(e, dict) and _alive(e)]


def in_agent_session(seen: list[dict]) -> bool:
    return os.getsid(0) in {e.get("sid") for e in seen}


def detached(pid: int | None = None) -> bool:
    """True when process ``pid`` (default: this one) and its parents up to its session's leader (or
    up to the first one pid 1 adopted) have no controlling terminal (module docstring); False on a
    terminal, or where ``/proc`` does not tell."""
    pid = os.getpid() if pid is None else pid
    for _ in range(64):
        st = _stat(pid)
        if st is None or st["tty"] != 0:
            return False  # a terminal up the tree: a person's shell
        if st["sid"] == st["pid"] or st["ppid"] <= 1:
            return True  # a leader with no terminal (setsid, a double fork), or orphaned to pid 1
        pid = st["ppid"]
    return False
