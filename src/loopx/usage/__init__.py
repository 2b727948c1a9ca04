"""How much of a subscription's usage windows is left, read from the hosts' own local files.

No network call, read-only on the hosts' files, tolerant of missing, partial, huge or changed-format
files (unknown lines are skipped and counted). ``windows(kind, now)`` returns for a host::

    {"host": kind, "known": bool, "source": "codex-rollout" | "claude-transcripts" | None,
     "as_of": ISO time of the newest figure | None, "age_seconds": int | None,
     "windows": [{"name", "used_percent" (float|None), "resets_at" (ISO|None),
                  "window_minutes" (int|None), "tokens" (int|None), "limit" (int|None),
                  "limit_source" ("host" | "usage set" | "largest block seen" | None),
                  "starts_at" (ISO|None)}],
     "bytes_read": int (transcript bytes read by this call), "files": int, "skipped_lines": int,
     "note": str | None}

Codex reports its windows itself (``loopx.usage.codex``); Claude Code's are built from its
transcripts (``loopx.usage.claude``) against a limit set with ``loopx usage set`` or, without one,
the largest 5-hour block seen so far. Other hosts give ``known`` False. docs/usage.md has the
formats. ``windows`` never raises for bad host files; an unreadable user config raises StateError.
"""

from __future__ import annotations

HOSTS = ("claude-code", "codex")


def unknown(kind: str, note: str | None) -> dict:
    return {"host": kind, "known": False, "source": None, "as_of": None, "age_seconds": None, "windows": [],
            "bytes_read": 0, "files": 0, "skipped_lines": 0, "note": note}


def windows(kind: str, now=None) -> dict:
    """The usage windows of host ``kind`` at ``now`` (a datetime; default the clock)."""
    from loopx.kernel.storage import clock

    now = now or clock.now()
    if kind == "codex":
        from loopx.usage import codex

        return codex.windows(now)
    if kind == "claude-code":
        from loopx.usage import claude

        return claude.windows(now)
    return unknown(kind, f"loopx cannot read {kind}'s usage windows from local files")


def safe_windows(kind: str, now) -> dict | None:
    """``windows(kind, now)``, or None when anything goes wrong (a broken host file or user config
    never breaks a should-run decision)."""
    try:
        return windows(kind, now)
    except Exception:  # noqa: BLE001 - the hosts' files are not ours; an odd one is "unknown"
        return None


def limits(kind: str) -> dict:
    """The user's limits for ``kind`` from the user config (``usage.<kind>.block_tokens`` ...)."""
    from loopx import config

    got = config.get_user_value(f"usage.{kind}", {})
    return got if isinstance(got, dict) else {}


def signature(info: dict | None) -> tuple:
    """What of ``info`` a decision depends on (for the decision cache)."""
    if not info:
        return ()
    return tuple((w.get("name"), w.get("used_percent"), w.get("resets_at")) for w in info.get("windows") or [])
