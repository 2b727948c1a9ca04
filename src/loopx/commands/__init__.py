"""One module per command group. Each has ``register(subparsers, name, help)`` that adds its
parser and sets ``_handler`` (called as ``handler(ctx, **args)``), ``_name`` (the command's name in
the JSON envelope) and ``_render`` (data dict -> text)."""

from __future__ import annotations

import os

GLOBALS = ("global options (before or after the command): --project DIR, --format text|json|jsonl (--json),\n"
           "  --agent NAME, --quiet (-q), --debug; exit codes: 0 ok, 1 no, 2 usage, 3 state, 4 conflict")


def stop_signals_interrupt() -> None:
    """SIGTERM (systemd stop, `kill`) and SIGHUP (terminal closed) take the Ctrl-C path in a
    command that runs other processes (an agent, a measure command): they are stopped, whole
    process group and all, and the open run closed, instead of orphaning them. The main thread
    only (signal handlers cannot be set elsewhere)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, interrupt)


def add(sub, name: str, help_text: str, *, handler=None, render=None, example: str | None = None,
        description: str | None = None, command: str | None = None):
    """Add one (sub)command parser with an example in its help epilog."""
    epilog = (f"example:\n  {example}\n\n" if example else "") + GLOBALS
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


def scope_root(ctx, scope: str) -> str:
    """The folder paths are relative to: the home folder (user) or the project (project)."""
    from loopx.errors import UsageError

    if scope == "user":
        return os.path.expanduser("~")
    if scope != "project":
        raise UsageError(f"unknown scope {scope!r}", "use --scope project or --scope user")
    if ctx.project:
        if not os.path.isdir(ctx.project):
            raise UsageError(f"--project {ctx.project!r} is not a directory", "pass the project's root directory")
        return os.path.abspath(ctx.project)
    from loopx.kernel.storage.fs import project_dir

    return project_dir() or os.getcwd()
