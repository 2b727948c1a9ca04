"""Cursor (cursor.com/docs/hooks): ``.cursor/hooks.json`` ``{"version": 1, "hooks": {event:
[{"command", "timeout"}]}}``. Events loopx uses: ``beforeShellExecution`` (``command``, ``cwd``)
and ``beforeMCPExecution`` (``tool_name``, ``tool_input`` as a JSON string) answered with
``{"permission": "allow"|"deny", "user_message", "agent_message"}``; ``beforeReadFile``
(``file_path``); ``afterFileEdit`` (``file_path``, ``edits``) which cannot refuse anything; ``stop``
(``status``, ``loop_count``) answered with ``followup_message``. Every payload has
``conversation_id``, ``generation_id``, ``hook_event_name`` and ``workspace_roots``.

Cursor has no hook before a file edit, so edits are checked after the fact: ``afterFileEdit``
records an edit outside scope (or into ``.loopx/``), opens a gate and leaves a report that the
next ``beforeShellExecution``/``beforeMCPExecution``/``beforeReadFile``/``stop`` hook hands to the
agent (see ``loopx.hosts.entry.after_edit``)."""

from __future__ import annotations

from loopx.hosts.adapters import base

NAME = "cursor"
KIND = base.kind("cursor")
WINDOWS_SHELL = "pwsh"  # generic: not verified against Cursor's Windows build
VERIFIED = ("cursor.com/docs/hooks as summarised in shared/reference/agent-hosts.md (events, answers); "
            "afterFileEdit/beforeMCPExecution payload fields from community adapters, not Cursor's own docs")
SHAPE = base.shape("cursor")  # the row of loopx.hostfacts
NEW_CONFIG = {"version": 1}  # what a hooks.json loopx creates starts with
REPORT_EVENTS = ("beforeShellExecution", "beforeMCPExecution", "beforeReadFile")


def tool_call(payload: dict) -> tuple[list[str], list[str]]:
    event = payload.get("hook_event_name")
    if event == "beforeMCPExecution" or (event is None and "tool_name" in payload):
        return base.tool_call(payload, SHAPE)
    if event in ("beforeReadFile", "afterFileEdit", "stop"):
        return [], []
    cmd = payload.get("command")
    return ([cmd] if isinstance(cmd, str) else []), []


def deny(reason: str):
    return {"permission": "deny", "user_message": reason.split(". ")[0] + ".", "agent_message": reason}, 0, ""


def allow():
    return {}, 0, ""


def cont(text: str):
    return {"followup_message": text}


def let_stop():
    return {}


def context(text: str):
    return {}


def config_path(scope: str, root: str) -> str:
    return base.hook_file(NAME, scope, root)  # the path is a fact of loopx.hostfacts


def wanted(cmd, cap_arg: str, cap: int = 8) -> dict:
    pre = [{"command": cmd("pre-tool"), "timeout": 10}]
    return {"beforeShellExecution": pre, "beforeMCPExecution": [dict(pre[0])],
            "beforeReadFile": [dict(pre[0])],
            "afterFileEdit": [{"command": cmd("after-edit"), "timeout": 20}],
            "stop": [{"command": cmd("stop", cap_arg), "timeout": 30, "loop_limit": max(cap, 0)}]}
