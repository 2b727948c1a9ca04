"""`loopx demo` end to end with real processes: it reaches the merge gate, a scripted human
approves it with `loopx gate approve ID --confirm ID`, and the second `loopx demo` reaches done."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import run_loopx

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the demo needs git")


def test_demo_stops_at_the_gate_then_finishes_after_approval(tmp_path):
    demo = tmp_path / "demo"
    r = run_loopx(["demo", "--dir", demo, "--json"], cwd=tmp_path, timeout=180)
    assert r.code == 0, r.err
    d = json.loads(r.out)["data"]
    assert d["stage"] == "gate" and d["fresh"] is True
    assert [t["result"] for t in d["turns"]] == ["completion"] * 3 + ["blocked"]
    assert [t["slots"] for t in d["turns"]] == [1, 1, 1, 0]
    gate = d["gate_id"]
    assert d["approve_command"].endswith(f"gate approve {gate} --confirm {gate}")
    # the three fixes are real commits on the work branch; main is untouched until approval
    log = subprocess.run(["git", "log", "--oneline", "main..loopx/fixes"], cwd=demo, capture_output=True, text=True)
    assert len(log.stdout.splitlines()) == 3
    tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=demo, capture_output=True, text=True)
    assert tests.returncode == 0, tests.stderr

    # running the demo again without approval stays at the gate and runs no turn
    again = run_loopx(["demo", "--dir", demo, "--json"], cwd=tmp_path, timeout=120)
    assert again.code == 0 and json.loads(again.out)["data"]["stage"] == "gate"
    assert json.loads(again.out)["data"]["turns"] == []

    ok = run_loopx(["--project", demo, "gate", "approve", gate, "--confirm", gate], cwd=tmp_path)
    assert ok.code == 0, ok.err
    r2 = run_loopx(["demo", "--dir", demo], cwd=tmp_path, timeout=180)
    assert r2.code == 0, r2.err
    assert "The goal is done" in r2.out and "# Review: demo" in r2.out
    status = run_loopx(["--project", demo, "goal", "show", "demo", "--json"], cwd=tmp_path)
    assert '"done"' in status.out
    head = subprocess.run(["git", "log", "-1", "--format=%s", "main"], cwd=demo, capture_output=True, text=True)
    assert head.stdout.startswith("Merge loopx/fixes")


def test_demo_approve_runs_to_done_in_one_go(tmp_path):
    demo = tmp_path / "d"
    r = run_loopx(["demo", "--dir", demo, "--approve", "--json"], cwd=tmp_path, timeout=180)
    assert r.code == 0, r.err
    d = json.loads(r.out)["data"]
    assert d["stage"] == "done" and "## Gates" in d["review"] and d["suite_after"] == "OK"
    assert [t["result"] for t in d["turns"]] == ["completion"] * 3 + ["blocked", "completion"]


def test_demo_refuses_a_non_demo_directory(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file.txt").write_text("mine")
    r = run_loopx(["demo", "--dir", tmp_path / "busy"], cwd=tmp_path)
    assert r.code == 2 and "not a loopx demo" in r.err
    assert (tmp_path / "busy" / "file.txt").read_text() == "mine"


def test_demo_approve_is_refused_for_an_agent(tmp_path):
    r = run_loopx(["--agent", "bot", "demo", "--dir", tmp_path / "x", "--approve"], cwd=tmp_path)
    assert r.code == 4 and "human" in r.err
    assert not (tmp_path / "x").exists()
