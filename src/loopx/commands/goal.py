"""``loopx goal list|show|update|pause|resume|done|stop``."""

from __future__ import annotations

from loopx import output
from loopx.commands import actions, add
from loopx.kernel import humans
from loopx.kernel.humans import require_human
from loopx.kernel.policy import trialstep
from loopx.kernel.read import queries
from loopx.kernel.storage import clock, gitcli, layout
from loopx.kernel.storage.clock import format_duration
from loopx.kernel.write import goals, trials
from loopx.output import Reply, safe, table
from loopx.sync import transport as gs


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx goal list")
    acts = actions(p)
    add(acts, "list", "list goals", handler=goal_list, render=render_list, command="goal list",
        example="loopx goal list --format json")
    s = add(acts, "show", "show one goal", handler=goal_show, render=render_show, command="goal show",
            example="loopx goal show my-goal")
    s.add_argument("goal_id", nargs="?", metavar="GOAL_ID")
    u = add(acts, "update", "change objective, done_when, verify command, priority, max_parallel or an experiment's measuring", handler=goal_update,
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
    x = u.add_argument_group("research experiment (human-only; docs/experiments.md)")
    x.add_argument("--measure", metavar="CMD", help="the experiment's measure command (only while no baseline "
                                                    "was measured; then run `loopx experiment baseline`)")
    x.add_argument("--metric-pattern", metavar="REGEX", help="read the value with this regex ('' for the default "
                                                             "readers; only while no baseline was measured)")
    x.add_argument("--trial-timeout", metavar="DUR", help="time limit of one measure and guard")
    x.add_argument("--guard", dest="guard_cmd", metavar="CMD", help="a command that must pass for a keep ('' for none)")
    x.add_argument("--min-delta", metavar="X", help="an improvement must beat the frontier by more than X")
    u.add_argument("--tz", metavar="ZONE",
                   help="time zone of the goal's daily and weekly cadences (an IANA name such as Europe/Berlin; "
                        "'' for the user's zone): they keep their local time across DST changes")
    for action, status, help_line in (("pause", "paused", "pause automatic turns"),
                                      ("resume", "active", "resume a paused, done or stopped goal"),
                                      ("done", "done", "mark the goal done"),
                                      ("stop", "stopped", "stop the goal for good (resume undoes it)")):
        a = add(acts, action, help_line, handler=goal_status, render=render_status, command=f"goal {action}",
                example=f"loopx goal {action} my-goal")
        a.add_argument("goal_id", nargs="?", metavar="GOAL_ID")
        a.add_argument("--note", metavar="TEXT")
        a.set_defaults(status=status)


def _goal_row(state, g, now_iso):
    groups = queries.by_status(state, g["id"], now_iso)
    return {"id": g["id"], "status": g["status"], "objective": g["objective"], "priority": g.get("priority", 0),
            "todos": {k: len(v) for k, v in groups.items()},
            "pending_gates": len(queries.pending_gates(state, g["id"])), "created": g["created"],
            "max_parallel": int(g.get("max_parallel") or 1)}


def goal_list(ctx) -> dict:
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
    state = ctx.store().load()
    g = queries.resolve_goal(state, goal_id)
    out = dict(g)
    out.update(_goal_row(state, g, clock.now_iso()))
    return {"goal": out}


def render_show(d: dict) -> str:
    g = d["goal"]
    sc = g["scope"]
    q = g["quota"]

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
                permission_mode=None, max_parallel=None, shared=None, tz=None, measure=None, metric_pattern=None,
                trial_timeout=None, guard_cmd=None, min_delta=None) -> dict | Reply:
    measuring = trials.measuring_changes(measure=measure, metric_pattern=metric_pattern, trial_timeout=trial_timeout,
                                         guard=guard_cmd, min_delta=min_delta)
    if measuring:  # how an experiment measures is governance, like a verify command
        human = require_human(ctx, "experiment.measuring")
        res = trials.update_measuring(ctx.store(), human.actor, goal_id, measuring, human)
        if any(v is not None for v in (objective, done_when, verify, priority, host, permission_mode, max_parallel,
                                       shared, tz)):
            more = goal_update(ctx, res["goal_id"], objective, done_when, verify, priority, host, permission_mode,
                               max_parallel, shared, tz)
            more_data = more.data if isinstance(more, Reply) else more
            res["changed"] = sorted(set(res["changed"]) | set(more_data.get("changed") or []))
        if res["baseline_needed"]:
            res["next"] = f"loopx experiment baseline {res['goal_id']}"
        return Reply(res, 0, _uncommitted(ctx, res["goal_id"]))
    if permission_mode is not None:
        require_human(ctx, "setting a goal's permission mode")
    if verify is not None:  # a verify command decides what "verified" means: governance
        require_human(ctx, "goal.verify")
    if shared is not None:
        require_human(ctx, "sharing a goal across machines" if shared else "unsharing a goal")
    store = ctx.store()
    res = goals.update_goal(store, ctx.actor, goal_id, objective=objective, done_when=done_when,
                            verify=verify, priority=priority, host=host, permission_mode=permission_mode,
                            max_parallel=max_parallel, shared=shared, tz=tz,
                            on_raise=lambda: require_human(ctx, "raising max_parallel"))
    if shared is None:
        return res

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
            tracked = gitcli.run(store.project_dir, "ls-files", layout.DIRNAME, timeout=10, text=True).stdout
        except gitcli.GitUnavailable:
            pass
        warnings = ["`.loopx/` is committed in this project: for a shared goal untrack it (`git rm -r --cached .loopx` "
                    "and add `.loopx/` to .gitignore), since the records travel through refs/loopx/*"] if tracked else []
        return output.Reply(res, 0, warnings)
    res["shared"] = False
    res["effect"] = "should-run and run no longer sync this goal; `loopx sync` still works by hand"
    return res


def _uncommitted(ctx, goal_id: str) -> list[str]:
    """A one-line warning when the measuring's files have uncommitted changes (the baseline and
    every trial measure committed code)."""
    store = ctx.store()
    line = trialstep.uncommitted_note(store, trialstep.for_goal(store.load(), goal_id))
    return [line] if line else []


def goal_status(ctx, goal_id=None, status="active", note=None) -> dict:
    human = humans.channel_or_none(ctx) if status in ("done", "stopped") else None
    if status == "active":  # resuming what a human stopped is the human's call too

        store = ctx.store()
        g = queries.resolve_goal(store.load(), goal_id)
        if g["status"] == "stopped":
            human = humans.require_human(ctx, "goal.resume")
    return goals.set_status(ctx.store(), ctx.actor, goal_id, status, note, human=human)


def render_status(d: dict) -> str:
    if not d["changed"]:
        return f"goal {d['goal_id']} is already {d['status']} (nothing changed)"
    if d.get("retry"):
        if str(d.get("setup_error") or "").startswith("host_"):
            return f"goal {d['goal_id']}: the agent's host will be tried again on the next check ({d['setup_error']} cleared)"
        return f"goal {d['goal_id']}: the verify command will be tried again on the next check"
    return f"goal {d['goal_id']}: {d['previous']} -> {d['status']}"
