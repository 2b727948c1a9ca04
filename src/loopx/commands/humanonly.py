"""The human-only check for changes an agent must not make (watch add/remove, notify set,
disconnect): a thin entry point to ``loopx.kernel.write.humans.require_human`` (the one list of
human-only changes, the agent-marker test including parent processes, the human channel)."""

from __future__ import annotations


def require_human(ctx, what: str):
    """Raise HumanRequired (exit 4, code ``human_required``) when the caller looks like an agent:
    ``--agent``, ``LOOPX_AGENT`` or an agent host's environment marker here or in a parent
    process. ``what``: a key of ``humans.HUMAN_ONLY`` or a sentence naming the change (e.g.
    ``"adding a watch"``). Returns the ``HumanChannel`` to pass to kernel functions that check it."""
    from loopx.kernel.write import humans

    return humans.require_human(ctx, what)
