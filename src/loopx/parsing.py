"""The argparse parser class for the command tree (imported only when argparse is needed)."""

from __future__ import annotations

import argparse
import re

from loopx.errors import UsageError


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of printing and exiting."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        m = re.match(r"argument \S+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:  # a mistyped command: name the close ones instead of listing all of them on one line
            import difflib

            choices = re.findall(r"'([^']*)'", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=3, cutoff=0.6)
            close += [c for c in choices if c.startswith(m.group(1)) and c not in close and m.group(1)]
            what = "command" if self.prog.count(" ") == 0 else "action"
            if close:
                alts = " or ".join(f"`{self.prog} {c}`" for c in close[:3])
                raise UsageError(f"unknown {what} {m.group(1)!r}", f"did you mean {alts}? (`{self.prog} --help` lists them)")
            raise UsageError(f"unknown {what} {m.group(1)!r}", f"`{self.prog} --help` lists the {what}s")
        raise UsageError(message, f"see `{self.prog} --help`")
