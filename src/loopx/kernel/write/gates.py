"""Human gates: an agent opens one with a concrete question; only a human approves or rejects it.

The kernel records who decided and through which channel (``terminal``, ``confirm-flag``,
``dashboard``); the clients (CLI, dashboard) are responsible for proving a human is present.
"""

from __future__ import annotations

from loopx.errors import Conflict, HumanRequired, UsageError
from loopx.kernel.read import approvals, queries, validate
from loopx.kernel.storage import actors, fold, ids
from loopx.kernel.storage.store import Draft, Store


def short_code(gate_id: str) -> str:
    """The code a human types to confirm a decision: the id's hex part."""
    return gate_id.split("-", 1)[-1]


def open_gate(store: Store, actor: str, goal_id: str | None, *, kind: str, question: str,
              blocks=None, context=None, run=None) -> dict:
    """Open a pending gate (``gate.opened``). ``blocks``: todo ids (empty = the whole goal)."""
    validate.choice(kind, validate.GATE_KINDS, "gate kind")
    question = validate.text(question, "question", limit=2000)
    context = validate.text(context, "context", required=False)
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        blocked = [queries.resolve_todo(state, b)["id"] for b in blocks or []]
        for b in blocked:
            if state["todos"][b]["goal"] != g["id"]:
                raise UsageError(f"{b} belongs to goal {state['todos'][b]['goal']}", "block todos of this goal only")
        gid = ids.new_id("gate", state["gates"])
        out.update(gate_id=gid, goal_id=g["id"], kind=kind, code=short_code(gid), blocks=blocked, question=question)
        data = {"gate_id": gid, "kind": kind, "question": question, "blocks": blocked}
        if context:
            data["context"] = context
        if run:
            data["run"] = queries.resolve_run(state, run)["id"]
        return [Draft("gate.opened", g["id"], data)]

    store.transact(plan, actor=actor)
    return out


def _decidable(state: dict, gate_ref: str, code: str | None) -> dict:
    g = queries.resolve_gate(state, gate_ref)
    if code is not None and code.strip().lower() != short_code(g["id"]):
        raise UsageError("the confirmation code does not match", f"type the gate's code: {short_code(g['id'])}",
                         code="bad_confirmation")
    if g["status"] != "pending":
        raise Conflict(f"gate {g['id']} was already {g['status']} by {g['decided_by']} at {g['decided']}",
                       "open a new gate if the question needs another decision", code="gate_decided")
    return g


def precheck(state: dict, actor: str, gate_ref: str, *, approve: bool, note=None, code: str | None = None,
             human=None) -> dict:
    """The checks ``decide`` makes, without writing (a shared goal's decision goes to the remote
    first). Returns the gate. Raises like ``decide``."""
    if not actors.is_human(actor):
        raise HumanRequired("only a human can decide a gate", "ask a human to decide it", code="human_required",
                            details={"reason": "gate_decide", "gate": gate_ref})
    from loopx.kernel import humans

    humans.check_channel(human, "gate.decide")
    validate.text(note, "note", required=not approve)
    return _decidable(state, gate_ref, code)


def decide(store: Store, actor: str, gate_ref: str, *, approve: bool, note=None, channel: str,
           user_agent: str | None = None, code: str | None = None, human=None, standing: bool = False,
           signature: dict | None = None) -> dict:
    """Approve or reject a pending gate as a human. ``human``: the ``humans.HumanChannel`` the CLI's
    terminal path or the dashboard minted. A rejection also blocks the todos the gate named
    (``todo.blocked`` with ``gate_id``; only a human re-opens them). Raises HumanRequired for an
    agent actor or a missing channel, Conflict (exit 4) when the gate was already decided,
    UsageError when ``code`` is given and does not match the gate's short code, or a rejection has
    no note."""
    if not actors.is_human(actor):
        raise HumanRequired("only a human can decide a gate", "ask a human to decide it", code="human_required",
                            details={"reason": "gate_decide", "gate": gate_ref})
    from loopx.kernel import humans

    humans.check_channel(human, "gate.decide")
    note = validate.text(note, "note", required=not approve)
    out: dict = {}

    def plan(state, now):
        g = _decidable(state, gate_ref, code)
        status = "approved" if approve else "rejected"
        out.update(gate_id=g["id"], goal_id=g["goal"], status=status, kind=g["kind"], decided_by=actor, channel=channel)
        data = {"gate_id": g["id"], "note": note, "channel": channel}
        if standing and approve:
            data["standing"] = True
            out["standing"] = True
        if signature:
            data["signature"] = signature
        if user_agent:
            data["user_agent"] = user_agent[:300]
        drafts = [Draft(f"gate.{status}", g["goal"], data)]
        if not approve:  # a rejection blocks the todos it named until a human re-opens them
            for tid in g["blocks"]:
                # a todo the live view left out is done or archived: nothing to block on either state
                t = fold.held(state["todos"], tid)
                if t and t["status"] not in ("done", "archived", "blocked"):
                    drafts.append(Draft("todo.blocked", g["goal"], {
                        "todo_id": tid, "gate_id": g["id"], "gate_kind": g["kind"], "gate_note": note,
                        "reason": f"gate {g['id']} rejected by {actor}: {note}"}))
            out["blocked"] = [d.data["todo_id"] for d in drafts[1:]]
        return drafts

    store.transact(plan, actor=actor)
    from loopx.kernel.storage import anchors

    try:  # every decision anchors the chain heads; a failure never fails the decision
        res = anchors.write(store, f"gate {out['status']} {out['gate_id']}")
        out["anchor"] = {"commit": res["commit"], "file": res["file"]}
        if res["warnings"]:
            out["anchor_warnings"] = res["warnings"]
    except Exception as exc:  # noqa: BLE001
        out["anchor_warnings"] = [f"the chain heads were not anchored: {exc}"]
    return out


def reserve(store: Store, actor: str, run_id: str, gate_ids: list[str], *, node: str, host: str) -> list[str]:
    """Record that the approvals ``gate_ids`` are reserved for ``run_id`` on clone ``node``
    (``gate.reserved``, one per gate), after the remote accepted the reservation. Gates no longer
    approved and unused are skipped. Returns the ids recorded."""
    done: list[str] = []

    def plan(state, now):
        done.clear()
        drafts = []
        for gid in gate_ids:
            g = state["gates"][gid]  # a live view's miss re-runs the plan on the full state
            if g["status"] != "approved" or g.get("used") or g.get("standing"):
                continue
            done.append(gid)
            drafts.append(Draft("gate.reserved", g["goal"], {"gate_id": gid, "run_id": run_id, "node": node,
                                                            "host": host}))
        return drafts

    store.transact(plan, actor=actor)
    return list(done)


def use(store: Store, actor: str, gate_id: str, command: str) -> bool:
    """Record that the guard let one protected action through on ``gate_id`` (``gate.used``).
    Returns False (and records nothing) when the approval was used up meanwhile (another call
    won the race) or is no longer approved."""
    ok = {"used": False}

    def plan(state, now):
        g = state["gates"].get(gate_id)  # left out of a live view: NotInLiveView, re-run on the full state
        if g is None or not approvals.usable(g):
            return []
        ok["used"] = True
        return [Draft("gate.used", g["goal"], {"gate_id": gate_id, "command": str(command)[:500],
                                               "standing": bool(g.get("standing"))})]

    store.transact(plan, actor=actor)
    return ok["used"]
