"""Pure reducers: events -> state.

The state is a plain JSON-shaped dict (so the snapshot is a straight dump and nothing costs an
import at start-up):

``goals``     id -> {id, objective, done_when, status, priority, verify, scope{allow,deny,protect},
              quota{slots, window (s), cooldown (s), stall_after}, created, updated, created_by,
              runs, no_progress_streak, last_run, last_judged_run (last run without a setup error),
              host, permission_mode, last_progress_fp, updated_seq (seq of the last goal.updated or
              status change, to order it against runs within a second)}
``todos``     id -> {id, goal, title, detail, status, priority, depends_on[], acceptance, verify,
              claim{holder, lease_until, fence, since, node} | None, evidence[], order, created, updated, note,
              done_at, forced{by, why} (only when a human closed it with --force-unverified),
              blocked_by{gate, by, note} (only while blocked by a rejected gate)}
``gates``     id -> {id, goal, kind, question, context, blocks[], status, requested_by, decided_by,
              channel, note, created, decided, standing, used{ts, by, command, count, seq} | None,
              signature{...} | None, reserved{run, node, host, ts, seq} | None (shared goals: the run
              a single-use approval is reserved for through the remote)}
``evidence``  id -> {id, goal, todo, run, kind, summary, exit_code, sha256, commit, ts, actor, command,
              after_run (a goal-level check: the goal's last run when it ran)}
``runs``      id -> {id, goal, todo, agent, fence, started, finished, result, verified,
              evidence[], fp_before, fp_after, lease_until, slots, mode, usage|None, changes|None,
              host, permission_mode, wall_time, finished_seq, setup_error|None (a host that could not
              work, or a verify command that could not run: loopx.kernel.read.verify), scope_start
              (loopx.kernel.read.turnscope.start), out_of_scope [path]|None (files changed outside the scope)}
``agents``    name -> {name, kind, registered, last_seen}
``handoffs``  [{from, to, goal, todo, note, ts}] (last 200)
``spends``    goal -> [[ts, slots, run_id], ...] (the quota ledger)
``costs``     goal -> [[ts, usd|None, tokens|None, run_id], ...] (what finished runs reported costing)
``turns``     goal -> [[ts, run_id], ...] (every run started: the turn budget, whatever the result)
``stalls``    goal -> {todo id or "" (planning turns): [[started ts, seq], ...]}: the current streak of
              consecutive judged runs on that todo without verified progress (newest last, at
              most STALL_KEEP; loopx.kernel.read.stall)
``host_errors`` agent actor -> {reason, message, exit_code, reset_at, run, goal, host, ts}: the
              setup error of the agent's last finished run (cleared by a run that worked)
``decisions`` goal -> last recorded should-run decision
``watches``   id -> {id, goal, name, every (s), check, on, match, todo, timeout (s), status
              (active|paused|removed), created, fired (count), last_fired, last{outcome, matched,
              hash, exit_code, excerpt, ts} | None, failing (bool)} (loopx.kernel.write.watches)
``notices``   [{event_id, type, goal, ts, title, body, reason}] (last 200): events a person should
              hear about (loopx.kernel.read.notices); ``deliveries`` event_id -> {channel: {status,
              attempts, retry_at, error, ts}}
``nodes``     node id -> {host, registered (ts)} from ``node.registered`` (the machine a clone runs
              on, docs/file-format.md), or {legacy: True} for the node a format-1 store's records
              were given by the migration (``store.migrated``)
``meta``      per-stream read facts (lines, bad lines, seq gaps, offsets), unknown types, repairs

Reducers never raise on well-formed records: validation happens before a write, and a record
that refers to an unknown id is ignored (it is still counted). What a well-formed record of each
type carries is declared once, in loopx.kernel.storage.events: ``check_shape`` (every line read),
the store's writer (every line written), the reducers' plain field copies (``_copy``) and
``FOLD_VERSION`` all come from that table.
"""

from __future__ import annotations

from loopx.kernel import reasons
from loopx.kernel.storage import actors, events, quotas, trialfold

# FOLD_VERSION (at the end) is REVISION, REDUCER_DIGEST, the event table's digest and what the
# state and the live view keep; a cache made under another one is rebuilt from the log.
# REDUCER_DIGEST is the digest of the reducers' code (this module, trialfold, logfold, quotas,
# actors and events.py without its table), recorded by `python tests/tools/reducer_digest.py
# --write`; tests/test_events.py fails when the code changed and it was not recorded, so a changed
# reducer always changes FOLD_VERSION. Bump REVISION only for a change that code cannot show.
# 13: REDUCER_DIGEST; 12: FOLD_VERSION carries the event table's digest; 11: the turn ledger
# (`turns`) and per-todo stall streaks; 10: claims carry the node that made them; 9: gates carry
# `reserved`; 8: nodes.
REVISION = 13
REDUCER_DIGEST = "b8ed76f771d7"
HANDOFF_KEEP = 200
APPROVALS_KEPT = 8  # usable approvals per goal and kind a live view keeps (fold.live_view)
EVIDENCE_KEPT = 5  # the newest evidence records per goal a live view keeps: queries.recent_evidence's default
DECIDED = ("approved", "rejected")


def empty() -> dict:
    files = {name: {"lines": 0, "bad": 0, "bad_samples": [], "last_seq": 0, "offset": 0, "tail": "", "segments": 0}
             for name in ("events", "evidence")}
    return {"goals": {}, "todos": {}, "gates": {}, "evidence": {}, "runs": {}, "agents": {},
            "handoffs": [], "spends": {}, "costs": {}, "turns": {}, "stalls": {}, "host_errors": {}, "decisions": {}, "order": 0,
            "watches": {}, "notices": [], "deliveries": {}, "nodes": {},
            "meta": {"files": files, "unknown_types": {}, "repairs": 0, "events": 0, "chain": {}, "hlc": None}}


# The collections a live view prunes (``live_view``): a lookup of an id they do not hold cannot tell
# "no such record" from "a record the view left out" (a done todo, a decided gate, an old run or
# evidence record), so on a live view they are ``Partial`` dicts whose failed lookups raise.
PARTIAL = ("todos", "gates", "runs", "evidence")


class NotInLiveView(KeyError):
    """A lookup on a live view missed: the record may exist and be one the view left out. The store
    answers it by running the plan (``Store.transact``) or the reader (``Store.read``) again on the
    full state, where a miss is a real miss. ``args[0]`` is the id looked up."""


class Partial(dict):
    """One pruned collection of a live view (``PARTIAL``): a dict whose failed lookups by id
    (``c[id]``, ``c.get(id)``, ``id in c``) raise NotInLiveView instead of answering "absent".
    Iteration, ``len``, ``values()``/``items()`` and hits cost what a dict's do. A falsy key (no
    record has an empty id: ``runs.get(goal["last_run"] or "")``) answers as a plain dict. A reader
    that means to ask "does the view hold this id?" (a dependency missing from the view is closed)
    says so with ``held``/``holds``, which never raise. Not marshal-able: ``live_view`` and the
    store unwrap before saving."""

    __slots__ = ()

    def __missing__(self, key):
        raise NotInLiveView(key)

    def get(self, key, default=None):
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if not key:
            return default
        raise NotInLiveView(key)

    def __contains__(self, key) -> bool:
        if dict.__contains__(self, key):
            return True
        if not key:
            return False
        raise NotInLiveView(key)


def held(coll: dict, key, default=None):
    """``coll[key]`` when the state shows it, else ``default``; never raises. On a live view a
    miss means "not in the view" (closed and left out, or unknown), on the full state "unknown":
    use it only where both answers lead to the same decision, and say why at the call site."""
    return dict.get(coll, key, default)


def holds(coll: dict, key) -> bool:
    """Whether the state shows ``key`` in ``coll`` (see ``held``); never raises."""
    return dict.__contains__(coll, key)


def guarded(state: dict) -> dict:
    """``state`` (a live view, in place) with its ``PARTIAL`` collections made ``Partial``. Returns it."""
    for k in PARTIAL:
        c = state.get(k)
        if c is not None and type(c) is not Partial:
            state[k] = Partial(c)
    return state


def is_live(state: dict) -> bool:
    """Whether ``state`` is a live view (it carries the ``closed`` counts) rather than the full state."""
    return "closed" in state


def closed_mark(item_id: str, status: str) -> int:
    """What a closed todo or decided gate adds (XOR) to its goal's ``closed_fp``: 64 bits of
    SHA-256(id NUL status). Order-free, so a live view and the full state agree on it."""
    from loopx.kernel.storage.chain import sha256

    return int.from_bytes(sha256(f"{item_id}\0{status}".encode()).digest()[:8], "big")


def _horizons(state: dict) -> dict:
    """Per goal, the start of the oldest run the stall count may need: the newest
    ``no_progress_streak + 2`` finished runs (open runs are always kept), or the oldest entry of a
    todo's stall streak (``stalls``) when that is older. Todos created and gates decided before
    it cannot change the stall count (loopx.kernel.read.stall)."""
    per: dict[str, list] = {}
    for r in state["runs"].values():
        if r["finished"] is not None:
            per.setdefault(r["goal"], []).append((r["started"], r.get("seq", 0)))
    out = {}
    for gid, g in state["goals"].items():
        runs = sorted(per.get(gid, ()), reverse=True)
        keep = g.get("no_progress_streak", 0) + 2
        out[gid] = runs[:keep][-1] if runs else ("~", 0)  # "~" sorts after every timestamp
        limit = max(1, int(quotas.value(g, "stall_after")))  # only the newest stall_after entries count
        streaks = [starts[-limit:][0][0] for starts in ((state.get("stalls") or {}).get(gid) or {}).values() if starts]
        if streaks and min(streaks) < out[gid][0]:  # a todo's stall streak: what may reset it stays in view
            out[gid] = (min(streaks), 0)
    return out


def live_view(state: dict, now_iso: str | None = None, keep_evidence: int = EVIDENCE_KEPT) -> dict:
    """The part of ``state`` that is still moving, from the full state or from an earlier live view
    (pruning again only moves more records out; the counts add up):

    - todos not done or archived, recurring ones (``every``) whatever their status, closed ones
      created after the goal's stall horizon, and the todo of each goal's last run (``_live_todos``);
    - pending gates, decided ones decided after it, and per goal and kind the newest approval, the
      newest ``APPROVALS_KEPT`` approvals that may still authorise (standing, or unused), the newest
      used one, and every other gate opened after the oldest of these (what the pre-tool guard
      reads); ``approvals_left`` counts the usable approvals left out ({goal: {kind: n}}) and
      ``approvals`` is 1 when the view and those it was pruned from kept and counted them (``_live_gates``);
    - open runs, each goal's last run, the newest run on each todo it keeps (whose agent may still
      run: ``turn.previous_agent_alive``) and the runs after the horizon (``_horizons``, ``_live_runs``);
    - the last ``keep_evidence`` evidence records per goal and each goal's newest goal-level check
      (no todo, no run) per command with the run it followed (``decide.goal_verify_failed``, ``_live_evidence``);
    - everything else as is, plus ``closed`` ({goal: {"done": n, "archived": n}} of todos left out),
      ``closed_fp`` ({goal: int}, the XOR of ``closed_mark`` over the todos and gates left out, so
      fingerprints agree with the full state) and ``hidden`` (how many ids were left out, so new
      ids are drawn long enough not to collide with them; see ids.new_id).

    With ``now_iso``, quota ledger entries older than each goal's window before then are dropped and
    ``spends_cut`` says from when each goal's ledger is complete (``_live_ledgers``).
    Folding a record into a live view gives the live view of the folded full state, except when
    the record updates something the view left out (the reducer then counts it as malformed)."""
    out = {"closed": {g: dict(c) for g, c in state.get("closed", {}).items()},
           "closed_fp": dict(state.get("closed_fp", {})), "hidden": state.get("hidden", 0)}
    horizon = _horizons(state)
    out["todos"] = _live_todos(state, horizon, out)
    checks = _live_evidence(state, keep_evidence, out)
    out["runs"] = _live_runs(state, horizon, out["todos"], checks, out)
    _live_gates(state, horizon, out)
    _live_ledgers(state, now_iso, out)
    # "approvals": this view (and every view it was pruned from) kept the approvals above and counted
    # the rest; one pruned by an older loopx may lack an older standing approval uncounted
    out["approvals"] = 1 if not is_live(state) or state.get("approvals") else 0
    return dict(state, **out, **trialfold.live_part(state))  # research experiments: the summary and the recent trials


def _leave_out(out: dict, goal: str, item_id: str, status: str | None) -> None:
    """Count one record the live view leaves out: ``hidden`` always; a closed todo or decided gate
    (``status``) also marks its goal's ``closed_fp``."""
    out["hidden"] += 1
    if status is not None:
        out["closed_fp"][goal] = out["closed_fp"].get(goal, 0) ^ closed_mark(item_id, status)


def _live_todos(state: dict, horizon: dict, out: dict) -> dict:
    # the todo of each goal's last run: settling and charging the run that just ended look its todo
    # up (turn.load_run, the runner), also when the run itself closed it
    pinned = set()
    for g in state["goals"].values():
        r = held(state["runs"], g.get("last_run") or "")  # a goal's last run is always in a view
        if r is not None:
            pinned.add(r.get("todo"))
    todos = {}
    for tid, t in state["todos"].items():
        if (t["status"] in ("done", "archived") and not t.get("every")  # a recurring todo reopens: kept
                and t["created"] < horizon.get(t["goal"], ("~",))[0] and tid not in pinned):
            c = out["closed"].setdefault(t["goal"], {"done": 0, "archived": 0})
            c[t["status"]] = c.get(t["status"], 0) + 1
            _leave_out(out, t["goal"], tid, t["status"])
        else:
            todos[tid] = t
    return todos


def _live_evidence(state: dict, keep_evidence: int, out: dict) -> dict:
    """Sets ``out["evidence"]``; returns the newest goal-level check per (goal, command)
    (decide.goal_verify_failed), which the view keeps with the run it followed."""
    per_goal: dict[str, list] = {}
    checks: dict[tuple, dict] = {}
    for e in state["evidence"].values():
        per_goal.setdefault(e["goal"], []).append(e)
        if e.get("command") and not e.get("todo") and not e.get("run"):
            key = (e["goal"], e["command"])
            if key not in checks or e.get("seq", 0) >= checks[key].get("seq", 0):
                checks[key] = e
    # the newest by seq, as queries.recent_evidence reads them (a view's insertion order is not the
    # log's: the checks it kept come after the records kept with them)
    keep = {e["id"] for evs in per_goal.values() for e in sorted(evs, key=_seq)[-keep_evidence:]}
    keep.update(e["id"] for e in checks.values())
    evidence = {k: e for k, e in state["evidence"].items() if k in keep}
    out["hidden"] += len(state["evidence"]) - len(evidence)
    out["evidence"] = evidence
    return checks


def _seq(rec: dict) -> int:
    return rec.get("seq", 0)


def _live_runs(state: dict, horizon: dict, todos: dict, checks: dict, out: dict) -> dict:
    keep_runs = {g.get(k) for g in state["goals"].values() for k in ("last_run", "last_judged_run")}
    keep_runs.update(e.get("after_run") for e in checks.values())  # what each kept check followed
    newest: dict[str, tuple] = {}  # kept todo -> (seq, id) of its newest run (turn.previous_agent_alive)
    for k, r in state["runs"].items():
        tid = r.get("todo")
        if tid in todos and (tid not in newest or r.get("seq", 0) > newest[tid][0]):
            newest[tid] = (r.get("seq", 0), k)
    keep_runs.update(k for _, k in newest.values())
    runs = {}
    for k, r in state["runs"].items():
        if r["finished"] is None or k in keep_runs or (r["started"], r.get("seq", 0)) >= horizon.get(r["goal"], ("",)):
            runs[k] = r
        else:
            _leave_out(out, r["goal"], k, None)
    return runs


def _approvals_kept(state: dict, out: dict) -> dict:
    """Per (goal, kind) the ``decided_seq`` of the approvals the pre-tool guard reads (gate_state,
    last_used): the newest approval, the newest APPROVALS_KEPT that may still authorise (standing,
    or single-use and unused: the guard covers with the newest of them) and the newest used
    single-use one (a denial names it). The usable approvals left out are counted in
    ``out["approvals_left"]`` ({goal: {kind: n}}): a denial on a view that left some out asks the
    full state (an older one may cover the action once the kept ones are used)."""
    newest_seq: dict[tuple, int] = {}
    used: dict[tuple, int] = {}
    usable: dict[tuple, list] = {}
    for g in state["gates"].values():
        if g["status"] == "approved":
            key, d = (g["goal"], g["kind"]), g.get("decided_seq") or 0
            newest_seq[key] = max(newest_seq.get(key, -1), d)
            if g.get("standing") or not g.get("used"):
                usable.setdefault(key, []).append(d)
            else:
                used[key] = max(used.get(key, -1), d)
    keep_approved = {key: {d} for key, d in newest_seq.items()}
    for key, d in used.items():
        keep_approved[key].add(d)
    left = out["approvals_left"] = {gid: dict(n) for gid, n in (state.get("approvals_left") or {}).items()}
    for key, ds in usable.items():
        ds.sort()
        keep_approved[key].update(ds[-APPROVALS_KEPT:])
        n = sum(1 for d in ds[:-APPROVALS_KEPT] if d not in keep_approved[key])
        if n:
            per = left.setdefault(key[0], {})
            per[key[1]] = per.get(key[1], 0) + n
    return keep_approved


def _live_gates(state: dict, horizon: dict, out: dict) -> None:
    """Sets ``out["gates"]``: pending gates, those decided after the horizon, the approvals
    ``_approvals_kept`` names and every other gate opened after the oldest of those."""
    keep_approved = _approvals_kept(state, out)
    cover = {key: min(ds) for key, ds in keep_approved.items()}
    gates = {}
    for k, g in state["gates"].items():
        key = (g["goal"], g["kind"])
        floor = cover.get(key)
        if (g["status"] == "pending" or (g.get("decided") or "") >= horizon.get(g["goal"], ("~",))[0]
                or (floor is not None and ((g["status"] == "approved" and (g.get("decided_seq") or 0) in keep_approved[key])
                                           or (g["status"] != "approved" and g.get("seq", 0) > floor)))):
            gates[k] = g
        else:
            _leave_out(out, g["goal"], k, g["status"])
    out["gates"] = gates


def _live_ledgers(state: dict, now_iso: str | None, out: dict) -> None:
    """Sets ``spends``, ``costs``, ``turns`` and ``spends_cut`` of ``out``: with ``now_iso``, the
    ledger entries a budget window ending now or later can see; without, the ledgers as they are."""
    cut = dict(state.get("spends_cut", {}))
    ledgers = {"spends": state["spends"], "costs": state.get("costs", {}), "turns": state.get("turns", {})}
    if now_iso is not None:
        from loopx.kernel.storage import clock

        now = clock.parse_ts(now_iso)
        kept: dict[str, dict] = {name: {} for name in ledgers}
        for gid in set().union(*ledgers.values()):
            window = quotas.value(state["goals"].get(gid), "window")
            cut[gid] = max(cut.get(gid, ""), clock.iso(now - clock.timedelta(seconds=window)))
            for name, ledger in ledgers.items():
                kept[name][gid] = [e for e in ledger.get(gid, []) if e[0] > cut[gid]]
        ledgers = kept
    out.update(ledgers, spends_cut=cut)


# The field types and required ids of each event type (loopx.kernel.storage.events.plan), as
# (key, types, required, list of strings), built on the first check of that type (check_shape runs
# on every line read; a command reads a few types, and a read that folds no line builds none)
_PLANS: dict[str, tuple] = {}
_ABSENT = object()


def check_shape(rec: dict) -> None:
    """Raise ValueError when ``rec`` (a decoded line) does not have the shape folding relies on."""
    if not isinstance(rec.get("ts"), str) or not isinstance(rec.get("actor", ""), str):
        raise ValueError("ts or actor is not a string")
    goal = rec.get("goal")
    data = rec.get("data")
    if not (goal is None or isinstance(goal, str)) or not isinstance(data, dict):
        raise ValueError("goal or data has the wrong type")
    check_data(rec["type"], data)


def check_data(event_type: str, data: dict) -> None:
    """Raise ValueError when ``data`` breaks the fields ``events.EVENTS`` declares for
    ``event_type`` (a required id missing, a value of the wrong type, a list of non-strings).
    A type the table does not declare passes (folding counts it as unknown)."""
    plan = _PLANS.get(event_type)
    if plan is None:
        plan = _PLANS[event_type] = events.plan(event_type)
    if plan:
        for key, types, required, strs in plan:
            value = data.get(key, _ABSENT)
            if value is _ABSENT:
                if required:
                    raise ValueError(f"{event_type}: field {key!r} is missing")
            elif types and not isinstance(value, types):
                raise ValueError(f"{event_type}: field {key!r} has the wrong type")
            elif strs and isinstance(value, list) and not all(isinstance(x, str) for x in value):
                raise ValueError(f"{event_type}: {key!r} must list strings")


def _copy(target: dict, r: dict, d: dict) -> None:
    """Copy into ``target`` the fields of ``d`` that ``r``'s type declares ``COPY`` and ``d`` has."""
    for k in events.copied(r["type"]):
        if k in d:
            target[k] = d[k]


def apply(state: dict, rec: dict) -> None:
    """Fold one record into ``state`` (in place)."""
    state["meta"]["events"] += 1
    actor = rec.get("actor") or ""
    name = actors.agent_name(actor)
    if name is not None:
        agent = state["agents"].get(name)
        if agent is None:
            agent = state["agents"][name] = {"name": name, "kind": "unknown",
                                                  "registered": None, "last_seen": None}
        ts = rec.get("ts")
        if ts and (agent["last_seen"] is None or ts > agent["last_seen"]):
            agent["last_seen"] = ts  # the newest, whatever order the two streams are folded in
    fn = REDUCERS.get(rec["type"])
    if fn is None:
        unknown = state["meta"]["unknown_types"]
        unknown[rec["type"]] = unknown.get(rec["type"], 0) + 1
        return
    data = rec.get("data")
    if not isinstance(data, dict):
        return
    try:
        fn(state, rec, data)
        if rec["type"] in events.NOTICE_TYPES:
            _notice(state, rec, data)
    except (KeyError, TypeError, AttributeError, ValueError):
        state["meta"]["malformed"] = state["meta"].get("malformed", 0) + 1


# ------------------------------------------------------------------- goals
def _goal_started(s, r, d):
    gid = r["goal"]
    scope = d.get("scope") or {}
    quota = d.get("quota") or {}
    s["goals"][gid] = {
        "id": gid, "objective": d.get("objective", ""), "done_when": d.get("done_when"),
        "status": "active", "priority": d.get("priority", 0), "verify": d.get("verify"),
        "scope": {"allow": list(scope.get("allow") or []), "deny": list(scope.get("deny") or []),
                  "protect": list(scope.get("protect") or [])},
        "quota": {k: quota.get(k, v) for k, v in quotas.DEFAULTS.items()},
        "created": r["ts"], "updated": r["ts"], "created_by": r.get("actor"),
        "runs": 0, "no_progress_streak": 0, "last_run": None, "status_note": None,
    }


def _goal_updated(s, r, d):
    g = s["goals"][r["goal"]]
    _copy(g, r, d)
    g["updated"] = r["ts"]
    g["updated_seq"] = r["seq"]


def _goal_status(status):
    def reducer(s, r, d):
        g = s["goals"][r["goal"]]
        g["status"] = status
        g["status_note"] = d.get("note")
        g["updated"] = r["ts"]
        g["updated_seq"] = r["seq"]
        if status == "active":
            g["no_progress_streak"] = 0
    return reducer


def _scope_set(s, r, d):
    g = s["goals"][r["goal"]]
    for k in events.copied("scope.set"):
        if k in d:
            g["scope"][k] = list(d[k])
    g["updated"] = r["ts"]
    g["updated_seq"] = r["seq"]


def _quota_set(s, r, d):
    g = s["goals"][r["goal"]]
    _copy(g["quota"], r, d)
    g["updated"] = r["ts"]
    g["updated_seq"] = r["seq"]


def _guard_set(s, r, d):
    """The pre-tool guard config (loopx.guard.verdicts): rules, protected branches, defaults on/off."""
    g = s["goals"][r["goal"]]
    g["guard"] = {"rules": list(d.get("rules") or []), "branches": list(d.get("branches") or []),
                  "defaults": d.get("defaults", True)}
    g["updated"] = r["ts"]


# ------------------------------------------------------------------- todos
def _todo_added(s, r, d):
    s["order"] += 1
    tid = d["todo_id"]
    s["todos"][tid] = {
        "id": tid, "goal": r["goal"], "title": d.get("title", ""), "detail": d.get("detail"),
        "status": "open", "priority": d.get("priority", 0), "depends_on": list(d.get("depends_on") or []),
        "depends_on_goals": list(d.get("depends_on_goals") or []),
        "acceptance": d.get("acceptance"), "verify": d.get("verify"), "claim": None, "evidence": [],
        "order": s["order"], "created": r["ts"], "updated": r["ts"], "note": None, "seq": r["seq"],
        "created_by": r.get("actor"), "every": d.get("every"), "watch": d.get("watch"),
    }


def _todo(s, d):
    return s["todos"][d["todo_id"]]


def _todo_updated(s, r, d):
    t = _todo(s, d)
    _copy(t, r, d)
    t["updated"] = r["ts"]


def _todo_claimed(s, r, d):
    t = _todo(s, d)
    t["claim"] = {"holder": d["holder"], "lease_until": d["lease_until"], "fence": r["seq"], "since": r["ts"],
                  "node": r.get("node")}  # the machine is part of the holder (loopx.kernel.storage.machines)
    t["status"] = "claimed"
    t["updated"] = r["ts"]


def _todo_renewed(s, r, d):
    t = _todo(s, d)
    if t["claim"]:
        t["claim"]["lease_until"] = d["lease_until"]
    t["updated"] = r["ts"]


def _todo_to(status, keep_claim=False):
    def reducer(s, r, d):
        t = _todo(s, d)
        t["status"] = status
        if not keep_claim:
            t["claim"] = None
        if "note" in d or "reason" in d:
            t["note"] = d.get("note") or d.get("reason")
        if status == "blocked" and d.get("gate_id"):  # a human rejected the gate that named it
            t["blocked_by"] = {"gate": d["gate_id"], "by": r.get("actor"), "note": d.get("gate_note") or d.get("reason"),
                               "kind": d.get("gate_kind")}
        else:
            t.pop("blocked_by", None)
        if status == "done":
            t["evidence"] = list(d.get("evidence") or [])
            t["done_at"] = r["ts"]
            if d.get("forced"):  # a human closed it without passing evidence
                t["forced"] = {"by": r.get("actor"), "why": d.get("unverified")}
        else:
            t.pop("forced", None)
        t["updated"] = r["ts"]
    return reducer


# ------------------------------------------------------------------- gates
def _gate_opened(s, r, d):
    gid = d["gate_id"]
    s["gates"][gid] = {
        "id": gid, "goal": r["goal"], "kind": d.get("kind", "custom"), "question": d.get("question", ""),
        "context": d.get("context"), "blocks": list(d.get("blocks") or []), "status": "pending",
        "requested_by": r.get("actor"), "decided_by": None, "channel": None, "note": None,
        "created": r["ts"], "decided": None, "run": d.get("run"), "seq": r["seq"], "decided_seq": None,
        "standing": False, "used": None, "signature": None, "decided_node": None, "reserved": None,
    }


def _gate_decided(status):
    def reducer(s, r, d):
        g = s["gates"][d["gate_id"]]
        g["status"] = status
        g["decided_by"] = r.get("actor")
        g["decided_node"] = r.get("node")
        g["channel"] = d.get("channel")
        g["note"] = d.get("note")
        g["decided"] = r["ts"]
        g["decided_seq"] = r["seq"]
        g["standing"] = bool(d.get("standing")) and status == "approved"
        g["signature"] = d.get("signature") if isinstance(d.get("signature"), dict) else None
    return reducer


def _gate_used(s, r, d):
    g = s["gates"][d["gate_id"]]
    uses = int((g.get("used") or {}).get("count") or 0) + 1
    g["used"] = {"ts": r["ts"], "by": r.get("actor"), "command": d.get("command"), "count": uses, "seq": r["seq"]}


def _gate_reserved(s, r, d):
    g = s["gates"][d["gate_id"]]
    g["reserved"] = {"run": d["run_id"], "node": d["node"], "host": d.get("host"), "ts": r["ts"], "seq": r["seq"]}


# ------------------------------------------------------------------- evidence, agents
def _evidence_added(s, r, d):
    eid = d["evidence_id"]
    s["evidence"][eid] = {
        "id": eid, "goal": r["goal"], "todo": d.get("todo"), "run": d.get("run"), "kind": d.get("kind"),
        "summary": (d.get("summary") or "")[:300], "exit_code": d.get("exit_code"),
        "sha256": d.get("sha256"), "commit": d.get("commit"), "ts": r["ts"], "actor": r.get("actor"),
        "seq": r["seq"], "command": d.get("command"), "after_run": d.get("after_run"),
    }


def _agent_registered(s, r, d):
    name = d["name"]
    a = s["agents"].get(name) or {"name": name, "last_seen": None}
    a["kind"] = d.get("kind", "unknown")
    a["registered"] = r["ts"]
    s["agents"][name] = a


def _handoff_recorded(s, r, d):
    s["handoffs"].append({"from": d.get("from"), "to": d.get("to"), "goal": r.get("goal"),
                          "todo": d.get("todo"), "note": d.get("note"), "ts": r["ts"]})
    if len(s["handoffs"]) > HANDOFF_KEEP:
        del s["handoffs"][:-HANDOFF_KEEP]


# ------------------------------------------------------------------- runs and quota
def _run_started(s, r, d):
    rid = d["run_id"]
    s["runs"][rid] = {
        "id": rid, "seq": r["seq"], "goal": r["goal"], "todo": d.get("todo_id"), "agent": d.get("agent"),
        "fence": d.get("fence"), "started": r["ts"], "finished": None, "result": None, "verified": False,
        "evidence": [], "fp_before": d.get("fingerprint"), "fp_after": None,
        "lease_until": d.get("lease_until"), "slots": 0, "mode": d.get("mode", "work"),
        "usage": None, "changes": None, "host": None, "permission_mode": None, "wall_time": None, "setup_error": None,
        "node": r.get("node"), "scope_start": d.get("scope_start"), "out_of_scope": None,
    }
    g = s["goals"].get(r["goal"])
    if g is not None:
        g["last_run"] = rid
        g["runs"] = g.get("runs", 0) + 1
        s.setdefault("turns", {}).setdefault(r["goal"], []).append([r["ts"], rid])


def _run_finished(s, r, d):
    run = s["runs"][d["run_id"]]
    run["finished"] = r["ts"]
    run["result"] = d.get("result")
    run["verified"] = bool(d.get("verified"))
    run["evidence"] = list(d.get("evidence") or [])
    run["fp_after"] = d.get("fingerprint")
    run["note"] = d.get("note")
    run["finished_seq"] = r["seq"]
    if d.get("out_of_scope"):  # files the turn changed outside the goal's scope (loopx.kernel.read.turnscope)
        run["out_of_scope"] = list(d["out_of_scope"])
    if d.get("reaped"):
        run["reaped"] = True
    _run_report(s, r, run, d)
    setup = run.get("setup_error")
    g = s["goals"].get(run["goal"])
    if g is not None and not setup:  # a host that could not work says nothing about the goal
        g["last_judged_run"] = run["id"]
        if run["result"] in ("progress", "completion"):
            g["no_progress_streak"] = 0
        elif run["result"] in ("no_progress", "failed"):
            g["no_progress_streak"] = g.get("no_progress_streak", 0) + 1
        _stall_step(s, run)
    agent = run.get("agent")
    if agent and setup and str(setup.get("reason") or "").startswith("host_"):  # verify_broken is the goal's
        s.setdefault("host_errors", {})[agent] = dict(setup, run=run["id"], goal=run["goal"], host=run.get("host"), ts=r["ts"])
    elif agent and not d.get("reaped"):
        s.setdefault("host_errors", {}).pop(agent, None)


STALL_KEEP = 50


def _stall_step(s, run):
    """The todo's stall streak after a judged run: verified progress ends it; an unverified
    ``progress``/``completion``, ``no_progress`` or ``failed`` extends it; ``blocked`` (a gate was
    asked) neither. A completion that closed the todo ends it too (the todo is no longer worked),
    and so does a planning turn's progress (it added todos, which anyone can see)."""
    per = s.setdefault("stalls", {}).setdefault(run["goal"], {})
    key = run.get("todo") or ""
    res = run["result"]
    if res in ("progress", "completion") and (run["verified"] or not key  # a planning turn's progress: new todos
                                              or (s["todos"].get(key) or {}).get("status") in ("done", "archived")):
        per.pop(key, None)
    elif res in ("progress", "completion", "no_progress", "failed"):
        per[key] = (per.get(key) or [])[-(STALL_KEEP - 1):] + [[run["started"], run.get("seq", 0)]]


def _run_report(s, r, run, d):
    """Usage, changes, host and setup error of a run (``run.finished`` or ``run.reported``); the
    reported cost goes into the goal's cost ledger once per run."""
    _copy(run, r, d)
    u = d.get("usage")
    if isinstance(u, dict) and not run.get("costed"):
        usd = u.get("cost_usd") if isinstance(u.get("cost_usd"), (int, float)) else None
        tok = u.get("total_tokens") if isinstance(u.get("total_tokens"), (int, float)) else None
        if usd is not None or tok is not None:
            s.setdefault("costs", {}).setdefault(run["goal"], []).append([r["ts"], usd, tok, run["id"]])
            run["costed"] = True


def _run_reported(s, r, d):
    run = s["runs"][d["run_id"]]
    _run_report(s, r, run, d)


def _run_renewed(s, r, d):
    s["runs"][d["run_id"]]["lease_until"] = d.get("lease_until")


def _run_handed_over(s, r, d):
    """A human moved an open run (and its claim) to the node ``d["node"]``: only there may it be
    resumed and finished from now on (loopx.kernel.storage.machines)."""
    run = s["runs"][d["run_id"]]
    was = run.get("node")
    run["node"] = d["node"]
    t = dict.get(s["todos"], run.get("todo") or "")
    c = (t or {}).get("claim")
    if c and c.get("holder") == run.get("agent") and c.get("node") == was:
        c["node"] = d["node"]


def _run_attached(s, r, d):
    s["runs"][d["run_id"]]["process"] = {k: d.get(k) for k in events.copied(r["type"])}


def _quota_spent(s, r, d):
    run_id = d.get("run_id")
    slots = d.get("slots", 1)
    s["spends"].setdefault(r["goal"], []).append([r["ts"], slots, run_id])
    run = held(s["runs"], run_id)  # a run the live view left out: its slots are history, never read
    if run is not None:
        run["slots"] = run.get("slots", 0) + slots
        run["spent_seq"] = r["seq"]


def _decision_recorded(s, r, d):
    s["decisions"][r.get("goal") or "*"] = dict(d, ts=r["ts"])


def _node_registered(s, r, d):
    """The machine name of the node that wrote the record (the newest registration wins)."""
    s.setdefault("nodes", {})[r["node"]] = {"host": d["host"], "registered": r["ts"]}


def _store_migrated(s, r, d):
    if isinstance(d.get("legacy_node"), str):
        s.setdefault("nodes", {}).setdefault(d["legacy_node"], {"legacy": True})


def _store_repaired(s, r, d):
    s["meta"]["repairs"] = s["meta"].get("repairs", 0) + 1


def _noop(s, r, d):
    return None


# ------------------------------------------------------------------- watches (loopx.kernel.write.watches)
def _watch_added(s, r, d):
    wid = d["watch_id"]
    s["watches"][wid] = {
        "id": wid, "goal": r["goal"], "name": d["name"], "every": d["every"], "check": d["check"],
        "on": d.get("on", "change"), "match": d.get("match"), "todo": d.get("todo"),
        "timeout": d.get("timeout", 60), "status": "active", "created": r["ts"], "fired": 0,
        "last_fired": None, "last": None, "failing": False,
    }


def _watch_status(status):
    def reducer(s, r, d):
        s["watches"][d["watch_id"]]["status"] = status
    return reducer


def _watch_result(fired):
    def reducer(s, r, d):
        w = s["watches"][d["watch_id"]]
        w["last"] = {k: d.get(k) for k in events.copied(r["type"])}
        w["last"]["ts"] = r["ts"]
        w["failing"] = bool(d.get("failing"))
        if fired:
            w["fired"] = w.get("fired", 0) + 1
            w["last_fired"] = r["ts"]
    return reducer


# ------------------------------------------------------------------- notices (loopx.kernel.read.notices)
NOTICE_KEEP = 200
# decision reasons a person hears about: the ``notifies`` column of the reason registry
NOTICE_REASONS = reasons.notifying()


def _notice(s, r, d):
    t, goal = r["type"], r.get("goal")
    if t == "gate.opened":
        title, body, reason = f"loopx: gate {d['gate_id']} on {goal}", d.get("question", ""), "gate_pending"
    elif t == "goal.completed":
        title, body, reason = f"loopx: goal {goal} finished", d.get("note") or "the goal is done", "goal_done"
    else:
        reason = d.get("reason")
        if reason not in NOTICE_REASONS:
            return
        title, body = f"loopx: goal {goal} needs you ({reason})", d.get("message") or ""
    if not r.get("id"):
        return
    s["notices"].append({"event_id": r["id"], "type": t, "goal": goal, "ts": r["ts"], "title": title,
                         "body": str(body)[:300], "reason": reason})
    if t == "gate.opened":  # what the notification's command and dashboard link name (loopx.notify.actions)
        s["notices"][-1]["gate_id"] = d["gate_id"]
    if len(s["notices"]) > NOTICE_KEEP:
        del s["notices"][:-NOTICE_KEEP]


def _notify_result(status):
    def reducer(s, r, d):
        per = s["deliveries"].setdefault(d["event_id"], {})
        prev = per.get(d["channel"]) or {}
        per[d["channel"]] = {"status": status, "attempts": d.get("attempt", prev.get("attempts", 0) + 1),
                             "retry_at": d.get("retry_at"), "error": d.get("error"), "ts": r["ts"]}
        if len(s["deliveries"]) > NOTICE_KEEP * 2:
            keep = {n["event_id"] for n in s["notices"]}
            for k in [k for k in s["deliveries"] if k not in keep]:
                del s["deliveries"][k]
    return reducer


REDUCERS = {
    "goal.started": _goal_started,
    "goal.updated": _goal_updated,
    "goal.paused": _goal_status("paused"),
    "goal.resumed": _goal_status("active"),
    "goal.completed": _goal_status("done"),
    "goal.stopped": _goal_status("stopped"),
    "scope.set": _scope_set,
    "quota.set": _quota_set,
    "guard.set": _guard_set,
    "todo.added": _todo_added,
    "todo.updated": _todo_updated,
    "todo.claimed": _todo_claimed,
    "todo.renewed": _todo_renewed,
    "todo.released": _todo_to("open"),
    "todo.blocked": _todo_to("blocked"),
    "todo.reopened": _todo_to("open"),
    "todo.completed": _todo_to("done"),
    "todo.archived": _todo_to("archived"),
    "gate.opened": _gate_opened,
    "gate.approved": _gate_decided("approved"),
    "gate.rejected": _gate_decided("rejected"),
    "gate.used": _gate_used,
    "gate.reserved": _gate_reserved,
    "evidence.added": _evidence_added,
    "agent.registered": _agent_registered,
    "handoff.recorded": _handoff_recorded,
    "run.started": _run_started,
    "run.renewed": _run_renewed,
    "run.attached": _run_attached,
    "run.handed_over": _run_handed_over,
    "run.finished": _run_finished,
    "run.reported": _run_reported,
    "quota.spent": _quota_spent,
    "decision.recorded": _decision_recorded,
    "store.repaired": _store_repaired,
    "project.noted": _noop,
    "store.migrated": _store_migrated,
    "node.registered": _node_registered,
    "watch.added": _watch_added,
    "watch.paused": _watch_status("paused"),
    "watch.resumed": _watch_status("active"),
    "watch.removed": _watch_status("removed"),
    "watch.checked": _watch_result(False),
    "watch.fired": _watch_result(True),
    "notify.delivered": _notify_result("delivered"),
    "notify.failed": _notify_result("failed"),
    **trialfold.REDUCERS,  # research experiments (issue 20)
}


def version(table: dict | None = None) -> str:
    """The fold's version: ``REVISION``, ``REDUCER_DIGEST`` (the reducers' code), the digest of the
    event table (default ``events.EVENTS``) and the numbers of what the folded state and the live
    view keep. A cached snapshot, live view or checkpoint made under another version is stale and
    rebuilt from the log."""
    keeps = (HANDOFF_KEEP, APPROVALS_KEPT, EVIDENCE_KEPT, STALL_KEEP, NOTICE_KEEP, trialfold.LIVE_TRIALS, sorted(NOTICE_REASONS))
    return f"{REVISION}.{REDUCER_DIGEST}.{events.digest(table)}.{events.crc(repr(keeps).encode())}"


def __getattr__(name: str):
    """``FOLD_VERSION``, what every cache of folded state is stamped with (store: snapshots and
    checkpoints), computed the first time it is asked for: ``version()`` marshals the event table
    (0.6M instructions), and a command whose live view was written by this same code knows it is
    current without it (``CODE_STAMP``, ``caches._same_fold``)."""
    if name == "FOLD_VERSION":
        globals()["FOLD_VERSION"] = v = version()
        return v
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def code_files() -> tuple[str, ...]:
    """The source files ``version()`` is made from: this module (``REVISION``, ``REDUCER_DIGEST``
    and what the state keeps), the event table, the notifying reasons and the trials' limits."""
    return (__file__, events.__file__, reasons.__file__, trialfold.__file__)


def _code_stamp() -> tuple | None:
    """``(REVISION, REDUCER_DIGEST, (path, mtime_ns, size) of each of code_files())``; None when one
    cannot be read. The two constants come from the code this process runs, the rest from the
    files when it was loaded (``CODE_STAMP``)."""
    import os

    try:
        return (REVISION, REDUCER_DIGEST, *((f, st.st_mtime_ns, st.st_size) for f in code_files() for st in (os.stat(f),)))
    except (OSError, TypeError):
        return None


# What the caches this code writes are stamped with beside FOLD_VERSION (caches._same_fold), taken
# when the code is loaded, not when a cache is saved: a process that runs on while its sources are
# replaced (the runner, the dashboard, across an upgrade) still stamps what it folded with its own
# code. The reducers' digest is the running code's own, so a reducer change is told apart even
# where an edit keeps a file's size and mtime (restored mtimes: rsync -a, touch -d, clamped builds).
CODE_STAMP = _code_stamp()
