"""Time: an injectable UTC clock, ISO-8601 timestamps with ``Z``, and durations.

``LOOPX_NOW`` (ISO-8601, e.g. ``2026-01-01T00:00:00Z``) freezes the clock for tests and
simulations; it is read on every call so a simulation can advance it between commands.
All timestamps loopx writes are UTC strings ``YYYY-MM-DDTHH:MM:SSZ`` (whole seconds, one fixed
width), so they sort as text.

The rest of loopx takes ``UTC``, ``datetime`` and ``timedelta`` from here (the same classes the
``datetime`` module exports), so a command on the hot path never imports ``datetime.py``.
"""

from __future__ import annotations

try:  # the C module alone: datetime.py defines its whole pure-Python fallback first (about 1.5 ms)
    from _datetime import UTC, datetime, timedelta
except ImportError:  # pragma: no cover - interpreters without the C accelerator
    from datetime import UTC, datetime, timedelta

from loopx.config import env
from loopx.errors import FieldError, UsageError

_DUR_PATTERN = r"(\d+(?:\.\d+)?)\s*([smhdw])"  # compiled on first use: `re` is not imported at start-up
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def now() -> datetime:
    """The current time (aware, UTC). Raises UsageError when ``LOOPX_NOW`` is not ISO-8601."""
    fixed = env("LOOPX_NOW")
    if fixed:
        try:
            dt = parse_ts(fixed)
        except UsageError as exc:
            raise UsageError(f"LOOPX_NOW={fixed!r} is not an ISO-8601 time",
                             "use e.g. LOOPX_NOW=2026-01-01T00:00:00Z or unset it") from exc
        if not 1970 <= dt.year <= 9000:  # leave room for windows and leases on either side
            raise UsageError(f"LOOPX_NOW={fixed!r} is out of range", "use a time between 1970 and 9000")
        return dt
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    """``dt`` as UTC ISO-8601 with a ``Z`` suffix, floored to whole seconds.

    One fixed width on purpose: the kernel compares timestamps as text (leases, windows), and
    ``...:00Z`` sorts after ``...:00.5Z`` although it is earlier. Built from the fields, not with
    ``strftime`` (a C library call through a ``struct_time`` each time: ``next`` formats 30 times;
    and glibc's ``%Y`` does not pad a year below 1000)."""
    u = dt.astimezone(UTC)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


def now_iso() -> str:
    return iso(now())


def parse_ts(text: str) -> datetime:
    """Parse an ISO-8601 time (``Z`` or offset; naive means UTC). Raises UsageError."""
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise UsageError(f"not an ISO-8601 time: {text!r}", "example: 2026-01-31T09:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90s``, ``30m``, ``24h``, ``7d``, ``1h30m`` or a bare
    number of seconds. Raises UsageError for anything else, zero included when ``text`` is empty."""
    t = str(text).strip().lower()
    if not t:
        raise UsageError("empty duration", "use e.g. 90s, 30m, 24h or 7d")
    try:
        value = float(t)
    except ValueError:
        import re

        pos, total = 0, 0.0
        for m in re.finditer(_DUR_PATTERN, t, re.I):
            if m.start() != pos and t[pos:m.start()].strip():
                break
            total += float(m.group(1)) * _UNIT[m.group(2).lower()]
            pos = m.end()
        if pos == 0 or t[pos:].strip():
            raise UsageError(f"not a duration: {text!r}", "use e.g. 90s, 30m, 24h, 7d or 1h30m") from None
        value = total
    if value < 0 or value != value or value > 10 * 365 * 86400:
        raise UsageError(f"duration out of range: {text!r}", "use a positive duration up to 10 years")
    return value


def format_duration(seconds: float) -> str:
    """A short human form: ``45s``, ``12m``, ``3h20m``, ``2d4h``."""
    s = int(round(seconds))
    neg = s < 0
    s = abs(s)
    if s < 60:
        out = f"{s}s"
    elif s < 3600:
        out = f"{s // 60}m"
    elif s < 86400:
        h, m = divmod(s // 60, 60)
        out = f"{h}h{m:02d}m" if m else f"{h}h"
    else:
        d, h = divmod(s // 3600, 24)
        out = f"{d}d{h}h" if h else f"{d}d"
    return "-" + out if neg else out


def since_arg(text: str, ref: datetime) -> datetime:
    """``--since`` value: a duration back from ``ref`` (``24h``) or an ISO time."""
    try:
        return ref - timedelta(seconds=parse_duration(text))
    except UsageError:
        pass
    try:
        return parse_ts(text)
    except UsageError:
        raise FieldError("since", "{field} " + repr(text) + " is neither a duration nor a time",
                         "use e.g. {field} 24h or {field} 2026-01-31T09:00:00Z") from None
