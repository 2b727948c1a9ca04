"""What a person needs to act on a notification: which project and goal, the question, and how to
decide (docs/notifications.md, "Acting on a gate notification").

``enrich(notice, state, project_dir) -> dict`` adds to a notice (``kernel.read.notices``):
``project`` (the folder's name), ``project_path``, ``goal_objective`` and, for a gate,
``gate_id``, ``question``, ``command`` (the exact command for a human's terminal: it asks there for
the gate's code, so an agent's shell cannot use it), ``reject_command`` and ``link`` (the
dashboard's page of the gate's goal, ``<dashboard>/#/goal/<project key>/<goal>/<gate>``). The link
carries no secret: the dashboard still needs the human's own signed-in session to decide. The body
text gets the same lines, so every preset (ntfy, Slack, Discord, the desktop) shows them.
"""

from __future__ import annotations

import json
import os
import shlex
from urllib.parse import quote

from loopx.config import env
from loopx.kernel.storage import fold, registry
from loopx.kernel.storage.registry import project_key


def _quote(path: str) -> str:
    return shlex.quote(path)


def dashboard_base() -> str:
    """The dashboard's address: the running one's (its state file, ``dashboard.json`` in the user
    data folder, which ``loopx.dashboard.service`` writes; read here directly because that module
    sends notifications itself), else where ``loopx dashboard`` would start it."""
    try:
        with open(os.path.join(registry.home(), "dashboard.json"), encoding="utf-8") as fh:
            info = json.load(fh)
        port, host = info.get("port"), info.get("host")
        if isinstance(port, int) and 0 < port < 65536:
            host = "127.0.0.1" if not host or host in ("0.0.0.0", "localhost") else str(host)
            return f"http://{host}:{port}"
    except (OSError, ValueError, AttributeError):
        pass
    port = env("LOOPX_DASHBOARD_PORT")
    if not (port and port.strip().isdigit()):
        port = str(47000 + (os.getuid() if hasattr(os, "getuid") else 0) % 1000)  # service.default_port
    return f"http://127.0.0.1:{port.strip()}"


def gate_link(project_dir: str, goal_id: str | None, gate_id: str | None, base: str | None = None) -> str:
    """The dashboard page of ``gate_id``'s goal (no token: signing in is the human's own session)."""
    base = base or dashboard_base()
    tail = f"/{quote(gate_id, safe='')}" if gate_id else ""
    return f"{base}/#/goal/{project_key(project_dir)}/{quote(goal_id or '', safe='')}{tail}"


def enrich(notice: dict, state: dict, project_dir: str) -> dict:
    """The notice with what a person needs to act on it (see the module doc). Never raises for a
    gate or goal the state no longer shows (it sends what it has)."""
    out = dict(notice)
    name = os.path.basename(project_dir.rstrip("/\\")) or project_dir
    out["project"], out["project_path"] = name, project_dir
    goal = fold.held(state.get("goals") or {}, notice.get("goal") or "") or {}
    out["goal_objective"] = (goal.get("objective") or "")[:200] or None
    lines = [str(notice.get("body") or "")]
    where = f"project {name} ({project_dir})"
    if notice.get("goal"):
        where += f", goal {notice['goal']}" + (f": {out['goal_objective']}" if out["goal_objective"] else "")
    lines.append(where)
    gid = notice.get("gate_id")
    if notice.get("type") == "gate.opened" and gid:
        gate = fold.held(state.get("gates") or {}, gid) or {}
        q = _quote(project_dir)
        out.update(gate_id=gid, question=gate.get("question") or notice.get("body"),
                   command=f"loopx --project {q} gate approve {gid}",
                   reject_command=f"loopx --project {q} gate reject {gid} --note WHY")
        try:
            out["link"] = gate_link(project_dir, notice.get("goal"), gid)
        except Exception:  # noqa: BLE001 - no dashboard address: the command still decides
            out["link"] = None
        lines.append(f"decide in a terminal: {out['command']}  (it asks for the gate's code; "
                     f"reject: {out['reject_command']})")
        if out["link"]:
            lines.append(f"or on the dashboard: {out['link']}")
        out["title"] = f"loopx: gate {gid} on goal {notice.get('goal')} in {name}"
    out["body"] = "\n".join(x for x in lines if x)
    return out
