"""Issue 21: one decision over long runs. Every turn is bounded (a turn budget per window, the
stall per todo), every goal reaches an end, checks come before work, scope is checked after
every turn, and the clients agree. Real stores, real git repositories, real agent processes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import run_loopx
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="shell agents are POSIX here")

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
COMMITTER = 'sh -c "echo x>>f; git add f; git commit -qm x"'  # progress nobody verifies: what the issue measured


def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=project, check=True,
                   capture_output=True)


def _repo(project: Path) -> None:
    _git(project, "init", "-q")
    (project / ".gitignore").write_text(".loopx/\n")
    _git(project, "add", ".gitignore")
    _git(project, "commit", "-q", "-m", "init")


def _state(project: Path) -> dict:
    return Store.open(str(project)).load()


def _run(project: Path, *args, timeout: float = 120):
    r = run_loopx(["run", *args, "--json"], cwd=project, env=GIT_ENV, timeout=timeout)
    return r, (json.loads(r.out)["data"] if r.out.strip() else None)


# ------------------------------------------------------------------ 3: every turn is bounded
def test_unverified_progress_on_one_todo_stops_at_the_stall(project, cli):
    """The issue's 20-second case: no verify command, an agent that commits and exits. Today it
    runs without end; now the todo stalls after stall_after unverified turns."""
    _repo(project)
    assert cli("start-goal", "--goal-text", "Report", "--goal-id", "g1", "--slots", "3", "--todo", "write it").code == 0
    r, d = _run(project, "--agent-cmd", COMMITTER)
    assert r.code == 0, r.err
    assert len(d["turns"]) == 3
    assert all((t["result"], t["verified"]) == ("progress", False) for t in d["turns"])
    assert (d["stop"]["decision"], d["stop"]["reason"]) == ("wait_human", "stalled")
    assert d["stop"]["todo_id"] == d["turns"][0]["todo_id"]


def test_the_turn_budget_bounds_turns_whatever_their_result(project, cli):
    """With the stall raised, the turn budget (twice the slots per window) still stops the loop,
    and `quota show` counts the turns although no slot was spent."""
    _repo(project)
    assert cli("start-goal", "--goal-text", "Report", "--goal-id", "g1", "--slots", "3", "--todo", "write it").code == 0
    assert cli("quota", "set", "--goal-id", "g1", "--stall-after", "100").code == 0
    r, d = _run(project, "--agent-cmd", COMMITTER)
    assert r.code == 0, r.err
    assert len(d["turns"]) == 6
    assert (d["stop"]["decision"], d["stop"]["reason"]) == ("wait", "budget_turns")
    assert d["stop"]["next_check_at"]
    q = cli("quota", "show", "--goal-id", "g1", json=True).data["quotas"][0]
    assert (q["spent"], q["turns_started"], q["turns"], q["turns_left"]) == (0, 6, 6, 0)
    assert "turns started in the window: 6/6" in cli("quota", "show", "--goal-id", "g1").out


def test_the_turn_budget_counts_failed_turns_and_a_human_sets_it(project, cli):
    _repo(project)
    assert cli("start-goal", "--goal-text", "Report", "--goal-id", "g1", "--slots", "3", "--todo", "a",
               "--todo", "b", "--todo", "c", "--todo", "d").code == 0
    assert cli("quota", "set", "--goal-id", "g1", "--turns", "2", "--stall-after", "100").code == 0
    for _ in range(2):  # each failing agent stops the runner: two separate invocations
        r, d = _run(project, "--agent-cmd", "exit 3")
        assert r.code == 1 and d["turns"][0]["result"] == "failed"
    r, d = _run(project, "--agent-cmd", "exit 3")
    assert r.code == 0 and d["turns"] == [] and d["stop"]["reason"] == "budget_turns"
    sr = cli("quota", "should-run", "--goal-id", "g1", json=True)
    assert sr.code == 1 and sr.data["reason"] == "budget_turns"
    assert sr.data["budget"]["turns_started"] == 2


def test_raising_the_turn_budget_is_human_only(project, cli, monkeypatch):
    assert cli("start-goal", "--goal-text", "Report", "--goal-id", "g1", "--slots", "3").code == 0
    monkeypatch.setenv("LOOPX_AGENT", "bot")
    r = cli("quota", "set", "--goal-id", "g1", "--turns", "50", json=True)
    assert r.code != 0
    assert cli("quota", "set", "--goal-id", "g1", "--turns", "2", json=True).code == 0  # tightening is fine


def test_money_budget_counts_unverified_turns(project, cli):
    """Token and money budgets apply to every turn that reported usage, verified or not."""
    _repo(project)
    assert cli("start-goal", "--goal-text", "Report", "--goal-id", "g1", "--todo", "a", "--todo", "b",
               "--todo", "c").code == 0
    assert cli("quota", "set", "--goal-id", "g1", "--max-tokens", "150", "--stall-after", "100").code == 0
    store = Store.open(str(project))
    from loopx.kernel.policy import turn

    for _ in range(2):
        t = turn.next_turn(store, "agent:bot", goal_id="g1")
        assert t["started"]
        turn.finish(store, "agent:bot", t["run_id"], "progress", report={"usage": {"total_tokens": 60}})
    sr = cli("quota", "should-run", "--goal-id", "g1", json=True)
    assert (sr.data["decision"], sr.data["reason"]) == ("wait", "budget_tokens")


def test_start_goal_without_verify_says_what_that_means(project, cli):
    r = cli("start-goal", "--goal-text", "Report", "--goal-id", "g1", "--slots", "3", "--todo", "write it")
    assert r.code == 0
    assert "no verify command" in r.err + r.out
    assert "6 turns per 1d" in r.err + r.out
    j = cli("start-goal", "--goal-text", "Other", "--goal-id", "g2", "--slots", "3", json=True)
    assert "no verify command" in " ".join(j.json.get("warnings") or [])


# ------------------------------------------------------------------ 4: every goal reaches an end
def _lines(project: Path) -> tuple[int, int]:
    root = project / ".loopx"
    return tuple(len((root / f).read_bytes().splitlines()) if (root / f).exists() else 0
                 for f in ("events.jsonl", "evidence.jsonl"))


def test_a_protected_goal_with_nothing_left_waits_for_a_human_stably(project, cli, tmp_path, monkeypatch):
    count = tmp_path / "verify-runs"
    # the goal's verify runs in the turn's sandbox (issue 22), which grants writes in the project
    # only: the counting file outside it is granted explicitly
    monkeypatch.setenv("LOOPX_SANDBOX_WRITE", str(tmp_path))
    assert cli("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--protect", "merge",
               "--verify", f"echo ran >> {count}", "--todo", "only", "--todo-verify", "test -f done.txt").code == 0
    r, d = _run(project, "--agent-cmd", "touch done.txt")
    assert r.code == 0, r.err
    assert [t["result"] for t in d["turns"]] == ["completion"]
    assert d["goal_verify"]["passed"] and d["goal_verify"]["human_closes"] == "loopx goal done g1"
    assert (d["stop"]["decision"], d["stop"]["reason"]) == ("wait_human", "close_goal")
    assert "loopx goal done g1" in d["stop"]["message"]
    assert count.read_text().count("ran") == 1
    before = _lines(project)
    for _ in range(10):  # cron ticks: the runner and a bare should-run
        r, d = _run(project, "--agent-cmd", "touch done.txt")
        assert r.code == 0 and d["turns"] == [] and "goal_verify" not in d
        assert (d["stop"]["decision"], d["stop"]["reason"]) == ("wait_human", "close_goal")
        sr = cli("quota", "should-run", json=True)
        assert (sr.code, sr.data["reason"]) == (1, "close_goal")
    assert count.read_text().count("ran") == 1  # the verify command ran once
    assert _lines(project) == before  # and nothing more was written
    assert cli("goal", "done", "g1").code == 0
    assert cli("quota", "should-run", "--goal-id", "g1", json=True).data["reason"] == "goal_done"


def test_an_unprotected_goal_is_marked_done_once_verified(project, cli):
    assert cli("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--verify", "true",
               "--todo", "only", "--todo-verify", "test -f done.txt").code == 0
    r, d = _run(project, "--agent-cmd", "touch done.txt")
    assert r.code == 0 and d["goal_verify"]["completed"]
    assert _state(project)["goals"]["g1"]["status"] == "done"


def test_a_goal_without_verify_and_all_todos_done_asks_a_human_once(project, cli):
    assert cli("start-goal", "--goal-text", "Notes", "--goal-id", "g1", "--todo", "only").code == 0
    tid = next(iter(_state(project)["todos"]))
    assert cli("evidence", "add", "--goal-id", "g1", "--todo", tid, "--kind", "artifact", "--summary", "notes.md").code == 0
    ev = next(iter(_state(project)["evidence"]))
    assert cli("todo", "done", tid, "--evidence", ev).code == 0
    first = cli("quota", "should-run", json=True)
    assert (first.data["decision"], first.data["reason"]) == ("wait_human", "close_goal")
    before = _lines(project)
    for _ in range(5):
        assert cli("quota", "should-run", json=True).data["reason"] == "close_goal"
    assert _lines(project) == before


def _pgit(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def test_a_max_parallel_goal_is_marked_done(project, cli):
    _pgit(project, "init", "-q", "-b", "main")
    (project / "README").write_text("hello\n")
    _pgit(project, "add", "README")
    _pgit(project, "commit", "-q", "-m", "init")
    assert cli("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--verify", "ls work-*.txt",
               "--todo", "one", "--todo", "two").code == 0
    assert cli("goal", "update", "g1", "--max-parallel", "2").code == 0
    assert cli("start-goal", "--goal-text", "After", "--goal-id", "g2").code == 0
    assert cli("todo", "add", "use it", "--goal-id", "g2", "--depends-on-goal", "g1").code == 0
    agent = 'printf x > "work-$LOOPX_TODO_ID.txt"'
    r = run_loopx(["run", "--goal-id", "g1", "--agent-cmd", agent, "--json"], cwd=project, env=GIT_ENV, timeout=180)
    assert r.code == 0, r.out + r.err
    d = json.loads(r.out)["data"]
    assert [t["result"] for t in d["turns"]] == ["completion", "completion"]
    assert d["goal_verify"]["completed"] is True
    state = _state(project)
    assert state["goals"]["g1"]["status"] == "done"
    sr = cli("quota", "should-run", "--goal-id", "g2", json=True)  # the goal that waited on it can run
    assert (sr.data["decision"], sr.data["reason"]) == ("run", "ready")


def test_todo_b_runs_while_todo_a_is_stalled(project, cli):
    _repo(project)
    assert cli("start-goal", "--goal-text", "Two things", "--goal-id", "g1", "--verify", "test -f b.txt",
               "--todo", "A hard one", "--todo", "B easy").code == 0
    a, b = sorted(_state(project)["todos"].values(), key=lambda t: t["order"])
    # an agent that fails A every time (nothing committed) and finishes B
    agent = f'if [ "$LOOPX_TODO_ID" = "{b["id"]}" ]; then touch b.txt; git add b.txt; git commit -qm b; else exit 0; fi'
    r, d = _run(project, "--agent-cmd", agent)
    assert r.code == 0, r.err
    by_todo = [(t["todo_id"], t["result"]) for t in d["turns"]]
    assert by_todo[0] == (a["id"], "no_progress")
    assert (b["id"], "completion") in by_todo  # B was not held back by A
    assert _state(project)["todos"][b["id"]]["status"] == "done"


def test_a_stalled_todo_does_not_starve_another(project, cli):
    from loopx.kernel.policy import turn

    assert cli("start-goal", "--goal-text", "Two", "--goal-id", "g1", "--todo", "A", "--todo", "B").code == 0
    store = Store.open(str(project))
    a, b = sorted(_state(project)["todos"].values(), key=lambda t: t["order"])
    for _ in range(3):  # A gets three unverified "progress" turns: stalled (not a git repo: no_change cannot apply)
        t = turn.next_turn(store, "agent:bot", goal_id="g1")
        assert t["todo_id"] == a["id"]
        turn.finish(store, "agent:bot", t["run_id"], "progress")
    sr = cli("quota", "should-run", "--goal-id", "g1", json=True)
    assert (sr.data["decision"], sr.data["todo_id"]) == ("run", b["id"])
    for _ in range(3):
        t = turn.next_turn(store, "agent:bot", goal_id="g1")
        assert t["todo_id"] == b["id"]
        turn.finish(store, "agent:bot", t["run_id"], "progress")
    sr = cli("quota", "should-run", "--goal-id", "g1", json=True)
    assert (sr.data["decision"], sr.data["reason"]) == ("wait_human", "stalled")


# ------------------------------------------------------------------ 5: checks before work
def test_a_non_holders_todo_done_is_refused_before_its_verify_runs(project, cli, tmp_path):
    count = tmp_path / "verify-runs"
    assert cli("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--todo", "only",
               "--todo-verify", f"echo ran >> {count}; exit 1").code == 0
    t = cli("--agent", "codex", "next", json=True)
    assert t.code == 0
    tid = t.data["todo_id"]
    evidence_before = len(_state(project)["evidence"])
    r = cli("--agent", "intruder", "todo", "done", tid, json=True)
    assert r.code == 4
    assert r.json["error"]["code"] == "claimed_by_other" and "agent:codex" in r.json["error"]["message"]
    assert not count.exists()  # the verify command never ran
    assert len(_state(project)["evidence"]) == evidence_before
    stale = cli("--agent", "codex", "todo", "done", tid, "--fence", str(t.data["fence"] + 999), json=True)
    assert stale.code == 4 and stale.json["error"]["code"] == "stale_fence"
    assert not count.exists()


def test_turn_finish_of_a_run_whose_todo_was_taken_over_runs_no_verify(project, cli, tmp_path, monkeypatch):
    from loopx.kernel.storage import clock
    from loopx.kernel.storage.clock import timedelta

    count = tmp_path / "verify-runs"
    assert cli("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--todo", "only",
               "--todo-verify", f"echo ran >> {count}").code == 0
    first = cli("--agent", "slow", "next", "--lease", "1m", json=True).data
    monkeypatch.setenv("LOOPX_NOW", clock.iso(clock.now() + timedelta(minutes=5)))  # its lease lapses
    second = cli("--agent", "fast", "next", json=True)
    assert second.code == 0 and second.data["todo_id"] == first["todo_id"]
    r = cli("--agent", "slow", "turn", "finish", "--run", first["run_id"], "--result", "completion", "--verify",
            json=True)
    assert r.code == 4, r.out
    assert not count.exists()


# ------------------------------------------------------------------ 6: scope after every turn
SCOPED_AGENT = 'mkdir -p src; echo x > src/a.py; echo oops >> README.md; git add -A; git commit -qm work'


def _scoped_goal(project: Path, cli) -> None:
    _repo(project)
    (project / "README.md").write_text("readme\n")
    _git(project, "add", "README.md")
    _git(project, "commit", "-q", "-m", "readme")
    assert cli("start-goal", "--goal-text", "Code", "--goal-id", "g1", "--scope", "src/**",
               "--todo", "write a.py", "--todo-verify", "test -f src/a.py").code == 0


def test_an_out_of_scope_edit_under_agent_cmd_is_flagged_and_not_verified(project, cli):
    _scoped_goal(project, cli)
    r, d = _run(project, "--agent-cmd", SCOPED_AGENT)
    assert r.code == 0, r.err
    t = d["turns"][0]
    assert t["out_of_scope"] == ["README.md"]
    assert t["verified"] is False and t["slots"] == 0
    assert "outside the scope" in t["note"]
    state = _state(project)
    run = state["runs"][t["run_id"]]
    assert run["out_of_scope"] == ["README.md"] and run["verified"] is False
    assert state["todos"][t["todo_id"]]["status"] != "done"  # not a verified completion without a human
    assert (d["stop"]["decision"], d["stop"]["reason"]) == ("wait_human", "out_of_scope")
    assert len(d["turns"]) == 1  # no second turn until a human looks
    hist = cli("history", "--goal-id", "g1", json=True).data
    assert any(x.get("out_of_scope") == ["README.md"] for x in hist["rounds"])
    assert "README.md" in cli("history", "--goal-id", "g1").out
    rp = cli("review-packet", "--goal-id", "g1", json=True).data
    assert "README.md" in rp["markdown"] and "outside the scope" in rp["markdown"]


def test_an_in_scope_edit_is_verified_as_before(project, cli):
    _scoped_goal(project, cli)
    r, d = _run(project, "--agent-cmd", 'mkdir -p src; echo x > src/a.py; git add -A; git commit -qm work', "--once")
    t = d["turns"][0]
    assert (t["result"], t["verified"], t["slots"]) == ("completion", True, 1)
    assert "out_of_scope" not in t


def test_an_agent_working_through_next_by_hand_is_checked_too(project, cli):
    _scoped_goal(project, cli)
    (project / "notes.txt").write_text("a human's unrelated edit, there before the turn\n")
    t = cli("--agent", "bot", "next", json=True).data
    (project / "src").mkdir()
    (project / "src" / "a.py").write_text("x\n")
    (project / "setup.cfg").write_text("[x]\n")
    r = cli("--agent", "bot", "turn", "finish", "--run", t["run_id"], "--result", "completion", "--verify", json=True)
    assert r.code == 0, r.out
    assert r.data["out_of_scope"] == ["setup.cfg"]  # not notes.txt: it was dirty before the turn began
    assert r.data["verified"] is False and r.data["todo_status"] != "done"


# ------------------------------------------------------------------ 1-2: every client says the same
def _clients(project: Path, cli, gid: str = "g1") -> dict:
    """(decision, reason) from should-run, status, the dashboard's API, inbox and heartbeat-prompt."""
    from loopx.dashboard.api import Api, project_key
    from loopx.kernel.storage import clock

    sr = cli("quota", "should-run", "--goal-id", gid, "--no-record", json=True).data
    st = next(g for g in cli("status", json=True).data["goals"] if g["id"] == gid)
    (p,) = [x for x in Api().status(clock.now_iso())["projects"] if x["key"] == project_key(str(project))]
    dash = next(g for g in p["goals"] if g["id"] == gid)
    inbox = [i for i in cli("inbox", json=True).data["items"] if i.get("goal") == gid and i["kind"] == "goal"]
    hb = cli("heartbeat-prompt", "--goal-id", gid, json=True).data["schedule"]
    return {"should-run": (sr["decision"], sr["reason"]),
            "status": (st["decision"]["decision"], st["decision"]["reason"]),
            "dashboard": (dash["decision"], dash["decision_reason"]),
            "heartbeat": (hb["decision"], hb["reason"]),
            "_status_next": st["next"], "_dash_group": dash["group"], "_inbox": inbox,
            "_status_needs": st["decision"]["needs_you"]}


def _agree(c: dict) -> tuple:
    answers = {k: v for k, v in c.items() if not k.startswith("_")}
    assert len(set(answers.values())) == 1, answers
    return next(iter(answers.values()))


def test_the_clients_agree_when_codex_is_at_97_percent(project, cli, clk):
    from datetime import datetime

    home = Path(os.environ["CODEX_HOME"]) / "sessions" / "2026" / "03" / "01"
    home.mkdir(parents=True)
    reset = int(datetime.fromisoformat("2026-03-01T11:00:00+00:00").timestamp())
    line = {"timestamp": "2026-03-01T08:59:00Z", "type": "event_msg",
            "payload": {"type": "token_count", "info": None, "rate_limits": {
                "primary": {"used_percent": 97.0, "window_minutes": 300, "resets_at": reset}}}}
    (home / "rollout-2026-03-01T08-00-00-0199aaaa.jsonl").write_text(json.dumps(line) + "\n")
    assert cli("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--todo", "a").code == 0
    c = _clients(project, cli)
    assert _agree(c) == ("wait", "host_window")
    assert "loopx next" not in c["_status_next"] and c["_dash_group"] == "waiting"
    assert c["_inbox"] == [] and not c["_status_needs"]  # a timed wait: nobody needs to act, and all say so


def test_the_clients_agree_when_every_todo_is_done(project, cli):
    assert cli("start-goal", "--goal-text", "Notes", "--goal-id", "g1", "--todo", "only").code == 0
    tid = next(iter(_state(project)["todos"]))
    assert cli("evidence", "add", "--goal-id", "g1", "--todo", tid, "--kind", "artifact", "--summary", "notes").code == 0
    assert cli("todo", "done", tid, "--evidence", next(iter(_state(project)["evidence"]))).code == 0
    c = _clients(project, cli)
    assert _agree(c) == ("wait_human", "close_goal")
    assert c["_status_next"].startswith("loopx goal done g1") and "todo add" not in c["_status_next"]
    assert c["_dash_group"] == "needs_you" and c["_status_needs"]
    assert [i["reason"] for i in c["_inbox"]] == ["close_goal"]  # inbox and the dashboard both say: you


def test_after_an_agent_timeout_status_says_what_should_run_says(project, cli):
    _repo(project)
    assert cli("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--todo", "a", "--todo", "b").code == 0
    r, d = _run(project, "--agent-cmd", "sleep 30", "--timeout", "1s")
    assert r.code == 1 and d["turns"][0]["timed_out"]
    c = _clients(project, cli)
    _agree(c)
    text = cli("status").out
    assert text.count("NEEDS YOU") <= 1
    if c["should-run"][0] == "run":
        assert "goal resume" not in c["_status_next"] and "NEEDS YOU" not in text


# ------------------------------------------------------------------ the registry drives the cache and notifications
def test_a_cached_answer_expires_only_on_the_inputs_its_reason_reads(project, cli):
    """A claim ending can change a `claimed` answer, never a `close_goal` one (loopx.kernel.reasons)."""
    from loopx.kernel import reasons
    from loopx.kernel.policy import decision_cache, turn
    from loopx.kernel.storage import clock

    assert cli("start-goal", "--goal-text", "Busy", "--goal-id", "g1", "--todo", "a").code == 0
    store = Store.open(str(project))
    t = turn.next_turn(store, "agent:bot", goal_id="g1", lease="10m")  # a live lease ends in 10 minutes
    state, now = store.load(), clock.now()
    lease_end = t["lease_until"]
    assert decision_cache.valid_until(state, now, reasons.clock_inputs({"decision": "wait", "reason": "claimed"})) \
        == lease_end
    assert decision_cache.valid_until(state, now, reasons.clock_inputs(
        {"decision": "wait_human", "reason": "close_goal"})) > lease_end


def test_the_notification_list_is_the_registrys():
    from loopx.kernel import reasons
    from loopx.kernel.storage import fold

    assert set(fold.NOTICE_REASONS) == {r.reason for r in reasons.ROWS if r.notifies} - {"gate_pending", "goal_done"}
    assert {"close_goal", "out_of_scope", "budget_turns", "stalled", "verify_broken"} <= set(fold.NOTICE_REASONS)
