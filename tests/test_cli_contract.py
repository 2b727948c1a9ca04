"""The CLI contract of docs/architecture.md#the-cli: the JSON envelope, exit codes, error text, global options
anywhere on the line, an example in every ``--help``, and ids resolved like git resolves hashes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_loopx, subprocess_env
from loopx.cli import COMMANDS, build_parser, main

ENVELOPE_KEYS = {"schema", "command", "ok", "exit_code", "data", "warnings", "error"}


def envelope(r, *, ok: bool, code: int) -> dict:
    assert r.code == code, (r.code, r.out, r.err)
    lines = r.out.strip().split("\n")
    assert len(lines) == 1, "exactly one JSON document on stdout"
    doc = json.loads(lines[0])
    assert set(doc) == ENVELOPE_KEYS
    assert doc["schema"] == 1 and doc["ok"] is ok and doc["exit_code"] == code
    assert isinstance(doc["command"], str) and doc["command"]
    assert isinstance(doc["data"], dict) and isinstance(doc["warnings"], list)
    if ok:
        assert doc["error"] is None
    else:
        assert set(doc["error"]) >= {"code", "message", "hint"}
        assert doc["error"]["code"] and doc["error"]["message"]
    assert "Traceback" not in r.err
    return doc


# ----------------------------------------------------------------- envelope
@pytest.mark.parametrize("args,command", [
    (["status"], "status"), (["todo", "add", "x"], "todo add"), (["todo", "list"], "todo list"),
    (["goal", "list"], "goal list"), (["goal", "show", "g1"], "goal show"), (["gate", "list"], "gate list"),
    (["scope", "show"], "scope show"), (["agent", "list"], "agent list"), (["connect"], "connect"),
    (["evidence", "add", "--kind", "note", "--summary", "s"], "evidence add"),
])
def test_success_envelope(goal, cli, args, command):
    doc = envelope(cli(*args, json=True), ok=True, code=0)
    assert doc["command"] == command


@pytest.mark.parametrize("args,code,error", [
    (["todo", "show", "t-nope"], 2, "not_found"),
    (["todo", "done", "first"], 2, None),
    (["goal", "show", "nope"], 2, "not_found"),
    (["todo", "add", "x", "--priority", "high"], 2, "usage"),
    (["gate", "open", "--kind", "nonsense", "--question", "q"], 2, "usage"),
    (["todo", "claim", "t-", "--lease", "forever"], 2, "usage"),
    (["gate", "check", "--action", "merge"], 1, None),
    (["scope", "check", "/etc/passwd"], 1, None),
])
def test_failure_envelope(goal, cli, args, code, error):
    r = cli(*args, json=True)
    doc = envelope(r, ok=code == 1, code=code)   # exit 1 is a clean "no": ok, with an answer in data
    if error:
        assert doc["error"]["code"] == error


def test_not_connected_is_exit_3_in_both_formats(tmp_path):
    r = run_loopx(["todo", "list", "--format", "json"], tmp_path)
    doc = envelope(r, ok=False, code=3)
    assert doc["error"]["code"] == "not_connected" and "connect" in doc["error"]["hint"]
    t = run_loopx(["todo", "list"], tmp_path)
    assert t.code == 3 and t.out == ""
    assert t.err.startswith("loopx: error: ") and "\nhint: " in t.err


def test_conflict_is_exit_4(goal, project):
    todo = run_loopx(["todo", "add", "c", "--format", "json"], project).data["todo_id"]
    assert run_loopx(["--agent", "a", "todo", "claim", todo], project).code == 0
    r = run_loopx(["--agent", "b", "todo", "claim", todo, "--format", "json"], project)
    doc = envelope(r, ok=False, code=4)
    assert doc["error"]["code"] == "claimed_by_other"
    assert r.err == "", "JSON mode keeps stderr quiet"


@pytest.mark.parametrize("args", [["bogus"], ["todo"], ["todo", "add"], ["--format", "xml", "status"],
                                  ["todo", "list", "--status", "weird"], ["--project"]])
def test_usage_errors(project, args):
    t = run_loopx(args, project)
    assert t.code == 2, (t.code, t.err)
    assert t.err.startswith("loopx: error: ") and "\nhint: " in t.err and "Traceback" not in t.err
    if "xml" not in args:
        envelope(run_loopx([*args, "--json"] if args != ["--project"] else ["--json", *args], project),
                 ok=False, code=2)


def test_text_errors_are_one_line_plus_hint(goal, project):
    r = run_loopx(["todo", "show", "t-zzzz"], project)
    assert r.code == 2 and r.out == ""
    lines = r.err.strip().split("\n")
    assert len(lines) == 2 and lines[0].startswith("loopx: error: ") and lines[1].startswith("hint: ")


def _wait_until_waiting_for_lock(pid: int, lock, timeout: float = 30.0) -> None:
    """On Linux, until the process has the lock file open (it is then in the lock wait loop);
    elsewhere a generous pause."""
    fd_dir = f"/proc/{pid}/fd"
    if not os.path.isdir(fd_dir):
        time.sleep(3.0)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(os.readlink(os.path.join(fd_dir, fd)) == str(lock) for fd in os.listdir(fd_dir)):
                time.sleep(0.1)
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError("the writer never started waiting for the lock")


@pytest.mark.skipif(os.name == "nt", reason="SIGINT delivery to a child is POSIX")
def test_interrupt_while_waiting_for_the_lock_is_130(goal, project):
    holder = subprocess.Popen([sys.executable, "-c", "from loopx.kernel.storage.store import Store\nimport time\n"
                               "with Store.open('.').lock():\n print('locked', flush=True); time.sleep(60)"],
                              cwd=project, env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        waiter = subprocess.Popen([sys.executable, "-m", "loopx", "todo", "add", "x"], cwd=project,
                                  env=subprocess_env({"LOOPX_LOCK_TIMEOUT": "60"}), stderr=subprocess.PIPE, text=True)
        _wait_until_waiting_for_lock(waiter.pid, project / ".loopx" / "lock")
        waiter.send_signal(signal.SIGINT)
        _, err = waiter.communicate(timeout=30)
        assert waiter.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
    finally:
        holder.kill()
        holder.wait()
    assert "x" not in [t["title"] for t in run_loopx(["todo", "list", "--json"], project).data["todos"]]


# ----------------------------------------------------------------- global options
@pytest.mark.parametrize("argv", [
    ["--format", "json", "todo", "list"], ["todo", "list", "--format", "json"], ["todo", "--json", "list"],
    ["--json", "todo", "list"], ["todo", "list", "--format=json"], ["todo", "list", "--json", "--quiet"],
])
def test_format_before_or_after_the_command(goal, project, argv):
    r = run_loopx(argv, project)
    assert envelope(r, ok=True, code=0)["data"]["count"] == 2


def test_project_and_agent_before_or_after(goal, project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    a = run_loopx(["--project", project, "--agent", "alpha", "todo", "add", "from afar", "--json"], elsewhere)
    b = run_loopx(["todo", "add", "from afar too", "--project", str(project), "--agent=beta", "--json"], elsewhere)
    c = run_loopx(["todo", "--project=" + str(project), "list", "--json"], elsewhere)
    assert a.code == b.code == c.code == 0, (a.err, b.err, c.err)
    assert c.data["count"] == 4
    events = [json.loads(x) for x in (project / ".loopx" / "events.jsonl").read_text().splitlines()]
    assert [e["actor"] for e in events[-2:]] == ["agent:alpha", "agent:beta"]


def test_quiet_prints_nothing_on_success_but_still_reports_errors(goal, project):
    r = run_loopx(["todo", "add", "quiet one", "--quiet"], project)
    assert r.code == 0 and r.out == "" and r.err == ""
    r = run_loopx(["-q", "todo", "show", "t-zzzz"], project)
    assert r.code == 2 and "loopx: error:" in r.err


def test_double_dash_ends_options(goal, project):
    r = run_loopx(["todo", "add", "--json", "--", "--not-an-option"], project)
    assert r.code == 0, r.err
    titles = [t["title"] for t in run_loopx(["todo", "list", "--json"], project).data["todos"]]
    assert "--not-an-option" in titles


def test_version(project):
    r = run_loopx(["--version"], project)
    assert r.code == 0 and r.out.startswith("loopx ")
    for argv in (["--version", "--format", "json"], ["--format", "json", "--version"], ["--version", "--json"]):
        r = run_loopx(argv, project)
        doc = json.loads(r.out)  # the envelope every command prints, not plain text
        assert r.code == 0 and doc["ok"] and doc["command"] == "version" and doc["data"]["version"], argv


# ----------------------------------------------------------------- help
def _help_paths() -> list[list[str]]:
    paths = []
    for name in COMMANDS:
        try:
            parser = build_parser(name)
        except ImportError:
            continue  # a command whose module has not landed yet
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        cmd_parser = sub.choices[name]
        paths.append([name])
        for action in cmd_parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                paths.extend([name, child] for child in action.choices)
    return paths


HELP_PATHS = _help_paths()


def test_help_paths_cover_the_core_commands():
    names = {" ".join(p) for p in HELP_PATHS}
    for must in ("connect", "status", "start-goal", "goal list", "todo add", "todo claim", "todo done", "gate approve",
                 "scope check", "evidence add", "agent register", "handoff"):
        assert must in names


@pytest.mark.parametrize("path", HELP_PATHS, ids=lambda p: " ".join(p))
def test_every_help_shows_an_example(path, capsys):
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "example" in out.lower(), f"`loopx {' '.join(path)} --help` has no example"
    example = out.lower().split("example", 1)[1]
    assert "loopx " in example, out


def test_top_level_help_lists_commands_and_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("connect", "status", "todo", "gate"):
        assert name in out
    assert "exit codes" in out


# ----------------------------------------------------------------- ids and prefixes
def test_unique_prefixes_resolve_and_ambiguous_ones_exit_2(goal, project, cli):
    todos = cli("todo", "list", json=True).data["todos"]
    a, b = (t["id"] for t in todos)
    for given in (a, a[:len(a) - 1], a[2:]):  # full id, a prefix, the hex part without the kind prefix
        r = cli("todo", "show", given, json=True)
        assert r.code == 0 and r.data["todo"]["id"] == a, given
    common = os.path.commonprefix([a, b])
    r = cli("todo", "show", common, json=True)
    doc = envelope(r, ok=False, code=2)
    assert doc["error"]["code"] == "ambiguous" and a in doc["error"]["message"] and b in doc["error"]["message"]
    t = cli("todo", "claim", common)
    assert t.code == 2 and "ambiguous" in t.err and "hint:" in t.err
    r = cli("todo", "show", "t-gggg", json=True)
    assert envelope(r, ok=False, code=2)["error"]["code"] == "not_found"


def test_ambiguous_goal_and_gate_prefixes(goal, project, cli):
    assert cli("start-goal", "--goal-text", "other", "--goal-id", "g2").code == 0
    r = cli("goal", "show", "g", json=True)
    assert envelope(r, ok=False, code=2)["error"]["code"] == "ambiguous"
    assert cli("goal", "show", "g2", json=True).code == 0
    # with two active goals, leaving --goal-id out is a usage error naming the choices
    r = cli("todo", "add", "where?", json=True)
    doc = envelope(r, ok=False, code=2)
    assert "g1" in doc["error"]["hint"] and "g2" in doc["error"]["hint"]
    for q in ("one?", "two?"):
        assert cli("gate", "open", "--goal-id", "g1", "--kind", "merge", "--question", q).code == 0
    r = cli("gate", "show", "gate-", json=True)
    assert envelope(r, ok=False, code=2)["error"]["code"] == "ambiguous"


@pytest.mark.parametrize("argv, meant", [(["stauts"], "`loopx status`"), (["statu"], "`loopx status`"),
                                         (["todo", "lst"], "`loopx todo list`")])
def test_a_mistyped_command_names_the_close_one(argv, meant, cli):
    r = cli(*argv)
    assert r.code == 2 and r.err.startswith("loopx: error: unknown ") and meant in r.err, r.err
    assert len(r.err.strip().splitlines()) == 2 and "choose from" not in r.err, r.err  # not all 38 names on a line


def test_a_command_that_is_nothing_like_one_points_at_the_help(cli):
    r = cli("zzzz")
    assert r.code == 2 and "unknown command 'zzzz'" in r.err and "`loopx --help` lists the commands" in r.err, r.err
