"""``loopx connect``: create or attach ``.loopx/`` and register the project."""

from __future__ import annotations

import json
import os

from loopx.commands import add
from loopx.errors import StateError, UsageError
from loopx.kernel import humans
from loopx.kernel.storage import fs, layout, registry
from loopx.kernel.storage.store import Store
from loopx.ops import gitattrs
from loopx.output import safe


def register(sub, name, help_text):
    add(sub, name, help_text, handler=connect, render=render, example="loopx connect --project ~/src/myapp")


def connect(ctx) -> dict:
    project = os.path.abspath(ctx.project or os.getcwd())
    if not ctx.project:
        _check_nested(project)
    if not os.path.isdir(project):
        raise UsageError(f"{project} is not a directory", "pass an existing project directory with --project")
    if not project.isascii():
        try:
            project.encode("utf-8")
        except UnicodeEncodeError:  # a name in another encoding: the registry and the records are JSON
            shown = os.fsencode(project).decode("utf-8", "backslashreplace")  # each such byte shown as \xff
            raise StateError(f"the project's path {shown} is not valid UTF-8, which loopx's JSON files cannot hold",
                             "rename the folder (or the one it is in) to a UTF-8 name, then connect",
                             code="path_not_utf8") from None
    inner = os.path.join(project, layout.DIRNAME)
    if os.path.exists(inner) and not os.path.isdir(inner):
        raise UsageError(f"{inner} exists and is not a directory", "move that file away, then connect again")
    _check_replacement(ctx, project, inner)
    store, created = Store.create(project)

    try:
        attrs = gitattrs.ensure(project)
    except OSError as exc:
        attrs = f"not written: {exc.strerror or exc}"
    info = store.format_info()
    registered = registry.add(project, info.get("project_id", ""))
    state = store.load(view="live")  # every goal is in the live view; a fresh clone starts from a checkpoint
    goals = [g for g in state["goals"].values() if g["status"] == "active"]
    if not state["goals"]:
        nxt = 'loopx start-goal --goal-text "What should be true when this is done?" --done-when "..." --verify "pytest -q"'
    else:
        nxt = "loopx status"
    return {"project": project, "store": store.root, "created": created, "registered": registered,
            "format": info.get("format"), "project_id": info.get("project_id"),
            "goals": len(state["goals"]), "active_goals": len(goals), "next": nxt,
            "read_only": state["meta"]["read_only"], "gitattributes": attrs}


def _check_nested(here: str) -> None:
    """A bare ``loopx connect`` in a subfolder of a connected project would make a second store
    there that hides the outer project's goals from every command run below it: refused, unless
    the folder is named explicitly (``--project .``)."""
    outer = fs.project_dir(os.path.dirname(here))
    if outer and os.path.isfile(os.path.join(outer, layout.DIRNAME, layout.FORMAT)) \
            and not os.path.isdir(os.path.join(here, layout.DIRNAME)):
        raise UsageError(f"{here} is inside the loopx project {outer}; loopx commands here already use it",
                         "run loopx from here as it is, or `loopx connect --project .` to make a separate project "
                         "(its store hides the outer one's goals below this folder)")


def _check_replacement(ctx, project: str, inner: str) -> None:
    """Connecting a project whose registered store is gone or was replaced (another project id)
    is human-only: until then the hooks deny protected actions there."""
    known = (registry.load().get(project) or {}).get("project_id")
    if not known:
        return
    try:
        with fs.open_file(os.path.join(inner, layout.FORMAT), "r", encoding="utf-8") as fh:
            current = json.load(fh).get("project_id")
    except (OSError, ValueError, AttributeError):
        current = None
    if current != known:
        humans.require_human(ctx, "connect.replace")


def render(d: dict) -> str:
    head = f"connected {safe(d['project'])}" if d["created"] else f"already connected: {safe(d['project'])} (nothing changed)"
    lines = [head, f"  store: {safe(d['store'])}  (format {d['format']}, {d['goals']} goal(s))"]
    if d.get("gitattributes") == "added":
        lines.append("  .gitattributes: the .loopx/ logs now merge by union (branch merges no longer conflict)")
    elif d.get("gitattributes", "").startswith("not written"):
        lines.append(f"  .gitattributes {safe(d['gitattributes'])}")
    if d.get("read_only"):
        lines.append(f"  read-only: {safe(d['read_only'])}")
    lines.append(f"next: {d['next']}")
    return "\n".join(lines)
