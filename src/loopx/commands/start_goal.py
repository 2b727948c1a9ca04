"""``loopx start-goal``: a goal with done_when, scope, verify command, quota and its first todos."""

from __future__ import annotations

import argparse
import shlex
import sys

from loopx.commands import (
    add,
    goal_opt,  # noqa: F401
    stop_signals_interrupt,
)
from loopx.commands.experiment import baseline_fix, tail_lines
from loopx.errors import UsageError
from loopx.kernel.humans import require_human
from loopx.kernel.policy import trialstep
from loopx.kernel.read import budget
from loopx.kernel.storage import quotas
from loopx.kernel.storage.clock import format_duration
from loopx.kernel.write import goals, trials
from loopx.output import Reply


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=start_goal, render=render_started,
            example='loopx start-goal --goal-text "Make the test suite pass" --done-when "pytest exits 0" '
                    '--verify "pytest -q" --scope "src/**" --protect merge --todo "fix parser bug" '
                    '--todo-verify "pytest -q tests/test_parser.py"')
    p.add_argument("--goal-text", "--objective", dest="objective", metavar="TEXT", help="the objective")
    p.add_argument("--goal-id", dest="goal_id", metavar="ID", help="slug id (default: derived from the text)")
    p.add_argument("--done-when", metavar="TEXT", help="acceptance criteria for the goal")
    p.add_argument("--verify", metavar="CMD",
                   help="the goal's command: exit 0 means the goal is met (e.g. 'pytest -q'); it also verifies "
                        "turns on todos that have no command of their own")
    p.add_argument("--scope", dest="allow", action="append", metavar="GLOB", help="allowed path glob (repeatable)")
    p.add_argument("--deny", action="append", metavar="GLOB", help="denied path glob (repeatable)")
    p.add_argument("--protect", action="append", metavar="ACTION",
                   help="action that needs an approved gate: merge, release, production-write, ... (repeatable)")
    p.add_argument("--slots", metavar="N", help=f"turns allowed per window (default {quotas.DEFAULTS['slots']})")
    p.add_argument("--window", metavar="DUR", help="rolling budget window (default 24h)")
    p.add_argument("--cooldown", metavar="DUR", help="minimum time between turns (default 0)")
    p.add_argument("--priority", type=int, default=0, help="higher runs first when several goals are active")
    todo_action, verify_action = _todo_actions()
    p.add_argument("--todo", dest="todos", action=todo_action, metavar="TITLE", help="a first todo (repeatable)")
    p.add_argument("--todo-verify", dest="todos", action=verify_action, metavar="CMD",
                   help="the verify command of the --todo just before it (exit 0 = that todo is done)")
    p.add_argument("--guided", action="store_true", help="ask for what is missing (on a terminal)")
    _experiment_args(p)


def _experiment_args(p) -> None:
    """The flags of a research experiment goal (issue 20; docs/experiments.md)."""
    x = p.add_argument_group("research experiment (--experiment; see docs/experiments.md)")
    x.add_argument("--experiment", action="store_true",
                   help="each turn is a trial that loopx measures, keeps or discards (needs --metric and --measure)")
    x.add_argument("--metric", metavar="NAME", help="the metric that decides (e.g. val_acc)")
    x.add_argument("--direction", choices=["max", "min"], default="max", help="higher (max, default) or lower is better")
    x.add_argument("--measure", metavar="CMD", help="the command loopx runs after each trial; it prints NAME: value")
    x.add_argument("--trial-timeout", metavar="DUR", help="time limit of one measure (default 10m)")
    x.add_argument("--metric-pattern", metavar="REGEX", help="read the value with this regex (group 'value')")
    x.add_argument("--min-delta", metavar="X", help="an improvement must beat the frontier by more than X (default 0)")
    x.add_argument("--guard", dest="guard_cmd", metavar="CMD", help="a command that must pass for a keep (e.g. the tests)")
    x.add_argument("--holdout", metavar="CMD", help="the holdout evaluation; run only at promotion, shown to the human only")
    x.add_argument("--plateau", metavar="N", help="after N trials without a kept improvement, ask a human")
    x.add_argument("--protect-path", action="append", metavar="PATH",
                   help="a file the measuring reads; the agent may not change it (repeatable)")
    x.add_argument("--holdout-path", action="append", metavar="PATH",
                   help="holdout data, untracked by git (a tracked path is refused, exit 3); the agent may "
                        "neither read nor change it (repeatable)")


def _todo_actions():
    """argparse actions pairing each ``--todo-verify CMD`` with the ``--todo`` right before it;
    both fill one list of ``{"title", "verify"?}`` dicts."""
    class Todo(argparse.Action):
        def __call__(self, parser, ns, value, option_string=None):
            setattr(ns, self.dest, [*(getattr(ns, self.dest) or []), {"title": value}])

    class TodoVerify(argparse.Action):
        def __call__(self, parser, ns, value, option_string=None):
            items = list(getattr(ns, self.dest) or [])
            if not items:
                parser.error("--todo-verify must follow the --todo it belongs to")
            if "verify" in items[-1]:
                parser.error(f"--todo {items[-1]['title']!r} already has a --todo-verify")
            items[-1] = dict(items[-1], verify=value)
            setattr(ns, self.dest, items)

    return Todo, TodoVerify


def _plan_command(args: dict) -> str:
    parts = ["loopx", "start-goal"]
    for flag, key in (("--goal-text", "objective"), ("--goal-id", "goal_id"), ("--done-when", "done_when"),
                      ("--verify", "verify"), ("--slots", "slots"), ("--window", "window")):
        val = args.get(key) or (f"<{key.replace('_', ' ')}>" if key in ("objective", "done_when") else None)
        if val:
            parts += [flag, str(val)]
    for flag, key in (("--scope", "allow"), ("--deny", "deny"), ("--protect", "protect")):
        for v in args.get(key) or []:
            parts += [flag, v]
    for t in args.get("todos") or []:
        t = t if isinstance(t, dict) else {"title": t}
        parts += ["--todo", t["title"]] + (["--todo-verify", t["verify"]] if t.get("verify") else [])
    return shlex.join(parts)


def _ask(prompt: str, default: str | None = None) -> str | None:
    suffix = f" [{default}]" if default else ""
    try:
        ans = input(f"{prompt}{suffix}: ").strip()
    except EOFError:
        return default
    return ans or default


def start_goal(ctx, objective=None, goal_id=None, done_when=None, verify=None, allow=None, deny=None,
               protect=None, slots=None, window=None, cooldown=None, priority=0, todos=None, guided=False,
               experiment=False, metric=None, direction="max", measure=None, trial_timeout=None, metric_pattern=None,
               min_delta=None, guard_cmd=None, holdout=None, plateau=None, protect_path=None, holdout_path=None):
    require_human(ctx, "goal.start")
    exp_cfg = None
    if experiment or metric or measure:
        if not experiment:
            raise UsageError("--metric and --measure belong to an experiment goal", "add --experiment",
                             code="experiment_flag_missing")
        exp_cfg = trials.config(metric=metric, direction=direction, measure=measure, trial_timeout=trial_timeout,
                                metric_pattern=metric_pattern, min_delta=min_delta, guard=guard_cmd, holdout=holdout,
                                plateau=plateau, protect=protect_path or (), holdout_paths=holdout_path or ())

    args = dict(objective=objective, goal_id=goal_id, done_when=done_when, verify=verify, allow=allow,
                deny=deny, protect=protect, slots=slots, window=window, todos=todos)
    if guided:
        if not (sys.stdin.isatty() and sys.stdout.isatty()) or ctx.json:
            return Reply({"started": False, "guided": True, "plan": {k: v for k, v in args.items() if v},
                          "missing": [k for k in ("objective", "done_when", "verify") if not args.get(k)],
                          "command": _plan_command(args),
                          "message": "no terminal to ask on: fill in the command below and run it"})
        objective = objective or _ask("Objective (what should be true at the end?)")
        done_when = done_when or _ask("Done when (acceptance criteria)")
        verify = verify or _ask("Verify command (exit 0 = verified, empty for none)")
        if not allow:
            allow = [s for s in (_ask("Allowed paths (comma-separated globs, empty = everything)") or "").split(",") if s.strip()]
        if not protect:
            protect = [s.strip() for s in (_ask("Protected actions (e.g. merge,release)", "merge") or "").split(",") if s.strip()]
        if not todos:
            todos = [s.strip() for s in (_ask("First todos (separated by ';')") or "").split(";") if s.strip()]
    if not objective:
        raise UsageError("--goal-text is required", 'pass --goal-text "..." or use --guided on a terminal')
    policy = goals.quota_policy(slots=slots, window=window, cooldown=cooldown)
    if exp_cfg is not None:
        trialstep.check_repo(ctx.store())  # before the goal exists: an experiment needs git
        # holdout data git tracks is in the object store every trial reads: refused, not warned about
        trialstep.refuse_tracked_holdout(ctx.store(), exp_cfg.get("holdout_paths") or ())
    res = goals.start_goal(ctx.store(), ctx.actor, objective=objective, goal_id=goal_id, done_when=done_when,
                           verify=verify, priority=priority, allow=allow, deny=deny, protect=protect,
                           quota=policy, todos=todos)
    res["started"] = True
    if exp_cfg is not None:
        stop_signals_interrupt()  # the baseline's measure command ends with this command, SIGTERM or not
        exp = trialstep.start(ctx.store(), ctx.actor, res["goal_id"], exp_cfg)
        res["experiment"] = {k: exp[k] for k in ("worktree", "branch", "base_branch", "base_commit")}
        res["baseline"] = _baseline_view(exp.get("baseline"))
        crashed = (exp.get("baseline") or {}).get("decision") == "crash"
        res["next"] = baseline_fix(res["goal_id"], exp["baseline"]) if crashed else \
            "loopx run --agent-cmd CMD   # or: loopx next, then exit; loopx measures each trial"
        note = trialstep.uncommitted_note(ctx.store(), exp_cfg)
        return Reply(res, 0, [note] if note else [])
    res["next"] = f'loopx todo add "first step" --goal-id {res["goal_id"]}' if not res["todo_ids"] else \
        "loopx quota should-run  # then: loopx next"
    checked = verify or any(isinstance(t, dict) and t.get("verify") for t in todos or [])
    if not checked:
        return Reply(res, warnings=[_unverified_note(ctx, res["goal_id"])])
    return res


def _unverified_note(ctx, goal_id: str) -> str:
    """What a goal without any verify command means for its budget (issue 21)."""
    g = ctx.store().load()["goals"][goal_id]
    return (f"no verify command: turns on {goal_id} are never verified and spend no slot; the turn budget "
            f"({budget.turn_limit(g)} turns per {format_duration(g['quota']['window'])}) and the stall "
            f"({g['quota'].get('stall_after', 3)} unverified turns in a row on a todo) bound them (docs/loop.md)")


def _baseline_view(t: dict | None) -> dict | None:
    if not t:
        return None
    return {k: t.get(k) for k in ("trial_id", "decision", "value", "metrics", "reason", "commit", "tail")}


def render_started(d: dict) -> str:
    if not d.get("started"):
        lines = [d["message"], "", "  " + d["command"]]
        if d.get("missing"):
            lines.append("missing: " + ", ".join(d["missing"]))
        return "\n".join(lines)
    lines = [f"started goal {d['goal_id']}"]
    for tid in d["todo_ids"]:
        lines.append(f"  todo {tid}")
    if d.get("experiment"):
        x, b = d["experiment"], d.get("baseline") or {}
        lines.append(f"  experiment worktree {x['worktree']} on branch {x['branch']}")
        if b.get("decision") == "keep":
            lines.append(f"  baseline {b['trial_id']}: {b['value']:.6g}")
        else:
            lines.append(f"  baseline {b.get('trial_id')} crashed: {b.get('reason')}")
            lines += tail_lines(b)
    lines.append(f"next: {d['next']}")
    return "\n".join(lines)

