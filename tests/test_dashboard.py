"""Dashboard API against a real server on port 0, the PWA shell, and the background service with
real processes (reuse, SIGKILL recovery, auto-upgrade, stale files, stop, status)."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HUMAN, REPO, run_loopx, subprocess_env
from loopx import __version__
from loopx.dashboard import server as server_mod
from loopx.dashboard import service
from loopx.dashboard.api import project_key
from loopx.kernel.policy import turn
from loopx.kernel.storage.store import Store
from loopx.kernel.write import evidence, gates, todos

XSS_TITLE = 'fix <img src=x onerror="window.__pwned=1"> and </script><script>window.__pwned=2</script>'
XSS_SUMMARY = 'tests pass <img src=x onerror=window.__pwned=3> </script>'


class Client:
    def __init__(self, srv):
        self.srv = srv
        self.port = srv.port
        self.cookie = None
        self.csrf = None

    def call(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Host": f"127.0.0.1:{self.port}"}
        if self.cookie:
            h["Cookie"] = self.cookie
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp, data

    def login(self):
        resp, _ = self.call("GET", f"/launch?token={server_mod.launch_token(self.srv.token)}")
        assert resp.status == 303
        self.cookie = resp.getheader("Set-Cookie").split(";")[0]
        self.csrf = self.get("/api/session")["csrf"]
        return self

    def get(self, path, status=200):
        resp, data = self.call("GET", path)
        assert resp.status == status, data
        doc = json.loads(data)
        return doc["data"] if status == 200 else doc["error"]

    def decide(self, body, status=200):
        resp, data = self.call("POST", "/api/gate", json.dumps(body).encode(),
                               {"Origin": f"http://127.0.0.1:{self.port}", "Content-Type": "application/json",
                                "X-Loopx-Token": self.csrf, "User-Agent": "pytest-ua"})
        assert resp.status == status, data
        doc = json.loads(data)
        return doc["data"] if status == 200 else doc["error"]


@pytest.fixture
def client(project):
    srv = server_mod.make_server("127.0.0.1", 0)
    server_mod.serve_in_thread(srv)
    try:
        yield Client(srv).login()
    finally:
        srv.shutdown()
        srv.server_close()


def _store(project) -> Store:
    return Store.open(str(project))


def _goal(project, cli, gid, *todo_titles, extra=()):
    args = ["start-goal", "--goal-text", f"objective of {gid}", "--goal-id", gid, "--done-when", "done"]
    for t in todo_titles:
        args += ["--todo", t]
    r = cli(*args, *extra, json=True)
    assert r.code == 0, r.err
    return r.data


# ---------------------------------------------------------------------- API
def test_overview_groups_goals_like_status(project, cli, client):
    _goal(project, cli, "asks", "a1")
    gates.open_gate(_store(project), "agent:bot", "asks", kind="merge", question="Merge it?")
    _goal(project, cli, "works", "w1")
    todos.claim(_store(project), "agent:bot", [t for t in _store(project).load()["todos"].values()
                                               if t["goal"] == "works"][0]["id"])
    _goal(project, cli, "ready", "r1")
    _goal(project, cli, "broke", "b1", "b2", extra=["--slots", "1", "--verify", f"{sys.executable} -c pass"])
    st = _store(project)
    t = turn.next_turn(st, "agent:bot", goal_id="broke")
    turn.finish(st, "agent:bot", t["run_id"], "progress", verify=True)
    assert turn.spend_slot(st, "agent:bot", t["run_id"])["spent"]
    _goal(project, cli, "later", "l1")
    assert cli("goal", "pause", "later").code == 0

    data = client.get("/api/status")
    assert data["version"] == __version__
    (p,) = data["projects"]
    assert p["key"] == project_key(str(project)) and p["error"] is None
    groups = {g["id"]: g["group"] for g in p["goals"]}
    assert groups == {"asks": "needs_you", "works": "running", "ready": "ready", "broke": "waiting",
                      "later": "stopped"}
    broke = next(g for g in p["goals"] if g["id"] == "broke")
    assert broke["budget"]["left"] == 0 and broke["next_check_at"]  # when the slot frees
    asks = next(g for g in p["goals"] if g["id"] == "asks")
    assert asks["needs_human"][0]["question"] == "Merge it?"
    assert data["counts"] == {"needs_you": 1, "running": 1, "ready": 1, "waiting": 1, "stopped": 1}
    # the same numbers as `loopx status`, the same answer as `loopx quota should-run`
    status = cli("status", json=True).data
    assert {g["id"]: g["todos"] for g in status["goals"]} == {g["id"]: g["todos"] for g in p["goals"]}
    should = cli("quota", "should-run", "--goal-id", "broke", json=True)
    assert should.code == 1 and should.data["decision"] == "wait"
    assert broke["next_check_at"] == should.data["next_check_at"] and broke["reason"] == should.data["message"]


def test_overview_follows_should_run_for_planning_and_complete_goals(project, cli, client):
    _goal(project, cli, "empty")  # no todos: the next turn plans them
    _goal(project, cli, "finished", "only", extra=["--verify", f"{sys.executable} -c pass"])
    st = _store(project)
    t = turn.next_turn(st, "agent:bot", goal_id="finished")
    turn.finish(st, "agent:bot", t["run_id"], "completion", verify=True)
    goals = {g["id"]: g for g in client.get("/api/status")["projects"][0]["goals"]}
    assert goals["empty"]["group"] == "ready"
    assert goals["finished"]["group"] == "needs_you" and "done" in goals["finished"]["reason"]
    for gid in ("empty", "finished"):
        d = cli("quota", "should-run", "--goal-id", gid, json=True).data
        assert goals[gid]["reason"].startswith(d["message"]), (gid, d)


def test_goal_page_has_board_gates_runs_chart_and_agent_text_verbatim(project, cli, client):
    _goal(project, cli, "g1", XSS_TITLE, "second", extra=["--verify", f"{sys.executable} -c pass"])
    st = _store(project)
    t = turn.next_turn(st, "agent:bot", goal_id="g1")
    ev = evidence.add(st, "agent:bot", "g1", kind="test", summary=XSS_SUMMARY, run=t["run_id"], exit_code=0)
    turn.finish(st, "agent:bot", t["run_id"], "progress", evidence=[ev["evidence_id"]], verify=True)
    assert turn.spend_slot(st, "agent:bot", t["run_id"])["spent"]
    gate = gates.open_gate(st, "agent:bot", "g1", kind="release", question="Ship <b>it</b>?", context="</script>")

    d = client.get(f"/api/goal?project={project_key(str(project))}&goal=g1")
    assert d["goal"]["objective"] == "objective of g1"
    titles = [x["title"] for col in d["board"].values() for x in col["items"]]
    assert XSS_TITLE in titles  # JSON carries the text as is; the page renders it with textContent
    (pending,) = [g for g in d["gates"] if g["status"] == "pending"]
    assert pending["id"] == gate["gate_id"] and pending["code"] == gates.short_code(gate["gate_id"])
    assert pending["question"] == "Ship <b>it</b>?" and pending["requested_by"] == "agent:bot"
    (run,) = d["runs"]
    assert run["result"] == "progress" and run["slots"] == 1
    assert run["evidence"][0]["summary"] == XSS_SUMMARY
    assert sum(d["chart"]["bins"]) == d["chart"]["spent"] == 1
    assert d["summary"]["group"] == "needs_you"


def test_a_used_launch_link_still_redirects_a_signed_in_browser(client):
    token = server_mod.launch_token(client.srv.token)
    cookie = client.cookie
    client.cookie = None
    assert client.call("GET", f"/launch?token={token}")[0].status == 303
    assert client.call("GET", f"/launch?token={token}")[0].status == 403
    client.cookie = cookie  # a reopened tab that still has its cookie is just sent home
    resp, _ = client.call("GET", f"/launch?token={token}")
    assert resp.status == 303 and resp.getheader("Location") == "/" and resp.getheader("Set-Cookie") is None


def test_goal_and_review_errors_are_json_with_a_hint(project, cli, client):
    _goal(project, cli, "g1", "x")
    key = project_key(str(project))
    assert client.get(f"/api/goal?project={key}&goal=nope", status=404)["code"] == "no_goal"
    assert client.get(f"/api/goal?project={key}&goal=../etc", status=400)["code"] == "bad_goal"
    assert client.get("/api/goal?project=0123456789abcdef&goal=g1", status=404)["code"] == "no_project"
    assert client.get("/api/goal?goal=g1", status=400)["hint"]
    review = client.get(f"/api/review?project={key}&goal=g1")
    assert review["available"] is True and "objective of g1" in review["markdown"]


def test_agents_page_lists_holders_and_handoffs(project, cli, client):
    from loopx.kernel.write import agents

    _goal(project, cli, "g1", "handed over", "kept")
    st = _store(project)
    agents.register(st, "agent:alice", "alice", "codex")
    handed, kept = sorted(st.load()["todos"].values(), key=lambda t: t["order"])
    todos.claim(st, "agent:alice", handed["id"])
    todos.claim(st, "agent:alice", kept["id"])
    agents.handoff(st, "agent:alice", to="bob", todo=handed["id"], note="your turn")
    d = client.get("/api/agents")
    (p,) = d["projects"]
    alice = next(a for a in p["agents"] if a["name"] == "alice")
    assert alice["kind"] == "codex" and alice["last_seen"]
    assert [h["title"] for h in alice["holds"]] == ["kept"] and alice["holds"][0]["live"]
    assert p["handoffs"][0]["to"].endswith("bob") and p["handoffs"][0]["note"] == "your turn"


def test_gate_decisions_through_the_api(project, cli, client):
    _goal(project, cli, "g1", "x")
    st = _store(project)
    g1 = gates.open_gate(st, "agent:bot", "g1", kind="merge", question="one?")["gate_id"]
    g2 = gates.open_gate(st, "agent:bot", "g1", kind="merge", question="two?")["gate_id"]
    key = project_key(str(project))
    err = client.decide({"project": key, "gate": g1, "decision": "approve", "code": "zzzz"}, status=400)
    assert err["code"] == "bad_confirmation" and gates.short_code(g1) in err["hint"]
    err = client.decide({"project": key, "gate": g2, "decision": "reject", "code": gates.short_code(g2)}, status=400)
    assert "note" in err["message"]
    ok = client.decide({"project": key, "gate": g1, "decision": "approve", "code": gates.short_code(g1).upper()})
    assert ok["status"] == "approved" and ok["decided_by"] == HUMAN and ok["channel"] == "dashboard"
    ok = client.decide({"project": key, "gate": g2, "decision": "reject", "code": gates.short_code(g2), "note": "no"})
    assert ok["status"] == "rejected"
    state = st.load()
    assert state["gates"][g1]["channel"] == "dashboard" and state["gates"][g2]["note"] == "no"
    err = client.decide({"project": key, "gate": g1, "decision": "reject", "code": gates.short_code(g1), "note": "x"},
                        status=409)
    assert err["code"] == "gate_decided"


def test_an_unreadable_project_is_reported_not_fatal(project, cli, client, tmp_path):
    _goal(project, cli, "g1", "x")
    other = tmp_path / "other"
    other.mkdir()
    assert run_loopx(["connect"], cwd=other).code == 0
    (other / ".loopx" / "format.json").write_text("{broken")
    shutil.rmtree(project / ".loopx" / "cache", ignore_errors=True)
    d = client.get("/api/status")
    by_name = {p["name"]: p for p in d["projects"]}
    assert by_name["other"]["error"]["message"] and by_name["other"]["goals"] == []
    assert [g["id"] for g in by_name["proj"]["goals"]] == ["g1"]


def test_state_is_reread_when_the_store_changes(project, cli, client):
    _goal(project, cli, "g1", "x")
    key = project_key(str(project))
    assert client.get(f"/api/goal?project={key}&goal=g1")["board"]["open"]["count"] == 1
    assert cli("todo", "add", "another", "--goal-id", "g1").code == 0
    assert client.get(f"/api/goal?project={key}&goal=g1")["board"]["open"]["count"] == 2



def test_an_unchanged_overview_answers_304_to_its_etag(project, cli, client, monkeypatch):
    _goal(project, cli, "g1", "x")
    resp, body = client.call("GET", "/api/status")
    tag = resp.getheader("ETag")
    assert resp.status == 200 and tag and json.loads(body)["ok"]
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T00:00:00Z")  # another second: generated_at changes, nothing else
    again, body = client.call("GET", "/api/status", headers={"If-None-Match": tag})
    assert again.status == 304 and body == b"" and again.getheader("ETag") == tag
    assert again.getheader("Content-Security-Policy")  # the security headers come with a 304 too
    assert cli("todo", "add", "another", "--goal-id", "g1").code == 0
    changed, body = client.call("GET", "/api/status", headers={"If-None-Match": tag})
    assert changed.status == 200 and changed.getheader("ETag") != tag
    assert json.loads(body)["data"]["projects"][0]["goals"][0]["todos"]["open"] == 2
    stale, _ = client.call("GET", "/api/status", headers={"If-None-Match": '"something-else"'})
    assert stale.status == 200


def test_unchanged_notices_answer_304_to_their_etag(project, cli, client, monkeypatch):
    _goal(project, cli, "g1", "x")
    resp, body = client.call("GET", "/api/notices")
    tag = resp.getheader("ETag")
    assert resp.status == 200 and tag and json.loads(body)["data"]["notices"] == []
    again, body = client.call("GET", "/api/notices", headers={"If-None-Match": tag})
    assert again.status == 304 and body == b""
    assert cli("gate", "open", "--goal-id", "g1", "--kind", "custom", "--question", "ok?").code == 0
    changed, body = client.call("GET", "/api/notices", headers={"If-None-Match": tag})
    assert changed.status == 200 and changed.getheader("ETag") != tag
    assert [n["type"] for n in json.loads(body)["data"]["notices"]] == ["gate.opened"]

# ---------------------------------------------------------------------- static shell and PWA
@pytest.mark.parametrize("path,ctype", [
    ("/", "text/html"), ("/app.js", "text/javascript"), ("/style.css", "text/css"),
    ("/manifest.webmanifest", "application/manifest+json"), ("/sw.js", "text/javascript"),
    ("/icon.svg", "image/svg+xml"), ("/icon-192.png", "image/png"), ("/icon-512.png", "image/png"),
])
def test_static_files_are_served_with_their_content_type(client, path, ctype):
    client.cookie = None  # the shell itself needs no session
    resp, body = client.call("GET", path)
    assert resp.status == 200 and body
    assert resp.getheader("Content-Type").startswith(ctype)
    assert resp.getheader("X-Content-Type-Options") == "nosniff"


def test_manifest_has_name_icons_start_url_and_standalone(client):
    resp, body = client.call("GET", "/manifest.webmanifest")
    m = json.loads(body)
    assert m["name"] and m["start_url"] == "/" and m["display"] == "standalone"
    sizes = {i["sizes"] for i in m["icons"]}
    assert {"192x192", "512x512"} <= sizes
    for icon in m["icons"]:
        assert client.call("GET", icon["src"])[0].status == 200


def test_service_worker_caches_only_the_versioned_shell(client):
    _, body = client.call("GET", "/sw.js")
    sw = body.decode()
    assert f'const VERSION = "{__version__}"' in sw  # a new version means a new cache name
    shell = json.loads(re.search(r"const SHELL = (\[.*?\]);", sw).group(1))
    assert all(p in server_mod.STATIC for p in shell)
    assert not any(p.startswith("/api/") or p.startswith("/launch") for p in shell)
    assert 'url.pathname.startsWith("/api/")' in sw and '"/launch"' in sw
    assert "caches.delete" in sw  # old versions are dropped on activate


def test_pages_have_no_inline_script_or_handlers():
    from importlib import resources

    html = resources.files("loopx.dashboard").joinpath("static", "index.html").read_text()
    for tag in re.findall(r"<script[^>]*>", html):
        assert "src=" in tag
    assert not re.search(r"<script[^>]*>\s*[^<\s]", html)
    assert not re.search(r"\son[a-z]+=", html)
    js = resources.files("loopx.dashboard").joinpath("static", "app.js").read_text()
    assert "innerHTML" not in js and "eval(" not in js and "new Function" not in js
    assert "insertAdjacentHTML" not in js and "document.write" not in js


def test_every_allow_listed_file_ships_in_the_package():
    for name, _ctype in server_mod.STATIC.values():
        assert server_mod.static_bytes(name)
    with pytest.raises(KeyError):
        server_mod.static_bytes("../server.py")


# ---------------------------------------------------------------------- the background service
def _dash(*args, env=None, cwd=None):
    return run_loopx(["dashboard", "--no-open", "--format", "json", *args], cwd=cwd or REPO, env=env)


def _open(url: str):
    from urllib.parse import urlsplit

    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", f"{u.path}?{u.query}")
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp


@pytest.fixture
def service_home(tmp_path, monkeypatch):
    """A private LOOPX_HOME; every server started in it is stopped afterwards."""
    home = tmp_path / "home"
    monkeypatch.setenv("LOOPX_HOME", str(home))
    yield home
    info = service.read_state()
    run_loopx(["dashboard", "--stop"], cwd=REPO)
    if info and not info.get("corrupt") and service.pid_alive(info["pid"]) and service._live(info):
        os.kill(info["pid"], signal.SIGKILL)


def test_start_reuse_status_stop(service_home):
    r = _dash("--port", "0")
    assert r.code == 0, r.err
    first = r.data
    assert first["action"] == "started" and first["version"] == __version__
    assert first["launch_url"].startswith(f"http://127.0.0.1:{first['port']}/launch?token=")
    assert service.probe(first["port"])["pid"] == first["pid"]
    # its own process group (a Ctrl-C or the shell's hang-up of its jobs never reaches it), in the
    # session it was started from (it keeps that terminal: test_a_dashboard_started_from_a_terminal_...)
    assert os.getpgid(first["pid"]) == first["pid"] and os.getsid(first["pid"]) == os.getsid(0)
    state_file = service_home / "dashboard.json"
    assert state_file.stat().st_mode & 0o077 == 0  # the token file is private

    again = _dash()
    assert again.code == 0 and again.data["action"] == "reused" and again.data["pid"] == first["pid"]
    assert again.data["launch_url"] != first["launch_url"]  # a fresh single-use link each time
    for url in (first["launch_url"], again.data["launch_url"]):
        assert _open(url).status == 303
        assert _open(url).status == 403  # used up

    st = run_loopx(["dashboard", "--status", "--format", "json"], cwd=REPO)
    assert st.code == 0 and st.data["running"] and st.data["pid"] == first["pid"]
    assert st.data["version"] == __version__ and st.data["port"] == first["port"]
    assert st.data["host"] == "127.0.0.1" and st.data["current"] is True

    stop = run_loopx(["dashboard", "--stop", "--format", "json"], cwd=REPO)
    assert stop.code == 0 and stop.data["stopped"]
    assert not state_file.exists() and service.probe(first["port"]) is None
    st = run_loopx(["dashboard", "--status"], cwd=REPO)
    assert st.code == 1 and "not running" in st.out
    assert run_loopx(["dashboard", "--stop"], cwd=REPO).code == 0  # stopping twice is fine


def test_sigkill_then_start_recovers(service_home):
    first = _dash("--port", "0").data
    os.kill(first["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while service.pid_alive(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    st = run_loopx(["dashboard", "--status", "--format", "json"], cwd=REPO)
    assert st.code == 1 and st.data["stale"] is True
    r = _dash()
    assert r.code == 0, r.err
    assert r.data["action"] == "restarted" and r.data["pid"] != first["pid"]
    assert any("stale" in w for w in r.json["warnings"])
    assert service.probe(r.data["port"])["pid"] == r.data["pid"]


def test_a_stale_file_naming_a_live_foreign_process_is_never_signalled(service_home):
    service_home.mkdir(parents=True, exist_ok=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (service_home / "dashboard.json").write_text(json.dumps(
            {"pid": sleeper.pid, "port": 9, "version": __version__, "token": "t", "instance": "i"}))
        r = _dash("--port", "0")
        assert r.code == 0 and r.data["action"] == "restarted"
        assert sleeper.poll() is None  # not ours: left alone
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_unreadable_state_file_is_cleaned_up(service_home):
    service_home.mkdir(parents=True, exist_ok=True)
    (service_home / "dashboard.json").write_text("{not json")
    r = _dash("--port", "0")
    assert r.code == 0 and r.data["action"] == "restarted"
    assert service.read_state()["pid"] == r.data["pid"]


@pytest.mark.parametrize("change", ["version", "build"])
def test_a_server_of_another_version_or_build_is_replaced(service_home, tmp_path, change):
    old_src = tmp_path / "old-src"
    shutil.copytree(REPO / "src" / "loopx", old_src / "loopx", ignore=shutil.ignore_patterns("__pycache__"))
    old_version = "0.0.1" if change == "version" else __version__
    if change == "version":
        init = old_src / "loopx" / "__init__.py"
        init.write_text(init.read_text().replace(f'__version__ = "{__version__}"', '__version__ = "0.0.1"'))
    else:  # same version number, different dashboard code (an edited checkout)
        css = old_src / "loopx" / "dashboard" / "static" / "style.css"
        css.write_text(css.read_text() + "/* old build */\n")
    env = subprocess_env({"PYTHONPATH": str(old_src)})
    old = subprocess.Popen([sys.executable, "-m", "loopx", "dashboard", "--foreground", "--no-open", "--port", "0"],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        info = None
        while time.monotonic() < deadline:
            info = service.read_state()
            if info and info.get("pid") == old.pid and service._live(info):
                break
            time.sleep(0.05)
        assert info and info["version"] == old_version
        r = _dash()
        assert r.code == 0, r.err
        assert r.data["action"] == "upgraded" and r.data["version"] == __version__
        assert r.data["pid"] != old.pid
        assert old.wait(timeout=60) is not None  # the old server was stopped
        assert service.probe(r.data["port"])["version"] == __version__
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


def test_bad_options_are_usage_errors(service_home):
    r = run_loopx(["dashboard", "--port", "http"], cwd=REPO)
    assert r.code == 2 and "port" in r.err and "hint:" in r.err
    r = run_loopx(["dashboard", "--port", "70000"], cwd=REPO)
    assert r.code == 2
    r = run_loopx(["dashboard", "--status", "--stop"], cwd=REPO)
    assert r.code == 2
    r = run_loopx(["dashboard", "--unsafe-host", "a b"], cwd=REPO)
    assert r.code == 2


def test_foreground_refuses_when_one_already_runs(service_home):
    first = _dash("--port", "0").data
    r = run_loopx(["dashboard", "--foreground", "--no-open", "--port", "0"], cwd=REPO)
    assert r.code == 4 and str(first["pid"]) in r.err


def test_an_explicit_port_in_use_is_a_conflict(service_home):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_loopx(["dashboard", "--foreground", "--no-open", "--port", str(port)], cwd=REPO)
        assert r.code == 4 and "--port" in r.err
        r = run_loopx(["dashboard", "--no-open", "--port", str(port)], cwd=REPO)  # in the background too
        assert r.code == 4 and "cannot listen" in r.err and "--port" in r.err
        assert run_loopx(["dashboard", "--status"], cwd=REPO).code == 1


def test_the_log_of_a_background_server_has_no_token(service_home):
    d = _dash("--port", "0").data
    token = d["launch_url"].split("token=")[1]
    conn = http.client.HTTPConnection("127.0.0.1", d["port"], timeout=10)
    conn.request("GET", f"/launch?token={token}")
    assert conn.getresponse().status == 303
    conn.close()
    text = Path(d["log"]).read_text()
    assert "/launch" in text and token not in text


def test_the_wheel_ships_the_static_shell(tmp_path):
    pytest.importorskip("hatchling")
    out = tmp_path / "wheel"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                        str(REPO)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import zipfile

    (whl,) = out.glob("loopx-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    for name, _ctype in server_mod.STATIC.values():
        assert f"loopx/dashboard/static/{name}" in names


def test_another_address_needs_the_unsafe_flag_and_warns(service_home):
    r = _dash("--port", "0", "--unsafe-host", "127.0.0.2")
    assert r.code == 0, r.err
    assert any("listening on 127.0.0.2" in w for w in r.json["warnings"])
    text = run_loopx(["dashboard", "--no-open"], cwd=REPO)  # reuses it; the text form names the address
    assert text.code == 0 and "127.0.0.2" in text.out
    port = r.data["port"]
    assert r.data["launch_url"].startswith(f"http://127.0.0.2:{port}/launch?token=")
    assert service.probe(port, host="127.0.0.2")["pid"] == r.data["pid"]
    assert service.probe(port) is None  # bound to that address only
    assert run_loopx(["dashboard", "--stop"], cwd=REPO).code == 0
    assert service.probe(port, host="127.0.0.2") is None


def test_one_unreadable_project_does_not_break_the_overview(project, cli, client, tmp_path):
    from loopx.kernel.storage import registry

    _goal(project, cli, "fine", "f1")
    broken = tmp_path / "broken"
    broken.mkdir()
    assert cli("--project", str(broken), "connect").code == 0
    (broken / ".loopx" / "events.jsonl").unlink()
    (broken / ".loopx" / "events.jsonl").mkdir()
    assert str(broken) in registry.load()
    data = client.get("/api/status")
    rows = {p["name"]: p for p in data["projects"]}
    assert rows["broken"]["error"] and not rows["proj"]["error"]
    assert [g["id"] for g in rows["proj"]["goals"]] == ["fine"]
    agents = client.get("/api/agents")
    assert agents is not None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: the terminal checks are Linux's")
def test_a_dashboard_started_from_a_terminal_keeps_it_and_so_can_decide_while_an_agent_runs(service_home):
    """While an agent session runs, a process with no terminal up to its session's leader records no
    human decision (kernel.storage.agentseen.detached). The server used to start in a session of its
    own, so it had none: a dashboard started from a person's terminal could approve nothing while an
    agent ran (a reviewer's finding). Started from a terminal (a pty here), it keeps that terminal."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the person's terminal: a shell (its session's leader) where they type `loopx dashboard`
        env = subprocess_env({"LOOPX_HOME": str(service_home)})
        script = f"'{sys.executable}' -m loopx dashboard --no-open --port 0; echo READY; sleep 60"
        os.execve("/bin/sh", ["sh", "-c", script], env)
    out = b""
    deadline = time.monotonic() + 60
    while b"READY" not in out and time.monotonic() < deadline:
        try:
            more = os.read(fd, 4096)
        except OSError:
            break
        if not more:
            break
        out += more
    try:
        _check_server(out)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def _check_server(out: bytes) -> None:
    from loopx.kernel.storage import agentseen

    info = service.read_state()
    assert info and not info.get("corrupt"), out
    server = info["pid"]
    with open(f"/proc/{server}/stat", "rb") as fh:
        raw = fh.read()
    assert int(raw[raw.rindex(b")") + 2:].split()[4]) != 0, raw  # a controlling terminal: the pty
    assert agentseen.detached(server) is False
    # the old way, a session of its own, has none: what made every decision there refused
    lone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:  # Popen returns once the child has exec'd, after its setsid
        assert agentseen.detached(lone.pid) is True
    finally:
        lone.kill()
        lone.wait()
