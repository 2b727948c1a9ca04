"""Shared goals: what must not happen twice across machines goes through the git remote first
(docs/multi-agent.md, "What is linearised"; docs/architecture.md, "Sync through git").

Each action below is a compare-and-swap on one shared ledger ref (``sync.cas``): it counts only
once the push that carries it succeeded; a refused push fetches the newer ledger, decides again
and retries, or reports the conflict in one line. Only then is the local record written.

- claims: ``next_turn_synced`` (``refs/loopx/claims``), and lease renewals ``renew`` on the same
  ledger (an entry taken over by another machine ends the renewal: ``lease_lost``);
- gate decisions: ``decide_gate`` (``refs/loopx/ledger/gates``): one winner; the loser is told
  "gate g-x was already approved on host-b";
- budget spends: ``spend_slot`` (``refs/loopx/ledger/spends``): the window's spends of every
  machine never exceed the goal's slots;
- approval reservations: ``reserve`` (``refs/loopx/ledger/reservations``): a single-use approval
  of a shared goal is reserved for one run when that run starts; the guard checks the local
  ``gate.reserved`` record (``approvals.usable``), so hooks never touch the network.

An unreachable remote (every git call bounded by ``LOOPX_SYNC_TIMEOUT``): a claim or a gate
decision waits (exit 3, nothing recorded); a spend or a lease renewal is recorded locally, marked
tentative (``cache/pending.json``, shown by ``status`` and ``sync``) and pushed by the next sync
that reaches the remote (``flush``).
"""

from __future__ import annotations

import json
import os

from loopx.errors import Conflict, LoopxError, UsageError
from loopx.kernel.policy import packet, turn
from loopx.kernel.read import budget, queries, validate
from loopx.kernel.storage import clock, fold, layout
from loopx.kernel.storage.clock import timedelta
from loopx.kernel.storage.fs import atomic_write, locked, open_file
from loopx.kernel.write import gates
from loopx.sync import transport as gs
from loopx.sync.sharing import goal_is_shared, is_shared


def _ago(at, now) -> str:
    s = gs._seconds_between(at, now)
    return f" {s} s earlier" if s is not None else ""


def _remote(store, remote: str | None) -> str | None:
    return remote or (gs.read_status(store) or {}).get("remote")


def _unreachable(exc: LoopxError, what: str) -> gs.RemoteUnreachable:
    return gs.RemoteUnreachable(f"{what}: {exc.message}",
                                "nothing was recorded; the loop goes on locally and this waits until the remote "
                                "answers (a sync tells you)", details={"reason": "nothing_recorded"})


def _refold(store, git) -> None:
    """After losing a race: import what the winner pushed so this clone's state shows it (best
    effort; the next sync does it otherwise)."""
    try:
        gs.exchange(store, git)
    except LoopxError:
        pass


# ------------------------------------------------------------------ pending (offline) actions
def read_pending(store) -> dict:
    """``cache/pending.json``: {"spends": [{run_id, goal_id, slots, at}], "renewals": {todo_id:
    {until, agent, run_id}}}: what was recorded locally while the remote did not answer."""
    try:
        with open_file(store.path(layout.PENDING)) as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    spends = data.get("spends")
    if not isinstance(spends, list):
        spends = []
    renewals = data.get("renewals")
    if not isinstance(renewals, dict):
        renewals = {}
    return {"spends": [s for s in spends if isinstance(s, dict)], "renewals": renewals}


def _write_pending(store, data: dict) -> None:
    os.makedirs(store.path(layout.CACHE), exist_ok=True)
    atomic_write(store.path(layout.PENDING), json.dumps(data, sort_keys=True).encode(), sync=False, follow=False)


def _queue(store, kind: str, key: str | None, item: dict) -> None:
    with locked(store.path(layout.PENDING_LOCK), 30.0):
        data = read_pending(store)
        if kind == "spends":
            data["spends"] = [s for s in data["spends"] if s.get("run_id") != item.get("run_id")] + [item]
        else:
            data["renewals"][key] = item
        _write_pending(store, data)


def flush(store, git: gs.Git) -> dict:
    """Push what was recorded while the remote did not answer: each pending spend is added to the
    spends ledger (it happened; an over-budget window is reported, not undone) and each pending
    renewal extends this clone's entry in the claims ledger unless another machine holds the todo
    now (reported as ``lost``). Returns {"spends": n, "renewals": n, "lost": [todo_id]}. Raises
    RemoteUnreachable."""
    out = {"spends": 0, "renewals": 0, "lost": []}
    with locked(store.path(layout.PENDING_LOCK), 30.0):
        data = read_pending(store)
        if not data["spends"] and not data["renewals"]:
            return out
        node = gs.ensure_node(store)
        if data["spends"]:
            def add_spends(doc, attempt):
                new = dict(doc)
                for s in data["spends"]:
                    entries = [e for e in new.get(s.get("goal_id") or "", []) if isinstance(e, dict)]
                    if not any(e.get("run") == s.get("run_id") for e in entries):
                        entries.append({"at": s.get("at"), "slots": s.get("slots"), "run": s.get("run_id"),
                                        "node": node, "host": gs.host_name()})
                    new[s.get("goal_id") or ""] = entries
                return new, None

            gs.cas(git, gs.SPENDS, add_spends, f"loopx spends of {node} made offline")
            out["spends"] = len(data["spends"])
            data["spends"] = []
        if data["renewals"]:
            lost: list[str] = []

            def renew_all(doc, attempt):
                lost.clear()
                now = clock.now_iso()
                new = dict(doc)
                for tid, r in data["renewals"].items():
                    e = new.get(tid)
                    if isinstance(e, dict) and e.get("node") != node and str(e.get("until", "")) > now:
                        lost.append(tid)
                        continue
                    if str(r.get("until", "")) > now:
                        new[tid] = {"node": node, "host": gs.host_name(), "agent": r.get("agent"),
                                    "at": (e or {}).get("at") if isinstance(e, dict) else now, "until": r["until"]}
                return new, None

            gs.cas(git, gs.CLAIMS, renew_all, f"loopx lease renewals of {node} made offline")
            out["renewals"] = len(data["renewals"]) - len(lost)
            out["lost"] = sorted(lost)
            data["renewals"] = {}
        _write_pending(store, data)
    return out


# ------------------------------------------------------------------ gate decisions
def decide_gate(store, actor: str, gate_ref: str, *, approve: bool, remote: str | None = None, **kw) -> dict:
    """``gates.decide`` for any gate; a gate of a shared goal is decided through
    ``refs/loopx/ledger/gates`` first: sync (so decisions made elsewhere are folded in), check as
    ``decide`` does, push the decision with a lease, and record it locally only after the push won.
    ``kw``: decide's keywords (note, channel, user_agent, code, human, standing, signature).
    Returns decide's dict (plus ``shared`` {ledger, tries}). Raises what decide raises, Conflict
    (exit 4, ``gate_decided``) naming the machine that decided first, RemoteUnreachable (exit 3)."""
    try:  # pending gates are in the live view; an old decided one only in the full state
        state, g = store.read(lambda st: (st, queries.resolve_gate(st, gate_ref)))
    except UsageError:
        state = store.load()
        g = queries.resolve_gate(state, gate_ref)
    if not goal_is_shared(state, g["goal"]):
        return gates.decide(store, actor, gate_ref, approve=approve, **kw)
    gates.precheck(state, actor, g["id"], approve=approve, note=kw.get("note"), code=kw.get("code"),
                   human=kw.get("human"))
    status = "approved" if approve else "rejected"
    what = f"gate {g['id']} belongs to shared goal {g['goal']}: a decision counts once the remote has it"
    try:
        git = gs.project_git(store, _remote(store, remote))
        with gs.sync_lock(store):
            ex = gs.exchange(store, git)
            node = ex["node"]

            def step(doc, attempt):
                e = doc.get(g["id"])
                if isinstance(e, dict):  # decided through the remote already: name where
                    return None, e
                gates.precheck(store.load(), actor, g["id"], approve=approve, note=kw.get("note"),
                               code=kw.get("code"), human=kw.get("human"))
                new = dict(doc)
                new[g["id"]] = {"status": status, "by": actor, "goal": g["goal"], "node": node,
                                "host": gs.host_name(), "at": clock.now_iso()}
                return new, None

            got = gs.cas(git, gs.GATES, step, f"loopx gate {status} {g['id']} on {gs.host_name()}")
            prior = got["result"]
            if prior is not None and (prior.get("node") != node or prior.get("status") != status):
                _refold(store, git)
                raise Conflict(f"gate {g['id']} was already {prior.get('status')} on {prior.get('host')}"
                               f"{_ago(prior.get('at'), clock.now())} by {prior.get('by')}",
                               "sync to fold that decision in; open a new gate if the question needs "
                               "another decision", code="gate_decided",
                               details={"reason": "decided_elsewhere", "gate": g["id"]})
            out = gates.decide(store, actor, g["id"], approve=approve, **kw)
            out["shared"] = {"ledger": gs.GATES, "tries": got["tries"]}
            try:  # the others fold the decision record at their next sync
                gs.push_own(store, git, node)
            except gs.RemoteUnreachable:
                pass
    except gs.RemoteUnreachable as exc:
        raise _unreachable(exc, what) from exc
    gs.note_synced(store, git.remote, git=git)
    return out


# ------------------------------------------------------------------ spends
def spend_slot(store, actor: str, run_id: str, slots: int = 1, remote: str | None = None,
               seen: dict | None = None) -> dict:
    """``turn.spend_slot``; a run of a shared goal is charged through ``refs/loopx/ledger/spends``
    first: the window's spends of every machine plus this one must fit the goal's slots, else the
    receipt is a refusal (``budget_exhausted``, naming the machines that spent them). When the
    remote does not answer the spend is recorded locally and marked ``tentative`` (pushed by the
    next sync). Returns the receipt of ``turn.spend_slot`` (plus ``shared`` {tries} or
    ``tentative`` True). ``seen``: the state the caller read the run from moments ago
    (``turn.load_run``'s)."""
    state, r = turn.load_run(store, run_id, seen)
    g = state["goals"][r["goal"]]
    local = lambda: turn.spend_slot(store, actor, r["id"], slots)  # noqa: E731
    if not g.get("shared") or r["finished"] is None or not r["verified"] \
            or any(e[2] == r["id"] for e in state["spends"].get(g["id"], [])):
        return local()  # not shared, or a refusal or repeat that needs no remote
    q = g["quota"]
    try:
        git = gs.project_git(store, _remote(store, remote))
        with gs.sync_lock(store):
            node = gs.ensure_node(store)
            flush(store, git)

            def step(doc, attempt):
                now = clock.now()
                start = clock.iso(now - timedelta(seconds=q["window"]))
                entries = [e for e in doc.get(g["id"], []) if isinstance(e, dict) and str(e.get("at", "")) > start]
                if any(e.get("run") == r["id"] for e in entries):
                    return None, {"ok": True}
                spent = sum(int(e.get("slots") or 0) for e in entries)
                if spent + int(slots) > q["slots"]:
                    hosts = sorted({str(e.get("host")) for e in entries})
                    return None, {"ok": False, "spent": spent, "hosts": hosts}
                new = dict(doc)
                new[g["id"]] = entries + [{"at": clock.iso(now), "slots": int(slots), "run": r["id"], "node": node,
                                           "host": gs.host_name()}]
                return new, {"ok": True}

            got = gs.cas(git, gs.SPENDS, step, f"loopx spend {slots} for {r['id']} on {gs.host_name()}")
            res = got["result"]
            if not res["ok"]:
                _refold(store, git)
                b = budget.budget(state, g, clock.now())
                return {"spent": False, "repeat": False, "run_id": r["id"], "goal_id": g["id"], "slots": slots,
                        "ts": None, "reason": "budget_exhausted", "next_check_at": None,
                        "message": (f"{res['spent']} of {q['slots']} slots of shared goal {g['id']} already spent in "
                                    f"the window (on {', '.join(res['hosts'])}); nothing is charged"),
                        "budget": budget.brief(b), "shared": {"tries": got["tries"]}}
            receipt = local()
            receipt["shared"] = {"tries": got["tries"]}
            try:
                gs.push_own(store, git, node)
            except gs.RemoteUnreachable:
                pass
            return receipt
    except gs.RemoteUnreachable as exc:
        receipt = local()
        if receipt["spent"] and not receipt["repeat"]:
            _queue(store, "spends", None, {"run_id": r["id"], "goal_id": g["id"], "slots": receipt["slots"],
                                           "at": receipt["ts"]})
            receipt["tentative"] = True
            receipt["message"] = (f"charged here only (tentative): the remote did not answer ({exc.message}); "
                                  "the next `loopx sync` pushes it to the shared budget")
        return receipt


# ------------------------------------------------------------------ lease renewals
def renew(store, actor: str, run_id: str, lease=None, remote: str | None = None) -> dict:
    """``turn.renew``; for a run of a shared goal the todo's entry in ``refs/loopx/claims`` is
    extended first. When another machine holds the todo there now (this run's lease lapsed on the
    remote and it was claimed elsewhere) nothing is renewed: Conflict (exit 4, ``lease_lost``,
    "t-3f9a was claimed on host-b 40 s earlier"). When the remote does not answer the lease is
    renewed locally, marked ``tentative`` and pushed by the next sync. Returns {run_id,
    lease_until} (plus ``shared`` or ``tentative``)."""
    state, r = turn.load_run(store, run_id)
    tid = r.get("todo")
    if not goal_is_shared(state, r["goal"]) or not tid or r["finished"] is not None:
        return turn.renew(store, actor, run_id, lease=lease)
    agent = r["agent"]
    until = clock.iso(clock.now() + timedelta(seconds=validate.lease_seconds(lease)))
    try:
        git = gs.project_git(store, _remote(store, remote))
        with gs.sync_lock(store):
            node = gs.ensure_node(store)

            def step(doc, attempt):
                now = clock.now()
                e = doc.get(tid)
                if isinstance(e, dict) and e.get("node") != node and str(e.get("until", "")) > clock.iso(now):
                    return None, e
                new = dict(doc)
                at = e.get("at") if isinstance(e, dict) and e.get("node") == node else clock.iso(now)
                new[tid] = {"node": node, "host": gs.host_name(), "agent": agent, "at": at, "until": until}
                return new, None

            got = gs.cas(git, gs.CLAIMS, step, f"loopx lease of {tid} renewed on {gs.host_name()}")
    except gs.RemoteUnreachable as exc:
        out = turn.renew(store, actor, run_id, lease=lease)
        _queue(store, "renewals", tid, {"until": out["lease_until"], "agent": agent, "run_id": r["id"]})
        out.update(tentative=True, warning=f"lease renewed here only (tentative): {exc.message}")
        return out
    if got["result"] is not None:
        e = got["result"]
        with gs.sync_lock(store):
            _refold(store, git)
        raise Conflict(f"{tid} was claimed on {e.get('host')}{_ago(e.get('at'), clock.now())}: the lease of "
                       f"{r['id']} lapsed on the remote and was not renewed",
                       "finish this turn as failed and start a new one with sync", code="lease_lost",
                       details={"todo": tid, "run": r["id"]})
    out = turn.renew(store, actor, run_id, lease=lease)
    out["shared"] = {"tries": got["tries"]}
    return out


# ------------------------------------------------------------------ approval reservations
def reserve(store, git: gs.Git, actor: str, run_id: str) -> list[str]:
    """Reserve, for the open run ``run_id`` of a shared goal, per gate kind the newest single-use
    approval of its goal that is approved, unused and not reserved for another run still open (as
    this clone knows), so other runs can take the rest: one compare-and-swap on
    ``refs/loopx/ledger/reservations``, then ``gate.reserved`` records. Returns the gate ids
    reserved. Raises RemoteUnreachable. Reads the live view, and the full state only when the view
    cannot answer (``_LeftOut``): every turn of a shared goal reserves."""
    try:
        return _reserve(store, git, actor, run_id, store.load(view="live"))
    except _LeftOut:
        return _reserve(store, git, actor, run_id, store.load())


class _LeftOut(Exception):
    """The live view left out what a reservation depends on: ask the full state."""


def _open_shared_run(state: dict, run_id: str) -> dict | None:
    """The open run ``run_id`` of a shared goal in ``state``, else None; raises ``_LeftOut`` when
    ``state`` is a live view that cannot say (the run not in it, or usable approvals of its goal
    left out and only counted: an older candidate may be among them)."""
    live = fold.is_live(state)
    run = fold.held(state["runs"], run_id)  # an open run is always in the view
    if run is None and live:
        raise _LeftOut
    if run is None or run["finished"] is not None or not goal_is_shared(state, run["goal"]):
        return None
    if live and (not state.get("approvals") or any((state.get("approvals_left") or {}).get(run["goal"], {}).values())):
        raise _LeftOut
    return run


def _reserve(store, git: gs.Git, actor: str, run_id: str, state: dict) -> list[str]:
    live = fold.is_live(state)
    runs = state["runs"]
    run = _open_shared_run(state, run_id)
    if run is None:
        return []
    cands = sorted((g for g in state["gates"].values() if g["goal"] == run["goal"] and g["status"] == "approved"
                    and not g.get("standing") and not g.get("used")),
                   key=lambda g: -(g.get("decided_seq") or 0))
    if not cands:
        return []
    node = gs.ensure_node(store)

    def free(e) -> bool:
        if not isinstance(e, dict) or e.get("run") == run_id:
            return True
        other = fold.held(runs, e.get("run") or "")
        if other is not None:
            return other["finished"] is not None  # the run that held it closed: it may be reserved again
        if str(e.get("until", "")) <= clock.now_iso():
            return True  # a run this clone has not seen yet, or one the view left out (closed): free either way
        if live:
            raise _LeftOut  # unseen (its lease decides) or closed and left out (free): only the full state knows
        return False  # a run this clone has not seen yet, its lease still running

    def step(doc, attempt):
        won, kinds = [], set()
        for g in cands:  # newest first: one per kind
            if g["kind"] not in kinds and free(doc.get(g["id"])):
                kinds.add(g["kind"])
                won.append(g["id"])
        if not won or all(isinstance(doc.get(x), dict) and doc[x].get("run") == run_id for x in won):
            return None, won
        new = dict(doc)
        for gid in won:
            new[gid] = {"run": run_id, "node": node, "host": gs.host_name(), "agent": actor,
                        "at": clock.now_iso(), "until": run.get("lease_until")}
        return new, won

    got = gs.cas(git, gs.RESERVATIONS, step, f"loopx approvals reserved for {run_id} on {gs.host_name()}")
    if not got["result"]:
        return []
    return gates.reserve(store, actor, run_id, got["result"], node=node, host=gs.host_name())


# ------------------------------------------------------------------ where it runs
def tentative_view(store) -> dict:
    """What ``status`` and ``sync`` list as tentative besides claims: spends and lease renewals
    recorded while the remote did not answer. {"spends": [run_id], "renewals": [todo_id]}."""
    p = read_pending(store)
    return {"spends": sorted(s.get("run_id") for s in p["spends"]), "renewals": sorted(p["renewals"])}


def sync_all(store, git: gs.Git) -> dict:
    """One full sync under the sync lock: exchange records, push pending actions (``flush``).
    Returns exchange's dict plus ``flushed``."""
    with gs.sync_lock(store):
        ex = gs.exchange(store, git)
        ex["flushed"] = flush(store, git)
    gs.note_synced(store, git.remote, git=git)
    return ex


def shared_tick(store, goal_id: str | None = None) -> str | None:
    """The sync step of ``quota should-run`` and ``loopx run`` (never of a hook): when this clone
    has a shared goal and its last sync attempt is older than ``every()``, exchange records with the
    remote (each git call bounded by LOOPX_SYNC_TIMEOUT) and push what was done offline. Skipped
    after one small read when nothing is shared (``sharing.is_shared``), and when another process is
    syncing. Returns a one-line note when the remote could not be reached (the loop goes on
    locally), else None."""
    if not is_shared(store.root):
        return None

    last = gs.read_status(store) or {}
    try:
        age = (clock.now() - clock.parse_ts(last.get("attempt") or "")).total_seconds()
    except Exception:  # noqa: BLE001 - a damaged cache entry: sync now
        age = None
    if age is not None and 0 <= age < gs.every():
        return None
    gs.timeout()  # a malformed LOOPX_SYNC_TIMEOUT is a usage error (exit 2) here, not a sync warning
    remote = last.get("remote")
    try:
        git = gs.project_git(store, remote)

        with locked(store.path(layout.SYNC_LOCK), 0):
            gs.exchange(store, git)
            flush(store, git)
            gs.note_synced(store, git.remote, git=git)
    except LoopxError as exc:
        if exc.code == "store_busy":
            return None  # another process is syncing this clone now
        gs.note_synced(store, remote or "origin", exc.message)
        return (f"shared goal not synced: {exc.message}; the loop goes on locally and shared claims wait "
                "until the remote answers")
    return None


def next_turn_synced(store, actor: str, *, goal_id: str | None = None, lease=None, remote: str | None = None,
                     driven: bool = False) -> dict:
    """``next --sync`` (and ``loopx run`` on a shared goal): exchange records, claim through the
    remote (compare-and-swap on refs/loopx/claims), then start the turn on that todo. Returns what
    ``turn.next_turn`` returns plus ``sync`` ({node, pushed, imported, nodes, claim_tries, lost});
    when every ready todo is claimed elsewhere the decision is ``wait`` (reason
    ``claimed_elsewhere`` when this clone lost a race: "t-3f9a was claimed on host-b 4 s earlier").
    Raises RemoteUnreachable (exit 3), StateError, Conflict."""
    git = gs.project_git(store, remote)
    with gs.sync_lock(store):
        ex = gs.exchange(store, git)
        flush(store, git)
        resumed = turn._resume(store, actor, goal_id, driven)
        if resumed is not None:
            resumed["sync"] = {**ex, "claim_tries": 0, "lost": []}
            return resumed
        until = clock.iso(clock.now() + timedelta(seconds=validate.lease_seconds(lease)))
        last: dict = {}

        def pick(held):
            d = turn.pick_todo(store, actor, held, goal_id=goal_id)
            last["decision"], last["held"] = d, held
            return d.get("todo_id") if d["decision"] == "run" and d.get("mode") != "plan" else None

        now_iso = clock.now_iso()
        mine = {t["id"] for t in store.load(view="live")["todos"].values() if queries.claim_live(t, now_iso)}
        got = gs.claim(store, git, pick, actor, until, keep=mine)
        tid = got["todo_id"]
        sync_info = {**ex, "claim_tries": got["tries"], "lost": got["lost"]}
        if tid is None:
            d = dict(last.get("decision") or {})
            if got["lost"] and d.get("decision") != "run":
                lost = got["lost"][-1]
                ago = f" {lost['seconds']} s earlier" if lost.get("seconds") is not None else ""
                d.update(decision="wait", reason="claimed_elsewhere",
                         message=f"{lost['todo_id']} was claimed on {lost['host']}{ago}; no other todo is ready",
                         hint="run `loopx next --sync` again later")
            elif d.get("decision") == "run":  # plan mode: nothing to claim through the remote
                return {**turn.next_turn(store, actor, goal_id=goal_id, lease=lease,
                                         held=last.get("held"), driven=driven), "sync": sync_info}
            return {"started": False, "decision": d, "goal_id": d.get("goal_id"), "todo_id": None,
                    "run_id": None, "lease_until": None, "fence": None, "mode": None, "packet": None,
                    "packet_text": None, "sync": sync_info}
        held = {t: c for t, c in (last.get("held") or {}).items() if t != tid}
        res = turn.next_turn(store, actor, goal_id=goal_id, lease=lease, held=held, want=tid, driven=driven)
        res["sync"] = sync_info
        if res.get("started") and res.get("run_id"):  # single-use approvals go to this run (the guard checks)
            try:
                res["reserved"] = reserve(store, git, actor, res["run_id"])
            except (gs.RemoteUnreachable, Conflict):
                res["reserved"] = []
            if res["reserved"]:
                _rebuild_packet(store, res, actor, driven)
        try:  # so the other machines see the claim record at their next sync
            gs.push_own(store, git, ex["node"])
        except gs.RemoteUnreachable:
            pass
        gs.note_synced(store, git.remote, git=git)
        return res


def _rebuild_packet(store, res: dict, actor: str, driven: bool) -> None:
    """The turn packet again, now that approvals are reserved for the run (it lists them)."""
    p = store.read(lambda st: packet.build(st, res["goal_id"], res["todo_id"], res["run_id"], res["lease_until"],
                                           actor, clock.now(), res["mode"], fence=res.get("fence"), driven=driven))
    res.update(packet=p, packet_text=packet.render(p))
