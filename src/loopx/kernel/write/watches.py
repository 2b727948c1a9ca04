"""Watches: cheap checks that run without any model and open a todo only on a material change.

A watch belongs to a goal: ``{id, goal, name, every (s), check (shell command), on, match (regex or
None), todo (title or None), timeout (s)}``. ``on`` is the trigger:

- ``change``  the check's output hash differs from the last one seen (the first check sets it);
- ``fail``    the exit status turned non-zero (the first check counts when it fails);
- ``pass``    the exit status turned zero (the first check counts when it passes);
- ``match``   ``match`` (a regex) found the output and did not the time before.

Events: ``watch.added``, ``watch.paused``, ``watch.resumed``, ``watch.removed`` (this module);
``watch.checked`` and ``watch.fired`` (loopx.kernel.policy.tick). This module holds the write operations
and the read side (``describe``, ``due``); running checks is loopx.kernel.policy.tick's job.
"""

from __future__ import annotations

from loopx.errors import Conflict, UsageError
from loopx.kernel.read import queries, validate
from loopx.kernel.storage import clock
from loopx.kernel.storage.store import Draft, Store

TRIGGERS = ("change", "fail", "pass", "match")
DEFAULT_TIMEOUT = 60.0
MIN_EVERY, MAX_EVERY = 60.0, 366 * 86400.0
MAX_TIMEOUT = 3600.0
FAILING_AFTER = 3    # consecutive check errors (timeout, cannot run) before the goal needs a human


def _name_ok(name: str) -> str:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "._-" for c in name) or not name[0].isalnum():
        raise UsageError(f"invalid watch name {name!r}", "use letters, digits, '.', '_' or '-' (at most 64)")
    return name


def _duration(value, what: str, low: float, high: float, default: float | None = None) -> float:
    if value is None and default is not None:
        return default
    try:
        secs = clock.parse_duration(value)
    except UsageError as exc:
        raise UsageError(f"{what}: {exc.message}", f"use e.g. {what} 30m") from None
    if not low <= secs <= high:
        raise UsageError(f"{what} must be between {clock.format_duration(low)} and {clock.format_duration(high)}",
                         f"use e.g. {what} 30m")
    return secs


def resolve(state: dict, ref: str) -> dict:
    """The live watch named or identified by ``ref`` (name, id or unique id prefix).
    Raises NotFound or Ambiguous (exit 2)."""
    from loopx.kernel.storage import ids

    pool = {w["id"]: w for w in (state.get("watches") or {}).values() if w["status"] != "removed"}
    for w in pool.values():
        if w["name"] == ref:
            return w
    return pool[ids.resolve("watch", ref, pool)]


def add(store: Store, actor: str, goal_id: str | None, *, every, check: str, on: str = "change",
        match: str | None = None, todo: str | None = None, timeout=None, name: str | None = None) -> dict:
    """Add a watch (``watch.added``). ``every``/``timeout`` are durations (``30m``); returns the watch
    dict. Raises UsageError for bad input, Conflict for a taken name or a closed goal."""
    every_s = _duration(every, "--every", MIN_EVERY, MAX_EVERY)
    timeout_s = _duration(timeout, "--timeout", 1, MAX_TIMEOUT, DEFAULT_TIMEOUT)
    check = validate.command(check, "--check")
    if not check:
        raise UsageError("--check needs a command", 'e.g. --check "gh pr checks 12"')
    on = validate.choice(on or "change", TRIGGERS, "--on")
    if on == "match" and not match:
        raise UsageError("--on match needs --match REGEX", "e.g. --match 'FAILED|error'")
    if match is not None:
        import re

        match = validate.text(match, "--match", limit=500)
        try:
            re.compile(match)
        except re.error as exc:
            raise UsageError(f"--match is not a valid regular expression: {exc}", "check the pattern") from None
        if on == "change":
            on = "match"
    todo = validate.text(todo, "--todo", required=False, limit=validate.MAX_TITLE)
    if name is not None:
        _name_ok(name)
    out: dict = {}

    def plan(state, now):
        from loopx.kernel.storage import ids

        g = queries.resolve_goal(state, goal_id)
        if g["status"] in ("done", "stopped"):
            raise Conflict(f"goal {g['id']} is {g['status']}", f"resume it first: `loopx goal resume {g['id']}`")
        live = {w["name"] for w in state.get("watches", {}).values() if w["status"] != "removed"}
        wid = ids.new_id("watch", state.get("watches", {}))
        wname = name or wid
        if wname in live:
            raise Conflict(f"a watch named {wname!r} exists", "pick another --name or remove the old watch",
                           code="watch_exists")
        data = {"watch_id": wid, "name": wname, "every": every_s, "check": check, "on": on, "match": match,
                "todo": todo, "timeout": timeout_s}
        out.update(data, goal_id=g["id"])
        return [Draft("watch.added", g["id"], data)]

    store.transact(plan, actor=actor)
    return out


def set_status(store: Store, actor: str, ref: str, action: str) -> dict:
    """``action`` is ``pause``, ``resume`` or ``remove``; returns {watch_id, name, goal_id, status, changed}."""
    new = {"pause": "paused", "resume": "active", "remove": "removed"}[action]
    out: dict = {}

    def plan(state, now):
        w = resolve(state, ref)
        out.update(watch_id=w["id"], name=w["name"], goal_id=w["goal"], status=new, changed=w["status"] != new)
        if w["status"] == new:
            return []
        return [Draft(f"watch.{'resumed' if action == 'resume' else new}", w["goal"], {"watch_id": w["id"]})]

    store.transact(plan, actor=actor)
    return out


def live(state: dict, goal_id: str | None = None, *, active_only: bool = True) -> list[dict]:
    """Watches not removed (only active ones with ``active_only``), of ``goal_id`` when given."""
    return [w for w in (state.get("watches") or {}).values()
            if w["status"] != "removed" and (not active_only or w["status"] == "active")
            and (goal_id is None or w["goal"] == goal_id)]


def next_due(w: dict, book: dict | None) -> str | None:
    """When ``w`` should be checked next (ISO), from its bookkeeping; None = now (never checked)."""
    b = (book or {}).get(w["id"])
    if not b or not b.get("last_run"):
        return None
    return clock.iso(clock.parse_ts(b["last_run"]) + clock.timedelta(seconds=max(MIN_EVERY, w["every"])))


def open_todo(state: dict, watch_id: str) -> dict | None:
    """The todo this watch opened that is not done or archived yet (at most one)."""
    for t in state["todos"].values():
        if t.get("watch") == watch_id and t["status"] not in queries.DONE_STATES:
            return t
    return None


def recurring_due(todo: dict) -> str | None:
    """When a done recurring todo comes back (ISO): the first ``created + k*every`` after it was done."""
    every = todo.get("every")
    if not every or every <= 0 or todo["status"] != "done":
        return None
    anchor = clock.parse_ts(todo["created"])
    done = clock.parse_ts(todo.get("done_at") or todo["updated"])
    k = int((done - anchor).total_seconds() // every) + 1
    return clock.iso(anchor + clock.timedelta(seconds=k * every))


def describe(state: dict, book: dict | None, now_iso: str, goal_id: str | None = None) -> list[dict]:
    """One row per live watch: ``{id, name, goal, status, every (s), on, check, last_run, outcome,
    exit_code, excerpt, next_due, checks, fired, last_fired, failing, open_todo}``."""
    rows = []
    for w in sorted(live(state, goal_id, active_only=False), key=lambda w: w["created"]):
        b = (book or {}).get(w["id"]) or {}
        last = w.get("last") or {}
        nd = next_due(w, book)
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
    dues = [next_due(w, book) or now_iso for w in ws] + [recurring_due(t) for t in recurring]
    nxt = min(d for d in dues if d)
    what = []
    if ws:
        what.append(f"{len(ws)} watch(es)")
    if recurring:
        what.append(f"{len(recurring)} recurring todo(s)")
    return ("skip", "watching", f"nothing to do until a check fires: {' and '.join(what)}; next due {nxt}",
            nxt, {})
