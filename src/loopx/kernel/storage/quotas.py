"""A goal's quota: the defaults a goal starts with and reading one value of it.

A quota is ``{"slots": int, "window": int seconds, "cooldown": int seconds, "stall_after": int}``
and, once a human sets one, ``"turns": int`` (turns allowed per window). Goals written before a
key existed lack it; ``value`` gives the default then. This is the one home of the defaults: the
reducer, the live view's pruning, the budget, the stall rule and the commands read them here.
"""

from __future__ import annotations

DEFAULTS: dict[str, int] = {"slots": 48, "window": 86400, "cooldown": 0, "stall_after": 3}
TURNS_PER_SLOT = 2  # without a quota "turns": turns allowed per window = TURNS_PER_SLOT x slots


def value(goal: dict | None, key: str) -> int:
    """The goal's quota ``key`` (a key of ``DEFAULTS``), else its default; ``goal`` may be None or
    lack a quota (a goal the view does not hold)."""
    return ((goal or {}).get("quota") or {}).get(key, DEFAULTS[key])
