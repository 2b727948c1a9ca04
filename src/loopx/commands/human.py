"""The one check behind every human-only change (raising a budget, permission modes, the host
reserve, usage limits): ``require_human(ctx, what)``, a thin entry point to
``loopx.kernel.write.humans.require_human`` (the one list of human-only changes, agent markers in
this process or any parent process, and the human channel kernel functions check)."""

from __future__ import annotations


def require_human(ctx, what: str, *, agent_flag: bool = True):
    """Raise HumanRequired (exit 4, code ``human_required``) when the caller looks like an agent;
    return the ``HumanChannel`` otherwise. ``agent_flag`` False ignores ``--agent`` (``loopx run
    --agent PRESET`` names the host to drive, not the caller); ``LOOPX_AGENT`` and the host
    markers, here or in a parent process, still count."""
    from loopx.kernel.write import humans

    return humans.require_human(ctx if agent_flag else None, what)
