"""Hostile requests against a real dashboard server on port 0 (docs/architecture.md#the-dashboard, issue 4).

Every case is sent as raw bytes over a socket by a client that otherwise holds valid credentials
(session cookie, CSRF token, correct Host and Origin) so each case isolates one broken rule.
Each one must be rejected, leave the store byte-for-byte unchanged, keep the server answering and
never produce an ``Access-Control-*`` header. A positive control proves the same request with every
rule satisfied does decide the gate.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import time
from pathlib import Path

import pytest

from conftest import HUMAN
from loopx.dashboard import server as server_mod
from loopx.kernel.storage.store import Store
from loopx.kernel.write import gates


class Live:
    """A running server plus valid credentials for it."""

    def __init__(self, srv, cookie: str, csrf: str, gate_id: str, project_key: str, proj: Path, log: io.StringIO,
                 used_token: str):
        self.srv, self.cookie, self.csrf, self.gate_id, self.key, self.proj, self.log = \
            srv, cookie, csrf, gate_id, project_key, proj, log
        self.used_token = used_token
        self.port = srv.port
        self.host = f"127.0.0.1:{self.port}"
        self.origin = f"http://127.0.0.1:{self.port}"

    def store_bytes(self) -> bytes:
        root = self.proj / ".loopx"
        return (root / "events.jsonl").read_bytes() + b"\0" + (root / "evidence.jsonl").read_bytes()

    def body(self, **over) -> bytes:
        doc = {"project": self.key, "gate": self.gate_id, "decision": "approve",
               "code": gates.short_code(self.gate_id), "note": None}
        doc.update(over)
        return json.dumps(doc).encode()

    def request(self, method="GET", path="/api/status", *, host=True, origin=None, token=None, cookie=True,
                ctype=None, body=b"", extra=(), length=True, version="HTTP/1.0") -> bytes:
        lines = [f"{method} {path} {version}"]
        if host is True:
            lines.append(f"Host: {self.host}")
        elif host:
            lines.append(f"Host: {host}")
        if origin:
            lines.append(f"Origin: {origin}")
        if token:
            lines.append(f"X-Loopx-Token: {token}")
        if cookie is True:
            lines.append(f"Cookie: {self.cookie}")
        elif cookie:
            lines.append(f"Cookie: {cookie}")
        if ctype:
            lines.append(f"Content-Type: {ctype}")
        if body and length:
            lines.append(f"Content-Length: {len(body)}")
        lines += list(extra)
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def post(self, **kw) -> bytes:
        """A fully valid gate-approval POST unless ``kw`` breaks something."""
        args = dict(method="POST", path="/api/gate", origin=self.origin, token=self.csrf, ctype="application/json",
                    body=self.body())
        args.update(kw)
        return self.request(**args)


def fresh(live: Live, now: float | None = None) -> str:
    return server_mod.launch_token(live.srv.token, now=now)


def _push_expiry(token: str) -> str:
    nonce, expiry, sig = token.split(".")
    return f"{nonce}.{int(expiry) + 86400}.{sig}"


def send_raw(port: int, data: bytes, timeout: float = 20.0) -> tuple[int | None, dict, bytes]:
    """Send bytes, read the whole answer; returns (status or None, lower-cased headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        chunks = []
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    break
                chunks.append(c)
        except (ConnectionResetError, TimeoutError):
            pass
    raw = b"".join(chunks)
    if not raw.startswith(b"HTTP/"):
        return None, {}, raw
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, list[str]] = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers.setdefault(k.strip().lower(), []).append(v.strip())
    return status, headers, body


@pytest.fixture
def live(goal, project, monkeypatch):
    monkeypatch.setattr(server_mod.Handler, "timeout", 2.0)  # shorter socket timeouts keep the suite quick
    store = Store.open(str(project))
    gate = gates.open_gate(store, "agent:bot", goal, kind="merge", question="Merge the branch?")
    log = io.StringIO()
    srv = server_mod.make_server("127.0.0.1", 0, log=log)
    server_mod.serve_in_thread(srv)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        used = server_mod.launch_token(srv.token)
        conn.request("GET", f"/launch?token={used}")
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 303
        cookie = resp.getheader("Set-Cookie").split(";")[0]
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        conn.request("GET", "/api/session", headers={"Cookie": cookie})
        csrf = json.loads(conn.getresponse().read())["data"]["csrf"]
        conn.close()
        from loopx.dashboard.api import project_key

        yield Live(srv, cookie, csrf, gate["gate_id"], project_key(str(project)), project, log, used)
    finally:
        srv.shutdown()
        srv.server_close()


def still_up(live: Live) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=10)
    conn.request("GET", "/api/status", headers={"Cookie": live.cookie})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    assert resp.status == 200 and data["ok"] is True
    conn.close()


def _host_cases():
    return {
        "foreign host": "evil.example",
        "foreign host with our port": "evil.example:{port}",
        "no port": "127.0.0.1",
        "wrong port": "127.0.0.1:1",
        "port then suffix": "127.0.0.1:{port}.evil.example",
        "localhost as subdomain": "localhost.evil.example:{port}",
        "userinfo trick": "127.0.0.1:{port}@evil.example",
        "any address": "0.0.0.0:{port}",
        "ipv6 loopback": "[::1]:{port}",
        "empty": "",
        "decimal ip": "2130706433:{port}",
        "trailing dot": "localhost.:{port}",
    }


HOSTS = _host_cases()
# Each case: (request builder, accepted status codes). Status None means "no HTTP status line".
CASES = {
    **{f"GET host: {name}": (lambda L, v=v: L.request(host=v.format(port=L.port)), {400, 421})
       for name, v in HOSTS.items()},
    "GET host: missing": (lambda L: L.request(host=None), {421}),
    "GET host: two Host headers": (lambda L: L.request(extra=["Host: evil.example"]), {421}),
    "POST host: foreign": (lambda L: L.post(host=f"evil.example:{L.port}"), {421}),
    "POST host: rebinding name": (lambda L: L.post(host=f"attacker.test:{L.port}", origin=f"http://attacker.test:{L.port}"), {421}),
    "origin: missing": (lambda L: L.post(origin=None), {403}),
    "origin: foreign": (lambda L: L.post(origin="http://evil.example"), {403}),
    "origin: null": (lambda L: L.post(origin="null"), {403}),
    "origin: suffix": (lambda L: L.post(origin=f"http://127.0.0.1:{L.port}.evil.example"), {403}),
    "origin: https scheme": (lambda L: L.post(origin=f"https://127.0.0.1:{L.port}"), {403}),
    "origin: other allowed host": (lambda L: L.post(origin=f"http://localhost:{L.port}"), {403}),
    "origin: with path": (lambda L: L.post(origin=f"http://127.0.0.1:{L.port}/"), {403}),
    "origin: two headers": (lambda L: L.post(extra=["Origin: http://evil.example"]), {403}),
    "token: missing": (lambda L: L.post(token=None), {403}),
    "token: wrong": (lambda L: L.post(token="x" * 43), {403}),
    "token: launch token instead": (lambda L: L.post(token=L.srv.token), {403}),
    "token: session cookie value instead": (lambda L: L.post(token=L.srv.session), {403}),
    "content type: text/plain": (lambda L: L.post(ctype="text/plain"), {415}),
    "content type: form": (lambda L: L.post(ctype="application/x-www-form-urlencoded"), {415}),
    "content type: missing": (lambda L: L.post(ctype=None), {415}),
    "content type: json lookalike": (lambda L: L.post(ctype="application/jsonp"), {415}),
    "cookie: missing": (lambda L: L.post(cookie=None), {401}),
    "cookie: wrong value": (lambda L: L.post(cookie=f"loopx_session_{L.port}=forged"), {401}),
    "cookie: garbage": (lambda L: L.post(cookie='";;==\\x00'), {401}),
    "GET does not change state": (lambda L: L.request(path=f"/api/gate?gate={L.gate_id}&decision=approve"), {404}),
    "wrong code typed": (lambda L: L.post(body=L.body(code="000000")), {400}),
    "gate id prefix": (lambda L: L.post(body=L.body(gate=L.gate_id[:7])), {404}),
    "unknown project": (lambda L: L.post(body=L.body(project="0" * 16)), {404}),
    "project given as a path": (lambda L: L.post(body=L.body(project=str(L.proj))), {400}),
    "reject without note": (lambda L: L.post(body=L.body(decision="reject")), {400}),
    "decision not a word": (lambda L: L.post(body=L.body(decision=True)), {400}),
    "body: not json": (lambda L: L.post(body=b"approve=1"), {400}),
    "body: json array": (lambda L: L.post(body=b"[1,2]"), {400}),
    "body: invalid utf-8": (lambda L: L.post(body=b'{"a":"\xff\xfe"}'), {400}),
    "body: too large": (lambda L: L.post(body=b"{" + b" " * 20000 + b"}"), {413}),
    "body: huge content-length": (lambda L: L.post(body=b"{}", length=False, extra=["Content-Length: 999999999999"]), {400, 413}),
    "body: negative content-length": (lambda L: L.post(body=b"{}", length=False, extra=["Content-Length: -5"]), {400}),
    "body: two content-lengths": (lambda L: L.post(extra=["Content-Length: 2"]), {411}),
    "body: missing content-length": (lambda L: L.post(length=False), {411}),
    "body: chunked": (lambda L: L.post(length=False, extra=["Transfer-Encoding: chunked"]), {501}),
    "body: shorter than declared": (lambda L: L.post(body=b"{}", length=False, extra=["Content-Length: 50"]), {408}),
    **{f"method: {m}": (lambda L, m=m: L.post(method=m), {405})
       for m in ("PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "PROPFIND", "get")},
    "path: dot dot": (lambda L: L.request(path="/../../../etc/passwd"), {404}),
    "path: encoded dot dot": (lambda L: L.request(path="/%2e%2e/%2e%2e/etc/passwd"), {404}),
    "path: backslash encoded": (lambda L: L.request(path="/..%5c..%5cdashboard%5cserver.py"), {404}),
    "path: raw backslash": (lambda L: L.request(path="/..\\..\\server.py"), {400}),
    "path: via static name": (lambda L: L.request(path="/app.js/../../server.py"), {404}),
    "path: static folder": (lambda L: L.request(path="/static/app.js"), {404}),
    "path: package file": (lambda L: L.request(path="/server.py"), {404}),
    "path: absolute file": (lambda L: L.request(path="/etc/passwd"), {404}),
    "path: double slash": (lambda L: L.request(path="//etc/passwd"), {404}),
    "path: encoded slash": (lambda L: L.request(path="/%2fetc%2fpasswd"), {404}),
    "path: nul byte": (lambda L: L.request(path="/app.js%00.html"), {404}),
    "path: absolute-form target": (lambda L: L.request(path="http://evil.example/"), {400}),
    "path: asterisk": (lambda L: L.request(path="*"), {400}),
    "query: too many fields": (lambda L: L.request(path="/api/status?" + "&".join(f"a{i}=1" for i in range(40))), {400}),
    "launch: too many fields": (lambda L: L.request(path=f"/launch?token={L.srv.token}&" + "&".join(f"a{i}=1" for i in range(40)),
                                                    cookie=None), {400}),
    "api: no cookie": (lambda L: L.request(cookie=None), {401}),
    "api: unknown endpoint": (lambda L: L.request(path="/api/../api/status"), {404}),
    "launch: wrong token": (lambda L: L.request(path="/launch?token=nope", cookie=None), {403}),
    "launch: token twice": (lambda L: L.request(path=f"/launch?token=x&token={fresh(L)}", cookie=None), {403}),
    "launch: already used": (lambda L: L.request(path=f"/launch?token={L.used_token}", cookie=None), {403}),
    "launch: expired": (lambda L: L.request(path=f"/launch?token={fresh(L, now=time.time() - 3600)}", cookie=None), {403}),
    "launch: signed by another secret": (lambda L: L.request(path=f"/launch?token={server_mod.launch_token('other')}",
                                                             cookie=None), {403}),
    "launch: expiry pushed out": (lambda L: L.request(path="/launch?token=" + _push_expiry(fresh(L)), cookie=None), {403}),
    "launch: the raw secret": (lambda L: L.request(path=f"/launch?token={L.srv.token}", cookie=None), {403}),
    "launch: empty token": (lambda L: L.request(path="/launch?token=", cookie=None), {403}),
    "oversized: request line": (lambda L: L.request(path="/" + "a" * 10000), {414}),
    "oversized: one header": (lambda L: L.request(extra=["X-Big: " + "b" * 9000]), {431}),
    "oversized: many headers": (lambda L: L.request(extra=[f"X-H{i}: v" for i in range(80)]), {431}),
    "oversized: too many for http.server": (lambda L: L.request(extra=[f"X-H{i}: v" for i in range(150)]), {431}),
    "oversized: header total": (lambda L: L.request(extra=[f"X-H{i}: " + "c" * 7000 for i in range(3)]), {431}),
    "malformed: garbage line": (lambda L: b"GARBAGE\r\n\r\n", {400}),
    "malformed: four words": (lambda L: f"GET / HTTP/1.0 extra\r\nHost: {L.host}\r\n\r\n".encode(), {400}),
    "malformed: http 9.9": (lambda L: L.request(version="HTTP/9.9"), {505}),
    "malformed: bad version": (lambda L: L.request(version="HTTP/1.x"), {400}),
    "malformed: http 0.9": (lambda L: f"GET /\r\nHost: {L.host}\r\n\r\n".encode(), {400}),
    "malformed: tls hello": (lambda L: b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(64)) + b"\r\n\r\n", {400}),
    "malformed: header without colon": (lambda L: f"GET / HTTP/1.0\r\nHost {L.host}\r\n\r\n".encode(), {421}),
}


def test_there_are_at_least_forty_hostile_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_request_is_rejected(live, name):
    build, expected = CASES[name]
    before = live.store_bytes()
    status, headers, body = send_raw(live.port, build(live))
    assert status in expected, (name, status, body[:200])
    assert not any(k.startswith("access-control-") for k in headers), headers
    assert "set-cookie" not in headers
    assert b"<!doctype" not in body.lower()  # never served a page instead of refusing
    assert live.store_bytes() == before
    state = Store.open(str(live.proj)).load()
    assert state["gates"][live.gate_id]["status"] == "pending"
    still_up(live)


def test_positive_control_the_same_request_with_every_rule_met_decides_the_gate(live):
    ua = "Mozilla/5.0 (hostile-suite control)"
    status, headers, body = send_raw(live.port, live.post(extra=[f"User-Agent: {ua}"]))
    assert status == 200, body
    assert not any(k.startswith("access-control-") for k in headers)
    assert headers["cache-control"] == ["no-store"]
    recs = [json.loads(line) for line in (live.proj / ".loopx" / "events.jsonl").read_text().splitlines()]
    ev = [r for r in recs if r["type"] == "gate.approved"]
    assert len(ev) == 1
    assert ev[0]["actor"] == HUMAN
    assert ev[0]["data"]["channel"] == "dashboard"
    assert ev[0]["data"]["user_agent"] == ua
    # deciding twice is a conflict, and changes nothing
    before = live.store_bytes()
    status, _, body = send_raw(live.port, live.post())
    assert status == 409 and json.loads(body)["error"]["code"] == "gate_decided"
    assert live.store_bytes() == before


def _wait_closed(s: socket.socket) -> None:
    """Read until the server closes the socket (raises socket.timeout if it never does)."""
    s.settimeout(15)
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass


def test_idle_and_half_open_sockets_do_not_stall_other_clients(live, monkeypatch):
    monkeypatch.setattr(server_mod.Handler, "timeout", 1.0)
    idle = []
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", live.port), timeout=10)
        if i % 2:
            s.sendall(b"GET /api/status HTTP/1.0\r\nHost: ")  # a request that never finishes
        idle.append(s)
    try:
        still_up(live)  # served while twenty sockets hang
        for s in idle:  # and the server closes every idle socket on its own
            _wait_closed(s)
    finally:
        for s in idle:
            s.close()
    assert live.store_bytes()
    still_up(live)


def test_a_slow_drip_connection_is_cut_after_the_connection_limit(live, monkeypatch):
    monkeypatch.setattr(server_mod, "CONN_SECONDS", 1.5)
    payload = f"GET /api/status HTTP/1.0\r\nHost: {live.host}\r\nX-Slow: ".encode() + b"z" * 400
    s = socket.create_connection(("127.0.0.1", live.port), timeout=10)
    sent = 0
    try:
        for ch in payload:  # one byte every 50 ms would take over 20 s; the server cuts it long before
            s.sendall(bytes([ch]))
            sent += 1
            time.sleep(0.05)
    except OSError:
        pass
    finally:
        s.close()
    assert sent < len(payload)
    still_up(live)


def test_no_response_ever_carries_cors_headers_even_when_asked(live):
    for path in ("/", "/app.js", "/api/status", "/api/health", "/api/session", "/nope"):
        raw = live.request(path=path, extra=["Origin: http://evil.example", "Access-Control-Request-Method: POST"])
        status, headers, _ = send_raw(live.port, raw)
        assert status is not None
        assert not any(k.startswith("access-control-") for k in headers), (path, headers)


def test_security_headers_on_pages_and_api(live):
    status, headers, _ = send_raw(live.port, live.request(path="/", cookie=None))
    assert status == 200
    csp = headers["content-security-policy"][0]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["x-content-type-options"] == ["nosniff"]
    for path in ("/api/status", "/api/session", "/api/health"):
        status, headers, _ = send_raw(live.port, live.request(path=path))
        assert status == 200
        assert headers["cache-control"] == ["no-store"]
        assert headers["x-content-type-options"] == ["nosniff"]
        assert headers["content-type"][0].startswith("application/json")


def test_launch_sets_a_strict_httponly_cookie_and_drops_the_token_from_the_url(live):
    status, headers, _ = send_raw(live.port, live.request(path=f"/launch?token={fresh(live)}", cookie=None))
    assert status == 303
    assert headers["location"] == ["/"]
    cookie = headers["set-cookie"][0]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert live.srv.token not in cookie
    assert headers["referrer-policy"] == ["no-referrer"]


def test_the_token_never_appears_in_the_log(live):
    tokens = [fresh(live), fresh(live)]
    for raw in (live.request(path=f"/launch?token={tokens[0]}", cookie=None),
                live.request(path=f"/launch?token={tokens[1]}x", cookie=None),
                live.request(path=f"/launch?token={live.srv.token}", cookie=None),
                live.request(path=f"/nope/{live.srv.token}"),
                live.request(path=f"/api/goal?project=x&goal={live.srv.token}"),
                f"GET /{live.srv.token} HTTP/7.0\r\n\r\n".encode(),
                live.post(token=live.srv.token)):
        send_raw(live.port, raw)
    log = live.log.getvalue()
    assert log.strip(), "the access log was written"
    for secret in (live.srv.token, live.srv.session, live.srv.csrf, *tokens):
        assert secret not in log
