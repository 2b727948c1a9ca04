"""Writers and the hot readers run on the live view, which leaves closed records out (done todos,
decided gates, old runs and evidence). A lookup of such a record must never read as "unknown":
the view's collections raise ``fold.NotInLiveView`` on a miss and the store asks the full state
again (docs/architecture.md, "Lookups on the live view").

Each test acts on a record the live view left out, built through the real library and CLI (do the
work, close it, let later work move the view past it), on the store as it is and on a copy forced
onto the full state, and asserts both give the same answer."""

from __future__ import annotations

import marshal
import os
import shutil
import sys
from datetime import timedelta

import pytest

from conftest import human_channel
from loopx.cli import main
from loopx.kernel.policy import decide, turn
from loopx.kernel.read import approvals
from loopx.kernel.storage import caches, clock, fold
from loopx.kernel.storage.store import Draft, Store
from loopx.kernel.write import evidence, gates, goals, todos

H = "human:tester"
A = "agent:a1"
B = "agent:b2"
VERIFY = f"{sys.executable} -c pass"


def _at(monkeypatch, t0, minutes):
    monkeypatch.setenv("LOOPX_NOW", clock.iso(t0 + timedelta(minutes=minutes)))


@pytest.fixture
def aged(project, monkeypatch):
    """A store whose live view has moved past: a done todo, a rejected gate, a superseded approval,
    a finished run, old evidence, a failed goal-level check after that run, an agent's open run on a
    todo a human closed, and a second goal that is done."""
    t0 = clock.parse_ts("2026-05-01T10:00:00Z")
    _at(monkeypatch, t0, 0)
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="aged goal", goal_id="g1", verify=VERIFY, quota={"slots": 1000})
    goals.start_goal(store, H, objective="finished goal", goal_id="g2")
    ev = evidence.add(store, H, "g1", kind="test", summary="green", exit_code=0)["evidence_id"]
    old_ev = ev
    ids = {"ev": ev, "old_ev": old_ev}
    # a todo done by a human, one worked through a run, and one a held run's agent never finished
    ids["done"] = todos.add(store, H, "g1", "done long ago")["todo_id"]
    todos.done(store, H, ids["done"], [ev])
    ids["worked"] = todos.add(store, H, "g1", "worked by a run")["todo_id"]
    ids["checked"] = todos.add(store, H, "g1", "worked by the run the goal's check followed")["todo_id"]
    ids["held"] = todos.add(store, H, "g1", "held by an open run", priority=-5)["todo_id"]
    for minute, key, tid in ((1, "run", "worked"), (2, "checked_run", "checked")):
        _at(monkeypatch, t0, minute)
        nxt = turn.next_turn(store, A, goal_id="g1")
        assert nxt["todo_id"] == ids[tid], nxt["decision"]
        ids[key] = nxt["run_id"]
        turn.finish(store, A, ids[key], "completion", evidence=[ev])
    _at(monkeypatch, t0, 3)
    held = turn.next_turn(store, B, goal_id="g1", lease="8h")
    assert held["todo_id"] == ids["held"], held["decision"]
    ids["open_run"] = held["run_id"]
    todos.done(store, H, ids["held"], [ev])  # a human closes it under the running agent
    # the goal's verify command failed after that run (a goal-level check: no todo, no run)
    ids["check"] = evidence.add(store, H, "g1", kind="test", summary="goal verify failed", command=VERIFY,
                                exit_code=1, after_run=ids["checked_run"])["evidence_id"]
    # gates: one rejected, one approval superseded by a newer approval of the same kind
    ids["rejected"] = gates.open_gate(store, H, "g1", kind="custom", question="ok?", blocks=[ids["done"]])["gate_id"]
    gates.decide(store, H, ids["rejected"], approve=False, note="no", channel="confirm-flag", human=human_channel())
    ids["superseded"] = gates.open_gate(store, H, "g1", kind="release", question="release?")["gate_id"]
    gates.decide(store, H, ids["superseded"], approve=True, channel="confirm-flag", human=human_channel())
    ids["newer"] = gates.open_gate(store, H, "g1", kind="release", question="release again?")["gate_id"]
    gates.decide(store, H, ids["newer"], approve=True, channel="confirm-flag", human=human_channel())
    # both single-use approvals used: the view keeps every approval that may still authorise and the
    # newest used one (the guard's verdict), so only the older used one is left out
    assert gates.use(store, "guard:test", ids["superseded"], "release") and gates.use(store, "guard:test",
                                                                                      ids["newer"], "release")
    # later work: blocked runs (they move the view's horizon without touching the stall count),
    # each todo then closed by a human, and more evidence than the view keeps per goal
    for i in range(3):
        _at(monkeypatch, t0, 60 + i)
        tid = todos.add(store, H, "g1", f"later {i}")["todo_id"]
        r = turn.next_turn(store, A, goal_id="g1")
        assert r["todo_id"] == tid, r["decision"]
        turn.finish(store, A, r["run_id"], "blocked", note="waiting")
        fresh = evidence.add(store, H, "g1", kind="test", summary=f"green {i}", exit_code=0)["evidence_id"]
        todos.done(store, H, tid, [fresh])
        ids["ev"] = fresh
    for i in range(6):
        evidence.add(store, H, "g1", kind="note", summary=f"note {i}")
    _at(monkeypatch, t0, 120)
    store.load(save_snapshot="refresh")  # both snapshots current: the next command starts from the live view
    live = store.load(view="live")
    assert fold.is_live(live)
    for coll, key in (("todos", "done"), ("todos", "held"), ("gates", "rejected"), ("gates", "superseded"),
                      ("runs", "run"), ("evidence", "old_ev")):
        assert not fold.holds(live[coll], ids[key]), f"the live view still holds {key}"
        assert fold.holds(store.load()[coll], ids[key])
    return store, ids


def _cli(capsys, project, *args):
    capsys.readouterr()
    code = main(["--project", str(project), *map(str, args), "--format", "json"])
    import json

    env = json.loads(capsys.readouterr().out)
    return code, env


def _both(capsys, monkeypatch, project, tmp_path, *args):
    """(answer on the store as it is, answer on a copy that never uses the live view)."""
    twin = tmp_path / "twin"
    if twin.exists():
        shutil.rmtree(twin)
    shutil.copytree(project, twin)
    on_live = _cli(capsys, project, *args)
    with monkeypatch.context() as m:
        m.setattr(caches, "load_live", lambda store: None)
        on_full = _cli(capsys, twin, *args)
    return on_live, on_full


def _same(a, b, *keys):
    (code_a, env_a), (code_b, env_b) = a, b
    assert code_a == code_b, (env_a, env_b)
    assert (env_a["error"] or {}).get("code") == (env_b["error"] or {}).get("code"), (env_a, env_b)
    for k in keys:
        assert env_a["data"].get(k) == env_b["data"].get(k), (k, env_a["data"], env_b["data"])
    return code_a, env_a


# ------------------------------------------------------------------- the dict itself
def test_a_live_views_collections_raise_on_a_miss_and_answer_explicit_questions():
    view = fold.Partial({"t-1": {"id": "t-1"}})
    assert view["t-1"]["id"] == "t-1" and view.get("t-1") and "t-1" in view
    for miss in (lambda: view["t-2"], lambda: view.get("t-2"), lambda: view.get("t-2", {}), lambda: "t-2" in view):
        with pytest.raises(fold.NotInLiveView) as exc:
            miss()
        assert isinstance(exc.value, KeyError) and exc.value.args[0] == "t-2"
    assert view.get("") is None and view.get(None, 7) == 7 and "" not in view  # no record has an empty id
    assert fold.held(view, "t-2") is None and not fold.holds(view, "t-2") and fold.holds(view, "t-1")
    assert list(view) == ["t-1"] and len(view) == 1 and [t["id"] for t in view.values()] == ["t-1"]
    assert {**{"todos": view}}["todos"] is view


def test_the_live_view_is_saved_and_loaded_with_guarded_collections(aged):
    store, _ = aged
    live = store.load(view="live")
    assert all(type(live[k]) is fold.Partial for k in fold.PARTIAL)
    assert all(type(store.load()[k]) is dict for k in fold.PARTIAL)  # the full state answers "unknown"
    todos.add(store, H, "g1", "one more")  # a write saves the view (marshal takes no dict subclass)
    with open(store.path("cache", "live.bin"), "rb") as fh:
        saved = marshal.loads(fh.read())["state"]
    assert any(t["title"] == "one more" for t in saved["todos"].values())


def test_a_plan_that_looks_up_a_left_out_record_runs_again_on_the_full_state(aged):
    """The hazard itself: a plan written with ``.get(id)`` would have read None on the live view."""
    store, ids = aged
    seen = []

    def plan(state, now):
        seen.append(fold.is_live(state))
        t = state["todos"].get(ids["done"])
        assert t is not None and t["status"] == "done"
        return [Draft("project.noted", "g1", {"note": f"saw {t['id']}"})]

    records, _ = store.transact(plan, actor=H)
    assert seen == [True, False] and records[-1]["data"]["note"] == f"saw {ids['done']}"
    assert store.read(lambda s: s["gates"][ids["rejected"]]["status"]) == "rejected"


# ------------------------------------------------------------------- one test per kind of left-out record
def test_todo_done_on_a_done_todo_left_out_of_the_view(aged, capsys, monkeypatch, project, tmp_path):
    _, ids = aged
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "todo", "done", ids["done"],
                             "--evidence", ids["ev"]))
    assert code == 4 and env["error"]["code"] == "todo_closed"


def test_depending_on_a_done_todo_left_out_of_the_view(aged, capsys, monkeypatch, project, tmp_path):
    _, ids = aged
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "todo", "add", "after the old one",
                             "--goal-id", "g1", "--depends-on", ids["done"]))
    assert code == 0
    status = _cli(capsys, project, "status", "--goal-id", "g1")[1]["data"]
    assert "after the old one" in [t["title"] for t in status["goals"][0]["ready"]]  # its dependency is done


def test_evidence_on_a_done_todo_left_out_of_the_view(aged, capsys, monkeypatch, project, tmp_path):
    _, ids = aged
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "evidence", "add", "--goal-id", "g1",
                             "--todo", ids["done"], "--kind", "note", "--summary", "follow-up"), "todo", "goal_id")
    assert code == 0 and env["data"]["todo"] == ids["done"]


def test_gate_approve_on_a_decided_gate_left_out_of_the_view(aged, capsys, monkeypatch, project, tmp_path):
    _, ids = aged
    for gid in (ids["rejected"], ids["superseded"]):
        code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "gate", "approve", gid, "--confirm", gid))
        assert code == 4 and env["error"]["code"] == "gate_decided"


def test_turn_finish_on_a_closed_run_left_out_of_the_view(aged, capsys, monkeypatch, project, tmp_path):
    _, ids = aged
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "--agent", "a1", "turn", "finish",
                             "--run", ids["run"], "--result", "completion"), "repeat", "todo_status", "result")
    assert code == 0 and env["data"]["repeat"] is True and env["data"]["todo_status"] == "done"
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "--agent", "a1", "turn", "finish",
                             "--run", ids["run"], "--result", "failed"))
    assert code == 4 and env["error"]["code"] == "run_finished"


def test_an_open_run_whose_todo_was_closed_and_left_out(aged, capsys, monkeypatch, project, tmp_path):
    """The agent asks again (resume), then finishes: its todo is done and not in the view."""
    _, ids = aged
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "--agent", "b2", "next", "--goal-id", "g1"),
                      "run_id", "todo_id", "started")
    assert code == 0 and env["data"]["run_id"] == ids["open_run"] and env["data"]["todo_id"] == ids["held"]
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "--agent", "b2", "turn", "finish",
                             "--run", ids["open_run"], "--result", "progress"), "todo_status", "result")
    assert code == 0 and env["data"]["todo_status"] == "done"


def test_the_reaper_on_a_run_whose_todo_was_closed_and_left_out(aged, capsys, monkeypatch, project, tmp_path):
    """Housekeeping runs outside the plan's retry: it must not trip over the left-out todo."""
    _, ids = aged
    monkeypatch.setenv("LOOPX_NOW", "2026-05-02T10:00:00Z")  # the open run's 8 h lease has lapsed
    a, b = _both(capsys, monkeypatch, project, tmp_path, "todo", "add", "anything", "--goal-id", "g1")
    _same(a, b)
    for where in (project, tmp_path / "twin"):
        run = Store.open(str(where)).load()["runs"][ids["open_run"]]
        assert run["finished"] and run.get("reaped") and run["result"] == "failed"


def test_rejecting_a_gate_that_names_a_todo_left_out(aged, capsys, monkeypatch, project, tmp_path):
    store, ids = aged
    gid = gates.open_gate(store, H, "g1", kind="custom", question="again?", blocks=[ids["done"]])["gate_id"]
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "gate", "reject", gid, "--confirm", gid,
                             "--note", "no"), "blocked", "status")
    assert code == 0 and env["data"]["blocked"] == []  # a done todo is not blocked


def test_should_run_sees_the_goals_failed_check_after_a_run_left_out(aged, capsys, monkeypatch, project, tmp_path):
    """The goal-level verify check is older than the evidence the view keeps and the run it
    followed older than the runs it keeps: every todo is done, but the goal is not complete."""
    store, ids = aged
    live = store.load(view="live")  # kept: each goal's newest check per command, and the run it followed
    assert fold.holds(live["evidence"], ids["check"]) and fold.holds(live["runs"], ids["checked_run"])
    answers = [decide.evaluate(store.load(), clock.now(), goal_id="g1"),
               store.read(lambda s: decide.evaluate(s, clock.now(), goal_id="g1"))]
    assert [(d["decision"], d["reason"], d.get("mode")) for d in answers] == \
        [(answers[0]["decision"], answers[0]["reason"], answers[0].get("mode"))] * 2
    assert answers[0]["reason"] != "complete"
    a, b = _both(capsys, monkeypatch, project, tmp_path, "quota", "should-run", "--goal-id", "g1")
    _same(a, b, "decision", "reason", "mode")
    assert a[1]["data"]["reason"] != "complete"


def test_a_finished_goal_and_an_expired_claim(aged, capsys, monkeypatch, project, tmp_path):
    """Goals and claims are never left out; acting on them gives the same answer on both states."""
    store, ids = aged
    goals_done = _cli(capsys, project, "goal", "done", "g2")
    assert goals_done[0] == 0
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "todo", "add", "late", "--goal-id", "g2"))
    assert code != 0
    tid = todos.add(store, H, "g1", "claimed then lapsed")["todo_id"]
    todos.claim(store, A, tid, lease="10m")
    monkeypatch.setenv("LOOPX_NOW", "2026-05-01T13:00:00Z")
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "--agent", "b2", "todo", "claim", tid))
    assert code == 0
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "--agent", "a1", "todo", "renew", tid))
    assert code != 0


def test_should_run_on_a_setup_error_whose_todo_was_closed_and_left_out(project, capsys, monkeypatch, tmp_path):
    """The last run's verify command could not run; a human then closed its todo. The setup rule
    compares the command against that todo's own: the view keeps the todo of the goal's last run, so
    both states give the same answer."""
    t0 = clock.parse_ts("2026-05-01T10:00:00Z")
    _at(monkeypatch, t0, 0)
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="setup", goal_id="g1", verify=VERIFY, quota={"slots": 1000})
    ev = evidence.add(store, H, "g1", kind="test", summary="green", exit_code=0)["evidence_id"]
    x = todos.add(store, H, "g1", "the one whose check broke", priority=-5)["todo_id"]
    for i in range(2):
        todos.add(store, H, "g1", f"before {i}")
    for i in range(3):
        _at(monkeypatch, t0, 10 + i)
        r = turn.next_turn(store, A, goal_id="g1")
        if i < 2:
            turn.finish(store, A, r["run_id"], "completion", evidence=[ev])
        else:
            assert r["todo_id"] == x
            err = {"reason": "verify_broken", "message": "the verify command could not run", "exit_code": 127,
                   "command": VERIFY, "path": os.environ.get("PATH")}
            turn.finish(store, A, r["run_id"], "blocked", report={"setup_error": err})
    todos.done(store, H, x, [ev])
    todos.add(store, H, "g1", "still to do")
    store.load(save_snapshot="refresh")
    live = store.load(view="live")
    # the view keeps the todo of each goal's last run (issue 26: settling a turn reads the view), so
    # here it answers alone, as the full state does
    assert fold.holds(live["todos"], x)
    full = decide.evaluate(store.load(), clock.now(), goal_id="g1", caller_path=decide.caller_path())
    assert full["reason"] == "verify_broken"
    assert decide.evaluate(live, clock.now(), goal_id="g1", caller_path=decide.caller_path())["reason"] == full["reason"]
    a, b = _both(capsys, monkeypatch, project, tmp_path, "quota", "should-run", "--goal-id", "g1")
    _same(a, b, "decision", "reason")
    assert a[1]["data"]["reason"] == "verify_broken"


def test_next_sees_a_live_agent_on_a_run_older_than_the_view_keeps(project, capsys, monkeypatch, tmp_path):
    """A run reaped under a still running agent, then two newer runs: the view keeps the newest run
    on each todo it keeps, so `next` waits for that agent on both states instead of starting a
    second one on the same todo."""
    import subprocess

    from loopx.kernel.storage import agentproc

    t0 = clock.parse_ts("2026-05-01T10:00:00Z")
    _at(monkeypatch, t0, 0)
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="orphans", goal_id="g1", quota={"slots": 1000})
    ev = evidence.add(store, H, "g1", kind="test", summary="green", exit_code=0)["evidence_id"]
    tid = todos.add(store, H, "g1", "the one an agent still works on")["todo_id"]
    first = turn.next_turn(store, A, goal_id="g1", lease="10m")
    assert first["todo_id"] == tid
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        turn.attach(store, A, first["run_id"], agentproc.describe(orphan.pid))
        for i in range(2):
            _at(monkeypatch, t0, 60 + i)
            todos.add(store, H, "g1", f"urgent {i}", priority=5)
            r = turn.next_turn(store, B, goal_id="g1")
            assert r["todo_id"] != tid, r["decision"]
            turn.finish(store, B, r["run_id"], "completion", evidence=[ev])
        _at(monkeypatch, t0, 90)
        store.load(save_snapshot="refresh")
        full = store.load()
        reaped = full["runs"][first["run_id"]]
        assert reaped.get("reaped") and full["goals"]["g1"]["no_progress_streak"] == 0
        # past the stall horizon (the two newest finished runs): kept only as the newest run on its todo
        assert sum(1 for r in full["runs"].values() if r["started"] > reaped["started"] and r["finished"]) == 2
        assert fold.holds(store.load(view="live")["runs"], first["run_id"])
        code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "--agent", "b2", "next", "--goal-id", "g1"),
                          "started", "run_id")
        assert env["data"]["started"] is False and env["data"]["decision"]["reason"] == "agent_alive"
    finally:
        orphan.kill()
        orphan.wait()


def test_spend_slot_again_after_the_window_the_view_keeps(project, capsys, monkeypatch, tmp_path):
    """The live view keeps only the budget window's ledger: a run charged before it is still charged."""
    t0 = clock.parse_ts("2026-05-01T10:00:00Z")
    _at(monkeypatch, t0, 0)
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="budget", goal_id="g1", verify=VERIFY, quota={"window": 3600, "slots": 5})
    todos.add(store, H, "g1", "work")
    r = turn.next_turn(store, A, goal_id="g1")
    turn.finish(store, A, r["run_id"], "progress", verify=True)
    assert turn.spend_slot(store, H, r["run_id"])["spent"] is True
    _at(monkeypatch, t0, 180)  # three windows later
    todos.add(store, H, "g1", "later")  # a write saves the view with the ledger cut at the window
    live = store.load(view="live")
    assert live["spends"]["g1"] == [] and live["runs"][r["run_id"]]["slots"] == 1
    code, env = _same(*_both(capsys, monkeypatch, project, tmp_path, "quota", "spend-slot", "--run", r["run_id"]),
                      "spent", "repeat", "slots", "ts")
    assert code == 0 and env["data"]["repeat"] is True
    assert len(store.load()["spends"]["g1"]) == 1  # not charged twice


def test_no_code_bypasses_the_guard_of_the_live_views_collections():
    """The guard is a dict subclass; these forms would answer "absent" for a left-out record without
    raising. Only ``fold`` (``held``/``holds``) may ask the plain dict; anything else says why there."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "loopx"
    coll = r'\[\s*"(?:todos|gates|runs|evidence)"\s*\]'
    bypass = re.compile(r"\bdict\.(?:get|__contains__|__getitem__)\(|" + coll + r"\.(?:keys|pop|setdefault|copy)\(|"
                        r"\bdict\([\w.]*" + coll + r"\)")
    found = [f"{p.relative_to(src)}:{i}: {line.strip()}" for p in sorted(src.rglob("*.py")) if p.name != "fold.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if bypass.search(line)]
    assert found == []


def test_the_guard_denies_and_allows_on_the_view_as_on_the_full_state(project, monkeypatch):
    """Issue 26: the guard asks the full state before denying only when the view left out a usable
    approval of that kind. An older standing approval behind a newer single-use one that was used,
    both decided before the view's horizon: the view keeps the standing one (it still authorises)
    and the newest used one (a denial names it); of many unused ones the newest few, counting the rest."""
    from loopx.guard import verdicts

    t0 = clock.parse_ts("2026-05-01T10:00:00Z")
    _at(monkeypatch, t0, 0)
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="guarded", goal_id="g1", verify=VERIFY, quota={"slots": 1000})
    standing = gates.open_gate(store, H, "g1", kind="merge", question="merge whenever?")["gate_id"]
    gates.decide(store, H, standing, approve=True, channel="confirm-flag", human=human_channel(), standing=True)
    once = gates.open_gate(store, H, "g1", kind="merge", question="merge now?")["gate_id"]
    gates.decide(store, H, once, approve=True, channel="confirm-flag", human=human_channel())
    assert gates.use(store, "guard:test", once, "git merge x")
    used = []
    for kind in ("release", "release"):  # a kind with only used approvals: the denial names the newest
        g = gates.open_gate(store, H, "g1", kind=kind, question="release?")["gate_id"]
        gates.decide(store, H, g, approve=True, channel="confirm-flag", human=human_channel())
        assert gates.use(store, "guard:test", g, "make release")
        used.append(g)
    unused = []
    for _ in range(fold.APPROVALS_KEPT + 2):  # more unused approvals than the view keeps: counted
        g = gates.open_gate(store, H, "g1", kind="release", question="release later?")["gate_id"]
        gates.decide(store, H, g, approve=True, channel="confirm-flag", human=human_channel())
        unused.append(g)
    for i in range(3):  # later work moves the view's horizon past those decisions
        _at(monkeypatch, t0, 60 + i)
        tid = todos.add(store, H, "g1", f"later {i}")["todo_id"]
        r = turn.next_turn(store, A, goal_id="g1")
        assert r["todo_id"] == tid, r["decision"]
        turn.finish(store, A, r["run_id"], "blocked", note="waiting")
        todos.done(store, H, tid, [evidence.add(store, H, "g1", kind="test", summary="ok", exit_code=0)["evidence_id"]])
    _at(monkeypatch, t0, 120)
    store.load(save_snapshot="refresh")
    live, full = store.load(view="live"), store.load()
    assert fold.is_live(live) and live["approvals"] == 1
    assert not fold.holds(live["gates"], used[0])  # an approval that can no longer authorise is left out
    assert fold.holds(live["gates"], used[1])  # the newest used one: a denial names it
    assert [fold.holds(live["gates"], g) for g in unused] == [False] * 2 + [True] * fold.APPROVALS_KEPT
    assert live["approvals_left"] == {"g1": {"release": 2}}  # so a denial of a release asks the full state
    for kind in ("merge", "release"):
        assert verdicts.gate_state(live, "g1", kind) == verdicts.gate_state(full, "g1", kind)
        assert approvals.last_used(live, "g1", kind) == approvals.last_used(full, "g1", kind)
    assert verdicts.gate_state(live, "g1", "merge")[1]["id"] == standing


def test_a_denial_asks_the_full_state_when_the_view_left_out_a_usable_approval(project, monkeypatch):
    """More unused single-use approvals than the view keeps, then the kept ones used: the view holds no
    usable approval any more, but it counted the ones it left out, so the pre-tool guard asks the
    full state and lets the action through on an older approval (as the full state always did)."""
    import io
    import json

    from loopx.hosts import entry

    t0 = clock.parse_ts("2026-05-01T10:00:00Z")
    _at(monkeypatch, t0, 0)
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="release often", goal_id="g1", protect=["release"], quota={"slots": 1000})
    approved = []
    for _ in range(fold.APPROVALS_KEPT + 2):
        g = gates.open_gate(store, H, "g1", kind="release", question="publish?")["gate_id"]
        gates.decide(store, H, g, approve=True, channel="confirm-flag", human=human_channel())
        approved.append(g)
    store.load(save_snapshot="refresh")
    for g in approved[2:]:  # the kept ones are used: the view now holds no usable approval
        assert gates.use(store, "guard:test", g, "npm publish")
    live = store.load(view="live")
    assert live["approvals_left"] == {"g1": {"release": 2}}
    assert not any(approvals.usable(g) for g in live["gates"].values() if g["kind"] == "release")
    payload = json.dumps({"session_id": "s", "cwd": str(project), "hook_event_name": "PreToolUse",
                          "tool_name": "Bash", "tool_input": {"command": "npm publish"}})
    response, info = entry.dispatch("pre-tool", "claude-code", io.StringIO(payload), project=str(project))
    assert info["allow"] is True and info["uses"][0]["gate_id"] == approved[1], info  # the newest left-out one
    response, info = entry.dispatch("pre-tool", "claude-code", io.StringIO(payload), project=str(project))
    assert info["allow"] is True and info["uses"][0]["gate_id"] == approved[0], info
    response, info = entry.dispatch("pre-tool", "claude-code", io.StringIO(payload), project=str(project))
    assert info["allow"] is False and info["kind"] == "release", info  # all used now: denied
    from loopx.guard import verdicts

    full = verdicts.evaluate(store.load(), commands=["npm publish"], project_dir=str(project), cwd=str(project))
    assert info["reason"] == full["reason"] and approved[-1] in info["reason"]  # the newest used one, as on the full state
