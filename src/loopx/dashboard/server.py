"""The dashboard's HTTP server: ``http.server.ThreadingHTTPServer`` with the rules of docs/architecture.md#the-dashboard.

Security rules, in the order a request meets them:

1. Bounded input: request line and each header line at most 8 KiB, all headers at most 16 KiB and
   64 lines, POST bodies at most 16 KiB (``Content-Length`` required, no chunked bodies), every
   socket operation times out after ``IO_TIMEOUT`` s and a connection is cut after ``CONN_SECONDS`` s.
2. Methods: GET, HEAD and POST only (405 otherwise).
3. ``Host`` must be exactly one of the allow-list (``127.0.0.1:PORT``, ``localhost:PORT``), which
   defeats DNS rebinding.
4. Paths: a fixed allow-list of static files (read with ``importlib.resources``), ``/launch`` and
   ``/api/...``; anything else is 404 without touching the file system.
5. ``/launch?token=T`` redeems a single-use launch token (``launch_token``: a nonce with an expiry,
   signed with HMAC-SHA256 by the server's per-start secret, checked in constant time, refused once
   used or after ``LAUNCH_TTL`` s), sets a ``SameSite=Strict`` ``HttpOnly`` session cookie and
   redirects to ``/`` so the token leaves the address bar. Every ``loopx dashboard`` makes a fresh
   token from the secret in the 0600 state file, so a link left in a browser history is worthless.
6. ``/api/*`` needs the session cookie; responses carry ``Cache-Control: no-store``.
7. POST additionally needs ``Origin`` exactly equal to ``http://`` + the request's ``Host``, the
   ``X-Loopx-Token`` header (a per-launch CSRF token the page fetches from ``/api/session``) and
   ``Content-Type: application/json``.

Trace mode (``loopx dashboard --trace FILE``, ``trace=`` a ``TraceApi``): the same rules, but
the API answers only ``/api/session``, ``/api/trace`` and ``/api/review`` from the archive (any
other ``/api/`` path is 404 ``trace_only``) and every POST is refused with 403 ``read_only_trace``;
PUT, DELETE and the rest are 405 as always. No store is opened and nothing is written.

Every response carries a strict CSP (no inline script, no eval), ``nosniff``, ``frame-ancestors
'none'`` and ``Referrer-Policy: no-referrer``; no response ever carries CORS headers. The access
log never contains query strings or secrets.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import secrets
import socket
import socketserver
import sys
import threading
import time
from hashlib import sha256
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from loopx import __version__
from loopx.dashboard import api as api_mod
from loopx.dashboard.shell import (  # noqa: F401 - re-exported for callers and tests
    CSP,
    LAUNCH_TTL,
    SECURITY_HEADERS,
    STATIC,
    _sign,
    build_id,
    launch_token,
    static_bytes,
)
from loopx.kernel.storage import clock
from loopx.kernel.storage.actors import human_name

MAX_LINE = 8192
MAX_HEADER_BYTES = 16384
MAX_HEADERS = 64
MAX_BODY = 16384
IO_TIMEOUT = 10.0
CONN_SECONDS = 30.0
MAX_CONNECTIONS = 128
MAX_REDEEMED = 10000
TOKEN_HEADER = "X-Loopx-Token"

_QUERY = re.compile(r"\?[^\s\"']*")



SCHEMA = 1  # the same envelope version as the CLI's JSON output


def _status_code(status: int) -> str:
    """A stable string code for an HTTP status (``404`` -> ``not_found``)."""
    try:
        return HTTPStatus(int(status)).name.lower()
    except ValueError:
        return "error"


def error_body(status: int, code: str, message: str, hint: str | None = None) -> dict:
    """The dashboard API's one error envelope: ``{"schema", "ok": false, "status": HTTP status,
    "error": {"code": stable string, "message", "hint"}}`` (string codes, as in the CLI)."""
    return {"schema": SCHEMA, "ok": False, "status": int(status),
            "error": {"code": str(code), "message": message, "hint": hint}}

class DashboardServer(ThreadingHTTPServer):
    """The server. ``token`` is the launch secret (signs launch tokens); ``instance`` identifies this process to the
    service (``/api/health``). ``log`` is a text stream for the access log (None: silent)."""

    daemon_threads = True
    allow_reuse_address = sys.platform != "win32"  # on Windows it would allow stealing a bound port
    request_queue_size = 64

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None,
                 extra_hosts=(), log=None, trace=None) -> None:
        self._stop = threading.Event()
        super().__init__((host, port), Handler)
        self.token = token or secrets.token_urlsafe(32)
        self.session = secrets.token_urlsafe(32)
        self.csrf = secrets.token_urlsafe(32)
        self.instance = secrets.token_hex(8)
        self._redeemed: dict[str, int] = {}
        self._etag_memos: dict[str, tuple] = {}  # path -> (the data last tagged, its ETag): Handler's cache
        self.build = build_id()
        self.started = time.time()
        self.log = log
        self.api = api_mod.Api()
        self.trace = trace  # a TraceApi: serve that archive read-only, no project
        self.port = self.server_address[1]
        names = {"127.0.0.1", "localhost", host, *extra_hosts}
        self.hosts = {f"{n.lower()}:{self.port}" for n in names}
        self.cookie_name = f"loopx_session_{self.port}"
        self._conns: dict[socket.socket, float] = {}
        self._conn_lock = threading.Lock()
        threading.Thread(target=self._reaper, name="loopx-dashboard-reaper", daemon=True).start()

    def server_bind(self):
        """Bind without HTTPServer's reverse DNS lookup (``getfqdn`` can stall for seconds)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    @property
    def base_url(self) -> str:
        host = str(self.server_address[0])  # an IPv4 or IPv6 address string (typeshed allows bytes)
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}"

    @property
    def launch_url(self) -> str:
        """A new single-use sign-in link (each access makes another)."""
        return f"{self.base_url}/launch?token={launch_token(self.token)}"

    def redeem(self, token: str) -> bool:
        """True once for a well-signed, unexpired launch token; False for anything else."""
        parts = token.split(".")
        if len(parts) != 3 or not parts[1].isdigit() or len(token) > 200:
            return False
        nonce = f"{parts[0]}.{parts[1]}"
        if not hmac.compare_digest(parts[2].encode(), _sign(self.token, nonce).encode()):
            return False
        now = time.time()
        if int(parts[1]) < now:
            return False
        with self._conn_lock:
            for k in [k for k, exp in self._redeemed.items() if exp < now]:
                del self._redeemed[k]
            if nonce in self._redeemed or len(self._redeemed) >= MAX_REDEEMED:
                return False
            self._redeemed[nonce] = int(parts[1])
        return True

    # connection accounting: a cap on live connections and a hard limit on their age
    def process_request(self, request, client_address):
        with self._conn_lock:
            if len(self._conns) >= MAX_CONNECTIONS:
                self.shutdown_request(request)
                return
            self._conns[request] = time.monotonic()
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._conn_lock:
            self._conns.pop(request, None)
        super().shutdown_request(request)

    def _reaper(self) -> None:
        while not self._stop.wait(1.0):
            cutoff = time.monotonic() - CONN_SECONDS
            with self._conn_lock:
                old = [s for s, t in self._conns.items() if t < cutoff]
            for s in old:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request, client_address):
        """Log one line (socketserver would print a traceback with request details)."""
        exc = sys.exc_info()[1]
        self.write_log(f"error: {type(exc).__name__} on a connection")

    def server_close(self):
        self._stop.set()
        super().server_close()

    def write_log(self, line: str) -> None:
        if self.log is None:
            return
        for secret in (self.token, self.session, self.csrf):
            line = line.replace(secret, "[redacted]")
        try:
            self.log.write(_QUERY.sub("?[query]", line) + "\n")
            self.log.flush()
        except (OSError, ValueError):
            pass


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "loopx-dashboard"
    sys_version = ""
    protocol_version = "HTTP/1.0"
    timeout = IO_TIMEOUT

    # ------------------------------------------------------------------ parsing and limits
    def handle_one_request(self):
        try:
            self.raw_requestline = self.rfile.readline(MAX_LINE + 1)
            if len(self.raw_requestline) > MAX_LINE:
                self.requestline, self.request_version, self.command = "", "HTTP/1.0", ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            handler = {"GET": self.do_GET, "HEAD": self.do_GET, "POST": self.do_POST}[self.command]
            try:
                handler()
            except ValueError:  # e.g. too many query fields
                self.send_error(HTTPStatus.BAD_REQUEST, "malformed request")
            except Exception as exc:  # one bad request never takes the server down or leaks a traceback
                if isinstance(exc, OSError):
                    raise
                self.server.write_log(f"error: {type(exc).__name__} while serving {urlsplit(self.path).path}")
                self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR)
            self.wfile.flush()
        except (TimeoutError, ConnectionError, OSError):
            self.close_connection = True

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        self.close_connection = True
        if self.request_version == "HTTP/0.9":
            self.send_error(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported")
            return False
        items = self.headers.items()
        if len(items) > MAX_HEADERS or sum(len(k) + len(v) + 4 for k, v in items) > MAX_HEADER_BYTES \
                or any(len(k) + len(v) + 2 > MAX_LINE for k, v in items):
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
            return False
        if self.command not in ("GET", "HEAD", "POST"):
            self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, extra=(("Allow", "GET, HEAD, POST"),))
            return False
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1 or hosts[0].strip().lower() not in self.server.hosts:
            self.send_error(HTTPStatus.MISDIRECTED_REQUEST, "unknown Host")
            return False
        target = self.path
        if not target.startswith("/") or target.startswith("//") or "\\" in target:
            self.send_error(HTTPStatus.BAD_REQUEST, "bad request target")
            return False
        return True

    # ------------------------------------------------------------------ responses
    def send_error(self, code, message=None, explain=None, extra=()):
        """A JSON error with the security headers (replaces http.server's HTML page)."""
        code = int(code)
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        body = error_body(code, _status_code(code), message or phrase, explain)
        self.close_connection = True
        self.request_version = "HTTP/1.0"  # always answer with a status line and headers, even to HTTP/0.9
        self._send(code, json.dumps(body).encode(), "application/json", extra=extra, no_store=True)

    def _send(self, code: int, body: bytes, ctype: str, *, extra=(), no_store: bool = False) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store" if no_store else "no-cache")
            for k, v in (*SECURITY_HEADERS, *extra):
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            if getattr(self, "command", "") != "HEAD":
                self.wfile.write(body)
        except OSError:
            self.close_connection = True

    def _json(self, code: int, data: dict, extra=()) -> None:
        body = json.dumps(data, ensure_ascii=True, default=str).encode()
        self._send(code, body, "application/json; charset=utf-8", extra=extra, no_store=True)

    def version_string(self) -> str:
        return self.server_version

    def log_request(self, code="-", size="-"):
        path = urlsplit(self.path).path if getattr(self, "path", None) else "-"
        if path == "/api/health" and str(code) == "200":
            return  # the service's liveness probes would drown the log
        self.server.write_log(f"{self.log_date_time_string()} {self.command or '-'} {path} {int(code) if str(code).isdigit() else code}")

    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        self.server.write_log(f"{self.log_date_time_string()} " + (format % args if args else format))

    def log_error(self, format, *args):  # noqa: A002
        self.server.write_log(f"{self.log_date_time_string()} error: " + (format % args if args else format)[:200])

    # ------------------------------------------------------------------ auth helpers
    def _cookie_ok(self) -> bool:
        raw = "; ".join(self.headers.get_all("Cookie") or [])
        if not raw:
            return False
        try:
            jar = SimpleCookie()
            jar.load(raw)
        except CookieError:
            return False
        morsel = jar.get(self.server.cookie_name)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self.server.session.encode())

    def _origin_ok(self) -> bool:
        origins = self.headers.get_all("Origin") or []
        host = (self.headers.get("Host") or "").strip().lower()
        return len(origins) == 1 and origins[0].strip().lower() == f"http://{host}"

    # ------------------------------------------------------------------ GET
    def do_GET(self):
        parts = urlsplit(self.path)
        path = parts.path
        if path in STATIC:
            name, ctype = STATIC[path]
            extra = (("Service-Worker-Allowed", "/"),) if name == "sw.js" else ()
            self._send(200, static_bytes(name), ctype, extra=extra)
        elif path == "/launch":
            self._launch(parts.query)
        elif path == "/api/health":
            self._json(200, {"app": "loopx-dashboard", "version": __version__, "build": self.server.build,
                             "instance": self.server.instance, "pid": _pid()})
        elif path.startswith("/api/"):
            if not self._cookie_ok():
                self._json(401, error_body(401, "no_session", "not signed in",
                                           "open the link printed by `loopx dashboard`"))
                return
            self._api_get(path, parse_qs(parts.query, max_num_fields=8))
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def _launch(self, query: str) -> None:
        tokens = parse_qs(query, max_num_fields=4).get("token") or [""]
        if self._cookie_ok():  # already signed in (a reopened tab): the token is not needed again
            self._send(303, b"", "text/plain", extra=(("Location", "/"),), no_store=True)
            return
        if len(tokens) != 1 or not self.server.redeem(tokens[0]):
            self.send_error(HTTPStatus.FORBIDDEN, "this launch link is used up, expired or not for this server",
                            "run `loopx dashboard` again for a fresh link")
            return
        cookie = f"{self.server.cookie_name}={self.server.session}; Path=/; HttpOnly; SameSite=Strict"
        self._send(303, b"", "text/plain", extra=(("Location", "/"), ("Set-Cookie", cookie)), no_store=True)

    def _api_get(self, path: str, query: dict) -> None:
        q = {k: v[0] for k, v in query.items() if len(v) == 1}
        srv = self.server
        if srv.trace is not None:
            self._trace_get(path)
            return
        try:
            now = clock.now_iso()
            if path == "/api/session":
                data = {"csrf": srv.csrf, "version": __version__, "human": human_name(), "header": TOKEN_HEADER}
            elif path == "/api/status":
                data = srv.api.status(now)
            elif path == "/api/goal":
                data = srv.api.goal(q.get("project"), q.get("goal"), now)
            elif path == "/api/review":
                data = srv.api.review(q.get("project"), q.get("goal"))
            elif path == "/api/agents":
                data = srv.api.agents(now)
            elif path == "/api/notices":
                data = srv.api.notices(now)
            else:
                self.send_error(HTTPStatus.NOT_FOUND)
                return
        except api_mod.ApiError as exc:
            self._json(exc.status, error_body(exc.status, exc.code, exc.message, exc.hint))
            return
        except Exception as exc:  # an API failure is reported to the page, the server stays up
            self.server.write_log(f"api error on {path}: {type(exc).__name__}")
            self._json(500, error_body(500, "internal", f"{type(exc).__name__}: {exc}"[:300],
                                       "see the dashboard log; `loopx doctor` checks the store"))
            return
        if path in ("/api/status", "/api/notices"):  # polled every few seconds: unchanged answers 304
            tag = self._etag(data, path)
            if self.headers.get("If-None-Match") == tag:
                self._send(304, b"", "application/json; charset=utf-8", extra=(("ETag", tag),), no_store=True)
                return
            self._json(200, {"schema": SCHEMA, "ok": True, "data": data}, extra=(("ETag", tag),))
            return
        self._json(200, {"schema": SCHEMA, "ok": True, "data": data})

    def _trace_get(self, path: str) -> None:
        srv = self.server
        if path == "/api/session":
            data = {"csrf": srv.csrf, "version": __version__, "human": None, "header": TOKEN_HEADER,
                    "trace": srv.trace.info()}
        elif path == "/api/trace":
            data = srv.trace.page()
        elif path == "/api/review":
            data = srv.trace.review()
        else:
            self._json(404, error_body(404, "trace_only", "this dashboard shows one trace file, no projects",
                                       "run `loopx dashboard` without --trace for your projects"))
            return
        self._json(200, {"schema": SCHEMA, "ok": True, "data": data})

    def _etag(self, data: dict, path: str = "/api/status") -> str:
        """A strong tag of the overview (or the notices) without its ``generated_at`` (which changes
        every second), computed once per distinct answer object (the API reuses it while nothing
        changed; one memo per path)."""
        srv = self.server
        memos = getattr(srv, "_etag_memos", None)
        if memos is None:
            memos = srv._etag_memos = {}
        memo = memos.get(path)
        if memo is not None and memo[0] is data:
            return memo[1]
        body = json.dumps({**data, "generated_at": None}, sort_keys=True, ensure_ascii=True, default=str).encode()

        tag = '"' + sha256(body).hexdigest()[:24] + '"'
        memos[path] = (data, tag)
        return tag

    # ------------------------------------------------------------------ POST
    def do_POST(self):
        path = urlsplit(self.path).path
        if self.server.trace is not None:
            self._json(403, error_body(403, "read_only_trace", "this dashboard serves a trace file read-only: "
                                       "nothing can be decided or changed here",
                                       "decide gates in the project's own dashboard or with `loopx gate`"))
            return
        if path != "/api/gate":
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        if not self._origin_ok():
            self.send_error(HTTPStatus.FORBIDDEN, "cross-origin request refused")
            return
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype != "application/json" or len(self.headers.get_all("Content-Type") or []) != 1:
            self.send_error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send application/json")
            return
        sent = self.headers.get_all(TOKEN_HEADER) or []
        if len(sent) != 1 or not hmac.compare_digest(sent[0].encode(), self.server.csrf.encode()):
            self.send_error(HTTPStatus.FORBIDDEN, "missing or wrong request token")
            return
        if not self._cookie_ok():
            self.send_error(HTTPStatus.UNAUTHORIZED, "not signed in")
            return
        body = self._read_body()
        if body is None:
            return
        try:
            data = self.server.api.decide(body, user_agent=self.headers.get("User-Agent"))
        except api_mod.ApiError as exc:
            self._json(exc.status, error_body(exc.status, exc.code, exc.message, exc.hint))
            return
        self._json(200, {"schema": SCHEMA, "ok": True, "data": data})

    def _read_body(self):
        if self.headers.get("Transfer-Encoding"):
            self.send_error(HTTPStatus.NOT_IMPLEMENTED, "chunked bodies are not accepted")
            return None
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) != 1:
            self.send_error(HTTPStatus.LENGTH_REQUIRED)
            return None
        raw = lengths[0].strip()
        if not raw.isdigit() or len(raw) > 9:
            self.send_error(HTTPStatus.BAD_REQUEST, "bad Content-Length")
            return None
        n = int(raw)
        if n > MAX_BODY:
            self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"bodies are limited to {MAX_BODY} bytes")
            return None
        try:
            data = self.rfile.read(n)
        except TimeoutError:
            self.send_error(HTTPStatus.REQUEST_TIMEOUT, "the body did not arrive in time")
            return None
        if len(data) != n:
            self.send_error(HTTPStatus.BAD_REQUEST, "the body is shorter than Content-Length")
            return None
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self.send_error(HTTPStatus.BAD_REQUEST, "the body is not JSON")
            return None
        if not isinstance(body, dict):
            self.send_error(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
            return None
        return body


def _pid() -> int:
    return os.getpid()


def make_server(host: str = "127.0.0.1", port: int = 0, *, extra_hosts=(), log=None, trace=None) -> DashboardServer:
    """Bind (raises OSError when the port is taken) and return the server, not yet serving.
    ``trace``: a ``TraceApi`` to serve read-only instead of the registered projects."""
    return DashboardServer(host, port, extra_hosts=extra_hosts, log=log, trace=trace)


def serve_in_thread(server: DashboardServer) -> threading.Thread:
    """Serve on a daemon thread (tests and benchmarks); stop with ``server.shutdown()``."""
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    return t
