"""``loopx.api``: typed results over the same kernel functions the CLI uses, and the example
custom runner completing a real turn end to end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, subprocess_env
from loopx import api
from loopx.errors import NotConnected, UsageError


def test_connect_creates_or_refuses(tmp_path):
    with pytest.raises(NotConnected):
        api.connect(str(tmp_path), create=False)
    conn = api.connect(str(tmp_path), agent="bot")
    assert conn.created and conn.actor == "agent:bot" and (tmp_path / ".loopx" / "format.json").exists()
    again = api.connect(str(tmp_path), agent="bot", create=False)
    assert not again.created and again.project == conn.project
    with pytest.raises(UsageError):
        api.connect(str(tmp_path), agent="not a name!")


def test_a_full_turn_through_the_api(goal, project):
    conn = api.connect(str(project), agent="bot", create=False)
    d = api.should_run(conn)
    assert isinstance(d, api.Decision) and d.run and d.goal_id == "g1" and d.todo_id
    turn = api.next_turn(conn)
    assert turn.started and turn.run_id and turn.todo_id == d.todo_id and "Make the tests pass" in turn.packet_text
    ev = api.add_evidence(conn, turn.run_id, kind="test", summary="all 3 tests pass", command="pytest -q", exit_code=0)
    assert ev.evidence_id.startswith("ev-") and ev.goal_id == "g1"
    done = api.finish_turn(conn, turn.run_id, "completion", evidence=[ev.evidence_id], verify=True)
    assert done.verified and done.result == "completion" and ev.evidence_id in done.evidence
    receipt = api.spend_slot(conn, turn.run_id)
    assert receipt.spent and not receipt.repeat and receipt.slots == 1
    assert api.spend_slot(conn, turn.run_id).repeat
    s = api.status(conn)
    g = s.goals[0]
    assert g["id"] == "g1" and g["todos"]["done"] == 1 and g["budget"]["spent"] == 1


def test_open_gate_makes_should_run_wait_for_a_human(goal, project):
    conn = api.connect(str(project), agent="bot", create=False)
    gate = api.open_gate(conn, "merge", "Merge PR #3 into main?")
    assert gate.kind == "merge" and gate.goal_id == "g1" and gate.blocks == ()
    d = api.should_run(conn)
    assert not d.run and d.decision == "wait_human" and d.gate_id == gate.gate_id
    turn = api.next_turn(conn)
    assert not turn.started and turn.run_id is None and turn.decision.decision == "wait_human"
    with pytest.raises(UsageError):
        api.open_gate(conn, "deploy", "Deploy?")


def test_spend_is_refused_for_an_unverified_run(goal, project):
    conn = api.connect(str(project), agent="bot", create=False)
    turn = api.next_turn(conn)
    api.finish_turn(conn, turn.run_id, "no_progress")
    receipt = api.spend_slot(conn, turn.run_id)
    assert not receipt.spent and receipt.reason == "not_verified"


def test_importing_the_api_loads_no_kernel_module():
    code = "import sys, loopx.api; print(sorted(m for m in sys.modules if m.startswith('loopx.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env()).stdout
    assert out.strip() == "['loopx.api', 'loopx.codecache']"  # and the package's own finder (loopx/__init__.py)


def test_the_example_custom_runner_completes_a_turn(project, cli):
    (project / "src").mkdir()
    r = cli("start-goal", "--goal-text", "Write the greeting", "--goal-id", "hello", "--todo", "write src/hello.txt",
            "--verify", f"{sys.executable} -c \"import pathlib,sys; sys.exit(not pathlib.Path('src/hello.txt').exists())\"")
    assert r.code == 0, r.err
    agent = f"{sys.executable} -c \"import pathlib; pathlib.Path('src/hello.txt').write_text('hi'); print('loopx-result: completion')\""
    runner = REPO / "examples" / "custom-runner" / "runner.py"
    assert len(runner.read_text(encoding="utf-8").splitlines()) < 100
    proc = subprocess.run([sys.executable, str(runner), "--project", str(project), "--agent", "example",
                           "--agent-cmd", agent, "--max-turns", "3"], capture_output=True, text=True,
                          env=subprocess_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "completion, verified=True, 1 slot spent" in proc.stdout and "1 turn(s) run" in proc.stdout
    g = cli("status", json=True).data["goals"][0]
    assert g["todos"]["done"] == 1 and g["budget"]["spent"] == 1
    assert g["last_run"]["agent"] == "agent:example" and g["last_run"]["verified"] is True
