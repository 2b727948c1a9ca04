"""What the suite holds to under ``CI=true`` (a pytest plugin, loaded by conftest.py).

- On Linux (where .ci/run and the workflow's Linux leg install the tools), a test that skips
  because a tool is missing (Chromium and playwright, OpenSSH's ``ssh-keygen``, ``flock``, Node,
  hatchling, git, loopx's own console script) fails instead: a green CI with the browser or the
  signing tests skipped would say they passed when they never ran. A skip for the platform
  (``os.name``, ``/proc``) stays a skip, and so does one for the real host CLIs (gemini, pi,
  opencode), which CI does not install, and every skip on the macOS and Windows legs, which have
  no Chromium or flock.
- The random order's seed (pytest-randomly) is printed at the end of every run, quiet or not, so a
  failure that depends on the order can be run again: ``pytest -p randomly --randomly-seed=N``.
"""

from __future__ import annotations

import os
import sys

import pytest

# Words of the skip reasons that name a tool CI must have (tests/test_*.py say them).
REQUIRED_IN_CI = ("playwright", "Chromium", "ssh-keygen", "flock", "Node >= 23", "hatchling",
                  "loopx console script", "needs git")


def in_ci() -> bool:
    """CI=true on Linux: the machines whose CI installs every tool the suite needs."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes") and sys.platform.startswith("linux")


def required_tool(reason: str) -> str | None:
    """The REQUIRED_IN_CI word a skip ``reason`` names, or None."""
    return next((w for w in REQUIRED_IN_CI if w.lower() in reason.lower()), None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not (rep.skipped and in_ci()) or hasattr(rep, "wasxfail"):
        return
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    if required_tool(reason):
        rep.outcome = "failed"
        rep.longrepr = (f"CI=true, and this test skipped: {reason.removeprefix('Skipped: ')}\n"
                        "CI must run it: install the tool in .ci/run (tests/ci_rules.py)")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    seed = getattr(config.option, "randomly_seed", None)
    if seed is not None and config.pluginmanager.has_plugin("randomly"):
        terminalreporter.write_line(f"random order: rerun it with -p randomly --randomly-seed={seed}")
