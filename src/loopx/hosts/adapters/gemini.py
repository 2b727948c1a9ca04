"""Gemini CLI (the package's own docs: ``bundle/docs/hooks/reference.md``, ``index.md``,
``reference/tools.md``; checked against @google/gemini-cli 0.61.0). Hooks live in
``.gemini/settings.json`` / ``~/.gemini/settings.json`` under ``hooks``: per event a list of
``{"matcher": regex for tool events, "hooks": [{"type": "command", "command", "name",
"timeout" (milliseconds)}]}``. Every payload carries ``session_id``, ``cwd``, ``hook_event_name``;
``BeforeTool`` adds ``tool_name``/``tool_input`` (MCP tools are ``mcp_<server>_<tool>``) and is
refused by ``{"decision": "deny", "reason"}`` on stdout or exit code 2 with the reason on stderr
(loopx does both); ``AfterAgent`` (with ``stop_hook_active``) retries with ``reason`` as the new
prompt on ``decision: deny``; ``SessionStart`` takes ``hookSpecificOutput.additionalContext``."""

from __future__ import annotations

import os

from loopx.hosts.adapters import base

NAME = "gemini"
KIND = "settings"
WINDOWS_SHELL = "pwsh"  # generic: not verified
VERIFIED = "@google/gemini-cli 0.61.0 bundled docs (hooks reference, tools reference); Windows shell not verified"
SHAPE = {"tool": "tool_name", "input": "tool_input", "shell": {"run_shell_command"},
         "edit": {"write_file", "replace"},
         "builtin": {"read_file", "read_many_files", "glob", "grep_search", "search_file_content", "list_directory",
                     "google_web_search", "web_fetch", "write_todos", "ask_user", "activate_skill", "get_internal_docs",
                     "enter_plan_mode", "exit_plan_mode", "save_memory", "list_mcp_resources", "read_mcp_resource",
                     "update_topic", "complete_task", "tracker_create_task", "tracker_update_task",
                     "tracker_get_task", "tracker_list_tasks", "tracker_add_dependency", "tracker_visualize"},
         "paths": ("file_path", "path")}
MATCHER = "^(?!(?:" + "|".join(sorted(SHAPE["builtin"])) + ")$).*"


def deny(reason: str):
    return base.decision_deny(reason)


def allow():
    return {}, 0, ""


def cont(text: str):
    return {"decision": "deny", "reason": text}


def let_stop():
    return {}


def context(text: str):
    return base.session_context(text)


def config_path(scope: str, root: str) -> str:
    return os.path.join(root, ".gemini", "settings.json")


def wanted(cmd, cap_arg: str, cap: int = 8) -> dict:
    def handler(kind: str, timeout_ms: int, extra: str = "") -> dict:
        return {"name": f"loopx-{kind}", "type": "command", "command": cmd(kind, extra), "timeout": timeout_ms}

    return {"SessionStart": [{"hooks": [handler("session-start", 10000)]}],
            "BeforeTool": [{"matcher": MATCHER, "hooks": [handler("pre-tool", 10000)]}],
            "AfterAgent": [{"hooks": [handler("stop", 30000, cap_arg)]}]}


def disabled(scope: str, root: str) -> str | None:
    """Why Gemini CLI would not run loopx's hooks from this settings file, or None:
    ``hooksConfig.enabled: false`` or a ``loopx-*`` hook listed in ``hooksConfig.disabled``."""
    import json

    try:
        with open(config_path(scope, root), encoding="utf-8") as fh:
            conf = json.load(fh)
    except (OSError, ValueError):
        return None
    hc = conf.get("hooksConfig") if isinstance(conf, dict) else None
    if not isinstance(hc, dict):
        return None
    if hc.get("enabled") is False:
        return "hooksConfig.enabled is false, so Gemini CLI runs no hooks at all"
    off = [h for h in hc.get("disabled") or [] if isinstance(h, str) and ("loopx" in h)]
    return f"hooksConfig.disabled lists {', '.join(off)}" if off else None
