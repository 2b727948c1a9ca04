"""Tie an agent's life to the runner that started it (POSIX).

``loopx run`` does not start the agent directly: it starts this small guard (``python -I -S -c
GUARD``) as the leader of a new process group, and the guard starts the agent inside that group.
When the runner dies, even by ``kill -9``, the guard notices at once on Linux (the parent-death
signal, ``prctl(PR_SET_PDEATHSIG, SIGUSR1)`` through ctypes) and within a second elsewhere (its
parent changed), sends SIGTERM to the whole group, waits ``grace`` seconds, then SIGKILL. So the
agent, the shell around it and everything they started in the group end with the runner; nothing
keeps editing the project after the run's lease lapsed. (A process that leaves the group on
purpose, with ``setsid``, escapes; the next runner's check of the recorded group catches the rest,
see ``kernel.agentproc``.)

The guard ignores SIGTERM and SIGINT itself (the runner's own stop sends SIGTERM to the group: the
agent gets it and the guard waits for the agent), and exits with the agent's exit code (128+N
for a signal N). On Windows the agent is started directly (no guard; a job object is not built).
"""

from __future__ import annotations

import json
import os
import sys

GRACE = 3.0

GUARD = r"""
import json, os, signal, subprocess, sys, time
parent, grace, spec = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
agent = None
def orphaned(*_):
    try:
        os.killpg(0, signal.SIGTERM)
        end = time.monotonic() + grace
        while agent is not None and agent.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
    finally:
        os.killpg(0, signal.SIGKILL)
        os._exit(137)
signal.signal(signal.SIGUSR1, orphaned)
if sys.platform.startswith("linux"):
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGUSR1, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass
if os.getppid() != parent:
    orphaned()
agent = subprocess.Popen(spec["cmd"], shell=spec["shell"],
                         preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGINT)])
while True:
    try:
        rc = agent.wait(1.0)
        break
    except subprocess.TimeoutExpired:
        if os.getppid() != parent:
            orphaned()
os._exit(128 - rc if rc < 0 else rc)
"""


def wrap(command, *, shell: bool, grace: float = GRACE) -> list[str]:
    """The argv that runs ``command`` (argv list, or a shell string when ``shell``) under the
    guard, for a child of the calling process. POSIX only."""
    spec = json.dumps({"cmd": command, "shell": shell})
    return [sys.executable, "-I", "-S", "-c", GUARD, str(os.getpid()), str(grace), spec]
