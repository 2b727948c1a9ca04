"""loopx: a local-first control plane for long-running AI agent work.

The kernel (``loopx.kernel``) owns the append-only store under ``.loopx/``; the CLI
(``loopx.cli``), the dashboard, the runner and the host hooks are thin clients of it.
"""

__version__ = "0.1.0"

# loopx's hot modules load from one file when it is there (loopx.codecache: why, and its contract)
from loopx import codecache as _codecache  # noqa: E402

_codecache.install()
