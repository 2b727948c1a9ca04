"""``loopx status``: one screen of what is going on, and (with no arguments) an orientation."""

from __future__ import annotations

import os

from loopx.commands import add
from loopx.kernel.storage import layout
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
    from loopx.kernel.policy import decision_cache as dc

    files = dc.stamp(store)  # before the read: a decision kept under these stamps saw at least this much
    state = store.load(view="live")
    book = None
    if state.get("watches"):
        from loopx.kernel.policy.tick import load_book

        book = load_book(store)
    now_iso = clock.now_iso()
    decisions = _decisions(store, state, goal_id, files)
    data = store.read(lambda st: summary(st, now_iso, goal_id, book, store_root=store.root, decisions=decisions),
                      state)
    data["project"] = store.project_dir
    data["orient"] = orient
    data["connected"] = True
    warnings = list(data["store"]["problems"])
    if os.path.exists(store.path(layout.SYNC)):  # this clone syncs through git: name tentative claims
        from loopx.sync import shared
        from loopx.sync import transport as gs

        data["sync"] = gs.local_view(store, state)
        pending = shared.tentative_view(store)
        data["sync"].update(tentative_spends=pending["spends"], tentative_renewals=pending["renewals"])
    return Reply(data, warnings=warnings)


def _at(actor: str | None, machine: str | None) -> str:
    """``agent:claude-code@laptop`` when the store holds more than one machine's records."""
    return f"{actor}@{machine}" if machine else (actor or "?")


def _decisions(store, state: dict, goal_id: str | None, files: list | None = None) -> dict:
    """{goal id: its should-run answer} through the one input builder (decide.for_client), so
    status says what should-run says (issue 21); ``files``: the decision cache's stamps taken
    before ``state`` was read (an unchanged store's answers come from that cache)."""
    from loopx.kernel.policy import decision_cache as dc
    from loopx.kernel.read import queries
    from loopx.kernel.storage import clock

    gids = [queries.resolve_goal(state, goal_id)["id"]] if goal_id else list(state["goals"])
    hosts: dict = {}  # each host's usage windows, and the git part of the fingerprint, read once for all goals
    memo: dict = {}

    def git() -> str:
        if "git" not in memo:
            from loopx.kernel.read import fingerprint

            memo["git"] = fingerprint.git_part(store.project_dir)
        return memo["git"]

    now = clock.now()
    out = {}
    kept: dict = {}
    for g in gids:  # kept answers first: an unchanged store's screen imports no rules
        out[g] = dc.lookup_view(store, g, None, files, now, git=git, hosts=hosts) if files is not None else None
        if out[g] is None:
            from loopx.kernel.policy import decide

            out[g] = decide.for_client(store, state, g, now=now, hosts=hosts, git=git, files=files, kept=kept)
    dc.write(store, kept)  # one rewrite of the cache for every answer this screen evaluated
    return out


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
        return _render_orient(d, lines)
    lost = (d["store"].get("files") or {}).get("events", {}).get("bad_lines")
    if not d["goals"]:
        lines.append("no goals could be read" if lost else "no goals yet")
    for g in d["goals"]:
        lines.append("")
        lines.extend(_goal_lines(g))
    if d["store"]["problems"]:
        lines.append("")
        lines.append("store: " + "; ".join(d["store"]["problems"]) + "  (run `loopx doctor`)")
    lines.extend(_sync_lines(d))
    lines.append("")
    lines.append(f"next: {safe(d['next'])}")
    return "\n".join(lines)


def _render_orient(d: dict, lines: list[str]) -> str:
    """``loopx`` alone: one line per goal and what to do next."""
    for g in d["goals"]:
        t = g["todos"]
        dec = g.get("decision") or {}
        flag = f"  NEEDS YOU: {dec['reason']}" if dec.get("needs_you") else ""
        lines.append(f"  {g['id']}  [{g['status']}]  {t.get('done', 0)} done, {t.get('open', 0) + t.get('expired', 0)} open"
                     f"{flag}  {safe(g['objective'], limit=50)}")
    if not d["goals"]:
        lost = (d["store"].get("files") or {}).get("events", {}).get("bad_lines")
        lines.append("  no goals could be read" if lost else "  no goals yet")
    lines.append(f"next: {safe(d['next'])}")
    lines.append("more: loopx status (full screen), loopx --help (all commands)")
    return "\n".join(lines)


def _goal_lines(g: dict) -> list[str]:
    """One goal's block of the full status screen."""
    lines = [f"goal {g['id']}  [{g['status']}]  {safe(g['objective'], limit=70)}", _progress_line(g)]
    dec = g.get("decision")
    if dec:  # the one answer (should-run's); the lines below add detail, never another answer
        head = "NEEDS YOU" if dec["needs_you"] else "decision"
        lines.append(f"  {head}: {dec['decision']} ({dec['reason']}): {safe(dec['message'], limit=160)}")
    for gate in g["needs_human"]:
        if dec and dec.get("gate_id") == gate["gate_id"]:
            continue  # the decision line above already asks it
        lines.append(f"  gate:    {gate['gate_id']} ({gate['kind']}) asks: {safe(gate['question'], limit=90)}")
    err = g.get("setup_error")
    if err:
        lines.append(f"  setup:   {err.get('reason')} in {err.get('run')}: {safe(err.get('message'), limit=160)}")
    for e in g.get("host_errors") or []:
        lines.append(f"  host:    {e['reason']} ({safe(e['host'] or e['agent'])}, run {e['run']}): "
                     f"{safe(e['message'], limit=90)}; retried at {_when(e['retry_at'])}Z")
    lines.extend(_todo_lines(g))
    lines.extend(_watch_lines(g))
    lines.append(_budget_line(g["budget"]))
    lines.extend(_run_lines(g))
    lines.append(f"  next:    {safe(g['next'])}")
    return lines


def _progress_line(g: dict) -> str:
    """The trials of an experiment goal, else the todo counts."""
    x = g.get("experiment")
    if not x:
        counts = ", ".join(f"{v} {k}" for k, v in g["todos"].items() if v) or "no todos"
        return f"  todos:   {counts}"
    from loopx.kernel.read import experiments as ex

    return (f"  trials:  {x['trials']} ({ex.tally(x, total=False)}); "
            f"{x['metric']} {ex.fmt_value((x['baseline'] or {}).get('value'))} (baseline) -> "
            f"{ex.fmt_value((x['frontier'] or {}).get('value'))} (frontier); {x['since_improvement']} since "
            "the last improvement" + (f" of {x['plateau']}" if x["plateau"] else "")
            + (" PLATEAU" if x["plateaued"] else ""))


def _todo_lines(g: dict) -> list[str]:
    """Held, expired, ready, waiting and blocked todos (the first three of each list)."""
    lines = []
    for c in g["claimed"]:
        lines.append(f"  held:    {c['id']} by {safe(_at(c['holder'], c.get('machine')))} until {_when(c['lease_until'])}Z  {safe(c['title'], limit=40)}")
    for c in g["expired"]:
        lines.append(f"  expired: {c['id']} (was {safe(_at(c['holder'], c.get('machine')))})  {safe(c['title'], limit=40)}")
    for r in g["ready"][:3]:
        lines.append(f"  ready:   {r['id']}  {safe(r['title'], limit=60)}")
    for w in g.get("waiting_on_goals", [])[:3]:
        after = ", ".join(f"{x['id']} ({x['status']})" for x in w["goals"])
        lines.append(f"  waits:   {w['id']}  {safe(w['title'], limit=40)}  (until goal {safe(after)} is done)")
    for r in g["blocked"][:3]:
        lines.append(f"  blocked: {r['id']}  {safe(r['title'], limit=40)}  ({safe(r['note'], limit=40)})")
    return lines


def _watch_lines(g: dict) -> list[str]:
    from loopx.kernel.storage.clock import format_duration

    return [f"  watch:   {safe(w['name'])} every {format_duration(w['every'])} on {w['on']}, last "
            f"{w['outcome'] or 'never run'}" + (f" at {_when(w['last_run'])}Z" if w["last_run"] else "")
            + (f", next {_when(w['next_due'])}Z" if w["next_due"] else f", {w['status']}")
            + f", fired {w['fired']}x" + (" FAILING" if w["failing"] else "")
            for w in g.get("watches") or []]


def _budget_line(b: dict) -> str:
    """Slots spent in the window, and money and tokens when runs report them or a cap is set."""
    from loopx.kernel.storage.clock import format_duration

    money = "".join([_usd(b),
                     f", {b['spent_tokens']:,}" + (f"/{b['max_tokens']:,}" if b.get("max_tokens") is not None else "")
                     + " tokens" if b.get("costed_runs") or b.get("max_tokens") is not None else ""])
    return f"  budget:  {b['spent']}/{b['slots']} slot(s){money} used in the last {format_duration(b['window'])}"


def _run_lines(g: dict) -> list[str]:
    """The goal's last run and the runs open now."""
    lines = []
    lr = g["last_run"]
    if lr:
        from loopx.usage.text import usage_line

        ver = " verified" if lr["verified"] and lr["result"] in ("progress", "completion") else ""
        lines.append(f"  last run: {lr['id']} {lr['result'] or 'open'}{ver}"
                     f" by {safe(lr['agent'])} at {_when(lr['finished'] or lr['started'])}Z"
                     + (f" ({usage_line(lr.get('usage'))})" if lr.get("finished") else ""))
    for r in g.get("open_runs") or []:
        where = f" in {safe(r['worktree']['path'])} on {safe(r['worktree']['branch'])}" if r.get("worktree") else ""
        lines.append(f"  running: {r['id']} by {safe(_at(r['agent'], r.get('machine')))} on {r['todo'] or 'planning'}{where}")
    return lines


def _usd(b: dict) -> str:
    """The money part of a goal's budget line: what the priced runs cost, and how many runs' cost
    is unknown (a host that reports tokens without a price: never shown as 0.00 USD)."""
    unpriced = b.get("unpriced_runs") or 0
    priced = (b.get("costed_runs") or 0) - unpriced
    cap = f"/{b['max_usd']:.2f}" if b.get("max_usd") is not None else ""
    if not priced and not cap:
        return f", cost unknown ({unpriced} run(s))" if unpriced else ""
    return f", {b['spent_usd']:.2f}{cap} USD" + (f" (+{unpriced} run(s) of unknown cost)" if unpriced else "")
