"""Claude Code (code.claude.com/docs/en/hooks): ``PreToolUse`` with ``tool_name``/``tool_input``,
deny through ``hookSpecificOutput.permissionDecision``; ``Stop`` continues with ``decision: block``;
``SessionStart`` adds ``additionalContext``. Config: ``.claude/settings.local.json`` (project,
personal) or ``~/.claude/settings.json`` (user)."""

from __future__ import annotations

from loopx.hosts.adapters import base

NAME = "claude-code"
KIND = base.kind("claude-code")
WINDOWS_SHELL = "posix"  # Claude Code runs hook commands through Git Bash on Windows (generic: not re-checked)
VERIFIED = "code.claude.com/docs/en/hooks (payload, answers, matcher); Windows shell not verified"
SHAPE = base.shape("claude-code")  # the row of loopx.hostfacts
# Every tool except the read-only built-ins: shell, edits, MCP (mcp__server__tool) and plugin tools.
MATCHER = "^(?!(?:" + "|".join(sorted(SHAPE["builtin"])) + ")$).*"


def deny(reason: str):
    return base.claude_deny(reason)


def allow():
    return None, 0, ""


def cont(text: str):
    return {"decision": "block", "reason": text}


def let_stop():
    return None


def context(text: str):
    return base.session_context(text)


def config_path(scope: str, root: str) -> str:
    return base.hook_file(NAME, scope, root)  # the path is a fact of loopx.hostfacts


def wanted(cmd, cap_arg: str, cap: int = 8) -> dict:
    def handler(kind: str, timeout: int, extra: str = "") -> dict:
        return {"type": "command", "command": cmd(kind, extra), "timeout": timeout}

    return {"SessionStart": [{"matcher": "startup|resume|clear|compact", "hooks": [handler("session-start", 10)]}],
            "PreToolUse": [{"matcher": MATCHER, "hooks": [handler("pre-tool", 10)]}],
            "Stop": [{"hooks": [handler("stop", 30, cap_arg)]}]}
