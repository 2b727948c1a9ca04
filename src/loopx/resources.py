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
