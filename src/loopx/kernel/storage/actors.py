"""Actors: who wrote a record. The one place that builds, parses and classifies actor strings.

An actor is ``agent:<name>`` (an agent host or runner, name checked by ``ids.check_agent_name``),
``human:<name>`` (a person, name from ``human_name``) or ``loopx:<what>`` (loopx itself, e.g.
``loopx:should-run``).
"""

from __future__ import annotations

import os

AGENT, HUMAN, LOOPX = "agent:", "human:", "loopx:"


def agent(name: str) -> str:
    """``agent:<name>``."""
    return AGENT + name


def human(name: str | None = None) -> str:
    """``human:<name>`` (default: ``human_name()``)."""
    return HUMAN + (name or human_name())


def of(agent_name: str | None) -> str:
    """The actor of a caller: ``agent:<name>`` when ``agent_name`` is given, else the human."""
    return agent(agent_name) if agent_name else human()


def is_agent(actor: str) -> bool:
    return actor.startswith(AGENT)


def is_human(actor: str) -> bool:
    return actor.startswith(HUMAN)


def agent_name(actor: str | None) -> str | None:
    """The agent's name of an ``agent:`` actor, else None."""
    return actor[len(AGENT):] if actor and actor.startswith(AGENT) else None


def name(actor: str) -> str:
    """The part after the kind (``agent:codex`` -> ``codex``); the whole string when it has none."""
    return actor.split(":", 1)[1] if ":" in actor else actor


def human_name() -> str:
    """The human's name for recorded decisions: ``LOOPX_HUMAN``, else the login name."""
    from loopx.config import env

    for v in (env("LOOPX_HUMAN"), os.environ.get("USER"), os.environ.get("LOGNAME"), os.environ.get("USERNAME")):
        if v:
            return "".join(c for c in v if c.isalnum() or c in "._-")[:64] or "human"
    return "human"
