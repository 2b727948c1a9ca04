"""OpenCode (opencode.ai/docs/plugins, the plugin type in anomalyco/opencode
``packages/plugin/src/index.ts``): JavaScript/TypeScript modules in ``.opencode/plugins/`` or
``~/.config/opencode/plugins/`` are loaded at start; every exported function is a plugin that
returns hooks. ``tool.execute.before(input: {tool, sessionID, callID}, output: {args})`` runs
before each tool and refuses it by throwing an Error. Built-in tools: ``bash`` (``command``),
``edit``/``write`` (``filePath``), ``apply_patch`` (``patchText``), ``read``, ``glob``, ``grep``..."""

from __future__ import annotations

import os

from loopx.hosts.adapters import base, plugin_js

NAME = "opencode"
KIND = "plugin"
WINDOWS_SHELL = None  # the plugin starts loopx without a shell
VERIFIED = "opencode.ai/docs/plugins and packages/plugin/src/index.ts (via the search tool); tool argument names from packages/opencode/src/tool"
SHAPE = {"tool": "tool_name", "input": "tool_input", "shell": {"bash"}, "edit": {"edit", "write", "multiedit", "patch"},
         "builtin": {"read", "glob", "grep", "list", "webfetch", "websearch", "todowrite", "todoread", "task", "skill",
                     "question", "codesearch", "lsp"},
         "paths": ("filePath", "file_path", "path")}


def deny(reason: str):
    return base.decision_deny(reason)


def allow():
    return {"decision": "allow"}, 0, ""


def plugin_path(scope: str, root: str) -> str:
    base_dir = os.path.join(root, ".opencode") if scope == "project" else os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.join(root, ".config"), "opencode")
    return os.path.join(base_dir, "plugins", "loopx-guard.js")


def plugin_text(argv: list[str]) -> str:
    return plugin_js.check_function(argv, NAME, ts=False, read_only=SHAPE["builtin"]) + """
export const LoopxGuard = async ({ directory }) => ({
  "tool.execute.before": async (input, output) => {
    const why = loopxCheck(input.tool, output.args, directory, input.sessionID);
    if (why) throw new Error(why);
  },
});
"""
