"""When to ask again: the one scheduler-hint rule behind ``next_check_at`` and ``scheduler_hint``.

``hint(decision, now, next_check_at, same_since)`` -> ``(next_check_at ISO, hint seconds)``:
``run`` -> now, 300 s; ``pause``/``stop``/``error`` -> 3600 s; a wait that names its time ->
that time, the hint clamped to 60..3600 s; any other answer backs off while it repeats: half the
time it has stood (``same_since``, the ISO time the same decision and reason were first recorded),
300..3600 s. Used by the decision and by the decision cache, so a cached answer ages exactly like
a fresh one.
"""

from __future__ import annotations

from loopx.errors import LoopxError
from loopx.kernel.storage import clock
from loopx.kernel.storage.clock import datetime, timedelta

HINT_MIN, HINT_MAX, HINT_RUN = 300, 3600, 300   # seconds
HANDOFF_HOLD = 1800                             # seconds a handed-off todo stays reserved for its receiver


def hint(decision: str, now: datetime, next_check_at: str | None, same_since: str | None) -> tuple[str | None, int]:
    """(next_check_at, scheduler_hint in seconds) for ``decision`` at ``now``."""
    if decision == "run":
        return clock.iso(now), HINT_RUN
    if decision in ("pause", "stop", "error"):
        return next_check_at, HINT_MAX
    if next_check_at:
        left = (clock.parse_ts(next_check_at) - now).total_seconds()
        return next_check_at, int(min(HINT_MAX, max(60, left)))
    h = HINT_MIN
    if same_since:
        try:
            unchanged = (now - clock.parse_ts(same_since)).total_seconds()
            h = int(min(HINT_MAX, max(HINT_MIN, unchanged / 2)))
        except (LoopxError, TypeError, AttributeError):  # a hand-edited timestamp: start over
            h = HINT_MIN
    return clock.iso(now + timedelta(seconds=h)), h


def same_since(state: dict, key: str, decision: str, reason: str) -> str | None:
    """The time the recorded decision for ``key`` (a goal id or ``*``) was first given, when it is
    the same decision and reason as now; else None."""
    prev = state["decisions"].get(key)
    if prev and (prev.get("decision"), prev.get("reason")) == (decision, reason):
        return prev.get("ts")
    return None
