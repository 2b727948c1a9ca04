"""Cadences people mean in local time: a daily or weekly todo or watch runs at the same local
wall-clock time across DST changes (docs/scheduling.md, "Local time").

A cadence that is a whole number of days (``1d``, ``7d``) steps through the local calendar of a
zone: the occurrence ``k`` is the anchor's local date and time plus ``k`` days, converted back to
UTC, so "09:00" stays 09:00 when the clocks change. Any other cadence (``15m``, ``6h``) steps in
real seconds as before. The zone is the goal's (``goal update --tz``), else ``LOOPX_TZ``, else
``TZ`` when it names a zone, else the system's local time (the C library's rules, no zone file
read by loopx); an unknown zone name falls back to the next one. Times are ``datetime`` in UTC.
"""

from __future__ import annotations

import os
import time
from zoneinfo import ZoneInfo  # imported only for a named zone and a whole-day cadence

from loopx.config import env
from loopx.kernel.storage import clock
from loopx.kernel.storage.clock import UTC, datetime, timedelta

DAY = 86400


def zone_name(state: dict | None = None, goal_id: str | None = None) -> str | None:
    """The IANA zone name that applies (the goal's, ``LOOPX_TZ``, ``TZ``), or None for the system's
    local time."""
    if state is not None and goal_id:
        tz = ((state.get("goals") or {}).get(goal_id) or {}).get("tz")
        if tz:
            return tz

    for name in (env("LOOPX_TZ"), os.environ.get("TZ")):
        if name and "/" in name or name == "UTC":
            return name.lstrip(":")
    return None


def _zone(name: str | None):
    if not name:
        return None
    if name == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except Exception:  # noqa: BLE001 - unknown or unreadable zone: the system's local time
        return None


def valid_zone(name: str) -> bool:
    """Whether ``name`` is a zone this machine knows (``zoneinfo``)."""
    return name == "UTC" or _zone(name) is not None


def _to_wall(t: datetime, zone) -> datetime:
    if zone is None:
        return datetime.fromtimestamp(t.timestamp())  # naive local time of the system
    return t.astimezone(zone).replace(tzinfo=None)


def _from_wall(wall: datetime, zone) -> datetime:
    if zone is None:
        return datetime.fromtimestamp(time.mktime(wall.timetuple()), UTC)  # tm_isdst -1: the rules decide
    return wall.replace(tzinfo=zone).astimezone(UTC)


def first_after(anchor: datetime, every: float, after: datetime, zone_key: str | None = None) -> datetime:
    """The first occurrence ``anchor + k*every`` (k >= 1) strictly after ``after``; for a whole-day
    ``every`` the steps are local calendar days of ``zone_key`` (see the module doc)."""
    span = (after - anchor).total_seconds()
    k = int(span // every) + 1 if span >= 0 else 1
    if every % DAY:
        return anchor + timedelta(seconds=k * every)
    zone = _zone(zone_key)
    wall = _to_wall(anchor, zone)
    days = int(every // DAY)
    for kk in range(max(1, k - 1), k + 3):  # a DST change moves an occurrence by an hour at most
        cand = _from_wall(wall + timedelta(days=days * kk), zone)
        if cand > after:
            return cand
    return _from_wall(wall + timedelta(days=days * (k + 3)), zone)


def first_after_iso(anchor_iso: str, every: float, after_iso: str, zone_key: str | None = None) -> str:
    """``first_after`` on ISO timestamps."""
    return clock.iso(first_after(clock.parse_ts(anchor_iso), every, clock.parse_ts(after_iso), zone_key))
