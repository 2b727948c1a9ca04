"""Shared goals (issue 16): gate decisions, budget spends, lease renewals and approval reservations
linearised through the git remote's ledgers, against a bare remote on disk with real git (and real
processes where two machines race). docs/multi-agent.md, "What is linearised"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env
from loopx.cli import main
from loopx.kernel.storage.store import Store
from test_sync import git, lx, lx_json, machines  # noqa: F401 - the fixture is used by name

PUSH = "git push origin main"


def remote_doc(remote: Path, ref: str, name: str) -> dict:
    p = git(remote, "show", f"{ref}:{name}", check=False)
    return json.loads(p.stdout) if p.returncode == 0 else {}


def state(clone: Path) -> dict:
    return Store.open(str(clone)).load()


@pytest.fixture
def shared(machines, monkeypatch):  # noqa: F811
    """The three machines with g1 shared (its verify command `true`), known shared everywhere."""
    remote, clones = machines
    a = clones[0]
    assert lx(a, "goal", "update", "g1", "--shared", "--verify", "true") == 0
    for c in clones:
        assert lx(c, "sync") == 0
    return remote, clones


def open_gate(clone: Path) -> str:
    assert lx(clone, "gate", "open", "--kind", "merge", "--question", "Push the release?", "--goal-id", "g1",
              agent="codex") == 0
    return max(state(clone)["gates"].values(), key=lambda g: g["seq"])["id"]


def proc(clone: Path, host: str, *args: str, agent: str | None = None) -> subprocess.Popen:
    pre = ["--project", str(clone), "--format", "json"] + (["--agent", agent] if agent else [])
    return subprocess.Popen([sys.executable, "-m", "loopx", *pre, *args], cwd=clone,
                            env=subprocess_env({"LOOPX_HOST": host}), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# ------------------------------------------------------------------ gate decisions
def test_a_gate_decided_on_two_machines_at_once_has_one_winner(shared):
    remote, (a, b, c) = shared
    gid = open_gate(a)
    assert lx(a, "sync") == 0 and lx(b, "sync") == 0
    pa = proc(a, "host-a", "gate", "approve", gid, "--confirm", gid)
    pb = proc(b, "host-b", "gate", "reject", gid, "--note", "not now", "--confirm", gid)
    results = []
    for p, host in ((pa, "host-a"), (pb, "host-b")):
        out, err = p.communicate(timeout=240)
        assert "Traceback" not in err
        results.append((host, json.loads(out)))
    won = [(h, e) for h, e in results if e["exit_code"] == 0]
    lost = [(h, e) for h, e in results if e["exit_code"] != 0]
    assert len(won) == 1 and len(lost) == 1
    winner_host, winner = won[0]
    status = winner["data"]["status"]
    loser = lost[0][1]
    assert loser["exit_code"] == 4 and loser["error"]["code"] == "gate_decided"
    assert loser["error"]["message"].startswith(f"gate {gid} was already {status}")
    ledger = remote_doc(remote, "refs/loopx/ledger/gates", "gates.json")
    assert ledger[gid]["status"] == status and ledger[gid]["host"] == winner_host
    for x in (a, b, c, a, b, c):
        assert lx(x, "sync") == 0
    assert {state(x)["gates"][gid]["status"] for x in (a, b, c)} == {status}
    decisions = [r for r in Store.open(str(c)).iter_records("events") if r["type"] in ("gate.approved", "gate.rejected")]
    assert len(decisions) == 1  # the loser recorded nothing


def test_the_loser_of_a_gate_race_is_told_which_machine_won(shared, capsys, monkeypatch):
    """b decides from a stale copy (its sync imported nothing): the remote's ledger refuses it and
    names the machine that decided first."""
    from loopx.sync import transport as gs

    remote, (a, b, c) = shared
    gid = open_gate(a)
    assert lx(a, "sync") == 0 and lx(b, "sync") == 0
    monkeypatch.setenv("LOOPX_HOST", "host-a")
    assert lx(a, "gate", "approve", gid, "--confirm", gid) == 0
    monkeypatch.setattr(gs, "import_lines", lambda store, blobs, carriers=None: (0, False))  # b imports nothing
    monkeypatch.setenv("LOOPX_HOST", "host-b")
    env = lx_json(b, "gate", "reject", gid, "--note", "no", "--confirm", gid, capsys=capsys)
    assert env["exit_code"] == 4 and env["error"]["code"] == "gate_decided"
    assert env["error"]["message"].startswith(f"gate {gid} was already approved on host-a")
    assert state(b)["gates"][gid]["status"] == "pending"  # nothing recorded on b


def test_a_shared_gate_decision_waits_for_an_unreachable_remote(shared, capsys):
    remote, (a, b, c) = shared
    gid = open_gate(a)
    git(a, "remote", "set-url", "origin", str(remote) + "-gone")
    env = lx_json(a, "gate", "approve", gid, "--confirm", gid, capsys=capsys)
    assert env["exit_code"] == 3 and env["error"]["code"] == "remote_unreachable"
    assert "shared goal g1" in env["error"]["message"] and "nothing was recorded" in env["error"]["hint"]
    assert state(a)["gates"][gid]["status"] == "pending"
    assert lx(a, "todo", "add", "local work goes on", "--goal-id", "g1") == 0


def test_a_gate_of_a_goal_not_shared_is_decided_locally(machines, capsys):  # noqa: F811
    remote, (a, b, c) = machines
    gid = open_gate(a)
    git(a, "remote", "set-url", "origin", str(remote) + "-gone")
    assert lx(a, "gate", "approve", gid, "--confirm", gid) == 0
    assert state(a)["gates"][gid]["status"] == "approved"


# ------------------------------------------------------------------ spends
def verified_run(clone: Path, agent: str) -> str:
    assert lx(clone, "next", "--sync", "--goal-id", "g1", agent=agent) == 0
    rid = next(r["id"] for r in state(clone)["runs"].values() if r["agent"] == f"agent:{agent}" and not r["finished"])
    assert lx(clone, "turn", "finish", "--run", rid, "--result", "progress", "--verify", agent=agent) == 0
    return rid


def test_the_last_slot_is_spent_once_across_machines(shared, capsys):
    remote, (a, b, c) = shared
    assert lx(a, "quota", "set", "--goal-id", "g1", "--slots", "1") == 0
    assert lx(a, "sync") == 0 and lx(b, "sync") == 0
    ra, rb = verified_run(a, "a1"), verified_run(b, "b1")
    pa = proc(a, "host-a", "quota", "spend-slot", "--run", ra)
    pb = proc(b, "host-b", "quota", "spend-slot", "--run", rb)
    out = [json.loads(p.communicate(timeout=240)[0]) for p in (pa, pb)]
    spent = [e for e in out if e["data"]["spent"]]
    refused = [e for e in out if not e["data"]["spent"]]
    assert len(spent) == 1 and len(refused) == 1
    assert refused[0]["exit_code"] == 1 and refused[0]["data"]["reason"] == "budget_exhausted"
    assert "1 of 1 slots of shared goal g1 already spent" in refused[0]["data"]["message"]
    ledger = remote_doc(remote, "refs/loopx/ledger/spends", "spends.json")
    assert [e["run"] for e in ledger["g1"]] == [spent[0]["data"]["run_id"]]
    for x in (a, b, c, a, b, c):
        assert lx(x, "sync") == 0
    for x in (a, b, c):
        assert sum(e[1] for e in state(x)["spends"]["g1"]) == 1


def test_a_spend_made_offline_is_tentative_until_the_next_sync(shared, capsys):
    remote, (a, b, c) = shared
    ra = verified_run(a, "a1")
    git(a, "remote", "set-url", "origin", str(remote) + "-gone")
    env = lx_json(a, "quota", "spend-slot", "--run", ra, capsys=capsys)
    assert env["exit_code"] == 0 and env["data"]["spent"] and env["data"]["tentative"] is True
    env = lx_json(a, "status", capsys=capsys)
    assert env["data"]["sync"]["tentative_spends"] == [ra]
    capsys.readouterr()
    assert main(["--project", str(a), "status"]) == 0
    assert f"the slot spent on {ra} is charged on this clone only" in capsys.readouterr().out
    git(a, "remote", "set-url", "origin", str(remote))
    env = lx_json(a, "sync", capsys=capsys)
    assert env["exit_code"] == 0 and env["data"]["flushed"]["spends"] == 1
    assert [e["run"] for e in remote_doc(remote, "refs/loopx/ledger/spends", "spends.json")["g1"]] == [ra]
    env = lx_json(a, "status", capsys=capsys)
    assert env["data"]["sync"]["tentative_spends"] == []


# ------------------------------------------------------------------ lease renewals
def test_a_lease_renewal_goes_through_the_remote(shared, capsys, monkeypatch):
    remote, (a, b, c) = shared
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:00:00Z")
    monkeypatch.setenv("LOOPX_HOST", "host-a")
    env = lx_json(a, "next", "--sync", "--goal-id", "g1", "--lease", "10m", capsys=capsys, agent="a1")
    rid, tid = env["data"]["run_id"], env["data"]["todo_id"]
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:08:00Z")
    env = lx_json(a, "turn", "renew", "--run", rid, "--lease", "10m", capsys=capsys, agent="a1")
    assert env["exit_code"] == 0 and env["data"]["lease_until"] == "2030-01-01T08:18:00Z"
    assert remote_doc(remote, "refs/loopx/claims", "claims.json")[tid]["until"] == "2030-01-01T08:18:00Z"
    # at 08:15 the renewed entry still holds the todo for a: b's claim takes another one
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:15:00Z")
    monkeypatch.setenv("LOOPX_HOST", "host-b")
    env = lx_json(b, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="b1")
    assert env["exit_code"] == 0 and env["data"]["todo_id"] != tid


def test_a_lease_lost_on_the_remote_is_not_renewed(shared, capsys, monkeypatch):
    """a's lease lapsed and b claimed the todo through the remote: a's renewal is refused and
    names b's machine; nothing is renewed on a."""
    from loopx.sync import transport as gs

    remote, (a, b, c) = shared
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:00:00Z")
    monkeypatch.setenv("LOOPX_HOST", "host-a")
    env = lx_json(a, "next", "--sync", "--goal-id", "g1", "--lease", "10m", capsys=capsys, agent="a1")
    rid, tid = env["data"]["run_id"], env["data"]["todo_id"]
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:01:00Z")
    monkeypatch.setenv("LOOPX_HOST", "host-b")
    sb = Store.open(str(b))
    # b sees a's entry while it is live: a lease b met only after it ended would count for its
    # whole length from then on (b's clock might be the one ahead: loopx.sync.skew)
    assert gs.claim(sb, gs.project_git(sb, None), lambda held: None, "agent:b1", "2030-01-01T09:00:00Z")["todo_id"] is None
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:20:00Z")
    got = gs.claim(sb, gs.project_git(sb, None), lambda held: None if tid in held else tid, "agent:b1",
                   "2030-01-01T09:00:00Z")
    assert got["todo_id"] == tid
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:20:30Z")
    monkeypatch.setenv("LOOPX_HOST", "host-a")
    before = state(a)["runs"][rid]["lease_until"]
    env = lx_json(a, "turn", "renew", "--run", rid, capsys=capsys, agent="a1")
    assert env["exit_code"] == 4 and env["error"]["code"] == "lease_lost"
    assert env["error"]["message"].startswith(f"{tid} was claimed on host-b 30 s earlier")
    assert state(a)["runs"][rid]["lease_until"] == before


def test_a_renewal_offline_is_tentative_and_pushed_by_the_next_sync(shared, capsys, monkeypatch):
    remote, (a, b, c) = shared
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:00:00Z")
    env = lx_json(a, "next", "--sync", "--goal-id", "g1", "--lease", "10m", capsys=capsys, agent="a1")
    rid, tid = env["data"]["run_id"], env["data"]["todo_id"]
    git(a, "remote", "set-url", "origin", str(remote) + "-gone")
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T08:05:00Z")
    env = lx_json(a, "turn", "renew", "--run", rid, "--lease", "30m", capsys=capsys, agent="a1")
    assert env["exit_code"] == 0 and env["data"]["tentative"] is True
    assert lx_json(a, "status", capsys=capsys)["data"]["sync"]["tentative_renewals"] == [tid]
    git(a, "remote", "set-url", "origin", str(remote))
    env = lx_json(a, "sync", capsys=capsys)
    assert env["data"]["flushed"]["renewals"] == 1
    assert remote_doc(remote, "refs/loopx/claims", "claims.json")[tid]["until"] == "2030-01-01T08:35:00Z"


# ------------------------------------------------------------------ approval reservations
def test_a_single_use_approval_is_reserved_for_one_run_and_only_its_machine_may_use_it(shared, capsys, monkeypatch):
    from loopx.guard import verdicts

    remote, (a, b, c) = shared
    gid = open_gate(a)
    assert lx(a, "gate", "approve", gid, "--confirm", gid) == 0
    for x in (a, b):
        assert lx(x, "sync") == 0

    def verdict(clone):
        return verdicts.evaluate(Store.open(str(clone)).load(), commands=[PUSH], project_dir=str(clone))

    assert not verdict(a)["allow"] and not verdict(b)["allow"]  # approved but reserved for no run yet
    assert "not reserved for a run on this machine" in verdict(b)["reason"]
    pa = proc(a, "host-a", "next", "--sync", "--goal-id", "g1", agent="a1")
    pb = proc(b, "host-b", "next", "--sync", "--goal-id", "g1", agent="b1")
    out = {x.name: json.loads(p.communicate(timeout=240)[0]) for x, p in ((a, pa), (b, pb))}
    assert all(e["exit_code"] == 0 for e in out.values())
    holders = [n for n, e in out.items() if e["data"].get("reserved") == [gid]]
    assert len(holders) == 1
    holder, other = (a, b) if holders == ["a"] else (b, a)
    ledger = remote_doc(remote, "refs/loopx/ledger/reservations", "reservations.json")
    assert ledger[gid]["run"] == out[holder.name]["data"]["run_id"]
    for x in (holder, other, holder, other):
        assert lx(x, "sync") == 0
    assert verdict(holder)["allow"]
    denied = verdict(other)
    assert not denied["allow"] and f"reserved for run {ledger[gid]['run']} on host-{holder.name}" in denied["reason"]
    # the packet of the run that holds it lists the approval as usable
    assert out[holder.name]["data"]["packet"]["protected"][0]["gate"] == "approved"


def test_a_reservation_frees_when_its_run_closes(shared, capsys, monkeypatch):
    from loopx.guard import verdicts

    remote, (a, b, c) = shared
    gid = open_gate(a)
    assert lx(a, "gate", "approve", gid, "--confirm", gid) == 0
    env = lx_json(a, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="a1")
    assert env["data"]["reserved"] == [gid]
    assert lx(a, "turn", "finish", "--run", env["data"]["run_id"], "--result", "no_progress", agent="a1") == 0
    assert lx(a, "sync") == 0 and lx(b, "sync") == 0
    env = lx_json(b, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="b1")
    assert env["data"]["reserved"] == [gid]
    assert verdicts.evaluate(Store.open(str(b)).load(), commands=[PUSH], project_dir=str(b))["allow"]


def test_a_reservation_reads_the_live_view_unless_it_left_a_candidate_out(shared, capsys, monkeypatch):
    """Every turn of a shared goal reserves its approvals (issue 26: no full read per turn). The
    view keeps the newest usable approvals per kind and counts the rest; when it counted some, an
    older one may be the free one, and the full state answers."""
    from loopx.kernel.storage import fold
    from loopx.sync import shared as sh

    remote, (a, b, c) = shared
    seen: list[bool] = []
    real = sh._reserve
    monkeypatch.setattr(sh, "_reserve", lambda store, git, actor, run_id, state: (
        seen.append(fold.is_live(state)), real(store, git, actor, run_id, state))[1])
    gid = open_gate(a)
    assert lx(a, "gate", "approve", gid, "--confirm", gid) == 0
    env = lx_json(a, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="a1")
    assert env["data"]["reserved"] == [gid] and seen == [True]
    assert lx(a, "turn", "finish", "--run", env["data"]["run_id"], "--result", "no_progress", agent="a1") == 0
    assert lx(a, "sync") == 0 and lx(b, "sync") == 0
    seen.clear()

    def counted(store, git, actor, run_id, state):  # a view that counted older usable approvals
        seen.append(fold.is_live(state))
        if fold.is_live(state):
            state = dict(state, approvals_left={"g1": {"merge": 1}})
        return real(store, git, actor, run_id, state)

    monkeypatch.setattr(sh, "_reserve", counted)
    env = lx_json(b, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="b1")
    assert env["data"].get("reserved") == [gid] and seen == [True, False], env["data"]["decision"]  # asked the view, then the full state


def test_the_hooks_check_a_reservation_locally(shared, capsys, tmp_path):
    """The real pre-tool hook (a process, with a git on PATH that logs every call): on the machine
    whose run holds the reservation the push is allowed once; on the other it is denied; neither
    hook fetches or pushes."""
    import os

    from test_hooks import deny_reason, hook, payload

    remote, (a, b, c) = shared
    gid = open_gate(a)
    assert lx(a, "gate", "approve", gid, "--confirm", gid) == 0
    env = lx_json(a, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="a1")
    assert env["data"]["reserved"] == [gid]
    assert lx(b, "sync") == 0
    real = subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "git-calls"
    (fake / "git").write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
    (fake / "git").chmod(0o755)
    path = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    reason = deny_reason(hook(b, "pre-tool", "claude-code", payload("claude-code", "pre_tool_bash", b), env=path))
    assert f"reserved for run {env['data']['run_id']}" in reason
    r = hook(a, "pre-tool", "claude-code", payload("claude-code", "pre_tool_bash", a), env=path)
    assert r.code == 0 and r.out == "", r.out
    assert state(a)["gates"][gid]["used"]["count"] == 1
    assert "once" in deny_reason(hook(a, "pre-tool", "claude-code", payload("claude-code", "pre_tool_bash", a),
                                      env=path))  # used up
    calls = log.read_text() if log.exists() else ""
    assert not any(word in calls for word in ("fetch", "push --", "ls-remote", "push -q"))


def test_a_finished_runs_remote_claim_is_dropped_by_the_next_claim(shared, capsys, monkeypatch):
    remote, (a, b, c) = shared
    monkeypatch.setenv("LOOPX_HOST", "host-a")
    first = lx_json(a, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="a1")["data"]
    assert lx(a, "turn", "finish", "--run", first["run_id"], "--result", "progress", agent="a1") == 0
    assert first["todo_id"] in remote_doc(remote, "refs/loopx/claims", "claims.json")  # until its lease ends...
    second = lx_json(a, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="a2")["data"]
    held = remote_doc(remote, "refs/loopx/claims", "claims.json")
    assert sorted(held) == [second["todo_id"]]  # ...or this machine's next claim


def test_two_approvals_of_one_kind_go_to_two_runs(shared, capsys):
    from loopx.guard import verdicts

    remote, (a, b, c) = shared
    g1, g2 = open_gate(a), open_gate(a)
    for gid in (g1, g2):
        assert lx(a, "gate", "approve", gid, "--confirm", gid) == 0
    ra = lx_json(a, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="a1")["data"]
    rb = lx_json(b, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="b1")["data"]
    assert ra["reserved"] == [g2] and rb["reserved"] == [g1]  # the newest first, one per kind and run
    for x in (a, b):
        assert lx(x, "sync") == 0
        assert verdicts.evaluate(Store.open(str(x)).load(), commands=[PUSH], project_dir=str(x))["allow"]


def test_a_damaged_ledger_is_a_clean_error_never_overwritten(shared, capsys, tmp_path):
    remote, (a, b, c) = shared
    work = tmp_path / "edit"
    git(tmp_path, "init", "-q", str(work))
    (work / "claims.json").write_text("[not json")
    git(work, "add", "claims.json")
    git(work, "commit", "-q", "-m", "hand edit")
    git(work, "push", "-q", "-f", str(remote), "HEAD:refs/loopx/claims")
    env = lx_json(b, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="b1")
    assert env["exit_code"] == 3 and env["error"]["code"] == "ledger_damaged"
    assert "refs/loopx/claims" in env["error"]["message"] and "git push origin :refs/loopx/claims" in env["error"]["hint"]
    assert git(remote, "show", "refs/loopx/claims:claims.json").stdout == "[not json"  # left as it was
    assert lx(c, "sync") == 0  # a plain sync still works (c's copy of the ledger is damaged too)
    git(b, "push", "-q", "origin", ":refs/loopx/claims")  # what the hint says
    env = lx_json(b, "next", "--sync", "--goal-id", "g1", capsys=capsys, agent="b1")
    assert env["exit_code"] == 0 and env["data"]["started"]
    assert lx(c, "next", "--sync", "--goal-id", "g1", agent="c1") == 0  # c's damaged copy is replaced too


def test_loopx_run_on_a_shared_goal_claims_and_spends_through_the_remote(shared, capsys):
    from conftest import run_loopx

    remote, (a, b, c) = shared
    r = run_loopx(["run", "--agent-cmd", "touch done.txt", "--once", "--json"], cwd=a, env={"LOOPX_HOST": "host-a"})
    assert r.code == 0, r.err
    t = json.loads(r.out)["data"]["turns"][0]
    assert t["verified"] and t["slots"] == 1
    claims = remote_doc(remote, "refs/loopx/claims", "claims.json")
    assert claims[t["todo_id"]]["host"] == "host-a"
    spends = remote_doc(remote, "refs/loopx/ledger/spends", "spends.json")
    assert [(e["run"], e["host"]) for e in spends["g1"]] == [(t["run_id"], "host-a")]
    assert lx(b, "sync") == 0
    assert [e[2] for e in state(b)["spends"]["g1"]] == [t["run_id"]]
