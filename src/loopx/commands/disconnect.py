"""``loopx disconnect`` (alias ``forget``): remove a project from the registry; its files stay."""

from __future__ import annotations

import os

from loopx.commands import add
from loopx.errors import NotFound
from loopx.kernel.humans import require_human
from loopx.kernel.storage import registry
from loopx.kernel.storage.fs import find_root
from loopx.output import safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=disconnect, render=render_disconnect, command=name,
            example="loopx disconnect ~/src/old-checkout")
    p.add_argument("path", nargs="?", help="the project's directory (default: --project or the current project)")


def disconnect(ctx, path=None) -> dict:
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
