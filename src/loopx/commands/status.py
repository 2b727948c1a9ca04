"""``loopx status``: one screen of what is going on, and (with no arguments) an orientation."""

from __future__ import annotations

import os

from loopx.commands import add
from loopx.output import Reply, safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=status, render=render, example="loopx status --goal-id my-goal")
    p.add_argument("--goal-id", "--goal", dest="goal_id", metavar="ID", help="only this goal")
    p.add_argument("--orient", action="store_true", help="short orientation (what `loopx` alone prints)")


def status(ctx, goal_id=None, orient=False):
    from loopx.errors import NotConnected
    from loopx.kernel.read.status import summary
    from loopx.kernel.storage import clock

    try:
        store = ctx.store()
    except NotConnected:
        if not orient:
            raise
        return Reply({"orient": True, "connected": False, "cwd": os.getcwd(),
                      "next": "loopx connect   # then: loopx start-goal --goal-text \"...\"",
                      "help": "loopx --help"})
    state = store.load(view="live")
    book = None
    if state.get("watches"):
        from loopx.kernel.policy.tick import load_book

        book = load_book(store)
    now_iso = clock.now_iso()
    data = store.read(lambda st: summary(st, now_iso, goal_id, book, store_root=store.root), state)
    data["project"] = store.project_dir
    data["orient"] = orient
    data["connected"] = True
    warnings = list(data["store"]["problems"])
    if os.path.exists(store.path("cache", "sync.json")):  # this clone syncs through git: name tentative claims
        from loopx.kernel.policy import shared
        from loopx.kernel.policy import sync as gs

        data["sync"] = gs.local_view(store, state)
        pending = shared.tentative_view(store)
        data["sync"].update(tentative_spends=pending["spends"], tentative_renewals=pending["renewals"])
    return Reply(data, warnings=warnings)


def _when(iso: str | None) -> str:
    return (iso or "")[:16].replace("T", " ")


def _sync_lines(d: dict) -> list[str]:
    s = d.get("sync")
    if not s:
        return []
    out = [f"sync:    last {_when(s.get('last_sync')) or 'never'} with {s.get('remote')}"
           + (f" (last attempt failed: {safe(s['error'])})" if s.get("error") else "")]
    for t in s.get("tentative", []):
        out.append(f"  tentative: {t['todo_id']} claimed by {safe(t['holder'])} on this clone only "
                   "(not claimed through the remote: `loopx next --sync`)")
    for rid in s.get("tentative_spends", []):
        out.append(f"  tentative: the slot spent on {rid} is charged on this clone only (the next `loopx sync` "
                   "pushes it to the shared budget)")
    for tid in s.get("tentative_renewals", []):
        out.append(f"  tentative: the lease on {tid} was renewed on this clone only (the next `loopx sync` pushes it)")
    return out


def render(d: dict) -> str:
    if not d.get("connected"):
        return ("loopx keeps goals, gates, todos, evidence and a compute budget for AI agent work.\n"
                f"This directory ({safe(d['cwd'])}) is not connected.\n"
                f"next: {d['next']}\nmore: {d['help']}")
    lines = [f"project {safe(d['project'])}"]
    if d.get("orient"):
        for g in d["goals"]:
            t = g["todos"]
            flag = f"  NEEDS YOU: {len(g['needs_human'])} gate(s)" if g["needs_human"] else ""
            if g.get("host_errors"):
                e = g["host_errors"][0]
                flag += f"  NEEDS YOU: {e['reason']}: {safe(e['message'], limit=60)}"
            if not flag and g.get("setup_error"):
                flag = f"  NEEDS YOU: {g['setup_error'].get('reason')}"
            lines.append(f"  {g['id']}  [{g['status']}]  {t.get('done', 0)} done, {t.get('open', 0) + t.get('expired', 0)} open"
                         f"{flag}  {safe(g['objective'], limit=50)}")
        if not d["goals"]:
            lines.append("  no goals yet")
        lines.append(f"next: {safe(d['next'])}")
        lines.append("more: loopx status (full screen), loopx --help (all commands)")
        return "\n".join(lines)
    if not d["goals"]:
        lines.append("no goals yet")
    for g in d["goals"]:
        t = g["todos"]
        counts = ", ".join(f"{v} {k}" for k, v in t.items() if v) or "no todos"
        b = g["budget"]
        lines.append("")
        lines.append(f"goal {g['id']}  [{g['status']}]  {safe(g['objective'], limit=70)}")
        x = g.get("experiment")
        if x:
            from loopx.kernel.read import experiments as ex

            lines.append(f"  trials:  {x['trials']} ({x['kept']} kept, {x['discarded']} discarded, {x['crashed']} crashed); "
                         f"{x['metric']} {ex.fmt_value((x['baseline'] or {}).get('value'))} (baseline) -> "
                         f"{ex.fmt_value((x['frontier'] or {}).get('value'))} (frontier); {x['since_improvement']} since "
                         "the last improvement" + (f" of {x['plateau']}" if x["plateau"] else "")
                         + (" PLATEAU" if x["plateaued"] else ""))
        else:
            lines.append(f"  todos:   {counts}")
        for gate in g["needs_human"]:
            lines.append(f"  NEEDS YOU: gate {gate['gate_id']} ({gate['kind']}): {safe(gate['question'], limit=90)}")
        err = g.get("setup_error")
        if err:
            lines.append(f"  NEEDS YOU: {err.get('reason')} in {err.get('run')}: {safe(err.get('message'), limit=160)}")
        for e in g.get("host_errors") or []:
            lines.append(f"  NEEDS YOU: {e['reason']} ({safe(e['host'] or e['agent'])}, run {e['run']}): "
                         f"{safe(e['message'], limit=90)}; retried at {_when(e['retry_at'])}Z")
        for c in g["claimed"]:
            lines.append(f"  held:    {c['id']} by {safe(c['holder'])} until {_when(c['lease_until'])}Z  {safe(c['title'], limit=40)}")
        for c in g["expired"]:
            lines.append(f"  expired: {c['id']} (was {safe(c['holder'])})  {safe(c['title'], limit=40)}")
        for r in g["ready"][:3]:
            lines.append(f"  ready:   {r['id']}  {safe(r['title'], limit=60)}")
        for w in g.get("waiting_on_goals", [])[:3]:
            after = ", ".join(f"{x['id']} ({x['status']})" for x in w["goals"])
            lines.append(f"  waits:   {w['id']}  {safe(w['title'], limit=40)}  (until goal {safe(after)} is done)")
        for r in g["blocked"][:3]:
            lines.append(f"  blocked: {r['id']}  {safe(r['title'], limit=40)}  ({safe(r['note'], limit=40)})")
        from loopx.kernel.storage.clock import format_duration

        for w in g.get("watches") or []:
            lines.append(f"  watch:   {safe(w['name'])} every {format_duration(w['every'])} on {w['on']}, last "
                         f"{w['outcome'] or 'never run'}" + (f" at {_when(w['last_run'])}Z" if w["last_run"] else "")
                         + (f", next {_when(w['next_due'])}Z" if w["next_due"] else f", {w['status']}")
                         + f", fired {w['fired']}x" + (" FAILING" if w["failing"] else ""))
        money = "".join([f", {b['spent_usd']:.2f}" + (f"/{b['max_usd']:.2f}" if b.get("max_usd") is not None else "")
                         + " USD" if b.get("costed_runs") or b.get("max_usd") is not None else "",
                         f", {b['spent_tokens']:,}" + (f"/{b['max_tokens']:,}" if b.get("max_tokens") is not None else "")
                         + " tokens" if b.get("costed_runs") or b.get("max_tokens") is not None else ""])
        lines.append(f"  budget:  {b['spent']}/{b['slots']} slot(s){money} used in the last "
                     f"{format_duration(b['window'])}")
        lr = g["last_run"]
        if lr:
            from loopx.usage.text import usage_line

            ver = " verified" if lr["verified"] and lr["result"] in ("progress", "completion") else ""
            lines.append(f"  last run: {lr['id']} {lr['result'] or 'open'}{ver}"
                         f" by {safe(lr['agent'])} at {_when(lr['finished'] or lr['started'])}Z"
                         + (f" ({usage_line(lr.get('usage'))})" if lr.get("finished") else ""))
        for r in g.get("open_runs") or []:
            where = f" in {safe(r['worktree']['path'])} on {safe(r['worktree']['branch'])}" if r.get("worktree") else ""
            lines.append(f"  running: {r['id']} by {safe(r['agent'])} on {r['todo'] or 'planning'}{where}")
        lines.append(f"  next:    {safe(g['next'])}")
    if d["store"]["problems"] and not d.get("orient"):
        lines.append("")
        lines.append("store: " + "; ".join(d["store"]["problems"]) + "  (run `loopx doctor`)")
    lines.extend(_sync_lines(d))
    lines.append("")
    lines.append(f"next: {safe(d['next'])}")
    return "\n".join(lines)
