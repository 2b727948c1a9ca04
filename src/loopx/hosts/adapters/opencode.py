"""OpenCode (opencode.ai/docs/plugins, the plugin type in anomalyco/opencode
``packages/plugin/src/index.ts``): JavaScript/TypeScript modules in ``.opencode/plugins/`` or
``~/.config/opencode/plugins/`` are loaded at start; every exported function is a plugin that
returns hooks. ``tool.execute.before(input: {tool, sessionID, callID}, output: {args})`` runs
before each tool and refuses it by throwing an Error. Built-in tools: ``bash`` (``command``),
``edit``/``write`` (``filePath``), ``apply_patch`` (``patchText``), ``read``, ``glob``, ``grep``..."""

from __future__ import annotations

from loopx.hosts.adapters import base

NAME = "opencode"
KIND = base.kind("opencode")
WINDOWS_SHELL = None  # the plugin starts loopx without a shell
VERIFIED = "opencode.ai/docs/plugins and packages/plugin/src/index.ts (via the search tool); tool argument names from packages/opencode/src/tool"
SHAPE = base.shape("opencode")  # the row of loopx.hostfacts


def deny(reason: str):
    return base.decision_deny(reason)


def allow():
    return {"decision": "allow"}, 0, ""


def plugin_path(scope: str, root: str) -> str:
    return base.hook_file(NAME, scope, root)  # the path is a fact of loopx.hostfacts


def plugin_text(argv: list[str]) -> str:
    from loopx.hosts.adapters import plugin_js  # imports json (and re): only an install writes the file

    return plugin_js.check_function(argv, NAME, ts=False, read_only=SHAPE["builtin"]) + """
export const LoopxGuard = async ({ directory }) => ({
  "tool.execute.before": async (input, output) => {
    const why = loopxCheck(input.tool, output.args, directory, input.sessionID);
    if (why) throw new Error(why);
  },
});
"""
