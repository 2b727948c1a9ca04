"""Kernel errors carry a stable code and structured fields and name no CLI flag or command; the
CLI words them with the flag and the command (loopx.commands.phrases), exactly as it always did."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from loopx import api
from loopx.cli import COMMANDS
from loopx.commands import phrases
from loopx.errors import Conflict, FieldError, NotConnected, NotFound, UsageError
from loopx.kernel.write import todos

SRC = Path(__file__).resolve().parents[1] / "src" / "loopx"
# a flag (``--lease``) or a loopx command (``loopx todo claim``) in a text
CLI_WORDS = re.compile(r"(^|[\s(`'])--[a-z]|\bloopx (" + "|".join(map(re.escape, COMMANDS)) + r")\b(?!:)")
NOT_YET: set[str] = set()  # kernel modules whose errors still name flags or commands: none


def _plain(exc) -> None:
    for text in (exc.message, exc.hint or ""):
        assert not CLI_WORDS.search(text), text


def _ids(cli) -> list[str]:
    return [t["id"] for t in cli("todo", "list", json=True).data["todos"]]


def test_an_api_caller_gets_a_code_and_fields_without_cli_wording(goal, project, cli):
    first = _ids(cli)[0]
    conn = api.connect(str(project), agent="runner")

    with pytest.raises(UsageError) as lease:
        api.next_turn(conn, lease="8d")
    assert isinstance(lease.value, FieldError) and lease.value.code == "usage"
    assert lease.value.details == {"field": "lease"}
    assert lease.value.message == "lease must be between 1s and 7d" and lease.value.hint == "use e.g. lease 30m"

    with pytest.raises(FieldError) as question:
        api.open_gate(conn, "custom", "  ")
    assert question.value.field == "question" and question.value.message == "question is empty"

    with pytest.raises(FieldError) as result:
        api.finish_turn(conn, "run-none", "bogus")
    assert result.value.details["field"] == "result" and result.value.message == "unknown result 'bogus'"

    with pytest.raises(NotFound) as unknown:
        api.finish_turn(conn, "run-none", "progress")
    assert unknown.value.code == "not_found" and unknown.value.details["kind"] == "run"
    assert unknown.value.details["id"] == "run-none" and unknown.value.hint == "list the run ids"

    todos.claim(conn.store, "agent:a", first)
    with pytest.raises(Conflict) as taken:
        todos.claim(conn.store, "agent:b", first)
    assert taken.value.code == "claimed_by_other"
    assert taken.value.details["todo"] == first and taken.value.details["holder"] == "agent:a"
    assert taken.value.details["live"] is True

    with pytest.raises(UsageError) as nothing:
        todos.update(conn.store, "agent:a", first)
    assert nothing.value.code == "nothing_to_update" and "verify" in nothing.value.details["fields"]
    assert nothing.value.hint == "pass title, detail, priority, depends_on, acceptance, verify or reopen"

    with pytest.raises(UsageError) as secret:
        todos.add(conn.store, conn.actor, "g1", "x", verify="curl -H 'Authorization: Bearer sk-" + "a" * 40 + "'")
    assert secret.value.code == "secret_in_command" and secret.value.details == {"field": "verify"}

    for exc in (lease.value, question.value, result.value, unknown.value, taken.value, nothing.value, secret.value):
        _plain(exc)


# (args, agent or None, the two lines loopx printed before the kernel stopped naming flags and
# commands; {first} is the first todo's id)
CLI_CASES = [
    (["todo", "claim", "{first}", "--lease", "forever"], None,
     "loopx: error: --lease: not a duration: 'forever'\nhint: use e.g. --lease 30m (at most 7d)"),
    (["todo", "update", "{first}"], None,
     "loopx: error: nothing to update\n"
     "hint: pass --title, --detail, --priority, --depends-on, --acceptance, --verify or --reopen"),
    (["goal", "update", "g1"], None,
     "loopx: error: nothing to update\nhint: pass --goal-text, --done-when, --verify, --priority, --host, "
     "--permission-mode, --max-parallel, --shared or --tz"),
    (["scope", "set"], None,
     "loopx: error: nothing to set\nhint: pass --allow, --deny or --protect (repeatable; --clear-* empties a list)"),
    (["start-goal", "--goal-text", "x", "--goal-id", "g1"], None,
     "loopx: error: goal 'g1' already exists\nhint: see it with `loopx goal show g1` or pick another --goal-id"),
    (["todo", "add", " "], None, "loopx: error: title is empty\nhint: pass a non-empty title"),
    (["todo", "update", "{first}", "--title", " "], None,
     "loopx: error: --title is empty\nhint: pass a non-empty --title"),
    (["start-goal", "--goal-text", " "], None,
     "loopx: error: --goal-text is empty\nhint: pass a non-empty --goal-text"),
    (["todo", "add", "x", "--verify", "curl -H 'Authorization: Bearer sk-" + "a" * 40 + "'"], None,
     "loopx: error: --verify contains what looks like a secret; loopx never stores secrets\n"
     "hint: read it from the environment instead, e.g. --verify 'pytest -q' with DB_PASSWORD exported before "
     "loopx runs it"),
    (["todo", "renew", "{first}"], None,
     "loopx: error: {first} is not claimed\nhint: claim it: `loopx todo claim {first}`"),
    (["todo", "add", "x", "--depends-on-goal", "g1"], None,
     "loopx: error: a todo of goal g1 cannot wait for its own goal\n"
     "hint: use --depends-on TODO for an order inside the goal"),
    (["quota", "set", "--window", "10s"], None,
     "loopx: error: --window must be at least 60s\nhint: use e.g. --window 24h"),
    (["goal", "show", "nope"], None, "loopx: error: no goal 'nope'\nhint: list goals with `loopx goal list`"),
    (["todo", "show", "t-nope"], None, "loopx: error: no todo matches 't-nope'\nhint: list them with `loopx todo list`"),
    (["turn", "finish", "--run", "run-nope", "--result", "progress"], None,
     "loopx: error: no run matches 'run-nope'\nhint: list them with `loopx history --rounds`"),
    (["todo", "done", "{first}"], None,
     "loopx: error: a todo cannot be done without evidence\n"
     "hint: record it first: `loopx evidence add --kind test --summary ...`, then pass --evidence ID"),
    (["watch", "add", "--every", "10m", "--check", "true", "--on", "match"], None,
     "loopx: error: --on match needs --match REGEX\nhint: e.g. --match 'FAILED|error'"),
    (["start-goal", "--goal-text", "e", "--experiment"], None,
     "loopx: error: --experiment needs --metric NAME\nhint: e.g. --metric val_acc --direction max"),
    (["trial", "hypothesis", "x"], "a",
     "loopx: error: no open turn of yours on an experiment goal\n"
     "hint: start one with `loopx next` (or pass --goal-id for the next trial)"),
    (["sync"], None, "loopx: error: the project is not a git repository\n"
     "hint: loopx sync exchanges the store through git: `git init` and add a remote"),
    # errors the commands raise themselves, with codes the kernel uses too, keep their own words
    (["trial", "list"], None,
     "loopx: error: no experiment goal here\nhint: start one with `loopx start-goal --experiment ...`"),
    (["trial", "list", "--goal-id", "g1"], None,
     "loopx: error: goal g1 is not an experiment\nhint: see `loopx goal list`"),
    (["history", "--since", "nonsense"], None,
     "loopx: error: --since 'nonsense' is neither a duration nor a time\n"
     "hint: use e.g. --since 24h or --since 2026-01-31T09:00:00Z"),
]


@pytest.mark.parametrize("args,agent,printed", CLI_CASES, ids=[" ".join(a[:3]) for a, *_ in CLI_CASES])
def test_the_cli_names_the_flag_and_the_command(goal, cli, args, agent, printed):
    first = _ids(cli)[0]
    argv = [a.replace("{first}", first) for a in args]
    r = cli(*(["--agent", agent] if agent else []), *argv)
    assert r.code in (2, 3, 4) and r.err.strip() == printed.replace("{first}", first)


def test_an_unconnected_folder_names_loopx_connect(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    here = cli("todo", "list")
    assert here.code == 3 and here.err.strip() == ("loopx: error: no .loopx/ here or in any parent directory\n"
                                                   "hint: run `loopx connect` in the project's root")
    there = cli("--project", str(tmp_path), "todo", "list", json=True).json["error"]
    assert there["hint"] == f"run `loopx connect --project {tmp_path}`" and there["code"] == "not_connected"
    with pytest.raises(NotConnected) as api_side:
        api.connect(str(tmp_path), create=False)
    _plain(api_side.value)


def test_a_missing_format_file_names_loopx_connect(goal, project, cli):
    (project / ".loopx" / "format.json").unlink()
    r = cli("todo", "list")
    assert r.code == 3 and r.err.strip().endswith("is missing\nhint: run `loopx connect` to recreate it (events are kept)")


def test_a_claim_conflict_names_the_command_that_helps(goal, cli):
    first = _ids(cli)[0]
    assert cli("--agent", "a", "todo", "claim", first).code == 0
    other = cli("--agent", "b", "todo", "claim", first)
    assert other.code == 4 and other.err.splitlines()[1] == \
        "hint: pick another todo (`loopx todo list --ready`) or wait for the lease to expire"
    fenced = cli("--agent", "b", "todo", "release", first, "--fence", "999", json=True).json["error"]
    assert fenced["hint"] == "your lease was taken over; run `loopx next` for new work"
    assert fenced["details"] == {"todo": first, "fence": 999, "taken_over": True}  # the fields stay the kernel's


def test_a_failing_verify_run_names_the_command_to_run_again(goal, cli):
    todo = cli("todo", "add", "fails", "--verify", f"{sys.executable} -c 'raise SystemExit(1)'", json=True).data["todo_id"]
    r = cli("todo", "done", todo, json=True)
    assert r.code == 4 and r.json["error"]["code"] == "evidence_failing"
    assert r.json["error"]["hint"] == (f"fix it and run `loopx todo done {todo}` again; only a human can override: "
                                       "--force-unverified")
    assert r.json["error"]["details"]["todo"] == todo and r.json["error"]["details"]["exit_code"] == 1


def _raise_texts(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            for n in ast.walk(node.exc):
                if isinstance(n, ast.Constant) and isinstance(n.value, str):
                    yield node.lineno, n.value


def test_kernel_and_sync_errors_name_no_flag_and_no_command():  # loopx.api reaches both
    found = [f"{p.relative_to(SRC)}:{line}: {text!r}" for p in sorted([*(SRC / "kernel").rglob("*.py"),
                                                                      *(SRC / "sync").rglob("*.py")])
             if str(p.relative_to(SRC)) not in NOT_YET for line, text in _raise_texts(p) if CLI_WORDS.search(text)]
    assert not found, "name the field or step; word it for the CLI in loopx/commands/phrases.py:\n" + "\n".join(found)


def test_every_cli_phrase_belongs_to_an_error_the_code_raises():
    source = "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py") if p.name != "phrases.py")
    dead = [k for k in {*phrases.HINTS, *phrases.MESSAGES} if f'"{k}"' not in source]
    assert not dead, f"phrases for codes nothing raises: {dead}"
