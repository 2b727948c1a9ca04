"""loopx's guard in each host (opt-in via ``loopx hooks --install``), per the host's adapter:

- ``settings`` hosts (Claude Code, Codex, Cursor, Gemini CLI): loopx's entries are merged into the
  host's JSON hook configuration; everything else in the file is left exactly as it was (key
  order kept, 2-space indent). loopx's handlers are recognised by ``loopx hook `` (or
  ``loopx.exe" hook``...) in their command.
- ``plugin`` hosts (OpenCode, Pi): loopx owns one whole plugin/extension file, installed through
  ``hosts.files`` like a skill (content hash in the manifest: missing, stale, modified, current;
  an edited file is never overwritten or removed without ``--force``).

Every command starts loopx by the absolute path of the installation that wrote it
(``resources.loopx_executable``), so a host whose PATH lacks loopx still runs the guard; a loopx
that moved or was upgraded into another place makes the entries ``stale`` until ``loopx hooks
--install`` or ``loopx workflow-skills --install`` writes them again.
"""

from __future__ import annotations

import json
import os
import re

from loopx import hostfacts
from loopx.errors import StateError
from loopx.hosts import adapters, cmdline, files

_OURS = re.compile(r"loopx(?:\.exe)?['\"]?\s+hook\s")


def command_prefix() -> str:
    """loopx's own command line for this platform's shell (absolute path)."""
    return cmdline.render(cmdline.loopx_argv(), cmdline.default_shell())


def _adapter(host: str):
    return adapters.get(host)


def config_path(host: str, scope: str, root: str) -> str:
    """The file loopx writes for ``host``: its hook settings, or loopx's plugin file."""
    mod = _adapter(host)
    return mod.config_path(scope, root) if mod.KIND == "settings" else mod.plugin_path(scope, root)


def wanted(host: str, argv: list[str] | str | None = None, cap: int = 8, windows: bool | None = None) -> dict:
    """``{event: [entry, ...]}``: loopx's entries for a ``settings`` host, starting loopx with
    ``argv`` (default: this installation), quoted for the host's shell on Windows (``windows``,
    default: this platform)."""
    mod = _adapter(host)
    if isinstance(argv, str) or argv is None:
        argv = cmdline.loopx_argv()

    def cmd(kind: str, extra: str = "") -> str:
        try:
            return cmdline.hook_command(mod.WINDOWS_SHELL, ["hook", kind, "--host", host, *extra.split()], argv,
                                        windows)
        except ValueError as exc:
            raise StateError(f"cannot write a {host} hook command for this loopx: {exc}",
                             "install loopx in a folder whose path has no % or ! (e.g. with pipx)") from None

    cap_arg = f" --max-continuations {cap}" if cap != 8 else ""
    return mod.wanted(cmd, cap_arg, cap)


def plugin_item(host: str, scope: str, root: str, argv: list[str] | None = None) -> files.Item:
    mod = _adapter(host)
    return files.Item(mod.plugin_path(scope, root), "file", mod.plugin_text(argv or cmdline.loopx_argv()), host,
                      "guard plugin")


def ours(entry) -> bool:
    if not isinstance(entry, dict):
        return False
    if _OURS.search(str(entry.get("command", ""))):
        return True
    return any(isinstance(h, dict) and _OURS.search(str(h.get("command", ""))) for h in entry.get("hooks") or [])


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


def installed_entries(path: str) -> dict:
    """``{event: [loopx's entries]}`` currently in a settings file."""
    hooks = (load(path) or {}).get("hooks") or {}
    found = {ev: [e for e in (v or []) if ours(e)] for ev, v in hooks.items() if isinstance(v, list)}
    return {ev: es for ev, es in found.items() if es}


def status(host: str, path: str, want: dict) -> str:
    found = installed_entries(path)
    if not found:
        return "missing"
    return "current" if found == want else "stale"


# ------------------------------------------------------------------ one row per host
def check(host: str, scope: str, root: str, cap: int = 8) -> dict:
    """``{host, path, status, events, action: None}``."""
    mod = _adapter(host)
    if mod.KIND == "plugin":
        item = plugin_item(host, scope, root)
        st = files.status(item, files.load_manifest())
        return {"host": host, "path": item.path, "status": st, "events": ["plugin"], "action": None}
    path = mod.config_path(scope, root)
    want = wanted(host, cap=cap)
    return {"host": host, "path": path, "status": status(host, path, want), "events": sorted(want), "action": None}


def install(host: str, scope: str, root: str, cap: int = 8, *, dry_run: bool = False, force: bool = False,
            stamp: str = "") -> dict:
    mod = _adapter(host)
    if mod.KIND == "plugin":
        return _plugin(host, scope, root, remove=False, dry_run=dry_run, force=force, stamp=stamp)
    return apply(host, mod.config_path(scope, root), wanted(host, cap=cap), dry_run=dry_run)


def remove(host: str, scope: str, root: str, *, dry_run: bool = False, force: bool = False, stamp: str = "") -> dict:
    mod = _adapter(host)
    if mod.KIND == "plugin":
        return _plugin(host, scope, root, remove=True, dry_run=dry_run, force=force, stamp=stamp)
    return apply(host, mod.config_path(scope, root), None, dry_run=dry_run)


def _plugin(host, scope, root, *, remove, dry_run, force, stamp) -> dict:
    item = plugin_item(host, scope, root)
    manifest = files.load_manifest()
    if remove:
        row = files.remove(item, manifest, force=force, dry_run=dry_run, stamp=stamp)
        if not dry_run and row["action"] == "remove":
            inside = item.path.startswith(root + os.sep)
            files.prune_dirs(item.path, root if inside else os.path.dirname(os.path.dirname(item.path)))
    else:
        row = files.install(item, manifest, force=force, dry_run=dry_run, stamp=stamp)
    if not dry_run:
        files.save_manifest(manifest)
    return {"host": host, "path": item.path, "status": row["status"], "events": ["plugin"], "action": row["action"],
            "backup": row.get("backup")}


def refresh_installed(scope: str, root: str) -> list[dict]:
    """Re-write loopx's hooks for every host where they are installed but not current (after an
    upgrade or a move of loopx). Hosts without loopx hooks stay untouched (hooks are opt-in);
    edited plugin files are kept. Used by ``loopx workflow-skills --install``."""
    rows = []
    for host in hostfacts.hook_hosts():
        try:
            cur = check(host, scope, root)
        except StateError:
            continue
        if cur["status"] == "stale":
            cap = _installed_cap(host, cur["path"])
            rows.append(install(host, scope, root, cap))
    return rows


def _installed_cap(host: str, path: str) -> int:
    """The ``--max-continuations`` written in the installed stop entry (8 when none)."""
    try:
        text = json.dumps(installed_entries(path))
    except StateError:
        return 8
    m = re.search(r"--max-continuations (\d+)", text)
    return int(m.group(1)) if m else 8


def apply(host: str, path: str, want: dict | None, *, dry_run: bool) -> dict:
    """Install (``want``) or remove (None) loopx's entries in ``path``. Returns a report row."""
    original = files.read_text(path)
    data = load(path)
    before = status(host, path, want or {})
    row: dict = {"host": host, "path": path, "status": before, "events": sorted(want or {}), "action": "unchanged"}
    if want is not None and before == "current":
        return row
    if want is None and before == "missing":
        row["action"] = "nothing to remove"
        return row
    created = data is None
    data = data if data is not None else dict(getattr(_adapter(host), "NEW_CONFIG", {}))
    hooks = data.setdefault("hooks", {})
    for ev in list(hooks):
        kept = [e for e in (hooks[ev] or []) if not ours(e)]
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
        users_own = _original(path) if want is None else None
        if users_own is not None and _same_json(users_own, data):
            files.write_text(path, users_own)  # the user's own bytes, formatting and all
        else:
            files.write_text(path, json.dumps(data, indent=2) + "\n")
    _remember(path, created, want is not None, original if before == "missing" and not created else None)
    return row


def _same_json(text: str, data: dict) -> bool:
    try:
        return json.loads(text) == data
    except ValueError:
        return False


def _original(path: str) -> str | None:
    return files.load_manifest()["files"].get(path, {}).get("original_text")


def _created_by_us(path: str) -> bool:
    return bool(files.load_manifest()["files"].get(path, {}).get("created_file"))


def _remember(path: str, created: bool, installed: bool, original: str | None = None) -> None:
    """Track a settings file loopx wrote into: whether loopx created it, and the user's text from
    before loopx's first entries (so removing them gives back the user's exact bytes)."""
    m = files.load_manifest()
    if installed:
        rec = m["files"].get(path) or {"created_file": created, "kind": "hooks"}
        if original is not None and "original_text" not in rec and len(original) < 1 << 20:
            rec["original_text"] = original
        m["files"][path] = rec
    else:
        m["files"].pop(path, None)
    files.save_manifest(m)


# ------------------------------------------------------------------ can the installed hook start?
def startable(host: str, scope: str, root: str, path_env: str | None = None) -> list[dict]:
    """For every loopx command in ``host``'s installed hooks (or plugin file): ``{"command",
    "program", "ok", "where"}``, ``ok`` False when the program cannot be started from the host
    (a missing file, or a bare name not on ``path_env``, default this process's PATH)."""
    mod = _adapter(host)
    out = []
    if mod.KIND == "plugin":
        text = files.read_text(mod.plugin_path(scope, root))
        if not text or text == files.UNDECODABLE:
            return []
        m = re.search(r"^const LOOPX = (\[.*?\]);", text, re.M)
        try:
            argv = json.loads(m.group(1)) if m else []
        except ValueError:
            argv = []
        prog = argv[0] if argv and isinstance(argv[0], str) else None
        ok, where = cmdline.can_start(prog, path_env) if prog else (False, "(no LOOPX line in the plugin)")
        return [{"command": " ".join(map(str, argv)), "program": prog, "ok": ok, "where": where}]
    for entries in installed_entries(mod.config_path(scope, root)).values():
        for e in entries:
            for h in [e, *(e.get("hooks") or [])]:
                cmd = h.get("command") if isinstance(h, dict) else None
                if not isinstance(cmd, str) or not _OURS.search(cmd):
                    continue
                prog = cmdline.program_of(cmd)
                ok, where = cmdline.can_start(prog, path_env) if prog else (False, "")
                out.append({"command": cmd, "program": prog, "ok": ok, "where": where})
    return out
