"""``loopx trace export|verify`` (issue 12 item 9): one goal's archive checked end to end."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

from loopx.kernel.storage import chain
from loopx.kernel.storage.codec import decode, encode


def _setup(project, cli, goal) -> Path:
    out = project.parent / "pytest.log"
    out.write_text("".join(f"test_{i} PASSED\n" for i in range(800)))  # longer than the excerpt: a blob
    r = cli("evidence", "add", "--goal-id", goal, "--kind", "test", "--summary", "800 passed",
            "--output-file", out, json=True)
    assert r.code == 0, r.err
    r = cli("start-goal", "--goal-text", "Another goal, kept private", "--goal-id", "g2", "--done-when", "x",
            "--verify", f"{sys.executable} -c pass", "--todo", "private todo title", json=True)
    assert r.code == 0, r.err
    trace = project.parent / "g1.tar.gz"
    r = cli("trace", "export", "--goal-id", goal, "-o", trace, json=True)
    assert r.code == 0, r.err
    assert r.data["blobs"] == 1 and r.data["stubs"] > 0
    return trace


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def _write(path: Path, members: dict[str, bytes], fix_manifest: bool = True) -> None:
    if fix_manifest:
        man = json.loads(members["manifest.json"])
        man["files"] = {n: chain.sha256(b).hexdigest() for n, b in members.items() if n != "manifest.json"}
        members["manifest.json"] = json.dumps(man).encode()
    with tarfile.open(path, "w:gz") as tar:
        for n, b in members.items():
            info = tarfile.TarInfo(n)
            info.size = len(b)
            tar.addfile(info, io.BytesIO(b))


def test_export_then_verify_holds_and_keeps_other_goals_private(project, cli, goal):
    trace = _setup(project, cli, goal)
    r = cli("trace", "verify", trace, json=True)
    assert r.code == 0 and r.data["ok"], r.data["problems"]
    m = _members(trace)
    assert "review.md" in m and b"Make the tests pass" in m["review.md"]
    assert any(n.startswith("blobs/") for n in m)
    assert b"private todo title" not in m["records.jsonl"]  # another goal's records are hashes only
    assert cli("trace", "verify", trace).out.startswith("verified:")


def test_a_rewritten_record_with_a_fresh_crc_and_manifest_fails_verify(project, cli, goal):
    trace = _setup(project, cli, goal)
    m = _members(trace)
    rows = [json.loads(x) for x in m["records.jsonl"].decode().splitlines()]
    i = next(i for i, r in enumerate(rows) if "line" in r and '"todo.added"' in r["line"])
    rec = decode(rows[i]["line"].encode())
    rec["data"]["title"] = "something else"
    rows[i]["line"] = encode({k: v for k, v in rec.items() if k != "crc"}).decode().rstrip("\n")
    m["records.jsonl"] = "".join(json.dumps(r) + "\n" for r in rows).encode()
    _write(trace, m)
    r = cli("trace", "verify", trace, json=True)
    assert r.code == 1 and any("chain of node" in p for p in r.data["problems"]), r.data


def test_a_swapped_blob_or_member_fails_verify(project, cli, goal):
    trace = _setup(project, cli, goal)
    m = _members(trace)
    blob = next(n for n in m if n.startswith("blobs/"))
    m[blob] = b"all tests passed, trust me\n"
    _write(trace, m, fix_manifest=False)
    r = cli("trace", "verify", trace, json=True)
    assert r.code == 1 and any(blob in p for p in r.data["problems"])
    _write(trace, m)  # manifest recomputed: the blob's own name is its hash
    r = cli("trace", "verify", trace, json=True)
    assert r.code == 1 and any("does not match its SHA-256" in p for p in r.data["problems"])


def test_verify_refuses_a_file_that_is_not_a_trace(project, cli, tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive")
    r = cli("trace", "verify", junk, json=True)
    assert r.code == 2 and r.json["error"]["code"] == "bad_trace"
    r = cli("trace", "verify", junk)
    assert r.err.startswith("loopx: error:") and "hint:" in r.err


def test_export_refuses_a_path_inside_the_store(project, cli, goal):
    r = cli("trace", "export", "--goal-id", goal, "-o", project / ".loopx" / "t.tar.gz", json=True)
    assert r.code == 2
