"""``loopx inbox``: what needs a person now, across every registered project."""

from __future__ import annotations

import os

from loopx.commands import add
from loopx.output import safe


def register(sub, name, help_text):
    add(sub, name, help_text, handler=inbox, render=render_inbox, command="inbox", example="loopx inbox --json")


def _project_items(path: str, info: dict) -> list[dict]:
    import shlex

    from loopx.errors import LoopxError
    from loopx.kernel.policy import decide, tick
    from loopx.kernel.storage import clock
    from loopx.kernel.storage.store import Store

    q = shlex.quote(path)
    if not os.path.isdir(os.path.join(path, ".loopx")):
        return [{"kind": "missing", "project": path, "ts": info.get("last_seen") or "",
                 "message": "the project's folder or its .loopx/ is gone",
                 "command": f"loopx disconnect {q}"}]
    try:
        store = Store(os.path.join(path, ".loopx"))
        state = store.load(save_snapshot=False)
    except (LoopxError, OSError) as exc:
        return [{"kind": "unreadable", "project": path, "ts": info.get("last_seen") or "",
                 "message": f"the store cannot be read: {getattr(exc, 'message', exc)}",
                 "command": f"loopx --project {q} doctor"}]
    items = []
    for g in state["gates"].values():
        if g["status"] == "pending":
            items.append({"kind": "gate", "project": path, "goal": g["goal"], "gate_id": g["id"], "ts": g["created"],
                          "gate_kind": g["kind"], "question": g["question"],
                          "command": f"loopx --project {q} gate approve {g['id']}"})
    now = clock.now()
    book = tick.load_book(store) if state.get("watches") else None
    for g in state["goals"].values():
        if g["status"] != "active":
            continue
        try:
            d = decide.evaluate(state, now, goal_id=g["id"], book=book)
        except LoopxError:
            continue
        if d["decision"] == "wait_human" and d["reason"] not in ("gate_pending", "promote"):  # gates are listed above
            last = state["runs"].get(g.get("last_run") or "") or {}
            ts = max(g["updated"], last.get("finished") or "")
            items.append({"kind": "goal", "project": path, "goal": g["id"], "reason": d["reason"],
                          "message": d["message"], "ts": ts,
                          "command": f"loopx --project {q} history --goal-id {g['id']}"})
    return items


def inbox(ctx) -> dict:
    from loopx.kernel.storage import registry

    items = []
    projects = registry.load()
    for path, info in sorted(projects.items()):
        items.extend(_project_items(path, info if isinstance(info, dict) else {}))
    items.sort(key=lambda i: i.get("ts") or "", reverse=True)
    return {"items": items, "count": len(items), "projects": len(projects)}


def render_inbox(d: dict) -> str:
    if not d["items"]:
        return f"nothing needs you ({d['projects']} project(s) registered)"
    lines = []
    for i in d["items"]:
        where = safe(os.path.basename(i["project"]) or i["project"])
        if i["kind"] == "gate":
            lines.append(f"{i['ts']}  {where}/{i['goal']}  gate {i['gate_id']} ({i['gate_kind']}): "
                         f"{safe(i['question'], limit=100)}")
        elif i["kind"] == "goal":
            lines.append(f"{i['ts']}  {where}/{i['goal']}  {i['reason']}: {safe(i['message'], limit=100)}")
        else:
            lines.append(f"{i['ts'] or '-'}  {safe(i['project'])}  {i['kind']}: {safe(i['message'])}")
        lines.append(f"    {safe(i['command'])}")
    return "\n".join(lines)

