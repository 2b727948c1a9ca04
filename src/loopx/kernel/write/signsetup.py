"""Setting signed approvals up and checking them (``signing``: whether an approval counts).

- ``sign_approval(gate, standing)``: the CLI signs the decision text (``signing.message``) with the
  user's key (namespace ``loopx-gate``). With a FIDO key (``ed25519-sk``) or an ssh-agent key
  added with ``ssh-add -c``, this needs a human's touch or click.
- Every change of "signing on" or of the allowed signers is an entry of ``signing-log.jsonl``
  (next to ``config.toml``) signed by a key the *previous* entry allowed (the first by its own
  key): ``configure``. ``check()`` (used by ``doctor``) verifies that chain, that the allowed
  signers file is the one the last entry recorded, and lists the signer fingerprints, so a swapped
  file is reported.
- The last human-signed signer set is also kept in the data folder (``signing-root.json``: the
  hashes of the log's first and last entries and the entry count), which no sandbox can read or
  write. ``check()`` compares the log with it, so a log replaced by one entry self-signed by
  another key (with that key added to the allowed signers: a chain of its own that verifies) is
  reported as re-rooted, and an entry appended outside ``configure`` as not signed by a human.

Errors: ``signing.SigningError`` (a StateError, exit 3) when ``ssh-keygen`` is missing or refuses.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os

from loopx import config
from loopx.kernel import humans
from loopx.kernel.storage.actors import human_name
from loopx.kernel.storage.chain import sha256  # the built-in one: no OpenSSL
from loopx.kernel.storage.fs import atomic_write
from loopx.kernel.write.signing import (
    NAMESPACE,
    SigningError,
    config_dir,
    forget_verified,
    keygen,
    log_entries,
    log_path,
    message,
    read_text,
    settings,
    signers_path,
    verify,
)


def sign(data: bytes, key: str) -> str:
    """An armored SSH signature of ``data`` with ``key`` (namespace loopx-gate). Raises SigningError."""
    if not key or not os.path.exists(os.path.expanduser(key)):
        raise SigningError(f"the signing key {key!r} does not exist", "set an existing key in the signing settings",
                           details={"reason": "signing_key_missing"})
    p = keygen(["-Y", "sign", "-q", "-f", os.path.expanduser(key), "-n", NAMESPACE], data)
    sig = p.stdout.decode("ascii", "replace")
    if p.returncode != 0 or "BEGIN SSH SIGNATURE" not in sig:
        raise SigningError("ssh-keygen refused to sign: " + p.stderr.decode("utf-8", "replace").strip()[:300],
                           "check the key (and touch the security key if it asks)")
    return sig


def sign_approval(gate: dict, standing: bool) -> dict | None:
    """``{"principal", "sig", "fingerprint"}`` for the gate's approval when signing is on, else
    None. Raises SigningError when signing is on but cannot sign or the result does not verify."""
    s = settings()
    if not s["enabled"]:
        return None
    data = message(gate, standing)
    sig = sign(data, s["key"] or "")
    principal = s["principal"] or _default_principal()
    fp = verify(data, sig, principal)
    if fp is None:
        raise SigningError(f"the signature does not verify for {principal!r} against {signers_path()}",
                           "add your key to the allowed signers", details={"reason": "signer_unknown"})
    return {"principal": principal, "sig": sig, "fingerprint": fp}


def _default_principal() -> str:
    return human_name()


def root_path() -> str:
    return os.path.join(config.data_home(), "signing-root.json")


def _entry_hash(e: dict) -> str:
    return sha256(json.dumps(e, sort_keys=True).encode("utf-8")).hexdigest()


def _write_root(log: list[dict]) -> None:
    root = {"first": _entry_hash(log[0]), "last": _entry_hash(log[-1]), "entries": len(log)}
    os.makedirs(os.path.dirname(root_path()), exist_ok=True)
    atomic_write(root_path(), (json.dumps(root, sort_keys=True) + "\n").encode("utf-8"))


def _root_problems(log: list[dict]) -> list[str]:
    """What differs between the signing log and the last human-signed set in the data folder."""
    text = read_text(root_path())
    if text is None:
        return [f"no record of the last human-signed signer set in {root_path()} (made by "
                "`loopx gate signing` since this check exists)"] if log else []
    try:
        root = json.loads(text)
        first, last, n = str(root["first"]), str(root["last"]), int(root["entries"])
    except (ValueError, KeyError, TypeError):
        return [f"{root_path()} is unreadable: the last human-signed signer set is unknown"]
    if not log or "broken" in log[0] or _entry_hash(log[0]) != first:
        return ["the signing log was re-rooted: its first entry is not the one a human signed "
                f"(recorded in {root_path()})"]
    if len(log) < n or "broken" in log[n - 1] or _entry_hash(log[n - 1]) != last:
        return [f"the signing log lost or changed entry {n}, the last one a human signed"]
    if len(log) > n:
        return [f"signing log entries {n + 1}..{len(log)} were not made by a human through `loopx gate signing`"]
    return []


def _entry_text(e: dict) -> bytes:
    body = {k: e[k] for k in ("seq", "enabled", "allowed_signers", "principal", "prev") if k in e}
    return ("loopx-signing-config v1\n" + json.dumps(body, sort_keys=True)).encode()


def public_key(key: str) -> str:
    """The public key line for ``key`` (a private key file, or a ``.pub`` file)."""
    path = os.path.expanduser(key)
    if path.endswith(".pub"):
        text = read_text(path)
    else:
        text = read_text(path + ".pub")
        if text is None:
            p = keygen(["-y", "-f", path])
            text = p.stdout.decode("utf-8", "replace") if p.returncode == 0 else None
    if not text or not text.split():
        raise SigningError(f"cannot read the public key of {key}", "pass the key file ssh-keygen made")
    parts = text.split()
    return f"{parts[0]} {parts[1]}"


def configure(*, enable: bool, key: str | None, principal: str | None, human) -> dict:
    """Turn signing on (adding ``key``'s public key for ``principal`` to the allowed signers) or
    off, as a signed entry of the signing log. Needs ``human`` (HumanChannel). The entry is signed
    with ``key`` (or the configured key), which the previous entry must allow. Raises SigningError."""
    humans.check_channel(human, "signing.config")
    s = settings()
    key = key or s.get("key")
    principal = principal or s.get("principal") or _default_principal()
    if not key:
        raise SigningError("no signing key given", "name the key file, e.g. ~/.ssh/id_ed25519 (or the .pub of an "
                           "ssh-agent key)", details={"reason": "signing_key_required", "field": "key"})
    signers = read_text(signers_path()) or ""
    if enable:
        line = f'{principal} namespaces="{NAMESPACE}" {public_key(key)}\n'
        if line not in signers:
            signers += line
    log = log_entries()
    prev = log[-1] if log else None
    entry = {"seq": len(log) + 1, "enabled": enable, "allowed_signers": signers, "principal": principal,
             "prev": hashlib.sha256(_entry_text(prev)).hexdigest() if prev else None}
    data = _entry_text(entry)
    sig = sign(data, key)
    entry["sig"] = sig
    check_signers = prev["allowed_signers"] if prev else signers
    entry["fingerprint"] = verify(data, sig, principal, check_signers)
    if entry["fingerprint"] is None:
        raise SigningError("this key is not among the allowed signers, so it cannot change signing",
                           "sign with a key that is already allowed (or restore the allowed_signers file)")
    os.makedirs(config_dir(), exist_ok=True)

    atomic_write(signers_path(), signers.encode("utf-8"))
    with open(log_path(), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
    _write_root([*log, entry])
    config.set_user_value("signing.enabled", bool(enable))
    config.set_user_value("signing.key", os.path.expanduser(key))
    config.set_user_value("signing.principal", principal)
    forget_verified()
    return {"enabled": enable, "principal": principal, "fingerprint": entry["fingerprint"],
            "allowed_signers": signers_path(), "log_entries": entry["seq"]}


def check() -> dict:
    """``{"enabled", "signers": [{principal, fingerprint}], "problems": [str]}``: the signing log
    chain, the allowed signers file against the log's last entry, and the signers' fingerprints."""
    log = log_entries()
    s = settings()
    problems: list[str] = []
    prev = None
    for e in log:
        if "broken" in e:
            problems.append(f"signing log entry is not JSON: {e['broken']}")
            break
        expect = sha256(_entry_text(prev)).hexdigest() if prev else None
        if e.get("prev") != expect:
            problems.append(f"signing log entry {e.get('seq')} does not follow entry {prev.get('seq') if prev else 0}")
        signers = prev["allowed_signers"] if prev else e.get("allowed_signers", "")
        if verify(_entry_text(e), str(e.get("sig") or ""), str(e.get("principal") or ""), signers) is None:
            problems.append(f"signing log entry {e.get('seq')} is not signed by a key the entry before it allowed")
        prev = e
    problems += _root_problems(log)
    current = read_text(signers_path())
    if prev is not None and (current or "") != prev.get("allowed_signers"):
        problems.append(f"{signers_path()} differs from the signers the signing log last recorded "
                        "(it was edited or swapped outside `loopx gate signing`)")
    if prev is None and current:
        problems.append(f"{signers_path()} exists but no signed signing-log entry records it")
    if s.get("enabled") and not log:
        problems.append("signing is on in the config but the signing log is empty")
    signers = []
    for line in (current or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith("#"):
            signers.append({"principal": parts[0], "fingerprint": _fingerprint(parts[-2], parts[-1])})
    return {"enabled": s["enabled"], "signers": signers, "problems": problems, "entries": len(log)}


def _fingerprint(kind: str, b64: str) -> str:
    try:
        raw = base64.b64decode(b64)
    except ValueError:
        return "?"
    return "SHA256:" + base64.b64encode(sha256(raw).digest()).decode().rstrip("=")
