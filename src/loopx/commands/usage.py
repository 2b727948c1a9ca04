"""``loopx usage [show|set]``: the hosts' usage windows, read from their own local files."""

from __future__ import annotations

from loopx import config
from loopx import usage as u
from loopx.commands import add
from loopx.errors import UsageError
from loopx.kernel.humans import require_human
from loopx.kernel.read import validate
from loopx.kernel.storage import clock
from loopx.kernel.storage.clock import format_duration
from loopx.output import safe

HOST_CHOICES = ("claude-code", "codex", "all")


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=usage, render=render, command="usage",
            example="loopx usage --host codex",
            description="Each host's current usage windows, read from the host's own local files without any "
                        "network call: Codex's own rate-limit figures ($CODEX_HOME/sessions), Claude Code's 5-hour "
                        "block and 7 days built from its transcripts ($CLAUDE_CONFIG_DIR/projects) against the "
                        "limit you set with `loopx usage set` (else the largest block seen). `usage set` is "
                        "human-only and writes the user config. See docs/usage.md.")
    p.add_argument("action", nargs="?", choices=("show", "set"), default="show", help="show (default) or set")
    p.add_argument("--host", default=None, metavar="HOST", help="claude-code, codex or all (default all)")
    p.add_argument("--block-tokens", metavar="N", help="set: tokens a 5-hour block allows (0 clears)")
    p.add_argument("--week-tokens", metavar="N", help="set: tokens 7 days allow (0 clears)")


def usage(ctx, action="show", host=None, block_tokens=None, week_tokens=None) -> dict:
    if host is not None and host not in HOST_CHOICES:
        raise UsageError(f"unknown --host {host!r}", f"use one of {', '.join(HOST_CHOICES)}")
    if action == "set":
        return usage_set(ctx, host, block_tokens, week_tokens)
    if block_tokens is not None or week_tokens is not None:
        raise UsageError("--block-tokens and --week-tokens belong to `loopx usage set`",
                         "run: loopx usage set --host claude-code --block-tokens N")

    now = clock.now()
    kinds = u.HOSTS if host in (None, "all") else (host,)
    hosts = [u.windows(k, now) for k in kinds]
    return {"hosts": hosts, "now": clock.iso(now), "bytes_read": sum(h["bytes_read"] for h in hosts)}


def usage_set(ctx, host, block_tokens, week_tokens) -> dict:
    if host != "claude-code":
        raise UsageError("usage limits are set per host: only claude-code's windows are built by loopx",
                         "pass --host claude-code (Codex reports its own windows)")
    if block_tokens is None and week_tokens is None:
        raise UsageError("nothing to set", "pass --block-tokens N and/or --week-tokens N")
    vals = {}
    for key, flag, val in (("block_tokens", "--block-tokens", block_tokens), ("week_tokens", "--week-tokens", week_tokens)):
        if val is not None:
            vals[key] = validate.count(val, flag, high=10**13)
    require_human(ctx, "setting host usage limits")
    for key, n in vals.items():
        config.set_user_value(f"usage.{host}.{key}", n or None)
    got = config.get_user_value(f"usage.{host}", {}) or {}
    return {"host": host, "limits": {"block_tokens": got.get("block_tokens"), "week_tokens": got.get("week_tokens")},
            "config": config.config_path()}


def _age(secs) -> str:
    return "age unknown" if secs is None else f"{format_duration(secs)} old" if secs else "just now"


def render(d: dict) -> str:
    if "limits" in d:
        lim = d["limits"]
        return (f"{d['host']}: block {lim['block_tokens'] or 'not set'} tokens, week {lim['week_tokens'] or 'not set'} "
                f"tokens (in {safe(d['config'])})")
    lines = []
    for h in d["hosts"]:
        if not h["known"]:
            lines.append(f"{h['host']}: unknown ({safe(h.get('note') or 'no data')})")
            continue
        lines.append(f"{h['host']}: as of {h['as_of'] or '?'} ({_age(h['age_seconds'])}), from {h['source']}")
        for w in h["windows"]:
            pct = f"{w['used_percent']:.1f}% used" if w.get("used_percent") is not None else "no limit known"
            tok = f"{w['tokens']:,} tokens" if w.get("tokens") is not None else None
            lim = f"of {w['limit']:,} ({w['limit_source']})" if w.get("limit") else None
            reset = f"resets {w['resets_at']}" if w.get("resets_at") else None
            if w["name"] == "7 days" and w.get("resets_at"):
                reset = f"rolling (the oldest counted message leaves at {w['resets_at']})"
            elif w.get("resets_at") and w["resets_at"] <= d["now"]:
                reset = f"reset since {w['resets_at']} (figure is older than the reset)"
            lines.append("  " + w["name"] + ": " + ", ".join(x for x in (pct, tok, lim, reset) if x))
        if h.get("skipped_lines"):
            lines.append(f"  ({h['skipped_lines']} unreadable line(s) skipped)")
        if h.get("note"):
            lines.append(f"  note: {safe(h['note'])}")
    return "\n".join(lines)
