"""``loopx inbox``: what needs a person now, across every registered project."""

from __future__ import annotations

import os
import shlex

from loopx.commands import add
from loopx.errors import LoopxError
from loopx.kernel import reasons
from loopx.kernel.policy import decide
from loopx.kernel.storage import clock, layout, registry
from loopx.kernel.storage.store import Store
from loopx.notify.actions import gate_link
from loopx.output import safe


def register(sub, name, help_text):
    add(sub, name, help_text, handler=inbox, render=render_inbox, command="inbox", example="loopx inbox --json")


def _project_items(path: str, info: dict) -> list[dict]:
    q = shlex.quote(path)
    if not os.path.isdir(os.path.join(path, layout.DIRNAME)):
        return [{"kind": "missing", "project": path, "ts": info.get("last_seen") or "",
                 "message": "the project's folder or its .loopx/ is gone",
                 "command": f"loopx disconnect {q}"}]
    try:
        store = Store(os.path.join(path, layout.DIRNAME))
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
                          "command": f"loopx --project {q} gate approve {g['id']}",
                          "reject_command": f"loopx --project {q} gate reject {g['id']} --note WHY",
                          "link": _link(path, g["goal"], g["id"])})
    now = clock.now()
    for g in state["goals"].values():
        if g["status"] != "active":
            continue
        try:  # the one input builder: what should-run answers, with the same windows and checks
            d = decide.for_client(store, state, g["id"], now=now)
        except LoopxError:
            continue
        if reasons.needs_you(d) and d["reason"] not in ("gate_pending", "promote"):  # the registry says who must act
            last = state["runs"].get(g.get("last_run") or "") or {}
            ts = max(g["updated"], last.get("finished") or "")
            items.append({"kind": "goal", "project": path, "goal": g["id"], "decision": d["decision"],
                          "reason": d["reason"], "message": d["message"], "ts": ts,
                          "command": f"loopx --project {q} " + reasons.next_command(d).removeprefix("loopx ")})
    return items


def _link(path: str, goal: str, gate: str) -> str | None:
    try:
        return gate_link(path, goal, gate)
    except Exception:  # noqa: BLE001 - the command still decides
        return None


def inbox(ctx) -> dict:
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
        if i["kind"] == "gate":  # the command asks for the gate's code on the terminal it runs in
            lines.append(f"    in a terminal: {safe(i['command'])}  (it asks for the code {i['gate_id'].split('-', 1)[-1]})")
            if i.get("link"):
                lines.append(f"    or on the dashboard: {safe(i['link'])}")
        else:
            lines.append(f"    {safe(i['command'])}")
    return "\n".join(lines)

