"""Run housekeeping: runs whose lease ended are closed by the next writer.

``reap_drafts`` is registered as store housekeeping when this package is imported (see
``loopx.kernel.write``), so every transaction of a domain writer closes expired runs before its own
plan runs; the turn commands also call it inside their own plans.
"""

from __future__ import annotations

from loopx.kernel.read import queries
from loopx.kernel.storage import clock, fold, machines
from loopx.kernel.storage.store import Draft


def hand_over(store, actor: str, run_id: str) -> dict:
    """Move another machine's open run, and its claim, to this clone (``run.handed_over``), so its
    agent resumes it here (``loopx next``) and finishes it here; the machine that started it can no
    longer. Human-only (the CLI checks ``require_human`` too). Returns {run_id, goal_id, todo_id,
    agent, from_node, to_node, moved}. Raises HumanRequired, Conflict (the run is finished)."""
    from loopx.errors import Conflict, HumanRequired
    from loopx.kernel.storage import actors

    if not actors.is_human(actor):
        raise HumanRequired("only a human hands a run over to another machine", "run it yourself in a terminal")
    out: dict = {}

    def plan(state, now):
        r = queries.resolve_run(state, run_id)
        if r["finished"] is not None:
            raise Conflict(f"run {r['id']} is already finished ({r['result']})", "nothing to hand over",
                           code="run_finished")
        here = store.node_id(create=True)
        out.update(run_id=r["id"], goal_id=r["goal"], todo_id=r.get("todo"), agent=r.get("agent"),
                   from_node=r.get("node"), to_node=here, moved=not machines.local(state, r.get("node")))
        if not out["moved"]:
            return []
        return [Draft("run.handed_over", r["goal"], {"run_id": r["id"], "node": here})]

    store.transact(plan, actor=actor)
    return out


def reap_drafts(state: dict, now, *, skip: str | None = None) -> list[Draft]:
    """Drafts that close every open run whose lease ended before ``now`` as ``failed`` and
    release the claim its agent still holds on the run's todo."""
    now_iso = clock.iso(now)
    drafts = []
    for run in queries.open_runs(state):
        if run["id"] == skip or not run.get("lease_until") or queries.lease_live(run, now_iso):
            continue
        if not machines.local(state, run.get("node")) and \
                run["lease_until"] > clock.iso(now - clock.timedelta(seconds=machines.MAX_SKEW)):
            continue  # another machine's run: its lease is over only when no clock skew can explain it
        drafts.append(Draft("run.finished", run["goal"], {
            "run_id": run["id"], "result": "failed", "verified": False, "evidence": [],
            "fingerprint": None, "note": f"lease expired at {run['lease_until']}", "reaped": True}))
        # housekeeping runs outside the plan's retry, so it asks the view explicitly: a todo the
        # live view left out is done or archived and holds no claim to release (same on both states)
        t = fold.held(state["todos"], run.get("todo") or "")
        if t and machines.same_holder(t.get("claim"), run) and t["status"] == "claimed":
            drafts.append(Draft("todo.released", t["goal"], {"todo_id": t["id"],
                                                             "note": f"run {run['id']} lease expired"}))
    return drafts
