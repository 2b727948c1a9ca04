"""Agents and handoffs."""

from __future__ import annotations

from loopx.kernel.read import queries, validate
from loopx.kernel.storage import actors, ids
from loopx.kernel.storage.store import Draft, Store

AGENT_KINDS = ("claude-code", "codex", "cursor", "opencode", "gemini", "copilot", "shell", "custom", "human")


def register(store: Store, actor: str, name: str, kind: str) -> dict:
    """Register (or re-register) an agent (``agent.registered``)."""
    ids.check_agent_name(name)
    validate.choice(kind, AGENT_KINDS, "agent kind")
    out: dict = {"name": name, "kind": kind}

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
    note = validate.text(note, "--note")
    out: dict = {}

    def plan(state, now):
        t = queries.resolve_todo(state, todo) if todo else None
        g = queries.resolve_goal(state, t["goal"] if t else goal_id)
        drafts = []
        released = False
        if t and t.get("claim") and (t["claim"]["holder"] == actor or actors.is_human(actor)):
            drafts.append(Draft("todo.released", g["id"], {"todo_id": t["id"], "note": f"handed off to {to}"}))
            released = True
        drafts.append(Draft("handoff.recorded", g["id"], {"from": actor, "to": actors.agent(to),
                                                          "todo": t["id"] if t else None, "note": note}))
        out.update({"from": actor, "to": actors.agent(to), "goal_id": g["id"], "todo": t["id"] if t else None,
                    "released": released})
        return drafts

    store.transact(plan, actor=actor)
    return out
