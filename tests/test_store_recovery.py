"""Damaged and hand-edited stores, with real processes (issue 2, acceptance 3, 4, 5 and 6).

A torn tail is reported by readers and repaired only by the next writer (quarantined, truncated,
recorded); a bad line in the middle is skipped, counted and reported, never dropped from the file;
a writer killed at random never loses an acknowledged write; hand edits that loopx cannot safely
append to (conflict markers, a newer format) make the store read-only with a clear message.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_loopx, subprocess_env
from loopx.kernel.storage import caches
from loopx.kernel.storage.store import Store
from test_store_concurrency import check_crc, check_file, read_lines

HAS_DOCTOR = (Path(__file__).resolve().parents[1] / "src" / "loopx" / "commands" / "doctor.py").exists()


def events(project: Path) -> Path:
    return project / ".loopx" / "events.jsonl"


def status_json(project: Path, **env) -> dict:
    r = run_loopx(["status", "--format", "json"], project, env=env or None)
    assert r.code == 0, (r.out, r.err)
    assert "Traceback" not in r.err
    return r.json


def titles(project: Path) -> list[str]:
    r = run_loopx(["todo", "list", "--all", "--format", "json"], project)
    assert r.code == 0, r.err
    return [t["title"] for t in r.data["todos"]]


def no_traceback(r) -> None:
    assert "Traceback" not in r.err and "Traceback" not in r.out, r.err
    assert r.code != 70, r.err


# ----------------------------------------------------------------- 3: torn tail
@pytest.mark.parametrize("stream", ["events", "evidence"])
def test_half_record_is_reported_then_quarantined(goal, project, stream):
    path = project / ".loopx" / f"{stream}.jsonl"
    before_events = events(project).read_bytes()
    before = path.read_bytes()
    half = b'{"v":1,"seq":99,"id":"e-00aa","ts":"2026-01-01T00:00:00Z","actor":"human:x","type":"todo.ad'
    with open(path, "ab") as fh:
        fh.write(half)

    # a reader reports it, in text and in JSON, and changes nothing
    text = run_loopx(["status"], project)
    assert text.code == 0, text.err
    assert "torn" in text.out + text.err
    doc = status_json(project)
    assert doc["data"]["store"]["files"][stream]["torn_tail_bytes"] == len(half)
    assert any("torn" in w for w in doc["warnings"])
    assert titles(project) == ["first", "second"]
    assert path.read_bytes() == before + half

    # the next write quarantines exactly the torn bytes, truncates, records the repair
    r = run_loopx(["todo", "add", "third", "--format", "json"], project)
    assert r.code == 0, r.err
    quarantined = list((project / ".loopx" / "quarantine").iterdir())
    assert len(quarantined) == 1 and quarantined[0].read_bytes() == half
    assert path.read_bytes().startswith(before)
    assert events(project).read_bytes().startswith(before_events)
    recs = check_file(events(project))
    repairs = [x for x in recs if x["type"] == "store.repaired"]
    assert len(repairs) == 1 and repairs[0]["data"]["file"] == f"{stream}.jsonl"
    assert repairs[0]["data"]["bytes"] == len(half)
    assert titles(project) == ["first", "second", "third"]
    check_file(path)
    after = status_json(project)
    assert after["data"]["store"]["files"][stream]["torn_tail_bytes"] == 0
    assert after["warnings"] == []


# ----------------------------------------------------------------- 4: bad line in the middle
def _insert_line(path: Path, index: int, line: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines.insert(index, line)
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("garbage", [
    b"this is not json at all",
    b'{"v":1,"seq":2,"type":"todo.added"}',                       # JSON, but no crc
    b"\x00\xff\xfe binary \x80 junk",
])
def test_garbage_line_in_the_middle_is_counted_and_reported(goal, project, cli, garbage):
    for i in range(3):
        cli("todo", "add", f"extra {i}")
    _insert_line(events(project), 2, garbage)
    doc = status_json(project)
    ev = doc["data"]["store"]["files"]["events"]
    assert ev["bad_lines"] == 1
    assert ev["bad_samples"][0]["line"] == 3
    assert any("bad line" in w for w in doc["warnings"])
    text = run_loopx(["status"], project)
    assert text.code == 0 and "1 bad line" in text.out + text.err
    # the good lines after it still count
    assert titles(project) == ["first", "second", "extra 0", "extra 1", "extra 2"]
    # a write keeps the bad line in the file (never silently dropped) and still reports it
    r = run_loopx(["todo", "add", "after"], project)
    assert r.code == 0, r.err
    assert garbage in read_lines(events(project))
    assert status_json(project)["data"]["store"]["files"]["events"]["bad_lines"] == 1
    if HAS_DOCTOR:
        d = run_loopx(["doctor", "--format", "json"], project)
        assert d.code == 1, d.out
        assert "bad" in d.out


def test_hand_edited_record_fails_its_crc_and_is_reported(goal, project):
    path = events(project)
    lines = path.read_bytes().split(b"\n")
    idx = next(i for i, ln in enumerate(lines) if b'"title":"second"' in ln)
    lines[idx] = lines[idx].replace(b'"title":"second"', b'"title":"SECOND"')
    path.write_bytes(b"\n".join(lines))
    doc = status_json(project)
    ev = doc["data"]["store"]["files"]["events"]
    assert ev["bad_lines"] == 1 and "crc" in ev["bad_samples"][0]["reason"]
    assert titles(project) == ["first"]


def test_garbage_under_a_snapshot_is_still_reported(goal, project):
    """With a snapshot in cache/, damage before the snapshot's offset forces a full re-read."""
    code = "from loopx.cli import main\nfor i in range(260): main(['todo', 'add', f'bulk {i}', '--quiet'])"
    subprocess.run([sys.executable, "-c", code], cwd=project, env=subprocess_env(), check=True)
    assert status_json(project)["data"]["store"]["files"]["events"]["bad_lines"] == 0
    assert (project / ".loopx" / "cache" / "live.bin").exists()  # what status reads
    _insert_line(events(project), 5, b"garbage in the middle")
    doc = status_json(project)
    assert doc["data"]["store"]["files"]["events"]["bad_lines"] == 1
    assert len(titles(project)) == 262


# ----------------------------------------------------------------- 5: SIGKILL loop
KILL_WORKER = textwrap.dedent("""
    import sys
    from loopx.cli import main
    tag = sys.argv[1]
    print("ready", flush=True)
    i = 0
    while True:
        title = f"{tag}-{i}"
        if main(["todo", "add", title, "--quiet"]) != 0:
            sys.exit(1)
        print(title, flush=True)      # acknowledged: the command returned 0
        i += 1
""")


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL is POSIX")
def test_writer_killed_50_times_loses_no_acknowledged_write(goal, project):
    rng = random.Random(1234)
    acked: list[str] = []
    for round_ in range(50):
        proc = subprocess.Popen([sys.executable, "-c", KILL_WORKER, f"k{round_}"], cwd=project,
                                env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout.readline() == b"ready\n"
        if round_ % 5:  # wait for an acknowledged write (not for wall time: a loaded machine is slow)
            first = proc.stdout.readline()
            assert first.endswith(b"\n"), f"round {round_}: the worker stopped before its first write"
            acked.append(first.decode().strip())
        time.sleep(rng.uniform(0.0, 0.12))  # only spreads the kill over the next write; nothing counts on it
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        acked += [ln for ln in out.decode().split("\n") if ln]    # a half-printed title is never an ack
        # the store always reads
        state = Store(str(project / ".loopx")).load(save_snapshot=round_ % 2 == 0)
        have = {t["title"] for t in state["todos"].values()}
        missing = [t for t in acked if t not in have]
        assert not missing, f"round {round_}: acknowledged writes lost: {missing[:5]}"
        if round_ % 10 == 9:
            status_json(project)
    assert len(acked) >= 40, "the workers acknowledged a write before 40 of the 50 kills"
    # a final write repairs whatever a kill tore, and the files are clean afterwards
    assert run_loopx(["todo", "add", "final"], project).code == 0
    recs = check_file(events(project))
    have = [r["data"]["title"] for r in recs if r["type"] == "todo.added"]
    assert len(have) == len(set(have))
    assert set(acked) <= set(have)
    doc = status_json(project)
    assert doc["data"]["store"]["files"]["events"]["bad_lines"] == 0


# ----------------------------------------------------------------- 6: hand-edited files
def _conflict(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")[:-1]
    body = [lines[0], b"<<<<<<< HEAD", *lines[1:], b"=======", lines[-1].replace(b"second", b"theirs"),
            b">>>>>>> feature"]
    path.write_bytes(b"\n".join(body) + b"\n")


def _newer_format(path: Path) -> None:
    fmt = path.parent / "format.json"
    info = json.loads(fmt.read_text())
    info["format"] = 99
    fmt.write_text(json.dumps(info))


def _snapshot_tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "cache" not in p.parts and p.name != "lock"}


@pytest.mark.parametrize("edit,needle", [(_conflict, "conflict"), (_newer_format, "format 99")])
def test_unsafe_hand_edits_make_the_store_read_only(goal, project, edit, needle):
    edit(events(project))
    tree = _snapshot_tree(project / ".loopx")
    st = run_loopx(["status"], project)
    no_traceback(st)
    assert st.code == 0 and "read-only" in st.out + st.err and needle in st.out + st.err
    assert "first" in run_loopx(["todo", "list"], project).out
    for args in (["todo", "add", "more"], ["goal", "pause"], ["todo", "claim", "first"], ["connect"],
                 ["start-goal", "--goal-text", "another"]):
        r = run_loopx(args, project)
        no_traceback(r)
        if args[0] != "connect":
            assert r.code == 3, (args, r.code, r.err)
            assert r.err.startswith("loopx: error: ") and needle in r.err and "hint:" in r.err, r.err
        j = run_loopx([*args, "--format", "json"], project)
        no_traceback(j)
        if args[0] != "connect":
            assert j.code == 3 and j.json["error"]["code"] == "read_only", j.out
    assert _snapshot_tree(project / ".loopx") == tree, "a read-only store must not change on disk"


def _bom(path: Path) -> None:
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())


def _crlf(path: Path) -> None:
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))


def _bom_format(path: Path) -> None:
    fmt = path.parent / "format.json"
    fmt.write_bytes(b"\xef\xbb\xbf" + fmt.read_bytes().replace(b"\n", b"\r\n"))


@pytest.mark.parametrize("edit", [_bom, _crlf, _bom_format])
def test_editor_artifacts_are_tolerated_and_never_rewritten(goal, project, edit):
    """A BOM or CRLF line ends (an editor on Windows) still read; a write appends, never rewrites."""
    edit(events(project))
    before = events(project).read_bytes()
    fmt_before = (project / ".loopx" / "format.json").read_bytes()
    st = run_loopx(["status", "--format", "json"], project)
    no_traceback(st)
    assert st.code == 0 and st.json["data"]["store"]["files"]["events"]["bad_lines"] == 0
    assert titles(project) == ["first", "second"]
    r = run_loopx(["todo", "add", "third"], project)
    assert r.code == 0, r.err
    after = events(project).read_bytes()
    assert after.startswith(before), "existing bytes must never be rewritten"
    for line in after[len(before):].split(b"\n")[:-1]:
        check_crc(line)
    assert titles(project) == ["first", "second", "third"]
    assert (project / ".loopx" / "format.json").read_bytes() == fmt_before


@pytest.mark.parametrize("content", [b'{"format": "x"', b"", b"[1, 2]", b"<<<<<<< HEAD\n{}\n"])
def test_unreadable_format_json_is_a_clear_state_error(goal, project, content):
    fmt = project / ".loopx" / "format.json"
    fmt.write_bytes(content)
    ev = events(project).read_bytes()
    for args in (["status"], ["todo", "add", "x"], ["todo", "list"]):
        r = run_loopx(args, project)
        no_traceback(r)
        assert r.code == 3 and "format.json" in r.err and "hint:" in r.err, r.err
    assert fmt.read_bytes() == content and events(project).read_bytes() == ev


def test_a_format_json_that_is_not_utf8_is_unreadable_not_an_internal_error(goal, project):
    fmt = project / ".loopx" / "format.json"
    info = json.loads(fmt.read_text(encoding="utf-8"))
    fmt.write_bytes(json.dumps(info).replace('"project_id": "', '"project_id": "\\ud800').encode()
                    .replace(b"\\ud800", b"\xed\xa0\x80"))  # a lone surrogate as raw bytes
    r = run_loopx(["anchor"], project)  # reads the project id from format.json
    no_traceback(r)
    assert r.code == 3 and "format.json" in r.err and "hint:" in r.err, r.err


def test_missing_store_files_are_a_clear_error(goal, project):
    shutil.rmtree(project / ".loopx" / "cache")
    (project / ".loopx" / "format.json").unlink()
    r = run_loopx(["todo", "list"], project)
    no_traceback(r)
    assert r.code == 3 and "format.json" in r.err


def test_temp_files_left_by_a_killed_snapshot_writer_are_swept(goal, project):
    cache = project / ".loopx" / "cache"
    stale = cache / "snapshot.bin.4242.abcdef.tmp"
    fresh = cache / "snapshot.bin.4343.abcdef.tmp"     # another process may be writing this one now
    stale.write_bytes(b"half a snapshot")
    fresh.write_bytes(b"in flight")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    store = Store(str(project / ".loopx"))
    caches.save_snapshot(store, store.load(save_snapshot=False))
    assert not stale.exists() and fresh.exists()
    assert (cache / "snapshot.bin").exists()


@pytest.mark.parametrize("bad", [
    {"type": "todo.added", "data": {"todo_id": "t-bbbbbe", "title": "x", "priority": "high"}},
    {"type": "todo.claimed", "data": {"todo_id": "t-bbbbbe", "holder": 5, "lease_until": "2026-01-01T00:00:00Z"}},
    {"type": "quota.set", "data": {"slots": "many"}},
    {"type": "gate.opened", "data": {"gate_id": "gate-1", "kind": ["merge"], "question": "q"}},
    {"type": "todo.completed", "data": {"todo_id": "t-bbbbbe", "evidence": [1, 2]}},
    {"type": "todo.added", "actor": 5, "data": {"todo_id": "t-bbbbbe", "title": "x"}},
    {"type": "todo.added", "ts": 12, "data": {"todo_id": "t-bbbbbe", "title": "x"}},
])
def test_a_crc_valid_line_of_the_wrong_shape_is_a_bad_line_not_a_crash(project, cli, bad):
    import json as _json
    import zlib

    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g1", "--todo", "a").code == 0
    path = project / ".loopx" / "events.jsonl"
    last = _json.loads(path.read_text().splitlines()[-1])
    rec = {"v": 1, "seq": last["seq"] + 1, "id": "e-00000000000000aa", "ts": bad.get("ts", "2026-11-29T18:20:00Z"),
           "actor": bad.get("actor", "human:x"), "type": bad["type"], "goal": "g1", "data": bad["data"]}
    head = _json.dumps(rec, separators=(",", ":"))[:-1].encode()
    with open(path, "ab") as fh:
        fh.write(head + b',"crc":"%08x"}\n' % zlib.crc32(head))
    for args in (["status"], ["todo", "list"], ["goal", "list"], ["review-packet"], ["history"], ["todo", "add", "b"]):
        r = cli(*args, json=True)
        assert r.code in (0, 1), (args, r.out, r.err)
    st = cli("status", json=True)
    assert st.data["store"]["files"]["events"]["bad_lines"] == 1
    assert cli("doctor").code == 1
    assert cli("doctor", "--fix").code in (0, 1)
    assert cli("status", json=True).data["store"]["files"]["events"]["bad_lines"] == 0


def test_a_crc_valid_line_nested_too_deeply_is_a_bad_line_not_a_dead_store(project, cli):
    # json's C scanner raises RecursionError (not ValueError) for absurd nesting: one hand-made
    # line like this must not stop every command with "input nested too deeply" (doctor included)
    import json as _json
    import zlib

    assert cli("start-goal", "--goal-text", "g", "--goal-id", "g1", "--todo", "a").code == 0
    path = project / ".loopx" / "events.jsonl"
    last = _json.loads(path.read_text().splitlines()[-1])
    depth = 100_000
    head = (b'{"v":1,"seq":%d,"id":"e-00000000000000ab","ts":"2026-11-29T18:20:00Z","actor":"human:x",'
            b'"type":"todo.added","goal":"g1","data":' % (last["seq"] + 1)) + b"[" * depth + b"]" * depth
    with open(path, "ab") as fh:
        fh.write(head + b',"crc":"%08x"}\n' % zlib.crc32(head))
    for args in (["status"], ["todo", "list"], ["history"], ["todo", "add", "b"], ["quota", "should-run"]):
        r = cli(*args, json=True)
        assert r.code in (0, 1), (args, r.out, r.err)
    assert cli("status", json=True).data["store"]["files"]["events"]["bad_lines"] == 1
    assert cli("doctor", "--fix").code in (0, 1)
    assert cli("status", json=True).data["store"]["files"]["events"]["bad_lines"] == 0
    assert "b" in titles(project)
