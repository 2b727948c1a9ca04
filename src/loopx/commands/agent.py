"""``loopx agent register|list``."""

from __future__ import annotations

from loopx.commands import actions, add
from loopx.kernel.read import queries
from loopx.kernel.storage import actors, clock
from loopx.kernel.write import agents
from loopx.kernel.write.agents import shown_kind
from loopx.output import Reply, safe, table


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx agent list")
    acts = actions(p)
    r = add(acts, "register", "register an agent", handler=agent_register,
            render=lambda d: f"registered {d['name']} ({d['kind']})" if d["changed"] else f"{d['name']} already registered as {d['kind']}",
            command="agent register", example="loopx agent register claude --kind claude-code")
    r.add_argument("name")
    r.add_argument("--kind", required=True,
                   help="any lowercase word; known hosts: claude-code, codex, cursor, opencode, gemini, copilot, shell, custom")
    add(acts, "list", "list agents, what they hold, and recent handoffs", handler=agent_list, render=render_list,
        command="agent list", example="loopx agent list --format json")


def agent_register(ctx, name, kind):
    d = agents.register(ctx.store(), ctx.actor, name, kind)
    warnings = []
    if d["suggestion"]:
        warnings.append(f"{kind!r} is not a host loopx knows; did you mean --kind {d['suggestion']}? "
                        f"(kept as {kind!r})")
    return Reply(d, 0, warnings)


def agent_list(ctx) -> dict:
    state = ctx.store().load(view="live")  # agents and every claimed todo are in the live view
    now = clock.now_iso()
    held = queries.holdings(state, now)

    rows = [dict(a, kind=shown_kind(a), holds=[h["id"] for h in held.get(actors.agent(a["name"]), [])]) for a in
            sorted(state["agents"].values(), key=lambda a: a["name"])]
    return {"agents": rows, "handoffs": state["handoffs"][-20:]}


def render_list(d: dict) -> str:
    out = [table([[a["name"], a.get("kind") or "", (a.get("last_seen") or "-")[:19], ", ".join(a["holds"])]
                  for a in d["agents"]], ["AGENT", "KIND", "LAST SEEN", "HOLDS"]) if d["agents"] else "no agents yet"]
    if d["handoffs"]:
        out.append("\nrecent handoffs:")
        out.extend(f"  {h['ts'][:16]} {safe(h['from'])} -> {safe(h['to'])} {h.get('todo') or ''}: {safe(h['note'], limit=60)}"
                   for h in d["handoffs"])
    return "\n".join(out)


