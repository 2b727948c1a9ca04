"""``loopx dashboard --trace FILE`` (issue 12 item 9): a trace archive served read-only by a real
server process: verified first, the goal's timeline in order, every write refused."""

from __future__ import annotations

import http.client
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import REPO, run_loopx, subprocess_env
from loopx.kernel.storage import chain

XSS = 'fix <img src=x onerror="window.__pwned=1"> </script><b>bold?</b>'


def make_trace(project: Path, cli, *, redact_more: bool = False) -> Path:
    """A goal with a todo, a turn with evidence, an approved and a pending gate; its trace archive."""
    from loopx.kernel.policy import turn
    from loopx.kernel.storage.store import Store
    from loopx.kernel.write import evidence, gates

    r = cli("start-goal", "--goal-text", "Ship the parser rewrite", "--goal-id", "parser", "--done-when",
            "all parser tests pass", "--verify", f"{sys.executable} -c pass", "--protect", "merge",
            "--todo", "rewrite the tokenizer", "--todo", XSS, json=True)
    assert r.code == 0, r.err
    st = Store.open(str(project))
    t = turn.next_turn(st, "agent:claude", goal_id="parser")
    ev = evidence.add(st, "agent:claude", "parser", kind="test", summary="212 passed on 10.1.2.3", run=t["run_id"],
                      exit_code=0)
    turn.finish(st, "agent:claude", t["run_id"], "progress", evidence=[ev["evidence_id"]], verify=True)
    g = gates.open_gate(st, "agent:claude", "parser", kind="merge", question="Merge parser-rewrite into main?")
    r = cli("gate", "approve", g["gate_id"], "--confirm", g["gate_id"], "--note", "looks good", json=True)
    assert r.code == 0, r.err
    gates.open_gate(st, "agent:claude", "parser", kind="merge", question="Release 2.0 to PyPI?")
    out = project.parent / "parser-trace.tar.gz"
    args = ["trace", "export", "--goal-id", "parser", "-o", out] + (["--redact-more"] if redact_more else [])
    r = cli(*args, json=True)
    assert r.code == 0, r.err
    return out


def tamper(path: Path) -> Path:
    """The same archive with one record's text changed (fresh CRC and manifest): verify fails."""
    from loopx.kernel.storage.codec import decode, encode

    with tarfile.open(path, "r:gz") as tar:
        m = {x.name: tar.extractfile(x).read() for x in tar.getmembers()}
    rows = [json.loads(x) for x in m["records.jsonl"].decode().splitlines()]
    i = next(i for i, r in enumerate(rows) if "line" in r and '"gate.opened"' in r["line"])
    rec = decode(rows[i]["line"].encode())
    rec["data"]["question"] = "Merge anything you like?"
    rows[i]["line"] = encode({k: v for k, v in rec.items() if k != "crc"}).decode().rstrip("\n")
    m["records.jsonl"] = "".join(json.dumps(r) + "\n" for r in rows).encode()
    man = json.loads(m["manifest.json"])
    man["files"] = {n: chain.sha256(b).hexdigest() for n, b in m.items() if n != "manifest.json"}
    m["manifest.json"] = json.dumps(man).encode()
    bad = path.with_name("tampered.tar.gz")
    with tarfile.open(bad, "w:gz") as tar:
        for n, b in m.items():
            info = tarfile.TarInfo(n)
            info.size = len(b)
            tar.addfile(info, io.BytesIO(b))
    return bad


class Served:
    """``loopx dashboard --trace FILE`` as a real process; signed in through its launch link."""

    def __init__(self, trace: Path, *extra: str, login: bool = True) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "loopx", "dashboard", "--trace", str(trace), "--no-open",
                                      *extra], cwd=REPO, env=subprocess_env({}), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline()
        link = self.proc.stdout.readline()
        assert link.startswith("open: "), (first, link, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.banner_line = first
        self.link = link[6:].strip()
        u = urlsplit(self.link)
        self.port = u.port
        if not login:  # a browser signs in with the link
            return
        resp, _ = self.call("GET", f"{u.path}?{u.query}")
        assert resp.status == 303
        self.cookie = resp.getheader("Set-Cookie").split(";")[0]

    def call(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Host": f"127.0.0.1:{self.port}"}
        if getattr(self, "cookie", None):
            h["Cookie"] = self.cookie
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp, data

    def get(self, path, status=200):
        resp, data = self.call("GET", path)
        assert resp.status == status, data
        doc = json.loads(data)
        return doc["data"] if status == 200 else doc["error"]

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.proc.stdout.close()
            self.proc.stderr.close()


@pytest.fixture
def served():
    running = []

    def start(trace, *extra):
        s = Served(trace, *extra)
        running.append(s)
        return s

    yield start
    for s in running:
        s.stop()


def test_a_trace_is_served_read_only_with_its_timeline(project, cli, served):
    trace = make_trace(project, cli)
    s = served(trace)
    assert "read-only trace of parser (verified)" in s.banner_line
    session = s.get("/api/session")
    info = session["trace"]
    assert info["goal_id"] == "parser" and info["verified"] and info["checked"] and info["exported_at"]
    assert info["objective"] == "Ship the parser rewrite" and info["redact_more"] is None

    data = s.get("/api/trace")
    types = [e["type"] for e in data["entries"]]
    assert types.index("goal.started") < types.index("todo.added") < types.index("run.started") \
        < types.index("evidence.added") < types.index("run.finished") < types.index("gate.opened") \
        < types.index("gate.approved")  # in the order it happened
    assert [e["n"] for e in data["entries"]] == sorted(e["n"] for e in data["entries"])
    kinds = {e["kind"] for e in data["entries"]}
    assert {"goal", "todo", "turn", "evidence", "gate"} <= kinds
    ev = next(e for e in data["entries"] if e["type"] == "evidence.added")
    assert "212 passed" in ev["text"] and ev["actor"] == "agent:claude"
    gates = {g["question"]: g for g in data["gates"]}
    approved = gates["Merge parser-rewrite into main?"]
    assert approved["status"] == "approved" and approved["channel"] == "confirm-flag" and approved["note"] == "looks good"
    assert gates["Release 2.0 to PyPI?"]["status"] == "pending"
    assert "Ship the parser rewrite" in s.get("/api/review")["markdown"]

    # no project behind it, and nothing can be written
    assert s.get("/api/status", status=404)["code"] == "trace_only"
    assert s.get("/api/goal?project=0123456789abcdef&goal=parser", status=404)["code"] == "trace_only"
    pending = gates["Release 2.0 to PyPI?"]["id"]
    resp, body = s.call("POST", "/api/gate", json.dumps({"gate": pending, "decision": "approve"}).encode(),
                        {"Origin": f"http://127.0.0.1:{s.port}", "Content-Type": "application/json",
                         "X-Loopx-Token": session["csrf"]})
    assert resp.status == 403 and json.loads(body)["error"]["code"] == "read_only_trace"
    for method in ("PUT", "DELETE", "PATCH"):
        resp, _ = s.call(method, "/api/gate", b"{}", {"Content-Type": "application/json"})
        assert resp.status == 405, method
    resp, _ = s.call("GET", "/api/trace", headers={"Cookie": ""})
    assert resp.status == 401  # still needs the launch link's session
    assert s.stop() == 0


def test_a_trace_that_does_not_verify_is_refused_unless_no_verify(project, cli, served, tmp_path):
    bad = tamper(make_trace(project, cli))
    r = run_loopx(["dashboard", "--trace", str(bad), "--no-open"], cwd=tmp_path)
    assert r.code == 3
    lines = r.err.strip().splitlines()
    assert lines[0].startswith("loopx: error:") and "does not verify" in lines[0] and lines[1].startswith("hint:")
    assert "--no-verify" in lines[1] and len(lines) == 2
    r = run_loopx(["dashboard", "--trace", str(bad), "--no-open", "--format", "json"], cwd=tmp_path)
    assert r.code == 3 and r.json["error"]["code"] == "trace_not_verified"

    s = served(bad, "--no-verify")
    assert "(NOT verified)" in s.banner_line
    info = s.get("/api/session")["trace"]
    assert info["checked"] is False and info["verified"] is False
    assert any(e["text"].endswith("Merge anything you like?") for e in s.get("/api/trace")["entries"])


def test_bad_trace_options(project, cli, tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive")
    r = run_loopx(["dashboard", "--trace", str(junk), "--format", "json"], cwd=tmp_path)
    assert r.code == 2 and r.json["error"]["code"] == "bad_trace"
    r = run_loopx(["dashboard", "--no-verify", "--format", "json"], cwd=tmp_path)
    assert r.code == 2 and "--trace" in r.json["error"]["message"]
    r = run_loopx(["dashboard", "--trace", str(junk), "--stop"], cwd=tmp_path)
    assert r.code == 2 and r.err.startswith("loopx: error:") and "hint:" in r.err


def test_a_redacted_trace_is_served_with_its_redaction_said(project, cli, served):
    s = served(make_trace(project, cli, redact_more=True))
    info = s.get("/api/session")["trace"]
    assert info["verified"] and info["redact_more"]["records"] >= 1
    entries = s.get("/api/trace")["entries"]
    ev = next(e for e in entries if e["type"] == "evidence.added")
    assert "[ip-1]" in ev["text"] and "10.1.2.3" not in ev["text"] and ev["redacted"] is True


def test_a_taken_port_is_a_conflict(project, cli, tmp_path):
    import socket

    trace = make_trace(project, cli)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        r = run_loopx(["dashboard", "--trace", str(trace), "--no-open", "--port", str(port)], cwd=tmp_path)
    assert r.code == 4 and r.err.startswith("loopx: error: cannot listen") and "hint:" in r.err
