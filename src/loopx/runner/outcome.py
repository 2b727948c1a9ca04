"""Classify a host that could not work: a setup problem, not a turn without value.

``classify(exit_code, timed_out, output, report, *, preset, now, changed, retry_lines) -> dict | None``;
the dict is the run's ``setup_error`` (docs/usage.md, /work REASONS convention)::

    {"reason": "host_not_logged_in" | "host_offline" | "host_rate_limited" | "host_overloaded" |
               "host_crashed" | "host_timed_out" | "host_idle",
     "message": the host's own words (one line, at most 300 characters),
     "exit_code": int, "reset_at": ISO time | None (rate limits and overloads, when the host says when)}

``host_overloaded`` is the provider out of capacity (Anthropic's 529 "Overloaded", a 503): not
the account's limit, a short wait. ``retry_lines``: the host's own lines when the runner stopped a
host that only retried (``runner.process.RetryWatch``): the class comes from them alone.

None means the host worked (the turn is judged on its value as before). Known messages are
matched case-insensitively on the report's error fields and the output; ``host_crashed`` and
``host_idle`` are only inferred for presets (a custom ``--agent-cmd`` may exit non-zero or stay
silent for its own reasons). Never raises.
"""

from __future__ import annotations

import json
import re

from loopx.kernel.storage import clock
from loopx.kernel.storage.clock import datetime, timedelta

NOT_LOGGED_IN = ("not logged in", "please run /login", "please log in", "run `codex login`", "codex login",
                 "set an auth method", "auth method", "invalid api key", "invalid x-api-key", "no api key",
                 "api key not found", "missing api key", "authentication required", "authentication failed",
                 "login required", "you must log in", "please login", "unauthorized", "oauth token has expired",
                 "/login to", "not authenticated")
OFFLINE = ("waiting for network", "reconnecting", "failed to lookup address", "name does not resolve",
           "getaddrinfo", "enotfound", "econnrefused", "econnreset", "etimedout", "network is unreachable",
           "could not resolve host", "connection refused", "fetch failed", "unable to connect",
           "stream disconnected", "error sending request", "no internet", "connection error",
           "connect error", "socket hang up")
RATE_LIMITED = ("rate limit", "rate_limit", "usage limit", "too many requests", "quota exceeded",
                "resource_exhausted", "resource exhausted", "limit reached", "hit your limit", "out of credits",
                "exceeded your current quota", "429")
# the provider, not the account, is out of capacity: retry in a while
OVERLOADED = ("overloaded", "status 529", "error: 529", "server is busy", "service unavailable",
              "temporarily unavailable", "status 503", "high demand")

_RE: dict = {}


def _rx(name: str, pattern: str):
    if name not in _RE:
        _RE[name] = re.compile(pattern, re.I)
    return _RE[name]


def _plain(line: str) -> str:
    """A JSON event line's ``message`` (or ``error.message``), else the line itself."""
    line = line.strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            return line
        if isinstance(obj, dict):
            err = obj.get("error")
            for v in (obj.get("message"), err.get("message") if isinstance(err, dict) else err, obj.get("result")):
                if isinstance(v, str) and v:
                    return v.strip()
    return line


def _host_line(text: str, needles) -> str | None:
    """The first line of ``text`` containing one of ``needles`` (lowercase), as the host worded it."""
    for line in text.splitlines():
        low = line.lower()
        if any(n in low for n in needles):
            return _plain(line)
    return None


def _message_of(text: str) -> str:
    """The host's last meaningful line of output."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return _plain(lines[-1]) if lines else ""


def reset_time(text: str, now: datetime) -> str | None:
    """The reset time a rate-limit message names (ISO), or None: ``...|<epoch seconds>`` (Claude
    Code), ``resets_at``/``reset at`` epoch or ISO, ``try again in 2 hours 5 minutes`` /
    ``resets in 30m`` / ``retry after 120 seconds``."""
    m = _rx("pipe", r"\|\s*(\d{10})\b").search(text) or _rx("epoch", r"reset[s_ ]*(?:at)?\W{0,4}(\d{10})\b").search(text)
    if m:
        return clock.iso(datetime.fromtimestamp(int(m.group(1)), tz=now.tzinfo))
    m = _rx("iso", r"(?:reset|again)\w*\s+(?:at\s+)?(\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d)?(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)").search(text)
    if m:
        try:
            return clock.iso(clock.parse_ts(m.group(1) if m.group(1)[-1] == "Z" or "+" in m.group(1)[10:]
                                            else m.group(1) + "Z"))
        except Exception:  # noqa: BLE001 - an odd date is no reset time
            pass
    m = _rx("clock", r"(?:try again|resets?|retry)\s+at\s+(\d{1,2}):(\d\d)\s*([ap])\.?m\b").search(text)
    if m:  # Codex: "try again at 10:49 PM" (local time): the next such moment
        h, mi = int(m.group(1)) % 12 + (12 if m.group(3).lower() == "p" else 0), int(m.group(2))
        local = now.astimezone()
        at = local.replace(hour=h, minute=mi, second=0, microsecond=0)
        if at <= local:
            at += timedelta(days=1)
        return clock.iso(at)
    m = _rx("rel", r"(?:in|after)\s+((?:\d+\s*(?:days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)\b[\s,and]*)+)").search(text)
    if m:
        secs = 0
        for n, unit in _rx("part", r"(\d+)\s*([a-z]+)").findall(m.group(1).lower()):
            mult = 86400 if unit.startswith("d") else 3600 if unit.startswith("h") else \
                60 if unit.startswith("m") else 1
            secs += int(n) * mult
        if secs:
            return clock.iso(now + timedelta(seconds=secs))
    return None


def classify(exit_code: int, timed_out: bool, output: str, report: dict | None, *, preset: str | None,
             now: datetime, changed: bool | None = None, retry_lines: list[str] | None = None) -> dict | None:
    """The setup error of a finished agent process, or None (see the module docstring).
    ``changed`` (the turn changed files or made commits; None = unknown) keeps a short login hint
    after exit 0 from being read as "not logged in" when the agent evidently worked.
    ``retry_lines`` (the runner stopped the host because it only retried) decide alone."""
    report = report or {}
    text = output or ""
    said = "\n".join(x for x in (report.get("error") or "", text) if x)
    failed = exit_code != 0 or timed_out or report.get("is_error")
    worked_json = bool(report.get("usage") or report.get("text")) and not report.get("is_error")

    def out(reason: str, message: str, **extra) -> dict:
        msg = " ".join((message or "").split())[:300] or f"exit {exit_code}"
        return {"reason": reason, "message": msg, "exit_code": exit_code, "reset_at": extra.get("reset_at")}

    if retry_lines:
        return _retried(retry_lines, now, out)
    if not worked_json or failed:
        line = _host_line(said, NOT_LOGGED_IN)
        if line and (failed or (len(text) < 1000 and not changed)):  # a login hint and exit 0 (Pi) is not a turn
            return out("host_not_logged_in", line)
        if failed and preset == "gemini" and exit_code == 41:
            return out("host_not_logged_in", report.get("error") or _message_of(text))
        known = _failure_words(report.get("error") or "", said, now, out) if failed else None
        if known:
            return known
    if preset is None:
        # a custom agent command has no host to wait for: one that ran out of the turn's time is a
        # failed turn (the stall rule bounds repeats), not a setup error that locks the agent out
        return None
    if timed_out:
        return out("host_timed_out", _message_of(text) or "the host printed nothing before the time limit")
    if exit_code != 0 or report.get("is_error"):
        return out("host_crashed", report.get("error") or _message_of(text) or f"exit {exit_code}")
    if not text.strip():
        return out("host_idle", "the host exited 0 without any output")
    return None


def _failure_words(err: str, said: str, now: datetime, out) -> dict | None:
    """A failed host's known words: its own error field first (its output also echoes the prompt,
    Pi's JSON events), then its whole output; overloaded before rate limited before offline."""
    if err:
        if _host_line(err, OVERLOADED):
            return out("host_overloaded", err, reset_at=reset_time(err, now))
        if _host_line(err, RATE_LIMITED):
            return out("host_rate_limited", err, reset_at=reset_time(err, now))
        if _host_line(err, OFFLINE):
            return out("host_offline", err)
    line = _host_line(said, OVERLOADED)
    if line:
        return out("host_overloaded", line, reset_at=reset_time(line, now))
    line = _host_line(said, RATE_LIMITED)
    if line:
        return out("host_rate_limited", line, reset_at=reset_time(said, now))
    line = _host_line(said, OFFLINE)
    if line:
        return out("host_offline", _last_match(said, OFFLINE) or line)
    return None


def _last_match(text: str, needles) -> str | None:
    hit = None
    for line in text.splitlines():
        low = line.lower()
        if any(n in low for n in needles):
            hit = _plain(line)
    return hit


def _retried(lines: list[str], now: datetime, out) -> dict:
    """The class of a host the runner stopped because it only retried, from its retry lines (the
    newest that names a known cause; else the newest: the endpoint did not answer usefully)."""
    said = "\n".join(lines)
    for reason, needles in (("host_not_logged_in", NOT_LOGGED_IN), ("host_overloaded", OVERLOADED),
                            ("host_rate_limited", RATE_LIMITED), ("host_offline", OFFLINE)):
        line = _last_match(said, needles)
        if line:
            timed = reason in ("host_overloaded", "host_rate_limited")
            return out(reason, _retry_words(line), reset_at=reset_time(line, now) if timed else None)
    return out("host_offline", _retry_words(lines[-1]))


def _retry_words(line: str) -> str:
    """A retry line as the host worded its error: the ``message`` inside an embedded JSON error
    (Gemini CLI's ``_ApiError: {...}``) or OpenCode's ``error.error="..."``, else the line."""
    m = _rx("msg", r'"message"\s*:\s*"([^"]{1,300})"').search(line) or \
        _rx("oc", r'error\.error="([^"]{1,300})"').search(line)
    return m.group(1) if m else line
