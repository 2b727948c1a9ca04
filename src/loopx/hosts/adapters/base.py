"""Shared pieces of the host adapters: reading a tool call out of a payload, and answers in the
two common shapes (Claude-style ``hookSpecificOutput`` and the plain ``decision``/``reason``)."""

from __future__ import annotations

from loopx.kernel.storage import cjson

PATH_KEYS = ("file_path", "filePath", "path", "filename", "fileName", "file", "notebook_path", "target_file",
             "targetFile", "destination", "dest", "target", "new_path", "old_path", "source_path")
LIST_KEYS = ("paths", "files", "file_paths", "filePaths")



def shape(host: str) -> dict:
    """The payload table row of ``host`` (``loopx.hostfacts``): ``{"tool", "input", "shell",
    "edit", "builtin", "paths", "dirs"}`` with sets of tool names; ``paths`` defaults to
    ``PATH_KEYS``. Raises KeyError for a host not in the table."""
    from loopx import hostfacts

    t = hostfacts.HOSTS[host]["tools"]
    return {"tool": t["tool"], "input": t["input"], "shell": set(t["shell"]), "edit": set(t["edit"]),
            "builtin": set(t["builtin"]), "paths": tuple(t["paths"]) or PATH_KEYS, "dirs": tuple(t["dirs"])}


def kind(host: str) -> str:
    """``settings``, ``plugin`` or ``none``: how loopx installs ``host``'s hooks (the table's row)."""
    from loopx import hostfacts

    return hostfacts.HOSTS[host]["hooks"]["install"] or "none"


def hook_file(host: str, scope: str, root: str) -> str:
    """``host``'s hook file in ``scope`` (``loopx.hostfacts.hook_file``), for an adapter's host."""
    from loopx import hostfacts

    path = hostfacts.hook_file(host, scope, root)
    assert path is not None  # every host with an adapter has a hook file at both scopes (its row)
    return path


_PATCH_FILE = r"(?m)^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$"  # compiled on use


def patch_paths(text: str) -> list[str]:
    """The files an ``apply_patch`` body adds, updates, deletes or moves to."""
    if "*** " not in text:
        return []
    import re

    return [a or b for a, b in re.findall(_PATCH_FILE, text)]


def named_paths(ti: dict, keys=PATH_KEYS) -> list[str]:
    """Every string under a path-like key of a tool input (and lists of them under ``paths``...)."""
    out = [ti[k] for k in keys if isinstance(ti.get(k), str) and ti[k]]
    for k in ("uri", "url", "resource"):  # file:// URIs name a path too
        v = ti.get(k)
        if isinstance(v, str) and v.lower().startswith("file://"):
            from urllib.parse import unquote, urlparse

            out.append(unquote(urlparse(v).path))
    for k in LIST_KEYS:
        v = ti.get(k)
        if isinstance(v, list):
            out.extend(x for x in v if isinstance(x, str) and x)
    for k in ("edits", "files"):  # lists of {path: ...} objects (multi-file edit tools)
        v = ti.get(k)
        if isinstance(v, list):
            for item in v:
                if isinstance(item, dict):
                    out.extend(item[p] for p in keys if isinstance(item.get(p), str) and item[p])
    seen: list[str] = []
    for p in out:
        if p not in seen:
            seen.append(p)
    return seen


def tool_call(payload: dict, shape: dict) -> tuple[list[str], list[str]]:
    """``(commands, paths)`` a tool call would run or write, read with ``shape`` (an adapter's
    SHAPE row). Shell tools give their command; edit tools, ``apply_patch`` bodies and any tool the
    host does not list as a read-only built-in (MCP and plugin tools) give the paths they name,
    and such a tool's ``command``/``cmd`` string is checked as a shell command."""
    name = str(payload.get(shape["tool"]) or "")
    ti = payload.get(shape["input"])
    shell, edit = shape["shell"], shape["edit"]
    if isinstance(ti, str):
        try:
            ti = cjson.loads(ti)
        except ValueError:
            ti = {"command": ti} if name in shell or name == "apply_patch" else {}
    ti = ti if isinstance(ti, dict) else {}
    patch = "\n".join(str(ti.get(k) or "") for k in ("command", "input", "patch", "patchText"))
    if name == "apply_patch" or (name not in shell and "*** Begin Patch" in patch):
        return [], patch_paths(patch)
    commands: list[str] = []
    cmd = ti.get("command", ti.get("cmd"))
    if isinstance(cmd, list):
        import shlex

        cmd = shlex.join(str(c) for c in cmd)
    if isinstance(cmd, str) and (name in shell or not name):
        commands.append(cmd)
    if name in edit:
        return commands, named_paths(ti, shape["paths"])
    if name and name not in shell and name not in shape["builtin"]:
        # MCP and other non-built-in tools: a path they name is checked like an edit, a command
        # string they carry (an MCP shell server) like a shell command
        if isinstance(cmd, str) and name not in edit:
            commands.append(cmd)
        return commands, named_paths(ti)
    return commands, []


_OLD_KEYS = ("old_string", "oldString", "oldText", "old_text", "old_str", "old")
_CONTENT_KEYS = ("content", "contents", "file_text", "new_content", "text")


def edit_texts(payload: dict, shape: dict) -> dict:
    """What an edit tool call removes and writes: ``{"removed": [old strings], "content": [whole
    new file texts], "deleted": bool}`` (a patch body: its ``-`` lines), for the guard's check of
    loopx's marked block in an instruction file (``guard.owned.block_change``)."""
    ti = payload.get(shape["input"])
    if isinstance(ti, str):
        try:
            ti = cjson.loads(ti)
        except ValueError:
            ti = {}
    ti = ti if isinstance(ti, dict) else {}
    for k in ("patch", "patchText", "input", "command"):
        v = ti.get(k)
        if isinstance(v, str) and "*** " in v:
            from loopx.guard import owned

            return owned.patch_texts(v)
    removed: list[str] = []
    content: list[str] = []
    items = [ti] + [e for k in ("edits", "files") if isinstance(ti.get(k), list) for e in ti[k] if isinstance(e, dict)]
    for item in items:
        removed.extend(item[k] for k in _OLD_KEYS if isinstance(item.get(k), str))
        content.extend(item[k] for k in _CONTENT_KEYS if isinstance(item.get(k), str))
    return {"removed": removed, "content": content, "deleted": False}


# ------------------------------------------------------------------ answer shapes
def claude_deny(reason: str):
    return ({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                    "permissionDecisionReason": reason}}, 0, "")


def decision_deny(reason: str):
    """``{"decision": "deny", "reason"}`` on stdout, the reason on stderr, exit 2 (a block for
    hosts that read exit codes, and the generic contract)."""
    return ({"decision": "deny", "reason": reason}, 2, reason)


def session_context(text: str):
    return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
