"""loopx's entries in each host's hook configuration (opt-in via ``loopx hooks --install``).

- claude-code: ``.claude/settings.local.json`` (project, personal and git-ignored by Claude Code) or
  ``~/.claude/settings.json`` (user): ``SessionStart``, ``PreToolUse`` (Bash and the edit tools) and
  ``Stop`` command hooks (code.claude.com/docs/en/hooks).
- codex: ``.codex/hooks.json`` or ``$CODEX_HOME/hooks.json``: the same event/matcher/handler shape
  (developers.openai.com/codex/hooks). Codex runs non-managed hooks only after you trust them in
  ``/hooks``, and project ``.codex/`` layers only in trusted projects.
- cursor: ``.cursor/hooks.json`` or ``~/.cursor/hooks.json``: ``{"version": 1, "hooks": {"stop":
  [{"command", "loop_limit"}], "beforeShellExecution": [{"command"}]}}`` (cursor.com/docs/hooks).

loopx's handlers are recognised by the ``loopx hook `` in their command; everything else in the
file is left exactly as it was (key order kept, 2-space indent).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys

from loopx.errors import StateError
from loopx.hosts import files

MARK = "loopx hook "


def command_prefix() -> str:
    """``loopx`` when it is on PATH, else this interpreter running the module."""
    return "loopx" if shutil.which("loopx") else f"{shlex.quote(sys.executable)} -m loopx"


def config_path(host: str, scope: str, root: str) -> str:
    if host == "claude-code":
        return os.path.join(root, ".claude", "settings.local.json" if scope == "project" else "settings.json")
    if host == "codex":
        base = os.path.join(root, ".codex") if scope == "project" else (
            os.environ.get("CODEX_HOME") or os.path.join(root, ".codex"))
        return os.path.join(base, "hooks.json")
    return os.path.join(root, ".cursor", "hooks.json")


def wanted(host: str, prefix: str, cap: int) -> dict:
    """``{event: [entry, ...]}``: loopx's entries for ``host``."""
    def cmd(kind: str, extra: str = "") -> str:
        return f"{prefix} hook {kind} --host {host}{extra}"

    cap_arg = f" --max-continuations {cap}" if cap != 8 else ""
    if host == "cursor":
        return {"beforeShellExecution": [{"command": cmd("pre-tool"), "timeout": 10}],
                "stop": [{"command": cmd("stop", cap_arg), "timeout": 30, "loop_limit": max(cap, 0)}]}

    def handler(kind: str, timeout: int, extra: str = "") -> dict:
        return {"type": "command", "command": cmd(kind, extra), "timeout": timeout}

    if host == "claude-code":
        return {"SessionStart": [{"matcher": "startup|resume|clear|compact", "hooks": [handler("session-start", 10)]}],
                "PreToolUse": [{"matcher": "Bash|Write|Edit|MultiEdit|NotebookEdit", "hooks": [handler("pre-tool", 10)]}],
                "Stop": [{"hooks": [handler("stop", 30, cap_arg)]}]}
    return {"SessionStart": [{"matcher": "startup|resume|clear", "hooks": [handler("session-start", 10)]}],
            "PreToolUse": [{"hooks": [handler("pre-tool", 10)]}],
            "Stop": [{"hooks": [handler("stop", 30, cap_arg)]}]}


def _ours(entry) -> bool:
    if not isinstance(entry, dict):
        return False
    if MARK in str(entry.get("command", "")):
        return True
    return any(isinstance(h, dict) and MARK in str(h.get("command", "")) for h in entry.get("hooks") or [])


def load(path: str) -> dict | None:
    """The JSON object in ``path``, None when the file does not exist. Raises StateError (exit 3)
    for a file that is not a JSON object (loopx never rewrites what it cannot parse)."""
    text = files.read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise StateError(f"{path} is not valid JSON ({exc})", "fix or move the file, then run the command again") from None
    if not isinstance(data, dict) or not isinstance(data.get("hooks", {}), dict):
        raise StateError(f"{path} does not hold a JSON object with a \"hooks\" object", "fix the file by hand first")
    return data


def status(host: str, path: str, want: dict) -> str:
    data = load(path)
    hooks = (data or {}).get("hooks") or {}
    found = {ev: [e for e in (hooks.get(ev) or []) if _ours(e)] for ev in hooks}
    found = {ev: es for ev, es in found.items() if es}
    if not found:
        return "missing"
    return "current" if found == want else "stale"


def apply(host: str, path: str, want: dict | None, *, dry_run: bool) -> dict:
    """Install (``want``) or remove (None) loopx's entries in ``path``. Returns a report row."""
    data = load(path)
    before = status(host, path, want or {})
    row = {"host": host, "path": path, "status": before, "events": sorted(want or {}), "action": "unchanged"}
    if want is not None and before == "current":
        return row
    if want is None and before == "missing":
        row["action"] = "nothing to remove"
        return row
    created = data is None
    data = data if data is not None else ({"version": 1} if host == "cursor" else {})
    hooks = data.setdefault("hooks", {})
    for ev in list(hooks):
        kept = [e for e in (hooks[ev] or []) if not _ours(e)]
        if kept:
            hooks[ev] = kept
        else:
            del hooks[ev]
    for ev, entries in (want or {}).items():
        hooks.setdefault(ev, []).extend(entries)
    row["action"] = ("create" if created else "update") if want is not None else "remove"
    if dry_run:
        row["action"] = "would " + row["action"]
        return row
    leftover = {k: v for k, v in data.items() if k not in ("hooks", "version")} or hooks
    if want is None and not leftover and _created_by_us(path):
        os.remove(path)
        files.prune_dirs(path, os.path.dirname(os.path.dirname(path)))
    else:
        if not hooks:
            del data["hooks"]
        files.write_text(path, json.dumps(data, indent=2) + "\n")
    _remember(path, created, want is not None)
    return row


def _created_by_us(path: str) -> bool:
    return bool(files.load_manifest()["files"].get(path, {}).get("created_file"))


def _remember(path: str, created: bool, installed: bool) -> None:
    m = files.load_manifest()
    if installed:
        rec = m["files"].get(path) or {"created_file": created, "kind": "hooks"}
        m["files"][path] = rec
    else:
        m["files"].pop(path, None)
    files.save_manifest(m)
