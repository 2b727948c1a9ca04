"""Publishing redaction (``loopx trace export --redact-more``): what is private but not secret.

``redact.py`` removes secrets before anything is written. A trace someone publishes also shows
who and where: home paths and user names, host names, e-mail addresses, IP addresses, remote URLs
with credentials or private hosts. ``Redactor`` replaces each with a stable placeholder: the same
value gets the same placeholder everywhere in one trace (``/home/alice`` -> ``/home/[user-1]``,
``human:alice`` -> ``human:[user-1]``, ``build7.corp.internal`` -> ``[host-1]``), so the trace stays
readable. Rules (``RULES``, in the order they run):

- ``url``: a URL with user info (``https://bob:x@git.example.com/r.git``) or a private host (a
  private or link-local IP, a single-label name, a private domain such as ``.internal``/``.corp``/
  ``.lan``/``.local``), and scp-like remotes to a private host (``git@git.corp.internal:t/r.git``),
  as ``[url-N]``;
- ``email``: ``name@domain.tld`` as ``[email-N]`` (the ssh remote user ``git@`` is kept);
- ``home-path``: ``/home/NAME``, ``/var/home/NAME``, ``/Users/NAME``, ``C:\\Users\\NAME`` keep the
  prefix, the name becomes ``[user-N]``;
- ``user``: ``human:NAME`` actors and every known user name as a whole word (the exporting
  account, names found in home paths and human actors), except generic account names (``root``,
  ``runner``, ``ubuntu``...) that identify nobody;
- ``host``: the exporting machine's host name (and its short form), values under ``host``/
  ``hostname``/``machine`` keys of process and claim records, and names in private domains, as
  ``[host-N]``;
- ``ip``: IPv4 and IPv6 addresses as ``[ip-N]``, except loopback and unspecified (``127.0.0.1``,
  ``0.0.0.0``, ``::1``).

Ordinary text stays readable: public URLs without credentials, relative paths, version numbers,
git SHAs, UUIDs, times of day, ``v1.2.3.4``. Node ids (``n-`` + 16 hex) are random, not machine
names, and are kept (the chain is keyed by them).
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import re
import socket

from loopx import config

RULES = ("url", "email", "home-path", "user", "host", "ip")

GENERIC_USERS = frozenset({"root", "runner", "ubuntu", "debian", "admin", "user", "users", "dev", "test", "ci",
                           "build", "pi", "vagrant", "ec2-user", "node", "app", "git", "www-data", "nobody",
                           "docker", "home", "shared", "public", "guest", "default", "tester", "agent", "human"})
PRIVATE_SUFFIXES = ("local", "lan", "internal", "intranet", "corp", "localdomain", "private", "home.arpa", "home")
HOST_KEYS = frozenset({"host", "hostname", "machine"})
_PLACEHOLDER = r"\[(?:user|host|email|ip|url)-\d+\]|\[REDACTED:[a-z-]+\]"

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://(?:" + _PLACEHOLDER + r"|\[[0-9a-fA-F:.]+\]|[^\s'\"<>()\[\]`])+")
_SCP = re.compile(r"(?<![\w.@/-])([A-Za-z0-9._-]+)@([A-Za-z0-9.-]+):(?!//)([\w.~-]*/[\w.~/-]*|[\w.~-]+\.git\b)")
_EMAIL = re.compile(r"(?<![\w.%+-])([A-Za-z0-9._%+-]+)@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})(?![\w-])")
_HOME = re.compile(r"(?<![\w.-])((?:/var)?/home/|/Users/|[A-Za-z]:\\\\?Users\\\\?)([A-Za-z0-9._-]+)")
_ACTOR = re.compile(r"\bhuman:([A-Za-z0-9._@-]+)")
_PRIVATE_HOST = re.compile(r"(?<![\w.-])((?:[A-Za-z0-9-]+\.)+(?:" + "|".join(re.escape(s) for s in PRIVATE_SUFFIXES)
                           + r"))(?![\w-]|\.[A-Za-z0-9])", re.I)
_IPV4 = re.compile(r"(?<![\w.])((?:\d{1,3}\.){3}\d{1,3})(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])((?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|"
                   r"(?:[0-9a-fA-F]{1,4}:){1,6}(?::[0-9a-fA-F]{1,4}){1,6}|"
                   r"(?:[0-9a-fA-F]{1,4}:){1,7}:|::(?:[0-9a-fA-F]{1,4}:){0,5}[0-9a-fA-F]{1,4})(?![\w:])")
_KEEP_IPS = frozenset({"127.0.0.1", "0.0.0.0", "::1", "::", "255.255.255.255"})


def _ipv4_ok(text: str) -> bool:
    return all(p.isdigit() and int(p) <= 255 and (p == "0" or not p.startswith("0")) for p in text.split("."))


def _ipv6_ok(text: str) -> bool:
    groups = [g for g in text.split(":") if g]
    # "::" or all eight groups, and a digit somewhere: 12:30:45, C++'s a::b and abc::def stay
    return (text.count("::") <= 1 and len(groups) >= 2 and ("::" in text or len(groups) == 8)
            and any(c.isdigit() for c in text))


def private_host(host: str) -> bool:
    """True for a host name or address that only means something inside someone's network: an IP
    in a private, link-local or CGNAT range, a single-label name (``buildbox``), or a name in a
    private domain (``.internal``, ``.corp``, ``.lan``, ``.local``...). ``localhost`` and loopback
    addresses are not private information."""
    h = host.strip("[]").lower().rstrip(".")
    if not h or h == "localhost":
        return False
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        ip = None
    if ip is not None:
        return not ip.is_loopback and not ip.is_unspecified and (ip.is_private or ip.is_link_local
                                                                  or ip in ipaddress.ip_network("100.64.0.0/10"))
    if h.startswith("[") or "." not in h:
        return not h.startswith("[")  # a single-label name only resolves inside a network
    return any(h == s or h.endswith("." + s) for s in PRIVATE_SUFFIXES)


def local_names() -> tuple[set[str], set[str]]:
    """(user names, host names) of the machine that exports: the account, its home folder's name,
    the host name and its short form, ``$LOOPX_HOST`` (sync's machine name)."""
    users, hosts = set(), set()
    try:
        users.add(getpass.getuser())
    except (KeyError, OSError, ImportError):
        pass
    users.add(os.path.basename(os.path.expanduser("~").rstrip("/\\")))
    try:
        name = socket.gethostname()
        hosts.update({name, name.split(".")[0]})
    except OSError:
        pass
    extra = config.env("LOOPX_HOST")
    if extra:
        hosts.add(extra)
    return ({u for u in users if u and u.lower() not in GENERIC_USERS and len(u) >= 2},
            {h for h in hosts if h and h.lower() not in ("localhost", "") and len(h) >= 2})


class Redactor:
    """Replaces private values with placeholders, the same value with the same placeholder.

    ``users``/``hosts``: names known to be private (``local_names()``); ``learn(value)`` adds the
    names a JSON-like value shows (human actors, home paths, ``host`` keys of process records)
    before anything is redacted, so a name is replaced even where it appears before its first
    telling use. ``counts`` holds how many replacements each rule made."""

    def __init__(self, users=(), hosts=()) -> None:
        self.users = {u for u in users if u and u.lower() not in GENERIC_USERS}
        self.hosts = {h for h in hosts if h}
        self.maps: dict[str, dict[str, str]] = {}
        self.counts = dict.fromkeys(RULES, 0)
        self._words: re.Pattern[str] | None = None

    # ------------------------------------------------------------------ learning names
    def learn(self, value, key: str | None = None, parent: dict | None = None) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                self.learn(v, k, value)
        elif isinstance(value, list):
            for v in value:
                self.learn(v, key, parent)
        elif isinstance(value, str):
            for m in _ACTOR.finditer(value):
                self._add_user(m.group(1))
            for m in _HOME.finditer(value):
                self._add_user(m.group(2))
            if (key in HOST_KEYS and parent is not None and self._machine_record(parent)
                    and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]{1,252}", value) and value.lower() != "localhost"):
                self.hosts.add(value)
                self._words = None

    @staticmethod
    def _machine_record(d: dict) -> bool:
        """A dict that names a machine (a process record, a claim, a sync entry), not an agent host
        (``"host": "claude"`` in a run record is the tool, not the machine)."""
        return bool({"pid", "boot_id", "node", "until", "pgid"} & set(d)) or "hostname" in d or "machine" in d

    def _add_user(self, name: str) -> None:
        if (name and len(name) >= 2 and name.lower() not in GENERIC_USERS and not name.startswith("[")
                and name not in self.users):
            self.users.add(name)
            self._words = None

    # ------------------------------------------------------------------ placeholders
    def _ph(self, kind: str, value: str, rule: str) -> str:
        table = self.maps.setdefault(kind, {})
        if value not in table:
            table[value] = f"[{kind}-{len(table) + 1}]"
        self.counts[rule] += 1
        return table[value]

    def _names_re(self) -> re.Pattern[str]:
        if self._words is None:
            names = sorted(self.users | self.hosts, key=len, reverse=True)
            self._words = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w-]|\.[A-Za-z0-9])",
                                     re.I) if names else re.compile(r"(?!x)x")
        return self._words

    # ------------------------------------------------------------------ redaction
    def text(self, s: str) -> str:
        """``s`` with every private value replaced."""
        if not s or not isinstance(s, str):
            return s
        s = _URL.sub(self._url, s)
        s = _SCP.sub(self._scp, s)
        s = _EMAIL.sub(self._email, s)
        s = _HOME.sub(lambda m: m.group(1) + self._ph("user", m.group(2), "home-path")
                      if m.group(2).lower() not in GENERIC_USERS else m.group(0), s)
        s = _ACTOR.sub(lambda m: "human:" + self._ph("user", m.group(1), "user")
                       if m.group(1).lower() not in GENERIC_USERS and not m.group(1).startswith("[") else m.group(0), s)
        s = self._names_re().sub(self._name, s)
        s = _PRIVATE_HOST.sub(lambda m: self._ph("host", m.group(1).lower(), "host"), s)
        s = _IPV4.sub(lambda m: self._ph("ip", m.group(1), "ip")
                      if _ipv4_ok(m.group(1)) and m.group(1) not in _KEEP_IPS else m.group(0), s)
        return _IPV6.sub(lambda m: self._ph("ip", m.group(1).lower(), "ip")
                         if _ipv6_ok(m.group(1)) and m.group(1) not in _KEEP_IPS else m.group(0), s)

    def _name(self, m: re.Match[str]) -> str:
        word = m.group(1)
        for h in self.hosts:
            if h.lower() == word.lower():
                return self._ph("host", h.lower(), "host")
        for u in self.users:
            if u.lower() == word.lower():
                return self._ph("user", u, "user")
        return word

    def _url(self, m: re.Match[str]) -> str:
        url = m.group(0)
        rest = url.split("://", 1)[1]
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        host = authority.rsplit("@", 1)[-1]
        if host.startswith("["):  # http://[fe80::1]:8080/
            host = host[1:].split("]", 1)[0]
        elif host.count(":") == 1:
            host = host.rsplit(":", 1)[0]
        if "@" in authority or private_host(host) or host in self.hosts:
            return self._ph("url", url, "url")
        return url

    def _scp(self, m: re.Match[str]) -> str:
        if private_host(m.group(2)) or m.group(2) in self.hosts:
            return self._ph("url", m.group(0), "url")
        return m.group(0)

    def _email(self, m: re.Match[str]) -> str:
        if m.group(1) == "git":
            return m.group(0)  # git@github.com: an ssh remote's user, the same for everyone
        return self._ph("email", m.group(0).lower(), "email")

    def value(self, v, skip=()):
        """Redact every string in a JSON-like value; dict keys and the top-level keys in ``skip``
        are kept as they are."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            return {k: (x if k in skip else self.value(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v

    def summary(self) -> dict:
        """``{"rules": RULES, "replaced": {rule: n}, "placeholders": {kind: n}}`` (never the values)."""
        return {"rules": list(RULES), "replaced": dict(self.counts),
                "placeholders": {k: len(t) for k, t in sorted(self.maps.items())}}
