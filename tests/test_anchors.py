"""Anchors of the hash chain (issue 12 item 3): written at every gate decision, at most daily from any
writer and by ``loopx anchor``; ``doctor`` compares the log with the data folder, the git ref
``refs/loopx/anchors`` and a remote's copy. The remote here is a bare repository on disk whose
``update`` hook refuses to rewind or delete the anchor ref (a protected ref)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import rewrite_history
from loopx.kernel.storage import anchors, chain
from loopx.kernel.storage.codec import decode
from loopx.kernel.storage.store import Store

UPDATE_HOOK = """#!/bin/sh
ref="$1"; old="$2"; new="$3"
zero=0000000000000000000000000000000000000000
case "$ref" in
  refs/loopx/anchors)
    if [ "$new" = "$zero" ]; then echo "deleting $ref is refused" >&2; exit 1; fi
    if [ "$old" != "$zero" ] && ! git merge-base --is-ancestor "$old" "$new"; then
      echo "rewinding $ref is refused" >&2; exit 1
    fi;;
esac
exit 0
"""


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(project, tmp_path) -> Path:
    """The project as a git repository with a protected bare remote ``origin``."""
    git(project, "init", "-q")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    hook = remote / "hooks" / "update"
    hook.write_text(UPDATE_HOOK)
    hook.chmod(0o755)
    git(project, "remote", "add", "origin", str(remote))
    return project


def _rejected_gate(cli, goal) -> dict:
    r = cli("gate", "open", "--goal-id", goal, "--kind", "merge", "--question", "merge PR 7?", json=True)
    assert r.code == 0, r.err
    gid = r.data["gate_id"]
    r = cli("gate", "reject", gid, "--confirm", gid, "--note", "not before the review", json=True)
    assert r.code == 0, r.err
    return r.data


def _checks(cli) -> dict:
    r = cli("doctor", json=True)
    return {c["id"]: c for c in r.data["checks"]}


def _drop_rejection(rec: dict) -> bool:
    return rec["type"] in ("gate.rejected", "todo.blocked")


def test_a_gate_decision_anchors_the_heads_in_git_and_the_data_folder(repo, goal, cli):
    d = _rejected_gate(cli, goal)
    assert d["anchor"]["commit"] and d["anchor"]["file"], d
    assert git(repo, "rev-parse", anchors.REF) == d["anchor"]["commit"]
    pid = json.loads((repo / ".loopx" / "format.json").read_text())["project_id"]
    lines = Path(anchors.data_path(pid)).read_text().splitlines()
    heads = chain.chain_heads(Store(str(repo / ".loopx")))
    assert json.loads(lines[-1])["heads"] == heads
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""  # no index or branch touched
    assert "refs/heads" not in git(repo, "for-each-ref", "--format=%(refname)")
    assert _checks(cli)["store.anchors.git"]["status"] == "ok"


def test_a_failing_anchor_never_fails_the_decision(goal, cli, tmp_path, monkeypatch):
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("LOOPX_HOME", str(blocker))  # the data folder cannot be created
    d = _rejected_gate(cli, goal)
    assert d["status"] == "rejected" and d["anchor_warnings"], d


def test_writers_anchor_at_most_daily(clk, goal, project, cli):
    pid = json.loads((project / ".loopx" / "format.json").read_text())["project_id"]
    path = Path(anchors.data_path(pid))
    n = len(path.read_text().splitlines())
    assert n >= 1  # the first write of the day anchored
    assert cli("todo", "add", "one more", "--goal-id", goal).code == 0
    assert len(path.read_text().splitlines()) == n
    clk.advance(25 * 3600)
    assert cli("todo", "add", "the next day", "--goal-id", goal).code == 0
    lines = path.read_text().splitlines()
    assert len(lines) == n + 1 and json.loads(lines[-1])["reason"] == "daily"


def test_a_full_rewrite_is_detected_through_the_pushed_anchor(repo, goal, cli):
    _rejected_gate(cli, goal)
    for i in range(3):
        assert cli("todo", "add", f"after {i}", "--goal-id", goal).code == 0
    r = cli("anchor", "--push", "origin", json=True)
    assert r.code == 0 and r.data["pushed"] == "origin", r.err

    rewrite_history(repo, _drop_rejection)
    checks = _checks(cli)
    assert checks["store.chain"]["status"] == "ok"  # every CRC and hash was recomputed: the chain holds
    for cid in ("store.anchors.file", "store.anchors.git", "store.anchors.remote.origin"):
        assert checks[cid]["status"] == "error" and "rewritten" in checks[cid]["finding"], checks[cid]
        assert "events seq" in checks[cid]["finding"] and "starting after seq" in checks[cid]["finding"]

    # the agent also rewrites the local anchors: the data folder copy and the git ref
    pid = json.loads((repo / ".loopx" / "format.json").read_text())["project_id"]
    Path(anchors.data_path(pid)).unlink()
    git(repo, "update-ref", "-d", anchors.REF)
    git(repo, "update-ref", "-d", "refs/loopx/remote-anchors/origin")
    assert cli("anchor").code == 0  # fresh anchors of the forged history
    # ... but the protected remote refuses the rewound ref
    r = cli("anchor", "--push", "origin", json=True)
    assert r.code == 3 and r.json["error"]["code"] == "push_failed"

    checks = _checks(cli)
    assert checks["store.anchors.file"]["status"] == "ok"  # not detected locally: the same user rewrote them
    assert checks["store.anchors.git"]["status"] == "ok"  # the rewritten local ref agrees with the forged log
    assert checks["store.anchors.rewound.origin"]["status"] == "error"  # but lacks the pushed anchors
    remote = checks["store.anchors.remote.origin"]
    assert remote["status"] == "error" and "rewritten" in remote["finding"], remote

    # without the pushed anchor, nothing shows the rewrite (docs/security.md: local anchors are no proof)
    git(repo, "remote", "remove", "origin")
    checks = _checks(cli)
    assert all(c["status"] == "ok" for k, c in checks.items() if k.startswith("store.anchors") or k == "store.chain")


def test_truncation_is_reported_with_the_first_missing_seq(repo, goal, cli):
    _rejected_gate(cli, goal)
    p = repo / ".loopx" / "events.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    last = decode(lines[-1].rstrip(b"\n"))["seq"]
    p.write_bytes(b"".join(lines[:-2]))  # the rejection and what it blocked are cut off
    shutil.rmtree(repo / ".loopx" / "cache", ignore_errors=True)
    checks = _checks(cli)
    c = checks["store.anchors.git"]
    assert c["status"] == "error" and "truncated" in c["finding"], c
    assert f"events seq {last - 1}" in c["finding"]


def test_anchor_outside_git_writes_the_data_folder_only(goal, cli):
    r = cli("anchor", json=True)
    assert r.code == 0 and r.data["file"] and r.data["commit"] is None
    r = cli("anchor", "--push", "origin", json=True)
    assert r.code == 3 and r.json["error"]["code"] == "no_git_anchor"
