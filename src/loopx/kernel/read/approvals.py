"""Which approved gates still authorise an action: read-only questions the pre-tool guard, the turn
packet and ``loopx gate`` ask of a state (a live view or the full one). Recording a use, a
reservation or a decision is ``loopx.kernel.write.gates``'s job."""

from __future__ import annotations

from loopx.kernel.storage import fold


def usable(g: dict, state: dict | None = None, node: str | None = None, run_id: str | None = None) -> bool:
    """An approved gate that still authorises: standing, or not used yet. With ``state``, a
    single-use approval of a shared goal also needs a reservation (``gate.reserved``) made through
    the remote by a run of this clone (``node``) that is still open: only that machine may use it."""
    if g["status"] != "approved":
        return False
    if g.get("standing"):
        return True
    if g.get("used"):
        return False
    if state is None or not (state["goals"].get(g["goal"]) or {}).get("shared"):
        return True
    return reserved_here(state, g, node, run_id)


def reserved_here(state: dict, g: dict, node: str | None, run_id: str | None = None) -> bool:
    """True when ``g`` is reserved for a run of clone ``node`` that is still open in ``state``
    (``node`` None: for a run of any clone; the guard passes its clone's id, "" when it has none,
    which never matches). ``run_id``: reserved for that run (the turn packet asks this)."""
    res = g.get("reserved") or {}
    run = fold.held(state["runs"], res.get("run") or "")  # left out of a live view: closed, so not reserved
    return ((node is None or res.get("node") == node) and (run_id is None or res.get("run") == run_id)
            and run is not None and run.get("finished") is None)


def covering_gate(state: dict, goal_id: str, action: str, *, verify=None, node: str | None = None,
                  run_id: str | None = None) -> dict | None:
    """The newest approved gate of ``action`` kind for the goal that is still usable (standing, or
    a single-use approval not used yet; in a shared goal reserved for an open run of clone
    ``node``), or None. ``verify(gate) -> bool``: an extra check (the signature when signing is on)."""
    hits = [g for g in state["gates"].values()
            if g["goal"] == goal_id and g["kind"] == action and usable(g, state, node, run_id)
            and (verify is None or verify(g))]
    return max(hits, key=lambda g: g.get("decided_seq") or 0) if hits else None


def last_used(state: dict, goal_id: str, action: str) -> dict | None:
    """The newest single-use approval of ``action`` kind that was used, or None."""
    hits = [g for g in state["gates"].values()
            if g["goal"] == goal_id and g["kind"] == action and g["status"] == "approved" and g.get("used")
            and not g.get("standing")]
    return max(hits, key=lambda g: g.get("decided_seq") or 0) if hits else None
