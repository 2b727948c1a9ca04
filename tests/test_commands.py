"""Behaviour of the core commands through main(argv), in process."""

from __future__ import annotations

import json
import sys

import pytest


def test_connect_is_idempotent_and_writes_gitignore(project, cli):
    r = cli("connect", json=True)
    assert r.code == 0
    assert r.data["created"] is False
    assert "nothing changed" in cli("connect").out
    gi = (project / ".loopx" / ".gitignore").read_text()
    assert "lock" in gi and "cache/" in gi


def test_connect_in_a_subfolder_of_a_project_is_refused_unless_named(project, cli, monkeypatch):
    """A bare connect below a connected project would make a store that hides the outer goals from
    every command run there: a usage error with the way out; `--project .` makes one on purpose."""
    assert cli("start-goal", "--goal-text", "Outer goal", "--goal-id", "outer").code == 0
    sub = project / "tests" / "unit"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    r = cli("connect")
    assert r.code == 2 and "inside the loopx project" in r.err and "--project ." in r.err, r.err
    assert len(r.err.strip().splitlines()) == 2 and "Traceback" not in r.err  # the error and its hint
    assert not (sub / ".loopx").exists()
    assert "outer" in cli("status", json=True).out  # the outer goal is still what commands here see
    r = cli("connect", "--project", ".", json=True)
    assert r.code == 0 and r.data["created"] is True and (sub / ".loopx" / "format.json").is_file()


def test_connect_registers_project_in_user_registry(project, cli, tmp_path):
    from loopx.kernel.storage import registry

    assert str(project) in registry.load()


def test_command_outside_project_exits_3_with_hint(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    r = cli("todo", "list")
    assert r.code == 3
    assert "loopx: error:" in r.err and "hint: run `loopx connect`" in r.err


def test_start_goal_derives_slug_and_refuses_duplicate_id(project, cli):
    r = cli("start-goal", "--goal-text", "Fix the flaky CI!", json=True)
    assert r.data["goal_id"] == "fix-the-flaky-ci"
    r2 = cli("start-goal", "--goal-text", "Fix the flaky CI!", json=True)
    assert r2.data["goal_id"] == "fix-the-flaky-ci-2"
    r3 = cli("start-goal", "--goal-text", "x", "--goal-id", "fix-the-flaky-ci", json=True)
    assert r3.code == 4 and r3.json["error"]["code"] == "conflict"


def test_goal_id_optional_only_with_one_active_goal(goal, cli):
    assert cli("todo", "add", "third").code == 0
    cli("start-goal", "--goal-text", "another goal", "--goal-id", "g2")
    r = cli("todo", "add", "fourth", json=True)
    assert r.code == 2 and r.json["error"]["code"] == "goal_required"
    assert "g1" in r.json["error"]["hint"] and "g2" in r.json["error"]["hint"]
    assert cli("todo", "add", "fourth", "--goal-id", "g2").code == 0


def test_guided_without_terminal_prints_plan_and_command(project, cli):
    r = cli("start-goal", "--guided", "--goal-text", "Ship it", json=True)
    assert r.code == 0
    assert r.data["started"] is False
    assert "loopx start-goal --goal-text 'Ship it'" in r.data["command"]
    assert "done_when" in r.data["missing"]
    assert cli("goal", "list", json=True).data["goals"] == []


def test_goal_lifecycle(goal, cli):
    assert cli("goal", "pause", json=True).data["status"] == "paused"
    assert "already paused" in cli("goal", "pause", goal).out
    assert cli("goal", "resume", goal).code == 0
    assert cli("goal", "done", goal).code == 0
    r = cli("todo", "add", "late", "--goal-id", goal, json=True)
    assert r.code == 4
    assert cli("goal", "resume", goal).code == 0
    show = cli("goal", "show", goal, json=True).data["goal"]
    assert show["status"] == "active" and show["todos"]["open"] == 2


def test_todo_done_requires_evidence_and_adds_successor(goal, cli):
    tid = cli("todo", "list", json=True).data["todos"][0]["id"]
    r = cli("todo", "done", tid, json=True)
    assert r.code == 2 and r.json["error"]["code"] == "evidence_required"
    ev = cli("evidence", "add", "--kind", "test", "--summary", "green", "--exit-code", "0", json=True).data["evidence_id"]
    r = cli("todo", "done", tid[:5], "--evidence", ev[:6], "--next", "follow-up", json=True)
    assert r.code == 0, r.out
    assert len(r.data["next"]) == 1
    titles = {t["title"]: t["status"] for t in cli("todo", "list", "--all", json=True).data["todos"]}
    assert titles["first"] == "done" and titles["follow-up"] == "open"
    assert cli("todo", "done", tid, "--evidence", ev).code == 4  # already done


def test_unknown_evidence_id_exits_2(goal, cli):
    tid = cli("todo", "list", json=True).data["todos"][0]["id"]
    r = cli("todo", "done", tid, "--evidence", "ev-nope", json=True)
    assert r.code == 2 and r.json["error"]["code"] == "not_found"


def test_claim_conflict_names_holder_and_own_claim_renews(goal, cli):
    tid = cli("todo", "list", json=True).data["todos"][0]["id"]
    first = cli("--agent", "a1", "todo", "claim", tid, json=True)
    assert first.code == 0 and first.data["fence"] > 0
    again = cli("--agent", "a1", "todo", "claim", tid, "--lease", "1h", json=True)
    assert again.data["renewed"] is True and again.data["fence"] == first.data["fence"]
    other = cli("todo", "claim", tid, "--agent", "a2", json=True)
    assert other.code == 4
    assert other.json["error"]["details"]["holder"] == "agent:a1"


def test_depends_on_keeps_todo_out_of_ready(goal, cli):
    todos = cli("todo", "list", json=True).data["todos"]
    r = cli("todo", "add", "after first", "--depends-on", todos[0]["id"], json=True)
    ready = [t["id"] for t in cli("todo", "list", "--ready", json=True).data["todos"]]
    assert r.data["todo_id"] not in ready and todos[0]["id"] in ready


def test_block_and_reopen(goal, cli):
    tid = cli("todo", "list", json=True).data["todos"][0]["id"]
    assert cli("todo", "block", tid, "--reason", "needs keys").code == 0
    assert cli("todo", "claim", tid, "--agent", "a1").code == 4
    assert cli("todo", "update", tid, "--reopen").code == 0
    assert cli("todo", "claim", tid, "--agent", "a1").code == 0


def test_gate_blocks_claim_until_approved(goal, cli):
    tid = cli("todo", "list", json=True).data["todos"][0]["id"]
    g = cli("--agent", "a1", "gate", "open", "--kind", "merge", "--question", "Merge?", "--blocks", tid, json=True).data
    assert cli("todo", "claim", tid, "--agent", "a1", json=True).json["error"]["code"] == "gate_pending"
    assert cli("gate", "check", "--action", "merge").code == 1
    assert cli("gate", "approve", g["gate_id"], "--confirm", "wrong").code == 2
    ok = cli("gate", "approve", g["gate_id"], "--confirm", g["gate_id"], json=True)
    assert ok.code == 0 and ok.data["channel"] == "confirm-flag"
    assert cli("gate", "check", "--action", "merge").code == 0
    assert cli("todo", "claim", tid, "--agent", "a1").code == 0


def test_gate_reject_needs_note(goal, cli):
    g = cli("gate", "open", "--kind", "release", "--question", "Publish 1.0?", json=True).data["gate_id"]
    assert cli("gate", "reject", g, "--confirm", g).code == 2
    r = cli("gate", "reject", g, "--confirm", g, "--note", "not yet", json=True)
    assert r.code == 0 and r.data["status"] == "rejected"


@pytest.mark.parametrize("kind", ["bogus", "MERGE"])
def test_gate_open_unknown_kind(goal, cli, kind):
    r = cli("gate", "open", "--kind", kind, "--question", "q", json=True)
    assert r.code == 2 and "merge" in r.json["error"]["hint"]


def test_scope_set_and_check(goal, cli, project):
    cli("scope", "set", "--allow", "src/**", "--deny", "src/secrets/**")
    assert cli("scope", "check", "src/app.py").code == 0
    assert cli("scope", "check", "src/secrets/key.pem").code == 1
    assert cli("scope", "check", "README.md").code == 1
    assert cli("scope", "check", "../outside.txt").code == 1
    assert cli("scope", "check", ".loopx/events.jsonl").code == 1
    cli("scope", "set", "--clear-allow")
    assert cli("scope", "check", "README.md").code == 0


def test_evidence_output_file_is_redacted_and_bounded(goal, cli, project):
    body = "line\n" * 3000 + "password=hunter2secret\n"
    (project / "out.txt").write_text(body)
    r = cli("evidence", "add", "--kind", "command", "--summary", "long run", "--output-file", "out.txt", json=True)
    assert r.code == 0 and r.data["blob"]
    shown = cli("evidence", "show", r.data["evidence_id"], json=True).data["evidence"]
    assert "hunter2" not in shown["excerpt"] and "characters cut" in shown["excerpt"]
    assert "hunter2" not in (project / ".loopx" / "evidence.jsonl").read_text()
    assert cli("evidence", "add", "--kind", "test", "--summary", "x", "--output-file", "missing.txt").code == 2


def test_handoff_releases_the_todo(goal, cli):
    tid = cli("todo", "list", json=True).data["todos"][0]["id"]
    cli("--agent", "a1", "todo", "claim", tid)
    r = cli("--agent", "a1", "handoff", "--to", "b2", "--todo", tid, "--note", "over to you", json=True)
    assert r.data["released"] is True
    assert cli("--agent", "b2", "todo", "claim", tid).code == 0
    lst = cli("agent", "list", json=True).data
    assert lst["handoffs"][-1]["to"] == "agent:b2"


def test_status_shows_gate_and_next(goal, cli):
    cli("gate", "open", "--kind", "merge", "--question", "Merge the fix?")
    r = cli("status")
    assert "NEEDS YOU" in r.out and "Merge the fix?" in r.out
    data = cli("status", json=True).data
    assert data["goals"][0]["needs_human"][0]["kind"] == "merge"
    assert data["next"].startswith("a human decides gate")


def test_no_arguments_prints_orientation(project, cli):
    r = cli()
    assert r.code == 0 and "next:" in r.out and len(r.out.splitlines()) < 8


def test_json_envelope_on_argparse_error(project, cli):
    r = cli("todo", "add", json=True)
    doc = json.loads(r.out)
    assert r.code == 2 and doc["ok"] is False and doc["error"]["code"] == "usage"


def test_status_next_says_wait_when_the_budget_is_spent(goal, cli):
    from loopx.kernel.storage.store import Draft, Store

    cli("quota", "set", "--goal-id", goal, "--slots", "1")
    Store.open(".").transact(lambda s, n: [Draft("quota.spent", goal, {"run_id": "run-x", "slots": 1})], actor="human:t")
    data = cli("status", json=True).data
    assert data["goals"][0]["budget"]["left"] == 0
    assert data["goals"][0]["next"].startswith("wait: the budget")


def test_unknown_run_hint_names_a_real_command(goal, cli):
    r = cli("turn", "finish", "--run", "run-bogus", "--result", "progress", json=True)
    assert r.code == 2 and "loopx history --rounds" in r.json["error"]["hint"]


def test_failed_verify_on_progress_warns(goal, cli, project):
    cli("goal", "update", goal, "--verify", f"{sys.executable} -c \"raise SystemExit(1)\"")
    run = cli("--agent", "a1", "next", json=True).data["run_id"]
    r = cli("--agent", "a1", "turn", "finish", "--run", run, "--result", "progress", "--verify", json=True)
    assert r.code == 0 and r.data["verified"] is False
    assert any("verify command failed" in w for w in r.json["warnings"])


def test_evidence_add_names_its_todo_in_the_cite_hint(goal, cli):
    tid = cli("todo", "list", json=True).data["todos"][0]["id"]
    out = cli("evidence", "add", "--kind", "note", "--summary", "x", "--todo", tid).out
    assert f"loopx todo done {tid} --evidence" in out


def test_evidence_over_the_blob_limit_keeps_the_tail_and_hashes_everything(goal, cli, project):
    import hashlib

    body = "line of test output\n" * 600_000 + "=== 3 failed, 997 passed ===\n"
    (project / "big.txt").write_text(body)
    r = cli("evidence", "add", "--kind", "test", "--summary", "big", "--output-file", "big.txt", json=True)
    assert r.data["bytes"] == len(body.encode()) and r.data["sha256"] == hashlib.sha256(body.encode()).hexdigest()
    blob = (project / ".loopx" / r.data["blob"]).read_text()
    assert blob.endswith("=== 3 failed, 997 passed ===\n") and "bytes cut" in blob
    shown = cli("evidence", "show", r.data["evidence_id"], json=True).data["evidence"]
    assert "3 failed, 997 passed" in shown["excerpt"]


def test_verify_command_with_a_secret_is_refused_not_silently_redacted(project, cli):
    r = cli("start-goal", "--goal-text", "g", "--verify", "DB_PASSWORD=devpass pytest -q", json=True)
    assert r.code == 2 and "secret" in r.json["error"]["message"]
    assert cli("goal", "list", json=True).data["goals"] == []


def test_review_packet_refuses_to_write_into_the_store(goal, cli, project):
    before = (project / ".loopx" / "events.jsonl").read_bytes()
    r = cli("review-packet", "--output", ".loopx/events.jsonl", json=True)
    assert r.code == 2 and (project / ".loopx" / "events.jsonl").read_bytes() == before


def test_depends_on_a_todo_of_another_goal_is_refused(goal, cli):
    other = cli("start-goal", "--goal-text", "other", "--goal-id", "g2", "--todo", "x", json=True).data["todo_ids"][0]
    r = cli("todo", "add", "y", "--goal-id", goal, "--depends-on", other, json=True)
    assert r.code == 2 and "own goal" in r.json["error"]["hint"]


@pytest.mark.parametrize("now", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"])
def test_loopx_now_out_of_range_is_a_usage_error(goal, cli, monkeypatch, now):
    monkeypatch.setenv("LOOPX_NOW", now)
    r = cli("quota", "should-run", json=True)
    assert r.code == 2 and "out of range" in r.json["error"]["message"]


def test_store_file_that_is_a_directory_exits_3(goal, cli, project):
    events = project / ".loopx" / "events.jsonl"
    events.rename(project / "events.bak")
    events.mkdir()
    r = cli("status", json=True)
    assert r.code == 3 and r.json["error"]["code"] == "io_error"


# ------------------------------------------------------------------ issue 9 item 12: agent kinds
def test_agent_register_accepts_any_lowercase_kind_word(project, cli):
    r = cli("agent", "register", "deepseek", "--kind", "deepseek", json=True)
    assert r.code == 0 and r.data["kind"] == "deepseek" and r.data["known"] is False and not r.json["warnings"]
    rows = {a["name"]: a for a in cli("agent", "list", json=True).data["agents"]}
    assert rows["deepseek"]["kind"] == "deepseek"
    typo = cli("agent", "register", "c2", "--kind", "codx", json=True)
    assert typo.code == 0 and "did you mean --kind codex" in typo.json["warnings"][0]
    for bad in ("Deep Seek", "DEEPSEEK", "x-", "x" * 40, "", "dé"):
        r = cli("agent", "register", "z", f"--kind={bad}", json=True)
        assert r.code == 2 and "claude-code" in r.json["error"]["hint"], bad


def test_an_unregistered_codex_agent_shows_its_host_kind(goal, cli, project):
    cli("--agent", "codex", "next")
    cli("--agent", "claude", "evidence", "add", "--kind", "note", "--summary", "x")
    cli("--agent", "robot7", "evidence", "add", "--kind", "note", "--summary", "x")
    rows = {a["name"]: a["kind"] for a in cli("agent", "list", json=True).data["agents"]}
    assert rows == {"codex": "codex", "claude": "claude-code", "robot7": "unknown"}
    from loopx.dashboard.api import Api

    api = Api.__new__(Api)  # only the per-project reader is needed
    api.projects = lambda: [{"key": "k", "name": "proj", "path": str(project)}]
    from loopx.kernel.storage.store import Store

    api.state = lambda path: Store.open(path).load()
    shown = {a["name"]: a["kind"] for a in api.agents("2026-01-01T00:00:00Z")["projects"][0]["agents"]}
    assert shown["codex"] == "codex" and shown["claude"] == "claude-code"


# ------------------------------------------------------------------ issue 9 item 14: goal dependencies
def test_todo_depends_on_another_goal_is_ready_when_that_goal_is_done(goal, cli, project):
    other = cli("start-goal", "--goal-text", "Ship the API", "--goal-id", "api", "--todo", "build it", json=True).data
    r = cli("todo", "add", "use the new API", "--goal-id", "api", "--depends-on-goal", goal, json=True)
    assert r.code == 0 and r.data["depends_on_goals"] == [goal]
    waiting = r.data["todo_id"]
    assert "ready once goal g1 is done" in cli("todo", "add", "x2", "--goal-id", "api", "--depends-on-goal", "g1").out
    ready = {t["id"] for t in cli("todo", "list", "--goal-id", "api", "--ready", json=True).data["todos"]}
    assert waiting not in ready and other["todo_ids"][0] in ready
    st = cli("status", "--goal-id", "api", json=True).data["goals"][0]
    assert st["waiting_on_goals"][0]["id"] == waiting and st["waiting_on_goals"][0]["goals"] == [{"id": goal, "status": "active"}]
    assert f"waits:   {waiting}" in cli("status", "--goal-id", "api").out and "until goal g1 (active) is done" in cli("status").out
    assert "after goal: g1" in cli("todo", "show", waiting).out
    # only the waiting todos left: should-run waits (not a human problem), naming the goal
    cli("todo", "archive", other["todo_ids"][0])
    d = cli("quota", "should-run", "--goal-id", "api", json=True).data
    assert (d["decision"], d["reason"]) == ("wait", "goal_dependency") and "g1" in d["message"]
    assert cli("goal", "done", goal, json=True).code == 0
    ready = {t["id"] for t in cli("todo", "list", "--goal-id", "api", "--ready", json=True).data["todos"]}
    assert waiting in ready
    assert cli("status", "--goal-id", "api", json=True).data["goals"][0]["waiting_on_goals"] == []
    d = cli("quota", "should-run", "--goal-id", "api", json=True).data
    assert d["decision"] == "run"


def test_goal_dependency_refuses_itself_unknown_goals_and_cycles(goal, cli):
    cli("start-goal", "--goal-text", "B", "--goal-id", "b", "--todo", "x", json=True)
    r = cli("todo", "add", "t", "--goal-id", goal, "--depends-on-goal", goal, json=True)
    assert r.code == 2 and "its own goal" in r.json["error"]["message"]
    r = cli("todo", "add", "t", "--goal-id", goal, "--depends-on-goal", "nope", json=True)
    assert r.code == 2 and r.json["error"]["hint"]
    assert cli("todo", "add", "t", "--goal-id", "b", "--depends-on-goal", goal, json=True).code == 0
    r = cli("todo", "add", "t", "--goal-id", goal, "--depends-on-goal", "b", json=True)
    assert r.code == 2 and "wait for each other" in r.json["error"]["message"]


def test_dashboard_goal_page_shows_the_goal_dependency(goal, cli, project):
    from loopx.dashboard.api import Api
    from loopx.kernel.storage.store import Store

    cli("start-goal", "--goal-text", "B", "--goal-id", "b", "--todo", "x", json=True)
    tid = cli("todo", "add", "after g1", "--goal-id", "b", "--depends-on-goal", goal, json=True).data["todo_id"]
    api = Api.__new__(Api)
    api.state = lambda path: Store.open(path).load()
    api.project = lambda key: {"key": key, "name": "proj", "path": str(project)}
    api.decision = lambda *a, **k: None
    page = api.goal("k", "b", "2026-01-01T00:00:00Z")
    items = {t["id"]: t for col in page["board"].values() for t in col["items"]}
    assert items[tid]["depends_on_goals"] == [{"id": goal, "status": "active"}]
