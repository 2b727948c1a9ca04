"""``loopx todo add|list|show|claim|renew|release|update|block|done|archive``."""

from __future__ import annotations

from loopx.commands import actions, add, goal_opt
from loopx.output import safe, table


def register(sub, name, help_text):
    p = add(sub, name, help_text, example='loopx todo add "fix the flaky login test" --priority 2')
    acts = actions(p)
    a = add(acts, "add", "add a todo to a goal", handler=todo_add, render=render_add,
            command="todo add", example='loopx todo add "fix the parser" --detail "see issue 12" --depends-on t-3f9a')
    a.add_argument("title")
    goal_opt(a)
    a.add_argument("--detail", metavar="TEXT")
    a.add_argument("--priority", default=0, metavar="N", help="higher first (default 0)")
    a.add_argument("--depends-on", action="append", metavar="TODO", help="a todo that must be done first (repeatable)")
    a.add_argument("--depends-on-goal", dest="depends_on_goals", action="append", metavar="GOAL",
                   help="another goal that must be done first: the todo is ready once that goal is done (repeatable)")
    a.add_argument("--acceptance", metavar="TEXT", help="what makes this todo done")
    a.add_argument("--verify", metavar="CMD", help="verify command for this todo (overrides the goal's)")
    a.add_argument("--every", metavar="DUR", help="recurring: reopen this long after it was due once done (e.g. 1d)")

    lst = add(acts, "list", "list todos: open work and the recently closed; older done todos are counted, and "
              "listed by --status done (which reads the whole history, as --all does)", handler=todo_list,
              render=render_list, command="todo list", example="loopx todo list --status open")
    goal_opt(lst)
    lst.add_argument("--status", choices=["open", "claimed", "expired", "blocked", "done", "archived"],
                     help="only todos in this status (done and archived: every one in the history)")
    lst.add_argument("--ready", action="store_true", help="only todos a turn could take now")
    lst.add_argument("--all", action="store_true", help="every todo of the history, archived ones included")

    s = add(acts, "show", "show one todo", handler=todo_show, render=render_show, command="todo show",
            example="loopx todo show t-3f9a")
    s.add_argument("todo")

    c = add(acts, "claim", "claim a todo with a lease", handler=todo_claim, render=render_claim,
            command="todo claim", example="loopx --agent codex todo claim t-3f9a --lease 45m")
    c.add_argument("todo")
    c.add_argument("--lease", metavar="DUR", help="lease length (default 30m)")

    r = add(acts, "renew", "extend your lease on a todo", handler=todo_renew, render=render_claim,
            command="todo renew", example="loopx --agent codex todo renew t-3f9a --lease 30m")
    r.add_argument("todo")
    r.add_argument("--lease", metavar="DUR")
    r.add_argument("--fence", type=int, metavar="N", help="the fence from your claim (refused if stale)")

    rel = add(acts, "release", "give a claimed todo back", handler=todo_release,
              render=lambda d: f"released {d['todo_id']}" if d["changed"] else f"{d['todo_id']} was not claimed (nothing changed)",
              command="todo release", example="loopx todo release t-3f9a --note 'needs a design decision'")
    rel.add_argument("todo")
    rel.add_argument("--fence", type=int, metavar="N")
    rel.add_argument("--note", metavar="TEXT")

    u = add(acts, "update", "change a todo's fields, or reopen it", handler=todo_update,
            render=lambda d: f"updated {d['todo_id']}: {', '.join(d['changed']) or 'nothing'}",
            command="todo update", example="loopx todo update t-3f9a --priority 5")
    u.add_argument("todo")
    u.add_argument("--title")
    u.add_argument("--detail")
    u.add_argument("--priority", metavar="N")
    u.add_argument("--depends-on", action="append", metavar="TODO")
    u.add_argument("--acceptance")
    u.add_argument("--verify", metavar="CMD")
    u.add_argument("--reopen", action="store_true", help="set a blocked, done or archived todo back to open")

    b = add(acts, "block", "mark a todo blocked", handler=todo_block, render=lambda d: f"blocked {d['todo_id']}",
            command="todo block", example="loopx todo block t-3f9a --reason 'waiting for API keys'")
    b.add_argument("todo")
    b.add_argument("--reason", required=True)

    dn = add(acts, "done", "complete a todo, citing evidence", handler=todo_done, render=render_done,
             command="todo done", example="loopx todo done t-3f9a --evidence ev-1a2b --next 'update the docs'")
    dn.add_argument("todo")
    dn.add_argument("--evidence", action="append", metavar="ID",
                    help="evidence id (repeatable): a passing test or command (exit 0), or a commit, diff, artifact "
                         "or link; a todo with its own verify command runs it when no passing run is cited")
    dn.add_argument("--force-unverified", dest="force", action="store_true",
                    help="humans only: close it although the evidence does not prove it (recorded and shown in "
                         "the review packet)")
    dn.add_argument("--next", dest="next_titles", action="append", metavar="TITLE", help="add a successor todo")
    dn.add_argument("--fence", type=int, metavar="N")
    dn.add_argument("--note", metavar="TEXT")

    ar = add(acts, "archive", "archive a todo (no longer wanted)", handler=todo_archive,
             render=lambda d: f"archived {d['todo_id']}" if d["changed"] else f"{d['todo_id']} was already archived",
             command="todo archive", example="loopx todo archive t-3f9a --note 'superseded'")
    ar.add_argument("todo")
    ar.add_argument("--note")


def todo_add(ctx, title, goal_id=None, detail=None, priority=0, depends_on=None, acceptance=None, verify=None,
             every=None, depends_on_goals=None):
    from loopx.kernel.write import todos

    return todos.add(ctx.store(), ctx.actor, goal_id, title, detail=detail, priority=priority,
                     depends_on=depends_on, acceptance=acceptance, verify=verify, every=every,
                     depends_on_goals=depends_on_goals)


def render_add(d: dict) -> str:
    waits = f" (ready once goal {', '.join(d['depends_on_goals'])} is done)" if d.get("depends_on_goals") else ""
    return f"added {d['todo_id']} to {d['goal_id']}{waits}"


def _brief(t: dict, now_iso: str) -> dict:
    from loopx.kernel.read import queries

    c = t.get("claim")
    status = t["status"]
    if status == "claimed" and c and not queries.lease_live(c, now_iso):
        status = "expired"
    return {"id": t["id"], "goal": t["goal"], "title": t["title"], "status": status, "priority": t.get("priority", 0),
            "holder": c["holder"] if c else None, "lease_until": c["lease_until"] if c else None,
            "depends_on": t.get("depends_on") or [], "depends_on_goals": t.get("depends_on_goals") or [],
            "evidence": t.get("evidence") or [], "verify": t.get("verify")}


def todo_list(ctx, goal_id=None, status=None, ready=False, all=False) -> dict:
    """The todos as rows (``_brief``): ``{"todos": [...], "count": n, "older_done": n}``. Without
    ``--status done|archived`` or ``--all`` it reads the live view: open work and the recently
    closed todos it keeps; ``older_done`` counts the done todos it left out (listed by
    ``--status done``, which reads the whole history, as ``--all`` does)."""
    store = ctx.store()
    if status in ("done", "archived") or all:  # an explicit report of closed todos: the whole history
        return _list(store.load(), goal_id, status, ready, all)
    return store.read(lambda st: _list(_as_view(st), goal_id, status, ready, all))


def _as_view(state: dict) -> dict:
    """``state`` as the live view lists it: a full state (read when there was no usable view, a
    fresh clone's first command say) pruned the same way, so the rows and ``older_done`` are the
    same with a cache or without one."""
    from loopx.kernel.storage import clock, fold

    return state if fold.is_live(state) else fold.live_view(state, clock.now_iso())



def _list(state: dict, goal_id, status, ready, all) -> dict:
    from loopx.kernel.read import queries
    from loopx.kernel.storage import clock

    now = clock.now_iso()
    goals = [queries.resolve_goal(state, goal_id)] if goal_id or len(state["goals"]) == 1 else \
        sorted(state["goals"].values(), key=lambda g: g["created"])
    rows = []
    closed = state.get("closed") or {}  # a live view's count of the closed todos it left out, per goal
    older = 0 if ready or status else sum((closed.get(g["id"]) or {}).get("done", 0) for g in goals)
    for g in goals:
        src = queries.ready_todos(state, g["id"], now) if ready else queries.goal_todos(state, g["id"])
        for t in src:
            b = _brief(t, now)
            if status and b["status"] != status:
                continue
            if not all and not status and b["status"] == "archived":
                continue
            rows.append(b)
    return {"todos": rows, "count": len(rows), "older_done": older}


def render_list(d: dict) -> str:
    more = d.get("older_done") or 0
    note = (f"{more:,} older done todo{'s' if more != 1 else ''} not listed: `loopx todo list --status done` "
            "lists every one") if more else ""
    if not d["todos"]:
        return "no todos match" + (f"\n{note}" if note else "")
    rows = []
    for t in d["todos"]:
        holder = f"{t['holder']} until {t['lease_until'][11:16]}Z" if t["holder"] else ""
        rows.append([t["id"], t["status"], str(t["priority"]), safe(t["title"], limit=70), holder])
    return table(rows, ["TODO", "STATUS", "PRI", "TITLE", "HOLDER"]) + (f"\n{note}" if note else "")


def todo_show(ctx, todo) -> dict:
    from loopx.kernel.read import queries
    from loopx.kernel.storage import clock

    state = ctx.store().load()
    t = queries.resolve_todo(state, todo)
    out = dict(t)
    out["status_now"] = _brief(t, clock.now_iso())["status"]
    out["gates"] = [g["id"] for g in queries.pending_gates(state, t["goal"]) if not g["blocks"] or t["id"] in g["blocks"]]
    return {"todo": out}


def render_show(d: dict) -> str:
    t = d["todo"]
    lines = [f"todo {t['id']}  ({t['status_now']})  goal {t['goal']}", f"  title:      {safe(t['title'])}"]
    if t.get("detail"):
        lines.append(f"  detail:     {safe(t['detail'])}")
    if t.get("acceptance"):
        lines.append(f"  acceptance: {safe(t['acceptance'])}")
    if t.get("claim"):
        c = t["claim"]
        lines.append(f"  claim:      {safe(c['holder'])} until {c['lease_until']} (fence {c['fence']})")
    if t.get("verify"):
        lines.append(f"  verify:     {safe(t['verify'])}")
    if t.get("depends_on"):
        lines.append(f"  depends on: {', '.join(t['depends_on'])}")
    if t.get("depends_on_goals"):
        lines.append(f"  after goal: {', '.join(t['depends_on_goals'])} (ready once done)")
    if t.get("evidence"):
        lines.append(f"  evidence:   {', '.join(t['evidence'])}")
    if t.get("gates"):
        lines.append(f"  waits for:  {', '.join(t['gates'])}")
    if t.get("note"):
        lines.append(f"  note:       {safe(t['note'])}")
    return "\n".join(lines)


def todo_claim(ctx, todo, lease=None) -> dict:
    from loopx.kernel.write import todos

    return todos.claim(ctx.store(), ctx.actor, todo, lease)


def render_claim(d: dict) -> str:
    verb = "renewed" if d.get("renewed", True) else "claimed"
    return f"{verb} {d['todo_id']} for {safe(d.get('holder', ''))} until {d['lease_until']} (fence {d.get('fence')})"


def todo_renew(ctx, todo, lease=None, fence=None) -> dict:
    from loopx.kernel.write import todos

    return todos.renew(ctx.store(), ctx.actor, todo, lease, fence)


def todo_release(ctx, todo, fence=None, note=None) -> dict:
    from loopx.kernel.write import todos

    return todos.release(ctx.store(), ctx.actor, todo, fence, note)


def todo_update(ctx, todo, **fields) -> dict:
    from loopx.kernel import humans
    from loopx.kernel.write import todos

    human = humans.channel_or_none(ctx) if fields.get("reopen") else None
    return todos.update(ctx.store(), ctx.actor, todo, human=human, **fields)


def todo_block(ctx, todo, reason) -> dict:
    from loopx.kernel.write import todos

    return todos.block(ctx.store(), ctx.actor, todo, reason)


def todo_done(ctx, todo, evidence=None, next_titles=None, fence=None, note=None, force=False) -> dict:
    from loopx.kernel.write import todos

    if force:
        from loopx.context import agent_markers
        from loopx.errors import HumanRequired

        markers = agent_markers()
        if ctx.agent or markers:
            raise HumanRequired("--force-unverified is for humans; this looks like an agent"
                                + (f" ({', '.join(markers)} is set)" if markers else ""),
                                "make the todo's verify pass, or ask a human to run it in a terminal")
    return todos.done(ctx.store(), ctx.actor, todo, evidence or [], next_titles=next_titles, fence=fence, note=note,
                      force=force)


def render_done(d: dict) -> str:
    lines = [f"done {d['todo_id']} (evidence {', '.join(d['evidence']) or 'none'})"]
    if d.get("verify"):
        lines.append(f"  its verify command passed -> evidence {d['verify']['evidence_id']}")
    if d.get("forced"):
        lines.append("  FORCED without passing evidence (recorded; shown in the review packet)")
    for t in d["next"]:
        lines.append(f"  next todo {t}")
    return "\n".join(lines)


def todo_archive(ctx, todo, note=None) -> dict:
    from loopx.kernel.write import todos

    return todos.archive(ctx.store(), ctx.actor, todo, note)
