"""The dashboard's experiment view in Chromium (issue 20, acceptance 6): the research demo's
experiment, its chart (kept, discarded and crashed points distinct, the frontier as a step line,
the hypothesis on hover and focus), the trial table and the promote gate's card with the holdout
result. Playwright drives Debian's Chromium, as in test_dashboard_browser.py."""

from __future__ import annotations

import pytest

from conftest import run_loopx
from loopx.dashboard import server as server_mod
from test_dashboard_browser import ARTIFACTS, browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.browser


@pytest.fixture
def research(tmp_path):
    demo = tmp_path / "rd"
    r = run_loopx(["demo", "--research", "--dir", demo, "--json"], cwd=tmp_path, timeout=300)
    assert r.code == 0, r.err
    srv = server_mod.make_server("127.0.0.1", 0)
    server_mod.serve_in_thread(srv)
    try:
        yield {"srv": srv, "data": r.data, "dir": demo}
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_experiment_view_renders_chart_table_and_promote_card(browser, research):  # noqa: F811
    d = research["data"]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(research["srv"].launch_url)
    page.locator("a.goal-link", has_text="knn").first.click()
    chart = page.locator("svg.exp-chart")
    chart.wait_for(timeout=60000)
    n = 1 + len(d["turns"])
    assert page.locator("svg.exp-chart g.pt").count() == n
    assert page.locator("svg.exp-chart g.pt-keep circle").count() == d["summary"]["kept"] + 1  # and the baseline
    assert page.locator("svg.exp-chart g.pt-discard circle").count() == d["summary"]["discarded"]
    assert page.locator("svg.exp-chart g.pt-crash path").count() == d["summary"]["crashed"] == 1
    step = page.locator("svg.exp-chart path.frontier").get_attribute("d")
    assert step.startswith("M ") and " H " in step and " V " in step
    # the hypothesis on hover and on keyboard focus
    crash = next(t["trial"] for t in d["turns"] if t["trial"]["decision"] == "crash")
    page.locator(f'svg.exp-chart g[data-trial="{crash["trial_id"]}"]').hover()
    assert crash["hypothesis"][:40] in page.locator("p.exp-caption").inner_text()
    page.locator("svg.exp-chart g.pt").first.focus()
    assert "baseline" in page.locator("p.exp-caption").inner_text()
    assert page.locator(f'svg.exp-chart g[data-trial="{crash["trial_id"]}"] title').text_content().startswith(crash["trial_id"])
    # the table: one row per trial, newest first, with the agent's claims shown as claims
    rows = page.locator("table.trials tbody tr")
    assert rows.count() == n
    assert "(claimed 0.99)" in rows.first.inner_text()
    # the promote gate's card, with the holdout result for the human
    card = page.locator(f'section.experiment article[data-gate="{d["gate_id"]}"]')
    card.wait_for()
    holdout = page.locator("section.experiment p.holdout").inner_text()
    assert holdout.startswith("holdout (for you only): val_acc=") and holdout.endswith(str(round(d["holdout"]["value"], 4)).rstrip("0"))
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("section.experiment").screenshot(path=str(ARTIFACTS / "dashboard-experiment.png"))
    assert not errors, errors
