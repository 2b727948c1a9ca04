"""Secret redaction applied to every string before anything is written to ``.loopx/``.

Each rule replaces a match with ``[REDACTED:<rule>]``. Rules cover private key blocks, cloud and
SaaS token formats with documented prefixes, JWTs, Authorization/Cookie headers, passwords in
URLs (``redis://:X@host`` too), Sentry DSN keys, PuTTY key bodies, passwords given as flags
(``--password X``, ``mysql -pX``, ``docker login -p X``, ``sshpass -p X``, ``curl -u user:X``),
``aws configure set aws_secret_access_key X``, and values assigned to secret-sounding names: any
value (digits, hex, a UUID, punctuation, a quoted multi-word phrase) under a password/token/
secret/api-key name, a high-entropy one under a neutral ``*key`` name. Git SHAs, UUIDs and hex
not assigned to a secret-like name are left alone (they are identifiers, not secrets).
"""

from __future__ import annotations

# (rule, pattern source); compiled on the first text that may hold a secret (see _may_hold_secret)
_RULES: list[tuple[str, str]] = [
    ("private-key", (
        r"(?s)-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)")),
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("aws-access-key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    ("aws-secret-key", r"(?i)(aws_?secret_?access_?key\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{40}"),
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    ("gitlab-token", r"\bgl(?:pat|dt|ptt|rt)-[A-Za-z0-9_-]{20,}"),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("slack-webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi-token", r"\bpypi-[A-Za-z0-9_-]{50,}"),
    ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("stripe-key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("auth-header", r"(?im)^(\s*(?:proxy-)?authorization\s*:\s*)[^\r\n]+"),
    ("auth-header", r"(?i)(\bauthorization\s*:\s*(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]+"),
    ("cookie-header", r"(?im)^(\s*(?:set-)?cookie\s*:\s*)[^\r\n]+"),
    # mid-line, as in `curl -H 'Cookie: sid=...'`: a name=value pair up to the closing quote or line end
    ("cookie-header", r"(?i)(\b(?:set-)?cookie\s*:\s*)[^\s'\"=]+=[^\r\n'\"]+"),
    ("url-password", r"(?i)(\b[a-z][a-z0-9+.-]*://[^:/\s@\[\]]*:)(?!\[REDACTED)([^@\s/]+)(@)"),
    ("sentry-dsn", r"(?i)(\bhttps?://)[0-9a-f]{32}(?::[0-9a-f]{32})?(@[^\s/]*sentry)"),
    ("putty-key", (
        r"(PuTTY-User-Key-File-\d+:(?:[^\n]*\n){1,40}?Private-Lines:[ \t]*\d+\r?\n)(?:[A-Za-z0-9+/=]+(?:\r?\n|\Z))+"
        r"(?:Private-(?:MAC|Hash):[ \t]*[0-9a-fA-F]+)?")),
    ("aws-configure", (
        r"(?i)(\baws\s+configure\s+set\s+(?:[\w.-]+\.)?(?:aws_secret_access_key|aws_session_token)\s+['\"]?)[^\s'\"]+")),
    # passwords given as flags: --password X, mysql -pX, docker/podman/helm login -p X, sshpass -p X
    ("password-flag", r"(?i)((?<![\w-])--(?:password|passwd|pass)(?:=|\s+)['\"]?)(?!-)[^\s'\"]+"),
    ("password-flag", r"(\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n|;&]*?\s-p['\"]?)[^\s'\"]+"),
    ("password-flag", (r"(\b(?:(?:docker|podman|buildah|skopeo|helm|oras|nerdctl)\b[^\n|;&]*?\slogin\b[^\n|;&]*?"
                       r"|sshpass\b[^\n|;&]*?)\s-p\s*['\"]?)(?!-)[^\s'\"]+")),
    ("basic-auth-flag", (r"(\b(?:curl|wget|http)\b[^\n|;&]*?\s(?:-u|--user|--http-user)[\s=]*['\"]?[^:\s'\"]+:)"
                         r"[^\s'\"]+")),
]

_NAMES = (r"token|secret|passw(?:or)?d|(?:(?<=[_.\-])|(?<![A-Za-z0-9]))pass|pwd|api[_-]?key|access[_-]?key|"
          r"private[_-]?key|client[_-]?secret|auth[_-]?key|key_base|dsn|key")
# a quoted value is taken whole (multi-word passwords); an unquoted one up to a space, quote, `;`, `,` or `&&`
_ASSIGN_QUOTED = r"(?i)\b([A-Za-z0-9_.-]*?(?:" + _NAMES + r"))(\"?\s*[:=]\s*)([\"'])([^\"'\r\n]{1,500})\3"
_ASSIGN = r"(?i)\b([A-Za-z0-9_.-]*?(?:" + _NAMES + r"))(\"?\s*[:=]\s*[\"']?)((?:[^\s\"',;&]|&(?!&)){4,})"
_HEX_ID = r"[0-9a-fA-F]{7,64}\Z"
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"
_ALWAYS = ("passw", "pwd", "secret", "pass", "token", "api_key", "apikey", "api-key", "access_key", "private_key",
           "auth_key", "key_base", "dsn")


# Every rule above needs one of these (lower-cased) in the text: a token format's literal prefix,
# a header or command word, or a secret-sounding name. A text with none of them cannot match and
# is returned without importing `re` or compiling a rule (most titles, notes and ids).
# tests/test_redact.py checks every sample and the shortest matches against this, and the full
# pass on random texts; a new rule needs its trigger here (and its sample there).
_TRIGGERS = (
    # token formats
    "sk-", "akia", "asia", "abia", "acca", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gldt-",
    "glptt-", "glrt-", "xox", "npm_", "pypi-", "hf_", "aiza", "_live_", "_test_", "eyj", "-----begin", "putty",
    # headers, command lines
    "authorization", "cookie", "aws",
)
# Rules that need two things in the text: the first and one of the others (a URL with a password or
# a Sentry key has an "@", a Slack webhook its host; a password flag is --pass or -p after one of
# the commands that take it; a user:password flag is -u, --user or --http-user after curl, wget or
# httpie), so a plain link or `git push -u origin` takes no full pass.
_TOGETHER = (
    ("://", ("@", "hooks.slack.com")),
    ("-p", ("--pass", "mysql", "mariadb", "login", "sshpass")),
    ("-u", ("curl", "wget", "http")),
)
# The assignment rules (_ASSIGN, _ASSIGN_QUOTED) need a name that ends in one of these right before
# an optional quote, optional whitespace and ``=`` or ``:`` (``DB_PASS=x``, ``"token": "x"``); a
# name anywhere else ("12 passed", "the key rotation") cannot start a match, and such text (test
# evidence, titles) takes no full pass.
_NAME_ENDS = ("secret", "token", "pass", "passwd", "password", "pwd", "key", "key_base", "dsn")
_MAX_CHECKED = 4096  # longer texts (command output) go straight to the full pass
_compiled: dict = {}


def _may_hold_secret(text: str) -> bool:
    # not ASCII: case-insensitive rules also match look-alike letters (the Kelvin sign for k,
    # the long s) that a lower-cased substring test would miss, so such text takes the full pass
    if len(text) > _MAX_CHECKED or not text.isascii():
        return True
    low = text.lower()
    return (any(t in low for t in _TRIGGERS) or any(a in low and any(b in low for b in bs) for a, bs in _TOGETHER)
            or any(_assigned(low, name) for name in _NAME_ENDS))


def _assigned(low: str, name: str) -> bool:
    """Whether ``name`` occurs in ``low`` followed by an optional ``"``, whitespace (what ``\\s``
    matches: ``str.isspace``) and ``=`` or ``:``."""
    i = low.find(name)
    while i >= 0:
        j = i + len(name)
        if j < len(low) and low[j] == '"':
            j += 1
        while j < len(low) and low[j].isspace():
            j += 1
        if j < len(low) and low[j] in ":=":
            return True
        i = low.find(name, i + 1)
    return False


def _rules():
    """The compiled rules (rule list, quoted and plain assignment, hex id, UUID), built once."""
    if not _compiled:
        import re

        _compiled["rules"] = [(name, re.compile(src)) for name, src in _RULES]
        for name in ("_ASSIGN_QUOTED", "_ASSIGN", "_HEX_ID", "_UUID"):
            _compiled[name] = re.compile(globals()[name])
    return _compiled


def _entropy(s: str) -> float:
    import math
    from collections import Counter

    counts = Counter(s)
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _secret_name(name: str) -> bool:
    """A name whose value is a secret whatever it looks like (``DB_PASSWORD``, ``API_KEY``,
    ``TWILIO_AUTH_TOKEN``); plain ``key``/``commit_key``/``cache_key`` are not."""
    lname = name.lower().replace("-", "_")
    return any(w in lname for w in _ALWAYS)


def _judge(name: str, value: str) -> bool:
    if value.startswith("[REDACTED"):
        return False
    if _secret_name(name):
        return True  # digits, hex, a UUID or punctuation after a password name are still the password
    c = _rules()
    if c["_HEX_ID"].match(value) or c["_UUID"].match(value):
        return False  # an identifier under a neutral name (key=, commit_key=)
    return len(value) >= 12 and _entropy(value) >= 3.0


def _assign_sub(m) -> str:
    name, sep, value = m.group(1), m.group(2), m.group(3)
    return f"{name}{sep}[REDACTED:assigned-secret]" if _judge(name, value) else m.group(0)


def _quoted_sub(m) -> str:
    name, sep, quote, value = m.group(1), m.group(2), m.group(3), m.group(4)
    if " " not in value.strip() or not _judge(name, value):
        return m.group(0)  # a one-word quoted value is judged by _ASSIGN
    return f"{name}{sep}{quote}[REDACTED:assigned-secret]{quote}"


def redact_text(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<rule>]``."""
    if not text or len(text) < 8 or not _may_hold_secret(text):
        return text
    return _full_pass(text)


def _full_pass(text: str) -> str:
    """Every rule over ``text`` (no pre-check)."""
    c = _rules()
    out = text
    for rule, pattern in c["rules"]:
        if pattern.groups:
            if rule in ("url-password", "sentry-dsn"):
                out = pattern.sub(lambda m, r=rule: f"{m.group(1)}[REDACTED:{r}]{m.group(m.re.groups)}", out)
            else:
                out = pattern.sub(lambda m, r=rule: f"{m.group(1)}[REDACTED:{r}]", out)
        else:
            out = pattern.sub(f"[REDACTED:{rule}]", out)
    out = c["_ASSIGN_QUOTED"].sub(_quoted_sub, out)
    return c["_ASSIGN"].sub(_assign_sub, out)


def redact(value):
    """Redact every string inside a JSON-like value (dicts, lists, strings); keys are kept."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value
