"""The argparse command tree. ``main(argv) -> int`` is the only place that prints errors and picks
the exit code; handlers in ``loopx.commands`` receive a Context and plain keyword arguments.

Only the chosen command's module is imported and only its parser is filled in, so a cron job
calling ``loopx quota should-run`` every minute pays for one command, not for the whole tree.
"""

from __future__ import annotations

import os
import sys

from loopx import __version__
from loopx.config import env
from loopx.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_STATE, LoopxError, UsageError

# command -> (module under loopx.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "connect": ("connect", "create or attach .loopx/ in a project"),
    "status": ("status", "one screen: goals, what needs a human, todos, budget, next step"),
    "start-goal": ("start_goal", "start a goal with done_when, scope, verify command, quota and first todos"),
    "goal": ("goal", "list, show, update, pause, resume, finish or stop goals"),
    "todo": ("todo", "add, claim, renew, release, block, finish and archive todos"),
    "gate": ("gate", "human gates: open, list, show, approve, reject, check"),
    "scope": ("scope", "show, set or check the goal's allowed and denied paths"),
    "evidence": ("evidence", "record and inspect evidence (test runs, commands, commits, notes)"),
    "agent": ("agent", "register and list agents"),
    "handoff": ("handoff", "hand a goal or todo over to another agent"),
    "quota": ("quota", "the compute budget: show, set, should-run, spend-slot"),
    "next": ("next", "claim the next todo, open a run and print the turn packet"),
    "turn": ("turn", "finish a turn (run) with its result"),
    "run": ("run", "drive an agent command through governed turns"),
    "action": ("action", "protected actions loopx performs after a human approved them (push)"),
    "sandbox": ("sandbox", "run a host session or command inside loopx's sandbox and broker"),
    "sync": ("sync", "exchange the store with the git remote through refs/loopx/* (never a branch)"),
    "usage": ("usage", "what your Claude Code and Codex subscriptions have left (from local files)"),
    "history": ("history", "the event log, filtered"),
    "trace": ("trace", "export a goal's verifiable trace archive, or verify one"),
    "review-packet": ("review_packet", "a Markdown handoff and retrospective report"),
    "demo": ("demo", "run the bundled example project through the governed loop"),
    "anchor": ("anchor", "anchor the log's chain heads in git and the data folder now; --push sends them"),
    "doctor": ("doctor", "check the installation and the store; --fix applies safe repairs"),
    "update": ("update", "check for, plan and apply a self-update through the install channel"),
    "dashboard": ("dashboard", "the local browser dashboard"),
    "workflow-skills": ("workflow_skills", "install, check or remove loopx skills for agent hosts"),
    "hooks": ("hooks", "install, check or remove loopx hooks for agent hosts"),
    "hook": ("hook", "hook entry points called by agent hosts (stop, pre-tool, session-start)"),
    "heartbeat-prompt": ("heartbeat_prompt", "the prompt a scheduled automation should run each tick"),
    "watch": ("watch", "cheap checks that open a todo only when something changed"),
    "notify": ("notify", "notification channels: set, test, list, send"),
    "inbox": ("inbox", "what needs a person now, across every registered project"),
    "disconnect": ("disconnect", "remove a project from the registry (its files stay)"),
    "forget": ("disconnect", "alias of disconnect"),
    "schedule": ("schedule", "print a cron or systemd recipe with the absolute path of this loopx filled in"),
    "trial": ("trial", "research trials: state a hypothesis, list, show, apply (docs/experiments.md)"),
    "experiment": ("experiment", "research experiments: show, baseline, continue after a plateau, promote"),
}

GLOBAL_HELP = """global options (before or after the command):
  --project DIR        project root (default: nearest .loopx/ above the current directory)
  --format FORMAT      text (default), json (one envelope) or jsonl; --json is short for --format json
  --agent NAME         act as this agent (default: $LOOPX_AGENT; unset means a human)
  --quiet, -q          print nothing on success
  --debug              show tracebacks for internal errors

exit codes: 0 ok, 1 a clean "no", 2 usage, 3 state, 4 conflict, 70 internal, 130 interrupted
docs: docs/cli.md"""


# commands with a table form: --format csv|tsv -> (module under loopx.commands, function(data, sep) -> str)
TABULAR_FORMATS = {"csv": ",", "tsv": "\t"}
TABULAR = {"trial list": ("trial", "tabular")}


def _split_globals(argv: list[str]) -> tuple[dict, list[str]]:
    """Pull global options out of ``argv`` wherever they stand (up to a ``--``): the one reading of
    the global options. A malformed one is kept in ``opts["error"]`` (a UsageError) rather than
    raised, so the scan still finds ``--format json`` anywhere on the line and the error is
    reported in the format asked for."""
    opts: dict = {"project": None, "fmt": None, "agent": None, "quiet": False, "debug": False, "error": None}
    rest: list[str] = []
    takes = {"--project": "project", "--format": "fmt", "--agent": "agent"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest.extend(argv[i:])
            break
        name, eq, val = a.partition("=")
        if name in takes:
            if eq:
                opts[takes[name]] = val
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                opts[takes[name]] = argv[i + 1]
                i += 1
            elif opts["error"] is None:
                opts["error"] = UsageError(f"{name} needs a value", "see `loopx --help`")
        elif a == "--json":
            opts["fmt"] = "json"
        elif a in ("--quiet", "-q"):
            opts["quiet"] = True
        elif a == "--debug":
            opts["debug"] = True
        else:
            rest.append(a)
        i += 1
    if opts["fmt"] not in (None, "text", "json", "jsonl", *TABULAR_FORMATS):
        opts["error"] = opts["error"] or UsageError(f"unknown format {opts['fmt']!r}",
                                                    "use --format text, json or jsonl (csv, tsv: trial list)")
        opts["fmt"] = "json" if str(opts["fmt"]).startswith("json") else None
    return opts, rest


def build_parser(only: str | None = None):
    """The parser. With ``only``, just that command's subtree is filled in (fast path);
    ``only=""`` gives stubs for every command; None fills in everything (docs, tests)."""
    import importlib

    from loopx.parsing import Parser

    parser = Parser(prog="loopx", description="loopx: a control plane for long-running AI agent work.",
                    epilog=GLOBAL_HELP)
    parser.add_argument("--version", action="version", version=f"loopx {__version__}")
    sub = parser.add_subparsers(dest="_command", metavar="COMMAND", parser_class=Parser)
    for name, (module, help_text) in COMMANDS.items():
        if only is None or name == only:
            mod = importlib.import_module(f"loopx.commands.{module}")
            mod.register(sub, name, help_text)
        elif only == "":
            sub.add_parser(name, help=help_text)
    return parser


# The commands that cron jobs, hooks, agents and people call most skip argparse (whose imports cost
# about as much as the interpreter's own start-up): their few options are listed here with the
# handler and renderer. Any token not listed (--help, a typo, a repeated or repeatable option, a value
# that looks like an option, a missing required option) falls back to the full parser, so help and
# error messages are the same either way.
# words -> (module, handler, renderer, command name, {option: (dest, kind)}), the kind None for an
# option that takes a value, int for one argparse converts with type=int, list for a repeatable one
# (action="append"), else the constant a flag stores;
# the option table's "<pos>" lists the positional arguments' dests (all required), "<opt>" optional
# positionals after them (argparse's nargs="?"), "<req>" the options argparse requires, "<excl>" a
# mutually exclusive group.
_GOAL = {"--goal-id": ("goal_id", None), "--goal": ("goal_id", None)}
FAST: dict[tuple[str, ...], tuple[str, str, str, str, dict]] = {
    ("status",): ("status", "status", "render", "status", {**_GOAL, "--orient": ("orient", True)}),
    ("quota", "should-run"): ("quota", "quota_should_run", "render_decision", "quota should-run",
                              {**_GOAL, "--skip-exit": ("skip_exit", None), "--explain": ("explain", True),
                               "--no-record": ("record", False)}),
    ("todo", "add"): ("todo", "todo_add", "render_add", "todo add",
                      {**_GOAL, "--detail": ("detail", None), "--priority": ("priority", None),
                       "--acceptance": ("acceptance", None), "--verify": ("verify", None), "<pos>": ("title",)}),
    ("next",): ("next", "turn_next", "render_next", "next",
                {**_GOAL, "--lease": ("lease", None), "--dry-run": ("dry_run", True)}),
    ("turn", "finish"): ("turn", "turn_finish", "render_finish", "turn finish",
                         {"--run": ("run", None), "--result": ("result", None), "--verify": ("verify", True),
                          "--note": ("note", None), "<req>": ("run", "result")}),
    ("evidence", "add"): ("evidence", "evidence_add", "render_add", "evidence add",
                          {**_GOAL, "--kind": ("kind", None), "--summary": ("summary", None),
                           "--todo": ("todo", None), "--run": ("run", None), "--command": ("cmd", None),
                           "--exit-code": ("exit_code", None), "--commit": ("commit", None),
                           "<req>": ("kind", "summary")}),
    ("hook",): ("hook", "hook_entry", "render_entry", "hook",
                {**_GOAL, "--host": ("host", None), "--max-continuations": ("cap", None), "<pos>": ("event",)}),
    ("history",): ("history", "history", "render", "history",
                   {**_GOAL, "--since": ("since", None), "--type": ("type_prefix", None), "--limit": ("limit", None),
                    "--rounds": ("rounds", True), "--events": ("events", True), "<excl>": ("rounds", "events")}),
    # `--status` is left to the parser (it checks the choice)
    ("todo", "list"): ("todo", "todo_list", "render_list", "todo list",
                       {**_GOAL, "--ready": ("ready", True), "--all": ("all", True)}),
    # an experiment's results, read after every trial (issue 20: 10,000 trials within 2x the bare start)
    ("trial", "list"): ("trial", "trial_list", "render_list", "trial list", dict(_GOAL)),
    ("experiment", "show"): ("experiment", "experiment_show", "render_show", "experiment show",
                             {**_GOAL, "<opt>": ("goal",)}),
    ("gate", "open"): ("gate", "gate_open", "render_open", "gate open",
                       {**_GOAL, "--kind": ("kind", None), "--question": ("question", None),
                        "--context": ("context", None), "--run": ("run", None), "--blocks": ("blocks", list),
                        "<req>": ("kind", "question")}),
    # the write-back commands every turn's packet lists (kernel/policy/packet.py, commands)
    ("todo", "done"): ("todo", "todo_done", "render_done", "todo done",
                       {"--evidence": ("evidence", list), "--force-unverified": ("force", True),
                        "--next": ("next_titles", list), "--fence": ("fence", int), "--note": ("note", None),
                        "<pos>": ("todo",)}),
    ("quota", "spend-slot"): ("quota", "quota_spend", "render_spend", "quota spend-slot",
                              {"--run": ("run", None), "--slots": ("slots", None), "<req>": ("run",)}),
    # what the loopx skill tells an agent to ask before an edit (skills/loopx/SKILL.md)
    ("scope", "check"): ("scope", "scope_check", "render_check", "scope check", {**_GOAL, "<pos>": ("path",)}),
}


# whether the last main() took the fast path: its loopx modules belong in loopx.codecache's file;
# "exits": entry() ends the process right after main(); "paused": _run left the collector off for
# that end (entry turns it back on when it takes the normal way out)
LAST = {"hot": False, "exits": False, "paused": False, "failed": False}


def _fast(rest: list[str]):
    """(handler, renderer, command name, kwargs) when ``rest`` fits a FAST entry, else None."""
    for words, (module, handler, render, name, opts) in FAST.items():
        n = len(words)
        if tuple(rest[:n]) != words:
            continue
        args = _fast_args(rest[n:], opts)
        if args is None:
            return None
        mod = __import__(f"loopx.commands.{module}", fromlist=[handler])
        return getattr(mod, handler), getattr(mod, render), name, args
    return None


def _fast_args(tokens: list[str], opts: dict) -> dict | None:
    """The handler's keyword arguments from ``tokens`` (what follows the command's words) by the
    option table ``opts``, or None for anything argparse should see."""
    args: dict = {}
    positional = list(opts.get("<pos>", ()))
    optional = list(opts.get("<opt>", ()))
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("-") and (positional or optional):
            args[(positional or optional).pop(0)] = tok
            i += 1
            continue
        opt, eq, val = tok.partition("=")
        spec = opts.get(opt) if opt.startswith("--") else None
        if spec is None:
            return None
        dest, kind = spec
        if kind is None or kind is int or kind is list:
            if not eq:
                if i + 1 >= len(tokens) or tokens[i + 1].startswith("-"):
                    return None
                i += 1
                val = tokens[i]
            if not _fast_value(args, dest, kind, val):
                return None
        elif eq or dest in args:
            return None  # a flag with a value, or given twice: argparse decides what that means
        else:
            args[dest] = kind
        i += 1
    if positional or any(d not in args for d in opts.get("<req>", ())):
        return None
    if sum(d in args for d in opts.get("<excl>", ())) > 1:
        return None  # mutually exclusive options: argparse says so
    return args


def _fast_value(args: dict, dest: str, kind, val: str) -> bool:
    """Keep option value ``val`` in ``args`` as argparse would; False when argparse should decide
    (a second value of a single option, an integer option given something else)."""
    if kind is list:
        args.setdefault(dest, []).append(val)  # action="append"
        return True
    if dest in args:
        return False
    if kind is int:
        try:
            args[dest] = int(val)  # type=int
        except ValueError:
            return False  # argparse words the error
        return True
    args[dest] = val
    return True


def _first_command(argv: list[str]) -> str | None:
    for a in argv:
        if a == "--":
            return None
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    """Run one loopx command. Returns the exit code; never raises (but for SystemExit from --help)."""
    from loopx import output

    if sys.stdout is None or sys.stderr is None:  # started with fd 1 or 2 closed (`2>&-`): write nowhere
        _silence_streams(keep=True)
    output.setup_streams()
    argv = list(sys.argv[1:] if argv is None else argv)
    broker = env("LOOPX_BROKER")
    if broker:  # inside a sandbox: the store is reached only through the broker
        from loopx.sandbox.broker import forward

        return forward(broker, argv)
    opts, rest = _split_globals(argv)
    fmt = opts["fmt"] or "text"
    # the command's name once parsed, and whether its handler returned (whatever fails after that is
    # the output, not the command)
    run: dict = {"command": "loopx", "done": False}
    try:
        return _run(opts, rest, fmt, run)
    except LoopxError as exc:
        return _fail_with(fmt, run["command"], exc)
    except KeyboardInterrupt:
        return _fail(fmt, run["command"], EXIT_INTERRUPTED, {"code": "interrupted", "message": "interrupted",
                                                             "hint": None}, "interrupted", None)
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except OSError as exc:  # the store or an output stream cannot be used: a state problem, not a bug
        return _os_error(fmt, run["command"], run["done"], exc)
    except RecursionError:
        msg = "input nested too deeply to read"
        return _fail(fmt, run["command"], EXIT_STATE, {"code": "too_deep", "message": msg, "hint": None}, msg, None)
    except Exception as exc:  # the one place an unexpected error becomes exit 70
        if opts["debug"] or env("LOOPX_DEBUG"):
            import traceback

            traceback.print_exc()
        msg = f"internal error: {type(exc).__name__}: {exc}"
        return _fail(fmt, run["command"], EXIT_INTERNAL, {"code": "internal", "message": msg,
                                                          "hint": "rerun with --debug and report it"},
                     msg, "rerun with --debug and report it")


def _run(opts: dict, rest: list[str], fmt: str, run: dict) -> int:
    """Parse ``rest``, call the command's handler and print its reply; the exit code. Records the
    command's name and the handler's return in ``run`` for main's error messages."""
    if opts["error"] is not None:
        raise opts["error"]
    if not rest:
        rest = ["status", "--orient"]
    if rest == ["--version"]:
        if fmt == "json":  # the same envelope as every command's
            from loopx import output

            output.print_json(output.envelope("version", data={"version": __version__}))
        else:
            sys.stdout.write(f"loopx {__version__}\n")
        return 0
    # A hot command is a short process that makes next to no reference cycles, while its imports
    # and its marshal reads make thousands of containers: the cyclic collector would walk them all
    # several times for nothing (up to 0.1x of a bare interpreter's start). Paused for a hot
    # command only; every other one (the dashboard, `loopx run`, doctor) keeps it on, and an
    # in-process caller of main() gets its own setting back. entry() does not: it ends the process,
    # and turning the collector on there would walk every object the command made (its first
    # allocation would find them all young: 2-3% of `next`), right before the exit frees them all.
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        fast = _fast(rest)
        LAST["hot"] = fast is not None
        if fast is None and collecting:
            gc.enable()
        return _dispatch(opts, rest, fmt, run, fast)
    finally:
        LAST["paused"] = collecting and LAST["hot"] and LAST["exits"]
        if collecting and not LAST["paused"]:
            gc.enable()


def _dispatch(opts: dict, rest: list[str], fmt: str, run: dict, fast) -> int:
    handler, render, command, args = fast if fast is not None else _parse(rest)
    if handler is None:
        return 0
    run["command"] = command
    from loopx.context import Context

    ctx = Context(project=opts["project"], fmt=fmt, agent=opts["agent"], quiet=opts["quiet"],
                  debug=opts["debug"], command=command)
    if fmt in TABULAR_FORMATS and command not in TABULAR:
        raise UsageError(f"--format {fmt} is for tables ({', '.join(TABULAR)})", "use --format text or json")
    reply = handler(ctx, **args)
    run["done"] = True
    return _print_reply(ctx, reply, fmt, command, render, opts["quiet"])


def _print_reply(ctx, reply, fmt: str, command: str, render, quiet: bool) -> int:
    """Print a handler's reply (a Reply, a dict or None) in ``fmt``; its exit code."""
    from loopx import output

    if not isinstance(reply, output.Reply):
        reply = output.Reply(reply or {})
    migrated = getattr(getattr(ctx, "_store", None), "migrated", None)
    if migrated:  # said once: only the write that migrated the store sees this
        reply.warnings = [*reply.warnings, "migrated .loopx/ in place to store format 2; a verified copy of the "
                          f"old files is in .loopx/{migrated['backup'].rsplit('.loopx/', 1)[-1]}"]
    if fmt in TABULAR_FORMATS:
        mod, fn = TABULAR[command]
        __import__(f"loopx.commands.{mod}")  # not importlib (with warnings): `trial list --format tsv` is hot
        tabular = getattr(sys.modules[f"loopx.commands.{mod}"], fn)
        text = tabular(reply.data, TABULAR_FORMATS[fmt])  # a str, or a Spliced of a rendered cache
        output.print_text(text.rstrip("\n") if isinstance(text, str) else text)
    elif fmt != "text":
        output.print_json(output.envelope(command, data=reply.data, exit_code=reply.exit_code,
                                          warnings=reply.warnings))
    else:
        output.print_warnings(reply.warnings)
        if not quiet:
            output.print_text((render or output.generic)(reply.data))
    return reply.exit_code


def _os_error(fmt: str, command: str, done: bool, exc: OSError) -> int:
    """An OSError as a one-line state error (exit 4): what could not be read or written, and what
    to do; after the handler returned, that the command was carried out all the same."""
    where = f" {exc.filename}" if exc.filename else ""
    msg = f"cannot read or write{where}: {exc.strerror or exc}"
    hint = "check that path's type and permissions (`loopx doctor` checks the store)"
    if done:  # e.g. stdout on a full disk: the command itself was carried out
        msg = f"{command} was done, but its output could not be written: {exc.strerror or exc}"
        hint = "do not run it again; `loopx status` and `loopx history` show what it did"
    elif exc.errno in (28, 122):  # ENOSPC, EDQUOT: nothing was recorded, nothing was left behind
        hint = "free some disk space and retry (nothing was recorded)"
    return _fail(fmt, command, EXIT_STATE, {"code": "io_error", "message": msg, "hint": hint}, msg, hint)


def _parse(rest: list[str]):
    """(handler, renderer, command name, kwargs) through argparse; handler None after --help."""
    name = _first_command(rest)
    parser = build_parser(name or "")  # "" = stubs only: --help imports no command module
    try:
        ns = parser.parse_args(rest)
    except SystemExit as exc:  # --help printed already
        if exc.code:
            raise
        return None, None, None, None
    args = vars(ns)
    handler = args.pop("_handler", None)
    command = args.pop("_name", None) or args.get("_command") or "loopx"
    render = args.pop("_render", None)
    for k in [k for k in args if k.startswith("_")]:
        args.pop(k)
    if handler is None:  # a group without its action: show the group's help
        parser.parse_args([name, "--help"] if name else ["--help"])
    return handler, render, command, args


def _fail_with(fmt: str, command: str, exc: LoopxError) -> int:
    """Print ``exc`` worded for ``loopx <command>``: the kernel names fields and steps, the CLI
    names flags and commands (loopx.commands.phrases)."""
    from loopx.commands.phrases import for_cli

    for_cli(exc, command)
    return _fail(fmt, command, exc.exit_code, exc.as_dict(), exc.message, exc.hint)


def _fail(fmt: str, command: str, code: int, err: dict, message: str, hint: str | None) -> int:
    from loopx import output

    LAST["failed"] = True  # what this process loaded is not what the command loads (codecache.update)
    try:
        if fmt != "text":
            try:
                output.print_json(output.envelope(command, exit_code=code, error=err))
            except OSError:  # stdout is what failed (a full disk): say it on stderr
                output.print_error(message, hint)
                raise
        else:
            output.print_error(message, hint)
    except OSError:  # stdout or stderr is gone (full disk, closed): the exit code still tells
        _silence_streams()
    return code


def _silence_streams(keep: bool = False) -> None:
    """Point stdout/stderr at devnull so the interpreter's flush at exit cannot print a traceback;
    with ``keep``, only the ones that are missing (None: the process started with it closed)."""
    try:
        null = open(os.devnull, "w")  # noqa: SIM115 - lives until the process exits
    except OSError:
        return
    if not keep or sys.stdout is None:
        sys.stdout = null
    if not keep or sys.stderr is None:
        sys.stderr = null


def entry() -> None:
    """Console-script entry point (and ``python -m loopx``): ``main()``, then the exit.

    When nothing is left for the interpreter's shutdown to do (no ``atexit`` callback, no thread
    but this one; every file loopx writes is closed by a ``with`` before its command returns), the
    process ends with ``os._exit`` after flushing stdout and stderr: tearing down the modules and
    objects of a command costs about 3 ms, as much as a tenth of a hot command.
    A profiler or tracer running (``python -m cProfile``, coverage) or ``LOOPX_FULL_EXIT=1`` takes
    the normal way out, with the cyclic collector on again when the hot command paused it."""
    LAST["exits"] = True
    LAST["failed"] = False
    try:
        code = main()
    except BaseException:  # an interrupt while an error was reported: on its way out, the collector back on
        _collector_back()
        raise
    finally:
        LAST["exits"] = False
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        _silence_streams()
        code = code or EXIT_STATE
    if LAST["hot"]:
        from loopx import codecache
        from loopx.kernel.storage import fs

        codecache.update(fs, complete=not LAST["failed"])
    if _nothing_at_exit():
        os._exit(code)
    _collector_back()
    sys.exit(code)


def _collector_back() -> None:
    """Turn the cyclic collector back on when ``_run`` left it paused for ``entry``'s quick exit."""
    if LAST["paused"]:
        import gc

        LAST["paused"] = False
        gc.enable()


def _nothing_at_exit() -> bool:
    """True when skipping the interpreter's shutdown loses nothing: no ``atexit`` callback
    (multiprocessing, tempfile's finalizers and concurrent.futures register one), no live thread
    besides the main one, no profiler or tracer (``cProfile``, coverage: through ``sys.setprofile``
    or ``sys.settrace``, or from 3.12 as a ``sys.monitoring`` tool, ids 0-5), and ``LOOPX_FULL_EXIT``
    unset or ``0``."""
    import atexit

    try:
        if atexit._ncallbacks():  # CPython's count of registered callbacks
            return False
    except AttributeError:  # pragma: no cover - other interpreters: take the normal way out
        return False
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return False
    if sys.getprofile() is not None or sys.gettrace() is not None:  # a profiler or coverage reports at exit
        return False
    monitoring = getattr(sys, "monitoring", None)  # 3.12+: cProfile and coverage may register here instead
    if monitoring is not None and any(monitoring.get_tool(i) is not None for i in range(6)):
        return False
    return env("LOOPX_FULL_EXIT") in (None, "0")
