"""Installed means active (issue 23): for a host that runs hooks only once the user trusts them
(the host table's ``hook_trust``; Codex today), whether loopx's installed hooks will run, asked of
the host's own trust state (``loopx.hosts.adapters.codex.trust``). Used by ``doctor``, ``hooks
--check`` and ``loopx run``."""

from __future__ import annotations

import os

from loopx import hostfacts
from loopx.errors import LoopxError, StateError
from loopx.hosts import adapters, hookconf


def trust_of(host: str, scope: str, root: str) -> dict | None:
    """``{"state", "why", "how"}`` for ``host``'s installed hooks in ``scope``, or None when the
    host needs no trust (or has no way to ask). Never raises."""
    row = hostfacts.HOSTS.get(host) or {}
    if not row.get("hook_trust"):
        return None
    fn = getattr(adapters.get(host), "trust", None)
    if fn is None:
        return None
    try:
        return fn(scope, root)
    except Exception as exc:  # noqa: BLE001 - a check, never a crash
        return {"state": "unknown", "why": f"{type(exc).__name__}: {exc}", "how": "error"}


def fix(host: str) -> str:
    return getattr(adapters.get(host), "TRUST_FIX", f"trust loopx's hooks in {host}")


def require_guard(ctx, host: str) -> None:
    """Raise StateError (exit 3, code ``host_unguarded``) when ``host`` has loopx's hooks installed
    (either scope) but will not run them: the turn would run with the guard off."""
    if not (hostfacts.HOSTS.get(host) or {}).get("hook_trust"):
        return
    try:
        project = ctx.store().project_dir
    except LoopxError:
        return
    for scope, root in (("project", project), ("user", os.path.expanduser("~"))):
        try:
            if hookconf.check(host, scope, root)["status"] == "missing":
                continue
        except LoopxError:
            continue
        t = trust_of(host, scope, root)
        if t and t["state"] == "untrusted":
            raise StateError(f"{host} will not run loopx's {scope} hooks: {t['why']}; the turn would run unguarded",
                             fix(host) + "; or pass --allow-unguarded to run it anyway", code="host_unguarded")
