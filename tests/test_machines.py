"""Which machine did what (issue 16: "the audit trail (history, review packet) shows which machine
did what"). Each node names its machine once with a ``node.registered`` record, which travels with
the node's records through ``loopx sync`` and union merges; history, the review packet and the
dashboard name the machine of each record when the store holds records of several machines, and
stay as they were for a single machine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import subprocess_env
from loopx.cli import main
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="git clones in a scratch folder")


def git(cwd, *args, check=True) -> subprocess.CompletedProcess:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True, env=env)


class Machine:
    """One clone, run as the machine ``host`` (LOOPX_HOST), loopx in process."""

    def __init__(self, path: Path, host: str, monkeypatch, capsys):
        self.path, self.host, self.mp, self.capsys = path, host, monkeypatch, capsys

    def __call__(self, *args, agent: str | None = None) -> int:
        self.mp.setenv("LOOPX_HOST", self.host)
        pre = ["--project", str(self.path), "--quiet"] + (["--agent", agent] if agent else [])
        return main([*pre, *args])

    def json(self, *args, agent: str | None = None) -> dict:
        self.mp.setenv("LOOPX_HOST", self.host)
        self.capsys.readouterr()
        pre = ["--project", str(self.path), "--format", "json"] + (["--agent", agent] if agent else [])
        code = main([*pre, *args])
        out = self.capsys.readouterr().out
        assert code == 0, out
        return json.loads(out)["data"]

    def text(self, *args) -> str:
        self.mp.setenv("LOOPX_HOST", self.host)
        self.capsys.readouterr()
        assert main(["--project", str(self.path), *args]) == 0
        return self.capsys.readouterr().out


@pytest.fixture
def two(tmp_path, monkeypatch, capsys):
    """Two clones of one project and a bare remote; machine a starts the goal and syncs, b joins."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(remote), str(seed))
    (seed / "README").write_text("project\n")
    git(seed, "add", "README")
    git(seed, "commit", "-q", "-m", "init")
    git(seed, "push", "-q", "origin", "main")
    for name in ("a", "b"):
        git(tmp_path, "clone", "-q", str(remote), str(tmp_path / name))
    monkeypatch.chdir(tmp_path)
    a = Machine(tmp_path / "a", "host-a", monkeypatch, capsys)
    b = Machine(tmp_path / "b", "host-b", monkeypatch, capsys)
    assert a("connect") == 0
    assert a("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--protect", "merge") == 0
    assert a("todo", "add", "from a", "--goal-id", "g1") == 0
    assert a("sync") == 0
    assert b("connect") == 0
    assert b("sync") == 0
    return a, b


def _by(events: list[dict], type_: str, **data) -> dict:
    return next(e for e in events if e["type"] == type_ and all(e["data"].get(k) == v for k, v in data.items()))


def test_history_after_sync_names_the_machine_of_every_record_on_both_clones(two):
    a, b = two
    assert b("todo", "add", "from b", "--goal-id", "g1") == 0
    assert b("gate", "open", "--kind", "merge", "--question", "Merge it?", "--goal-id", "g1", agent="codex") == 0
    assert b("sync") == 0 and a("sync") == 0
    gid = next(iter(Store.open(str(a.path)).load()["gates"]))
    assert a("gate", "approve", gid, "--confirm", gid) == 0  # a human decides on machine a
    assert a("sync") == 0 and b("sync") == 0
    for m in (a, b):
        h = m.json("history", "--limit", "0")
        assert sorted(h["machines"].values()) == ["host-a", "host-b"]
        ev = h["events"]
        assert all(e["machine"] in ("host-a", "host-b") for e in ev), [e for e in ev if e["machine"] not in
                                                                         ("host-a", "host-b")]
        assert _by(ev, "goal.started")["machine"] == "host-a"  # written before a named its machine
        assert _by(ev, "todo.added", title="from a")["machine"] == "host-a"
        assert _by(ev, "todo.added", title="from b")["machine"] == "host-b"
        assert _by(ev, "gate.opened", gate_id=gid)["machine"] == "host-b"
        assert _by(ev, "gate.approved", gate_id=gid)["machine"] == "host-a"
        # the newest-first read (`--limit N`) names them the same way
        recent = m.json("history", "--limit", "3", "--events")["events"]
        assert [e["machine"] for e in recent] == [e["machine"] for e in ev[-3:]]
        text = m.text("history", "--limit", "0", "--events")
        lines = text.splitlines()
        assert any("todo.added" in x and "host-b" in x and "from b" in x for x in lines), text
        assert any("todo.added" in x and "host-a" in x and "from a" in x for x in lines), text
        assert any("gate.approved" in x and "host-a" in x for x in lines), text
        assert "MACHINES" in text


def test_review_packet_and_dashboard_name_the_machine_that_decided_and_ran(two):
    from loopx.dashboard.api import Api, project_key
    from loopx.kernel.storage import clock

    a, b = two
    assert b("gate", "open", "--kind", "merge", "--question", "Merge it?", "--goal-id", "g1", agent="codex") == 0
    assert b("sync") == 0 and a("sync") == 0
    gid = next(iter(Store.open(str(a.path)).load()["gates"]))
    assert a("gate", "approve", gid, "--confirm", gid) == 0
    assert a("sync") == 0 and b("sync") == 0
    assert b.json("next", "--goal-id", "g1", agent="worker")["started"]  # a turn runs on machine b
    rp = b.json("review-packet", "--goal-id", "g1")
    gate = next(x for x in rp["gates"]["decided"] if x["id"] == gid)
    assert gate["decided_on"] == "host-a"
    assert f"by {gate['decided_by']} on host-a" in rp["markdown"]
    assert "Machines: host-a" in rp["markdown"] and "host-b" in rp["markdown"]
    page = Api().goal(project_key(str(b.path)), "g1", clock.now_iso())
    assert [r["machine"] for r in page["runs"]] == ["host-b"]
    assert next(g for g in page["gates"] if g["id"] == gid)["decided_on"] == "host-a"


def test_a_single_machine_store_shows_no_machine_anywhere(project, cli):
    assert cli("start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--todo", "t").code == 0
    h = cli("history", "--limit", "0", json=True).data
    assert "machines" not in h and all("machine" not in e for e in h["events"])
    assert all("machine" not in r and "node" not in r for r in h["rounds"])
    text = cli("history").out
    assert "MACHINES" not in text
    rp = cli("review-packet", "--goal-id", "g1", json=True).data
    assert "machines" not in rp and "Machines:" not in rp["markdown"]
    types = [json.loads(x)["type"] for x in (project / ".loopx" / "events.jsonl").read_text().splitlines()]
    assert "node.registered" not in types  # nothing is written for a machine that is alone


def test_the_machine_name_is_written_once_per_node_and_is_part_of_its_chain(two):
    from loopx.kernel.storage import chainwalk

    a, b = two
    for _ in range(2):
        assert a("sync") == 0 and b("sync") == 0
    assert b("todo", "add", "more", "--goal-id", "g1") == 0
    for m in (a, b):
        recs = [json.loads(x) for x in (m.path / ".loopx" / "events.jsonl").read_text().splitlines()]
        named = [(r["node"], r["data"]["host"]) for r in recs if r["type"] == "node.registered"]
        assert sorted(h for _n, h in named) == ["host-a", "host-b"]  # once each, however often they synced
        assert chainwalk.verify(Store.open(str(m.path)))["broken"] is None
    # a new machine name (LOOPX_HOST changed) is recorded at the next sync; the newest one is shown
    b.host = "host-b2"
    assert b("sync") == 0 and a("sync") == 0
    assert sorted(a.json("history", "--limit", "0")["machines"].values()) == ["host-a", "host-b2"]


def test_a_machine_writing_right_after_a_sync_links_to_its_own_newest_record(two):
    """Each record's ``prev`` is the newest record of its own node, never the newest of the store:
    a and b take turns, each writing (both streams) right after a sync brought in the other's
    newer records, and in both clones each node's records still form one chain. (Computing prev
    from the newest record of any node once a second node exists fails here, issue 25.)"""
    from loopx.kernel.storage import chain, chainwalk
    from loopx.kernel.storage.codec import decode

    a, b = two
    for rnd in range(2):
        for me, other in ((a, b), (b, a)):
            assert other("todo", "add", f"{other.host} {rnd}", "--goal-id", "g1") == 0
            assert other("sync") == 0 and me("sync") == 0  # me now holds other's newest record
            assert me("todo", "add", f"{me.host} after {rnd}", "--goal-id", "g1") == 0
            assert me("evidence", "add", "--goal-id", "g1", "--kind", "note", "--summary", f"{me.host} {rnd}") == 0
    assert a("sync") == 0 and b("sync") == 0 and a("sync") == 0
    for m in (a, b):
        store = Store.open(str(m.path))
        per_node: dict[str, set] = {}
        for stream in ("events", "evidence"):
            for body in store.iter_lines(stream):
                rec = decode(body)
                per_node.setdefault(rec["node"], set()).add((tuple(rec["hlc"]), rec["prev"], chain.line_hash(body)))
        assert len(per_node) == 2, m.host
        for node, found in per_node.items():
            recs = sorted(found)
            assert len(recs) >= 6, node
            assert recs[0][1] is None, node  # the node's first record starts its chain
            for n, (p, r) in enumerate(zip(recs, recs[1:], strict=False), 1):
                assert r[1] == p[2], f"{m.host}: record {n} of node {node} does not link to the node's record before it"
        assert chainwalk.verify(store)["broken"] is None


def test_a_union_merge_names_the_machines_that_wrote_after_meeting(tmp_path, monkeypatch, capsys):
    """No sync: .loopx/ committed on two clones and merged by git (merge=union). A clone names its
    machine at its first write to a store that holds another node's records."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    monkeypatch.chdir(tmp_path)
    a = Machine(tmp_path / "a", "host-a", monkeypatch, capsys)
    b = Machine(tmp_path / "b", "host-b", monkeypatch, capsys)
    git(tmp_path, "clone", "-q", str(remote), str(a.path))
    assert a("connect") == 0
    assert a("start-goal", "--goal-text", "Ship", "--goal-id", "g1") == 0
    git(a.path, "add", "-A")
    git(a.path, "commit", "-q", "-m", "init")
    git(a.path, "push", "-q", "origin", "main")
    single = [json.loads(x)["type"] for x in (a.path / ".loopx" / "events.jsonl").read_text().splitlines()]
    assert "node.registered" not in single
    git(tmp_path, "clone", "-q", str(remote), str(b.path))
    assert b("todo", "add", "from b", "--goal-id", "g1") == 0  # b's first write meets a's records
    git(b.path, "commit", "-qam", "b")
    git(b.path, "push", "-q", "origin", "main")
    assert a("todo", "add", "from a", "--goal-id", "g1") == 0
    git(a.path, "commit", "-qam", "a")
    assert git(a.path, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False).returncode == 0
    h = a.json("history", "--limit", "0")
    nodes = {e["node"] for e in h["events"]}
    assert len(nodes) == 2
    assert _by(h["events"], "todo.added", title="from b")["machine"] == "host-b"
    na = (a.path / ".loopx" / "node").read_text().strip()
    assert _by(h["events"], "todo.added", title="from a")["machine"] == na  # a has not named itself yet
    assert a("todo", "add", "after the merge", "--goal-id", "g1") == 0  # a's next write does
    h = a.json("history", "--limit", "0")
    assert _by(h["events"], "todo.added", title="from a")["machine"] == "host-a"
    assert sorted(h["machines"].values()) == ["host-a", "host-b"]


# ------------------------------------------------------------------ anchors of several machines
PROTECT = """#!/bin/sh
ref="$1"; old="$2"; new="$3"
zero=0000000000000000000000000000000000000000
case "$ref" in
  refs/loopx/anchors|refs/loopx/node-anchors/*)
    if [ "$new" = "$zero" ]; then echo "deleting $ref is refused" >&2; exit 1; fi
    if [ "$old" != "$zero" ] && ! git merge-base --is-ancestor "$old" "$new"; then
      echo "rewinding $ref is refused" >&2; exit 1
    fi;;
esac
exit 0
"""


def _anchor_checks(m: Machine) -> dict:
    """doctor's store checks (doctor exits 1 on any warning of the machine, e.g. PATH)."""
    m.mp.setenv("LOOPX_HOST", m.host)
    m.capsys.readouterr()
    main(["--project", str(m.path), "--format", "json", "doctor"])
    checks = json.loads(m.capsys.readouterr().out)["data"]["checks"]
    return {c["id"]: c for c in checks if c["id"].startswith("store.")}


def test_each_machine_pushes_its_own_anchors_and_doctor_checks_every_nodes_head(two, tmp_path):
    a, b = two
    hook = tmp_path / "remote.git" / "hooks" / "update"
    hook.write_text(PROTECT)
    hook.chmod(0o755)
    assert b("todo", "add", "from b", "--goal-id", "g1") == 0
    assert b("sync") == 0 and a("sync") == 0
    pushed = {}
    for m in (a, b):  # both push: one ref per node, so neither refuses the other
        d = m.json("anchor", "--push", "origin")
        node = (m.path / ".loopx" / "node").read_text().strip()
        assert d["pushed_ref"] == f"refs/loopx/node-anchors/{node}", d
        pushed[m.host] = node
    # b goes on working and anchors again; a has not synced those records yet
    assert b("todo", "add", "b's later work", "--goal-id", "g1") == 0
    assert b.json("anchor", "--push", "origin")["pushed"] == "origin"
    for m in (a, b):
        checks = _anchor_checks(m)
        bad = {k: c for k, c in checks.items() if c["status"] not in ("ok", "skipped")}
        assert not bad, bad  # b's newer head is "not here yet" on a, never a truncation
        assert checks["store.anchors.nodes.origin"]["status"] == "ok"
        assert "2 node(s)" in checks["store.anchors.nodes.origin"]["finding"]

    # b's agent rewrites b's log consistently (drops b's later todo, recomputes every hash) and b's
    # local anchors: the anchors b pushed, which the remote will not rewind, show it
    from conftest import rewrite_history
    from loopx.kernel.storage import anchors

    root = b.path / ".loopx"
    rewrite_history(b.path, lambda r: (r.get("data") or {}).get("title") == "b's later work")
    pid = json.loads((root / "format.json").read_text())["project_id"]
    Path(anchors.data_path(pid)).unlink()
    git(b.path, "update-ref", "-d", anchors.REF)
    assert b("anchor") == 0  # fresh local anchors of the forged history
    checks = _anchor_checks(b)
    assert checks["store.chain"]["status"] == "ok"  # consistent: the chain alone cannot tell
    assert checks["store.anchors.git"]["status"] == "ok"
    nodes = checks["store.anchors.nodes.origin"]
    assert nodes["status"] == "error" and pushed["host-b"] in nodes["finding"], nodes
    assert checks["store.anchors.rewound.origin"]["status"] == "error"
    assert b("anchor", "--push", "origin") != 0  # and the protected remote refuses the rewound ref


def test_a_machine_name_with_control_and_bidi_characters_is_shown_inert(two):
    a, b = two
    b.host = "build\u202ebox\x1b[31m"
    assert b("sync") == 0 and a("sync") == 0
    text = a.text("history", "--limit", "0", "--events")
    assert "\u202e" not in text and "\x1b" not in text
    assert "build\\u202ebox" in text
    md = a.json("review-packet", "--goal-id", "g1")["markdown"]
    assert "\u202e" not in md and "\x1b" not in md
