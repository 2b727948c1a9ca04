"""Files shipped next to the code: ``skills/`` and ``examples/``.

In a wheel they live inside the package as ``loopx/_data/<top>/...`` (pyproject force-includes
them); in a source checkout or an editable install they are the repository's top-level folders
next to ``src/``. ``data_path`` returns whichever exists (the packaged copy first).
"""

from __future__ import annotations

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


def loopx_executable() -> str:
    """The absolute path of this installation's ``loopx`` console script (``loopx.exe`` on
    Windows), looked up next to the running interpreter and in its scripts folders; when there is
    none (a source checkout run with ``python -m loopx``) the string ``<sys.executable> -m loopx``.
    Hook and cron command lines use it so they never depend on the caller's PATH."""
    import os
    import sys
    import sysconfig

    name = "loopx.exe" if os.name == "nt" else "loopx"
    dirs = [os.path.dirname(os.path.abspath(sys.executable))]
    for scheme in (None, f"{os.name}_user"):
        try:
            d = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if d:
            dirs.append(d)
    for d in dirs:
        cand = os.path.join(d, name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    return f"{os.path.abspath(sys.executable)} -m loopx"
