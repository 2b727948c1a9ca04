"""The read side of watches and recurring todos: due times, the rows that status, history, the
dashboard and ``watch list`` show, and the decision's watch rule (``idle_rule``).

``book`` everywhere is the per-check bookkeeping of loopx.kernel.policy.tick (``load_book``;
None when unknown). Watch shapes: see loopx.kernel.write.watches and loopx.kernel.storage.fold.
"""

from __future__ import annotations

from loopx.kernel.read import localtime, queries
from loopx.kernel.storage import clock

TRIGGERS = ("change", "fail", "pass", "match")
DEFAULT_TIMEOUT = 60.0
MIN_EVERY, MAX_EVERY = 60.0, 366 * 86400.0
MAX_TIMEOUT = 3600.0
FAILING_AFTER = 3    # consecutive check errors (timeout, cannot run) before the goal needs a human


def live(state: dict, goal_id: str | None = None, *, active_only: bool = True) -> list[dict]:
    """Watches not removed (only active ones with ``active_only``), of ``goal_id`` when given."""
    return [w for w in (state.get("watches") or {}).values()
            if w["status"] != "removed" and (not active_only or w["status"] == "active")
            and (goal_id is None or w["goal"] == goal_id)]


def next_due(w: dict, book: dict | None, state: dict | None = None) -> str | None:
    """When ``w`` should be checked next (ISO), from its bookkeeping; None = now (never checked).
    A whole-day cadence (``1d``, ``7d``) is due at the local wall-clock time it was added at
    (``localtime``: the goal's zone or the user's, so DST does not move it), the first such time
    after its last run; other cadences ``every`` seconds after the last run."""
    b = (book or {}).get(w["id"])
    if not b or not b.get("last_run"):
        return None
    every = max(MIN_EVERY, w["every"])
    if every % localtime.DAY == 0 and w.get("created"):
        return localtime.first_after_iso(w["created"], every, b["last_run"], localtime.zone_name(state, w.get("goal")))
    return clock.iso(clock.parse_ts(b["last_run"]) + clock.timedelta(seconds=every))


def open_todo(state: dict, watch_id: str) -> dict | None:
    """The todo this watch opened that is not done or archived yet (at most one)."""
    for t in state["todos"].values():
        if t.get("watch") == watch_id and t["status"] not in queries.DONE_STATES:
            return t
    return None


def recurring_due(todo: dict, state: dict | None = None) -> str | None:
    """When a done recurring todo comes back (ISO): the first ``created + k*every`` after it was
    done; a whole-day ``every`` counts local calendar days (``localtime``: the goal's zone, else the
    user's), so a daily 09:00 stays 09:00 across DST changes."""
    every = todo.get("every")
    if not every or every <= 0 or todo["status"] != "done":
        return None
    return localtime.first_after_iso(todo["created"], every, todo.get("done_at") or todo["updated"],
                                     localtime.zone_name(state, todo.get("goal")) if every % localtime.DAY == 0 else None)


def describe(state: dict, book: dict | None, now_iso: str, goal_id: str | None = None) -> list[dict]:
    """One row per live watch: ``{id, name, goal, status, every (s), on, check, last_run, outcome,
    exit_code, excerpt, next_due, checks, fired, last_fired, failing, open_todo}``."""
    rows = []
    for w in sorted(live(state, goal_id, active_only=False), key=lambda w: w["created"]):
        b = (book or {}).get(w["id"]) or {}
        last = w.get("last") or {}
        nd = next_due(w, book, state)
        t = open_todo(state, w["id"])
        rows.append({"id": w["id"], "name": w["name"], "goal": w["goal"], "status": w["status"],
                     "every": w["every"], "on": w["on"], "match": w.get("match"), "check": w["check"],
                     "last_run": b.get("last_run") or last.get("ts"),
                     "outcome": b.get("outcome") or last.get("outcome"),
                     "exit_code": b.get("exit_code", last.get("exit_code")),
                     "excerpt": b.get("excerpt") if b else last.get("excerpt"),
                     "error": b.get("error"),
                     "next_due": (nd or now_iso) if w["status"] == "active" else None,
                     "checks": b.get("checks", 0), "fired": w.get("fired", 0), "last_fired": w.get("last_fired"),
                     "failing": bool(w.get("failing")), "open_todo": t["id"] if t else None})
    return rows


# ------------------------------------------------------------------- the decision's watch rule
def rule_note(state: dict, goal_id: str, book: dict | None, now_iso: str) -> str | None:
    """The ``--explain`` line for a goal's watches, or None when it has none."""
    rows = describe(state, book, now_iso, goal_id)
    if not rows:
        return None
    parts = [f"{r['name']} every {clock.format_duration(r['every'])}, last {r['outcome'] or 'never run'}, "
             f"next {r['next_due'] or r['status']}, fired {r['fired']}x" for r in rows]
    return f"{len(rows)} watch(es): " + "; ".join(parts)


def idle_rule(state: dict, goal: dict, book: dict | None, now_iso: str) -> tuple | None:
    """When a goal has no live todos left (none yet, or all done) but watches or recurring todos:
    ``(decision, reason, message, next_check_at, extra)``; else None (the usual rules apply).
    A watch whose check keeps erroring -> ``wait_human`` / ``watch_failing``; otherwise ``skip`` /
    ``watching`` until the next due check or recurring todo."""
    gid = goal["id"]
    ws = live(state, gid)
    recurring = [t for t in queries.goal_todos(state, gid) if t.get("every") and t["status"] == "done"]
    if not ws and not recurring:
        return None
    failing = [w for w in ws if w.get("failing")]
    if failing:
        w = failing[0]
        err = ((book or {}).get(w["id"]) or {}).get("error") or (w.get("last") or {}).get("excerpt") or ""
        return ("wait_human", "watch_failing",
                f"watch {w['name']} keeps erroring ({err[:120]}); fix its check or `loopx watch pause {w['name']}`",
                None, {"watch_id": w["id"]})
    dues = [next_due(w, book, state) or now_iso for w in ws] + [recurring_due(t, state) for t in recurring]
    nxt = min(d for d in dues if d)
    what = []
    if ws:
        what.append(f"{len(ws)} watch(es)")
    if recurring:
        what.append(f"{len(recurring)} recurring todo(s)")
    return ("skip", "watching", f"nothing to do until a check fires: {' and '.join(what)}; next due {nxt}",
            nxt, {})
