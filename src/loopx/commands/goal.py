"""``loopx start-goal`` and ``loopx goal list|show|update|pause|resume|done|stop``."""

from __future__ import annotations

import shlex
import sys

from loopx.commands import actions, add
from loopx.output import Reply, safe, table


def register(sub, name, help_text):
    if name == "start-goal":
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
        p.add_argument("--slots", metavar="N", help="turns allowed per window (default 48)")
        p.add_argument("--window", metavar="DUR", help="rolling budget window (default 24h)")
        p.add_argument("--cooldown", metavar="DUR", help="minimum time between turns (default 0)")
        p.add_argument("--priority", type=int, default=0, help="higher runs first when several goals are active")
        todo_action, verify_action = _todo_actions()
        p.add_argument("--todo", dest="todos", action=todo_action, metavar="TITLE", help="a first todo (repeatable)")
        p.add_argument("--todo-verify", dest="todos", action=verify_action, metavar="CMD",
                       help="the verify command of the --todo just before it (exit 0 = that todo is done)")
        p.add_argument("--guided", action="store_true", help="ask for what is missing (on a terminal)")
        return
    p = add(sub, name, help_text, example="loopx goal list")
    acts = actions(p)
    add(acts, "list", "list goals", handler=goal_list, render=render_list, command="goal list",
        example="loopx goal list --format json")
    s = add(acts, "show", "show one goal", handler=goal_show, render=render_show, command="goal show",
            example="loopx goal show my-goal")
    s.add_argument("goal_id", nargs="?", metavar="GOAL_ID")
    u = add(acts, "update", "change objective, done_when, verify command, priority or max_parallel", handler=goal_update,
            command="goal update", example='loopx goal update my-goal --done-when "CI is green"')
    u.add_argument("goal_id", nargs="?", metavar="GOAL_ID")
    u.add_argument("--goal-text", "--objective", dest="objective", metavar="TEXT")
    u.add_argument("--done-when", metavar="TEXT")
    u.add_argument("--verify", metavar="CMD")
    u.add_argument("--priority", type=int)
    u.add_argument("--host", metavar="KIND", help="default host of the goal's turns (claude-code, codex, ...): "
                                                  "its usage windows gate should-run")
    u.add_argument("--permission-mode", metavar="MODE", help="default permission mode of preset turns: "
                                                             "read-only, edit or full (human-only)")
    u.add_argument("--max-parallel", metavar="N",
                   help="runners that may drive the goal at once, each in its own git worktree (default 1; "
                        "raising it is for humans only)")
    u.add_argument("--shared", dest="shared", action="store_const", const=True,
                   help="sync the goal across machines through the git remote's refs/loopx/* (human-only)")
    u.add_argument("--unshared", dest="shared", action="store_const", const=False,
                   help="stop syncing the goal automatically (human-only)")
    for action, status, help_line in (("pause", "paused", "pause automatic turns"),
                                      ("resume", "active", "resume a paused, done or stopped goal"),
                                      ("done", "done", "mark the goal done"),
                                      ("stop", "stopped", "stop the goal for good (resume undoes it)")):
        a = add(acts, action, help_line, handler=goal_status, render=render_status, command=f"goal {action}",
                example=f"loopx goal {action} my-goal")
        a.add_argument("goal_id", nargs="?", metavar="GOAL_ID")
        a.add_argument("--note", metavar="TEXT")
        a.set_defaults(status=status)


def _todo_actions():
    """argparse actions pairing each ``--todo-verify CMD`` with the ``--todo`` right before it;
    both fill one list of ``{"title", "verify"?}`` dicts."""
    import argparse

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
               protect=None, slots=None, window=None, cooldown=None, priority=0, todos=None, guided=False):
    from loopx.errors import UsageError
    from loopx.kernel.write import goals

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
    res = goals.start_goal(ctx.store(), ctx.actor, objective=objective, goal_id=goal_id, done_when=done_when,
                           verify=verify, priority=priority, allow=allow, deny=deny, protect=protect,
                           quota=policy, todos=todos)
    res["started"] = True
    res["next"] = f'loopx todo add "first step" --goal-id {res["goal_id"]}' if not res["todo_ids"] else \
        "loopx quota should-run  # then: loopx next"
    return res


def render_started(d: dict) -> str:
    if not d.get("started"):
        lines = [d["message"], "", "  " + d["command"]]
        if d.get("missing"):
            lines.append("missing: " + ", ".join(d["missing"]))
        return "\n".join(lines)
    lines = [f"started goal {d['goal_id']}"]
    for tid in d["todo_ids"]:
        lines.append(f"  todo {tid}")
    lines.append(f"next: {d['next']}")
    return "\n".join(lines)


def _goal_row(state, g, now_iso):
    from loopx.kernel.read import queries

    groups = queries.by_status(state, g["id"], now_iso)
    return {"id": g["id"], "status": g["status"], "objective": g["objective"], "priority": g.get("priority", 0),
            "todos": {k: len(v) for k, v in groups.items()},
            "pending_gates": len(queries.pending_gates(state, g["id"])), "created": g["created"],
            "max_parallel": int(g.get("max_parallel") or 1)}


def goal_list(ctx) -> dict:
    from loopx.kernel.storage import clock

    state = ctx.store().load()
    now = clock.now_iso()
    rows = [_goal_row(state, g, now) for g in sorted(state["goals"].values(), key=lambda g: g["created"])]
    return {"goals": rows}


def render_list(d: dict) -> str:
    if not d["goals"]:
        return 'no goals yet; start one: loopx start-goal --goal-text "..."'
    rows = [[g["id"], g["status"], f"{g['todos'].get('done', 0)}/{sum(g['todos'].values()) - g['todos'].get('archived', 0)} done",
             f"{g['pending_gates']} gate(s)" if g["pending_gates"] else "", safe(g["objective"], limit=60)]
            for g in d["goals"]]
    return table(rows, ["GOAL", "STATUS", "TODOS", "GATES", "OBJECTIVE"])


def goal_show(ctx, goal_id=None) -> dict:
    from loopx.kernel.read import queries
    from loopx.kernel.storage import clock

    state = ctx.store().load()
    g = queries.resolve_goal(state, goal_id)
    out = dict(g)
    out.update(_goal_row(state, g, clock.now_iso()))
    return {"goal": out}


def render_show(d: dict) -> str:
    g = d["goal"]
    sc = g["scope"]
    q = g["quota"]
    from loopx.kernel.storage.clock import format_duration

    lines = [f"goal {g['id']}  ({g['status']})", f"  objective:  {safe(g['objective'])}",
             f"  done when:  {safe(g.get('done_when')) or '-'}", f"  verify:     {safe(g.get('verify')) or '-'}",
             f"  scope:      allow {', '.join(map(safe, sc['allow'])) or 'everything'}"
             + (f"; deny {', '.join(map(safe, sc['deny']))}" if sc["deny"] else ""),
             f"  protected:  {', '.join(sc['protect']) or '-'}",
             f"  quota:      {q['slots']} slot(s) per {format_duration(q['window'])}"
             + (f", cooldown {format_duration(q['cooldown'])}" if q.get("cooldown") else "")
             + f", stall after {q['stall_after']}"
             + (f", max {q['max_usd']:.2f} USD" if q.get("max_usd") is not None else "")
             + (f", max {q['max_tokens']:,} tokens" if q.get("max_tokens") is not None else ""),
             f"  host:       {g.get('host') or '-'}  permission mode: {g.get('permission_mode') or '-'}",
             "  todos:      " + ", ".join(f"{k} {v}" for k, v in g["todos"].items() if v) or "none",
             f"  runs:       {g.get('runs', 0)}"]
    return "\n".join(lines)


def goal_update(ctx, goal_id=None, objective=None, done_when=None, verify=None, priority=None, host=None,
                permission_mode=None, max_parallel=None, shared=None) -> dict:
    from loopx.commands.human import require_human
    from loopx.kernel.write import goals

    if permission_mode is not None:
        require_human(ctx, "setting a goal's permission mode")
    if shared is not None:
        require_human(ctx, "sharing a goal across machines" if shared else "unsharing a goal")
    store = ctx.store()
    res = goals.update_goal(store, ctx.actor, goal_id, objective=objective, done_when=done_when,
                            verify=verify, priority=priority, host=host, permission_mode=permission_mode,
                            max_parallel=max_parallel, shared=shared,
                            on_raise=lambda: require_human(ctx, "raising max_parallel"))
    if shared is None:
        return res
    from loopx import output
    from loopx.kernel.policy import sync as gs

    data = gs.read_status(store) or {}
    data["shared"] = bool(gs.shared_goals(store.load(view="live")))
    gs.write_status(store, data)
    if shared:
        res["shared"] = True
        res["effect"] = ("`quota should-run` and `loopx run` now sync this clone with the git remote (refs/loopx/*, "
                         "never a branch) at most every LOOPX_SYNC_EVERY seconds, and `loopx run` claims "
                         "through the remote; agents should call `loopx next --sync`")
        tracked = ""
        try:
            import subprocess

            tracked = subprocess.run(["git", "ls-files", ".loopx"], cwd=store.project_dir, capture_output=True,
                                     text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            pass
        warnings = ["`.loopx/` is committed in this project: for a shared goal untrack it (`git rm -r --cached .loopx` "
                    "and add `.loopx/` to .gitignore), since the records travel through refs/loopx/*"] if tracked else []
        return output.Reply(res, 0, warnings)
    res["shared"] = False
    res["effect"] = "should-run and run no longer sync this goal; `loopx sync` still works by hand"
    return res


def goal_status(ctx, goal_id=None, status="active", note=None) -> dict:
    from loopx.kernel.write import goals, humans

    human = humans.channel_or_none(ctx) if status in ("done", "stopped") else None
    return goals.set_status(ctx.store(), ctx.actor, goal_id, status, note, human=human)


def render_status(d: dict) -> str:
    if not d["changed"]:
        return f"goal {d['goal_id']} is already {d['status']} (nothing changed)"
    if d.get("retry"):
        return f"goal {d['goal_id']}: the verify command will be tried again on the next check"
    return f"goal {d['goal_id']}: {d['previous']} -> {d['status']}"
