"""Read-only views of the log: filtered events and the rounds of the governed loop.

``events(store, ...)`` returns the records of both streams (events and evidence) merged in time
order, filtered by goal, start time and type prefix, newest ``limit`` kept.
``rounds(store, ...)`` returns one row per turn (a ``run.started`` .. ``run.finished`` pair) and
one per recorded non-run decision, in time order::

    {"kind": "run", "ts", "decision": "run", "run_id", "goal_id", "agent", "todo_id", "mode",
     "result", "verified", "evidence" (count), "slots", "duration" (s|None), "note",
     "usage": {input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, total_tokens,
               cost_usd, model, session_id, ...} | None (usage unknown),
     "changes": {commits, commit_count, files, added, removed, untracked, committed} | None,
     "host", "permission_mode", "wall_time" (s|None), "setup_error": {reason, message, ...} | None,
     "out_of_scope": [path] | None (files the turn changed outside the goal's scope)}
    {"kind": "decision", "ts", "decision", "reason", "message", "goal_id", "todo_id"}

Both get ``machine`` (the machine the run ran on, or that recorded the decision) when the caller
passes ``machines`` (a store with records of several machines).
"""

from __future__ import annotations

import heapq

from loopx.errors import FieldError
from loopx.kernel.storage import clock
from loopx.kernel.storage.clock import datetime


def _since_iso(since: datetime | None) -> str:
    return clock.iso(since) if since else ""


def events(store, *, goal_id: str | None = None, since: datetime | None = None,
           type_prefix: str | None = None, limit: int | None = 50, machines: dict | None = None) -> list[dict]:
    """Records (as stored, without ``crc``) matching the filters, oldest first; the newest
    ``limit`` of them (``None`` or 0 = all). With a limit the log is read from its newest end and
    reading stops once ``limit`` records matched, so the cost does not grow with the history.
    With ``machines`` ({node: machine name}, ``kernel.storage.machines.labels``; given when the store
    has records of several machines) each record also gets ``machine``."""
    if limit is not None and limit < 0:
        raise FieldError("limit", "{field} must be 0 or more", "use e.g. {field} 100 (0 = everything)")
    start = _since_iso(since)
    prefix = type_prefix or ""
    if limit:
        # newest first; on equal times evidence first, which reversed gives the oldest-first order
        merged = heapq.merge(store.iter_records_newest("evidence"), store.iter_records_newest("events"),
                             key=lambda r: r.get("ts") or "", reverse=True)
    else:
        merged = heapq.merge(store.iter_records("events"), store.iter_records("evidence"),
                             key=lambda r: r.get("ts") or "")
    out: list[dict] = []
    for rec in merged:
        if goal_id and rec.get("goal") != goal_id:
            continue
        if start and (rec.get("ts") or "") <= start:
            continue
        if prefix and not rec["type"].startswith(prefix):
            continue
        rec.pop("crc", None)
        if machines is not None:
            rec["machine"] = _machine(machines, rec.get("node"))
        out.append(rec)
        if limit and len(out) >= limit:
            break
    if limit:
        out.reverse()
    return out


def _machine(machines: dict, node: str | None) -> str | None:
    return None if node is None else machines.get(node) or node


def rounds(store, state: dict, *, goal_id: str | None = None, since: datetime | None = None,
           limit: int | None = 50, machines: dict | None = None) -> list[dict]:
    """The loop's rounds (see the module docstring), oldest first, newest ``limit`` kept. With a
    limit they are rebuilt from the newest end of the log (``state`` is not used), so the cost does
    not grow with the history; without one, from ``state``'s runs (the full state). With
    ``machines`` ({node: name}) each row also gets ``machine``: where the run ran, or where the
    decision was recorded."""
    rows = _rounds(store, state, goal_id, _since_iso(since), limit)
    if machines is not None:
        for r in rows:
            r["machine"] = _machine(machines, r.pop("node", None))
    else:
        for r in rows:
            r.pop("node", None)
    return rows


def _rounds(store, state: dict, goal_id: str | None, start: str, limit: int | None) -> list[dict]:
    if limit:
        return _recent_rounds(store, goal_id, start, limit)
    rows = []
    for r in state["runs"].values():
        if (goal_id and r["goal"] != goal_id) or r["started"] <= start:
            continue
        rows.append(_run_row(r))
    for rec in store.iter_records("events"):
        if rec["type"] != "decision.recorded" or rec["ts"] <= start:
            continue
        if goal_id and rec.get("goal") != goal_id:
            continue
        d = rec.get("data") or {}
        if d.get("decision") == "run":
            continue
        rows.append({"kind": "decision", "ts": rec["ts"], "decision": d.get("decision"), "reason": d.get("reason"),
                     "message": d.get("message"), "goal_id": rec.get("goal"), "todo_id": d.get("todo_id"),
                     "node": rec.get("node")})
    rows.sort(key=lambda x: x["ts"])
    return rows[-limit:] if limit else rows


def _run_row(r: dict) -> dict:
    """One run of the folded state as a rounds row."""
    dur = None
    if r["finished"]:
        dur = round((clock.parse_ts(r["finished"]) - clock.parse_ts(r["started"])).total_seconds(), 1)
    return {"kind": "run", "ts": r["started"], "decision": "run", "run_id": r["id"], "goal_id": r["goal"],
            "agent": r["agent"], "todo_id": r.get("todo"), "mode": r.get("mode"), "result": r["result"],
            "verified": bool(r["verified"]) and r["result"] in ("progress", "completion"),
            "evidence": len(r.get("evidence") or []), "slots": r.get("slots", 0),
            "duration": dur, "note": r.get("note"), "usage": r.get("usage"), "changes": r.get("changes"),
            "host": r.get("host"), "permission_mode": r.get("permission_mode"),
            "wall_time": r.get("wall_time"), "setup_error": r.get("setup_error"), "node": r.get("node"),
            "out_of_scope": r.get("out_of_scope")}


def _recent_rounds(store, goal_id: str | None, start: str, limit: int) -> list[dict]:
    """The newest ``limit`` rounds, read backwards. A run's later records (``run.finished``,
    ``run.reported``, ``quota.spent``, ...) come before its ``run.started`` when reading from the
    end, so they wait in ``pending``; once its start is seen the run's records are folded, oldest
    first, through the same reducers as the full state, so the row is the one ``rounds`` would give."""
    from loopx.kernel.storage import fold

    rows: list[dict] = []
    pending: dict[str, list] = {}
    for rec in store.iter_records_newest("events", match=(b"run.", b"quota.spent", b"decision.recorded")):
        ts = rec.get("ts") or ""
        t, d = rec["type"], rec.get("data") or {}
        rid = d.get("run_id") if isinstance(d.get("run_id"), str) else None
        if rid and (t.startswith("run.") or t == "quota.spent"):
            pending.setdefault(rid, []).append(rec)
            if t != "run.started":
                continue
            recs = pending.pop(rid)
            if (start and ts <= start) or (goal_id and rec.get("goal") != goal_id):
                continue
            mini = fold.empty()
            for r in reversed(recs):
                fold.apply(mini, r)
            run = mini["runs"].get(rid)
            if run is not None:
                rows.append(_run_row(run))
        elif t == "decision.recorded" and d.get("decision") != "run":
            if (start and ts <= start) or (goal_id and rec.get("goal") != goal_id):
                continue
            rows.append({"kind": "decision", "ts": ts, "decision": d.get("decision"), "reason": d.get("reason"),
                         "message": d.get("message"), "goal_id": rec.get("goal"), "todo_id": d.get("todo_id"),
                         "node": rec.get("node")})
        if len(rows) >= limit:
            break
    rows.reverse()
    rows.sort(key=lambda x: x["ts"])
    return rows[-limit:]
