"""``loopx run``: drive an agent command through governed turns (see loopx.runner)."""

from __future__ import annotations

from loopx.commands import add, goal_opt


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=run, render=render, command="run",
            example="loopx run --agent-cmd './my-agent.sh {prompt_file}' --once",
            description="Loop: should-run -> next -> agent -> verify -> evidence -> finish -> spend. The agent "
                        "is a preset (global --agent claude-code|codex|cursor|opencode|gemini) or --agent-cmd "
                        "CMD, which gets the packet on stdin and may use {prompt_file}, {packet_json}, {run_id}, "
                        "{goal_id}, {todo_id}. Presets run the host headless in the form that reports tokens and "
                        "cost, with a permission mode (--permission-mode or the goal's default; read-only, edit, "
                        "full: docs/usage.md maps them per host). Every turn has a time limit (--timeout, default "
                        "30m). A host that cannot work (not logged in, offline, rate limited, crashed, timed out, "
                        "idle) ends the turn with that reason for a human. Exit 0 when it worked or cleanly "
                        "stopped, 1 when an agent failed or timed out, 4 when another runner drives the goal, "
                        "130 on Ctrl-C.")
    goal_opt(p)
    p.add_argument("--agent-cmd", metavar="CMD", help="shell command of a custom agent")
    p.add_argument("--once", action="store_true", help="at most one turn (the cron form)")
    p.add_argument("--max-turns", metavar="N", help="stop after N turns")
    p.add_argument("--timeout", metavar="DUR", help="stop an agent turn after this long (default 30m; e.g. 2h)")
    p.add_argument("--permission-mode", metavar="MODE", choices=("read-only", "edit", "full"),
                   help="what a preset host may do: read-only, edit or full (default: the goal's; human-only)")
    p.add_argument("--lease", metavar="DUR", help="lease on the todo and run, renewed while the agent works (default 30m)")
    p.add_argument("--dry-run", action="store_true", help="print the packet of the next turn; claim and spend nothing")


DEFAULT_TIMEOUT = 1800.0


def run(ctx, goal_id=None, agent_cmd=None, once=False, max_turns=None, timeout=None, lease=None, dry_run=False,
        permission_mode=None):
    import sys

    from loopx import output
    from loopx.errors import UsageError
    from loopx.kernel.read import validate
    from loopx.kernel.storage import clock
    from loopx.kernel.write import todos
    from loopx.runner import loop, presets

    if not ctx.agent and not agent_cmd:
        raise UsageError("no agent to run", f"pass --agent ({', '.join(presets.names())}) or --agent-cmd 'CMD'")
    preset = None
    if not agent_cmd:
        if ctx.agent not in presets.PRESETS:
            raise UsageError(f"--agent {ctx.agent!r} is not a preset and no --agent-cmd was given",
                             f"use one of {', '.join(presets.names())}, or add --agent-cmd 'CMD'")
        preset = ctx.agent
    n = validate.count(max_turns, "--max-turns", low=1, high=100_000) if max_turns is not None else None
    secs = clock.parse_duration(timeout) if timeout is not None else DEFAULT_TIMEOUT
    if secs <= 0:
        raise UsageError("--timeout must be positive", "use e.g. --timeout 20m")
    if permission_mode is not None:
        from loopx.commands.human import require_human

        require_human(ctx, "choosing a permission mode", agent_flag=False)
    echo = None if ctx.json or ctx.quiet else sys.stderr

    def log(msg):
        if not ctx.json and not ctx.quiet:
            output.print_text(output.safe(msg), sys.stderr)

    _stop_signals_interrupt()
    res = loop.drive(ctx.store(), ctx.agent or "shell", goal_id=goal_id, preset=preset, agent_cmd=agent_cmd,
                     once=once, max_turns=n, timeout=secs, dry_run=dry_run, lease=todos.lease_seconds(lease),
                     echo=echo, log=log, permission_mode=permission_mode)
    return output.Reply(res, res["exit_code"])


def _stop_signals_interrupt() -> None:
    """SIGTERM (systemd stop, `kill`) and SIGHUP (terminal closed) take the Ctrl-C path: the agent's
    process group is stopped and the open run closed as failed, instead of orphaning both."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, interrupt)


def render(d: dict) -> str:
    from loopx.output import safe

    if d.get("dry_run_packet"):
        return safe(d["dry_run_packet"], one_line=False) + "\n(dry run: nothing was claimed or spent)"
    turns = d["turns"]
    spent = sum(t.get("slots") or 0 for t in turns)
    lines = [f"{len(turns)} turn(s), {spent} slot(s) spent"]
    from loopx.usage.text import usage_line

    for t in turns:
        lines.append(f"  {t['run_id']} {t['todo_id'] or 'planning'}: {t['result']}"
                     f"{' (verified)' if t.get('verified') else ''}{' - ' + safe(t['note']) if t.get('note') else ''}"
                     f" [{usage_line(t.get('usage'))}]")
        if t.get("setup_error"):
            e = t["setup_error"]
            lines.append(f"  needs you: {e['reason']}: {safe(e['message'])}")
    s = d.get("stop")
    if d["stopped_because"] == "decision" and s:
        lines.append(f"stopped: {s['decision']} ({s['reason']}): {safe(s['message'])}")
        if s.get("gate_id"):
            lines.append(f"a human decides: loopx gate approve {s['gate_id']} --confirm {s['gate_id']}")
    elif d["stopped_because"]:
        lines.append(f"stopped: {d['stopped_because'].replace('_', ' ')}")
    return "\n".join(lines)
