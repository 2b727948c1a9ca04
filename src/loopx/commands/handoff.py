"""``loopx handoff``: hand a goal or a todo over to another agent."""

from __future__ import annotations

from loopx.commands import add, goal_opt
from loopx.kernel.write import agents
from loopx.output import safe


def register(sub, name, help_text):
    h = add(sub, name, help_text, handler=handoff, render=render_handoff,
            example="loopx --agent codex handoff --to claude --todo t-3f9a --note 'tests written, impl left'")
    h.add_argument("--to", required=True, metavar="AGENT")
    goal_opt(h)
    h.add_argument("--todo", metavar="TODO", help="a todo you hold; it is released for the receiver")
    h.add_argument("--note", required=True, metavar="TEXT", help="what the receiver needs to know")


def handoff(ctx, to, note, goal_id=None, todo=None) -> dict:
    return agents.handoff(ctx.store(), ctx.actor, to=to, goal_id=goal_id, todo=todo, note=note)


def render_handoff(d: dict) -> str:
    rel = f"; released {d['todo']}" if d["released"] else ""
    return f"handed off {d['goal_id']}{' / ' + d['todo'] if d['todo'] else ''} from {safe(d['from'])} to {safe(d['to'])}{rel}"

