"""``python -m loopx``."""

from loopx.cli import entry

entry()
