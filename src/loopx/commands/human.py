"""The one check behind every human-only change (raising a budget, permission modes, the host
reserve, usage limits): ``require_human(ctx, what)``.

Today it is the same check ``gate approve`` makes: refuse when the caller looks like an agent
(``--agent``, ``LOOPX_AGENT`` or an agent host's environment marker, ``loopx.context.AGENT_ENV_MARKERS``).
Kept in one function so a stronger human channel can replace it in one place.
"""

from __future__ import annotations


def require_human(ctx, what: str, *, agent_flag: bool = True) -> None:
    """Raise HumanRequired (exit 4, code ``human_required``) when the caller looks like an agent.
    ``agent_flag`` False ignores ``--agent`` (``loopx run --agent PRESET`` names the host to drive,
    not the caller); ``LOOPX_AGENT`` and the host markers still count."""
    from loopx import config
    from loopx.context import agent_markers
    from loopx.errors import HumanRequired

    markers = agent_markers()
    if agent_flag and ctx.agent:
        who = f"agent {ctx.agent}"
    elif markers:
        who = "an agent session (" + ", ".join(markers) + " set)"
    elif config.env("LOOPX_AGENT"):
        who = f"agent {config.env('LOOPX_AGENT')}"
    else:
        return
    raise HumanRequired(f"{what} is a human-only change; this looks like {who}",
                        "ask a human to run this command in their own terminal", code="human_required")
