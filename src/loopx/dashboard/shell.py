"""The dashboard's fixed shell and signed launch links (used by ``server`` and ``service``).

- ``STATIC``: the only URL paths served as files, mapped to a file under ``static/`` (package data,
  read with ``importlib.resources``) and its content type. ``static_bytes(name)`` refuses any other
  name. ``__LOOPX_VERSION__`` in ``sw.js`` and ``index.html`` becomes the running version, so a new
  version gets a new service-worker cache.
- ``CSP`` and ``SECURITY_HEADERS``: sent with every response.
- ``launch_token(secret)``: a single-use sign-in token ``<nonce>.<expiry>.<hmac>``; the server
  (``DashboardServer.redeem``) accepts each once, before its expiry, when signed with its secret.
- ``build_id()``: a hash of the version, the dashboard code and the shell; a running server of
  another build is replaced by ``service.ensure``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from importlib import resources

from loopx import __version__

LAUNCH_TTL = 900  # seconds a launch link stays valid

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "manifest-src 'self'; worker-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Permissions-Policy", "camera=(), microphone=(), geolocation=()"),
)

# URL path -> (file under static/, content type). Nothing else is ever served.
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
    "/manifest.webmanifest": ("manifest.webmanifest", "application/manifest+json"),
    "/sw.js": ("sw.js", "text/javascript; charset=utf-8"),
    "/icon.svg": ("icon.svg", "image/svg+xml"),
    "/icon-192.png": ("icon-192.png", "image/png"),
    "/icon-512.png": ("icon-512.png", "image/png"),
}
VERSIONED = ("sw.js", "index.html")  # "__LOOPX_VERSION__" is replaced when served


def launch_token(secret: str, *, now: float | None = None, ttl: float = LAUNCH_TTL) -> str:
    """A fresh single-use launch token ``<nonce>.<expiry>.<signature>`` for the server whose
    launch secret is ``secret`` (the ``token`` field of the state file)."""
    nonce = f"{secrets.token_hex(12)}.{int((time.time() if now is None else now) + ttl)}"
    return f"{nonce}.{_sign(secret, nonce)}"


def _sign(secret: str, nonce: str) -> str:
    return hmac.new(secret.encode(), nonce.encode(), hashlib.sha256).hexdigest()[:40]


def build_id() -> str:
    """A short hash of this loopx version and the dashboard's code and static files: a running
    server with another build (an upgrade, or an edited checkout) is replaced by the service."""
    h = hashlib.sha256(__version__.encode())
    root = resources.files("loopx.dashboard")
    for name in ("__init__.py", "api.py", "server.py", "service.py", "shell.py", "traceapi.py"):
        h.update(root.joinpath(name).read_bytes())
    for name in sorted({v[0] for v in STATIC.values()}):
        h.update(static_bytes(name))
    return h.hexdigest()[:12]


def static_bytes(name: str) -> bytes:
    """One allow-listed static file from the package (``name`` must be a value of STATIC)."""
    if name not in {v[0] for v in STATIC.values()}:
        raise KeyError(name)
    data = resources.files("loopx.dashboard").joinpath("static", name).read_bytes()
    if name in VERSIONED:
        data = data.replace(b"__LOOPX_VERSION__", __version__.encode())
    return data
