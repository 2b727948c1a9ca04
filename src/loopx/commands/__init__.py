"""One module per command group. Each has ``register(subparsers, name, help)`` that adds its
parser and sets ``_handler`` (called as ``handler(ctx, **args)``), ``_name`` (the command's name in
the JSON envelope) and ``_render`` (data dict -> text)."""

from __future__ import annotations


def add(sub, name: str, help_text: str, *, handler=None, render=None, example: str | None = None,
        description: str | None = None, command: str | None = None):
    """Add one (sub)command parser with an example in its help epilog."""
    epilog = f"example:\n  {example}" if example else None
    p = sub.add_parser(name, help=help_text, description=description or help_text, epilog=epilog)
    if handler is not None:
        p.set_defaults(_handler=handler, _render=render, _name=command or name)
    return p


def actions(parser, dest: str = "_action"):
    """Subparsers for a command group (``todo add``, ``todo list``, ...)."""
    from loopx.parsing import Parser

    return parser.add_subparsers(dest=dest, metavar="ACTION", parser_class=Parser, required=True)


def goal_opt(p, required: bool = False) -> None:
    p.add_argument("--goal-id", "--goal", dest="goal_id", metavar="ID", required=required,
                   help="the goal (optional when exactly one goal is active)")
