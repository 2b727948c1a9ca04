"""Secret redaction applied to every string before anything is written to ``.loopx/``.

Each rule replaces a match with ``[REDACTED:<rule>]``. Rules cover private key blocks, cloud and
SaaS token formats with documented prefixes, JWTs, Authorization/Cookie headers, passwords in
URLs, and high-entropy values assigned to secret-sounding names. Git SHAs and UUIDs are left
alone (they are identifiers, not secrets).
"""

from __future__ import annotations

import math
import re
from collections import Counter

_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("private-key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        re.S)),
    ("anthropic-key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    ("openai-key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}")),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b")),
    ("aws-secret-key", re.compile(r"(?i)(aws_?secret_?access_?key\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{40}")),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("gitlab-token", re.compile(r"\bgl(?:pat|dt|ptt|rt)-[A-Za-z0-9_-]{20,}")),
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("slack-webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+")),
    ("npm-token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b")),
    ("pypi-token", re.compile(r"\bpypi-[A-Za-z0-9_-]{50,}")),
    ("huggingface-token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("stripe-key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("auth-header", re.compile(r"(?im)^(\s*(?:proxy-)?authorization\s*:\s*)[^\r\n]+")),
    ("auth-header", re.compile(r"(?i)(\bauthorization\s*:\s*(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]+")),
    ("cookie-header", re.compile(r"(?im)^(\s*(?:set-)?cookie\s*:\s*)[^\r\n]+")),
    # mid-line, as in `curl -H 'Cookie: sid=...'`: a name=value pair up to the closing quote or line end
    ("cookie-header", re.compile(r"(?i)(\b(?:set-)?cookie\s*:\s*)[^\s'\"=]+=[^\r\n'\"]+")),
    ("url-password", re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/\s@]+:)([^@\s/]+)(@)", re.I)),
]

_ASSIGN = re.compile(
    r"(?i)\b([A-Za-z0-9_.-]*?(?:token|secret|passw(?:or)?d|pwd|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"client[_-]?secret|auth[_-]?key|key))(\"?\s*[:=]\s*[\"']?)([^\s\"',;&]{4,})")
_HEX_ID = re.compile(r"[0-9a-fA-F]{7,64}\Z")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
_ALWAYS = ("passw", "pwd", "secret")


def _entropy(s: str) -> float:
    counts = Counter(s)
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _assign_sub(m: re.Match[str]) -> str:
    name, sep, value = m.group(1), m.group(2), m.group(3)
    if value.startswith("[REDACTED"):
        return m.group(0)
    lname = name.lower()
    if _HEX_ID.match(value) or _UUID.match(value):
        return m.group(0)
    always = any(w in lname for w in _ALWAYS)
    if always or (len(value) >= 12 and _entropy(value) >= 3.0):
        return f"{name}{sep}[REDACTED:assigned-secret]"
    return m.group(0)


def redact_text(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<rule>]``."""
    if not text or len(text) < 8:
        return text
    out = text
    for rule, pattern in _RULES:
        if pattern.groups:
            if rule == "url-password":
                out = pattern.sub(lambda m, r=rule: f"{m.group(1)}[REDACTED:{r}]{m.group(3)}", out)
            else:
                out = pattern.sub(lambda m, r=rule: f"{m.group(1)}[REDACTED:{r}]", out)
        else:
            out = pattern.sub(f"[REDACTED:{rule}]", out)
    return _ASSIGN.sub(_assign_sub, out)


def redact(value):
    """Redact every string inside a JSON-like value (dicts, lists, strings); keys are kept."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value
