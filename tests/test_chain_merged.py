"""The hash chain on logs several machines wrote (issue 16, issue 12 item 3): `doctor` walks each
node's chain on its own, so a log that git's ``merge=union`` put together from two clones (lines
of two nodes interleaved, in any order, with duplicates) holds, while a record of one node that was
dropped, forged, reordered or edited is still reported with the node and the seq where it starts."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from conftest import subprocess_env
from loopx.cli import main
from loopx.kernel.storage import chain, chainwalk
from loopx.kernel.storage.codec import decode, encode
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="git clones in a scratch folder")


def git(cwd, *args, check=True) -> subprocess.CompletedProcess:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True, env=env)


def lx(clone: Path, *args) -> None:
    assert main(["--project", str(clone), "--quiet", *args]) == 0


def chain_check(clone: Path, capsys) -> dict:
    import json

    capsys.readouterr()
    main(["--project", str(clone), "--format", "json", "doctor"])
    checks = json.loads(capsys.readouterr().out)["data"]["checks"]
    return next(c for c in checks if c["id"] == "store.chain")


@pytest.fixture
def merged(tmp_path, monkeypatch) -> tuple[Path, Path, str, str]:
    """Clones a and b of a project with a committed .loopx/, both writing events and evidence on
    their own branch, then b pulls a (a real git merge, `merge=union` on the logs) and a pulls b.
    Returns (a, b, node of a, node of b)."""
    monkeypatch.chdir(tmp_path)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    a, b = tmp_path / "a", tmp_path / "b"
    git(tmp_path, "clone", "-q", str(remote), str(a))
    lx(a, "connect")
    lx(a, "start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--todo", "base todo")
    git(a, "add", "-A")
    git(a, "commit", "-q", "-m", "connect loopx")
    git(a, "push", "-q", "origin", "main")
    git(tmp_path, "clone", "-q", str(remote), str(b))
    for clone in (a, b):
        for i in range(5):
            lx(clone, "todo", "add", f"{clone.name} todo {i}", "--goal-id", "g1")
            lx(clone, "evidence", "add", "--goal-id", "g1", "--kind", "note", "--summary", f"{clone.name} note {i}")
    git(a, "commit", "-qam", "a works")
    git(a, "push", "-q", "origin", "main")
    git(b, "commit", "-qam", "b works")
    assert git(b, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False).returncode == 0
    git(b, "push", "-q", "origin", "main")
    assert git(a, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False).returncode == 0
    na = (a / ".loopx" / "node").read_text().strip()
    nb = (b / ".loopx" / "node").read_text().strip()
    assert na != nb
    return a, b, na, nb


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _node_lines(lines: list[bytes], node: str) -> list[int]:
    """Indexes of ``node``'s records in ``lines``."""
    return [i for i, x in enumerate(lines) if decode(x.rstrip(b"\n")).get("node") == node]


def _seq(line: bytes) -> int:
    return decode(line.rstrip(b"\n"))["seq"]


def _successor(clone: Path, line: bytes) -> str:
    """``"<stream> seq <n>"`` of the record whose prev is ``line``'s hash (the next one of its node,
    in either stream)."""
    h = chain.line_hash(line)
    for stream in ("events", "evidence"):
        for body in Store(str(clone / ".loopx")).iter_lines(stream):
            if decode(body).get("prev") == h:
                return f"{stream} seq {decode(body)['seq']}"
    raise AssertionError("no successor")


def test_a_union_merged_log_holds_in_every_interleaving_with_duplicates(merged, capsys):
    a, b, na, nb = merged
    events = a / ".loopx" / "events.jsonl"
    lines = _lines(events)
    assert len(_node_lines(lines, na)) >= 5 and len(_node_lines(lines, nb)) >= 5  # both nodes wrote here
    before = chain_check(a, capsys)
    assert before["status"] == "ok", before
    assert "2 node(s)" in before["finding"]
    # the same records in other orders: each node's lines keep their order, the nodes interleave
    # at random, and some lines appear twice (a criss-cross merge or a cherry-pick copies them)
    rng = random.Random(12)
    mine, theirs = [lines[i] for i in _node_lines(lines, na)], [lines[i] for i in _node_lines(lines, nb)]
    for _ in range(5):
        x, y, out = list(mine), list(theirs), []
        while x or y:
            out.append((x if x and (not y or rng.random() < 0.5) else y).pop(0))
        out += rng.sample(out, 3)  # duplicates, anywhere after their first copy
        events.write_bytes(b"".join(out))
        check = chain_check(a, capsys)
        assert check["status"] == "ok", check
    found = chainwalk.verify(Store(str(a / ".loopx")))
    assert found["broken"] is None and found["duplicates"] == 3 and set(found["nodes"]) == {na, nb}


def test_each_node_has_one_chain_across_both_streams_of_the_merged_log(merged):
    """What the per-node walk relies on: ordered by clock, each node's records of both streams
    link one to the next, whatever the merged files' line order."""
    a, _b, na, nb = merged
    store = Store(str(a / ".loopx"))
    per_node: dict[str, list] = {}
    for stream in ("events", "evidence"):
        for body in store.iter_lines(stream):
            rec = decode(body)
            per_node.setdefault(rec["node"], []).append((rec["hlc"], rec["prev"], chain.line_hash(body)))
    for node in (na, nb):
        recs = sorted(per_node[node])
        assert recs[0][1] is None
        assert all(r[1] == p[2] for p, r in zip(recs, recs[1:], strict=False))  # one chain per node, both streams
    assert chainwalk.verify(store)["broken"] is None


def _chains(clone: Path) -> dict[str, list[tuple]]:
    """Each node's records of both streams, ordered by clock: (hlc, prev, hash of its line)."""
    store = Store(str(clone / ".loopx"))
    per_node: dict[str, list] = {}
    for stream in ("events", "evidence"):
        for body in store.iter_lines(stream):
            rec = decode(body)
            per_node.setdefault(rec["node"], []).append((rec["hlc"], rec["prev"], chain.line_hash(body)))
    return {node: sorted(recs) for node, recs in per_node.items()}


def test_a_node_writing_after_it_holds_another_nodes_records_links_to_its_own(merged, capsys):
    """Each record's prev is the newest record of the node that writes it, never the newest of the
    log: a and b keep writing, alternately, once each holds the other's records."""
    a, b, na, nb = merged
    for rnd in range(3):
        for clone in (a, b):
            lx(clone, "todo", "add", f"{clone.name} after merge {rnd}", "--goal-id", "g1")
            lx(clone, "evidence", "add", "--goal-id", "g1", "--kind", "note", "--summary", f"{clone.name} {rnd}")
            git(clone, "commit", "-qam", f"{clone.name} round {rnd}")
            assert git(clone, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False).returncode == 0
            git(clone, "push", "-q", "origin", "main")
    assert git(a, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False).returncode == 0
    for clone in (a, b):
        chains = _chains(clone)
        assert set(chains) == {na, nb}
        for node, recs in chains.items():
            assert len(recs) >= 5 + 5 + 6, node  # the fixture's and this test's writes of the node
            assert recs[0][1] is None, node  # the node's first record starts its chain
            for n, (p, r) in enumerate(zip(recs, recs[1:], strict=False), 1):
                assert r[1] == p[2], f"record {n} of node {node} does not link to the node's record before it"
        assert chainwalk.verify(Store(str(clone / ".loopx")))["broken"] is None
        assert chain_check(clone, capsys)["status"] == "ok"


@pytest.mark.parametrize("damage", ["dropped", "edited", "forged", "reordered"])
def test_damage_to_one_nodes_records_in_a_merged_log_is_reported_with_node_and_seq(merged, capsys, damage):
    a, _b, na, nb = merged
    events = a / ".loopx" / "events.jsonl"
    lines = _lines(events)
    theirs = _node_lines(lines, nb)
    i, j = theirs[3], theirs[4]  # two consecutive records of b, with records of a around them
    if damage == "dropped":
        want = _successor(a, lines[i])  # the chain breaks at the record after the dropped one
        del lines[i]
    elif damage == "edited":
        rec = decode(lines[i].rstrip(b"\n"))
        rec["data"] = dict(rec["data"], title="rewritten by someone")
        want = _successor(a, lines[i])  # the next record of b no longer links to it
        lines[i] = encode({k: v for k, v in rec.items() if k != "crc"})  # a fresh, valid CRC
    elif damage == "forged":
        rec = decode(lines[i].rstrip(b"\n"))
        forged = dict(rec, seq=max(_seq(x) for x in lines) + 1, id="e-" + "0" * 16, type="gate.approved",
                      data={"gate_id": "gate-000000", "channel": "terminal"})
        lines.append(encode({k: v for k, v in forged.items() if k != "crc"}))  # claims rec's place in b's chain
        want = f"events seq {forged['seq']}"
    else:
        lines[i], lines[j] = lines[j], lines[i]
        want = f"events seq {_seq(lines[j])}"  # the record that now comes after a later one of its node
    events.write_bytes(b"".join(lines))
    check = chain_check(a, capsys)
    assert check["status"] == "error", check
    assert want in check["finding"] and nb in check["finding"], check
    found = chainwalk.verify(Store(str(a / ".loopx")))
    assert [x["node"] for x in found["breaks"]] == [nb]  # a's chain is untouched and says so


def test_a_break_in_each_of_two_nodes_is_reported_for_both(merged, capsys):
    a, _b, na, nb = merged
    events = a / ".loopx" / "events.jsonl"
    lines = _lines(events)
    drop = [_node_lines(lines, na)[3], _node_lines(lines, nb)[3]]
    want = {na: _successor(a, lines[drop[0]]), nb: _successor(a, lines[drop[1]])}
    events.write_bytes(b"".join(x for k, x in enumerate(lines) if k not in drop))
    found = chainwalk.verify(Store(str(a / ".loopx")))
    assert {x["node"]: f"{x['stream']} seq {x['seq']}" for x in found["breaks"]} == want
    check = chain_check(a, capsys)
    assert check["status"] == "error" and na in check["finding"] and nb in check["finding"], check


def test_records_imported_out_of_clock_order_across_streams_still_link(tmp_path):
    """A node's evidence and events records imported into another clone's files after that clone's
    own records: each file is out of clock order, each node's chain still holds."""
    from loopx.kernel.storage.store import Store as S

    root = tmp_path / "p"
    root.mkdir()
    main(["--project", str(root), "--quiet", "connect"])
    lx(root, "start-goal", "--goal-text", "x", "--goal-id", "g1")
    lx(root, "evidence", "add", "--goal-id", "g1", "--kind", "note", "--summary", "one")
    lx(root, "todo", "add", "two", "--goal-id", "g1")
    store = S(str(root / ".loopx"))
    own = {s: _lines(root / ".loopx" / f"{s}.jsonl") for s in ("events", "evidence")}
    # another node with its own two-stream chain, written later in clock terms but put first in the files
    node, prev, hlc, out = "n-" + "ab" * 8, None, [9_999_999_999_000, 0], {"events": [], "evidence": []}
    for k in range(6):
        stream = "evidence" if k % 3 == 1 else "events"
        rec = {"v": 1, "seq": 900 + k, "id": f"e-{k:016x}", "ts": "2026-01-01T00:00:00Z", "node": node,
               "hlc": [hlc[0] + k, 0], "prev": prev, "actor": "agent:x", "type": "agent.registered",
               "goal": None, "data": {"name": "x", "kind": "unknown"}}
        line = encode(rec)
        prev = chain.line_hash(line)
        out[stream].append(line)
    for s in ("events", "evidence"):
        (root / ".loopx" / f"{s}.jsonl").write_bytes(b"".join(out[s] + own[s]))
    found = chainwalk.verify(store)
    assert found["broken"] is None, found
    assert found["nodes"][node] == 6


def test_a_trace_of_a_merged_log_with_duplicates_verifies(merged, capsys, tmp_path):
    import json

    a, _b, _na, _nb = merged
    events = a / ".loopx" / "events.jsonl"
    lines = _lines(events)
    events.write_bytes(b"".join(lines + lines[2:5]))  # a later merge copied three lines again
    out = tmp_path / "trace.tgz"
    capsys.readouterr()
    assert main(["--project", str(a), "--format", "json", "trace", "export", "--goal-id", "g1", "-o", str(out)]) == 0
    capsys.readouterr()
    code = main(["--project", str(a), "--format", "json", "trace", "verify", str(out)])
    d = json.loads(capsys.readouterr().out)["data"]
    assert code == 0 and d["ok"], d["problems"]


def test_a_forged_node_of_its_own_is_not_a_break_but_doctor_lists_it(goal, project, cli):
    """A line under a made-up node id with prev null starts a chain of its own, which no per-node
    walk can call broken (new nodes are how other machines show up). doctor names every node it
    walked with its machine, so a node no machine ever named stands out; approvals need signing for
    proof (docs/security.md)."""
    import json

    for i in range(3):
        assert cli("todo", "add", f"t{i}", "--goal-id", goal).code == 0
    events = project / ".loopx" / "events.jsonl"
    last = decode(events.read_bytes().splitlines()[-1])
    fake = "n-" + "f" * 16
    forged = dict(last, seq=last["seq"] + 1, id="e-" + "1" * 16, node=fake, prev=None,
                  hlc=[last["hlc"][0] + 1, 0], type="gate.approved", data={"gate_id": "gate-000000"})
    with open(events, "ab") as fh:
        fh.write(encode({k: v for k, v in forged.items() if k != "crc"}))
    d = cli("doctor", json=True)
    check = next(c for c in d.data["checks"] if c["id"] == "store.chain")
    assert check["status"] == "ok" and f"{fake} (no machine name): 1" in check["finding"], check
    assert json.dumps(check).count("no machine name") == 2  # this clone never needed a name either
