"""A Claude Code user's transcripts run to thousands of files: the usage windows are answered from
the quick cache while the tree's stamp says nothing changed (``usage.files.tree_stamp``: a stat of
each folder and of each transcript changed in the last day), else by a stat of every transcript.
Each way a transcript can change is seen, and the one the stamp leaves to the next full walk (an
old file appended to in place) is seen within ``SWEEP`` seconds."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

import pytest

from loopx.usage import claude, files

DAY = 86400


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """Two project folders of transcripts, every file and folder last changed days ago but one
    session in use (changed an hour ago); the windows read once. Returns (projects folder, now)."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("LOOPX_HOME", str(tmp_path / "home"))
    projects = tmp_path / "claude" / "projects"
    for p in ("-home-u-a", "-home-u-b"):
        (projects / p).mkdir(parents=True)
        for i in range(3):
            _write(projects / p / f"old{i}.jsonl", [f"{p}-old{i}"], age=10 * DAY)
    _write(projects / "-home-u-a" / "live.jsonl", ["live-0"], age=3600)
    for d in (projects, projects / "-home-u-a", projects / "-home-u-b"):
        _age(d, 3 * DAY)
    return projects


def _line(mid: str, tokens: int = 100) -> str:
    ts = datetime.fromtimestamp(time.time() - 600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"type": "assistant", "timestamp": ts, "requestId": f"r-{mid}",
                       "message": {"id": mid, "model": "m", "usage": {"input_tokens": tokens, "output_tokens": 0,
                                                                      "cache_creation_input_tokens": 0,
                                                                      "cache_read_input_tokens": 0}}})


def _write(path, mids, age: float | None = None, mode="w") -> None:
    with open(path, mode, encoding="utf-8") as fh:
        fh.write("".join(_line(m) + "\n" for m in mids))
    if age is not None:
        _age(path, age)


def _age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def _tokens() -> int:
    w = claude.windows(datetime.now(UTC))
    return next(x for x in w["windows"] if x["name"] == "7 days")["tokens"]


def _walks(monkeypatch) -> list:
    calls: list = []
    real = claude.transcripts

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(claude, "transcripts", counted)
    return calls


def test_an_unchanged_tree_is_answered_without_a_walk(tree, monkeypatch):
    first = _tokens()
    assert first == 700
    walks = _walks(monkeypatch)
    assert _tokens() == first and _tokens() == first
    assert walks == []


@pytest.mark.parametrize("change", ["new file", "new folder", "append to the live session", "removed file",
                                    "renamed file"])
def test_every_change_the_stamp_covers_is_seen_at_once(tree, monkeypatch, change):
    assert _tokens() == 700
    a = tree / "-home-u-a"
    if change == "new file":
        _write(a / "new.jsonl", ["n1"])
        want = 800
    elif change == "new folder":
        (tree / "-home-u-c").mkdir()
        _write(tree / "-home-u-c" / "s.jsonl", ["c1", "c2"])
        want = 900
    elif change == "append to the live session":
        _write(a / "live.jsonl", ["live-1"], mode="a")
        want = 800
    elif change == "removed file":  # its messages were used all the same: they still count
        os.unlink(a / "old0.jsonl")
        want = 700
    else:
        os.rename(a / "old0.jsonl", a / "old9.jsonl")  # the same messages under another name
        want = 700
    walks = _walks(monkeypatch)
    assert _tokens() == want
    assert walks == [1]  # the stamp saw the change: every transcript looked at again


def test_an_old_file_appended_in_place_is_seen_at_the_next_full_walk(tree, monkeypatch):
    """The one change the stamp does not see: a transcript last changed over a day ago appended to
    without a new file. It waits for the next full walk, at most ``files.SWEEP`` seconds."""
    assert _tokens() == 700
    _write(tree / "-home-u-b" / "old1.jsonl", ["resumed"], mode="a")
    assert _tokens() == 700  # not yet
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + files.SWEEP + 1)
    assert _tokens() == 800


def test_a_folder_changed_within_the_racy_window_leaves_no_stamp(tree, monkeypatch):
    # every folder counts as just changed (a window of years: no timing margin on a loaded machine)
    monkeypatch.setattr(files, "RACY_NS", 10**18)
    _write(tree / "-home-u-a" / "new.jsonl", ["n1"])
    assert _tokens() == 800
    walks = _walks(monkeypatch)
    assert _tokens() == 800
    assert walks == [1]  # a file added in the same clock tick could have kept that mtime: walked again


@pytest.mark.parametrize("stamp", [None, 7, {"at": "x"}, {"at": 0, "folders": {}, "files": []},
                                   {"at": 1e20, "folders": {}, "files": []}, {"folders": {}}])
def test_a_hand_edited_stamp_never_answers_and_never_raises(stamp):
    assert files.unchanged(stamp) is False


def _rollout(path, used: float, age: float | None = None, mode="w") -> None:
    ts = datetime.fromtimestamp(time.time() - 60, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {"timestamp": ts, "type": "event_msg", "payload": {"type": "token_count", "info": None, "rate_limits": {
        "primary": {"used_percent": used, "window_minutes": 300, "resets_at": int(time.time()) + 3600}}}}
    with open(path, mode, encoding="utf-8") as fh:
        fh.write(json.dumps(event) + "\n")
    if age is not None:
        _age(path, age)


def test_codex_sessions_are_answered_from_their_stamp_and_a_new_figure_is_seen(tmp_path, monkeypatch):
    from loopx.usage import codex

    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("LOOPX_HOME", str(tmp_path / "home"))
    day = tmp_path / "codex" / "sessions" / "2026" / "11" / "20"
    day.mkdir(parents=True)
    for i in range(3):
        _rollout(day / f"rollout-old{i}.jsonl", 10.0, age=10 * DAY)
    _rollout(day / "rollout-live.jsonl", 40.0, age=3600)
    for d in [day, *day.parents][:4]:
        _age(d, 3 * DAY)

    def used():
        return codex.windows(datetime.now(UTC))["windows"][0]["used_percent"]

    assert used() == 40.0
    walks: list = []
    real = codex._rollouts
    monkeypatch.setattr(codex, "_rollouts", lambda *a, **k: walks.append(1) or real(*a, **k))
    assert used() == 40.0 and walks == []
    _rollout(day / "rollout-live.jsonl", 55.0, mode="a")  # the session in use reports again
    assert used() == 55.0 and walks == [1]


def test_a_host_used_for_the_first_time_is_seen_at_once(tmp_path, monkeypatch):
    """No ``projects`` folder at the first look (Claude Code not used yet): the stamp keeps that it
    was missing, so its making is a change, not five minutes of "no transcripts"."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("LOOPX_HOME", str(tmp_path / "home"))
    assert not claude.windows(datetime.now(UTC)).get("windows")
    (tmp_path / "claude" / "projects" / "-p").mkdir(parents=True)
    _write(tmp_path / "claude" / "projects" / "-p" / "s.jsonl", ["m1"])
    assert _tokens() == 100


@pytest.mark.parametrize("quick", [{"v": 2, "at": "x"}, {"v": 2, "at": 0, "until": 1e20, "result": "x"},
                                   {"v": 2, "at": 0, "until": 1e20, "result": {}, "newest": "x"}, [1], b"\x00"])
def test_a_hand_edited_claude_quick_cache_is_no_cache(tree, quick):
    import marshal

    want = _tokens()
    path = claude.state_path(files.home_dir("CLAUDE_CONFIG_DIR", ".claude"), "quick")
    with open(path, "wb") as fh:
        fh.write(marshal.dumps(quick) if not isinstance(quick, bytes) else quick)
    assert _tokens() == want


@pytest.mark.parametrize("answer", [{"sessions": None}, "x", {"out": {"as_of": "not a time"}}, {"out": 7}])
def test_a_hand_edited_codex_answer_is_no_cache(tmp_path, monkeypatch, answer):
    import marshal

    from loopx.usage import codex

    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("LOOPX_HOME", str(tmp_path / "home"))
    day = tmp_path / "codex" / "sessions" / "2026" / "11" / "20"
    day.mkdir(parents=True)
    _rollout(day / "rollout-live.jsonl", 40.0, age=3600)
    for d in [day, *day.parents][:4]:
        _age(d, 3 * DAY)
    assert codex.windows(datetime.now(UTC))["windows"][0]["used_percent"] == 40.0
    path = files.cache_path(codex.CACHE)
    with open(path, "rb") as fh:
        entry = marshal.loads(fh.read())
    sessions = entry["answer"]["sessions"]
    if isinstance(answer, dict) and "out" in answer:
        answer = dict(answer, sessions=sessions)
    with open(path, "wb") as fh:
        fh.write(marshal.dumps(dict(entry, answer=answer)))
    assert codex.windows(datetime.now(UTC))["windows"][0]["used_percent"] == 40.0


def test_the_quick_answers_change_with_the_count_they_answer_for():
    """``claude``'s quick cache holds what ``claudescan`` counted: a change to the count (its state's
    version) must retire the quick answers too, so the two versions move together."""
    from loopx.usage import claudescan

    assert claude.QUICK_VERSION == claudescan.STATE_VERSION
