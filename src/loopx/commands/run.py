"""``loopx run``: drive an agent command through governed turns (see loopx.runner)."""

from __future__ import annotations

import os
import sys

from loopx import output
from loopx.commands import add, goal_opt, stop_signals_interrupt
from loopx.errors import Interrupted, UsageError
from loopx.kernel.humans import require_human
from loopx.kernel.read import validate
from loopx.kernel.storage import clock
from loopx.kernel.storage.ids import check_agent_name
from loopx.ops import hosttrust
from loopx.output import safe
from loopx.runner import loop, parallel, presets
from loopx.usage.text import usage_line


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=run, render=render, command="run",
            example="loopx run --agent-cmd './my-agent.sh {prompt_file}' --once",
            description="Loop: should-run -> next -> agent -> verify -> evidence -> finish -> spend. The agent "
                        "is a preset (global --agent claude-code|codex|cursor|opencode|gemini|pi) or --agent-cmd "
                        "CMD, which gets the packet on stdin and may use {prompt_file}, {packet_json}, {run_id}, "
                        "{goal_id}, {todo_id}. Presets run the host headless in the form that reports tokens and "
                        "cost, with a permission mode (--permission-mode or the goal's default; read-only, edit, "
                        "full: docs/usage.md maps them per host). Every turn has a time limit (--timeout, default "
                        "30m). A host that cannot work (not logged in, offline, rate limited, crashed, timed out, "
                        "idle) ends the turn with that reason for a human. Exit 0 when it worked or cleanly "
                        "stopped, 1 when an agent failed or timed out, 4 when another runner drives the goal, "
                        "130 on Ctrl-C. --parallel N runs N runners at once (the goal's max_parallel must allow "
                        "it), each named NAME-1..N and each turn in its own git worktree on branch "
                        "loopx/<run-id>, merged back when verified.")
    goal_opt(p)
    p.add_argument("--agent-cmd", metavar="CMD", help="shell command of a custom agent")
    p.add_argument("--once", action="store_true", help="at most one turn (the cron form)")
    p.add_argument("--max-turns", metavar="N", help="stop after N turns")
    p.add_argument("--timeout", metavar="DUR", help="stop an agent turn after this long (default 30m; e.g. 2h)")
    p.add_argument("--permission-mode", metavar="MODE", choices=("read-only", "edit", "full"),
                   help="what a preset host may do: read-only, edit or full (default: the goal's; human-only)")
    p.add_argument("--lease", metavar="DUR", help="lease on the todo and run, renewed while the agent works (default 30m)")
    p.add_argument("--dry-run", action="store_true", help="print the packet of the next turn; claim and spend nothing")
    p.add_argument("--allow-unguarded", action="store_true",
                   help="start a host whose installed loopx hooks it will not run (Codex: hooks not trusted yet)")
    p.add_argument("--parallel", metavar="N", help="run N runners at once on the goal, each turn in its own git worktree "
                                                   "(needs the goal's max_parallel >= N)")
    p.add_argument("--echo", action="store_true",
                   help="echo the agent's output to stderr even with --format json (--parallel passes it on)")
    p.add_argument("--as", dest="as_name", metavar="NAME",
                   help="the runner's agent name (default: the preset, or 'shell'); parallel runners are NAME-1..N")


DEFAULT_TIMEOUT = 1800.0


def run(ctx, goal_id=None, agent_cmd=None, once=False, max_turns=None, timeout=None, lease=None, dry_run=False,
        permission_mode=None, parallel=None, as_name=None, echo=False, allow_unguarded=False):
    if not ctx.agent and not agent_cmd:
        raise UsageError("no agent to run", f"pass --agent ({', '.join(presets.names())}) or --agent-cmd 'CMD'")
    preset = None
    if not agent_cmd:
        if not presets.known(ctx.agent):
            raise UsageError(f"--agent {ctx.agent!r} is not a preset and no --agent-cmd was given",
                             f"use one of {', '.join(presets.names())}, or add --agent-cmd 'CMD'")
        preset = ctx.agent
    if preset and not dry_run and not allow_unguarded:
        hosttrust.require_guard(ctx, preset)
    n = validate.count(max_turns, "--max-turns", low=1, high=100_000) if max_turns is not None else None
    secs = clock.parse_duration(timeout) if timeout is not None else DEFAULT_TIMEOUT
    if secs <= 0:
        raise UsageError("--timeout must be positive", "use e.g. --timeout 20m")
    if permission_mode is not None:
        require_human(None, "choosing a permission mode")  # --agent here names the host to drive
    want_echo = echo
    echo = sys.stderr if want_echo or not (ctx.json or ctx.quiet) else None
    name = as_name if as_name is not None else (ctx.agent or "shell")
    if as_name is not None:
        check_agent_name(as_name)
    if parallel is not None:
        count = validate.count(parallel, "--parallel", low=1, high=64)
        if dry_run:
            raise UsageError("--parallel and --dry-run do not go together", "drop --parallel to see the next packet")
        if preset:  # once, before N runners start (exit 2 when the host's CLI or a permission mode is missing)
            presets.check(preset, permission_mode)
            if permission_mode is None:
                loop._require_goal_modes(ctx.store(), goal_id, preset)
        return _parallel(ctx, count, name=name, goal_id=goal_id, agent_cmd=agent_cmd, once=once, max_turns=max_turns,
                         timeout=timeout, lease=lease, echo=want_echo or not (ctx.json or ctx.quiet),
                         permission_mode=permission_mode)

    def log(msg):
        if not ctx.json and not ctx.quiet:
            output.print_text(output.safe(msg), sys.stderr)

    stop_signals_interrupt()
    res = loop.drive(ctx.store(), name, goal_id=goal_id, preset=preset, agent_cmd=agent_cmd,
                     once=once, max_turns=n, timeout=secs, dry_run=dry_run, lease=validate.lease_seconds(lease),
                     echo=echo, log=log, permission_mode=permission_mode)
    return output.Reply(res, res["exit_code"])


def _parallel(ctx, n, *, name, goal_id, agent_cmd, once, max_turns, timeout, lease, echo, permission_mode):
    store = ctx.store()
    gid, _base = parallel.check(store, goal_id, n, name)
    argv = ["--project", store.project_dir, "run", "--goal-id", gid, "--as", name]
    if ctx.agent and not agent_cmd:
        argv[0:0] = ["--agent", ctx.agent]
    if agent_cmd:
        argv += ["--agent-cmd", agent_cmd]
    if once:
        argv.append("--once")
    if echo:
        argv.append("--echo")
    for flag, val in (("--max-turns", max_turns), ("--timeout", timeout), ("--lease", lease),
                      ("--permission-mode", permission_mode)):
        if val is not None:
            argv += [flag, str(val)]
    res = parallel.spawn(argv, n, dict(os.environ), store.project_dir)
    if res["interrupted"]:
        raise Interrupted(f"interrupted: the {n} runners closed their runs", "run `loopx run --parallel` again to continue")
    return output.Reply(res, res["exit_code"])


def render(d: dict) -> str:
    if "parallel" in d:
        return _render_parallel(d)
    if d.get("dry_run_packet"):
        return safe(d["dry_run_packet"], one_line=False) + "\n(dry run: nothing was claimed or spent)"
    turns = d["turns"]
    spent = sum(t.get("slots") or 0 for t in turns)
    lines = [f"{len(turns)} turn(s), {spent} slot(s) spent"]

    for t in turns:
        lines.append(f"  {t['run_id']} {t['todo_id'] or ('trial' if t.get('mode') == 'trial' else 'planning')}: {t['result']}"
                     f"{' (verified)' if t.get('verified') and t['result'] in ('progress', 'completion') else ''}"
                     f"{' - ' + safe(t['note']) if t.get('note') else ''}"
                     f" [{usage_line(t.get('usage'))}]")
        if t.get("setup_error"):
            e = t["setup_error"]
            lines.append(f"  needs you: {e['reason']}: {safe(e['message'])}")
    gv = d.get("goal_verify")
    if gv:
        lines.append(f"goal {gv['goal_id']}: " + (
            "its verify command passed: the goal is done" if gv["completed"]
            else f"its verify command passed; it protects actions, so a human closes it: {gv['human_closes']}"
            if gv.get("human_closes") else f"its verify command failed (exit {gv['exit_code']}, {gv['evidence_id']})"))
    s = d.get("stop")
    if d["stopped_because"] == "decision" and s:
        lines.append(f"stopped: {s['decision']} ({s['reason']}): {safe(s['message'])}")
        if s.get("gate_id"):
            lines.append(f"a human decides: loopx gate approve {s['gate_id']} --confirm {s['gate_id']}")
    elif d["stopped_because"]:
        lines.append(f"stopped: {d['stopped_because'].replace('_', ' ')}")
    return "\n".join(lines)


def _render_parallel(d: dict) -> str:
    turns = d["turns"]
    spent = sum(t.get("slots") or 0 for t in turns)
    lines = [f"{d['parallel']} runner(s), {len(turns)} turn(s), {spent} slot(s) spent"]
    for r in d["runners"]:
        head = f"  {r['agent'] or 'runner (pid ' + str(r['pid']) + ')'}: exit {r['exit_code']}"
        if r.get("error"):
            head += f" - {safe(r['error'].get('message') or '')}"
        elif r.get("stopped_because") == "decision" and r.get("stop"):
            head += f", stopped: {r['stop']['decision']} ({r['stop']['reason']})"
        elif r.get("stopped_because"):
            head += f", stopped: {r['stopped_because'].replace('_', ' ')}"
        lines.append(head)
        for t in r["turns"]:
            m = t.get("merge") or {}
            where = f" in {t['worktree']['branch']}" if t.get("worktree") else ""
            lines.append(f"    {t['run_id']} {t['todo_id'] or ('trial' if t.get('mode') == 'trial' else 'planning')}{where}: {t['result']}"
                         f"{' (verified)' if t.get('verified') else ''}"
                         f"{' - ' + safe(m['message']) if m.get('message') else ''}")
        for m in r.get("merges") or []:
            lines.append(f"    approved merge: {safe(m['message'])}")
    return "\n".join(lines)
