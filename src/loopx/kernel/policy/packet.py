"""The turn packet (docs/architecture.md#the-governed-loop): one compact instruction for one agent turn.

``build(...)`` returns a JSON-able dict; ``render(packet)`` the same content as text. Every
free-text field is cut to a fixed length and every list is bounded, so the text stays under
~6,000 characters whatever the size of the goal (200 todos, 5,000 evidence records...).

Packet keys: version, run_id, goal_id, mode (work|plan), agent, lease_until, objective,
done_when, verify, scope{allow, deny, protect}, protected[{action, gate (approved|pending|used|none),
gate_id, standing}], todo{id,
title, detail, acceptance, verify, fence} | None, queue[{id, title, status}], counts{open,
claimed, blocked, done, total}, gates[{id, kind, question, blocks}], rejected[{id, kind, question,
note, decided_by, blocks}] (the goal's last gates a human rejected, with the human's note), evidence[{id, kind,
summary, exit_code}], budget{slots, window, spent, left}, commands{...}, rules[str],
permission_mode (read-only|edit|full, set by ``loopx run`` when it drives a host preset).
"""

from __future__ import annotations

from loopx.kernel.read import budget, queries
from loopx.kernel.storage import actors, clock, fold

VERSION = 1
MAX_TEXT = 6000
QUEUE, GATES, GLOBS = 5, 4, 8
EVIDENCE = fold.EVIDENCE_KEPT  # the packet reads the live view: no more than it keeps
RULES = [
    "Work on this one todo only; stay inside the scope.",
    "Never do a protected action without an approved gate; ask with the gate command and finish as blocked.",
    "A todo is done only on evidence that passed (exit 0) or shows the work (commit, diff, link); never a note alone.",
    "End the turn with the finish command; report no_progress honestly when nothing changed.",
]
# a research experiment's trial turn (no todo): loopx measures the change and decides keep, discard or crash
TRIAL_RULES = [
    "Make one change for this trial; stay inside the scope and leave the measuring files alone.",
    RULES[1],
    "loopx measures your change itself: a number you report is a claim and decides nothing.",
    "End the turn with the finish command; loopx's measurement decides the result and spends the slot of a keep.",
]
DRIVEN_RULE = ("When you are done, just exit: `loopx run` verifies, records and finishes this turn. "
               "Finish it yourself only as blocked, after asking for a gate.")


def _cut_to(text, n: int) -> str | None:
    if text is None:
        return None
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _q(s: str) -> str:
    import shlex  # imports re: only when a packet quotes a command

    return shlex.quote(s)


def build(state: dict, goal_id: str, todo_id: str | None, run_id: str, lease_until: str | None, actor: str,
          now, mode: str | None = None, fence: int | None = None, driven: bool = False) -> dict:
    """The packet, tightened step by step until its text fits in MAX_TEXT characters.
    ``driven``: the turn runs under ``loopx run``, which verifies and finishes it."""
    for level in range(4):
        p = _build(state, goal_id, todo_id, run_id, lease_until, actor, now, mode, fence, 0.6 ** level)
        if driven:
            p["driven"] = True
            p["rules"] = (TRIAL_RULES if p.get("experiment") and not p["todo"] else RULES)[:3] + [DRIVEN_RULE]
            p["commands"] = commands(p, actor)
        if len(render(p)) <= MAX_TEXT:
            break
    return p


def _build(state, goal_id, todo_id, run_id, lease_until, actor, now, mode, fence, k: float) -> dict:
    def _cut(text, n: int):  # noqa: F811 - the scaled cut of this build
        return _cut_to(text, max(24, int(n * k)))

    def _n(n: int) -> int:
        return max(1, int(n * k + 0.5))

    g = state["goals"][goal_id]
    now_iso = clock.iso(now)
    t = state["todos"].get(todo_id or "")
    todo = None
    if t:
        todo = {"id": t["id"], "title": _cut(t["title"], 200), "detail": _cut(t.get("detail"), 600),
                "acceptance": _cut(t.get("acceptance"), 400), "verify": _cut(t.get("verify"), 300), "fence": fence}
    groups = queries.by_status(state, goal_id, now_iso)
    closed = state.get("closed", {}).get(goal_id, {})  # todos a live view left out
    ready = [x for x in queries.ready_todos(state, goal_id, now_iso) if x["id"] != todo_id][:_n(QUEUE)]
    queue = [{"id": x["id"], "title": _cut(x["title"], 80), "status": x["status"]} for x in ready]  # cut what is shown
    pending = sorted(queries.pending_gates(state, goal_id), key=lambda x: x["created"])
    gates = [{"id": x["id"], "kind": x["kind"], "question": _cut(x["question"], 240), "blocks": x["blocks"][:5]}
             for x in pending[:_n(GATES)]]
    rejected = sorted((x for x in state["gates"].values() if x["goal"] == goal_id and x["status"] == "rejected"),
                      key=lambda x: x.get("decided_seq") or 0)[-_n(GATES):]
    rejected = [{"id": x["id"], "kind": x["kind"], "question": _cut(x["question"], 160), "note": _cut(x.get("note"), 300),
                 "decided_by": x.get("decided_by"), "blocks": x["blocks"][:5]} for x in reversed(rejected)]
    seen = {x["id"] for x in rejected}
    for x in queries.goal_todos(state, goal_id):  # a live view keeps the rejection on the todos it blocks
        b = x.get("blocked_by") if x["status"] == "blocked" else None
        if b and b.get("gate") not in seen and len(rejected) < _n(GATES):
            seen.add(b["gate"])
            rejected.append({"id": b["gate"], "kind": b.get("kind") or "?", "question": "", "note": _cut(b.get("note"), 300),
                             "decided_by": b.get("by"), "blocks": [x["id"]]})
    protected = []
    verify_gate = None
    for action in g["scope"].get("protect") or []:
        from loopx.kernel.read.approvals import covering_gate, last_used

        if verify_gate is None:  # guard.verdicts.verify_gate without the guard's shell parser, and the
            from loopx.kernel.write.signing import gate_verifier  # signing setting read once a packet

            verify_gate = gate_verifier()
        ok = covering_gate(state, goal_id, action, verify=verify_gate, run_id=run_id)
        wait = next((x for x in pending if x["kind"] == action), None)
        used = last_used(state, goal_id, action) if not ok and not wait else None
        word = "approved" if ok else ("pending" if wait else ("used" if used else "none"))
        protected.append({"action": action, "gate": word, "gate_id": (ok or wait or used or {}).get("id"),
                          "standing": bool(ok and ok.get("standing"))})
    evidence = [{"id": e["id"], "kind": e["kind"], "summary": _cut(e["summary"], 140), "exit_code": e.get("exit_code")}
                for e in queries.recent_evidence(state, goal_id, _n(EVIDENCE))]
    scope = {k: [_cut(p, 120) for p in (g["scope"].get(k) or [])[:_n(GLOBS)]] for k in ("allow", "deny", "protect")}
    p = {"version": VERSION, "run_id": run_id, "goal_id": goal_id, "mode": mode or ("work" if todo else "plan"),
         "agent": actor, "lease_until": lease_until, "objective": _cut(g["objective"], 800),
         "done_when": _cut(g.get("done_when"), 600), "verify": _cut(g.get("verify"), 300), "scope": scope,
         "protected": protected, "todo": todo, "queue": queue,
         "counts": {"open": len(groups["open"]) + len(groups["expired"]), "claimed": len(groups["claimed"]),
                    "blocked": len(groups["blocked"]), "done": len(groups["done"]) + closed.get("done", 0),
                    "total": sum(len(v) for k, v in groups.items() if k != "archived") + closed.get("done", 0)},
         "gates": gates, "gates_more": max(0, len(pending) - len(gates)), "rejected": rejected, "evidence": evidence,
         "budget": budget.brief(budget.budget(state, g, now)),
         "driven": False, "rules": RULES}
    exp = (state.get("experiments") or {}).get(goal_id)
    if exp is not None:  # research experiments (issue 20): what to try, where, and what loopx measures
        from loopx.kernel.read import experiments

        p["experiment"] = experiments.packet_part(state, exp, run_id, actor, _cut, _n)
        if not todo:  # a trial: no todo to stay on, no verify to pass, no slot to spend by hand
            p["rules"] = TRIAL_RULES
    p["commands"] = commands(p, actor)
    return p


def commands(p: dict, actor: str) -> dict:
    """The exact write-back commands with the ids filled in (``SUMMARY``/``CMD``/``N``/``EV`` are
    placeholders the agent replaces)."""
    from loopx.exe import loopx_command

    exe = loopx_command()  # absolute: a login shell's PATH (Codex's bash -lc) cannot lose it
    who = f"{exe} --agent {actors.agent_name(actor)}" if actors.is_agent(actor) else exe
    run, gid = p["run_id"], p["goal_id"]
    verify = " --verify" if p.get("verify") else ""  # --verify exits 2 on a goal without a verify command
    t = p["todo"]
    todo_flag = f" --todo {t['id']}" if t else ""
    out = {
        "evidence": f"{who} evidence add --goal-id {gid} --run {run}{todo_flag} --kind test "
                    "--summary 'SUMMARY' --command 'CMD' --exit-code N",
        "gate": f"{who} gate open --goal-id {gid} --kind KIND --question 'QUESTION'"
                + (f" --blocks {t['id']}" if t else ""),
        "finish": f"{who} turn finish --run {run} --result progress|completion|no_progress|failed|blocked{verify}",
        "spend": f"{who} quota spend-slot --run {run}",
    }
    if p.get("experiment") and not t:  # a trial: loopx measures it and spends the slot of a keep itself
        out["finish"] = f"{who} turn finish --run {run} --result progress|no_progress|failed|blocked   (loopx measures)"
        del out["spend"]
    if p.get("driven"):
        out["finish"] = f"{who} turn finish --run {run} --result blocked --note 'WHY'   (only when waiting for a gate)"
        out.pop("spend", None)
    if t:
        fence = f" --fence {t['fence']}" if t.get("fence") else ""
        out["done"] = (f"{who} todo done {t['id']}{fence}   (runs the todo's verify command; exit 0 closes it)"
                       if t.get("verify") else f"{who} todo done {t['id']} --evidence EV{fence}")
    elif not p.get("experiment"):  # a trial adds no todos: it states its hypothesis (the TRIAL MODE lines)
        out["add_todo"] = f"{who} todo add 'TITLE' --goal-id {gid} --acceptance 'WHAT MAKES IT DONE'"
    return out


def render(p: dict) -> str:
    """The packet as plain text (same content as the dict)."""
    perm = f"  permissions {p['permission_mode']}" if p.get("permission_mode") else ""
    L = [f"loopx turn {p['run_id']}  goal {p['goal_id']}  mode {p['mode']}  agent {p['agent']}{perm}",
         f"lease until {p['lease_until']} (renew by finishing in time)", "",
         f"OBJECTIVE: {p['objective']}"]
    if p["done_when"]:
        L.append(f"DONE WHEN: {p['done_when']}")
    if p["verify"]:
        L.append(f"VERIFY: {p['verify']}")
    t = p["todo"]
    if t:
        L += ["", f"YOUR TODO: {t['id']}  {t['title']}"]
        for k in ("detail", "acceptance", "verify"):
            if t.get(k):
                L.append(f"  {k}: {t[k]}")
    elif p.get("experiment"):
        from loopx.kernel.read import experiments

        L += experiments.packet_lines(p["experiment"])
    else:
        L += ["", "PLAN MODE: the goal has no todos yet. Add the first few (small, verifiable), then finish."]
    s = p["scope"]
    L += ["", "SCOPE: allow " + (", ".join(s["allow"]) or "everything") + "; deny " + (", ".join(s["deny"]) or "nothing")]
    if p["protected"]:
        L.append("PROTECTED ACTIONS (need an approved gate): "
                 + ", ".join(f"{x['action']} [{_approval_word(x)}{' ' + x['gate_id'] if x['gate_id'] else ''}]"
                             for x in p["protected"]))
    L += _todo_lines(p)
    if p["gates"]:
        L.append("PENDING GATES:")
        L += [f"  {x['id']} ({x['kind']}): {x['question']}" for x in p["gates"]]
        if p.get("gates_more"):
            L.append(f"  ... and {p['gates_more']} more (`loopx gate list`)")
    if p.get("rejected"):
        L.append("REJECTED BY A HUMAN (respect the note; re-plan instead of asking again):")
        L += [f"  {x['id']} ({x['kind']}): {x['question']} -> {x['decided_by']}: {x['note']}"
              + (f" [blocks {', '.join(x['blocks'])}]" if x["blocks"] else "") for x in p["rejected"]]
    if p["evidence"]:
        L.append("RECENT EVIDENCE:")
        L += [f"  {x['id']} {x['kind']}" + (f" exit {x['exit_code']}" if x["exit_code"] is not None else "")
              + f": {x['summary']}" for x in p["evidence"]]
    b = p["budget"]
    L.append(f"BUDGET: {b['left']} of {b['slots']} slots left in {clock.format_duration(b['window'])}")
    L += ["", "WRITE BACK (ids filled in; replace the CAPITALS):"]
    labels = {"evidence": "record evidence", "done": "finish the todo", "add_todo": "add a todo",
              "gate": "ask a human", "finish": "end the turn", "spend": "after verified progress"}
    for k, label in labels.items():
        if k in p["commands"]:
            L.append(f"  {label + ':':<25} {p['commands'][k]}")
    L += ["", "RULES:"] + [f"  - {r}" for r in p["rules"]]
    return "\n".join(L) + "\n"


def _todo_lines(p: dict) -> list[str]:
    """The packet's TODOS and QUEUE AFTER THIS lines (a trial turn on an experiment without todos:
    no line of zeros)."""
    c = p["counts"]
    L = []
    if c["total"] or not p.get("experiment"):
        L.append(f"TODOS: {c['open']} open, {c['claimed']} claimed, {c['blocked']} blocked, {c['done']} done of {c['total']}")
    if p["queue"]:
        L.append("QUEUE AFTER THIS: " + "; ".join(f"{x['id']} {x['title']}" for x in p["queue"]))
    return L


def _approval_word(x: dict) -> str:
    """``approved once``/``approved, standing``/``used``/``pending``/``none`` for the packet text."""
    if x["gate"] == "approved":
        return "approved, standing" if x.get("standing") else "approved once (this turn may use it)"
    if x["gate"] == "used":
        return "approval used; ask again"
    return x["gate"]
