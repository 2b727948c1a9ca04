"""Actors: who wrote a record. The one place that builds, parses and classifies actor strings.

An actor is ``agent:<name>`` (an agent host or runner, name checked by ``ids.check_agent_name``),
``human:<name>`` (a person, the OS account's name from ``human_name``) or ``loopx:<what>`` (loopx itself, e.g.
``loopx:should-run``).
"""

from __future__ import annotations

import os

from loopx import hostfacts

AGENT, HUMAN, LOOPX = "agent:", "human:", "loopx:"
# Environment markers that agent hosts set inside their sessions and tool calls: the host table's
# ``markers`` (Pi's PI_CODING_AGENT included), LOOPX_AGENT first.
AGENT_ENV_MARKERS = (*hostfacts.markers(),
                     # set by loopx's sandbox and its broker: a process holding them runs for an agent
                     "LOOPX_BROKER", "LOOPX_SANDBOXED")


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
    """The login name of the OS account running loopx: the password entry of the real uid on POSIX
    (``pwd.getpwuid(os.getuid())``), ``GetUserNameW`` on Windows; cleaned to ``[A-Za-z0-9._-]``, at
    most 64 characters. An account without a name is ``uid<N>``. Never read from ``USER``,
    ``LOGNAME``, ``USERNAME`` or ``LOOPX_HUMAN``: an agent sets those as easily as it runs a command."""
    name = ""
    if os.name == "nt":  # pragma: no cover - exercised on the Windows CI leg
        try:
            name = os.getlogin()  # GetUserNameW: the account of the process token, not %USERNAME%
        except OSError:
            name = ""
        fallback = "windows-user"
    else:
        import pwd

        uid = os.getuid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:  # a uid without an entry (containers): the uid is still the account
            name = ""
        fallback = f"uid{uid}"
    return "".join(c for c in name if c.isalnum() or c in "._-")[:64] or fallback
