"""Fixing a broken experiment measure (docs/experiments.md, "A baseline that crashes"), through the
real CLI in a real git repository with a real measure command: `goal update --measure` and its
siblings (human-only; the measure and pattern only before a baseline was measured), a crashed
baseline's next step is the fix, `experiment baseline` exits 1 when it crashes again, and an
uncommitted fix of the measure's files is named (the baseline measures committed code)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import run_loopx
from test_experiments import _pre_tool, git, repo  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
                                reason="experiments need git")

PY = sys.executable
TYPO = "pyhton-loopx-no-such-program eval.py"


def start_typo(proj, *extra):
    return run_loopx(["start-goal", "--goal-text", "tune", "--goal-id", "knn", "--experiment", "--metric", "val_acc",
                      "--measure", TYPO, *extra], cwd=proj, timeout=120)


def show(proj) -> dict:
    r = run_loopx(["experiment", "show", "knn", "--json"], cwd=proj)
    assert r.code == 0, r.err
    return r.data


def test_a_typo_in_the_measure_is_fixed_with_goal_update_then_frozen_once_a_baseline_measured(repo):  # noqa: F811
    r = start_typo(repo)
    assert r.code == 0, r.err  # the goal started; its baseline did not measure
    assert "crashed" in r.out
    nxt = [x for x in r.out.splitlines() if x.startswith("next: ")]
    assert nxt and "loopx goal update knn --measure" in nxt[0] and "loopx experiment baseline knn" in nxt[0], r.out
    assert "loopx run" not in r.out

    again = run_loopx(["experiment", "baseline", "knn"], cwd=repo, timeout=120)
    assert again.code == 1, (again.out, again.err)  # crashed again: a clean "no", with the output and the fix
    assert "crash" in again.out and "not found" in again.out  # the shell's line from the tail
    assert "next: fix the measure command (loopx goal update knn --measure CMD)" in again.out
    j = run_loopx(["experiment", "baseline", "knn", "--json"], cwd=repo, timeout=120)
    assert j.code == 1 and j.data["decision"] == "crash" and j.data["tail"]

    fixed = f"{PY} eval.py"
    agent = run_loopx(["goal", "update", "knn", "--measure", fixed], cwd=repo, env={"LOOPX_AGENT": "a"})
    assert agent.code == 4 and "human" in agent.err
    assert show(repo)["measure"] == TYPO
    u = run_loopx(["goal", "update", "knn", "--measure", fixed, "--json"], cwd=repo)
    assert u.code == 0, u.err
    assert u.data["changed"] == ["measure"] and u.data["next"] == "loopx experiment baseline knn"
    assert show(repo)["measure"] == fixed
    b = run_loopx(["experiment", "baseline", "knn", "--json"], cwd=repo, timeout=120)
    assert b.code == 0 and b.data["decision"] == "keep" and b.data["value"] == 0.5, b.out
    assert run_loopx(["quota", "should-run", "--json"], cwd=repo).data["reason"] == "trial"

    # a measured baseline freezes the numbers: a new measure or pattern is refused, nothing recorded
    for flag, value in (("--measure", f"{PY} eval.py --other"), ("--metric-pattern", r"val_acc: (?P<value>\S+)")):
        no = run_loopx(["goal", "update", "knn", flag, value, "--json"], cwd=repo)
        assert no.code == 4 and no.json["error"]["code"] == "measure_frozen", no.out
    no = run_loopx(["goal", "update", "knn", "--measure", "x"], cwd=repo)
    assert no.code == 4 and "start a new experiment goal" in no.err and len(no.err.strip().splitlines()) == 2
    assert show(repo)["measure"] == fixed
    # what decides keep or discard, not the numbers, still changes
    ok = run_loopx(["goal", "update", "knn", "--trial-timeout", "2m", "--min-delta", "0.05", "--guard", f"{PY} -c pass",
                    "--priority", "3", "--json"], cwd=repo)
    assert ok.code == 0, ok.err
    assert ok.data["changed"] == ["guard", "min_delta", "priority", "trial_timeout"] and "next" not in ok.data
    s = show(repo)
    assert s["min_delta"] == 0.05 and s["guard"] == f"{PY} -c pass"
    assert run_loopx(["goal", "update", "knn", "--guard", "", "--json"], cwd=repo).code == 0
    assert show(repo)["guard"] is None


def test_bad_values_and_plain_goals_are_one_line_errors(repo):  # noqa: F811
    assert start_typo(repo).code == 0
    for args, code in ((["--trial-timeout", "-5"], 2), (["--min-delta", "x"], 2), (["--metric-pattern", "(open"], 2)):
        r = run_loopx(["goal", "update", "knn", *args], cwd=repo)
        assert r.code == code and r.err.startswith("loopx: error: ") and len(r.err.strip().splitlines()) == 2, (args, r.err)
    r = run_loopx(["start-goal", "--goal-text", "plain", "--goal-id", "plain"], cwd=repo)
    assert r.code == 0, r.err
    r = run_loopx(["goal", "update", "plain", "--measure", "x", "--json"], cwd=repo)
    assert r.code == 2 and r.json["error"]["code"] == "not_an_experiment"


def test_the_protected_measuring_follows_the_new_command(repo, monkeypatch):  # noqa: F811
    (repo / "eval2.py").write_text("print('val_acc: 0.7')\n")
    git(repo, "add", "eval2.py")
    git(repo, "commit", "-q", "-m", "eval2")
    assert start_typo(repo).code == 0
    monkeypatch.chdir(repo)
    wt = repo / ".loopx" / "worktrees" / "exp-knn"
    edit = ("Write", {"file_path": str(wt / "eval2.py"), "content": "print('val_acc: 1')"})
    assert _pre_tool(repo, *edit, cwd=wt).get("allow") is True  # not measured by anything yet
    assert run_loopx(["goal", "update", "knn", "--measure", f"{PY} eval2.py"], cwd=repo).code == 0
    info = _pre_tool(repo, *edit, cwd=wt)
    assert info.get("allow") is False and "measure command of experiment knn" in info["reason"]
    # the agent cannot change the measuring through loopx either: the guard, and the sandbox's broker
    for cmd in (f"loopx goal update knn --measure '{PY} x.py'", "loopx goal update knn --min-delta=0",
                "loopx goal update knn --guard ''", "loopx goal update knn --trial-timeout 1h",
                "loopx goal update knn --metric-pattern x"):
        assert _pre_tool(repo, "Bash", {"command": cmd}, cwd=wt).get("allow") is False, cmd
    from loopx.sandbox.broker import refusal

    assert refusal(["goal", "update", "knn", "--measure", "x"])


def test_an_uncommitted_fix_of_the_measure_is_named(repo):  # noqa: F811
    (repo / "eval.py").write_text("import sys\nsys.exit(5)\n")
    git(repo, "commit", "-q", "-am", "break eval")
    r = run_loopx(["start-goal", "--goal-text", "tune", "--goal-id", "knn", "--experiment", "--metric", "val_acc",
                   "--measure", f"{PY} eval.py"], cwd=repo, timeout=120)
    assert r.code == 0 and "crashed" in r.out and "uncommitted" not in r.err
    git(repo, "checkout", "HEAD~1", "--", "eval.py")  # fixed, not committed
    git(repo, "reset", "-q")
    b = run_loopx(["experiment", "baseline", "knn"], cwd=repo, timeout=120)
    assert b.code == 1  # the committed eval.py still exits 5
    warn = [x for x in b.err.splitlines() if "uncommitted" in x]
    assert len(warn) == 1 and "eval.py" in warn[0] and "git commit eval.py" in warn[0], b.err
    git(repo, "commit", "-q", "-am", "fix eval")
    b = run_loopx(["experiment", "baseline", "knn", "--json"], cwd=repo, timeout=120)
    assert b.code == 0 and b.data["decision"] == "keep" and "uncommitted" not in b.err
