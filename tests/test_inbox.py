"""``loopx inbox`` across projects and ``loopx disconnect`` (issue 13, acceptance 5)."""

from __future__ import annotations

import shutil

import pytest


def _project(tmp_path, cli, name, goal_args):
    d = tmp_path / name
    d.mkdir()
    assert cli("--project", d, "connect", "--quiet").code == 0
    r = cli("--project", d, "start-goal", "--goal-id", name, *goal_args, json=True)
    assert r.code == 0, r.out
    return d


@pytest.fixture
def three(tmp_path, cli, clk):
    gated = _project(tmp_path, cli, "gated", ["--goal-text", "Release 2.0", "--todo", "tag it"])
    r = cli("--project", gated, "--agent", "bot", "gate", "open", "--kind", "release",
            "--question", "Publish 2.0 to PyPI?", json=True)
    assert r.code == 0
    stalled = _project(tmp_path, cli, "stalled", ["--goal-text", "Fix the flaky test", "--todo", "fix it"])
    assert cli("--project", stalled, "quota", "set", "--stall-after", "1").code == 0
    clk.advance(60)
    t = cli("--project", stalled, "--agent", "bot", "next", json=True).data
    assert cli("--project", stalled, "--agent", "bot", "turn", "finish", "--run", t["run_id"], "--result",
               "no_progress").code == 0
    fine = _project(tmp_path, cli, "fine", ["--goal-text", "Write docs", "--todo", "write the guide"])
    clk.advance(60)
    return {"gated": gated, "stalled": stalled, "fine": fine, "gate_id": r.data["gate_id"]}


def test_inbox_lists_pending_gates_and_stalled_goals_only(three, cli):
    r = cli("inbox", json=True)
    assert r.code == 0
    items = r.data["items"]
    assert [(i["kind"], i["goal"]) for i in items] == [("goal", "stalled"), ("gate", "gated")]  # newest first
    gate = items[1]
    assert gate["question"] == "Publish 2.0 to PyPI?" and gate["gate_id"] == three["gate_id"]
    assert gate["command"] == f"loopx --project {three['gated']} gate approve {three['gate_id']}"
    assert items[0]["reason"] == "stalled"
    text = cli("inbox").out
    assert "Publish 2.0 to PyPI?" in text and "stalled" in text and "fine" not in text


def test_disconnect_removes_a_deleted_project_from_inbox_and_dashboard(three, cli, clk):
    from loopx.dashboard.api import Api

    shutil.rmtree(three["fine"])
    items = cli("inbox", json=True).data["items"]
    assert [i["kind"] for i in items if i["project"] == str(three["fine"])] == ["missing"]
    assert any(p["path"] == str(three["fine"]) and p["error"] for p in Api().status(clk.iso)["projects"])
    r = cli("disconnect", three["fine"], json=True)
    assert r.code == 0 and r.data["removed"] and r.data["files_touched"] is False
    assert all(i["project"] != str(three["fine"]) for i in cli("inbox", json=True).data["items"])
    assert all(p["path"] != str(three["fine"]) for p in Api().status(clk.advance(1))["projects"])
    r = cli("forget", three["fine"], json=True)  # the alias; already gone: exit 2 with a hint
    assert r.code == 2 and r.json["error"]["hint"]
    # disconnecting a live project leaves its files alone
    assert cli("disconnect", "--project", three["gated"]).code == 0
    assert (three["gated"] / ".loopx" / "events.jsonl").exists()
    assert cli("--project", three["gated"], "status").code == 0


def test_agents_cannot_disconnect(three, cli, monkeypatch):
    monkeypatch.setenv("CURSOR_AGENT", "1")
    r = cli("disconnect", three["gated"], json=True)
    assert r.code == 4 and r.json["error"]["code"] == "human_required"


def test_inbox_with_nothing_registered(cli):
    r = cli("inbox", json=True)
    assert r.code == 0 and r.data == {"items": [], "count": 0, "projects": 0}
