"""The generic host: any harness that can run a command before a tool and read its answer.

Input (JSON on stdin): ``{"tool_name", "tool_input", "cwd"}`` in the Claude Code shape, or simply
``{"command": "git push origin main", "paths": ["src/a.py"], "cwd": "/repo"}``. Answer: always one
JSON object on stdout, ``{"decision": "allow"}`` with exit 0, or ``{"decision": "deny",
"reason"}`` with exit 2 and the reason on stderr. Nothing is installed for it: wire the command
``loopx hook pre-tool --host generic`` into the harness yourself."""

from __future__ import annotations

from loopx.hosts.adapters import base

NAME = "generic"
KIND = base.kind("generic")
WINDOWS_SHELL = None
VERIFIED = "loopx's own contract"
SHAPE = base.shape("generic")  # the row of loopx.hostfacts


def tool_call(payload: dict) -> tuple[list[str], list[str]]:
    commands, paths = base.tool_call(payload, SHAPE)
    if not payload.get("tool_name"):
        cmd = payload.get("command")
        if isinstance(cmd, str) and cmd not in commands:
            commands.append(cmd)
        for p in payload.get("paths") or []:
            if isinstance(p, str) and p not in paths:
                paths.append(p)
    return commands, paths


def deny(reason: str):
    return base.decision_deny(reason)


def allow():
    return {"decision": "allow"}, 0, ""


def cont(text: str):
    return {"decision": "continue", "reason": text}


def let_stop():
    return {"decision": "stop"}


def context(text: str):
    return {"additionalContext": text}
