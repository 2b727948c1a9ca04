"""The argparse parser class for the command tree (imported only when argparse is needed)."""

from __future__ import annotations

import argparse

from loopx.errors import UsageError


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of printing and exiting."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(message, f"see `{self.prog} --help`")
