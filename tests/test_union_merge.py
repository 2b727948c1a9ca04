"""Several machines through git, today's format: ``loopx connect`` sets ``merge=union`` for the
``.loopx/`` logs, and readers accept a union-merged log (duplicates by id dropped, one
deterministic order), so two clones that both add todos merge without a conflict and without a
read-only store, and both compute the same state."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import run_loopx, subprocess_env
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="git clones in a scratch folder")


def git(cwd, *args, check=True) -> subprocess.CompletedProcess:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True, env=env)


def lx(cwd, *args) -> dict:
    r = run_loopx([*args, "--json"], cwd=cwd)
    assert r.code == 0, r.out + r.err
    return r.data


def _state(path: Path) -> dict:
    s = Store.open(str(path)).load()
    return {k: s[k] for k in ("goals", "todos", "gates", "runs", "evidence", "spends")}


@pytest.fixture
def clones(tmp_path) -> tuple[Path, Path]:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    a = tmp_path / "a"
    git(tmp_path, "clone", "-q", str(remote), str(a))
    (a / "README").write_text("hi\n")
    d = lx(a, "connect")
    assert d["gitattributes"] == "added"
    lx(a, "start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--todo", "base todo")
    git(a, "add", "-A")
    git(a, "commit", "-q", "-m", "connect loopx")
    git(a, "push", "-q", "origin", "main")
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(remote), str(b))
    return a, b


def test_connect_writes_the_union_rule_once_and_keeps_existing_lines(tmp_path):
    p = tmp_path / "p"
    p.mkdir()
    git(p, "init", "-q")
    (p / ".gitattributes").write_text("*.png binary")  # no newline at the end
    assert lx(p, "connect")["gitattributes"] == "added"
    assert lx(p, "connect")["gitattributes"] == "present"
    text = (p / ".gitattributes").read_text()
    assert text.startswith("*.png binary\n") and text.count("merge=union") == 1
    out = git(p, "check-attr", "merge", "--", ".loopx/events.jsonl", ".loopx/evidence.jsonl").stdout
    assert out.count(": merge: union") == 2
    q = tmp_path / "q"
    q.mkdir()
    assert lx(q, "connect")["gitattributes"] == "not_git"
    assert not (q / ".gitattributes").exists()


def test_two_clones_add_todos_and_merge_without_conflict(clones):
    a, b = clones
    for title in ("from a 1", "from a 2"):
        lx(a, "todo", "add", title, "--goal-id", "g1")
    git(a, "commit", "-qam", "a adds todos")
    git(a, "push", "-q", "origin", "main")
    lx(b, "todo", "add", "from b", "--goal-id", "g1")
    gate = lx(b, "gate", "open", "--kind", "release", "--question", "Ship v1?", "--goal-id", "g1")
    git(b, "commit", "-qam", "b adds a todo")
    pulled = git(b, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr  # no conflict
    assert "<<<<<<<" not in (b / ".loopx" / "events.jsonl").read_text()
    st = lx(b, "status")
    assert st["store"]["read_only"] is None and st["store"]["problems"] == []
    titles = sorted(t["title"] for t in _state(b)["todos"].values())
    assert titles == ["base todo", "from a 1", "from a 2", "from b"]
    assert gate["gate_id"] in _state(b)["gates"]
    # b writes after the merge: its seq is above every merged record's, and it works as usual
    lx(b, "todo", "add", "after merge", "--goal-id", "g1")
    seqs = [json.loads(x)["seq"] for x in (b / ".loopx" / "events.jsonl").read_text().splitlines()]
    assert seqs[-1] == max(seqs[:-1]) + 1
    git(b, "commit", "-qam", "b after merge")
    git(b, "push", "-q", "origin", "main")
    # a merges the other way round (git writes the lines in another order): the same state
    assert git(a, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False).returncode == 0
    assert _state(a) == _state(b)
    assert (a / ".loopx" / "events.jsonl").read_bytes() == (b / ".loopx" / "events.jsonl").read_bytes()
    # doctor explains the merged log instead of calling it an error
    d = run_loopx(["doctor", "--json"], cwd=a)
    merge = next(c for c in d.json["data"]["checks"] if c["id"] == "store.merge")
    assert merge["status"] == "ok" and "union" in merge["finding"]
    snap = next(c for c in d.json["data"]["checks"] if c["id"] == "store.snapshot")
    assert (a / ".loopx" / "cache" / "snapshot.bin").exists()
    assert snap["status"] == "ok" and "matches" in snap["finding"], snap


def test_both_orders_of_a_union_merge_fold_to_the_same_state(clones):
    """A criss-cross: each clone merges the other's branch locally, so the files differ in line
    order; the folded states are equal anyway, and a duplicated record is read once."""
    a, b = clones
    lx(a, "todo", "add", "a work", "--goal-id", "g1")
    t = lx(a, "todo", "list", "--goal-id", "g1")
    first = next(x for x in t["todos"] if x["title"] == "base todo")["id"]
    lx(a, "todo", "claim", first)
    git(a, "commit", "-qam", "a")
    lx(b, "todo", "add", "b work", "--goal-id", "g1")
    lx(b, "todo", "block", first, "--reason", "waits on the vendor")
    git(b, "commit", "-qam", "b")
    git(a, "fetch", "-q", str(b), "main:from-b")
    git(b, "fetch", "-q", str(a), "main:from-a")
    assert git(a, "merge", "-q", "--no-edit", "from-b", check=False).returncode == 0
    assert git(b, "merge", "-q", "--no-edit", "from-a", check=False).returncode == 0
    ea, eb = (a / ".loopx" / "events.jsonl").read_bytes(), (b / ".loopx" / "events.jsonl").read_bytes()
    assert ea != eb and sorted(ea.splitlines()) == sorted(eb.splitlines())
    assert _state(a) == _state(b)
    # a record duplicated by a later merge (cherry-pick, rebase) is folded once
    path = a / ".loopx" / "events.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + lines[-3:]))
    assert _state(a) == _state(b)


def test_three_clones_random_work_and_merges_converge(tmp_path, monkeypatch):
    """Three clones add, claim, block and finish todos and push/pull in a seeded random order
    (git merges the logs by union each time): at the end every clone has every record once and
    all three fold to the same state."""
    import random

    from loopx.cli import main

    rng = random.Random(16)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    first = tmp_path / "c0"
    git(tmp_path, "clone", "-q", str(remote), str(first))
    monkeypatch.chdir(tmp_path)

    def lx_in(clone: Path, *args) -> int:
        return main(["--project", str(clone), "--quiet", *args])

    assert lx_in(first, "connect") == 0
    assert lx_in(first, "start-goal", "--goal-text", "Ship it", "--goal-id", "g1") == 0
    git(first, "add", "-A")
    git(first, "commit", "-q", "-m", "init")
    git(first, "push", "-q", "origin", "main")
    clones = [first]
    for i in (1, 2):
        c = tmp_path / f"c{i}"
        git(tmp_path, "clone", "-q", str(remote), str(c))
        clones.append(c)
    added = []
    for step in range(36):
        c = rng.choice(clones)
        op = rng.random()
        if op < 0.45:
            title = f"todo {step} on {c.name}"
            assert lx_in(c, "todo", "add", title, "--goal-id", "g1") == 0
            added.append(title)
        elif op < 0.6:
            todos = [t for t in Store.open(str(c)).load()["todos"].values() if t["status"] == "open"]
            if todos:
                lx_in(c, "todo", "block", rng.choice(todos)["id"], "--reason", f"step {step}")
        if git(c, "status", "--porcelain", "--", ".loopx").stdout:
            git(c, "commit", "-qam", f"step {step}")
        if rng.random() < 0.5:
            pulled = git(c, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False)
            assert pulled.returncode == 0, pulled.stdout + pulled.stderr
            assert Store.open(str(c)).load()["meta"]["read_only"] is None
            git(c, "push", "-q", "origin", "main")
    for _ in range(2):  # everyone pushes and pulls until all have everything
        for c in clones:
            assert git(c, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False).returncode == 0
            git(c, "push", "-q", "origin", "main")
    states = [_state(c) for c in clones]
    assert states[0] == states[1] == states[2]
    titles = sorted(t["title"] for t in states[0]["todos"].values())
    assert titles == sorted(added) and len(set(titles)) == len(titles)
    assert git(remote, "fsck", "--no-progress").returncode == 0
    assert len(git(remote, "log", "--merges", "--format=%H", "main").stdout.split()) >= 3  # real merges happened


def test_a_gate_approved_on_one_clone_unblocks_the_other_after_a_pull(tmp_path, monkeypatch):
    """Acceptance 3 with today's format: machine B's guard denies the protected action until B
    pulls A's approval (a union merge of the logs), then allows it."""
    from loopx.cli import main
    from loopx.guard import verdicts

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    a, b = tmp_path / "a", tmp_path / "b"
    git(tmp_path, "clone", "-q", str(remote), str(a))
    monkeypatch.chdir(tmp_path)
    assert main(["--project", str(a), "--quiet", "connect"]) == 0
    assert main(["--project", str(a), "--quiet", "start-goal", "--goal-text", "Ship", "--goal-id", "g1",
                 "--protect", "merge"]) == 0
    git(a, "add", "-A")
    git(a, "commit", "-q", "-m", "init")
    git(a, "push", "-q", "origin", "main")
    git(tmp_path, "clone", "-q", str(remote), str(b))
    push = "git push origin main"

    def verdict(clone):
        return verdicts.evaluate(Store.open(str(clone)).load(), commands=[push], project_dir=str(clone))

    assert not verdict(a)["allow"] and not verdict(b)["allow"]
    assert main(["--project", str(a), "--quiet", "--agent", "codex", "gate", "open", "--kind", "merge",
                 "--question", "Push the release to main?", "--goal-id", "g1"]) == 0
    gid = next(iter(Store.open(str(a)).load()["gates"]))
    assert main(["--project", str(a), "--quiet", "gate", "approve", gid, "--confirm", gid]) == 0
    assert verdict(a)["allow"]
    git(a, "commit", "-qam", "approved on a")
    git(a, "push", "-q", "origin", "main")
    # b worked meanwhile (its own todo), so the pull is a real merge of both logs
    assert main(["--project", str(b), "--quiet", "todo", "add", "b's own work", "--goal-id", "g1"]) == 0
    git(b, "commit", "-qam", "b works")
    assert not verdict(b)["allow"]  # before the pull: denied
    assert git(b, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main", check=False).returncode == 0
    assert verdict(b)["allow"]  # after: allowed, and the audit trail names the human who approved
    g = Store.open(str(b)).load()["gates"][gid]
    assert g["status"] == "approved" and g["decided_by"].startswith("human:")
