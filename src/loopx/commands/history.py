"""``loopx history``: the event log, filtered, and the rounds of the governed loop.

Text shows the rounds table (when there are any and no ``--type`` filter) followed by the events.
When the store holds records of several machines (``loopx sync``, a union merge), every row also
names its machine (``machine``; ``machines`` maps node ids to names); single-machine output is
unchanged.
``--format json`` carries both lists; ``--format jsonl`` prints one event record per line and
ends with the envelope line (``data.count``), or one round per line with ``--rounds``.
"""

from __future__ import annotations

from loopx.commands import add, goal_opt
from loopx.kernel.storage import actors


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=history, render=render, command="history",
            example="loopx history --goal-id g1 --since 24h --type run.",
            description="The event log, filtered, and the loop's rounds (decision, agent, todo, result, "
                        "verified, evidence, slots spent, duration).")
    goal_opt(p)
    p.add_argument("--since", metavar="DUR|TIME", help="only records after this (e.g. 24h or an ISO time)")
    p.add_argument("--type", dest="type_prefix", metavar="PREFIX", help="only event types starting with PREFIX (e.g. gate.)")
    p.add_argument("--limit", default=50, metavar="N", help="newest N records (default 50, 0 = all)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--rounds", action="store_true", help="only the rounds view")
    view.add_argument("--events", action="store_true", help="only the events")


def history(ctx, goal_id=None, since=None, type_prefix=None, limit=50, rounds=False, events=False):
    from loopx.kernel.read import history as hist
    from loopx.kernel.read import queries, validate
    from loopx.kernel.storage import clock

    n = validate.count(limit, "--limit", low=0, high=10_000_000)
    store = ctx.store()
    state = store.load(view="live" if n else "full")  # with a limit only the goals are needed
    gid = queries.resolve_goal(state, goal_id)["id"] if goal_id else None
    start = clock.since_arg(since, clock.now()) if since else None
    want_rounds = rounds or (not events and not type_prefix)
    want_events = events or not rounds
    names = None
    from loopx.kernel.storage import machines

    if machines.several(state):  # records of several machines: say which one did what
        names = machines.labels(state)
    out = {"goal_id": gid, "since": clock.iso(start) if start else None}
    if names is not None:
        out["machines"] = names
    out["rounds"] = hist.rounds(store, state, goal_id=gid, since=start, limit=n, machines=names) if want_rounds else []
    out["events"] = hist.events(store, goal_id=gid, since=start, type_prefix=type_prefix, limit=n, machines=names) \
        if want_events else []
    if ctx.fmt == "jsonl":
        from loopx.output import print_json

        rows = out["rounds"] if rounds else out["events"]
        for row in rows:
            print_json(row)
        return {"count": len(rows), "view": "rounds" if rounds else "events"}
    out["count"] = len(out["events"])
    out["watches"] = []
    if state.get("watches"):
        from loopx.kernel.policy import tick
        from loopx.kernel.read import watching as watches

        out["watches"] = watches.describe(state, tick.load_book(store), clock.now_iso(), gid)
    return out


def _round_row(r: dict, machine: bool = False) -> list[str]:
    from loopx.kernel.storage.clock import format_duration
    from loopx.output import safe

    where = [safe(r.get("machine") or "-", limit=20)] if machine else []
    if r["kind"] == "decision":
        return [r["ts"][:19], safe(r["decision"]), "", *where, safe(r.get("todo_id") or ""),
                safe(r.get("reason") or ""), "", "", "", "", "", "", ""]
    agent = actors.name(r["agent"] or "")
    result = r["result"] or "open"
    if r.get("setup_error"):
        result = r["setup_error"]["reason"]
    if r.get("out_of_scope"):  # named in the row: the turn changed files outside the goal's scope
        result += " out of scope: " + ", ".join(r["out_of_scope"][:3]) + ("..." if len(r["out_of_scope"]) > 3 else "")
    return [r["ts"][:19], "run", safe(agent, limit=20), *where, safe(r["todo_id"] or r.get("mode") or ""),
            safe(result), "yes" if r["verified"] else "no", str(r["evidence"]), str(r["slots"]),
            format_duration(r["duration"]) if r["duration"] is not None else "-", *usage_cells(r)]


def usage_cells(r: dict) -> list[str]:
    """TOKENS, USD and CHANGES cells of a run row ("?" = the host reported no usage)."""
    u, c = r.get("usage"), r.get("changes")
    tokens = f"{u['total_tokens']:,}" if u and u.get("total_tokens") is not None else "?"
    usd = f"{u['cost_usd']:.2f}" if u and u.get("cost_usd") is not None else "?"
    changes = "-"
    if c:
        changes = f"{c['files']}f +{c['added']}/-{c['removed']}"
        if c.get("commit_count"):
            changes += f" {c['commit_count']}c"
        if not c.get("committed"):
            changes += " (uncommitted)"
    mode = r.get("permission_mode")
    return [tokens, usd, changes + (f" [{mode}]" if mode else "")]


def _event_line(e: dict) -> str:
    from loopx.output import safe

    d = e.get("data") or {}
    bits = []
    for k in ("todo_id", "run_id", "gate_id", "evidence_id", "trial_id", "title", "question", "result", "value",
              "decision", "reason", "hypothesis", "summary", "kind", "holder", "watch_id", "outcome", "channel", "error"):
        if d.get(k) is not None:
            bits.append(f"{k}={d[k]}")
    if e["type"] == "node.registered":
        bits.append(f"host={d.get('host')}")
    where = f"{safe(e.get('machine') or '-', limit=20):<14} " if "machine" in e else ""
    return f"{e['ts'][:19]}  {e['type']:<18} {safe(e.get('goal') or '-'):<14} {safe(e.get('actor') or ''):<18} " \
           + where + safe(" ".join(str(b) for b in bits), limit=100)


def render(d: dict) -> str:
    from loopx.output import safe, table

    if "view" in d:
        return f"{d['count']} {d['view']}"
    parts = []
    machine = bool(d.get("machines"))
    if d["rounds"]:
        rows = [_round_row(r, machine) for r in d["rounds"]]
        parts.append("ROUNDS\n" + table(rows, ["TIME", "DECISION", "AGENT", *(["MACHINE"] if machine else []), "TODO",
                                               "RESULT", "VERIFIED", "EVID", "SLOTS", "DURATION", "TOKENS", "USD",
                                               "CHANGES"]))
    if d.get("watches"):
        from loopx.kernel.storage.clock import format_duration

        rows = [[w["name"], w["goal"], format_duration(w["every"]), w["outcome"] or "never run",
                 (w["last_run"] or "-")[:19], (w["next_due"] or w["status"])[:19], str(w["fired"])]
                for w in d["watches"]]
        parts.append("WATCHES\n" + table(rows, ["WATCH", "GOAL", "EVERY", "LAST", "LAST RUN", "NEXT DUE", "FIRED"]))
    if d["events"]:
        parts.append("EVENTS\n" + "\n".join(_event_line(e) for e in d["events"]))
    if machine:
        rows = [[safe(label, limit=40), node] for node, label in sorted(d["machines"].items(), key=lambda x: (x[1], x[0]))]
        parts.append("MACHINES\n" + table(rows, ["MACHINE", "NODE"]))
    return "\n\n".join(parts) if parts else "no history matches"
