"""Files shipped next to the code: ``skills/`` and ``examples/``.

In a wheel they live inside the package as ``loopx/_data/<top>/...`` (pyproject force-includes
them); in a source checkout or an editable install they are the repository's top-level folders
next to ``src/``. ``data_path`` returns whichever exists (the packaged copy first).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_path(*parts: str) -> Path:
    """The path of ``parts`` (e.g. ``("examples", "demo-project")``) in the packaged data or the
    checkout. When neither exists the packaged path is returned (callers check ``exists()``)."""
    packaged = _PKG.joinpath("_data", *parts)
    if packaged.exists():
        return packaged
    checkout = _PKG.parent.parent.joinpath(*parts)
    if checkout.exists() and (_PKG.parent.parent / "src" / "loopx").is_dir():
        return checkout
    return packaged


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def loopx_executable() -> str:
    """The command that starts *this* installation of loopx, as a string for a POSIX shell (or
    ``cmd.exe`` on Windows), for recipes that run without your shell's PATH (cron, systemd, hooks).

    The absolute path of the ``loopx`` console script when it can be found: the script running
    now (``sys.argv[0]``), else the one next to the interpreter (a venv's ``bin/``, pipx, uv tool),
    else the interpreter's scripts folders (system and user scheme). A path that needs quoting is
    quoted. Falls back to ``<absolute python> -m loopx`` (a checkout run with ``python -m loopx``
    or ``PYTHONPATH``). Never raises."""
    if os.name == "nt":  # pragma: no cover - exercised on the Windows CI leg
        from subprocess import list2cmdline

        def quote(s: str) -> str:
            return list2cmdline([s])
    else:
        from shlex import quote

    names = ("loopx.exe", "loopx-script.py", "loopx") if os.name == "nt" else ("loopx",)
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if os.path.basename(argv0) in names and _runnable(argv0):
        return quote(os.path.abspath(argv0))
    folders = [os.path.dirname(sys.executable)]
    for scheme in (None, f"{os.name}_user"):
        try:
            folders.append(sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts"))
        except KeyError:
            continue
    for folder in folders:
        for name in names[:1] if os.name == "nt" else names:
            cand = os.path.join(folder or "", name)
            if folder and _runnable(cand) and _same_install(cand):
                return quote(os.path.abspath(cand))
    return f"{quote(os.path.abspath(sys.executable))} -m loopx"


def _same_install(script: str) -> bool:
    """Whether the console script ``script`` runs the interpreter running now (its ``#!`` line),
    so a ``loopx`` of another installation on the same PATH folder is never chosen. Windows
    launchers (``.exe``) are taken as they are."""
    if script.endswith(".exe"):
        return True
    try:
        with open(script, "rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return False
    if not first.startswith("#!"):
        return False
    interp = first[2:].strip().split()[0] if first[2:].strip() else ""
    if interp.endswith("/env") or "/bin/sh" in first:  # pip's `#!/bin/sh` trampoline for long paths
        return True
    try:
        return os.path.samefile(interp, sys.executable) or os.path.realpath(interp) == os.path.realpath(sys.executable)
    except OSError:
        return False
