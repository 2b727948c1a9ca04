"""The budget of a goal: the one place that computes spend, what is left and when it frees.

``budget(state, goal, now)`` -> ``{"slots": int, "window": int (s), "spent": int (slots in the
rolling window), "left": int, "cooldown": int (s), "cooldown_until": ISO | None (set only while a
cooldown after the last run is still running), "frees_at": ISO | None (when a slot frees, set
only when none is left), "ledger": [[ts, slots, run_id], ...] (the window's entries)}`` plus the real units of
``real_units`` (issue 14: what the hosts reported the goal's turns cost, against ``max_usd`` /
``max_tokens``) and the turn budget of ``turn_units``: ``{"turns": int (turns allowed per window:
the quota's ``turns``, else ``quotas.TURNS_PER_SLOT`` x slots), "turns_started": int (runs started in the
window, whatever their result), "turns_left": int, "turns_free_at": ISO | None (when a turn
leaves the window; set only when none is left)}``. Every client (status, should-run, the packet, ``quota show``, the dashboard,
``loopx.api``) reads these numbers from here. ``now`` is a datetime or an ISO string.
"""

from __future__ import annotations

from loopx.kernel.storage import clock, quotas
from loopx.kernel.storage.clock import timedelta


def _now(now):
    return clock.parse_ts(now) if isinstance(now, str) else now


def window_spend(state: dict, goal_id: str, window_start_iso: str) -> tuple[int, list[list]]:
    """(slots spent after ``window_start_iso``, the ledger entries in that window)."""
    entries = [e for e in state["spends"].get(goal_id, []) if e[0] > window_start_iso]
    return sum(e[1] for e in entries), entries


def slot_frees_at(state: dict, goal: dict, now, need: int = 1) -> str | None:
    """When enough spends leave the rolling window for ``need`` slots to be free (ISO), or None
    (free now, or the quota's slots are below what one spend needs: only a quota change helps)."""
    now = _now(now)
    q = goal["quota"]
    spent, entries = window_spend(state, goal["id"], clock.iso(now - timedelta(seconds=q["window"])))
    excess = spent + need - q["slots"]
    if excess <= 0:
        return None
    for ts, slots, _run in sorted(entries):
        excess -= slots
        if excess <= 0:
            return clock.iso(clock.parse_ts(ts) + timedelta(seconds=q["window"]))
    return None


def cooldown_until(state: dict, goal: dict, now) -> str | None:
    """The end of the cooldown after the goal's last run while it is still running, else None."""
    cool = goal["quota"].get("cooldown") or 0
    last = state["runs"].get(goal.get("last_run") or "")
    if not cool or not last:
        return None
    until = clock.iso(clock.parse_ts(last["finished"] or last["started"]) + timedelta(seconds=cool))
    return until if until > clock.iso(_now(now)) else None


def budget(state: dict, goal: dict, now) -> dict:
    """The goal's budget at ``now`` (shape in the module docstring)."""
    now = _now(now)
    q = goal["quota"]
    spent, entries = window_spend(state, goal["id"], clock.iso(now - timedelta(seconds=q["window"])))
    left = max(0, q["slots"] - spent)
    return {"slots": q["slots"], "window": q["window"], "spent": spent, "left": left,
            "cooldown": q.get("cooldown", 0) or 0, "cooldown_until": cooldown_until(state, goal, now),
            "frees_at": slot_frees_at(state, goal, now) if not left else None, "ledger": entries,
            **real_units(state, goal, now), **turn_units(state, goal, now)}


TURN_KEYS = ("turns", "turns_started", "turns_left", "turns_free_at")


def turn_limit(goal: dict) -> int:
    """Turns the goal may start per window: the quota's ``turns`` (a human sets it with
    ``loopx quota set --turns N``), else ``quotas.TURNS_PER_SLOT`` times its slots."""
    q = goal["quota"]
    t = q.get("turns")
    return int(t) if isinstance(t, (int, float)) and t > 0 else quotas.TURNS_PER_SLOT * int(q["slots"])


def turn_units(state: dict, goal: dict, now) -> dict:
    """The turn budget: every run started in the rolling window counts, verified or not, whatever
    ran it (a host preset, ``--agent-cmd`` or an agent through ``next``). Shape in the module docstring."""
    now = _now(now)
    window = goal["quota"]["window"]
    start = clock.iso(now - timedelta(seconds=window))
    entries = sorted(e for e in (state.get("turns") or {}).get(goal["id"], []) if e[0] > start)
    limit = turn_limit(goal)
    started = len(entries)
    frees = None
    if started >= limit and entries:
        frees = clock.iso(clock.parse_ts(entries[started - limit][0]) + timedelta(seconds=window))
    return {"turns": limit, "turns_started": started, "turns_left": max(0, limit - started), "turns_free_at": frees}


EPS = 1e-9
MONEY_KEYS = ("max_usd", "spent_usd", "left_usd", "turn_usd", "usd_exhausted", "usd_frees_at",
              "max_tokens", "spent_tokens", "left_tokens", "turn_tokens", "tokens_exhausted", "tokens_frees_at",
              "costed_runs", "unpriced_runs")


def real_units(state: dict, goal: dict, now) -> dict:
    """Money and tokens over the goal's rolling window, from the cost ledger (``state["costs"]``:
    runs whose host reported a cost or tokens; usage unknown is charged nothing, never 0).

    ``{"max_usd" (float|None), "spent_usd" (float), "left_usd" (float|None), "turn_usd" (the mean
    a costed turn in the window cost; None without one), "usd_exhausted" (bool: spent, or spent
    plus one typical turn, is over the limit), "usd_frees_at" (ISO: when enough leaves the window
    for one more typical turn; None when not exhausted or when only a higher limit helps), the
    same six for ``tokens`` (ints), "costed_runs" (int), "unpriced_runs" (int: those of them whose
    host reported tokens but no price: their cost is unknown, not 0)}``."""
    now = _now(now)
    q = goal["quota"]
    window = q["window"]
    start = clock.iso(now - timedelta(seconds=window))
    entries = sorted(e for e in (state.get("costs") or {}).get(goal["id"], []) if e[0] > start)
    out: dict = {"costed_runs": len(entries), "unpriced_runs": sum(1 for e in entries if e[1] is None)}
    for unit, col, cap in (("usd", 1, q.get("max_usd")), ("tokens", 2, q.get("max_tokens"))):
        vals = [(e[0], e[col]) for e in entries if e[col] is not None]
        total = sum(v for _, v in vals)
        typical = total / len(vals) if vals else None
        if unit == "usd":
            total = round(total, 6)
            typical = round(typical, 6) if typical is not None else None
        else:
            total = int(total)
            typical = int(round(typical)) if typical is not None else None
        need = typical or 0
        exhausted = cap is not None and (total >= cap - EPS or total + need > cap + EPS)
        frees = None
        if exhausted and need <= cap + EPS:
            remaining = total
            for ts, v in vals:
                remaining -= v
                if remaining < cap - EPS and remaining + need <= cap + EPS:
                    frees = clock.iso(clock.parse_ts(ts) + timedelta(seconds=window))
                    break
        out.update({f"max_{unit}": cap, f"spent_{unit}": total,
                    f"left_{unit}": None if cap is None else max(0, cap - total), f"turn_{unit}": typical,
                    f"{unit}_exhausted": exhausted, f"{unit}_frees_at": frees})
    return out


def without_ledger(b: dict) -> dict:
    """``b`` without its ledger entries (what status and the dashboard show)."""
    return {k: v for k, v in b.items() if k != "ledger"}


def brief(b: dict) -> dict:
    """The four numbers a packet or a summary line shows: slots, window, spent, left."""
    return {k: b[k] for k in ("slots", "window", "spent", "left")}


def decision_view(b: dict) -> dict:
    """What a should-run answer carries: ``brief`` plus the real units (``MONEY_KEYS``)."""
    return dict(brief(b), **{k: b.get(k) for k in MONEY_KEYS + TURN_KEYS})
