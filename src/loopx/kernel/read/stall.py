"""Stalls per todo (docs/loop.md#stalls): how many turns in a row on one todo ended without
verified progress since the last change a human makes.

A turn counts when it was judged (not a setup error) and its result was ``no_progress``,
``failed``, or ``progress``/``completion`` that was not verified and left the todo open: an
agent that "makes progress" nobody checks cannot repeat it for ever. Verified progress, or the
todo closing, ends the streak (``loopx.kernel.storage.fold._stall_step`` keeps the start times
of the current streak in ``state["stalls"][goal][todo]``; planning turns use the key ``""``).
The streak restarts after a goal, scope or quota update, a new todo in the goal or a decided gate.
"""

from __future__ import annotations

from loopx.kernel.storage import quotas


def reset_at(state: dict, goal: dict) -> tuple:
    """(ISO time, seq) of the last change a human makes to ``goal`` (update, new todo, decided
    gate); the seq orders records written within one second."""
    gid = goal["id"]
    reset = (goal.get("updated") or "", goal.get("updated_seq") or 0)
    for t in state["todos"].values():
        if t["goal"] == gid and (t["created"], t.get("seq", 0)) > reset:
            reset = (t["created"], t.get("seq", 0))
    for g in state["gates"].values():
        if g["goal"] == gid and g.get("decided") and (g["decided"], g.get("decided_seq") or 0) > reset:
            reset = (g["decided"], g.get("decided_seq") or 0)
    return reset


def streaks(state: dict, goal: dict, reset: tuple | None = None) -> dict[str, int]:
    """{todo id or "" (planning): consecutive unverified turns since ``reset_at``} (non-zero only),
    counted among the newest ``stall_after`` turns: reaching it is what matters, and a live view
    keeps what could reset that many (loopx.kernel.storage.fold._horizons)."""
    per = (state.get("stalls") or {}).get(goal["id"]) or {}
    if not per:
        return {}
    reset = reset_at(state, goal) if reset is None else reset
    limit = max(1, int(quotas.value(goal, "stall_after")))
    out = {}
    for key, starts in per.items():
        n = sum(1 for ts, seq in starts[-limit:] if (ts, seq) > reset)
        if n:
            out[key] = n
    return out


def stalled(state: dict, goal: dict) -> dict[str, int]:
    """The todos (key "" for planning turns) whose streak reached the goal's ``stall_after``."""
    limit = quotas.value(goal, "stall_after")
    return {k: n for k, n in streaks(state, goal).items() if n >= limit}
