"""Interrupts (Ctrl-C, SIGTERM, SIGINT to a whole process group) never leave a traceback, a
measure or verify command running without its parent, or a turn that blocks the next one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and process groups")


@posix_only
def test_the_sandbox_launchers_signal_forwarding_tolerates_a_child_that_is_gone():
    """``kill -INT -PGID`` reaches the launcher and its child at once: the child can end and be
    reaped before the launcher passes the signal on (it was a ProcessLookupError traceback)."""
    from loopx.sandbox import mounts

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # ended and reaped: its pid names no process now
    handler = mounts.forwarder(child.pid)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler(sig, None)  # no exception
