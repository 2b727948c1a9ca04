"""The files loopx installs for agent hosts, and the hosts' own state folders: the one place the
sandbox asks (so it can be re-pointed at a host table later).

- ``owned(project_dir, home) -> [path]``: every hook config, plugin and extension file loopx
  writes for a host, at project and user scope (``loopx.hosts.adapters``' ``config_path`` and
  ``plugin_path``), plus the files in loopx's install manifest. Existing or not.
- ``state_dirs(host, home) -> [path]``: the folders a host writes its own state to (sessions,
  caches, logs); ``host`` is a preset or adapter name, None gives none.
"""

from __future__ import annotations

import os

# host -> folders (relative to HOME) the host keeps its own state in; facts from
# /work/shared/reference/agent-hosts.md and the adapters' config paths
STATE = {
    "claude-code": (".claude", ".claude.json", ".cache/claude", ".config/claude", ".local/share/claude",
                    ".local/state/claude"),
    "codex": (".codex",),
    "cursor": (".cursor", ".config/cursor", ".local/share/cursor-agent"),
    "gemini": (".gemini",),
    "opencode": (".config/opencode", ".local/share/opencode", ".local/state/opencode", ".cache/opencode"),
    "pi": (".pi",),
}
ALIASES = {"claude": "claude-code", "cursor-agent": "cursor"}


def owned(project_dir: str, home: str) -> list[str]:
    from loopx.hosts import adapters

    out: list[str] = []
    for host in adapters.TABLE:
        mod = adapters.get(host)
        for scope, root in (("project", project_dir), ("user", home)):
            for fn in ("config_path", "plugin_path"):
                f = getattr(mod, fn, None)
                if f is None:
                    continue
                try:
                    out.append(os.path.abspath(f(scope, root)))
                except Exception:  # noqa: BLE001 - an adapter that cannot name a path adds none
                    pass
    try:
        from loopx.hosts import files

        out.extend(os.path.abspath(p) for p in files.load_manifest().get("files", {}))
    except Exception:  # noqa: BLE001 - no manifest, nothing installed
        pass
    seen: list[str] = []
    for p in out:
        if p not in seen:
            seen.append(p)
    return seen


def host_of(argv0: str | None) -> str | None:
    """The host a command line starts (``claude`` -> ``claude-code``), or None."""
    if not argv0:
        return None
    name = os.path.basename(argv0)
    name = ALIASES.get(name, name)
    return name if name in STATE else None


def state_dirs(host: str | None, home: str) -> list[str]:
    host = ALIASES.get(host or "", host)
    return [os.path.join(home, p) for p in STATE.get(host or "", ())]
