"""Several machines through git (issue 16): ``loopx sync`` and ``loopx next --sync`` against a bare
remote on disk, with real git and real processes. docs/multi-agent.md, "Several machines"."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest

from conftest import subprocess_env
from loopx.cli import main
from loopx.kernel.storage.store import Store


def git(cwd, *args, check=True) -> subprocess.CompletedProcess:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True, env=env)


def lx(clone: Path, *args, agent: str | None = None) -> int:
    pre = ["--project", str(clone), "--quiet"] + (["--agent", agent] if agent else [])
    return main([*pre, *args])


def lx_json(clone: Path, *args, capsys, agent: str | None = None) -> dict:
    capsys.readouterr()
    pre = ["--project", str(clone), "--format", "json"] + (["--agent", agent] if agent else [])
    main([*pre, *args])
    return json.loads(capsys.readouterr().out)


def branches(clone: Path) -> str:
    """Every branch and remote-tracking ref with its commit, and the tracked files' status."""
    refs = git(clone, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/remotes").stdout
    return refs + git(clone, "status", "--porcelain", "--untracked-files=no").stdout


@pytest.fixture
def machines(tmp_path, monkeypatch):
    """A bare remote and three clones a, b, c of one project; a started goal g1 with five ready
    todos, synced to all three. ``.loopx/`` is not committed (shared through refs only)."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(remote), str(seed))
    (seed / "README").write_text("project\n")
    git(seed, "add", "README")
    git(seed, "commit", "-q", "-m", "init")
    git(seed, "push", "-q", "origin", "main")
    clones = []
    for name in ("a", "b", "c"):
        c = tmp_path / name
        git(tmp_path, "clone", "-q", str(remote), str(c))
        clones.append(c)
    monkeypatch.chdir(tmp_path)
    a = clones[0]
    assert lx(a, "connect") == 0
    assert lx(a, "start-goal", "--goal-text", "Ship", "--goal-id", "g1", "--protect", "merge") == 0
    for i in range(5):
        assert lx(a, "todo", "add", f"task {i}", "--goal-id", "g1") == 0
    assert lx(a, "sync") == 0
    for c in clones[1:]:
        assert lx(c, "connect") == 0
        assert lx(c, "sync") == 0
    return remote, clones


def ready(clone: Path) -> list[str]:
    state = Store.open(str(clone)).load()
    return sorted(t["id"] for t in state["todos"].values() if t["status"] == "open")


def test_sync_shares_records_without_touching_branches(machines):
    remote, (a, b, c) = machines
    before = {x: branches(x) for x in (a, b, c)}
    assert ready(a) == ready(b) == ready(c) and len(ready(a)) == 5
    refs = git(remote, "for-each-ref", "--format=%(refname)").stdout.split()
    assert "refs/heads/main" in refs and sum(r.startswith("refs/loopx/nodes/") for r in refs) == 3
    assert lx(b, "todo", "add", "from b", "--goal-id", "g1") == 0
    assert lx(b, "sync") == 0 and lx(a, "sync") == 0
    assert "from b" in [t["title"] for t in Store.open(str(a)).load()["todos"].values()]
    assert {x: branches(x) for x in (a, b, c)} == before
    assert git(remote, "log", "--format=%s", "main").stdout.split("\n")[0] == "init"


def test_six_agents_on_three_machines_claim_five_todos_once_each(machines):
    """Acceptance 1: 3 machines x 2 agents call `loopx next --sync` at once over 5 ready todos."""
    remote, clones = machines
    procs = []
    for i, clone in enumerate(clones):
        for j in (1, 2):
            env = subprocess_env({"LOOPX_HOST": f"host-{clone.name}"})
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "loopx", "--project", str(clone), "--agent", f"w{i}{j}", "--format", "json",
                 "next", "--sync", "--goal-id", "g1"], cwd=clone, env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert "Traceback" not in err
        results.append((p.returncode, json.loads(out)))
    won = [env["data"]["todo_id"] for code, env in results if code == 0]
    lost = [env for code, env in results if code != 0]
    assert len(won) == 5 and len(set(won)) == 5
    assert len(lost) == 1 and lost[0]["exit_code"] == 1 and lost[0]["data"]["started"] is False
    assert lost[0]["data"]["decision"]["decision"] != "run"
    claims = json.loads(git(remote, "show", "refs/loopx/claims:claims.json").stdout)
    assert sorted(claims) == sorted(won)
    # after a sync everywhere, every machine sees the five claims, each held once
    for c in clones + clones:
        assert lx(c, "sync") == 0
    for c in clones:
        state = Store.open(str(c)).load()
        held = sorted(t["id"] for t in state["todos"].values() if t["status"] == "claimed")
        assert held == sorted(won)


def test_a_lost_claim_says_where_and_when(machines, capsys, monkeypatch):
    """Machine c works from a stale copy of refs/loopx/claims: its push is refused (the remote's
    compare-and-swap), it fetches, sees the todo taken on host-a and gives a clean no naming it."""
    from loopx.sync import transport as gs

    remote, (a, b, c) = machines
    todos = ready(a)
    sa = Store.open(str(a))
    ga = gs.project_git(sa, None)
    monkeypatch.setenv("LOOPX_HOST", "host-a")
    for tid in todos:  # a claims all five through the remote (its records not pushed yet)
        got = gs.claim(sa, ga, lambda held, tid=tid: None if tid in held else tid, "agent:a1", "2099-01-01T00:00:00Z")
        assert got["todo_id"] == tid and got["tries"] == 1
    real = gs.Git.fetch
    skipped = []

    def stale_once(self, *specs):
        if len(skipped) < 2 and any("claim" in s for s in specs):
            skipped.append(specs)  # the sync's and the first claim's fetch of the claims ledger are lost:
            specs = tuple(s for s in specs if "claim" not in s)  # c picks from its old copy
            if not specs:
                return None
        return real(self, *specs)

    monkeypatch.setattr(gs.Git, "fetch", stale_once)
    monkeypatch.setenv("LOOPX_HOST", "host-c")
    env = lx_json(c, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="c1")
    assert skipped and env["exit_code"] == 1 and env["data"]["started"] is False
    d = env["data"]["decision"]
    assert d["reason"] == "claimed_elsewhere"
    m = re.match(r"(t-\w+) was claimed on host-a (\d+) s earlier", d["message"])
    assert m and m.group(1) in todos
    assert env["data"]["sync"]["claim_tries"] == 2
    claims = json.loads(git(remote, "show", "refs/loopx/claims:claims.json").stdout)
    assert {v["host"] for v in claims.values()} == {"host-a"}


SEED = 16
STEPS = 300


def test_random_work_on_three_machines_converges(machines, monkeypatch):
    """Acceptance 2: random operations over three clones, syncs in random order, clone c offline
    for a simulated day (LOOPX_NOW); every clone ends with the same state hash and the same records,
    none lost or duplicated, git fsck clean, branches untouched. Deterministic (SEED).

    Bounded by its work, not by the wall clock: STEPS operations (each sync is about ten git
    processes, which is what a loaded machine makes slow), enough for every kind of operation,
    dozens of syncs in random order and a day offline; issue 16 ran 1,000, which says no more about
    convergence and took minutes on a busy machine."""
    from datetime import datetime, timedelta

    from loopx.sync import transport as gs

    remote, clones = machines
    a, b, c = clones
    before = {x: branches(x) for x in clones}
    rng = random.Random(SEED)
    t0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    offline = range(100, 172)  # 72 steps of 20 minutes: one day without c reaching the remote
    done = {"sync": 0, "offline": 0}
    for step in range(STEPS):
        now = t0 + timedelta(minutes=20 * step)
        monkeypatch.setenv("LOOPX_NOW", now.strftime("%Y-%m-%dT%H:%M:%SZ"))
        clone = rng.choice(clones)
        op = rng.random()
        away = clone is c and step in offline
        if op < 0.15:
            if away:
                done["offline"] += 1
                lx(clone, "todo", "add", f"offline {step}", "--goal-id", "g1")
                continue
            assert lx(clone, "sync") == 0, f"seed {SEED} step {step}"
            done["sync"] += 1
        elif op < 0.55:
            lx(clone, "todo", "add", f"step {step}", "--goal-id", "g1")
        elif op < 0.72:
            lx(clone, "evidence", "add", "--goal-id", "g1", "--kind", "note", "--summary", f"note {step}")
        elif op < 0.94 or away:
            lx(clone, "next", "--goal-id", "g1", agent=f"{clone.name}{rng.randint(1, 2)}")
        else:
            lx(clone, "next", "--sync", "--goal-id", "g1", agent=f"{clone.name}{rng.randint(1, 2)}")
    assert done["sync"] > 30 and done["offline"] >= 5, f"seed {SEED}: {done}"
    for _ in range(2):
        for clone in clones:
            assert lx(clone, "sync") == 0
    hashes = {gs.state_hash(Store.open(str(x))) for x in clones}
    assert len(hashes) == 1, f"seed {SEED}"
    ids = []
    for x in clones:
        st = Store.open(str(x))
        recs = [r for s in ("events", "evidence") for r in st.iter_records(s)]
        got = [r["id"] for r in recs]
        assert len(got) == len(set(got)), f"seed {SEED}"  # nothing imported twice
        assert len({r["node"] for r in recs}) == 3 and len(got) > STEPS
        ids.append(set(got))
    assert ids[0] == ids[1] == ids[2], f"seed {SEED}"  # nothing lost
    titles = {t["title"] for t in Store.open(str(a)).load()["todos"].values()}
    assert sum(t.startswith("offline ") for t in titles) == done["offline"]  # the day offline arrived
    assert git(remote, "fsck", "--no-progress").returncode == 0
    for x in clones:
        assert git(x, "fsck", "--no-progress").returncode == 0
    assert {x: branches(x) for x in clones} == before


def test_a_gate_approved_on_a_unblocks_b_after_sync(machines):
    """Acceptance 3: machine B's guard denies the protected action before sync and allows it after."""
    from loopx.guard import verdicts

    remote, (a, b, c) = machines
    push = "git push origin main"

    def verdict(clone):
        return verdicts.evaluate(Store.open(str(clone)).load(), commands=[push], project_dir=str(clone))

    assert not verdict(a)["allow"] and not verdict(b)["allow"]
    assert lx(a, "gate", "open", "--kind", "merge", "--question", "Push the release?", "--goal-id", "g1",
              agent="codex") == 0
    gid = next(iter(Store.open(str(a)).load()["gates"]))
    assert lx(a, "gate", "approve", gid, "--confirm", gid) == 0
    assert verdict(a)["allow"]
    assert lx(a, "sync") == 0
    assert not verdict(b)["allow"]  # b has not synced: denied
    assert lx(b, "sync") == 0
    assert verdict(b)["allow"]
    g = Store.open(str(b)).load()["gates"][gid]
    assert g["status"] == "approved" and g["decided_by"].startswith("human:")


def test_unreachable_remote_is_a_clean_error(machines, capsys):
    remote, (a, b, c) = machines
    git(a, "remote", "set-url", "origin", str(remote) + "-gone")
    env = lx_json(a, "sync", capsys=capsys)
    assert env["ok"] is False and env["exit_code"] == 3
    assert env["error"]["code"] == "remote_unreachable"
    assert lx(a, "todo", "add", "still works offline", "--goal-id", "g1") == 0


def test_sync_outside_git_or_without_the_remote(tmp_path, project, capsys):
    env = lx_json(project, "sync", capsys=capsys)
    assert env["exit_code"] == 3 and "git" in env["error"]["message"]
    git(project, "init", "-q")
    env = lx_json(project, "sync", "--remote", "nowhere", capsys=capsys)
    assert env["exit_code"] == 3 and "nowhere" in env["error"]["message"]


def test_status_names_tentative_claims(machines, capsys):
    """A claim made without --sync counts only on this clone until claimed through the remote."""
    remote, (a, b, c) = machines
    assert lx(a, "next", "--goal-id", "g1", agent="offline") == 0
    env = lx_json(a, "sync", "--status", capsys=capsys)
    assert [t["holder"] for t in env["data"]["tentative"]] == ["agent:offline"]
    assert env["data"]["state_hash"]
    assert lx(b, "next", "--sync", "--goal-id", "g1", agent="online") == 0
    env = lx_json(b, "sync", "--status", capsys=capsys)
    assert env["data"]["tentative"] == []
    env = lx_json(a, "status", capsys=capsys)
    assert [t["holder"] for t in env["data"]["sync"]["tentative"]] == ["agent:offline"]
    capsys.readouterr()
    assert main(["--project", str(a), "status"]) == 0
    assert "tentative: " in capsys.readouterr().out
    env = lx_json(b, "status", capsys=capsys)
    assert env["data"]["sync"]["tentative"] == []


def test_sharing_a_goal_is_for_humans(machines, capsys):
    remote, (a, b, c) = machines
    env = lx_json(a, "goal", "update", "g1", "--shared", capsys=capsys, agent="codex")
    assert env["exit_code"] == 4 and env["error"]["code"] == "human_required"
    env = lx_json(a, "goal", "update", "g1", "--shared", capsys=capsys)
    assert env["exit_code"] == 0 and env["data"]["shared"] is True and "refs/loopx" in env["data"]["effect"]
    assert Store.open(str(a)).load()["goals"]["g1"]["shared"] is True


def test_should_run_syncs_a_shared_goal_and_goes_on_when_the_remote_is_gone(machines, capsys, monkeypatch):
    remote, (a, b, c) = machines
    monkeypatch.setenv("LOOPX_SYNC_EVERY", "0")
    assert lx(a, "goal", "update", "g1", "--shared") == 0
    assert lx(a, "sync") == 0 and lx(b, "sync") == 0  # b learns the goal is shared
    assert lx(a, "todo", "add", "added on a", "--goal-id", "g1") == 0
    assert lx(a, "sync") == 0
    env = lx_json(b, "quota", "should-run", "--goal-id", "g1", capsys=capsys)
    assert env["exit_code"] == 0 and env["warnings"] == []
    assert "added on a" in [t["title"] for t in Store.open(str(b)).load()["todos"].values()]
    git(b, "remote", "set-url", "origin", str(remote) + "-gone")
    env = lx_json(b, "quota", "should-run", "--goal-id", "g1", capsys=capsys)
    assert env["exit_code"] == 0 and env["data"]["decision"] == "run"  # the loop goes on locally
    assert len(env["warnings"]) == 1 and "shared claims wait" in env["warnings"][0]


def test_hooks_never_sync_even_for_a_shared_goal(machines, tmp_path, monkeypatch):
    """A shared goal, a sync due at every call: the hooks still never fetch or push (a git on PATH
    logs every call it gets)."""
    import os

    from test_hooks import hook, payload

    remote, (a, b, c) = machines
    monkeypatch.setenv("LOOPX_SYNC_EVERY", "0")
    assert lx(a, "goal", "update", "g1", "--shared") == 0 and lx(a, "sync") == 0
    real = subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "git-calls"
    (fake / "git").write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
    (fake / "git").chmod(0o755)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "LOOPX_SYNC_EVERY": "0"}
    for event, fixture in (("session-start", "session_start"), ("stop", "stop"), ("pre-tool", "pre_tool_bash")):
        r = hook(a, event, "claude-code", payload("claude-code", fixture, a), env=env)
        assert r.code == 0, r.err
    calls = log.read_text() if log.exists() else ""
    assert not any(word in calls for word in ("fetch", "push", "ls-remote"))
    # the same git does log a should-run's sync, so the check above can fail
    subprocess.run([sys.executable, "-m", "loopx", "quota", "should-run", "--goal-id", "g1"], cwd=a,
                   env=subprocess_env(env), capture_output=True, timeout=120)
    assert "fetch" in log.read_text()


def test_import_after_a_torn_tail_repairs_it_first(machines):
    """A writer killed mid-line on b: the next sync repairs the tail (quarantined) before appending
    a's records, so no imported line is glued to the torn one."""
    remote, (a, b, c) = machines
    assert lx(a, "todo", "add", "while b was torn", "--goal-id", "g1") == 0 and lx(a, "sync") == 0
    with open(b / ".loopx" / "events.jsonl", "ab") as fh:
        fh.write(b'{"v":1,"seq":99,"id":"ev-torn')
    assert lx(b, "sync") == 0
    st = Store.open(str(b)).load()
    assert st["meta"]["files"]["events"]["bad"] == 0
    assert "while b was torn" in [t["title"] for t in st["todos"].values()]
    assert any(r["type"] == "store.repaired" for r in Store.open(str(b)).iter_records("events"))


def test_records_of_a_node_without_a_ref_travel_with_the_clone_that_has_them(tmp_path, monkeypatch):
    """A store that came to b by copying (a committed `.loopx/`, a format-1 store's legacy node):
    its records reach c through b's ref even though their node never synced; nothing is doubled
    when that node syncs later."""
    import shutil

    from loopx.sync import transport as gs

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    clones = []
    for name in ("a", "b", "c"):
        git(tmp_path, "clone", "-q", str(remote), str(tmp_path / name))
        clones.append(tmp_path / name)
    a, b, c = clones
    monkeypatch.chdir(tmp_path)
    assert lx(a, "connect") == 0 and lx(a, "start-goal", "--goal-text", "Ship", "--goal-id", "g1") == 0
    assert lx(a, "todo", "add", "written on a", "--goal-id", "g1") == 0
    shutil.copytree(a / ".loopx", b / ".loopx", ignore=shutil.ignore_patterns("node", "cache", "lock"))
    assert lx(b, "sync") == 0
    assert lx(c, "connect") == 0 and lx(c, "sync") == 0
    assert "written on a" in [t["title"] for t in Store.open(str(c)).load()["todos"].values()]
    for x in (a, b, c, a, b, c):
        assert lx(x, "sync") == 0
    assert len({gs.state_hash(Store.open(str(x))) for x in clones}) == 1
    for x in clones:
        got = [r["id"] for s in ("events", "evidence") for r in Store.open(str(x)).iter_records(s)]
        assert len(got) == len(set(got))


@pytest.mark.parametrize("synced_before", [True, False])
def test_a_push_lost_on_the_way_is_sent_again_once(machines, monkeypatch, synced_before):
    """Machine d's push fails after its commit was made locally (the remote went away mid-sync):
    the next sync sends those records again and a imports each once: after earlier syncs (from the
    remembered position), and on d's very first sync (a full pass, which must not trust the local
    commit that never arrived)."""
    from loopx.sync import transport as gs

    remote, (a, b, c) = machines
    d = remote.parent / "d"
    git(remote.parent, "clone", "-q", str(remote), str(d))
    assert lx(d, "connect") == 0
    if synced_before:
        assert lx(d, "sync") == 0
    assert lx(d, "start-goal", "--goal-text", "d's own", "--goal-id", "gd") == 0
    assert lx(d, "todo", "add", "sent twice?", "--goal-id", "gd") == 0
    real = gs.Git.push

    def gone(self, src, dst, expect):
        raise gs.RemoteUnreachable("the remote went away", "try again")

    monkeypatch.setattr(gs.Git, "push", gone)
    assert lx(d, "sync") == 3
    assert git(d, "rev-parse", "-q", "--verify", "refs/loopx/nodes/" + Store.open(str(d)).node_id(),
               check=False).returncode == 0  # the commit exists here, never reached the remote
    monkeypatch.setattr(gs.Git, "push", real)
    assert lx(d, "sync") == 0 and lx(a, "sync") == 0
    titles = [t["title"] for t in Store.open(str(a)).load()["todos"].values()]
    assert titles.count("sent twice?") == 1
    got = [r["id"] for s in ("events", "evidence") for r in Store.open(str(a)).iter_records(s)]
    assert len(got) == len(set(got))
    assert lx(d, "sync") == 0
    assert gs.state_hash(Store.open(str(a))) == gs.state_hash(Store.open(str(d)))


def test_an_import_cut_short_is_not_imported_twice(machines, monkeypatch):
    """b is killed after appending a's records but before remembering a's head: the next sync sees
    the mark it left, checks the store's ids, and appends nothing twice."""
    from loopx.sync import transport as gs

    remote, (a, b, c) = machines
    assert lx(b, "sync") == 0  # b has seen every node: its next import trusts the chains
    assert lx(a, "todo", "add", "imported once", "--goal-id", "g1") == 0 and lx(a, "sync") == 0
    real = gs.import_lines

    def killed(store, blobs, carriers=None):
        real(store, blobs, carriers)
        raise KeyboardInterrupt  # the process dies here

    monkeypatch.setattr(gs, "import_lines", killed)
    with pytest.raises(KeyboardInterrupt):
        gs.exchange(Store.open(str(b)), gs.project_git(Store.open(str(b)), None))
    monkeypatch.setattr(gs, "import_lines", real)
    assert lx(b, "sync") == 0
    got = [r["id"] for s in ("events", "evidence") for r in Store.open(str(b)).iter_records(s)]
    assert len(got) == len(set(got))
    assert [t["title"] for t in Store.open(str(b)).load()["todos"].values()].count("imported once") == 1
