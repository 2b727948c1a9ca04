"""Read-only questions about a folded state: which goal, which todos are ready, who holds what.

Shared by the CLI, the dashboard, the decision and the runner so they can never disagree.
Times are compared as ISO-8601 UTC strings (they sort as text).
"""

from __future__ import annotations

from loopx.errors import FieldError, NotFound, UsageError
from loopx.kernel.storage import fold, ids, machines

OPEN_STATES = ("open", "claimed")
DONE_STATES = ("done", "archived")


def resolve_goal(state: dict, goal_id: str | None, *, active_only: bool = False) -> dict:
    """The goal named by ``goal_id`` (exact or unique prefix), or the only active goal.
    Raises UsageError / NotFound / Ambiguous (exit 2) with a hint naming the choices."""
    goals = state["goals"]
    if goal_id:
        if goal_id in goals:
            return goals[goal_id]
        hits = [g for g in goals if g.startswith(goal_id)]
        if len(hits) == 1:
            return goals[hits[0]]
        if not hits:
            raise NotFound(f"no goal {goal_id!r}", "list the goals", details={"reason": "no_such_goal", "goal": goal_id})
        raise UsageError(f"goal id {goal_id!r} is ambiguous: {', '.join(sorted(hits)[:5])}",
                         "type more of the goal id", code="ambiguous")
    if not goals:
        raise UsageError("there is no goal yet", "start one", code="no_goal", details={"goals": 0})
    active = [g for g in goals.values() if g["status"] == "active"]
    if len(active) == 1:
        return active[0]
    if not active and not active_only and len(goals) == 1:
        return next(iter(goals.values()))
    choices = ", ".join(sorted(g["id"] for g in (active or goals.values()))[:8])
    raise FieldError("goal_id", "more than one goal could be meant" if active else "no active goal",
                     f"pass {{field}} (one of: {choices})", code="goal_required")


def resolve_todo(state: dict, given: str) -> dict:
    return state["todos"][ids.resolve("todo", given, state["todos"])]


def resolve_gate(state: dict, given: str) -> dict:
    return state["gates"][ids.resolve("gate", given, state["gates"])]


def resolve_run(state: dict, given: str) -> dict:
    return state["runs"][ids.resolve("run", given, state["runs"])]


def resolve_evidence(state: dict, given: str) -> dict:
    return state["evidence"][ids.resolve("evidence", given, state["evidence"])]


def lease_live(holder: dict | None, now_iso: str) -> bool:
    """Whether ``holder`` (a todo's claim or a run: a dict with ``lease_until``, an ISO-8601 UTC
    string) holds a lease that ends after ``now_iso``; False for None or a dict without a lease."""
    return holder is not None and bool(holder.get("lease_until")) and str(holder["lease_until"]) > now_iso


def claim_live(todo: dict, now_iso: str) -> bool:
    """Whether ``todo`` has a claim whose lease ends after ``now_iso``."""
    return lease_live(todo.get("claim"), now_iso)


def goal_todos(state: dict, goal_id: str) -> list[dict]:
    """The goal's todos in queue order: priority (high first), then creation order."""
    return sorted((t for t in state["todos"].values() if t["goal"] == goal_id),
                  key=lambda t: (-(t.get("priority") or 0), t["order"]))


def pending_gates(state: dict, goal_id: str) -> list[dict]:
    return [g for g in state["gates"].values() if g["goal"] == goal_id and g["status"] == "pending"]


def gate_blocks_goal(gate: dict) -> bool:
    return not gate.get("blocks")


def goals_waited_on(state: dict, todo: dict) -> list[str]:
    """The goals of ``todo``'s ``depends_on_goals`` that are not ``done`` yet (in order)."""
    goals = state["goals"]
    return [g for g in todo.get("depends_on_goals") or [] if (goals.get(g) or {}).get("status") != "done"]


def deps_done(state: dict, todo: dict) -> bool:
    """All of ``todo``'s dependencies are done or archived and every goal it depends on is done. In
    a live view (``closed`` present) a dependency missing from the state is one the view left out
    because it was closed (a dependency is checked to exist when it is named, and a todo never
    goes away), so the view answers without the full state."""
    if todo.get("depends_on_goals") and goals_waited_on(state, todo):
        return False
    todos = state["todos"]
    live = fold.is_live(state)
    for d in todo.get("depends_on") or []:
        t = fold.held(todos, d)  # the explicit "does the view hold it?" (see above)
        if t is None:
            if not live:
                return False
        elif t["status"] not in DONE_STATES:
            return False
    return True


def candidates(state: dict, goal_id: str, now_iso: str, holder: str | None = None) -> list[dict]:
    """Todos a turn could take if no gate stood in the way: open (or claimed with an expired lease,
    or held by ``holder`` itself) with their dependencies done. Queue order."""
    out = []
    for t in goal_todos(state, goal_id):
        if not deps_done(state, t):
            continue
        if t["status"] == "open":
            out.append(t)
        elif t["status"] == "claimed":
            c = t["claim"]
            if not claim_live(t, now_iso) or (holder and machines.holds(state, c, holder)):
                out.append(t)
    return out


def gate_blocked(state: dict, goal_id: str) -> tuple[bool, set[str]]:
    """(a pending gate blocks the whole goal, ids of the todos pending gates block)."""
    blocked: set[str] = set()
    for g in pending_gates(state, goal_id):
        if gate_blocks_goal(g):
            return True, blocked
        blocked.update(g["blocks"])
    return False, blocked


def ready_todos(state: dict, goal_id: str, now_iso: str, holder: str | None = None) -> list[dict]:
    """``candidates`` that no pending gate blocks. Queue order."""
    whole, blocked = gate_blocked(state, goal_id)
    if whole:
        return []
    return [t for t in candidates(state, goal_id, now_iso, holder) if t["id"] not in blocked]


def holdings(state: dict, now_iso: str, *, expired: bool = False) -> dict[str, list[dict]]:
    """Who holds what: ``{actor: [{"id", "title", "goal", "lease_until", "live"}]}`` for every
    claimed todo, keyed by the holder's actor string (``agent:<name>`` or ``human:<name>``).
    ``live`` is False for a claim past its lease; such claims are listed only with ``expired``."""
    held: dict[str, list[dict]] = {}
    for t in state["todos"].values():
        c = t.get("claim")
        if not c or t["status"] != "claimed":
            continue
        live = lease_live(c, now_iso)
        if live or expired:
            held.setdefault(c["holder"], []).append({"id": t["id"], "title": t["title"], "goal": t["goal"],
                                                     "lease_until": c["lease_until"], "live": live})
    return held


def by_status(state: dict, goal_id: str, now_iso: str) -> dict[str, list[dict]]:
    """Todos grouped: open, claimed (live lease), expired (claim past its lease), blocked, done, archived."""
    groups: dict[str, list[dict]] = {k: [] for k in ("open", "claimed", "expired", "blocked", "done", "archived")}
    for t in goal_todos(state, goal_id):
        st = t["status"]
        if st == "claimed" and not claim_live(t, now_iso):
            st = "expired"
        groups.setdefault(st, []).append(t)
    return groups


def run_todo(state: dict, run: dict) -> dict | None:
    """The todo ``run`` worked on, or None when it has none (or, on the full state, an unknown
    one). In a live view a todo left out because it was closed raises fold.NotInLiveView (a
    KeyError): a writer's plan then re-runs on the full state (``Store.transact``), a reader
    through ``Store.read`` too."""
    tid = run.get("todo")
    if not tid:
        return None
    return state["todos"].get(tid)


def open_runs(state: dict, goal_id: str | None = None) -> list[dict]:
    return [r for r in state["runs"].values() if r["finished"] is None and (goal_id is None or r["goal"] == goal_id)]


def recent_evidence(state: dict, goal_id: str, limit: int = fold.EVIDENCE_KEPT) -> list[dict]:
    """The goal's newest ``limit`` evidence records, oldest first (by seq). A live view holds the
    newest ``fold.EVIDENCE_KEPT``: a larger ``limit`` wants the full state."""
    ev = [e for e in state["evidence"].values() if e["goal"] == goal_id]
    ev.sort(key=lambda e: e.get("seq", 0))
    return ev[-limit:]


def store_health(state: dict) -> dict:
    """What a reader noticed about the files: bad lines, torn tails, unknown types, conflicts."""
    meta = state["meta"]
    files = {}
    for name, m in meta["files"].items():
        files[name] = {"lines": m["lines"], "bad_lines": m["bad"], "bad_samples": m["bad_samples"][:5],
                       "torn_tail_bytes": meta.get("torn", {}).get(name, 0),
                       "seq_gaps": m.get("seq_gaps", 0), "conflict_markers": bool(m.get("conflict")),
                       "bom": bool(m.get("bom")), "crlf_lines": m.get("crlf", 0)}
    problems = []
    for name, f in files.items():
        if f["bad_lines"]:
            problems.append(f"{name}.jsonl: {f['bad_lines']} bad line(s) skipped: record(s) that could not be read "
                            "(what they held is missing here)")
        if f["torn_tail_bytes"]:
            problems.append(f"{name}.jsonl: torn last line ({f['torn_tail_bytes']} bytes), repaired on next write")
        if f["conflict_markers"]:
            problems.append(f"{name}.jsonl: git conflict markers")
    if meta.get("unknown_types"):
        problems.append("unknown event types: " + ", ".join(sorted(meta["unknown_types"])))
    if meta.get("read_only"):
        problems.append("read-only: " + meta["read_only"])
    return {"files": files, "unknown_types": dict(meta.get("unknown_types", {})),
            "repairs": meta.get("repairs", 0), "read_only": meta.get("read_only"), "problems": problems}
