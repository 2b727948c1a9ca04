"""Agent hosts: where loopx's skills, rules, instruction blocks and hooks go for each host, and the
hook entry points the hosts call.

- ``plan``: the items ``loopx workflow-skills`` installs per host and scope.
- ``files``: the idempotent installer (content hashes, managed blocks, manifest, backups).
- ``adapters``: one module per host: payload shapes, answers, where its hooks or plugin go.
- ``hookconf``: merging loopx's hook entries into each host's hook configuration, or installing
  loopx's plugin file; checking that the installed command can start.
- ``cmdline``: hook command lines quoted for POSIX sh, cmd.exe and PowerShell 7.
- ``entry``: ``loopx hook stop|pre-tool|session-start``: host payload in, host response out.

See docs/hosts.md for what gets written where and the sources for each host's conventions.
"""

from loopx import hostfacts

HOSTS = tuple(hostfacts.names())  # the rows of the host table (loopx.hostfacts), generic last
HOOK_HOSTS = tuple(hostfacts.hook_hosts())
SCOPES = hostfacts.SCOPES


def expand_hosts(host: str | None, allowed=None) -> list[str]:
    """``all``/None -> every host of ``allowed`` (default: every host of the table, read now so a
    row added later counts); otherwise the one named (an alias resolved). Raises UsageError for
    an unknown host."""
    from loopx.errors import UsageError

    allowed = list(allowed if allowed is not None else hostfacts.names())
    if host in (None, "", "all"):
        return list(allowed)
    host = hostfacts.canonical(host) or host
    if host not in allowed:
        raise UsageError(f"unknown host {host!r}", f"use one of: {', '.join(allowed)}, all")
    return [host]
