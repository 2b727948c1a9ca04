"""The suite's own rules (tests/ci_rules.py): under CI=true a skip for a missing tool that CI
installs is a failure, a skip for the platform is not; the random order's seed is printed."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

SAMPLE = '''
import pytest

def test_signing():
    pytest.skip("ssh-keygen (openssh-client) is missing")

def test_browser():
    pytest.skip("Chromium not found at /usr/bin/chromium (.ci/run installs Debian's chromium)")

@pytest.mark.skipif(True, reason="symlinks and modes are POSIX here")
def test_platform():
    pass

def test_plain():
    pass
'''


def _pytest(tmp_path, ci: str | None, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(REPO / "tests") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "ci_rules",
                           *extra, str(tmp_path / "test_sample.py")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_under_ci_a_missing_tool_fails_and_a_platform_skip_stays_a_skip(tmp_path):
    got = _pytest(tmp_path, "true")
    assert got.returncode == 1, got.stdout + got.stderr
    assert "2 failed, 1 passed, 1 skipped" in got.stdout, got.stdout
    assert "CI must run it" in got.stdout and "ssh-keygen (openssh-client) is missing" in got.stdout


def test_outside_ci_a_missing_tool_is_a_skip_with_its_reason(tmp_path):
    got = _pytest(tmp_path, None)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "1 passed, 3 skipped" in got.stdout and "ssh-keygen (openssh-client) is missing" in got.stdout
    assert _pytest(tmp_path, "false").returncode == 0


def test_the_random_order_seed_is_printed_even_when_quiet(tmp_path):
    got = _pytest(tmp_path, None, "-p", "randomly", "--randomly-seed=4242")
    assert "random order: rerun it with -p randomly --randomly-seed=4242" in got.stdout, got.stdout
