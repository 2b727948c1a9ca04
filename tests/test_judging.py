"""Issue 9 (judge real turns right): setup errors (verify_broken), evidence that proves a todo,
per-todo verify commands, the git fingerprint, rejected gates and where the dashboard files a goal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_loopx
from loopx.kernel.policy import decide, turn
from loopx.kernel.read import fingerprint, verify
from loopx.kernel.storage import clock
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="shell commands and PATH lookups are POSIX here")
PY = sys.executable


def _state(project: Path) -> dict:
    return Store.open(str(project)).load()


def _goal(cli, verify_cmd: str, *todos: str, extra=()) -> None:
    args = ["start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--verify", verify_cmd, *extra]
    for t in todos or (() if "--todo" in extra else ("first",)):
        args += ["--todo", t]
    r = cli(*args)
    assert r.code == 0, r.err


def _todo(project: Path, title: str) -> dict:
    return next(t for t in _state(project)["todos"].values() if t["title"] == title)


# ------------------------------------------------------------------ 1: verify_broken
def _broken_run(project: Path, cli, path: str, cmd: str = "ptest-missing -q") -> dict:
    _goal(cli, cmd)
    r = run_loopx(["run", "--agent-cmd", "touch work.txt", "--json"], project, env={"PATH": path})
    assert r.code == 0, r.out + r.err
    return json.loads(r.out)["data"]


def test_a_verify_command_not_on_path_is_a_setup_error_not_no_progress(project, cli, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    path = f"{bindir}:/usr/bin:/bin"
    d = _broken_run(project, cli, path)
    (t,) = d["turns"]
    assert t["result"] == "blocked" and t["slots"] == 0 and "could not run" in t["note"]
    assert (d["stop"]["decision"], d["stop"]["reason"]) == ("wait_human", "verify_broken")
    state = _state(project)
    run = state["runs"][t["run_id"]]
    err = run["setup_error"]
    assert (err["reason"], err["exit_code"], err["path"]) == ("verify_broken", 127, path)
    assert err["resolved"] == {"ptest-missing": None}
    assert state["goals"]["g1"]["no_progress_streak"] == 0  # not held against the agent
    # the same caller keeps hearing "needs you", never "skip"
    again = run_loopx(["quota", "should-run", "--json"], project, env={"PATH": path})
    assert again.code == 1 and again.json["data"]["reason"] == "verify_broken"
    assert "PATH" in again.json["data"]["message"]
    # once the program exists where the recorded PATH looks, the next check retries
    prog = bindir / "ptest-missing"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    retry = run_loopx(["quota", "should-run", "--json"], project, env={"PATH": path})
    assert retry.code == 0 and retry.json["data"]["decision"] == "run", retry.out


def test_another_path_or_a_human_resume_retries_and_status_doctor_dashboard_say_needs_you(project, cli):
    _broken_run(project, cli, "/usr/bin:/bin")
    other = run_loopx(["quota", "should-run", "--json"], project, env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
    assert other.json["data"]["decision"] == "run"
    # status (any PATH) shows it from the record, with the fix and how to say it is fixed
    st = cli("status", json=True).data["goals"][0]
    assert st["setup_error"]["reason"] == "verify_broken" and "loopx goal resume g1" in st["next"]
    import shutil

    for cache in ("kept", "deleted"):  # doctor finds it from the one pass over the log, cache or not
        if cache == "deleted":
            shutil.rmtree(project / ".loopx" / "cache")
        doc = cli("doctor", json=True)
        (finding,) = [c for c in doc.data["checks"] if c["id"] == "setup.g1"]
        assert finding["status"] == "error" and "PATH=/usr/bin:/bin" in finding["finding"], cache
        assert "ptest-missing -> not found" in finding["finding"]
    from loopx.dashboard.api import classify
    from loopx.kernel.read.status import summary

    state = _state(project)
    row = summary(state, clock.now_iso())["goals"][0]
    d = decide.evaluate(state, clock.now(), goal_id="g1")  # the dashboard does not know cron's PATH
    assert classify(row, d)[0] == "needs_you"
    # a human says it is fixed
    r = cli("goal", "resume", "g1")
    assert r.code == 0 and "tried again" in r.out
    same = run_loopx(["quota", "should-run", "--json"], project, env={"PATH": "/usr/bin:/bin"})
    assert same.json["data"]["decision"] == "run"
    assert cli("status", json=True).data["goals"][0]["setup_error"] is None


@pytest.mark.parametrize("kind", ["not_executable", "missing_interpreter", "env_interpreter", "timeout"])
def test_every_kind_of_command_that_cannot_run_is_diagnosed(project, cli, kind):
    script = project / "check.sh"
    cmd, timeout = "./check.sh", None
    if kind == "not_executable":
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o644)
    elif kind == "missing_interpreter":
        script.write_text("#!/nonexistent/bin/python9\nprint(1)\n")
        script.chmod(0o755)
    elif kind == "env_interpreter":
        script.write_text("#!/usr/bin/env python-that-is-not-there\nprint(1)\n")
        script.chmod(0o755)
    else:
        cmd, timeout = "sleep 60", 1.0
    _goal(cli, cmd)
    store = Store.open(str(project))
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    run = store.load()["runs"][t["run_id"]]
    res = turn.run_verify(store, "agent:bot", run, cmd, timeout)
    err = res["setup_error"]
    assert err is not None and err["reason"] == "verify_broken", res
    assert err["timed_out"] is (kind == "timeout")
    if kind != "timeout":
        assert err["resolved"] == {"./check.sh": "./check.sh"}
    if kind == "missing_interpreter":
        assert err["interpreter"] == {"./check.sh": "/nonexistent/bin/python9"}


def test_a_failing_test_is_not_a_setup_error(project, cli):
    _goal(cli, f'"{PY}" -c "raise SystemExit(1)"')
    r = run_loopx(["run", "--agent-cmd", "touch x", "--once", "--json"], project)
    t = r.json["data"]["turns"][0]
    assert t["result"] == "no_progress" and not _state(project)["runs"][t["run_id"]].get("setup_error")


def test_command_words_skip_assignments_operators_and_builtins():
    assert verify.command_words("cd src && FOO=1 pytest -q | tee log; ./x.sh") == ["pytest", "tee", "./x.sh"]
    assert verify.command_words("'unclosed") == ["'unclosed"]


# ------------------------------------------------------------------ 2: evidence that proves a todo
def _ev(cli, *args) -> str:
    r = cli("evidence", "add", "--goal-id", "g1", *args, json=True)
    assert r.code == 0, r.err
    return r.data["evidence_id"]


def test_todo_done_refuses_failing_evidence_and_a_note_alone(project, cli):
    _goal(cli, "true", "first", "second", "third")
    t = _todo(project, "first")["id"]
    bad = _ev(cli, "--kind", "test", "--summary", "pytest", "--command", "pytest", "--exit-code", "1")
    r = cli("todo", "done", t, "--evidence", bad, json=True)
    assert r.code == 4 and r.json["error"]["code"] == "evidence_failing" and "--force-unverified" in r.json["error"]["hint"]
    note = _ev(cli, "--kind", "note", "--summary", "I think it works")
    r = cli("todo", "done", t, "--evidence", note, json=True)
    assert r.code == 4 and r.json["error"]["code"] == "evidence_unproven"
    untested = _ev(cli, "--kind", "test", "--summary", "ran the tests")  # no exit code
    assert cli("todo", "done", t, "--evidence", untested).code == 4
    assert _todo(project, "first")["status"] == "open"
    good = _ev(cli, "--kind", "test", "--summary", "pytest", "--command", "pytest", "--exit-code", "0")
    assert cli("todo", "done", t, "--evidence", good, "--evidence", note).code == 0
    commit = _ev(cli, "--kind", "commit", "--summary", "fix", "--commit", "abc1234")
    assert cli("todo", "done", _todo(project, "second")["id"], "--evidence", commit).code == 0
    # failing evidence next to passing evidence is still refused
    assert cli("todo", "done", _todo(project, "third")["id"], "--evidence", good, "--evidence", bad).code == 4


def test_a_todo_with_its_own_verify_needs_a_passing_run_of_it(project, cli):
    _goal(cli, "true", extra=("--todo", "red", "--todo-verify", f'"{PY}" -c "raise SystemExit(2)"',
                              "--todo", "green", "--todo-verify", f'"{PY}" -c pass'))
    red, green = _todo(project, "red"), _todo(project, "green")
    other = _ev(cli, "--kind", "test", "--summary", "something else", "--command", "true", "--exit-code", "0")
    r = cli("todo", "done", red["id"], "--evidence", other, json=True)  # passing, but not its command
    assert r.code == 4 and r.json["error"]["code"] == "evidence_failing"  # todo done ran its command: exit 2
    assert "failed (exit 2" in r.json["error"]["message"] and f"loopx todo done {red['id']}" in r.json["error"]["hint"]
    assert _todo(project, "red")["status"] == "open"
    ran = [e for e in _state(project)["evidence"].values() if e.get("command") == red["verify"]]
    assert [e["exit_code"] for e in ran] == [2]
    r = cli("todo", "done", green["id"], json=True)  # no evidence: it runs the command itself
    assert r.code == 0 and r.data["verify"]["passed"] and r.data["verify"]["command"] == green["verify"]
    done = _todo(project, "green")
    assert done["status"] == "done" and done["evidence"] == [r.data["verify"]["evidence_id"]]


def test_only_a_human_forces_a_todo_done_and_the_review_says_so(project, cli, monkeypatch):
    _goal(cli, "true")
    t = _todo(project, "first")["id"]
    note = _ev(cli, "--kind", "note", "--summary", "trust me")
    r = cli("--agent", "bot", "todo", "done", t, "--evidence", note, "--force-unverified", json=True)
    assert r.code == 4 and r.json["error"]["code"] == "human_required"
    monkeypatch.setenv("CLAUDECODE", "1")  # an agent that dropped --agent is still an agent
    assert cli("todo", "done", t, "--evidence", note, "--force-unverified").code == 4
    monkeypatch.delenv("CLAUDECODE")
    r = cli("todo", "done", t, "--evidence", note, "--force-unverified", json=True)
    assert r.code == 0 and r.data["forced"] is True
    assert _todo(project, "first")["forced"]["by"].startswith("human:")
    text = cli("review-packet").out
    assert "closed UNVERIFIED" in text and "- [x] first" not in text


def test_turn_finish_completion_on_failing_cited_evidence_keeps_the_todo_open(project, cli):
    _goal(cli, "true")
    store = Store.open(str(project))
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    bad = _ev(cli, "--kind", "test", "--summary", "red", "--exit-code", "1", "--run", t["run_id"])
    fin = turn.finish(store, "agent:bot", t["run_id"], "completion", evidence=[bad])
    assert fin["todo_status"] == "open" and any("failing" in w for w in fin["warnings"])


# ------------------------------------------------------------------ 3: per-todo verify commands
def test_start_goal_pairs_each_todo_verify_with_the_todo_before_it(project, cli):
    _goal(cli, "true", extra=("--todo", "a", "--todo-verify", "check-a", "--todo", "b"))
    assert (_todo(project, "a")["verify"], _todo(project, "b")["verify"]) == ("check-a", None)
    assert "check-a" in cli("todo", "show", _todo(project, "a")["id"]).out
    for bad in (["--todo-verify", "x", "--todo", "a"], ["--todo", "a", "--todo-verify", "x", "--todo-verify", "y"]):
        r = cli("start-goal", "--goal-text", "other", *bad)
        assert r.code == 2 and "--todo-verify" in r.err and "Traceback" not in r.err


def test_turn_finish_verify_runs_the_todos_command_and_the_goal_command_otherwise(project, cli):
    _goal(cli, f'"{PY}" -c "raise SystemExit(1)"',
          extra=("--todo", "own", "--todo-verify", f'"{PY}" -c pass', "--todo", "shared"))
    store = Store.open(str(project))
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    assert t["todo_id"] == _todo(project, "own")["id"]
    fin = turn.finish(store, "agent:bot", t["run_id"], "completion", verify=True)
    assert fin["verified"] and fin["todo_status"] == "done" and fin["verify"]["command"].endswith("-c pass")
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    fin = turn.finish(store, "agent:bot", t["run_id"], "completion", verify=True)
    assert not fin["verified"] and "SystemExit(1)" in fin["verify"]["command"]


def test_when_every_todo_is_done_the_goal_command_decides_the_goal(project, cli):
    _git(project, "init", "-q")
    _goal(cli, "test -f shipped", extra=("--todo", "a", "--todo-verify", "true"))
    r = run_loopx(["run", "--agent-cmd", "touch a.txt", "--max-turns", "2", "--json"], project)
    d = r.json["data"]
    assert d["turns"][0]["result"] == "completion"
    assert d["goal_verify"]["passed"] is False and _state(project)["goals"]["g1"]["status"] == "active"
    assert d["turns"][1]["mode"] == "plan"  # the failing goal command asked for a planning turn
    assert d["turns"][1]["result"] == "no_progress"  # it added no todo and fixed nothing
    dd = cli("quota", "should-run", json=True).data
    assert dd["decision"] == "skip"  # not "stop: complete" while the goal's command fails
    # something changes (a human edits a file); a planning turn that then fixes the goal directly is
    # verified progress, and the goal's command closes the goal
    (project / "hint.txt").write_text("the release needs a `shipped` file")
    r = run_loopx(["run", "--agent-cmd", "touch shipped", "--json"], project)
    d = r.json["data"]
    assert [(t["mode"], t["result"], t["verified"]) for t in d["turns"]] == [("plan", "progress", True)]
    assert d["goal_verify"]["completed"] is True
    assert _state(project)["goals"]["g1"]["status"] == "done"


# ------------------------------------------------------------------ 4: fingerprint and wording
def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=project, check=True,
                   capture_output=True)


def test_fingerprint_sees_other_branches_tags_and_the_stash(project):
    _git(project, "init", "-q")
    (project / "a.txt").write_text("1")
    _git(project, "add", "a.txt")
    _git(project, "commit", "-q", "-m", "one")
    before = fingerprint.git_part(str(project))
    _git(project, "checkout", "-q", "-b", "side")  # merge work into another branch, then go back
    (project / "b.txt").write_text("2")
    _git(project, "add", "b.txt")
    _git(project, "commit", "-q", "-m", "two")
    _git(project, "checkout", "-q", "-")
    after_branch = fingerprint.git_part(str(project))
    assert after_branch != before
    _git(project, "tag", "v1")
    after_tag = fingerprint.git_part(str(project))
    assert after_tag != after_branch
    (project / "a.txt").write_text("dirty")
    _git(project, "stash", "-q")
    stashed = fingerprint.git_part(str(project))
    assert stashed != after_tag  # same clean tree, but a stash entry
    _git(project, "stash", "drop", "-q")
    assert fingerprint.git_part(str(project)) == after_tag


def test_no_progress_is_never_reported_as_verified(project, cli):
    _git(project, "init", "-q")
    _goal(cli, "true")
    r = run_loopx(["run", "--agent-cmd", "true"], project)
    assert "no_progress" in r.out and "verified" not in r.out.replace("not verified", ""), r.out
    j = run_loopx(["history", "--json"], project)
    assert j.code == 0
    run = next(iter(_state(project)["runs"].values()))
    assert (run["result"], run["verified"]) == ("no_progress", False)


# ------------------------------------------------------------------ 5: rejected gates
def test_a_rejected_gate_blocks_its_todos_until_a_human_reopens_them(project, cli):
    _goal(cli, "true", "risky")
    t = _todo(project, "risky")["id"]
    g = cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "merge now?", "--blocks", t,
            json=True).data["gate_id"]
    r = cli("gate", "reject", g, "--note", "split it into two PRs first", "--confirm", g)
    assert r.code == 0 and f"blocked {t}" in r.out
    d = cli("quota", "should-run", json=True)
    assert d.code == 1 and (d.data["decision"], d.data["reason"]) == ("wait_human", "gate_rejected")
    assert "split it into two PRs" in d.data["message"]
    assert cli("--agent", "bot", "next").code == 1
    r = cli("--agent", "bot", "todo", "update", t, "--reopen", json=True)
    assert r.code == 4 and r.json["error"]["code"] == "human_required"
    assert cli("--agent", "bot", "todo", "claim", t).code == 4
    # the agent re-plans: the later packet carries the human's note
    cli("--agent", "bot", "todo", "add", "first of two PRs")
    nxt = cli("--agent", "bot", "next", json=True).data
    assert nxt["todo_id"] != t
    assert nxt["packet"]["rejected"][0]["note"] == "split it into two PRs first"
    assert "split it into two PRs first" in nxt["packet_text"]
    # a human re-opens it
    assert cli("todo", "update", t, "--reopen").code == 0
    assert _todo(project, "risky")["status"] == "open" and "blocked_by" not in _todo(project, "risky")


# ------------------------------------------------------------------ 7: where the dashboard files a goal
def test_an_open_run_is_running_with_whom_to_wait_for_and_a_skip_is_never_waiting(project, cli):
    from loopx.dashboard.api import classify
    from loopx.kernel.read.status import summary

    _git(project, "init", "-q")
    _goal(cli, "true")
    store = Store.open(str(project))
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    state = store.load()
    row = summary(state, clock.now_iso())["goals"][0]
    assert row["next"] == f"wait for {t['run_id']} (bot, lease until {t['lease_until']})"
    d = decide.evaluate(state, clock.now(), goal_id="g1")
    group, reason, _ = classify(row, d)  # the dashboard renders the decision (issue 21), never status's text
    assert group == "running" and reason == d["message"] and d["reason"] == "claimed"
    turn.finish(store, "agent:bot", t["run_id"], "no_progress")
    state = store.load()
    d = decide.evaluate(state, clock.now(), goal_id="g1",
                        fingerprint=lambda g: fingerprint.compute(state, g, str(project)))
    assert d["decision"] == "skip"
    row = summary(state, clock.now_iso())["goals"][0]
    assert classify(row, d)[0] == "needs_you"


def test_a_passing_verify_of_the_current_run_proves_the_todo_without_running_it_again(project, cli):
    _goal(cli, "true", extra=("--todo", "own", "--todo-verify", f'"{PY}" -c pass'))
    store = Store.open(str(project))
    t = turn.next_turn(store, "agent:bot", goal_id="g1")
    todo = store.load()["todos"][t["todo_id"]]
    run = store.load()["runs"][t["run_id"]]
    ran = turn.run_verify(store, "agent:bot", run, todo["verify"])
    assert ran["passed"]
    r = cli("--agent", "bot", "todo", "done", todo["id"], json=True)
    assert r.code == 0 and r.data["verify"] is None  # proven by the run's own evidence
    state = store.load()
    assert [e["id"] for e in state["evidence"].values() if e.get("command") == todo["verify"]] == [ran["evidence_id"]]


def test_a_fifo_as_the_verify_script_is_diagnosed_without_waiting(project, cli):
    """The project's own verify script swapped for a FIFO (an agent can write the project): running
    it fails (126), and the diagnosis that reads a script's ``#!`` line opened the FIFO and waited
    for a writer forever, holding the turn's finish; so did every should-run after it, which looks
    again at what the command resolves to. Now it is diagnosed like a script that cannot run."""
    os.mkfifo(project / "check.sh")
    d = _broken_run(project, cli, "/usr/bin:/bin", cmd="./check.sh")
    (t,) = d["turns"]
    state = _state(project)
    err = state["runs"][t["run_id"]]["setup_error"]
    assert (err["reason"], err["exit_code"]) == ("verify_broken", 126) and err["interpreter"] == {}, err
    again = run_loopx(["quota", "should-run", "--json"], project, env={"PATH": "/usr/bin:/bin"}, timeout=30)
    assert again.code == 1 and again.json["data"]["reason"] == "verify_broken", again.out
