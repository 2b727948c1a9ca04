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


def test_demo_by_default_lives_in_the_data_folder_and_keeps_counting_turns(tmp_path):
    """Run from a checkout, the demo must not drop loopx-demo/ into it; it says where it went; the
    turns after the approval go on counting from the first run's."""
    import os

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    r = run_loopx(["demo", "--json"], cwd=checkout, timeout=180)
    assert r.code == 0, r.err
    d = json.loads(r.out)["data"]
    home = os.environ["LOOPX_HOME"]
    assert d["dir"] == os.path.join(os.path.realpath(home), "demo") and list(checkout.iterdir()) == []
    assert [t["number"] for t in d["turns"]] == [1, 2, 3, 4] and d["continue_command"] == "loopx demo"
    text = run_loopx(["demo"], cwd=checkout, timeout=120)
    assert f"demo project: {d['dir']}  (0 turns this time)" in text.out
    gate = d["gate_id"]
    assert run_loopx(["--project", d["dir"], "gate", "approve", gate, "--confirm", gate], cwd=checkout).code == 0
    r2 = run_loopx(["demo"], cwd=checkout, timeout=180)
    assert r2.code == 0, r2.err
    assert "(1 turn this time)" in r2.out and "turn 5: " in r2.out and "turn 1: " not in r2.out
    assert "5 turns (5 finished)" in r2.out and "1 unproductive turn listed, 0 stalls, 0 skip decisions." in r2.out
    assert " :" not in r2.out.split("Review packet:")[1]
    assert list(checkout.iterdir()) == []


def test_review_packet_counts_in_the_singular():
    from loopx.kernel.policy.review import render_markdown

    d = {"goal": {"id": "g", "objective": "o", "status": "active", "created": "2026-01-01T00:00:00Z"},
         "period": {"since": None, "until": "2026-01-02T00:00:00Z"},
         "progress": {"counts": {"done": 0, "open": 1, "claimed": 0, "expired": 0, "blocked": 1}, "done": [],
                      "open": [], "blocked": [{"title": "t", "id": "t-1", "status": "blocked", "note": None}]},
         "rounds": {"count": 1, "finished": 1, "verified": 0, "progress_rate": 0.0, "slots_spent": 0,
                    "budget": {"spent": 0, "slots": 1, "window": 86400, "left": 1}, "by_result": {}},
         "gates": {"pending": [], "decided": []},
         "evidence": {"tests": [], "commits": [{"id": "ev-1", "commit": None, "summary": "merged"}]},
         "problems": {"failures": [], "stalls": 1, "skips": 1}, "next_steps": []}
    md = render_markdown(d)
    assert "1 turn (1 finished)" in md and "0 unproductive turns listed, 1 stall, 1 skip decision." in md
    assert "- commit `ev-1`: merged" in md and "(`t-1`, blocked)" in md and " :" not in md


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
