"""The human-only check for changes an agent must not make (watch add/remove, notify set,
disconnect). One function so the governance work can swap in its own human-channel check."""

from __future__ import annotations


def require_human(ctx, what: str) -> None:
    """Raise HumanRequired (exit 4) when the caller looks like an agent: ``--agent``, ``LOOPX_AGENT``
    or an agent host's environment marker (loopx.context.AGENT_ENV_MARKERS). ``what`` names the
    change in the message (e.g. ``"adding a watch"``). Same test as ``gate approve`` uses."""
    from loopx.context import agent_markers
    from loopx.errors import HumanRequired

    markers = agent_markers()
    if ctx.agent or markers:
        who = f"agent {ctx.agent}" if ctx.agent else "an agent session (" + ", ".join(markers) + " set)"
        raise HumanRequired(f"{what} is a human-only change; this looks like {who}",
                            "ask a human to run this command in their own terminal", code="human_required")
