"""The files loopx installs for agent hosts, and the hosts' own state folders, as the sandbox needs
them: read from the host table (``loopx.hostfacts``), the one home of host facts.

- ``owned(project_dir, home) -> [path]``: every whole file loopx owns for a host (hook settings,
  plugins, extensions, settings that can switch the hooks off), at project and user scope and as
  if no host home variable were set, plus the files in loopx's install manifest. Existing or not:
  the sandbox keeps each one read-only for the agent.
- ``state_dirs(host, home) -> [path]``: the folders a host writes while it runs (its own home,
  caches); ``host`` is a table name or alias, None (or an unknown name) gives none.
- ``host_of(argv0) -> host | None``: the host a command line starts (``claude`` -> ``claude-code``).
"""

from __future__ import annotations

import os

from loopx import hostfacts
from loopx.hosts import files


def owned(project_dir: str, home: str) -> list[str]:
    out = [os.path.abspath(p) for p in (hostfacts.owned_files("project", project_dir, all_homes=True)
                                        + hostfacts.owned_files("user", home, all_homes=True))]
    try:
        out.extend(os.path.abspath(p) for p in files.load_manifest().get("files", {}))
    except Exception:  # noqa: BLE001 - no manifest, nothing installed
        pass
    return list(dict.fromkeys(out))


def host_of(argv0: str | None) -> str | None:
    if not argv0:
        return None
    return hostfacts.canonical(os.path.basename(argv0))


def state_dirs(host: str | None, home: str) -> list[str]:
    name = hostfacts.canonical(host) if host else None
    return hostfacts.state_dirs(name, home) if name else []
