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
KIND = base.kind("gemini")
WINDOWS_SHELL = "pwsh"  # generic: not verified
VERIFIED = "@google/gemini-cli 0.61.0 bundled docs (hooks reference, tools reference); Windows shell not verified"
SHAPE = base.shape("gemini")  # the row of loopx.hostfacts
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
    return base.hook_file(NAME, scope, root)  # the path is a fact of loopx.hostfacts


def wanted(cmd, cap_arg: str, cap: int = 8) -> dict:
    def handler(kind: str, timeout_ms: int, extra: str = "") -> dict:
        return {"name": f"loopx-{kind}", "type": "command", "command": cmd(kind, extra), "timeout": timeout_ms}

    return {"SessionStart": [{"hooks": [handler("session-start", 10000)]}],
            "BeforeTool": [{"matcher": MATCHER, "hooks": [handler("pre-tool", 10000)]}],
            "AfterAgent": [{"hooks": [handler("stop", 30000, cap_arg)]}]}


def _json(path: str):
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def disabled(scope: str, root: str) -> str | None:
    """Why Gemini CLI would not run loopx's hooks, or None: ``hooksConfig.enabled: false`` or a
    ``loopx-*`` hook in ``hooksConfig.disabled``; for project hooks, a folder Gemini does not
    trust (it then loads no project hooks; ``--skip-trust`` runs headless without them)."""
    conf = _json(config_path(scope, root))
    hc = conf.get("hooksConfig") if isinstance(conf, dict) else None
    if isinstance(hc, dict):
        if hc.get("enabled") is False:
            return "hooksConfig.enabled is false, so Gemini CLI runs no hooks at all"
        off = [h for h in hc.get("disabled") or [] if isinstance(h, str) and ("loopx" in h)]
        if off:
            return f"hooksConfig.disabled lists {', '.join(off)}"
    if scope == "project" and folder_trusted(root) is not True:
        return (f"Gemini CLI loads project hooks only in a trusted folder, and {root} is not trusted in "
                "~/.gemini/trustedFolders.json: trust it (open `gemini` there once), or set "
                "GEMINI_CLI_TRUST_WORKSPACE=true for headless runs (`--skip-trust` runs without project hooks)")
    return None


def folder_trusted(root: str) -> bool | None:
    """Gemini CLI's verdict on ``root`` (0.61.0 rules): True/False by the longest matching rule of
    its trustedFolders.json (``TRUST_FOLDER``, ``TRUST_PARENT`` for the rule's parent,
    ``DO_NOT_TRUST``), True when folder trust is switched off or ``GEMINI_CLI_TRUST_WORKSPACE`` is
    true, None when no rule matches."""
    home = os.path.expanduser("~")
    if os.environ.get("GEMINI_CLI_TRUST_WORKSPACE", "").lower() == "true":
        return True
    user = _json(os.path.join(home, ".gemini", "settings.json"))
    trust_conf = ((user or {}).get("security") or {}).get("folderTrust") if isinstance(user, dict) else None
    if isinstance(trust_conf, dict) and trust_conf.get("enabled") is False:
        return True
    rules = _json(os.environ.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
                  or os.path.join(home, ".gemini", "trustedFolders.json"))
    if not isinstance(rules, dict):
        return None
    loc = os.path.realpath(root)
    best_len, best = -1, None
    for rule, level in rules.items():
        eff = os.path.realpath(os.path.dirname(rule) if level == "TRUST_PARENT" else rule)
        if (loc == eff or loc.startswith(eff.rstrip(os.sep) + os.sep)) and len(rule) > best_len:
            best_len, best = len(rule), level
    if best == "DO_NOT_TRUST":
        return False
    return True if best in ("TRUST_FOLDER", "TRUST_PARENT") else None
