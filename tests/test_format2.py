"""Store format 2: chain fields on every record, the in-place migration of a format-1 store, the
hash chain doctor verifies, segments, and reading the log from its newest end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from loopx.kernel.storage import chain, chainwalk
from loopx.kernel.storage.codec import decode
from loopx.kernel.storage.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "format1-store"


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _records(path: Path) -> list[dict]:
    return [decode(x.rstrip(b"\n")) for x in _lines(path)]


@pytest.fixture
def old_project(tmp_path, monkeypatch) -> Path:
    """A project whose .loopx/ was written by loopx 0.1.0 (format 1)."""
    proj = tmp_path / "old"
    (proj / ".loopx").mkdir(parents=True)
    for f in FIXTURE.iterdir():
        shutil.copy(f, proj / ".loopx" / f.name)
    monkeypatch.chdir(proj)
    return proj


def test_new_records_carry_node_hlc_and_prev(goal, project, cli):
    assert cli("todo", "add", "third", "--goal-id", goal).code == 0
    recs = _records(project / ".loopx" / "events.jsonl")
    node = (project / ".loopx" / "node").read_text().strip()
    assert chain.valid_node(node)
    assert all(r["node"] == node for r in recs)
    hlcs = [r["hlc"] for r in recs]
    assert hlcs == sorted(hlcs) and len({tuple(h) for h in hlcs}) == len(hlcs)  # strictly increasing
    assert recs[0]["prev"] is None
    assert "node" in (project / ".loopx" / ".gitignore").read_text().split()
    assert json.loads((project / ".loopx" / "format.json").read_text())["format"] == 2


def test_prev_is_the_hash_of_the_nodes_previous_record_across_streams(goal, project, cli):
    assert cli("evidence", "add", "--goal-id", goal, "--kind", "note", "--summary", "looked").code == 0
    assert cli("todo", "add", "after", "--goal-id", goal).code == 0
    root = project / ".loopx"
    lines = [(x, decode(x.rstrip(b"\n"))) for f in ("events.jsonl", "evidence.jsonl") for x in _lines(root / f)]
    lines.sort(key=lambda p: p[1]["hlc"])
    for (before, _), (_, rec) in zip(lines, lines[1:], strict=False):
        assert rec["prev"] == chain.line_hash(before)


def test_format1_store_reads_then_migrates_on_first_write_without_losing_a_record(old_project, cli):
    root = old_project / ".loopx"
    before = {s: _records(root / f"{s}.jsonl") for s in ("events", "evidence")}
    raw_before = {s: (root / f"{s}.jsonl").read_bytes() for s in ("events", "evidence")}
    st = cli("status", json=True)
    assert st.code == 0 and st.data["goals"][0]["id"] == "fix-ci"
    assert (root / "events.jsonl").read_bytes() == raw_before["events"]  # reading changes nothing
    d = cli("doctor", json=True)
    fmt = next(c for c in d.data["checks"] if c["id"] == "store.format")
    assert fmt["status"] == "warning" and "not migrated" in fmt["finding"]

    r = cli("todo", "add", "after the upgrade", "--goal-id", "fix-ci", json=True)
    assert r.code == 0, r.err
    assert any("migrated .loopx/ in place to store format 2" in w for w in r.json["warnings"])
    # a verified copy of the old bytes
    for s in ("events", "evidence"):
        assert (root / "backup" / "format-1" / f"{s}.jsonl").read_bytes() == raw_before[s]
    assert json.loads((root / "backup" / "format-1" / "format.json").read_text())["format"] == 1
    info = json.loads((root / "format.json").read_text())
    assert info["format"] == 2 and info["migrated_from"] == 1
    after = {s: _records(root / f"{s}.jsonl") for s in ("events", "evidence")}
    for s in ("events", "evidence"):
        old = before[s]
        new = after[s][:len(old)]
        assert [r["id"] for r in new] == [r["id"] for r in old]
        for o, n in zip(old, new, strict=True):
            assert {k: v for k, v in n.items() if k not in ("node", "hlc", "prev", "crc")} == \
                {k: v for k, v in o.items() if k != "crc"}
    assert all("node" in r for s in after.values() for r in s)
    types = [r["type"] for r in after["events"][len(before["events"]):]]
    assert types == ["store.migrated", "todo.added"]
    # the state is the same plus the new todo; the chain holds
    listed = cli("todo", "list", "--goal-id", "fix-ci", "--all", json=True)
    assert listed.code == 0
    titles = {t["title"] for t in listed.data["todos"]}
    assert {"first todo", "second todo", "after the upgrade"} <= titles
    checks = {c["id"]: c for c in cli("doctor", json=True).data["checks"]}
    assert checks["store.format"]["status"] == "ok"
    assert checks["store.chain"]["status"] == "ok", checks["store.chain"]
    # migrating is a one-time step: the next write leaves the old records alone
    snap = (root / "events.jsonl").read_bytes()
    again = cli("todo", "add", "one more", "--goal-id", "fix-ci", json=True)
    assert again.code == 0 and not again.json["warnings"]  # said once
    assert (root / "events.jsonl").read_bytes().startswith(snap)


def test_interrupted_migration_is_finished_by_the_next_writer(old_project, cli):
    from loopx.kernel.storage import migrate

    root = old_project / ".loopx"
    store = Store(str(root))
    with store.lock():
        migrate.run(store)
    # simulate a crash after the journal: put the old files back and leave a journal pointing at new ones
    assert json.loads((root / "format.json").read_text())["format"] == 2
    ids_after = [r["id"] for r in _records(root / "events.jsonl")]
    (root / "events.jsonl.format2").write_bytes((root / "events.jsonl").read_bytes())
    shutil.copy(root / "backup" / "format-1" / "events.jsonl", root / "events.jsonl")
    shutil.copy(root / "backup" / "format-1" / "format.json", root / "format.json")
    info = json.loads((root / "format.json").read_text())
    info["format"] = 2
    (root / migrate.JOURNAL).write_text(json.dumps({"format": info}))
    assert cli("todo", "add", "x", "--goal-id", "fix-ci").code == 0
    assert not (root / migrate.JOURNAL).exists()
    assert [r["id"] for r in _records(root / "events.jsonl")][:len(ids_after)] == ids_after


# ------------------------------------------------------------------ the chain, tampered
def _chain_check(cli) -> dict:
    d = cli("doctor", json=True)
    return next(c for c in d.data["checks"] if c["id"] == "store.chain")


def _grow(cli, goal, n=6):
    for i in range(n):
        assert cli("todo", "add", f"todo {i}", "--goal-id", goal).code == 0


def _rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def _forge(rec: dict) -> bytes:
    from loopx.kernel.storage.codec import encode

    rec = {k: v for k, v in rec.items() if k != "crc"}
    return encode(rec)


def test_doctor_chain_ok_on_a_clean_store(goal, cli):
    _grow(cli, goal)
    c = _chain_check(cli)
    assert c["status"] == "ok" and "every link holds" in c["finding"]


def test_doctor_reports_a_removed_line_with_its_seq(goal, project, cli):
    _grow(cli, goal)
    p = project / ".loopx" / "events.jsonl"
    lines = _lines(p)
    del lines[4]  # seq 5
    _rewrite(p, lines)
    c = _chain_check(cli)
    assert c["status"] == "error" and "events seq 6" in c["finding"]


def test_doctor_reports_reordered_lines(goal, project, cli):
    _grow(cli, goal)
    p = project / ".loopx" / "events.jsonl"
    lines = _lines(p)
    lines[3], lines[4] = lines[4], lines[3]
    _rewrite(p, lines)
    c = _chain_check(cli)
    assert c["status"] == "error" and "events seq" in c["finding"]


def test_doctor_reports_a_forged_line_with_a_valid_crc(goal, project, cli):
    _grow(cli, goal)
    p = project / ".loopx" / "events.jsonl"
    lines = _lines(p)
    last = decode(lines[-1].rstrip(b"\n"))
    forged = dict(last, seq=last["seq"] + 1, id="e-" + "0" * 16, type="gate.approved",
                  data={"gate_id": "gate-000000", "channel": "terminal"})
    _rewrite(p, lines + [_forge(forged)])  # reuses the same prev: a second record claiming the same place
    c = _chain_check(cli)
    assert c["status"] == "error" and f"events seq {last['seq'] + 1}" in c["finding"]


def test_doctor_reports_an_edited_line_with_a_recomputed_crc(goal, project, cli):
    _grow(cli, goal)
    p = project / ".loopx" / "events.jsonl"
    lines = _lines(p)
    rec = decode(lines[3].rstrip(b"\n"))
    rec["data"]["title"] = "rewritten"
    lines[3] = _forge(rec)
    _rewrite(p, lines)
    c = _chain_check(cli)
    assert c["status"] == "error" and "events seq 5" in c["finding"]  # the next record no longer links


def test_doctor_reports_a_cut_off_end_against_the_heads_the_cache_saw(goal, project, cli):
    _grow(cli, goal)
    assert cli("status").code == 0  # readers refresh the cached views, which remember the heads
    from loopx.kernel.storage import chain as ch

    heads = ch.chain_heads(Store(str(project / ".loopx")))
    node, head = next(iter(heads.items()))
    p = project / ".loopx" / "events.jsonl"
    lines = _lines(p)
    _rewrite(p, lines[:-2])
    c = _chain_check(cli)
    assert c["status"] == "error" and "cut off" in c["finding"], c


def test_chain_heads_names_each_nodes_newest_record(goal, project, cli):
    _grow(cli, goal, 2)
    heads = chain.chain_heads(Store(str(project / ".loopx")))
    node = (project / ".loopx" / "node").read_text().strip()
    assert set(heads) == {node}
    last = _lines(project / ".loopx" / "events.jsonl")[-1]
    assert heads[node]["hash"] == chain.line_hash(last)
    assert heads[node]["seq"] == decode(last.rstrip(b"\n"))["seq"]


# ------------------------------------------------------------------ segments and newest-first reads
def test_segments_rotate_and_every_reader_sees_all_records(goal, project, cli, monkeypatch):
    from loopx.kernel.storage import store as store_mod

    monkeypatch.setattr(store_mod, "SEGMENT_BYTES", 1500)
    _grow(cli, goal, 12)
    root = project / ".loopx"
    segs = sorted((root / "events").glob("*.jsonl"))
    assert len(segs) >= 2
    store = Store(str(root))
    every = list(store.iter_records("events"))
    assert [r["seq"] for r in every] == list(range(1, len(every) + 1))
    newest = list(store.iter_records_newest("events", block=97))
    assert [r["seq"] for r in newest] == [r["seq"] for r in reversed(every)]
    titles = {t["title"] for t in cli("todo", "list", "--goal-id", goal, json=True).data["todos"]}
    assert {f"todo {i}" for i in range(12)} <= titles
    assert sorted(p.name for p in (root / "events").glob("*.live.json"))  # a checkpoint per closed segment
    shutil.rmtree(root / "cache")  # a fresh clone: no cache at all
    live = Store(str(root)).load(view="live")
    assert "closed" in live  # started from the newest checkpoint, not from a fold of every segment
    from loopx.kernel.read import status
    from loopx.kernel.storage import clock

    fresh = Store(str(root)).load(save_snapshot=False)
    now = clock.now_iso()
    assert {k: v for k, v in status.summary(live, now).items() if k != "store"} == \
        {k: v for k, v in status.summary(fresh, now).items() if k != "store"}
    assert {t["title"] for t in cli("todo", "list", "--goal-id", goal, json=True).data["todos"]} == titles
    checks = {c["id"]: c for c in cli("doctor", json=True).data["checks"]}
    assert checks["store.chain"]["status"] == "ok"
    assert checks["store.seq"]["status"] == "ok"
    assert checks["store.snapshot"]["status"] == "ok"


def test_newest_first_reader_skips_a_torn_tail(goal, project):
    p = project / ".loopx" / "events.jsonl"
    with open(p, "ab") as fh:
        fh.write(b'{"v":1,"seq":99')
    recs = list(Store(str(project / ".loopx")).iter_records_newest("events", block=64))
    assert recs and recs[0]["seq"] != 99


def test_concurrent_writers_across_segment_rotations_lose_nothing(goal, project, cli, monkeypatch):
    """Writers in several threads (each transaction takes the OS lock on its own descriptor) while
    the open file is closed into segments every few records: every acknowledged todo is there,
    seq runs on without a gap or a duplicate across segments, and every chain link holds."""
    from concurrent.futures import ThreadPoolExecutor

    from loopx.kernel.storage import store as store_mod
    from loopx.kernel.write import todos

    monkeypatch.setattr(store_mod, "SEGMENT_BYTES", 1500)
    root = project / ".loopx"

    def writer(w):
        st = Store(str(root))
        return [todos.add(st, "human:tester", goal, f"w{w}-{i}")["todo_id"] for i in range(8)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        added = [t for f in [pool.submit(writer, w) for w in range(4)] for t in f.result()]
    assert len(added) == len(set(added)) == 32
    assert len(list((root / "events").glob("*.jsonl"))) >= 5
    store = Store(str(root))
    seqs = [r["seq"] for r in store.iter_records("events")]
    assert seqs == list(range(1, len(seqs) + 1))
    for view in ("live", "full"):
        state = store.load(view=view)
        assert set(added) <= set(state["todos"]), view
    result = chainwalk.verify(store)
    assert result["broken"] is None and result["unchained"] == 0
    checks = {c["id"]: c for c in cli("doctor", json=True).data["checks"]}
    assert checks["store.chain"]["status"] == "ok" and checks["store.seq"]["status"] == "ok", checks


def test_ensure_lines_adds_only_what_a_gitignore_lacks(tmp_path):
    from loopx.kernel.storage.fs import ensure_lines

    gi = tmp_path / ".gitignore"
    ensure_lines(str(gi), ("node", "backup/"))  # missing file: created
    assert gi.read_text() == "node\nbackup/\n"
    gi.write_text("# mine\nlock\n  node  \nbackup/")  # no final newline, an indented entry
    ensure_lines(str(gi), ("node", "backup/", "worktrees/"))
    assert gi.read_text() == "# mine\nlock\n  node  \nbackup/\nworktrees/\n"
