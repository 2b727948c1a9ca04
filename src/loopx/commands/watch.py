"""``loopx watch add|list|show|pause|resume|remove|run``: cheap checks that wake the agent only on a change.

Adding and removing a watch is a human-only change (its command runs from cron, outside any agent
sandbox). See docs/scheduling.md.
"""

from __future__ import annotations

from loopx.commands import actions, add, goal_opt
from loopx.errors import Conflict
from loopx.kernel.humans import require_human
from loopx.kernel.policy import tick
from loopx.kernel.read import queries, watching
from loopx.kernel.storage import clock
from loopx.kernel.storage.clock import format_duration
from loopx.kernel.write import watches
from loopx.output import Reply, safe, table


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx watch list")
    acts = actions(p)
    a = add(acts, "add", "add a watch: a check command run at a cadence (humans only)", handler=watch_add,
            render=render_add, command="watch add",
            example="loopx watch add --every 10m --check 'gh pr checks 12' --on fail --todo 'fix CI on PR 12'")
    goal_opt(a)
    a.add_argument("--every", required=True, metavar="DUR", help="cadence, e.g. 10m (at least 1m)")
    a.add_argument("--check", required=True, metavar="CMD", help="shell command run in the project directory")
    a.add_argument("--on", default="change", choices=["change", "fail", "pass", "match"],
                   help="trigger: output changed (default), exit turned non-zero, turned zero, --match matched")
    a.add_argument("--match", metavar="REGEX", help="regex searched in the output (implies --on match)")
    a.add_argument("--todo", metavar="TITLE", help="title of the todo opened when it fires")
    a.add_argument("--timeout", metavar="DUR", help="kill the check after this long (default 60s)")
    a.add_argument("--name", metavar="NAME", help="a name to refer to it (default: its id)")

    lst = add(acts, "list", "list watches with cadence, last result, next due and fire count", handler=watch_list,
              render=render_list, command="watch list", example="loopx watch list")
    goal_opt(lst)
    s = add(acts, "show", "show one watch", handler=watch_show, render=render_show, command="watch show",
            example="loopx watch show ci")
    s.add_argument("watch")
    for action, verb in (("pause", "stop checking a watch for now"), ("resume", "check a paused watch again"),
                         ("remove", "remove a watch (humans only)")):
        x = add(acts, action, verb, handler=watch_status, render=render_status, command=f"watch {action}",
                example=f"loopx watch {action} ci")
        x.add_argument("watch")
        x.set_defaults(action=action)
    r = add(acts, "run", "run due checks now (all, or one watch even if not due)", handler=watch_run,
            render=render_run, command="watch run", example="loopx watch run ci")
    r.add_argument("watch", nargs="?")


def watch_add(ctx, every, check, goal_id=None, on="change", match=None, todo=None, timeout=None, name=None):
    require_human(ctx, "adding a watch")
    return watches.add(ctx.store(), ctx.actor, goal_id, every=every, check=check, on=on, match=match, todo=todo,
                       timeout=timeout, name=name)


def render_add(d: dict) -> str:
    return (f"added watch {d['name']} ({d['watch_id']}) on {d['goal_id']}: every {format_duration(d['every'])}, "
            f"on {d['on']}: {safe(d['check'])}\nchecks run from `loopx quota should-run` (cron); "
            f"try it now with `loopx watch run {d['name']}`")


def _rows(ctx, goal_id=None) -> tuple[dict, list[dict]]:
    store = ctx.store()
    state = store.load()
    gid = queries.resolve_goal(state, goal_id)["id"] if goal_id else None
    return state, watching.describe(state, tick.load_book(store), clock.now_iso(), gid)


def watch_list(ctx, goal_id=None) -> dict:
    _state, rows = _rows(ctx, goal_id)
    return {"watches": rows, "count": len(rows)}


def _when(v) -> str:
    return v or "-"


def render_list(d: dict) -> str:
    if not d["watches"]:
        return "no watches (add one with `loopx watch add --every 10m --check CMD`)"
    return table([[w["name"], w["goal"], w["status"], format_duration(w["every"]), w["on"],
                   w["outcome"] or "never run", _when(w["last_run"]), _when(w["next_due"]), str(w["fired"])]
                  for w in d["watches"]],
                 ["WATCH", "GOAL", "STATUS", "EVERY", "ON", "LAST", "LAST RUN", "NEXT DUE", "FIRED"])


def watch_show(ctx, watch) -> dict:
    state, rows = _rows(ctx)
    w = watches.resolve(state, watch)
    return {"watch": next(r for r in rows if r["id"] == w["id"])}


def render_show(d: dict) -> str:
    w = d["watch"]
    lines = [f"watch {w['name']} ({w['id']})  goal {w['goal']}  {w['status']}",
             f"  check:     {safe(w['check'])}",
             f"  every:     {format_duration(w['every'])}, fires on {w['on']}"
             + (f" /{safe(w['match'])}/" if w.get("match") else ""),
             f"  last run:  {_when(w['last_run'])}  result {w['outcome'] or 'never run'}"
             + (f" (exit {w['exit_code']})" if w.get("exit_code") is not None else ""),
             f"  next due:  {_when(w['next_due'])}",
             f"  checks:    {w['checks']} run here, fired {w['fired']}x (last {_when(w['last_fired'])})"]
    if w.get("error"):
        lines.append(f"  error:     {safe(w['error'])}")
    if w.get("failing"):
        lines.append("  failing:   the check keeps erroring; the goal waits for a human")
    if w.get("open_todo"):
        lines.append(f"  open todo: {w['open_todo']}")
    if w.get("excerpt"):
        lines.append("  output:    " + safe(w["excerpt"][-300:], limit=300))
    return "\n".join(lines)


def watch_status(ctx, watch, action) -> dict:
    if action == "remove":
        require_human(ctx, "removing a watch")
    return watches.set_status(ctx.store(), ctx.actor, watch, action)


def render_status(d: dict) -> str:
    if not d["changed"]:
        return f"watch {d['name']} is already {d['status']} (nothing changed)"
    return f"watch {d['name']} ({d['watch_id']}) is now {d['status']}"


def watch_run(ctx, watch=None):
    store = ctx.store()
    state = store.load()
    only = watches.resolve(state, watch)["id"] if watch else None
    if only and state["watches"][only]["status"] != "active":
        raise Conflict(f"watch {watch} is paused", f"resume it first: `loopx watch resume {watch}`",
                       code="watch_paused")
    res = tick.tick(store, state, clock.now(), only=only, force=bool(only))
    data = {"checked": res["checked"], "reopened": res["reopened"], "busy": res["busy"]}
    return Reply(data, 4 if res["busy"] else 0,
                 ["another loopx process is running checks; try again in a moment"] if res["busy"] else [])


def render_run(d: dict) -> str:
    if not d["checked"] and not d["reopened"]:
        return "no check was due" if not d["busy"] else "busy: another process is running checks"
    lines = []
    for c in d["checked"]:
        line = f"{c['name']}: {c['outcome']}" + (f" (exit {c['exit_code']})" if c["exit_code"] is not None else "")
        if c["error"]:
            line += f": {safe(c['error'])}"
        if c["fired"]:
            line += f"; fired, opened {c['todo_id']}"
        lines.append(line)
    for t in d["reopened"]:
        lines.append(f"recurring todo {t} is due again (reopened)")
    return "\n".join(lines)
