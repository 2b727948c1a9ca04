"""Todo operations: add, claim with a lease, renew, release, update, block, reopen, done, archive.

Claims carry a fence: the ``seq`` of the ``todo.claimed`` event. A write by an agent is refused
(Conflict, exit 4) when another holder's claim stands, or when the caller passes a ``fence`` that is
no longer the current one; an expired lease can be claimed by anyone. Humans may act on any todo
(the event records the human actor). Lease durations are seconds.
"""

from __future__ import annotations

from loopx.errors import Conflict, FieldError, UsageError, either
from loopx.kernel.read import queries, validate
from loopx.kernel.storage import actors, clock, ids, machines
from loopx.kernel.storage.clock import timedelta
from loopx.kernel.storage.store import Draft, Store

VERIFY_TIMEOUT = 1800.0  # seconds a todo's verify command may take in `todo done`
UPDATABLE = ("title", "detail", "priority", "depends_on", "acceptance", "verify", "reopen")  # update's fields


def _holder_check(state: dict, todo: dict, actor: str, now_iso: str, fence: int | None) -> None:
    claim = todo.get("claim")
    mine = machines.holds(state, claim, actor)  # the agent on this machine (kernel.storage.machines)
    holder = machines.who(state, claim["holder"], claim.get("node")) if claim else None
    if fence is not None:
        if not claim:
            raise Conflict(f"stale fence {fence} for {todo['id']}: nobody holds a claim on it",
                           "claim it first (ask for new work)", code="stale_fence",
                           details={"todo": todo["id"], "fence": fence, "taken_over": False, "unclaimed": True})
        if claim["fence"] != fence:
            cur = f"current holder {holder} (fence {claim['fence']})"
            raise Conflict(f"stale fence {fence} for {todo['id']}: {cur}",
                           f"your current claim has fence {claim['fence']}; pass that" if mine
                           else "your lease was taken over; ask for new work", code="stale_fence",
                           details={"todo": todo["id"], "fence": fence, "taken_over": not mine})
        if not mine:
            raise Conflict(f"fence {fence} belongs to {holder}, not {actor}", None, code="stale_fence",
                           details={"todo": todo["id"], "fence": fence, "taken_over": False})
        return
    if claim and not mine and actors.is_agent(actor):
        live = queries.lease_live(claim, now_iso)
        raise Conflict(f"{todo['id']} is claimed by {holder}"
                       + (f" until {claim['lease_until']}" if live else f" (lease expired {claim['lease_until']})"),
                       "claim it first" if not live else "pick another todo, or ask the holder for a handoff",
                       code="claimed_by_other", details={"todo": todo["id"], "holder": claim["holder"], "live": live,
                                                         "lease_until": claim["lease_until"], "node": claim.get("node")})


def _writable(todo: dict) -> None:
    if todo["status"] in ("done", "archived"):
        raise Conflict(f"{todo['id']} is already {todo['status']}", "add a new todo for follow-up work",
                       code="todo_closed")


def _one(store: Store, actor: str, todo_ref: str, build) -> dict:
    """Resolve ``todo_ref`` under the lock and let ``build(state, todo, now_iso, out)`` make drafts."""
    out: dict = {}

    def plan(state, now):
        t = queries.resolve_todo(state, todo_ref)
        out["todo_id"] = t["id"]
        out["goal_id"] = t["goal"]
        return build(state, t, clock.iso(now), now, out)

    records, _ = store.transact(plan, actor=actor)
    for rec in records:
        if rec["type"] == "todo.claimed":
            out["fence"] = rec["seq"]
    return out


def _deps(state: dict, refs, goal_id: str) -> list[str]:
    """Resolve ``--depends-on`` references; each must be a todo of the same goal."""
    deps = []
    for ref in refs or []:
        d = queries.resolve_todo(state, ref)
        if d["goal"] != goal_id:
            raise UsageError(f"{d['id']} belongs to goal {d['goal']}, not {goal_id}",
                             "a todo can only depend on todos of its own goal")
        deps.append(d["id"])
    return deps


def _goal_deps(state: dict, refs, goal_id: str) -> list[str]:
    """Resolve ``--depends-on-goal`` references: other goals, and none that (through its own open
    todos' goal dependencies) already waits on ``goal_id`` (that would wait for ever)."""
    out = []
    for ref in refs or []:
        g = queries.resolve_goal(state, ref)
        if g["id"] == goal_id:
            raise FieldError("depends_on_goal", f"a todo of goal {goal_id} cannot wait for its own goal",
                             "use depends_on for an order inside the goal", code="depends_on_own_goal")
        if g["status"] == "stopped":
            raise FieldError("depends_on_goal", f"goal {g['id']} is stopped and will never be done",
                             "resume it first or drop {field}", code="depends_on_stopped_goal", details={"goal": g["id"]})
        if _waits_on(state, g["id"], goal_id):
            raise UsageError(f"goal {g['id']} already waits for goal {goal_id}: the two would wait for each other",
                             "drop one of the two goal dependencies")
        if g["id"] not in out:
            out.append(g["id"])
    return out


def _waits_on(state: dict, start: str, target: str) -> bool:
    """Whether goal ``start``'s open todos wait (directly or through other goals) for ``target``."""
    seen, stack = set(), [start]
    while stack:
        gid = stack.pop()
        if gid == target:
            return True
        if gid in seen:
            continue
        seen.add(gid)
        for t in state["todos"].values():
            if t["goal"] == gid and t["status"] not in queries.DONE_STATES:
                stack.extend(t.get("depends_on_goals") or [])
    return False


def added_drafts(state: dict, goal_id: str, titles: list, drafts: list[Draft], priority: int = 0) -> list[str]:
    """Append a ``todo.added`` draft per title (already validated; a ``(title, verify)`` pair gives
    the todo its own verify command) to ``drafts``; return the new ids."""
    taken = set(state["todos"])
    new = []
    for item in titles:
        title, verify = item if isinstance(item, tuple) else (item, None)
        tid = ids.new_id("todo", taken)
        taken.add(tid)
        new.append(tid)
        data = {"todo_id": tid, "title": title, "priority": priority}
        if verify:
            data["verify"] = verify
        drafts.append(Draft("todo.added", goal_id, data))
    return new


def add(store: Store, actor: str, goal_id: str | None, title: str, *, detail=None, priority=0,
        depends_on=None, acceptance=None, verify=None, every=None, depends_on_goals=None) -> dict:
    """Add a todo (``todo.added``). ``depends_on``: todos of the same goal that must be done first;
    ``depends_on_goals``: other goals that must be ``done`` first. ``every`` (a duration such as
    ``1d``) makes it recurring: once done it reopens at ``created + k*every``
    (loopx.kernel.policy.tick). Returns {todo_id, goal_id, title, depends_on_goals}. Raises
    UsageError (unknown ids, a goal waiting on itself or in a cycle), Conflict (the goal is done or
    stopped)."""
    title = validate.text(title, "title", limit=validate.MAX_TITLE)
    detail = validate.text(detail, "detail", required=False)
    acceptance = validate.text(acceptance, "acceptance", required=False)
    verify = validate.command(verify, "verify")
    priority = validate.count(priority, "priority", low=-1000, high=1000)
    every_s = None
    if every is not None:
        from loopx.kernel.write.watches import MAX_EVERY, MIN_EVERY, _duration

        every_s = _duration(every, "every", MIN_EVERY, MAX_EVERY)
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        if g["status"] in ("done", "stopped"):
            raise Conflict(f"goal {g['id']} is {g['status']}", "resume it first", code="goal_closed",
                           details={"goal": g["id"], "status": g["status"]})
        deps = _deps(state, depends_on, g["id"])
        goal_deps = _goal_deps(state, depends_on_goals, g["id"])
        tid = ids.new_id("todo", state["todos"])
        from loopx.kernel.storage.redact import redact_text

        out.update(todo_id=tid, goal_id=g["id"], title=redact_text(title), depends_on_goals=goal_deps)
        data = {"todo_id": tid, "title": title, "priority": priority}
        for k, v in (("detail", detail), ("depends_on", deps), ("depends_on_goals", goal_deps),
                     ("acceptance", acceptance), ("verify", verify), ("every", every_s)):
            if v:
                data[k] = v
        return [Draft("todo.added", g["id"], data)]

    store.transact(plan, actor=actor)
    return out


def claim(store: Store, actor: str, todo_ref: str, lease=None) -> dict:
    """Claim a todo for ``actor`` with a lease. Conflict (exit 4) when another live claim holds it,
    naming the holder and expiry. Claiming one's own live claim renews it."""
    secs = validate.lease_seconds(lease)

    def build(state, t, now_iso, now, out):
        _writable(t)
        if t["status"] == "blocked":
            raise Conflict(f"{t['id']} is blocked: {t.get('note') or 'no reason given'}",
                           "a human reopens it", code="todo_blocked", details={"todo": t["id"]})
        c = t.get("claim")
        mine = machines.holds(state, c, actor)
        if not mine and queries.lease_live(c, now_iso):
            raise Conflict(f"{t['id']} is claimed by {machines.who(state, c['holder'], c.get('node'))} until {c['lease_until']}",
                           "pick another todo (a ready one) or wait for the lease to expire", code="claimed_by_other",
                           details={"todo": t["id"], "holder": c["holder"], "live": True, "action": "claim",
                                    "lease_until": c["lease_until"]})
        for g in queries.pending_gates(state, t["goal"]):
            if not g["blocks"] or t["id"] in g["blocks"]:
                raise Conflict(f"{t['id']} waits for gate {g['id']}: {g['question']}",
                               f"a human must decide gate {g['id']}", code="gate_pending",
                               details={"todo": t["id"], "gate": g["id"]})
        until = clock.iso(now + timedelta(seconds=secs))
        if mine and queries.lease_live(c, now_iso):
            out.update(holder=actor, lease_until=until, fence=c["fence"], renewed=True)
            return [Draft("todo.renewed", t["goal"], {"todo_id": t["id"], "lease_until": until})]
        out.update(holder=actor, lease_until=until, renewed=False, taken_over=c["holder"] if c else None)
        return [Draft("todo.claimed", t["goal"], {"todo_id": t["id"], "holder": actor, "lease_until": until})]

    return _one(store, actor, todo_ref, build)


def renew(store: Store, actor: str, todo_ref: str, lease=None, fence: int | None = None) -> dict:
    """Extend the caller's own claim. Conflict when the claim was lost (fenced out)."""
    secs = validate.lease_seconds(lease)

    def build(state, t, now_iso, now, out):
        _writable(t)
        c = t.get("claim")
        if not c:
            raise Conflict(f"{t['id']} is not claimed", "claim it first", code="not_claimed", details={"todo": t["id"]})
        _holder_check(state, t, actor, now_iso, fence)
        until = clock.iso(now + timedelta(seconds=secs))
        out.update(lease_until=until, fence=c["fence"])
        return [Draft("todo.renewed", t["goal"], {"todo_id": t["id"], "lease_until": until})]

    return _one(store, actor, todo_ref, build)


def release(store: Store, actor: str, todo_ref: str, fence: int | None = None, note=None) -> dict:
    def build(state, t, now_iso, now, out):
        _writable(t)
        if not t.get("claim"):
            out["changed"] = False
            return []
        _holder_check(state, t, actor, now_iso, fence)
        out["changed"] = True
        return [Draft("todo.released", t["goal"], {"todo_id": t["id"], "note": validate.text(note, "note", required=False)})]

    return _one(store, actor, todo_ref, build)


def _checked_fields(title, detail, priority, acceptance, verify) -> dict:
    """The given fields of ``update``, validated (FieldError, exit 2, for a bad one)."""
    checks = (("title", title, lambda v: validate.text(v, "title", limit=validate.MAX_TITLE)),
              ("detail", detail, lambda v: validate.text(v, "detail", required=False)),
              ("priority", priority, lambda v: validate.count(v, "priority", low=-1000, high=1000)),
              ("acceptance", acceptance, lambda v: validate.text(v, "acceptance", required=False)),
              ("verify", verify, lambda v: validate.command(v, "verify")))
    return {name: check(value) for name, value, check in checks if value is not None}


def _reopen_drafts(state: dict, t: dict, actor: str, now_iso: str, human) -> list[Draft]:
    """``todo.reopened`` for a todo that is not open: a blocked, done or archived one needs a
    human's channel, one a human blocked by rejecting a gate a human actor, a claimed one the claim."""
    rejected = t["status"] == "blocked" and t.get("blocked_by")
    if rejected and not actors.is_human(actor):
        from loopx.errors import HumanRequired

        raise HumanRequired(f"{t['id']} is blocked because a human rejected gate {rejected['gate']}; "
                            "only a human re-opens it",
                            "re-plan: add a new todo that respects the human's note "
                            f"({(rejected.get('note') or '')[:120]})")
    if t["status"] not in ("blocked", "done", "archived", "claimed"):
        return []
    if t["status"] != "claimed":
        from loopx.kernel import humans

        humans.check_channel(human, "todo.reopen")
    else:
        _holder_check(state, t, actor, now_iso, None)  # reopening would drop another agent's claim
    return [Draft("todo.reopened", t["goal"], {"todo_id": t["id"]})]


def update(store: Store, actor: str, todo_ref: str, *, title=None, detail=None, priority=None,
           depends_on=None, acceptance=None, verify=None, reopen: bool = False, human=None) -> dict:
    """Change a todo's fields; ``reopen`` sets a blocked, done or archived todo back to open,
    which needs ``human`` (a ``humans.HumanChannel``; HumanRequired without one). Raises
    UsageError (code ``nothing_to_update``, ``details["fields"]``: what may change) without a change."""
    fields = _checked_fields(title, detail, priority, acceptance, verify)
    if not fields and depends_on is None and not reopen:
        raise UsageError("nothing to update", "pass " + either(UPDATABLE), code="nothing_to_update",
                         details={"fields": list(UPDATABLE)})

    def build(state, t, now_iso, now, out):
        drafts = []
        f = dict(fields)
        if depends_on is not None:
            deps = _deps(state, depends_on, t["goal"])
            if t["id"] in deps:
                raise UsageError(f"{t['id']} cannot depend on itself", "name another todo")
            f["depends_on"] = deps
        if f:
            _holder_check(state, t, actor, now_iso, None)
            drafts.append(Draft("todo.updated", t["goal"], dict(f, todo_id=t["id"])))
        if reopen:
            drafts += _reopen_drafts(state, t, actor, now_iso, human)
        out.update(changed=sorted(f) + (["status"] if reopen else []))
        return drafts

    return _one(store, actor, todo_ref, build)


def block(store: Store, actor: str, todo_ref: str, reason: str) -> dict:
    reason = validate.text(reason, "reason")

    def build(state, t, now_iso, now, out):
        _writable(t)
        _holder_check(state, t, actor, now_iso, None)
        return [Draft("todo.blocked", t["goal"], {"todo_id": t["id"], "reason": reason})]

    return _one(store, actor, todo_ref, build)


def _current_run(state: dict, todo: dict, actor: str) -> dict | None:
    """The open run working on ``todo`` (the caller's own when the caller is an agent)."""
    runs = [r for r in queries.open_runs(state, todo["goal"]) if r.get("todo") == todo["id"]
            and (not actors.is_agent(actor) or machines.runs_here(state, r, actor))]
    return max(runs, key=lambda r: r.get("seq", 0)) if runs else None


def done(store: Store, actor: str, todo_ref: str, evidence: list[str], *, next_titles=None,
         fence: int | None = None, note=None, force: bool = False, verify_timeout: float | None = None) -> dict:
    """Complete a todo on evidence that proves it (``todo.completed``; rules in loopx.kernel.read.proof):
    failing evidence or a note alone is refused (Conflict, exit 4, code ``evidence_failing``,
    ``evidence_unproven``, ``verify_required``); a todo with its own verify command needs a passing
    run of it, which this runs (and records) when none is cited or recorded by the current run.
    ``force`` (humans only, else HumanRequired) completes it anyway, recorded as ``forced``.
    ``next_titles`` adds successor todos in the same transaction.
    Returns {todo_id, evidence, next, forced, verify (the run_verify result or None)}."""
    titles = [validate.text(t, "next", limit=validate.MAX_TITLE) for t in next_titles or []]
    if force and not actors.is_human(actor):
        from loopx.errors import HumanRequired

        raise HumanRequired("only a human can close a todo without passing evidence",
                            "make its verify pass, or ask a human to force it", code="human_required",
                            details={"field": "force"})
    evidence = list(evidence or [])
    ran = None

    def look(state):  # read only, so on the live view first (Store.read: the full state for a left-out record)
        t = queries.resolve_todo(state, todo_ref)
        if not force:  # checks before work: a closed todo, another agent's claim or a stale fence is refused
            _writable(t)  # before the verify command runs or any evidence is recorded (issue 21)
            _holder_check(state, t, actor, clock.iso(clock.now()), fence)
        if not (t.get("verify") and not force and t["status"] not in ("done", "archived")):
            return t, None, None, None
        from loopx.kernel.read import proof

        cited = [queries.resolve_evidence(state, ref)["id"] for ref in evidence]
        run = _current_run(state, t, actor)
        return t, cited, run, proof.passing_verify(state, t, cited, run["id"] if run else None)

    t0, cited, run, proven = store.read(look)
    if cited is not None:
        evidence += [e for e in proven if e not in cited]  # cite the current run's passing check
        if not proven:
            from loopx.kernel.write import checks

            ran = checks.run_verify(store, actor, run or {"goal": t0["goal"], "id": None, "todo": t0["id"]},
                                    t0["verify"], VERIFY_TIMEOUT if verify_timeout is None else verify_timeout)
            if ran.get("setup_error"):
                raise Conflict(ran["setup_error"]["message"], "fix the setup, then close the todo again",
                               code="verify_broken", details={"todo": t0["id"], "setup_error": ran["setup_error"],
                                                              "evidence_id": ran["evidence_id"]})
            if not ran["passed"]:
                raise Conflict(f"{t0['id']} is not done: its verify command `{t0['verify'][:200]}` failed "
                               f"(exit {ran['exit_code']}, evidence {ran['evidence_id']})",
                               "fix it and close the todo again; only a human can override", code="evidence_failing",
                               details={"todo": t0["id"], "evidence_id": ran["evidence_id"], "exit_code": ran["exit_code"],
                                        "verify": True})
            evidence.append(ran["evidence_id"])
    if not evidence and not force:
        raise UsageError("a todo cannot be done without evidence", "record it first, then cite its id",
                         code="evidence_required", details={"todo": t0["id"]})

    def build(state, t, now_iso, now, out):
        from loopx.kernel.read import proof

        _writable(t)
        _holder_check(state, t, actor, now_iso, fence)
        evs = []
        for ref in evidence:
            e = queries.resolve_evidence(state, ref)
            if e["goal"] != t["goal"]:
                raise UsageError(f"evidence {e['id']} belongs to goal {e['goal']}, not {t['goal']}",
                                 "cite evidence recorded for this goal")
            evs.append(e["id"])
        run = _current_run(state, t, actor)
        verdict = proof.judge(state, t, evs, run["id"] if run else None)
        data = {"todo_id": t["id"], "evidence": evs, "note": validate.text(note, "note", required=False)}
        if not verdict["ok"]:
            if not force:
                raise Conflict(verdict["message"], verdict["hint"] + (
                    "; only a human can override" if verdict["reason"] != "evidence_required" else ""),
                    code=verdict["reason"], details={"todo": t["id"], "evidence": evs})
            data.update(forced=True, unverified=verdict["message"])
        drafts = [Draft("todo.completed", t["goal"], data)]
        nxt = added_drafts(state, t["goal"], titles, drafts, priority=t.get("priority", 0))
        out.update(evidence=evs, next=nxt, forced=bool(data.get("forced")), verify=ran)
        return drafts

    return _one(store, actor, todo_ref, build)


def archive(store: Store, actor: str, todo_ref: str, note=None) -> dict:
    def build(state, t, now_iso, now, out):
        if t["status"] == "archived":
            out["changed"] = False
            return []
        _holder_check(state, t, actor, now_iso, None)
        out["changed"] = True
        return [Draft("todo.archived", t["goal"], {"todo_id": t["id"], "note": validate.text(note, "note", required=False)})]

    return _one(store, actor, todo_ref, build)
