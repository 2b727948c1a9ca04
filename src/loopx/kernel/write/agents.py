"""Agents and handoffs."""

from __future__ import annotations

import difflib
import re

from loopx import hostfacts
from loopx.errors import UsageError
from loopx.kernel.read import queries, validate
from loopx.kernel.storage import actors, ids, machines
from loopx.kernel.storage.store import Draft, Store

# the agent hosts loopx knows (presets, skills, hooks); any other lowercase word is accepted too
KNOWN_KINDS = (*hostfacts.agent_hosts(), "copilot", "shell", "custom", "human")  # hosts: the table's rows
AGENT_KINDS = KNOWN_KINDS  # kept for callers of the old name
_KIND = r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*"
_ALIASES = {**hostfacts.aliases(), "sh": "shell", "bash": "shell"}


def check_kind(kind) -> str:
    """``kind`` when it is a lowercase word (``[a-z][a-z0-9]*`` joined by ``-``, ``_`` or ``.``, at
    most 32 characters): a known host or any other (``deepseek``, ``aider``). Raises UsageError
    naming the known hosts."""
    if not isinstance(kind, str) or len(kind) > 32 or not re.fullmatch(_KIND, kind):
        raise UsageError(f"invalid agent kind {kind!r}",
                         f"a lowercase word such as deepseek or aider; known hosts: {', '.join(KNOWN_KINDS)}")
    return kind


def suggestion(kind: str) -> str | None:
    """A known kind ``kind`` was probably meant to be (``codx`` -> ``codex``), or None."""
    if kind in KNOWN_KINDS:
        return None
    if kind in _ALIASES:
        return _ALIASES[kind]
    close = difflib.get_close_matches(kind, KNOWN_KINDS, n=1, cutoff=0.75)
    return close[0] if close else None


def shown_kind(agent: dict) -> str:
    """The kind to show for an agent record: the registered one; for an agent that wrote without
    registering, the host its name names (``codex``, ``claude`` -> ``claude-code``, ``codex-2``
    -> ``codex``), else ``unknown``."""
    kind = agent.get("kind")
    if kind and kind != "unknown":
        return kind
    name = str(agent.get("name") or "").lower()
    for cand in (name, name.split("-", 1)[0], name.rsplit("-", 1)[0]):
        if cand in KNOWN_KINDS and cand not in ("custom", "human"):
            return cand
        if cand in _ALIASES:
            return _ALIASES[cand]
    return "unknown"


def register(store: Store, actor: str, name: str, kind: str) -> dict:
    """Register (or re-register) an agent (``agent.registered``). ``kind``: any lowercase word
    (see ``check_kind``). Returns {name, kind, known, suggestion, changed}."""
    ids.check_agent_name(name)
    check_kind(kind)
    out: dict = {"name": name, "kind": kind, "known": kind in KNOWN_KINDS, "suggestion": suggestion(kind)}

    def plan(state, now):
        prev = state["agents"].get(name)
        out["changed"] = not prev or prev.get("kind") != kind or not prev.get("registered")
        return [Draft("agent.registered", None, {"name": name, "kind": kind})] if out["changed"] else []

    store.transact(plan, actor=actor)
    return out


def handoff(store: Store, actor: str, *, to: str, goal_id=None, todo=None, note: str) -> dict:
    """Record a handoff from the caller to agent ``to``; a todo the caller holds is released so the
    receiver can claim it. Returns {from, to, goal_id, todo, released}."""
    ids.check_agent_name(to)
    note = validate.text(note, "note")
    out: dict = {}

    def plan(state, now):
        t = queries.resolve_todo(state, todo) if todo else None
        g = queries.resolve_goal(state, t["goal"] if t else goal_id)
        drafts = []
        released = False
        if t and t.get("claim") and (machines.holds(state, t["claim"], actor) or actors.is_human(actor)):
            drafts.append(Draft("todo.released", g["id"], {"todo_id": t["id"], "note": f"handed off to {to}"}))
            released = True
        drafts.append(Draft("handoff.recorded", g["id"], {"from": actor, "to": actors.agent(to),
                                                          "todo": t["id"] if t else None, "note": note}))
        out.update({"from": actor, "to": actors.agent(to), "goal_id": g["id"], "todo": t["id"] if t else None,
                    "released": released})
        return drafts

    store.transact(plan, actor=actor)
    return out
