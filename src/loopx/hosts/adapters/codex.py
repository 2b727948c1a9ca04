"""Codex CLI (developers.openai.com/codex/hooks): the Claude Code shapes (``PreToolUse`` deny
through ``hookSpecificOutput``, ``Stop`` ``decision: block``), shell calls as ``Bash``/``shell``/
``exec_command`` and edits as ``apply_patch``. Config: ``.codex/hooks.json`` or
``$CODEX_HOME/hooks.json``; hooks run only after the user trusts them in ``/hooks``."""

from __future__ import annotations

import os

from loopx.hosts.adapters import base
from loopx.hosts.adapters.claude_code import allow, cont, context, deny, let_stop  # noqa: F401 (Codex speaks Claude Code's hook protocol: the same answers)

NAME = "codex"
KIND = base.kind("codex")
WINDOWS_SHELL = "pwsh"  # generic: not verified against Codex's Windows build
VERIFIED = "developers.openai.com/codex/hooks, openai/codex PR #20756 (apply_patch); Windows shell not verified"
SHAPE = base.shape("codex")  # the row of loopx.hostfacts


def config_path(scope: str, root: str) -> str:
    return base.hook_file(NAME, scope, root)  # the path is a fact of loopx.hostfacts


def wanted(cmd, cap_arg: str, cap: int = 8) -> dict:
    def handler(kind: str, timeout: int, extra: str = "") -> dict:
        return {"type": "command", "command": cmd(kind, extra), "timeout": timeout}

    # no matcher on PreToolUse: every tool is checked (shell, apply_patch, MCP tools naming a path)
    return {"SessionStart": [{"matcher": "startup|resume|clear", "hooks": [handler("session-start", 10)]}],
            "PreToolUse": [{"hooks": [handler("pre-tool", 10)]}],
            "Stop": [{"hooks": [handler("stop", 30, cap_arg)]}]}


def disabled(scope: str, root: str) -> str | None:
    """Why Codex would not run hooks, as far as its config.toml says: ``[features] hooks = false``
    in the project's ``.codex/config.toml`` or ``$CODEX_HOME/config.toml``; else None."""
    import tomllib

    paths = [os.path.join(os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex"),
                          "config.toml")]
    if scope == "project":
        paths.insert(0, os.path.join(root, ".codex", "config.toml"))
    for path in paths:
        try:
            with open(path, "rb") as fh:
                conf = tomllib.load(fh)
        except (OSError, ValueError):
            continue
        features = conf.get("features") if isinstance(conf, dict) else None
        if isinstance(features, dict) and features.get("hooks") is False:
            return f"{path} sets [features] hooks = false, so Codex runs no hooks"
    return None
