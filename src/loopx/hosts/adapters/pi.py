"""Pi, the ``pi`` coding agent (@mariozechner/pi-coding-agent 0.73.1, its bundled
``docs/extensions.md``, ``docs/skills.md``, ``docs/usage.md``): extensions are TypeScript modules
auto-discovered from ``.pi/extensions/*.ts`` (project) and ``~/.pi/agent/extensions/*.ts``
(``$PI_CODING_AGENT_DIR``), loaded through jiti; the default export receives the API and
``pi.on("tool_call", (event, ctx) => ...)`` sees ``event.toolName``/``event.input`` before a tool
runs and blocks it by returning ``{block: true, reason}`` (a handler that throws also blocks).
Built-in tools: ``bash`` (``command``), ``read``/``write``/``edit`` (``path``), ``grep``, ``find``,
``ls``. Skills: ``.agents/skills`` (cwd up to the repo root), ``.pi/skills``, ``~/.agents/skills``,
``~/.pi/agent/skills``. Instructions: ``AGENTS.md`` (or ``CLAUDE.md``) walking up from cwd, and
``~/.pi/agent/AGENTS.md``. Headless: ``pi -p`` takes the prompt from piped stdin."""

from __future__ import annotations

import os

from loopx.hosts.adapters import base

NAME = "pi"
KIND = base.kind("pi")
WINDOWS_SHELL = None
VERIFIED = "@mariozechner/pi-coding-agent 0.73.1 bundled docs and dist/main.js (stdin handling)"
SHAPE = base.shape("pi")  # the row of loopx.hostfacts


def deny(reason: str):
    return base.decision_deny(reason)


def allow():
    return {"decision": "allow"}, 0, ""


def agent_dir(root: str) -> str:
    return os.environ.get("PI_CODING_AGENT_DIR") or os.path.join(root, ".pi", "agent")


def plugin_path(scope: str, root: str) -> str:
    return base.hook_file(NAME, scope, root)  # the path is a fact of loopx.hostfacts


def plugin_text(argv: list[str]) -> str:
    from loopx.hosts.adapters import plugin_js  # imports json (and re): only an install writes the file

    return plugin_js.check_function(argv, NAME, ts=True, read_only=SHAPE["builtin"]) + """
export default function loopxGuard(pi: any): void {
  pi.on("tool_call", async (event: any, ctx: any) => {
    const why = loopxCheck(event.toolName, event.input, (ctx && ctx.cwd) || process.cwd(), "");
    if (why) return { block: true, reason: why };
    return undefined;
  });
}
"""
