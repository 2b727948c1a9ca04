"""Watches: cheap checks that run without any model and open a todo only on a material change.

A watch belongs to a goal: ``{id, goal, name, every (s), check (shell command), on, match (regex or
None), todo (title or None), timeout (s)}``. ``on`` is the trigger:

- ``change``  the check's output hash differs from the last one seen (the first check sets it);
- ``fail``    the exit status turned non-zero (the first check counts when it fails);
- ``pass``    the exit status turned zero (the first check counts when it passes);
- ``match``   ``match`` (a regex) found the output and did not the time before.

Events: ``watch.added``, ``watch.paused``, ``watch.resumed``, ``watch.removed`` (this module);
``watch.checked`` and ``watch.fired`` (loopx.kernel.policy.tick). This module holds the write
operations; the read side (``describe``, ``next_due``, the decision's watch rule) is
loopx.kernel.read.watching, and running checks is loopx.kernel.policy.tick's job.
"""

from __future__ import annotations

import re

from loopx.errors import Conflict, FieldError, UsageError
from loopx.kernel.read import queries, validate
from loopx.kernel.read.watching import DEFAULT_TIMEOUT, MAX_EVERY, MAX_TIMEOUT, MIN_EVERY, TRIGGERS
from loopx.kernel.storage import clock, ids
from loopx.kernel.storage.store import Draft, Store


def _name_ok(name: str) -> str:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "._-" for c in name) or not name[0].isalnum():
        raise UsageError(f"invalid watch name {name!r}", "use letters, digits, '.', '_' or '-' (at most 64)")
    return name


def _duration(value, field: str, low: float, high: float, default: float | None = None) -> float:
    """``value`` (a duration such as ``30m``) in seconds, ``default`` when None; FieldError (exit 2)
    when it does not parse or lies outside ``low..high`` seconds."""
    if value is None and default is not None:
        return default
    try:
        secs = clock.parse_duration(value)
    except UsageError as exc:
        raise FieldError(field, "{field}: " + exc.message, "use e.g. {field} 30m") from None
    if not low <= secs <= high:
        raise FieldError(field, f"{{field}} must be between {clock.format_duration(low)} and {clock.format_duration(high)}",
                         "use e.g. {field} 30m")
    return secs


def resolve(state: dict, ref: str) -> dict:
    """The live watch named or identified by ``ref`` (name, id or unique id prefix).
    Raises NotFound or Ambiguous (exit 2)."""
    pool = {w["id"]: w for w in (state.get("watches") or {}).values() if w["status"] != "removed"}
    for w in pool.values():
        if w["name"] == ref:
            return w
    return pool[ids.resolve("watch", ref, pool)]


def add(store: Store, actor: str, goal_id: str | None, *, every, check: str, on: str = "change",
        match: str | None = None, todo: str | None = None, timeout=None, name: str | None = None) -> dict:
    """Add a watch (``watch.added``). ``every``/``timeout`` are durations (``30m``); returns the watch
    dict. Raises UsageError for bad input, Conflict for a taken name or a closed goal."""
    every_s = _duration(every, "every", MIN_EVERY, MAX_EVERY)
    timeout_s = _duration(timeout, "timeout", 1, MAX_TIMEOUT, DEFAULT_TIMEOUT)
    check = validate.command(check, "check") or ""
    if not check:
        raise FieldError("check", "{field} needs a command", 'e.g. {field} "gh pr checks 12"')
    on = validate.choice(on or "change", TRIGGERS, "on")
    if on == "match" and not match:
        raise FieldError("match", "on match needs {field} REGEX", "e.g. {field} 'FAILED|error'", code="match_required")
    if match is not None:
        match = validate.text(match, "match", limit=500)
        try:
            re.compile(match)
        except re.error as exc:
            raise FieldError("match", f"{{field}} is not a valid regular expression: {exc}", "check the pattern") from None
        if on == "change":
            on = "match"
    todo = validate.text(todo, "todo", required=False, limit=validate.MAX_TITLE)
    if name is not None:
        _name_ok(name)
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        if g["status"] in ("done", "stopped"):
            raise Conflict(f"goal {g['id']} is {g['status']}", "resume it first", code="goal_closed",
                           details={"goal": g["id"], "status": g["status"]})
        live = {w["name"] for w in state.get("watches", {}).values() if w["status"] != "removed"}
        wid = ids.new_id("watch", state.get("watches", {}))
        wname = name or wid
        if wname in live:
            raise Conflict(f"a watch named {wname!r} exists", "pick another name or remove the old watch",
                           code="watch_exists", details={"field": "name", "watch": wname})
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
