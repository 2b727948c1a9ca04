"""Hostile and exotic text end to end, with real processes (issue 2, acceptance 7).

Goal and todo text with emoji, right-to-left script, newlines, bidi controls, a terminal escape and
undecodable bytes (which Python turns into lone surrogates) is stored as valid UTF-8 with a valid
CRC and shown safely: no raw control or bidi character reaches a terminal, one record stays on one
line, and nothing crashes on an ASCII or cp1252 console.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import run_loopx, subprocess_env
from test_store_concurrency import check_file

RAW = "Ship 🚀 שלום עולם مرحبا\nsecond line \u202eevil\u202c \u2067iso\u2069 \u200bzw \x1b[31mred\x1b[0m \x07bell"
# the same text on a POSIX command line with two bytes that are not UTF-8 (Python: lone surrogates)
RAW_BYTES = RAW.encode() + b" \xff\xfe end"
STORED = RAW + " \ufffd\ufffd end"
# what must never reach a terminal in text mode
FORBIDDEN = ["\x1b", "\u202e", "\u202c", "\u2067", "\u2069", "\u200b", "\x07"]
ENCODINGS = ["utf-8", "ascii", "cp1252"]
TEXT_COMMANDS = [["status"], ["goal", "show"], ["goal", "list"], ["todo", "list"], ["todo", "show", "t-"]]


def run_bytes(args, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loopx", *args], cwd=cwd, env=subprocess_env(env),
                          capture_output=True, timeout=60)


@pytest.fixture
def hostile(project):
    if os.name == "nt":
        pytest.skip("undecodable argv bytes are POSIX-only")
    r = run_bytes(["start-goal", "--goal-text", RAW_BYTES, "--goal-id", "u1", "--todo", RAW_BYTES,
                   "--done-when", RAW_BYTES], project)
    assert r.returncode == 0, r.stderr
    return project


def test_stored_as_valid_utf8_with_valid_crc(hostile):
    path = hostile / ".loopx" / "events.jsonl"
    path.read_bytes().decode("utf-8", "strict")
    recs = check_file(path)
    started = next(r for r in recs if r["type"] == "goal.started")
    assert started["data"]["objective"] == STORED
    assert started["data"]["done_when"] == STORED
    added = next(r for r in recs if r["type"] == "todo.added")
    assert added["data"]["title"] == STORED
    # one record per physical line even though the text has a newline in it
    assert len(path.read_bytes().split(b"\n")) == len(recs) + 1


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("args", TEXT_COMMANDS, ids=lambda a: " ".join(a))
def test_text_output_is_safe_on_any_console(hostile, encoding, args):
    r = run_bytes(args, hostile, {"PYTHONIOENCODING": encoding})
    assert r.returncode == 0, r.stderr
    assert b"Traceback" not in r.stderr
    out = r.stdout.decode(encoding)          # strictly decodable in the console's own encoding
    for ch in FORBIDDEN:
        assert ch not in out, f"{ch!r} reached the terminal"
    shown = [ln for ln in out.splitlines() if "Ship" in ln]
    assert shown, out
    for ln in shown:
        assert "second line" in ln or "…" in ln or "\\u2026" in ln, "the newline must not split the record"
    if encoding == "utf-8":
        assert "🚀" in out and "שלום" in out


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_json_output_round_trips_on_any_console(hostile, encoding):
    for args in (["goal", "show", "u1"], ["status"]):
        r = run_bytes([*args, "--format", "json"], hostile, {"PYTHONIOENCODING": encoding})
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout.decode(encoding))
        assert doc["ok"] is True
        goal = doc["data"]["goal"] if "goal" in doc["data"] else doc["data"]["goals"][0]
        assert goal["objective"] == STORED


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_errors_echoing_hostile_input_are_safe(project, encoding):
    r = run_loopx(["todo", "show", "t-\u202eevil\x1b[2J🚀"], project, env={"PYTHONIOENCODING": encoding})
    assert r.code == 2, r.err
    assert r.err.startswith("loopx: error: ") and "hint:" in r.err
    for ch in FORBIDDEN:
        assert ch not in r.err
    j = run_loopx(["todo", "show", "t-\u202eevil\x1b[2J🚀", "--format", "json"], project,
                  env={"PYTHONIOENCODING": encoding})
    assert j.code == 2 and j.json["error"]["code"] == "not_found"


def test_lone_surrogate_in_process(goal, cli, project):
    """A lone high surrogate (it cannot come through a POSIX argv, but can through the API)."""
    r = cli("todo", "add", "half \ud83d pair\ud800", json=True)
    assert r.code == 0, r.err
    shown = cli("todo", "show", r.data["todo_id"])
    assert shown.code == 0 and "half \ufffd pair\ufffd" in shown.out
    recs = check_file(project / ".loopx" / "events.jsonl")
    assert recs[-1]["data"]["title"] == "half \ufffd pair\ufffd"


def test_emoji_only_text_gets_a_usable_goal_id(project):
    r = run_loopx(["start-goal", "--goal-text", "🚀🚀 ✨", "--format", "json"], project)
    assert r.code == 0, r.err
    gid = r.data["goal_id"]
    assert gid and gid.isascii()
    assert run_loopx(["goal", "show", gid], project).code == 0


@pytest.mark.skipif(sys.platform != "linux", reason="a folder name that is not UTF-8: Linux file systems take any bytes")
def test_a_project_folder_whose_name_is_not_utf8_is_refused_with_a_reason(tmp_path):
    """JSON (the registry, the records) cannot hold a path that is not UTF-8: ``connect`` failed with
    an internal error writing the registry; it now says why (exit 3), naming the byte."""
    folder = os.path.join(os.fsencode(tmp_path), b"bad\xffdir")
    os.mkdir(folder)
    p = subprocess.run([sys.executable, "-m", "loopx", "connect"], cwd=folder, env=subprocess_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert "bad\\xffdir is not valid UTF-8" in p.stderr and "hint: rename the folder" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not os.path.exists(os.path.join(folder, b".loopx"))


def test_an_id_seed_that_is_not_utf8_still_gives_fixed_ids(goal, project):
    """``LOOPX_ID_SEED`` with bytes that are not UTF-8 (a lone surrogate in Python): the ids come from
    its own bytes, the first free one of the seed's fixed sequence, where hashing it failed with an
    internal error."""
    import hashlib

    env = {os.fsencode(k): os.fsencode(v) for k, v in subprocess_env().items()}
    env[b"LOOPX_ID_SEED"] = b"seed\xff\xfe"
    r = subprocess.run([sys.executable, "-m", "loopx", "todo", "add", "a", "--format", "json"], cwd=project,
                       env=env, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    tid = json.loads(r.stdout)["data"]["todo_id"]
    first = hashlib.sha256(b"seed\xff\xfe:todo:0").hexdigest()
    assert tid.startswith("t-") and first.startswith(tid[2:]), (tid, first)
