"""``loopx scope show|set|check PATH``: allowed and denied path globs and protected actions."""

from __future__ import annotations

import os

from loopx.commands import actions, add, goal_opt
from loopx.kernel import humans
from loopx.kernel.read import queries, scope
from loopx.output import Reply, safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx scope check src/app.py")
    acts = actions(p)
    s = add(acts, "show", "show the goal's scope", handler=scope_show, render=render_show, command="scope show",
            example="loopx scope show")
    goal_opt(s)
    st = add(acts, "set", "replace allowed/denied globs or protected actions", handler=scope_set, render=render_show,
             command="scope set", example="loopx scope set --allow 'src/**' --allow 'tests/**' --deny 'src/secrets/**'")
    goal_opt(st)
    st.add_argument("--allow", action="append", metavar="GLOB")
    st.add_argument("--deny", action="append", metavar="GLOB")
    st.add_argument("--protect", action="append", metavar="ACTION")
    st.add_argument("--clear-allow", action="store_true", help="allow everything again")
    st.add_argument("--clear-deny", action="store_true")
    st.add_argument("--clear-protect", action="store_true")
    c = add(acts, "check", "exit 0 when PATH is inside the scope, 1 outside", handler=scope_check, render=render_check,
            command="scope check", example="loopx scope check src/app.py")
    goal_opt(c)
    c.add_argument("path")


def scope_show(ctx, goal_id=None) -> dict:
    g = queries.resolve_goal(ctx.store().load(view="live"), goal_id)  # every goal is in the live view
    return {"goal_id": g["id"], "scope": g["scope"]}


def render_show(d: dict) -> str:
    sc = d["scope"]
    return "\n".join([f"scope of {d['goal_id']}",
                      f"  allow:   {', '.join(map(safe, sc['allow'])) or 'everything in the project'}",
                      f"  deny:    {', '.join(map(safe, sc['deny'])) or '-'}",
                      f"  protect: {', '.join(sc['protect']) or '-'}"])


def scope_set(ctx, goal_id=None, allow=None, deny=None, protect=None, clear_allow=False, clear_deny=False,
              clear_protect=False) -> dict:
    from loopx.kernel.write import goals  # its time zones (zoneinfo, datetime): not for `scope check`

    return goals.set_scope(ctx.store(), ctx.actor, goal_id, allow=[] if clear_allow else allow,
                           deny=[] if clear_deny else deny, protect=[] if clear_protect else protect,
                           human=humans.channel_or_none(ctx))


def scope_check(ctx, path, goal_id=None):
    store = ctx.store()
    g = queries.resolve_goal(store.load(view="live"), goal_id)  # an agent may ask before every edit
    rel = scope.project_relative(store.project_dir, path, os.getcwd())
    verdict = scope.check(g["scope"], rel)
    return Reply(dict(verdict, goal_id=g["id"], path=rel), exit_code=0 if verdict["inside"] else 1)


def render_check(d: dict) -> str:
    return f"{'inside' if d['inside'] else 'outside'}: {safe(d['path'])} ({safe(d['reason'])})"
