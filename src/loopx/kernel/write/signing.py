"""Signed approvals (opt-in), through OpenSSH's own ``ssh-keygen -Y sign|verify``: whether an
approval counts. Setting signing up, signing an approval and checking the signing log are
``signsetup``'s (a human's commands and ``doctor``; no hot command loads them).

Settings live in the user's loopx config (``loopx.config``), never in a project:
``[signing] enabled = true, key = "<private key, or public key of an ssh-agent key>",
principal = "<name>"``, and the allowed signers in ``allowed_signers`` next to ``config.toml``
(OpenSSH format, one ``principal namespaces="loopx-gate" <public key>`` line per signer).

- ``approval_counts(gate)``: when signing is on, an approval counts only if its signature
  verifies against the allowed signers (``ssh-keygen -Y verify``) over ``message(gate,
  standing)``, the exact text it signs (namespace ``loopx-gate``); off, every approval counts.
  ``gate_verifier()`` is the same for many gates at one moment.
- Signing is on when the config says so, or when the last entry of ``signing-log.jsonl`` (next to
  ``config.toml``, every change of "signing on" or of the allowed signers, ``signsetup``) turned
  it on: a config edited to say off turns nothing off.

Errors: ``SigningError`` (a StateError, exit 3) when ``ssh-keygen`` is missing or refuses.
"""

from __future__ import annotations

import os

from loopx.errors import StateError
from loopx.kernel.storage.fs import open_file

NAMESPACE = "loopx-gate"
_CACHE: dict = {}


class SigningError(StateError):
    code = "signing_failed"


# ------------------------------------------------------------------ settings
def config_dir() -> str:
    from loopx import config

    return os.path.dirname(config.config_path())


def signers_path() -> str:
    return os.path.join(config_dir(), "allowed_signers")


def log_path() -> str:
    return os.path.join(config_dir(), "signing-log.jsonl")


def settings() -> dict:
    """``{"enabled": bool, "key": str|None, "principal": str|None}`` from the user's config."""
    from loopx import config

    try:
        s = config.get_user_value("signing", {}) or {}
    except Exception:  # an unreadable config: signing state unknown; treat as on (fail closed) if a log exists
        return {"enabled": os.path.exists(log_path()), "key": None, "principal": None, "broken": True}
    if not isinstance(s, dict):
        s = {}
    enabled = bool(s.get("enabled"))
    last = None if enabled else _last_log_entry()
    if last is not None and last.get("enabled"):
        enabled = True  # the config says off but no signed entry turned it off: still on
    return {"enabled": enabled, "key": s.get("key"), "principal": s.get("principal")}


def enabled() -> bool:
    return settings()["enabled"]


def _ssh_keygen() -> str:
    import shutil

    exe = shutil.which("ssh-keygen")
    if not exe:
        raise SigningError("ssh-keygen is not installed; signed approvals need OpenSSH's client",
                           "install openssh-client (Debian/Ubuntu) or OpenSSH, then try again")
    return exe


def keygen(args: list[str], data: bytes | None = None):
    """``ssh-keygen ARGS`` (a subprocess.CompletedProcess). Raises SigningError."""
    import subprocess

    try:
        return subprocess.run([_ssh_keygen(), *args], input=data, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SigningError(f"ssh-keygen could not run: {exc}", "check the OpenSSH installation") from None


# ------------------------------------------------------------------ sign / verify
def forget_verified() -> None:
    """Drop what ``verify`` remembered (the allowed signers changed)."""
    _CACHE.clear()


def message(gate: dict, standing: bool) -> bytes:
    """The exact text an approval signature covers (question by digest)."""
    import hashlib

    q = hashlib.sha256(str(gate.get("question") or "").encode("utf-8")).hexdigest()
    return (f"loopx-gate-approval v1\ngate={gate['id']}\ngoal={gate.get('goal')}\nkind={gate.get('kind')}\n"
            f"question_sha256={q}\ndecision=approved\nstanding={'true' if standing else 'false'}\n").encode()


def verify(data: bytes, sig: str, principal: str, signers_text: str | None = None) -> str | None:
    """The signer's key fingerprint when ``sig`` is a good loopx-gate signature of ``data`` by
    ``principal`` under the allowed signers (the file, or ``signers_text``), else None."""
    import hashlib
    import tempfile

    key = (hashlib.sha256(data).hexdigest(), sig, principal, signers_text)
    if key in _CACHE:
        return _CACHE[key]
    fp = None
    with tempfile.TemporaryDirectory(prefix="loopx-sig-") as d:
        sigf = os.path.join(d, "sig")
        with open(sigf, "w", encoding="ascii", errors="replace") as fh:
            fh.write(sig)
        signers = signers_path()
        if signers_text is not None:
            signers = os.path.join(d, "allowed_signers")
            with open(signers, "w", encoding="utf-8") as fh:
                fh.write(signers_text)
        if os.path.exists(signers) and principal:
            try:
                p = keygen(["-Y", "verify", "-f", signers, "-I", principal, "-n", NAMESPACE, "-s", sigf], data)
            except SigningError:
                p = None
            if p is not None and p.returncode == 0:
                out = p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")
                fp = next((w for w in out.split() if w.startswith("SHA256:")), "SHA256:?")
    _CACHE[key] = fp
    return fp


def approval_counts(gate: dict) -> bool:
    """True when ``gate``'s approval counts: signing off, or its signature verifies."""
    if not enabled():
        return True
    return _signature_counts(gate)


def gate_verifier():
    """``approval_counts`` for many gates at one moment (a turn packet asks for every approved gate
    of each protected action): the signing setting (the user's config and the signing log) is read
    once, here, not once per gate. Returns a function ``gate -> bool``."""
    return _signature_counts if enabled() else _counts_unsigned


def _counts_unsigned(gate: dict) -> bool:
    return True


def _signature_counts(gate: dict) -> bool:
    sig = gate.get("signature") or {}
    if not isinstance(sig, dict) or not sig.get("sig"):
        return False
    return verify(message(gate, bool(gate.get("standing"))), str(sig["sig"]), str(sig.get("principal") or "")) \
        is not None


# ------------------------------------------------------------------ the signing log
def read_text(path: str, errors: str = "strict") -> str | None:
    """The UTF-8 text of ``path``, None when it cannot be read; ``errors`` as for ``open``. Only a
    regular file, opened without waiting (``fs.open_file``): a turn packet with a protected action
    reads the signing log, and a FIFO put there would hold ``next`` waiting for a writer."""
    try:
        with open_file(path, "r", encoding="utf-8", errors=errors) as fh:
            return fh.read()
    except OSError:
        return None


def log_entries() -> list[dict]:
    # bytes that are not UTF-8 become U+FFFD: the line reads as a broken entry, as other damage does
    # (every turn packet with a protected action asks; an internal error there stopped `next`)
    text = read_text(log_path(), errors="replace") or ""
    if not text:
        return []  # signing never configured: no json import (every packet asks)
    import json

    out = []
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            e = {"broken": line[:80]}
        out.append(e if isinstance(e, dict) else {"broken": str(e)[:80]})
    return out


def _last_log_entry() -> dict | None:
    log = log_entries()
    return log[-1] if log else None


def unverified_approvals(state: dict) -> list[str]:
    """Ids of approved gates whose signature does not verify (or that have none while signing
    is on) — ``doctor`` reports them."""
    if not enabled():
        return []
    return [g["id"] for g in state["gates"].values() if g["status"] == "approved" and not approval_counts(g)]
