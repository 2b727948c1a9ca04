"""Generate docs/cli.md from the argparse tree (so the reference cannot drift from the code).

    python docs/gen_cli.py          # rewrite docs/cli.md
    python docs/gen_cli.py --check  # exit 1 when docs/cli.md is out of date (used by the tests)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from loopx.cli import COMMANDS, GLOBAL_HELP, build_parser  # noqa: E402
from loopx.config import VARS  # noqa: E402

HEAD = """# loopx command reference

Generated from the parser by `python docs/gen_cli.py`; a test fails when it is out of date.

Every command accepts the global options before or after its name, prints one JSON envelope with
`--format json` (so does `loopx --version`: command `version`, `data.version`), and uses
these exit codes:

| exit | meaning |
|---|---|
| 0 | ok (for `quota should-run`: run now) |
| 1 | a clean "no": should-run says not now, a check fails, doctor finds problems |
| 2 | usage: bad arguments or values, unknown id, ambiguous prefix |
| 3 | state: not connected, unreadable store, newer format, read-only store |
| 4 | conflict: store busy, claim held by another agent, gate already decided, stale fence, humans-only action |
| 70 | internal error (traceback only with `--debug`) |
| 130 | interrupted |

```
{global_help}
```
"""


def _subparsers(p: argparse.ArgumentParser):
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _args(p: argparse.ArgumentParser) -> list[str]:
    rows = []
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.help == argparse.SUPPRESS:
            continue
        name = ", ".join(a.option_strings) if a.option_strings else a.metavar or a.dest
        if a.option_strings and a.nargs != 0:
            name += f" {a.metavar or a.dest.upper()}"
        helptext = (a.help or "").replace("|", "\\|")
        if a.choices and not isinstance(a, argparse._SubParsersAction):
            helptext += f" (one of: {', '.join(map(str, a.choices))})"
        if a.required:
            helptext += " (required)"
        rows.append(f"| `{name}` | {helptext} |")
    return (["| argument | meaning |", "|---|---|", *rows] if rows else [])


def _section(path: str, p: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} `loopx {path}`", "", p.description or "", ""]
    usage = p.format_usage().replace("usage: ", "").strip()
    out += ["```", usage, "```", ""]
    out += _args(p)
    if p.epilog:
        out += ["", "```", p.epilog.strip(), "```"]
    out.append("")
    sub = _subparsers(p)
    if sub:
        for name, child in sub.choices.items():
            out += _section(f"{path} {name}", child, level + 1)
    return out


def render() -> str:
    parser = build_parser()
    lines = [HEAD.format(global_help=GLOBAL_HELP), "## Environment", "",
             "Read only through `loopx.config` (generated from its `VARS` table). An empty variable counts as unset. "
             "A number of seconds may have a fraction; a negative one counts as 0 (`LOOPX_SYNC_TIMEOUT`: 1), and one "
             "that is not a number (`10s`, `inf`) stops the command that reads it with exit 2 (code `bad_env`), "
             "naming the variable.", "",
             "| variable | default | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | {f'`{d}`' if d else '—'} | {m.replace('|', '/')} |" for k, (d, m) in sorted(VARS.items())]
    lines += ["", "## Commands", ""]
    lines += [f"- [`{n}`](#loopx-{n}) — {h}" for n, (_, h) in COMMANDS.items()]
    lines.append("")
    sub = _subparsers(parser)
    for name in COMMANDS:
        lines += _section(name, sub.choices[name], 2)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    text = render()
    target = HERE / "cli.md"
    if "--check" in sys.argv:
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            print("docs/cli.md is out of date: run `python docs/gen_cli.py`")
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
