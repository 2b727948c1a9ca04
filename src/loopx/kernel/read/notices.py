"""Notifications as data: which events a person should hear about, and what is still to send.

The queue is the store itself: ``fold`` keeps the last 200 notifiable events in ``state["notices"]``
(a gate opened, a goal finished, a recorded decision with a needs-a-human reason or
``budget_exhausted``) and the delivery outcome per event and channel in ``state["deliveries"]``
(``notify.delivered`` / ``notify.failed`` events, visible in ``loopx history``). Sending is
``loopx.notify.outbox``'s job; this module is pure.

A notice is pending for a channel when it is no older than ``MAX_AGE`` (and not older than the
moment notifications were configured), has no ``delivered`` record for that channel, and its
last failure (if any) is past its ``retry_at`` and below ``MAX_ATTEMPTS``.
"""

from __future__ import annotations

from loopx.kernel.storage import clock
from loopx.kernel.storage.clock import timedelta

MAX_AGE = 86400            # seconds: older events are never sent (no flood after a long silence)
MAX_ATTEMPTS = 6
BACKOFF = (30, 120, 600, 1800, 3600)   # seconds before attempt 2, 3, ...


def retry_delay(attempt: int) -> int:
    """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
    return BACKOFF[min(attempt, len(BACKOFF)) - 1]


def maybe_pending(state: dict, now_iso: str) -> bool:
    """Cheap test: is any recent notice not yet delivered on every channel it went to (or never tried)?"""
    deliveries = state.get("deliveries") or {}
    floor = clock.iso(clock.parse_ts(now_iso) - timedelta(seconds=MAX_AGE))
    for n in state.get("notices") or ():
        if n["ts"] < floor:
            continue
        per = deliveries.get(n["event_id"])
        if not per or any(v["status"] != "delivered" and v.get("attempts", 0) < MAX_ATTEMPTS for v in per.values()):
            return True
    return False


def next_retry(state: dict) -> str | None:
    """The earliest ``retry_at`` of a failed delivery that will be retried (ISO), or None."""
    cands = [v["retry_at"] for per in (state.get("deliveries") or {}).values() for v in per.values()
             if v["status"] == "failed" and v.get("retry_at") and v.get("attempts", 0) < MAX_ATTEMPTS]
    return min(cands) if cands else None


def pending(state: dict, channels: list[str], now_iso: str, since: str | None = None) -> list[tuple[dict, str, int]]:
    """``[(notice, channel, attempt)]`` due for sending now, oldest first."""
    floor = clock.iso(clock.parse_ts(now_iso) - timedelta(seconds=MAX_AGE))
    if since and since > floor:
        floor = since
    out = []
    for n in state.get("notices") or ():
        if n["ts"] < floor:
            continue
        per = (state.get("deliveries") or {}).get(n["event_id"]) or {}
        for ch in channels:
            d = per.get(ch)
            if d is None:
                out.append((n, ch, 1))
            elif d["status"] == "failed" and d.get("attempts", 0) < MAX_ATTEMPTS and (d.get("retry_at") or "") <= now_iso:
                out.append((n, ch, d.get("attempts", 0) + 1))
    return out


def recent(state: dict, limit: int = 20) -> list[dict]:
    """The newest notices (newest first) with their delivery outcome per channel."""
    rows = []
    for n in reversed((state.get("notices") or [])[-limit:]):
        rows.append(dict(n, deliveries=(state.get("deliveries") or {}).get(n["event_id"]) or {}))
    return rows
