"""``loopx inbox`` (what needs a person across every registered project) and ``loopx disconnect``
(alias ``forget``: remove a project from the registry without touching its files)."""

from __future__ import annotations

import os

from loopx.commands import add
from loopx.output import safe


def register(sub, name, help_text):
    if name == "inbox":
        add(sub, name, help_text, handler=inbox, render=render_inbox, command="inbox", example="loopx inbox --json")
        return
    p = add(sub, name, help_text, handler=disconnect, render=render_disconnect, command=name,
            example="loopx disconnect ~/src/old-checkout")
    p.add_argument("path", nargs="?", help="the project's directory (default: --project or the current project)")


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
        if d["decision"] == "wait_human" and d["reason"] != "gate_pending":
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


def disconnect(ctx, path=None) -> dict:
    from loopx.commands.humanonly import require_human
    from loopx.errors import NotFound
    from loopx.kernel.storage import registry
    from loopx.kernel.storage.fs import find_root

    require_human(ctx, "disconnecting a project")
    target = path or ctx.project
    if target is None:
        root = find_root(os.getcwd())
        target = os.path.dirname(root) if root else os.getcwd()
    key = os.path.abspath(os.path.expanduser(target))
    if key not in registry.load():
        raise NotFound(f"{key} is not a registered project", "`loopx inbox` lists registered projects by path",
                       code="not_registered")
    registry.remove(key)
    return {"project": key, "removed": True, "files_touched": False}


def render_disconnect(d: dict) -> str:
    return f"disconnected {safe(d['project'])} (its files were not touched; `loopx connect` adds it back)"
