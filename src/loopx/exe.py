"""The absolute command of this loopx for lines other programs run (the turn packet's write-back
commands, installed skills), cheap enough for hot paths: no pathlib, no shlex, no sysconfig
unless the fast answer is not there."""

from __future__ import annotations

import os
import sys

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./+=@,:-")


def loopx_command() -> str:
    """``resources.loopx_executable()`` without its imports where it can: the running ``loopx``
    script or the one next to the interpreter when its absolute path needs no quoting, else
    ``loopx_executable()``. Packets and skills print it so that a login shell which resets PATH
    (Codex runs ``bash -lc``) still finds this loopx. Never raises."""
    if os.name != "nt":
        argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
        cands = [os.path.abspath(argv0)] if os.path.basename(argv0) == "loopx" else []
        cands.append(os.path.join(os.path.dirname(sys.executable), "loopx"))
        for cand in cands:
            if os.path.isfile(cand) and os.access(cand, os.X_OK) and set(cand) <= _SAFE:
                return cand
    from loopx.resources import loopx_executable

    return loopx_executable()
