"""The one-screen summary behind ``loopx status`` and the dashboard overview.

``summary(state, now_iso, goal_id=None)`` -> ``{"goals": [goal_summary...], "agents": [...],
"store": store_health, "next": str}``; each goal summary has ``id, status, objective, done_when,
priority, needs_human (pending gates with question and short code), host_errors (agents whose host
could not work on this goal: {agent, host, reason, message, run, ts, retry_at}), todos (counts by
state), claimed (holder, lease_until), ready (first few), blocked, budget (read.budget without
its ledger), last_run (with usage and changes), open_runs, last_decision, setup_error (a standing
``verify_broken`` record of the last run, see loopx.kernel.read.verify, or None), watches
(loopx.kernel.read.watching.describe rows), next`` (the one command a person or agent should run
next). ``book`` is the watch bookkeeping (loopx.kernel.policy.tick.load_book).
Given ``store_root``, each open run also says which git worktree it works in
(``"worktree": {"path", "branch"}`` or None; parallel runs, docs/multi-agent.md).
"""

from __future__ import annotations

from loopx.kernel.read import budget, hosts, queries, worktrees
from loopx.kernel.storage import actors, machines

READY_SHOWN = 5


def host_errors(state: dict, goal_id: str) -> list[dict]:
    """Agents whose last turn on ``goal_id`` ended on a host setup error, newest first."""
    out = []
    for agent, e in (state.get("host_errors") or {}).items():
        if e.get("goal") != goal_id:
            continue
        out.append({"agent": agent, "host": e.get("host"), "reason": e.get("reason"), "message": e.get("message"),
                    "run": e.get("run"), "ts": e.get("ts"), "reset_at": e.get("reset_at"),
                    "retry_at": hosts.retry_at(e)})
    return sorted(out, key=lambda x: x["ts"] or "", reverse=True)


def _run_brief(run: dict | None) -> dict | None:
    if not run:
        return None
    return {k: run.get(k) for k in ("id", "agent", "todo", "result", "verified", "started", "finished", "slots",
                                    "usage", "changes", "host", "permission_mode", "setup_error")}


def next_step(state: dict, goal: dict, groups: dict, gates: list[dict], ready: list[dict],
              budget_now: dict | None = None, setup_error: dict | None = None, now_iso: str = "") -> str:
    gid = goal["id"]
    if goal["status"] == "paused":
        return f"loopx goal resume {gid}"
    if goal["status"] in ("done", "stopped"):
        return f"nothing: the goal is {goal['status']}"
    if gates:
        g = gates[0]
        return f"a human decides gate {g['id']}: loopx gate approve {g['id']}  (or reject with --note)"
    running = [r for r in queries.open_runs(state, gid) if not r.get("lease_until") or queries.lease_live(r, now_iso)]
    if running:
        r = max(running, key=lambda x: x.get("seq", 0))
        who = actors.agent_name(r.get("agent")) or r.get("agent") or "?"
        return (f"wait for {r['id']} ({who}, lease until {r.get('lease_until') or '?'})"
                + (f"; {len(running) - 1} more open run(s)" if len(running) > 1 else ""))
    if setup_error:
        return (f"fix the setup ({setup_error.get('reason')}: {setup_error.get('message')}), "
                f"then: loopx goal resume {gid}")
    errs = host_errors(state, gid)
    if errs:
        e = errs[0]
        return f"fix {e['host'] or e['agent']}: {e['reason'].replace('_', ' ')} ({e['message'][:80]}); see docs/usage.md"
    exp = (state.get("experiments") or {}).get(gid)
    if exp is not None:  # research experiments: the plateau, else the next trial
        from loopx.kernel.read import experiments

        hit = experiments.value_rule(exp)
        if hit is not None:
            return f"{hit[1]}: " + hit[2].split("; ", 1)[-1]
        return "loopx run --agent-cmd CMD   # each turn is a trial that loopx measures (docs/experiments.md)"
    return _next_for_todos(state, goal, groups, ready, budget_now)


def _next_for_todos(state: dict, goal: dict, groups: dict, ready: list[dict], budget_now: dict | None) -> str:
    """next_step's answer once nothing blocks the goal: from its todos, the budget and its watches."""
    gid = goal["id"]
    if ready and budget_now is not None and budget_now["slots"] and budget_now["left"] <= 0:
        return "wait: the budget of this window is spent (see `loopx quota should-run --explain`)"
    if ready and goal.get("no_progress_streak"):
        return "loopx quota should-run --explain  (the last run made no progress: is the next one worth it?)"
    if ready:
        return "loopx next  (or: loopx run --agent-cmd ...)"
    return _idle_step(state, gid, groups)


def _idle_step(state: dict, gid: str, groups: dict) -> str:
    """``next_step`` of a goal with nothing ready: held todos, todos waiting on goals, watches, done."""
    live = groups["claimed"]
    if live:
        return f"wait: {len(live)} todo(s) held by live leases"
    waiting = [g for t in groups["open"] + groups["expired"] for g in queries.goals_waited_on(state, t)]
    if waiting:
        return f"wait: the open todos wait for goal {waiting[0]} to be done (`loopx status --goal-id {waiting[0]}`)"
    open_like = groups["open"] + groups["expired"] + groups["blocked"]
    if not open_like and (any(w["goal"] == gid and w["status"] == "active" for w in (state.get("watches") or {}).values())
                          or any(t.get("every") for t in groups["done"])):
        return "watching: `loopx quota should-run` runs due checks and reopens recurring todos (`loopx watch list`)"
    # a live view counts the done todos it left out in ``closed``
    if not open_like and (groups["done"] or state.get("closed", {}).get(gid, {}).get("done")):
        return f"goal looks complete: loopx goal done {gid}"
    if groups["blocked"] and not groups["open"]:
        return f"unblock a todo: loopx todo update {groups['blocked'][0]['id']} --reopen"
    return f'loopx todo add "first step" --goal-id {gid}'


def _counts(state: dict, gid: str, groups: dict) -> dict:
    counts = {k: len(v) for k, v in groups.items()}
    for k, n in state.get("closed", {}).get(gid, {}).items():  # a live view counts closed todos here
        counts[k] = counts.get(k, 0) + n
    return counts


def _open_run(run: dict, store_root: str | None) -> dict:
    out = _run_brief(run) or {}  # never empty: ``run`` is an open run
    if store_root is not None:
        path = worktrees.for_run(store_root, run["id"])
        out["worktree"] = {"path": path, "branch": worktrees.branch(run["id"])} if path else None
    return out


def _waiting_on_goals(state: dict, groups: dict) -> list[dict]:
    """Open todos that wait for other goals to be done: ``[{id, title, goals: [{id, status}]}]``."""
    out = []
    for t in groups["open"] + groups["expired"]:
        waits = queries.goals_waited_on(state, t) if t.get("depends_on_goals") else []
        if waits:
            out.append({"id": t["id"], "title": t["title"],
                        "goals": [{"id": g, "status": (state["goals"].get(g) or {}).get("status")} for g in waits]})
    return out


def decision_row(d: dict | None) -> dict | None:
    """What a summary row carries of the goal's should-run answer (loopx.kernel.policy.decide.for_client):
    ``{decision, reason, message, todo_id, gate_id, next_check_at, group, needs_you}`` (the group
    and the flag come from the reason registry, loopx.kernel.reasons)."""
    if not d:
        return None
    from loopx.kernel import reasons

    out = {k: d.get(k) for k in ("decision", "reason", "message", "todo_id", "gate_id", "next_check_at")}
    out.update(group=reasons.group(d), needs_you=reasons.needs_you(d))
    return out


def goal_summary(state: dict, goal: dict, now_iso: str, book: dict | None = None,
                 store_root: str | None = None, decision: dict | None = None) -> dict:
    """One goal's row of ``summary``. With ``decision`` (the goal's should-run answer) the row
    renders it: ``decision`` (``decision_row``) and ``next`` (the registry's command for it)."""
    gid = goal["id"]
    groups = queries.by_status(state, gid, now_iso)
    gates = sorted(queries.pending_gates(state, gid), key=lambda g: g["created"])
    ready = queries.ready_todos(state, gid, now_iso) if goal["status"] == "active" else []
    last = state["runs"].get(goal.get("last_run") or "")
    money = budget.without_ledger(budget.budget(state, goal, now_iso))
    setup = None
    if goal["status"] == "active" and last and last.get("setup_error"):
        from loopx.kernel.read.verify import open_error

        setup = open_error(state, goal)
    return {
        "id": gid, "status": goal["status"], "objective": goal["objective"], "done_when": goal.get("done_when"),
        "priority": goal.get("priority", 0), "verify": goal.get("verify"), "scope": goal["scope"],
        "needs_human": [{"gate_id": g["id"], "kind": g["kind"], "question": g["question"],
                         "context": g.get("context"), "requested_by": g["requested_by"], "created": g["created"],
                         "blocks": g["blocks"], "code": g["id"].split("-", 1)[-1]} for g in gates],
        "host_errors": host_errors(state, gid),
        "todos": _counts(state, gid, groups),
        "claimed": [{"id": t["id"], "title": t["title"], "holder": t["claim"]["holder"],
                     "machine": machines.at(state, t["claim"].get("node")),
                     "lease_until": t["claim"]["lease_until"]} for t in groups["claimed"]],
        "expired": [{"id": t["id"], "title": t["title"], "holder": t["claim"]["holder"],
                     "machine": machines.at(state, t["claim"].get("node")),
                     "lease_until": t["claim"]["lease_until"]} for t in groups["expired"]],
        "ready": [{"id": t["id"], "title": t["title"], "priority": t.get("priority", 0)} for t in ready[:READY_SHOWN]],
        "ready_count": len(ready),
        "blocked": [{"id": t["id"], "title": t["title"], "note": t.get("note")} for t in groups["blocked"]],
        "waiting_on_goals": _waiting_on_goals(state, groups),
        "budget": money,
        "runs": goal.get("runs", 0), "no_progress_streak": goal.get("no_progress_streak", 0),
        "last_run": _run_brief(last),
        "open_runs": [dict(_open_run(r, store_root), machine=machines.at(state, r.get("node")))
                      for r in queries.open_runs(state, gid)],
        "max_parallel": int(goal.get("max_parallel") or 1),
        "last_decision": state["decisions"].get(gid),
        "setup_error": setup,
        "watches": _watches(state, gid, now_iso, book),
        "decision": decision_row(decision),
        "experiment": _experiment(state, gid),
        "next": _next_for(decision) if decision else next_step(state, goal, groups, gates, ready, money, setup, now_iso),
    }


def _next_for(d: dict) -> str:
    from loopx.kernel import reasons

    return reasons.next_command(d)


def _experiment(state: dict, gid: str) -> dict | None:
    """The experiment's summary (loopx.kernel.read.experiments), None for an ordinary goal."""
    if not (state.get("experiments") or {}).get(gid):
        return None
    from loopx.kernel.read import experiments

    return experiments.summary(state, gid)


def _watches(state: dict, gid: str, now_iso: str, book: dict | None) -> list[dict]:
    if not state.get("watches"):
        return []
    from loopx.kernel.read import watching as watches

    return watches.describe(state, book, now_iso, gid)


def summary(state: dict, now_iso: str, goal_id: str | None = None, book: dict | None = None,
            store_root: str | None = None, decisions: dict | None = None) -> dict:
    """Everything ``loopx status`` shows, as data. ``decisions`` ({goal id: should-run answer})
    makes each row render its goal's decision (``goal_summary``). Raises like
    ``queries.resolve_goal`` for a bad id."""
    if goal_id:
        goals = [queries.resolve_goal(state, goal_id)]
    else:
        order = {"active": 0, "paused": 1, "done": 2, "stopped": 3}
        goals = sorted(state["goals"].values(), key=lambda g: (order.get(g["status"], 9), -(g.get("priority") or 0), g["created"]))
    rows = [goal_summary(state, g, now_iso, book, store_root, (decisions or {}).get(g["id"])) for g in goals]
    agents = sorted(state["agents"].values(), key=lambda a: a.get("last_seen") or "", reverse=True)
    held = queries.holdings(state, now_iso)
    agent_rows = [dict(a, holds=[h["id"] for h in held.get(actors.agent(a["name"]), [])]) for a in agents]
    health = queries.store_health(state)
    if not rows and health["files"].get("events", {}).get("bad_lines"):
        nxt = "loopx doctor   # some records could not be read: do not start over before it says why"
    elif not rows:
        nxt = 'loopx start-goal --goal-text "..." --done-when "..." --verify "..."'
    else:
        human = [r for r in rows if (r["decision"]["needs_you"] if r.get("decision")
                                     else (r["needs_human"] or r["host_errors"] or r["setup_error"]))]
        active = [r for r in rows if r["status"] == "active"]
        nxt = (human or active or rows)[0]["next"]
    return {"now": now_iso, "goals": rows, "agents": agent_rows, "store": health, "next": nxt}
