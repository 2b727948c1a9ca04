"""One-line text of a turn's usage (imported by hot commands and the review packet: no json, no re)."""

from __future__ import annotations


def usage_line(u: dict | None) -> str:
    """``12,345 tokens, 0.42 USD (model)`` or ``usage unknown``."""
    if not u:
        return "usage unknown"
    parts = []
    if u.get("total_tokens") is not None:
        parts.append(f"{u['total_tokens']:,} tokens")
    parts.append(f"{u['cost_usd']:.2f} USD" if u.get("cost_usd") is not None else "cost unknown")
    return ", ".join(parts) + (f" ({u['model']})" if u.get("model") else "")
