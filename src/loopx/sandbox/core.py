"""The sandbox's small core (no import above the storage layer): the mode, the status line,
wrapping an argv in the launcher, and the policy verify commands run under. See ``loopx.sandbox``."""


from __future__ import annotations

import json  # lazily: `next` pins its git calls through loopx.sandbox.gitpin, which loads this package
import os
import sys

from loopx.config import env
from loopx.sandbox import landlock, seatbelt

BROKER_ENV = "LOOPX_BROKER"       # the broker socket's path (a non-secret name: hosts pass it on)
INSIDE_ENV = "LOOPX_SANDBOXED"    # set inside every sandbox loopx starts (informational, not trusted)
VERIFY_ENV = "LOOPX_VERIFY_POLICY"  # a policy file: verify commands of brokered calls run under it

_active: dict | None = None       # the policy verify commands run under in this process (loopx run)


def mode() -> str:
    v = (env("LOOPX_SANDBOX") or "").strip().lower()
    if v in ("off", "0", "no", "false", "none"):
        return "off"
    if sys.platform.startswith("linux"):
        from loopx.sandbox import landlock

        return "landlock" if landlock.abi() >= 1 else "unavailable"
    if sys.platform == "darwin":
        import shutil

        return "seatbelt" if shutil.which("sandbox-exec") else "unavailable"
    return "unavailable"


def status() -> dict:
    m = mode()
    abi = 0
    if m == "landlock":
        abi = landlock.abi()
        net = "TCP connect limited to allowed ports" if abi >= 4 else "network not filtered (Landlock ABI < 4)"
        line = f"sandbox: Landlock ABI {abi} (files: allow-list; {net})"
    elif m == "seatbelt":
        line = "sandbox: macOS sandbox-exec (generated profile; not tested by loopx's CI)"
    elif m == "off":
        line = ("sandbox: off (LOOPX_SANDBOX=off): the agent runs unconfined; only the pre-tool guard "
                "and the log's checks apply")
    else:
        line = ("sandbox: unavailable on this system (no Landlock, no sandbox-exec): the agent runs unconfined; "
                "only the pre-tool guard and the log's checks apply")
    return {"mode": m, "abi": abi, "line": line}


def enforced() -> bool:
    return mode() in ("landlock", "seatbelt")


def wrap(argv: list[str], policy: dict) -> list[str]:
    if mode() == "seatbelt":  # pragma: no cover - macOS, untested here

        return ["sandbox-exec", "-p", seatbelt.profile(policy), *argv]

    return [sys.executable, "-m", "loopx.sandbox.exec", json.dumps(policy, separators=(",", ":")), "--", *argv]


def activate(policy: dict | None) -> None:
    """Make verify commands run by this process (``kernel.write.checks``) use ``policy``."""
    global _active
    _active = policy


def verify_policy() -> dict | None:
    """The policy for a verify command run now: the active one, or ``LOOPX_VERIFY_POLICY``'s file."""
    if _active is not None:
        return _active
    path = os.environ.get(VERIFY_ENV)
    if path and enforced():
        try:
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return {"read": [], "write": [], "connect": []}  # unreadable: the narrowest sandbox, never none
    return None


def shell_argv(command: str) -> list[str]:
    return ["/bin/sh", "-c", command]


