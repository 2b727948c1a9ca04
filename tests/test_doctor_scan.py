"""doctor's one pass over the log (``ops/segscan.py``): the same verdicts as the line-by-line readers
and ``chainwalk.verify``, whether the units run here or in a pool of processes, and a tampered closed
segment is still reported with its seq. (No timings here: bench/flat.py measures doctor.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from loopx.kernel.storage import chainwalk
from loopx.kernel.storage.codec import decode, encode
from loopx.kernel.storage.store import Store
from loopx.ops import segscan


@pytest.fixture(params=["here", "pool"])
def mode(request, monkeypatch):
    """``here``: every unit in this process; ``pool``: a pool of processes, small units (several per
    segment) read in chunks smaller than a line, whatever the store's size."""
    if request.param == "pool":
        monkeypatch.setattr(segscan, "PARALLEL_BYTES", 0)
        monkeypatch.setattr(segscan, "UNIT_BYTES", 700)
        monkeypatch.setattr(segscan, "CHUNK", 97)
        monkeypatch.setattr(segscan, "_workers", lambda: 2)
    else:
        monkeypatch.setattr(segscan, "_workers", lambda: 1)
    return request.param


@pytest.fixture
def segmented(goal, project, cli, monkeypatch) -> Path:
    """A store whose history lies in several closed segments of both streams (tiny segments)."""
    from loopx.kernel.storage import store as store_mod

    monkeypatch.setattr(store_mod, "SEGMENT_BYTES", 1500)
    for i in range(16):
        assert cli("todo", "add", f"todo {i}", "--goal-id", goal).code == 0
        assert cli("evidence", "add", "--goal-id", goal, "--kind", "note", "--summary", f"note {i}").code == 0
    root = project / ".loopx"
    assert len(list((root / "events").glob("*.jsonl"))) >= 3
    assert len(list((root / "evidence").glob("*.jsonl"))) >= 1
    return root


def _checks(cli) -> dict:
    return {c["id"]: c for c in cli("doctor", json=True).data["checks"]}


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _forge(rec: dict) -> bytes:
    return encode({k: v for k, v in rec.items() if k != "crc"})


def _next_link(root: Path, stream: str, seq: int) -> str:
    """"<stream> seq <n>" of the record written after (stream, seq) by the same node: the link a
    change to (stream, seq) breaks (the chain runs across both streams)."""
    store = Store(str(root))
    recs = sorted((r["hlc"], name, r["seq"]) for name in ("events", "evidence") for r in store.iter_records(name))
    at = next(i for i, (_h, name, q) in enumerate(recs) if (name, q) == (stream, seq))
    return f"{recs[at + 1][1]} seq {recs[at + 1][2]}"


def _broken_at(checks: dict, where: str) -> bool:
    finding = checks["store.chain"]["finding"]
    return f"broken at {where} (" in finding or f"broken at {where}:" in finding


def _reference(root: Path) -> dict:
    """What the line-by-line readers say: per stream, good and bad lines and the seqs."""
    store = Store(str(root))
    out = {}
    for name in ("events", "evidence"):
        good = bad = 0
        seqs = []
        for body in store.iter_lines(name):
            if not body.strip():
                continue
            try:
                seqs.append(decode(body)["seq"])
                good += 1
            except ValueError:
                bad += 1
        out[name] = {"good": good, "bad": bad, "last_seq": max(seqs, default=0),
                     "dups": len(seqs) - len(set(seqs)), "missing": len(set(range(1, max(seqs, default=0) + 1)) - set(seqs))}
    return out


def _same_as_readers(root: Path) -> dict:
    """scan_store's answer, after checking it against the readers and ``chainwalk.verify``."""
    got = segscan.scan_store(str(root))
    assert (got["processes"] > 1) == (segscan._workers() > 1)  # the pool really ran in "pool" mode
    ref = _reference(root)
    for name, r in ref.items():
        s = got["streams"][name]
        assert (s["good"], s["bad_count"], s["last_seq"], s["dup_seqs"], s["missing_seqs"]) == \
            (r["good"], r["bad"], r["last_seq"], r["dups"], r["missing"]), name
    v = chainwalk.verify(Store(str(root)))
    c = got["chain"]
    # the pass never calls a broken chain whole; it leaves to chainwalk.verify what it cannot tell from
    # damage (a line a merge copied twice, which verify counts once)
    assert c["holds"] == (v["broken"] is None) or (not c["holds"] and v["broken"] is None and v["duplicates"]), \
        (c["why"], v["broken"])
    if c["holds"]:
        for k in ("records", "chained", "nodes", "unchained", "heads"):
            assert c[k] == v[k], k
    return got


def test_a_healthy_segmented_store_is_ok_in_both_modes(segmented, cli, mode):
    got = _same_as_readers(segmented)
    assert got["chain"]["holds"] and got["chain"]["chained"] > 30
    checks = _checks(cli)
    for cid in ("store.lines", "store.chain", "store.seq", "store.merge", "store.tail"):
        assert checks[cid]["status"] == "ok", checks[cid]


def test_a_corrupt_line_in_a_closed_segment_is_reported_with_its_seq(segmented, cli, mode):
    seg = segmented / "events" / "000002.jsonl"
    lines = _lines(seg)
    rec = decode(lines[1].rstrip(b"\n"))
    after = _next_link(segmented, "events", rec["seq"])
    lines[1] = lines[1].replace(b'"ts":"', b'"ts":"X', 1)  # the CRC no longer matches
    seg.write_bytes(b"".join(lines))
    _same_as_readers(segmented)
    checks = _checks(cli)
    assert checks["store.lines"]["status"] == "error"
    assert f"events/000002.jsonl line 2, seq {rec['seq']}" in checks["store.lines"]["finding"]
    assert checks["store.chain"]["status"] == "error"
    assert _broken_at(checks, after)  # the next link no longer holds
    # --fix quarantines bad lines of the open file only: for a closed segment it must not offer that
    assert "--fix" not in checks["store.lines"]["fix"] and "git" in checks["store.lines"]["fix"]
    assert "quarantine_bad_lines" not in cli("doctor", json=True).data["fixable"]


def test_a_forged_line_with_a_valid_crc_in_a_closed_segment_is_reported(segmented, cli, mode):
    seg = segmented / "events" / "000002.jsonl"
    lines = _lines(seg)
    rec = decode(lines[2].rstrip(b"\n"))
    after = _next_link(segmented, "events", rec["seq"])
    rec["actor"] = "human:someone-else"
    lines[2] = _forge(rec)
    seg.write_bytes(b"".join(lines))
    _same_as_readers(segmented)
    checks = _checks(cli)
    assert checks["store.lines"]["status"] == "ok"  # the line itself is well formed
    assert checks["store.chain"]["status"] == "error" and _broken_at(checks, after)


def test_a_line_removed_from_a_closed_segment_is_reported(segmented, cli, mode):
    seg = segmented / "events" / "000001.jsonl"
    lines = _lines(seg)
    gone = decode(lines[3].rstrip(b"\n"))
    after = _next_link(segmented, "events", gone["seq"])
    del lines[3]
    seg.write_bytes(b"".join(lines))
    _same_as_readers(segmented)
    checks = _checks(cli)
    assert checks["store.seq"]["status"] == "warning" and f"seq {gone['seq']}" in checks["store.seq"]["finding"]
    assert checks["store.chain"]["status"] == "error" and _broken_at(checks, after)


def test_lines_swapped_inside_a_closed_segment_are_reported(segmented, cli, mode):
    seg = segmented / "events" / "000002.jsonl"
    lines = _lines(seg)
    lines[1], lines[2] = lines[2], lines[1]
    seg.write_bytes(b"".join(lines))
    _same_as_readers(segmented)
    assert _checks(cli)["store.chain"]["status"] == "error"


def test_a_line_moved_between_streams_is_reported(segmented, cli, mode):
    """The chain runs across both streams: an evidence line moved into an events segment keeps
    every hash, but its place in the file order no longer matches its clock."""
    ev = segmented / "evidence" / "000001.jsonl"
    seg = segmented / "events" / "000003.jsonl"
    moved = _lines(ev)[0]
    ev.write_bytes(b"".join(_lines(ev)[1:]))
    seg.write_bytes(moved + seg.read_bytes())
    _same_as_readers(segmented)
    assert _checks(cli)["store.chain"]["status"] == "error"


def test_a_line_copied_twice_counts_once_and_a_forged_copy_does_not(segmented, cli, mode):
    """A line present twice byte for byte (what a criss-cross merge leaves) is counted once, as
    chainwalk.verify does; the same record with one byte changed is a second record claiming the same
    place."""
    seg = segmented / "events" / "000002.jsonl"
    lines = _lines(seg)
    seg.write_bytes(b"".join(lines[:3] + [lines[2]] + lines[3:]))
    got = _same_as_readers(segmented)
    assert got["streams"]["events"]["dup_seqs"] == 1 and got["streams"]["events"]["dup_ids"] == 1
    assert not got["chain"]["holds"]  # the pass leaves it to chainwalk.verify
    checks = _checks(cli)
    assert checks["store.chain"]["status"] == "ok" and "duplicate line" in checks["store.chain"]["finding"]
    rec = decode(lines[2].rstrip(b"\n"))
    rec["actor"] = "human:someone-else"
    seg.write_bytes(b"".join(lines[:3] + [_forge(rec)] + lines[3:]))
    _same_as_readers(segmented)
    assert _checks(cli)["store.chain"]["status"] == "error"


def test_the_fast_path_accepts_exactly_what_the_reader_accepts(segmented, mode):
    """Hand-made lines with a correct CRC: repeated keys, wrong types, CRLF, a BOM, odd chain
    fields. Each is good or bad for the scan exactly when ``store.decode`` says so."""
    seg = segmented / "events" / "000002.jsonl"
    base = decode(_lines(seg)[0].rstrip(b"\n"))
    body = {k: v for k, v in base.items() if k != "crc"}

    def line(text: str) -> bytes:
        import zlib

        head = text.encode()
        return head + b',"crc":"%08x"}' % zlib.crc32(head)

    raw = json.dumps(body, separators=(",", ":"))[:-1]
    odd = [
        line(raw + ',"node":"n-0000000000000000"'),                # a repeated key: the last one wins
        line(raw + ',"seq":"7"'),                                   # seq becomes a string
        line(raw.replace('"hlc":[', '"hlc":[-', 1)),                # a negative clock
        line(raw.replace('"prev":', '"prev":"abc","x":', 1)),       # prev is not a digest
        line(raw + ',"data":[]'),                                   # data is not an object
        line(raw.replace('"node":"n-', '"node":"N-', 1)),           # not a node id
        line(" " + raw),                                            # leading space: still JSON
        b"\xef\xbb\xbf" + line(raw),                                # a BOM
        line(raw) + b"\r",                                          # a CRLF line end
        line(raw.replace('"type":"', '"type":"x', 1)),              # an unknown type
        line("[1,2"),                                               # not an object
        line(raw + ',"ts":5'),                                      # ts is not a string
        line(json.dumps({k: v for k, v in body.items() if k != "goal"}, separators=(",", ":"))[:-1]),  # no goal
        line(json.dumps({k: v for k, v in body.items() if k != "actor"}, separators=(",", ":"))[:-1]),  # no actor
        line(json.dumps({k: v for k, v in body.items() if k != "ts"}, separators=(",", ":"))[:-1]),  # no ts
        line(raw.replace('"seq":', '"seq":true,"x":', 1)),          # a bool seq (an int to the reader)
        line("[" + raw + "}]"),                                     # a list holding a record
        line(raw + ',"data":{"' + "x" * 3 + '":[1]}'),              # another data object (the last wins)
        b"",                                                        # a blank line
    ]
    seg.write_bytes(seg.read_bytes() + b"\n".join(odd) + b"\n")
    want_good = 0
    for b in odd:
        if b.strip():
            try:
                decode(b)
                want_good += 1
            except ValueError:
                pass
    got = _same_as_readers(segmented)
    assert 0 < want_good < len(odd) - 1
    assert got["streams"]["events"]["bad_count"] == len(odd) - 1 - want_good


def test_doctor_folds_no_history_and_writes_no_snapshot(segmented, cli, mode):
    """No cache at all: doctor answers from the one pass (and the live view, from the newest
    checkpoint); it folds no closed history and writes no full snapshot (a 100 MB file and most of
    a minute at 1M events)."""
    shutil.rmtree(segmented / "cache")
    from loopx.kernel.storage import logfold

    calls = []
    real = logfold.fold_stream

    def spy(store, state, name, offset, collect=None):
        calls.append((name, offset, state["meta"]["files"][name].get("segments", 0)))
        return real(store, state, name, offset, collect)

    logfold.fold_stream = spy
    try:
        checks = _checks(cli)
    finally:
        logfold.fold_stream = real
    assert not (segmented / "cache" / "snapshot.bin").exists()
    assert checks["store.snapshot"]["status"] == "ok" and checks["setup"]["status"] == "ok"
    assert all(seg > 0 for _n, _o, seg in calls), calls  # a live view, if any, starts from the newest checkpoint


def test_anchors_are_checked_from_the_same_pass(segmented, cli, mode):
    """An anchor names a record in a closed segment; rewriting that record is found without a
    second read of the log."""
    assert cli("anchor").code == 0
    checks = _checks(cli)
    assert checks["store.anchors.file"]["status"] == "ok"
    from loopx.kernel.storage import anchors

    pid = Store(str(segmented)).format_info()["project_id"]
    a = anchors.read_file(pid)[-1]
    node, head = next(iter(a["heads"].items()))
    a2 = dict(a, heads={node: dict(head, seq=3, stream="events", hash="0" * 64)}, at="2000-01-01T00:00:00Z")
    with open(anchors.data_path(pid), "a") as fh:
        fh.write(json.dumps(a2) + "\n")
    checks = _checks(cli)
    assert checks["store.anchors.file"]["status"] == "error" and "events seq 3" in checks["store.anchors.file"]["finding"]


def test_checkpoints_of_an_older_loopx_make_doctor_fold_nothing_either(segmented, cli, mode):
    """After an upgrade that changed the fold, no checkpoint can start a live view: doctor's chain,
    anchor, signing and setup checks still answer from the one pass, and no cache is written."""
    assert cli("anchor").code == 0
    for ckpt in (segmented / "events").glob("*.live.json"):
        body = json.loads(ckpt.read_text())
        body["fold"] = -1  # what an older loopx wrote
        ckpt.write_text(json.dumps(body))
    shutil.rmtree(segmented / "cache")
    from loopx.kernel.storage import logfold

    calls = []
    real = logfold.fold_stream

    def spy(store, state, name, offset, collect=None):
        calls.append(name)
        return real(store, state, name, offset, collect)

    logfold.fold_stream = spy
    try:
        checks = _checks(cli)
    finally:
        logfold.fold_stream = real
    assert not calls
    assert not (segmented / "cache" / "snapshot.bin").exists()
    for cid in ("store.chain", "store.anchors.file", "store.snapshot", "setup", "signing"):
        assert checks[cid]["status"] == "ok", checks[cid]


def test_units_a_scanning_process_did_not_send_run_here_with_the_same_answer(segmented, goal, cli, monkeypatch):
    """A process that ends without sending its results (killed, out of memory): the main process
    scans its units itself, and the summary (counts, chain, gate records) is the one of a scan done
    all here."""
    import os

    r = cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "Merge PR 7?", json=True)
    assert r.code == 0, r.err
    gid = r.data["gate_id"]
    assert cli("gate", "approve", gid, "--confirm", gid).code == 0
    monkeypatch.setattr(segscan, "_workers", lambda: 1)
    here = segscan.scan_store(str(segmented))
    monkeypatch.setattr(segscan, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(segscan, "UNIT_BYTES", 700)
    monkeypatch.setattr(segscan, "CHUNK", 97)
    monkeypatch.setattr(segscan, "_workers", lambda: 2)
    monkeypatch.setattr(segscan, "_child", lambda *a: os._exit(0))
    got = segscan.scan_store(str(segmented))
    assert got["processes"] == 2
    assert got["streams"] == here["streams"] and got["chain"] == here["chain"] and got["setup"] == here["setup"]
    gates = list(got["gates"])
    assert gates == list(here["gates"]) and {r["type"] for r in gates} >= {"gate.opened", "gate.approved"}


def test_repeated_ids_are_counted_across_units_and_ranges_of_values():
    """The merge counts repeated id digests one range of values at a time (``_ID_PARTS``): repeats
    in different units, at the edges of the ranges and at the ends of the 64-bit space are all
    counted, as many as a sort of every digest finds."""
    import random
    from array import array

    rnd = random.Random(7)
    edges = segscan._ID_CUTS[1:] + [-(1 << 63), (1 << 63) - 1]
    pool = [rnd.randrange(-(1 << 63), 1 << 63) for _ in range(3000)] + edges + [c - 1 for c in edges[:-2]]
    units = [[rnd.choice(pool) for _ in range(rnd.randrange(0, 900))] for _ in range(12)]
    units[3] = []  # a unit without ids
    merger = segscan.Merge()
    merger.stream("events", {"exists": True, "size": 0, "unreadable": None})
    try:
        for i, ids in enumerate(units):
            r = segscan._empty()
            r["ids"] = array("q", sorted(ids)).tobytes()
            merger.add("events", ("p", "events.jsonl", False, i, i + 1, False), r)
        got = merger.finish()["streams"]["events"]["dup_ids"]
    finally:
        merger.close()
    every = [d for ids in units for d in ids]
    assert got == len(every) - len(set(every)) > 100


def test_a_prev_in_capitals_is_a_broken_link(segmented, cli, mode):
    """A forged line whose prev is the right hash in capital hex digits (CRC made anew): the chain
    compares the hash as text (the runs now carry it as text, no longer as bytes), and the pass and
    ``chainwalk.verify`` both call the chain broken."""
    seg = segmented / "events" / "000002.jsonl"
    lines = _lines(seg)
    rec = decode(lines[2].rstrip(b"\n"))
    assert rec["prev"] is not None and rec["prev"] != rec["prev"].upper()
    rec["prev"] = rec["prev"].upper()
    lines[2] = _forge(rec)
    seg.write_bytes(b"".join(lines))
    got = _same_as_readers(segmented)
    assert not got["chain"]["holds"]
    checks = _checks(cli)
    assert checks["store.lines"]["status"] == "ok"  # the line itself is well formed
    assert checks["store.chain"]["status"] == "error"
