"""The turn lifecycle (docs/architecture.md#the-governed-loop): start a turn, finish it, spend budget on it.

- ``next_turn`` asks should-run; on ``run`` it claims the todo with a lease and opens a run
  (``todo.claimed`` + ``run.started``) in one compare-and-append transaction, then returns the
  turn packet (see ``loopx.kernel.policy.packet``).
- ``finish`` closes the run (``run.finished``), optionally running the verify command first and
  recording it as evidence; the todo's claim is released, or the todo is completed when the
  result is ``completion`` and evidence backs it.
- ``spend_slot`` charges the budget (``quota.spent``) for a finished, verified run, once per run.
- ``renew`` extends a run's lease (and its todo claim); ``reap_drafts`` closes runs whose lease
  expired as ``failed`` and releases their claims; every writer in this module calls it.

All functions take a Store and an actor (``agent:<name>`` or ``human:<name>``) and return
JSON-able dicts; errors are LoopxError subclasses (UsageError 2, Conflict 4, StoreBusy 4).
"""

from __future__ import annotations

import os

from loopx.errors import Conflict, UsageError
from loopx.kernel.read import budget, fingerprint, queries, turnscope, validate
from loopx.kernel.storage import actors, clock, fold, ids, machines
from loopx.kernel.storage.clock import timedelta
from loopx.kernel.storage.store import Draft, Store
from loopx.kernel.write import runs

VERIFY_TIMEOUT = 1800.0


def _resume(store: Store, actor: str, goal_id: str | None, driven: bool) -> dict | None:
    """The caller's own run that is still open and within its lease, as ``next_turn`` returns it
    (``resumed`` True), or None. Asking again for work you hold is not a new turn: closing the held
    run as failed would count a no-progress turn and could stall the goal for everyone."""
    return _resume_and_view(store, actor, goal_id, driven)[0]


def _resume_and_view(store: Store, actor: str, goal_id: str | None, driven: bool) -> tuple[dict | None, dict]:
    """``_resume``'s answer and the live view it was looked for in (``next`` decides on it too)."""
    state = store.load(view="live")
    if not _open_mine(state, actor, goal_id, clock.now_iso()):  # the common case: no reader's prune (as_saved)
        return None, state  # for an answer that cannot depend on it (a live view keeps every open run)
    return store.read(lambda st: _resume_on(st, actor, goal_id, driven), state), state


def _open_mine(state: dict, actor: str, goal_id: str | None, now_iso: str) -> list[dict]:
    """The caller's runs on this clone that are open and within their lease (of ``goal_id``)."""
    return [r for r in queries.open_runs(state) if machines.runs_here(state, r, actor)
            and queries.lease_live(r, now_iso) and (goal_id is None or r["goal"] == goal_id)]


def _resume_on(state: dict, actor: str, goal_id: str | None, driven: bool) -> dict | None:
    from loopx.kernel.policy import packet

    now = clock.now()
    mine = _open_mine(state, actor, goal_id, clock.iso(now))
    if not mine:
        return None
    r = max(mine, key=lambda x: x.get("seq", 0))
    t = queries.run_todo(state, r)  # closed meanwhile and left out of the view: Store.read asks the full state
    fence = t["claim"]["fence"] if t and machines.holds(state, t.get("claim"), actor) else None
    p = packet.build(state, r["goal"], r.get("todo"), r["id"], r["lease_until"], actor, now, r.get("mode"), driven=driven)
    return {"started": True, "resumed": True, "decision": {"decision": "run", "reason": "resumed",
                                                           "message": f"your run {r['id']} is still open",
                                                           "goal_id": r["goal"], "todo_id": r.get("todo")},
            "goal_id": r["goal"], "todo_id": r.get("todo"), "run_id": r["id"], "lease_until": r["lease_until"],
            "fence": fence, "mode": r.get("mode"), "packet": p, "packet_text": packet.render(p)}


def hide_claims(state: dict, held: dict) -> dict:
    """Mark each todo in ``held`` ({todo_id: entry of refs/loopx/claims}: claimed on another
    machine) as claimed, in a copy of ``state`` for one evaluation (the state itself is left
    alone: it is saved as the live view), so decisions skip it. Returns the copy."""
    state = {**state, "todos": type(state["todos"])(state["todos"])}  # a live view's stays a fold.Partial
    until_now = clock.iso(clock.now() + timedelta(seconds=1))
    for tid, c in (held or {}).items():
        # a todo this state does not show (closed here and left out of the view, or not synced
        # yet) is not one a decision could offer: nothing to hide on either state
        t = fold.held(state["todos"], tid)
        mine = (t or {}).get("claim")  # a claim here whose lease ends before the remote entry's: the remote one holds
        if t is not None and (not mine or str(mine.get("lease_until")) < str(c.get("until"))
                              or str(mine.get("lease_until")) < until_now):
            t = state["todos"][tid] = dict(t)
            # ``held`` is what the ledger judged live (sync.skew: a clock ahead does not end a lease
            # early), so the copy's lease is live on this clock too
            t["claim"] = {"holder": f"{c.get('agent')}@{c.get('host')}", "fence": 0, "remote": True,
                          "lease_until": max(str(c.get("until")), until_now)}
            t["status"] = "claimed"
    return state


def pick_todo(store: Store, actor: str, held: dict, *, goal_id: str | None = None) -> dict:
    """The decision ``next`` would take now with the todos in ``held`` claimed elsewhere (no write)."""
    from loopx.kernel.policy import decide

    agent = actors.agent_name(actor)
    return store.read(lambda state: decide.evaluate(hide_claims(state, held), clock.now(), goal_id=goal_id,
                                                    agent=agent, caller_path=decide.caller_path()))


def next_turn(store: Store, actor: str, *, goal_id: str | None = None, lease=None,
              dry_run: bool = False, driven: bool = False, held: dict | None = None,
              want: str | None = None) -> dict:
    """Start the next turn for ``actor``.

    Returns ``{"started": bool, "decision": <should-run dict>, "goal_id", "todo_id", "run_id",
    "lease_until", "fence", "mode", "packet": dict|None, "packet_text": str|None}``. When the
    decision is not ``run`` nothing is claimed (``started`` False, ids None but ``goal_id``).
    ``dry_run`` builds the packet without writing anything (``run_id`` is ``run-dry-run``);
    ``driven`` marks a turn run by ``loopx run`` (the packet tells the agent to just exit).
    The decision is evaluated again under the store lock; when another writer changed the answer
    meanwhile (say, took the last todo), that new decision is returned with ``started`` False.
    ``held`` ({todo_id: claim entry}) are todos claimed on other machines (``loopx next --sync``),
    skipped; ``want`` is the todo this turn claimed through the remote: any other answer is
    returned with ``started`` False."""
    from loopx.kernel.policy import decide, packet  # the rules: `next` needs them, `turn finish` does not

    agent = actors.agent_name(actor)
    secs = validate.lease_seconds(lease)
    resumed, seen = (None, None) if dry_run else _resume_and_view(store, actor, goal_id, driven)
    if resumed is not None:
        return resumed
    # a `run` answer is recorded with the claim, in the claim's transaction (one lock, one write)
    git_once = _git_once(store.project_dir)  # the decision, the fingerprint and the scope share one `git status`
    read_at: dict = {}  # where the files stood when the decision was evaluated (not for a cached answer)
    d = decide.should_run(store, goal_id=goal_id, agent=agent, record=not dry_run, actor=actor, defer_run=True,
                          git=lambda: git_once()[0], on_decided=lambda _st, state, _d: read_at.update(at=_files_at(state)),
                          state=seen if seen is not None and fold.is_live(seen) else None)
    deferred = d.pop("record_deferred", False)
    out: dict = {"started": False, "decision": d, "goal_id": d.get("goal_id"), "todo_id": None, "run_id": None,
                 "lease_until": None, "fence": None, "mode": d.get("mode"), "packet": None, "packet_text": None}
    if d["decision"] != "run":
        return out
    git = git_once()[0]
    gid = d["goal_id"]
    if dry_run:
        now = clock.now()
        until = clock.iso(now + timedelta(seconds=secs))
        p = store.read(lambda state: packet.build(state, gid, d.get("todo_id"), "run-dry-run", until, actor, now,
                                                  d.get("mode"), driven=driven))
        out.update(todo_id=d.get("todo_id"), run_id="run-dry-run", lease_until=until, packet=p,
                   packet_text=packet.render(p))
        return out

    scope_memo: dict = {}

    def plan(state, now):
        drafts = runs.reap_drafts(state, now)
        recorded = decide.decision_draft(state, d) if deferred else None
        seen = state
        if recorded is not None:
            drafts.append(recorded)
            # evaluate as if it were written already (as when it had a transaction of its own): the
            # scheduler hint counts from the recorded decision
            seen = dict(state, decisions={**state["decisions"],
                                          recorded.goal or "*": dict(recorded.data, ts=clock.iso(now))})
        if not held and read_at.get("at") == _files_at(state):
            # nothing was written since the decision was evaluated (every writer appends under this
            # lock): the same files give the same answer, and the todo it offers is still free
            again = {k: v for k, v in d.items() if k not in ("recorded", "cached")}
        else:
            again = decide.evaluate(hide_claims(seen, held) if held else seen, now, goal_id=gid, agent=agent,
                                    caller_path=decide.caller_path(),
                                    fingerprint=lambda g: fingerprint.combine(fingerprint.state_part(state, g), git))
        lost = _lost_race(state, again, gid, want)
        if lost is not None:  # another writer got there first: report the new answer, start nothing
            out.update(lost, lost_race=True)
            return drafts
        tid = again.get("todo_id")
        scope = state["goals"][gid].get("scope")
        if scope_memo.get("scope", False) != scope:  # a plan run again (on the full state) asks git once
            scope_memo.update(scope=scope, begun=turnscope.start(store.project_dir, scope, git_once()[1]))
        until = clock.iso(now + timedelta(seconds=secs))
        drafts += _claim_drafts(state, actor, gid, tid, until, now, out)
        rid = ids.new_id("run", state["runs"])
        data = {"run_id": rid, "todo_id": tid, "agent": actor, "lease_until": until,
                "fingerprint": fingerprint.combine(fingerprint.state_part(state, gid), git),
                "mode": again.get("mode") or "work"}
        if scope_memo["begun"] is not None:  # scope after every turn: what the run starts from
            data["scope_start"] = scope_memo["begun"]
        drafts.append(Draft("run.started", gid, data))
        out.update(todo_id=tid, run_id=rid, lease_until=until, mode=again.get("mode") or "work", decision=again)
        return drafts

    # the plan reaps itself; the view the decision was made on stands for the state under the lock
    # while nothing was appended since (Store.transact's ``seen``)
    records, state = store.transact(plan, actor=actor, reap=False, seen=seen)
    if out.pop("lost_race", False):
        return out
    for rec in records:
        if rec["type"] == "todo.claimed":
            out["fence"] = rec["seq"]
    out["started"] = True
    p = store.read(lambda st: packet.build(st, gid, out["todo_id"], out["run_id"], out["lease_until"], actor,
                                           clock.now(), out["mode"], fence=out["fence"], driven=driven), state)
    out.update(packet=p, packet_text=packet.render(p))
    return out


def _files_at(state: dict) -> tuple:
    """Where each stream of the store stood when ``state`` was read (segment, offset, lines)."""
    return tuple((name, m.get("segments"), m.get("offset"), m.get("lines"))
                 for name, m in sorted(state["meta"]["files"].items()))


def _git_once(project_dir: str | None):
    """A callable giving ``fingerprint.git_facts(project_dir)`` (git part, status listing), read on
    the first call only, with the folder's own git dirs (``gitcli``'s pinned mode)."""
    memo: list = []

    def get() -> tuple[str, bytes | None]:
        if not memo:
            memo.append(_git_facts(project_dir))
        return memo[0]
    return get


def _git_facts(project_dir: str | None) -> tuple[str, bytes | None]:
    """``fingerprint.git_facts`` pinned to the folder's own git dirs (an agent may write in ``.git``)."""
    return fingerprint.git_facts(project_dir, pinned=True)


def _lost_race(state: dict, again: dict, gid: str, want: str | None) -> dict | None:
    """What ``next`` reports instead of starting a turn when the decision under the lock
    (``again``) is no longer a run of the todo it can start (``out`` fields), else None."""
    if again["decision"] != "run":  # another writer got there first: report the new answer
        return {"decision": again, "mode": again.get("mode")}
    if want and again.get("todo_id") != want:  # a local writer changed the answer since the remote claim
        return {"decision": {**again, "decision": "wait", "reason": "claim_moved", "todo_id": want,
                             "message": f"{want} was claimed through the remote but this clone now "
                                        f"offers {again.get('todo_id')}; nothing was started",
                             "hint": "run `loopx next --sync` again"}, "mode": None}
    tid = again.get("todo_id")
    prev = previous_agent_alive(state, tid) if tid else None
    if prev is None:
        return None
    p = prev["process"]  # never two agents on one todo: the earlier one still runs
    return {"decision": {
        "decision": "wait", "reason": "agent_alive", "goal_id": gid, "todo_id": tid, "run_id": prev["id"],
        "message": (f"the agent of {prev['id']} on {tid} is still running here (process group {p['pgid']}, "
                    f"run {'closed when its lease lapsed' if prev['finished'] else 'still open'}); "
                    "a second turn would work on top of it"),
        "hint": f"stop it (`kill -TERM -{p['pgid']}`) or wait for it to end, then run again"}, "mode": None}


def _claim_drafts(state: dict, actor: str, gid: str, tid: str | None, until: str, now, out: dict) -> list:
    """The drafts that give ``actor`` the turn: the same agent's other open runs here closed as
    superseded, and the todo claimed (or its claim renewed, ``out["fence"]`` kept)."""
    drafts = []
    now_iso = clock.iso(now)
    for r in queries.open_runs(state, gid):
        if machines.runs_here(state, r, actor) and queries.lease_live(r, now_iso):
            drafts.append(Draft("run.finished", gid, {"run_id": r["id"], "result": "failed", "verified": False,
                                                      "evidence": [], "fingerprint": None,
                                                      "note": "superseded by a new turn of the same agent"}))
    if tid:
        c = state["todos"][tid].get("claim")
        if machines.holds(state, c, actor) and queries.lease_live(c, now_iso):
            drafts.append(Draft("todo.renewed", gid, {"todo_id": tid, "lease_until": until}))
            out["fence"] = c["fence"]
        else:
            drafts.append(Draft("todo.claimed", gid, {"todo_id": tid, "holder": actor, "lease_until": until}))
    return drafts


def verify_command(state: dict, run: dict) -> str | None:
    """The todo's verify command, else the goal's, else None."""
    t = queries.run_todo(state, run)
    if t and t.get("verify"):
        return t["verify"]
    return (state["goals"].get(run["goal"]) or {}).get("verify")


def run_verify(store: Store, actor: str, run: dict, command: str, timeout: float | None = None,
               cwd: str | None = None) -> dict:
    """See loopx.kernel.write.checks.run_verify (kept here for the callers of the turn API)."""
    from loopx.kernel.write import checks

    return checks.run_verify(store, actor, run, command, VERIFY_TIMEOUT if timeout is None else timeout, cwd=cwd)


def finish(store: Store, actor: str, run_id: str, result: str, *, evidence=(), verify: bool = False,
           note: str | None = None, verify_timeout: float | None = None, verified_by: dict | None = None,
           report: dict | None = None, workdir: str | None = None, seen: dict | None = None) -> dict:
    """Close a run with ``result`` (progress|completion|no_progress|failed|blocked).

    ``verify`` runs the todo's (else the goal's) verify command first and records it as evidence;
    ``verified`` is True only when it exits 0. A ``completion`` backed by evidence (a passing
    verify, or cited evidence when no verify ran) completes the todo; otherwise the claim is
    released. ``verified_by`` passes a ``run_verify`` result obtained earlier (the runner verifies
    before it picks the result). ``report`` (the runner's measurement: usage, changes, host,
    permission_mode, wall_time, setup_error; see ``report_data``) is recorded on ``run.finished``. Finishing an already finished run with the same result returns it (``repeat``).
    Files the turn changed outside the goal's scope (``workdir``, default the project directory:
    loopx.kernel.read.turnscope) are recorded as ``out_of_scope``; such a turn is never verified
    and its completion does not close the todo (a human looks first).
    Returns {run_id, goal_id, todo_id, result, verified, evidence, verify, todo_status, repeat,
    warnings, out_of_scope}. Raises Conflict for a run finished differently, owned by another
    agent, or whose todo another agent claimed since (``claimed_by_other``, before any verify).
    ``seen``: the live view the caller read moments ago (``close``), used instead of reading it again."""
    validate.choice(result, validate.RESULTS, "result")
    note = validate.text(note, "note", required=False, limit=2000)
    state, run = load_run(store, run_id, seen)
    _may_finish(state, run, actor, result)
    if run["finished"] is None:  # checks before work: never verify for a turn whose claim moved on
        _claim_kept(state, run)
    check = verified_by
    if verify and check is None and run["finished"] is None:
        cmd = verify_command(state, run)
        if not cmd:
            raise UsageError(f"goal {run['goal']} has no verify command",
                             "set the goal's verify command, or finish without verify", code="no_verify_command",
                             details={"goal": run["goal"], "field": "verify"})
        check = run_verify(store, actor, run, cmd, verify_timeout)
    git, listing = _git_facts(store.project_dir)  # one `git status` for the fingerprint and the scope check
    same = workdir is None or os.path.realpath(workdir) == os.path.realpath(store.project_dir or "")
    stray = [] if run["finished"] is not None else turnscope.outside(
        workdir or store.project_dir, (state["goals"].get(run["goal"]) or {}).get("scope"), run.get("scope_start"),
        listing if same else None)
    out: dict = {"warnings": [], "out_of_scope": stray}

    def plan(state, now):
        r = queries.resolve_run(state, run["id"])
        if r["finished"] is not None:
            _may_finish(state, r, actor, result)
            out.update(_finished_view(state, r), repeat=True)
            return []
        _claim_kept(state, r)
        drafts = runs.reap_drafts(state, now, skip=r["id"])
        evs = [queries.resolve_evidence(state, e)["id"] for e in evidence or ()]
        for e in evs:
            if state["evidence"][e]["goal"] != r["goal"]:
                raise UsageError(f"evidence {e} belongs to goal {state['evidence'][e]['goal']}",
                                 "cite evidence of this run's goal")
        if check:
            evs.append(check["evidence_id"])
        # "verified" means verified progress: a passing check of a run that made none is not it
        verified = bool(check and check["passed"]) and result in ("progress", "completion") and not stray
        backed, why = verified, None
        t = queries.run_todo(state, r)
        if check is None and evs and t:  # cited evidence only: the rules of `loopx todo done`
            from loopx.kernel.read import proof

            verdict = proof.judge(state, t, evs, r["id"])
            backed, why = verdict["ok"], verdict["message"]
        elif check is None and evs:
            backed = True
        if stray:  # outside the scope: never a verified completion without a human
            backed = False
            out["warnings"].append(f"the turn changed {len(stray)} file(s) outside the goal's scope "
                                   f"({', '.join(stray[:5])}): not verified, the todo stays open for a human")
        if why and result == "completion" and not backed:
            out["warnings"].append(why)
        overrides, todo_status = _todo_drafts(state, r, result, backed, evs, drafts, out)
        fp = fingerprint.combine(fingerprint.state_part(state, r["goal"], overrides), git)
        data = {"run_id": r["id"], "result": result, "verified": verified, "evidence": evs, "fingerprint": fp,
                "note": note, **report_data(report)}
        if stray:
            data["out_of_scope"] = stray
        if check and check.get("setup_error") and not data.get("setup_error"):
            data["setup_error"] = check["setup_error"]
        drafts.append(Draft("run.finished", r["goal"], data))
        out.update(run_id=r["id"], goal_id=r["goal"], todo_id=r.get("todo"), result=result, verified=verified,
                   evidence=evs, verify=check, todo_status=todo_status, repeat=False, fingerprint=fp)
        return drafts

    # the plan reaps every other expired run; the view the run was read from stands for the state
    # under the lock while nothing was appended since (a verify wrote its evidence: read again)
    store.transact(plan, actor=actor, reap=False, seen=state)
    return out


def _claim_kept(state: dict, run: dict) -> None:
    """Raise Conflict (``claimed_by_other``) when the run's todo is now claimed by another agent
    (the run's lease lapsed and the todo was taken over): checked before any verify command runs."""
    t = queries.run_todo(state, run)
    c = (t or {}).get("claim")
    if t and c and not machines.same_holder(c, run) and t["status"] not in ("done", "archived"):
        raise Conflict(f"{t['id']} is claimed by {c['holder']} until {c['lease_until']}: run {run['id']} of "
                       f"{run['agent']} lost it", "the todo went to another agent; start a new turn",
                       code="claimed_by_other", details={"todo": t["id"], "holder": c["holder"], "live": True,
                                                         "action": "finish", "lease_until": c["lease_until"]})


def _may_finish(state: dict, run: dict, actor: str, result: str) -> None:
    if run["finished"] is not None and run["result"] != result:
        raise Conflict(f"run {run['id']} was already finished as {run['result']} at {run['finished']}",
                       "start a new turn", code="run_finished", details={"run": run["id"], "reason": "run_over"})
    if actors.is_agent(actor) and not machines.runs_here(state, run, actor):
        raise Conflict(f"run {run['id']} belongs to {machines.who(state, run['agent'], run.get('node'))}, not "
                       f"{machines.who(state, actor, state['meta'].get('self_node'))}",
                       "finish your own run; a run is finished on the machine that started it, or a human "
                       "hands it over", code="run_not_yours", details={"run": run["id"]})


def _todo_drafts(state, run, result, backed, evs, drafts, out) -> tuple[dict, str | None]:
    t = queries.run_todo(state, run)
    if not t or t["status"] in ("done", "archived"):
        return {}, t["status"] if t else None
    c = t.get("claim")
    mine = machines.same_holder(c, run)
    if result == "completion" and backed:
        drafts.append(Draft("todo.completed", t["goal"], {"todo_id": t["id"], "evidence": evs,
                                                          "note": f"completed by run {run['id']}"}))
        return {t["id"]: "done"}, "done"
    if result == "completion":
        out["warnings"].append(f"{t['id']} stays open: a completion needs passing verification or cited evidence")
    if mine:
        drafts.append(Draft("todo.released", t["goal"], {"todo_id": t["id"], "note": f"run {run['id']}: {result}"}))
        return {t["id"]: "open"}, "open"
    return {}, t["status"]


def _finished_view(state: dict, r: dict) -> dict:
    t = queries.run_todo(state, r)
    return {"run_id": r["id"], "goal_id": r["goal"], "todo_id": r.get("todo"), "result": r["result"],
            "verified": r["verified"], "evidence": r["evidence"], "verify": None,
            "todo_status": t["status"] if t else None, "fingerprint": r.get("fp_after")}


def spend_slot(store: Store, actor: str, run_id: str, slots: int = 1) -> dict:
    """Charge ``slots`` for a finished, verified run (``quota.spent``); a repeat for the same run
    is a no-op returning the first receipt (``repeat`` True). A refusal is not an error: it
    returns ``spent`` False with ``reason`` (run_open, not_verified, budget_exhausted) and
    ``message``. Receipt: {spent, repeat, run_id, goal_id, slots, ts, budget, reason, message,
    next_check_at}."""
    slots = validate.count(slots, "slots", low=1, high=1000)
    out: dict = {}

    def plan(state, now):
        r = queries.resolve_run(state, run_id)
        g = state["goals"][r["goal"]]
        out.update(run_id=r["id"], goal_id=r["goal"], slots=slots, spent=False, repeat=False, ts=None,
                   reason=None, message=None, next_check_at=None)
        prior = [e for e in state["spends"].get(r["goal"], []) if e[2] == r["id"]]
        if not prior and r.get("slots") and fold.is_live(state):
            # charged before the budget window whose ledger the live view keeps: the full state has the receipt
            raise fold.NotInLiveView(r["id"])
        if prior:
            out.update(spent=True, repeat=True, ts=prior[0][0], slots=prior[0][1],
                       message="already charged for this run")
        elif r["finished"] is None:
            out.update(reason="run_open", message=f"run {r['id']} is still open; finish it first")
        elif not r["verified"]:
            out.update(reason="not_verified",
                       message=f"run {r['id']} was not verified (result {r['result']}); nothing is charged")
        else:
            b = budget.budget(state, g, now)
            if b["spent"] + slots > b["slots"]:
                at = budget.slot_frees_at(state, g, now, need=slots)
                out.update(reason="budget_exhausted", next_check_at=at,
                           message=f"{b['spent']} of {b['slots']} slots already spent in the window; "
                                   f"next slot frees at {at}")
            else:
                out.update(spent=True, ts=clock.iso(now), message="charged")
                return [Draft("quota.spent", r["goal"], {"run_id": r["id"], "slots": slots})]
        return []

    _, state = store.transact(plan, actor=actor)
    out["budget"] = budget.brief(budget.budget(state, state["goals"][out["goal_id"]], clock.now()))
    return out


def attach(store: Store, actor: str, run_id: str, process: dict) -> None:
    """Record the process group that runs the agent of ``run_id`` (``run.attached``; ``process``
    from ``kernel.agentproc.describe``). A finished run is left alone."""
    def plan(state, now):
        r = queries.resolve_run(state, run_id)
        if r["finished"] is not None:
            return []
        return [Draft("run.attached", r["goal"], dict(process, run_id=r["id"]))]

    store.transact(plan, actor=actor)


def previous_agent_alive(state: dict, todo_id: str) -> dict | None:
    """The last run on ``todo_id`` when its agent's process group is still alive on this machine
    and the run was not closed by its own runner (still open, or closed because its lease lapsed),
    else None. Taking such a todo would start a second agent on the same work."""
    from loopx.kernel.storage import agentproc

    runs = [r for r in state["runs"].values() if r.get("todo") == todo_id]
    if not runs:
        return None
    last = max(runs, key=lambda r: r.get("seq", 0))
    proc = last.get("process")
    if not proc or (last["finished"] is not None and not last.get("reaped")):
        return None
    return last if agentproc.alive(proc) else None


def renew(store: Store, actor: str, run_id: str, lease=None) -> dict:
    """Extend an open run's lease and its agent's claim on the todo. Returns {run_id, lease_until}.
    Raises Conflict when the run is finished (for example reaped after its lease expired)."""
    secs = validate.lease_seconds(lease)
    out: dict = {}

    def plan(state, now):
        r = queries.resolve_run(state, run_id)
        if r["finished"] is not None:
            raise Conflict(f"run {r['id']} is already finished ({r['result']})", "start a new turn",
                           code="run_finished", details={"run": r["id"], "reason": "run_over"})
        until = clock.iso(now + timedelta(seconds=secs))
        drafts = [Draft("run.renewed", r["goal"], {"run_id": r["id"], "lease_until": until})]
        t = queries.run_todo(state, r)
        if t and machines.same_holder(t.get("claim"), r) and t["status"] == "claimed":
            drafts.append(Draft("todo.renewed", r["goal"], {"todo_id": t["id"], "lease_until": until}))
        out.update(run_id=r["id"], lease_until=until)
        return drafts

    store.transact(plan, actor=actor)
    return out


def load_run(store: Store, run_id: str, seen: dict | None = None) -> tuple[dict, dict]:
    """(state, run): the live view (``seen`` when the caller read it moments ago) when it holds the
    run (an open run always is), else the full state (a run finished long ago). Raises like
    ``queries.resolve_run``."""
    state = store.load(view="live") if seen is None else seen
    try:
        run = queries.resolve_run(state, run_id)
        queries.run_todo(state, run)  # fold.NotInLiveView: its todo was closed and left out of the view
        return state, run
    except (UsageError, fold.NotInLiveView):
        state = store.load()
        return state, queries.resolve_run(state, run_id)


def close(store: Store, actor: str, run_id: str, result: str, note: str, report: dict | None = None,
          seen: dict | None = None) -> dict:
    """Close an open run without verification (the runner uses it on timeout, Ctrl-C and host
    setup errors); releases the claim. A run already finished is left as it is. ``seen``: the
    live view the caller read moments ago (the stop hook), used instead of reading it again."""
    state, run = load_run(store, run_id, seen)
    if run["finished"] is not None:
        return _finished_view(state, run) | {"repeat": True}
    return finish(store, actor if run["agent"] == actor or actors.is_human(actor) else run["agent"],
                  run_id, result, note=note, report=report, seen=state)


REPORT_KEYS = ("usage", "changes", "host", "permission_mode", "wall_time", "setup_error", "guard", "unjudged")


def report_data(report: dict | None) -> dict:
    """The fields of a runner measurement that go on the run's record (None values left out):
    ``usage`` {input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, total_tokens,
    cost_usd, model, session_id, num_turns, source} (absent: usage unknown), ``changes``
    {commits, commit_count, files, added, removed, untracked, committed}, ``host``,
    ``permission_mode``, ``wall_time`` (s), ``setup_error`` {reason, message, exit_code, reset_at},
    ``guard`` {calls, denied, unguarded} (the host's pre-tool hook calls during the run and the
    guard's refusals among them; 0 calls: the hook never loaded), ``unjudged`` (True: the turn was
    cut short before it could be judged, see decide's value rule)."""
    return {k: report[k] for k in REPORT_KEYS if report and report.get(k) is not None}


def report(store: Store, actor: str, run_id: str, measured: dict) -> dict:
    """Record the runner's measurement of a run the agent finished itself (``run.reported``).
    Returns {run_id, recorded}; nothing is written when there is nothing to record."""
    data = report_data(measured)
    out = {"run_id": run_id, "recorded": False}
    if not data:
        return out

    def plan(state, now):
        r = queries.resolve_run(state, run_id)
        out.update(run_id=r["id"], recorded=True)
        return [Draft("run.reported", r["goal"], dict(data, run_id=r["id"]))]

    store.transact(plan, actor=actor)
    return out
