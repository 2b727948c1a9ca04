"""The dashboard in a real browser: Playwright driving Debian's headless Chromium (never a
downloaded browser). Skips with a reason when Chromium or Playwright is missing.

Opens the launch URL, finds the goal and its pending gate, approves it with the typed short code
and finds the ``gate.approved`` event (channel ``dashboard``) in the store; agent text with HTML
and ``</script>`` renders as inert text; the service worker caches only the shell; when the API
stops answering the page says so instead of showing old data. Saves screenshots to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import HUMAN, REPO
from loopx import __version__
from loopx.dashboard import server as server_mod
from loopx.dashboard.api import project_key
from loopx.kernel.policy import turn
from loopx.kernel.storage.store import Store
from loopx.kernel.write import evidence, gates

CHROMIUM = os.environ.get("LOOPX_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts"
XSS_TITLE = 'fix <img src=x onerror="window.__pwned=1"> then </script><script>window.__pwned=2</script>'
XSS_SUMMARY = 'suite green <img src=x onerror=window.__pwned=3> </script><b>bold?</b>'

pytestmark = pytest.mark.browser


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)) and not shutil.which("chromium"):
        pytest.skip(f"Chromium not found at {CHROMIUM} (.ci/run installs Debian's chromium)")
    return sync_playwright


@pytest.fixture
def browser():
    sync_playwright = _playwright()
    with sync_playwright() as p:
        exe = CHROMIUM if os.path.isfile(CHROMIUM) else shutil.which("chromium")
        try:
            b = p.chromium.launch(executable_path=exe, headless=True, args=ARGS)
        except Exception as exc:  # a broken Chromium install is an environment problem, not a failure
            pytest.skip(f"Chromium did not start: {str(exc).splitlines()[0]}")
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def scene(project, cli):
    r = cli("start-goal", "--goal-text", "Ship the parser rewrite", "--goal-id", "parser", "--done-when",
            "all parser tests pass", "--verify", f"{sys.executable} -c pass", "--scope", "src/**",
            "--protect", "merge", "--todo", XSS_TITLE, "--todo", "write the changelog", json=True)
    assert r.code == 0, r.err
    st = Store.open(str(project))
    t = turn.next_turn(st, "agent:claude", goal_id="parser")
    ev = evidence.add(st, "agent:claude", "parser", kind="test", summary=XSS_SUMMARY, run=t["run_id"], exit_code=0)
    turn.finish(st, "agent:claude", t["run_id"], "progress", evidence=[ev["evidence_id"]], verify=True)
    turn.spend_slot(st, "agent:claude", t["run_id"])
    gate = gates.open_gate(st, "agent:claude", "parser", kind="merge", question="Merge branch parser-rewrite into main?",
                           context="12 files changed, all tests green </script><img src=x onerror=window.__pwned=4>")
    srv = server_mod.make_server("127.0.0.1", 0)
    server_mod.serve_in_thread(srv)
    try:
        yield {"srv": srv, "gate": gate["gate_id"], "project": project, "key": project_key(str(project))}
    finally:
        srv.shutdown()
        srv.server_close()


def _events(project: Path) -> list[dict]:
    return [json.loads(line) for line in (project / ".loopx" / "events.jsonl").read_text().splitlines() if line]


def test_approve_a_gate_in_the_browser(browser, scene):
    ARTIFACTS.mkdir(exist_ok=True)
    srv, gate_id = scene["srv"], scene["gate"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(srv.launch_url)
    assert "token" not in page.url  # exchanged for a cookie and removed from the address bar
    assert page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read the session

    card = page.locator("article.card", has_text="Ship the parser rewrite")
    card.wait_for(timeout=60000)
    assert "Merge branch parser-rewrite into main?" in card.inner_text()
    page.locator("a.goal-link", has_text="parser").click()
    gate = page.locator(f'article[data-gate="{gate_id}"]')
    gate.wait_for(timeout=60000)
    page.get_by_text("write the changelog").wait_for()
    page.screenshot(path=str(ARTIFACTS / "dashboard-goal.png"), full_page=True)

    # agent text is inert: shown literally, no element created, no script run
    page.get_by_text(XSS_TITLE, exact=True).wait_for()
    page.get_by_text(XSS_SUMMARY).first.wait_for()
    assert page.locator('img[src="x"]').count() == 0
    assert page.locator("main b").count() == 0
    assert page.evaluate("window.__pwned") is None

    approve = gate.locator("button.approve")
    assert approve.is_disabled()  # nothing happens without the typed code
    gate.locator("input.code-input").fill("000000")
    assert approve.is_disabled()
    gate.locator("input.code-input").fill(gates.short_code(gate_id))
    assert approve.is_enabled()
    approve.click()
    page.locator(f'article[data-gate="{gate_id}"].gate-approved').wait_for(timeout=60000)
    approved = [e for e in _events(scene["project"]) if e["type"] == "gate.approved"]
    assert len(approved) == 1
    rec = approved[0]
    assert rec["data"]["gate_id"] == gate_id and rec["data"]["channel"] == "dashboard"
    assert rec["actor"] == HUMAN and "Chrome" in rec["data"]["user_agent"]

    page.get_by_role("button", name="Load the review packet").click()
    review = page.locator("pre.review")
    review.wait_for(timeout=60000)
    assert "Ship the parser rewrite" in review.inner_text()
    assert not errors, errors


def test_service_worker_caches_only_the_shell(browser, scene):
    page = browser.new_page()
    page.goto(scene["srv"].launch_url)
    page.locator("article.card").first.wait_for(timeout=60000)
    page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    page.reload()  # now controlled by the worker: API calls pass through it
    page.locator("article.card").first.wait_for(timeout=60000)
    page.evaluate("fetch('/api/status').then(r => r.json())")
    cached = page.evaluate("""async () => {
        const out = [];
        for (const name of await caches.keys()) {
            const cache = await caches.open(name);
            for (const req of await cache.keys()) out.push([name, new URL(req.url).pathname + new URL(req.url).search]);
        }
        return out;
    }""")
    assert cached, "the shell was cached"
    assert {name for name, _ in cached} == {f"loopx-shell-{__version__}"}
    paths = {p for _, p in cached}
    assert "/app.js" in paths and "/" in paths
    assert not any(p.startswith("/api/") or p.startswith("/launch") or "?" in p for p in paths), paths


def test_the_page_says_so_when_the_api_stops_answering(browser, scene):
    srv = scene["srv"]
    page = browser.new_page()
    page.goto(srv.launch_url)
    page.locator("article.card", has_text="Ship the parser rewrite").wait_for(timeout=60000)
    srv.shutdown()
    srv.server_close()
    page.locator("#live.live-bad").wait_for(timeout=60000)
    assert "Nothing on this page is live" in page.locator("#banner").inner_text()
    assert page.locator("article.card").count() == 0  # the old data is gone, not shown as current
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-offline.png"))


def test_a_new_gate_shows_one_system_notification(browser, project, cli):
    """Issue 13, acceptance 6: with notification permission granted, a newly opened gate appears as
    exactly one system notification (the Notifications API, observed through a recording wrapper)."""
    assert cli("start-goal", "--goal-text", "Release 2.0", "--goal-id", "rel", "--todo", "tag it").code == 0
    st = Store.open(str(project))
    old = gates.open_gate(st, "agent:claude", "rel", kind="custom", question="An older question?")
    srv = server_mod.make_server("127.0.0.1", 0)
    server_mod.serve_in_thread(srv)
    try:
        origin = srv.launch_url.split("/launch")[0]
        ctx = browser.new_context()
        ctx.grant_permissions(["notifications"], origin=origin)
        ctx.add_init_script("""
            window.__notes = [];
            const Real = window.Notification;
            class Spy {
              constructor(title, opts) { window.__notes.push({ title, body: (opts || {}).body, tag: (opts || {}).tag }); }
              static get permission() { return Real ? Real.permission : "granted"; }
              static requestPermission() { return Real.requestPermission(); }
            }
            window.Notification = Spy;
        """)
        page = ctx.new_page()
        polls: list[str] = []
        page.on("response", lambda r: polls.append(r.url) if "/api/notices" in r.url else None)

        def until(cond, what: str, tries: int = 300) -> None:  # wait for a condition, checked per 100 ms
            for _ in range(tries):
                if cond():
                    return
                page.wait_for_timeout(100)
            pytest.fail(f"timed out waiting for {what}")

        page.goto(srv.launch_url)
        page.locator("article.card", has_text="Release 2.0").wait_for(timeout=15000)
        assert page.evaluate("Notification.permission") == "granted"
        until(lambda: page.evaluate("localStorage.getItem('loopx.notices.seen')") is not None, "the first poll")
        assert page.evaluate("window.__notes") == []  # what was there before the page opened is not replayed
        gate = gates.open_gate(st, "agent:claude", "rel", kind="release", question="Publish 2.0 to PyPI?")
        until(lambda: page.evaluate("window.__notes.length") >= 1, "the notification")
        seen = len(polls)
        until(lambda: len(polls) >= seen + 3, "three more polls")  # and it is still exactly one
        notes = page.evaluate("window.__notes")
        assert len(notes) == 1, notes
        assert gate["gate_id"] in notes[0]["title"] and "Publish 2.0 to PyPI?" in notes[0]["body"]
        assert old["gate_id"] not in json.dumps(notes)
        ctx.close()
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_trace_file_in_the_browser_is_read_only_with_banner_and_timeline(browser, project, cli):
    """``loopx dashboard --trace FILE`` as a real process: the banner names the goal and the export,
    the timeline shows turns, evidence and gates in order, and no decision form exists."""
    from test_dashboard_trace import XSS, Served, make_trace, tamper

    ARTIFACTS.mkdir(exist_ok=True)
    trace = make_trace(project, cli)
    for path, extra, state in ((trace, (), "· verified"), (tamper(trace), ("--no-verify",), "not verified")):
        s = Served(path, *extra, login=False)
        try:
            with tarfile.open(path, "r:gz") as tar:
                exported = json.loads(tar.extractfile("manifest.json").read())["exported_at"]
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            page.goto(s.link)
            page.locator("ol.trace-timeline li").first.wait_for(timeout=60000)
            banner = page.locator("#trace-banner")
            assert banner.is_visible()
            text = banner.inner_text()
            assert "Read-only trace" in text and "goal parser" in text and exported in text and state in text
            assert page.locator("header.top nav").is_hidden()  # no overview or agents of projects
            items = page.locator("ol.trace-timeline li")
            types = [items.nth(i).get_attribute("data-type") for i in range(items.count())]
            assert types.index("run.started") < types.index("evidence.added") < types.index("gate.opened") \
                < types.index("gate.approved")
            page.locator("ol.trace-timeline li", has_text="212 passed").wait_for()
            assert page.locator("article[data-gate]").count() == 2
            assert page.locator("button.approve, button.reject, input.code-input").count() == 0
            page.locator("ol.trace-timeline li", has_text=XSS).wait_for()  # agent text stays inert text
            assert page.locator('img[src="x"]').count() == 0 and page.locator("main b").count() == 0
            assert page.evaluate("window.__pwned") is None
            page.get_by_text("still pending when the trace was exported").wait_for()
            page.get_by_role("button", name="Show the review packet").click()
            page.locator("pre.review", has_text="Ship the parser rewrite").wait_for()
            name = "dashboard-trace.png" if not extra else "dashboard-trace-unverified.png"
            page.screenshot(path=str(ARTIFACTS / name), full_page=True)
            assert errors == []
            page.close()
        finally:
            assert s.stop() == 0
