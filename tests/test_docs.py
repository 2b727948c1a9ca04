"""The CLI reference is generated from the parser and must list every command it has."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from loopx.cli import COMMANDS, build_parser


def test_cli_md_is_current_and_lists_every_command():
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "gen_cli.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(sub.choices) == set(COMMANDS)
    for name in sub.choices:
        assert f"## `loopx {name}`" in text, name


def test_every_command_help_has_an_example():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [name for name, p in sub.choices.items() if "example:" not in (p.epilog or "")]
    assert not missing, f"commands without an example in --help: {missing}"
