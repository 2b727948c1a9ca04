"""Goal operations: start, update, status changes, scope and quota policy.

Each function runs one compare-and-append transaction on a Store and returns a JSON-able dict.
Errors: UsageError (exit 2) for bad input or unknown ids, Conflict (exit 4) for a state that
forbids the change, StoreBusy/ReadOnlyStore from the store.
"""

from __future__ import annotations

from loopx import hostfacts
from loopx.errors import Conflict, FieldError, HumanRequired, UsageError, either
from loopx.kernel import humans
from loopx.kernel.read import localtime, queries, validate
from loopx.kernel.read.verify import open_error
from loopx.kernel.storage import actors, clock, ids, quotas
from loopx.kernel.storage.store import Draft, Store
from loopx.kernel.write.todos import added_drafts

PERMISSION_MODES = ("read-only", "edit", "full")
UPDATABLE = ("objective", "done_when", "verify", "priority", "host", "permission_mode", "max_parallel", "shared", "tz")
SCOPE_LISTS = ("allow", "deny", "protect")
QUOTA_FIELDS = ("slots", "window", "cooldown", "stall_after", "max_usd", "max_tokens", "host_reserve", "use_leftover",
                "turns")
OFF = ("off", "none", "")
STATUS_EVENTS = {"paused": "goal.paused", "active": "goal.resumed", "done": "goal.completed",
                 "stopped": "goal.stopped"}
ALLOWED_FROM = {"paused": ("active",), "active": ("paused", "stopped", "done"),
                "done": ("active", "paused"), "stopped": ("active", "paused")}


def quota_policy(slots=None, window=None, cooldown=None, stall_after=None, max_usd=None, max_tokens=None,
                 host_reserve=None, use_leftover=None, turns=None) -> dict:
    """Validated quota fields (only those given). ``window``/``cooldown``/``use_leftover`` accept
    durations; ``max_usd`` a decimal amount, ``max_tokens`` a count, ``host_reserve`` a percentage
    0-100; ``turns`` a count of turns per window (``off``: the default, twice the slots);
    ``off`` clears ``max_usd``/``max_tokens``/``use_leftover`` (stored as None / 0).
    Raises FieldError naming the field."""
    out: dict = {}
    if max_usd is not None:
        if str(max_usd).strip().lower() in OFF:
            out["max_usd"] = None
        else:
            try:
                v = float(str(max_usd).strip().lstrip("$"))
            except ValueError:
                v = -1.0
            if not (0 <= v <= 1_000_000) or v != v:
                raise FieldError("max_usd", "{field} " + repr(max_usd) + " is not an amount", "use e.g. {field} 5.00 (or off)")
            out["max_usd"] = round(v, 6)
    if max_tokens is not None:
        out["max_tokens"] = None if str(max_tokens).strip().lower() in OFF else \
            validate.count(max_tokens, "max_tokens", high=10**12)
    if host_reserve is not None:
        out["host_reserve"] = validate.count(str(host_reserve).rstrip("%"), "host_reserve", low=0, high=100)
    if use_leftover is not None:
        out["use_leftover"] = 0 if str(use_leftover).strip().lower() in OFF else clock.parse_duration(use_leftover)
    if slots is not None:
        out["slots"] = validate.count(slots, "slots", high=100_000)
    if window is not None:
        w = clock.parse_duration(window)
        if w < 60:
            raise FieldError("window", "{field} must be at least 60s", "use e.g. {field} 24h")
        out["window"] = w
    if cooldown is not None:
        out["cooldown"] = clock.parse_duration(cooldown) if str(cooldown) not in ("0", "0s") else 0
    if stall_after is not None:
        out["stall_after"] = validate.count(stall_after, "stall_after", low=1, high=1000)
    if turns is not None:
        out["turns"] = None if str(turns).strip().lower() in OFF else \
            validate.count(turns, "turns", low=1, high=1_000_000)
    return out


def start_goal(store: Store, actor: str, *, objective: str, goal_id: str | None = None,
               done_when: str | None = None, verify: str | None = None, priority: int = 0,
               allow=None, deny=None, protect=None, quota: dict | None = None,
               todos: list | None = None) -> dict:
    """Start a goal (``goal.started``) with optional first todos: titles, or ``{"title", "verify"}``
    dicts for todos with their own verify command. Returns {goal_id, todo_ids}."""
    objective = validate.text(objective, "objective")
    done_when = validate.text(done_when, "done_when", required=False)
    verify = validate.command(verify, "verify")
    if goal_id is not None:
        ids.check_goal_id(goal_id)
    protect = [validate.choice(p, validate.GATE_KINDS, "protected action") for p in protect or []]
    scope = {"allow": validate.globs(allow, "allow"), "deny": validate.globs(deny, "deny"),
             "protect": sorted(set(protect))}
    policy = dict(quotas.DEFAULTS, **(quota or {}))
    titles: list[str | tuple[str, str | None]] = []
    for t in todos or []:  # a title, or {"title", "verify"} for a todo with its own verify command
        if isinstance(t, dict):
            v = validate.command(t.get("verify"), "todo_verify")
            titles.append((validate.text(t.get("title"), "todo", limit=validate.MAX_TITLE), v))
        else:
            titles.append(validate.text(t, "todo", limit=validate.MAX_TITLE))
    out: dict = {}

    def plan(state, now):
        gid = goal_id
        lost = _lost_goals(state)
        if gid is None:
            base = ids.slugify(objective)
            gid, n = base, 2
            while gid in state["goals"] or gid in lost:
                gid = f"{base[:60]}-{n}"
                n += 1
        elif gid in state["goals"]:
            raise Conflict(f"goal {gid!r} already exists", "look at it, or pick another goal_id",
                           details={"reason": "goal_exists", "goal": gid, "field": "goal_id"})
        elif gid in lost:
            raise Conflict(f"goal {gid!r} has records (todos, gates or spends) but its start could not be read",
                           "find out why first (the store has unreadable lines), or pick another goal_id",
                           code="goal_unreadable", details={"goal": gid, "field": "goal_id"})
        drafts = [Draft("goal.started", gid, {"objective": objective, "done_when": done_when,
                                              "verify": verify, "priority": priority, "scope": scope,
                                              "quota": policy})]
        tids = added_drafts(state, gid, titles, drafts)
        out.update(goal_id=gid, todo_ids=tids)
        return drafts

    store.transact(plan, actor=actor)
    return out


def _lost_goals(state: dict) -> set:
    """Goal ids that records still name (todos, gates, runs, spends) but whose ``goal.started`` is
    not in the state: its line was unreadable (edited, damaged). A new goal must not take such an
    id, or it would inherit the lost goal's todos, spent budget and approved gates."""
    goals = state["goals"]
    lost = {g for g in state.get("spends") or {} if g not in goals}
    for coll in ("todos", "gates", "runs"):
        for v in (state.get(coll) or {}).values():
            g = v.get("goal") if isinstance(v, dict) else None
            if g and g not in goals:
                lost.add(g)
    return lost


MAX_PARALLEL = 64


def max_parallel(goal: dict) -> int:
    """How many runners may drive ``goal`` at once (default 1)."""
    return int(goal.get("max_parallel") or 1)


def update_goal(store: Store, actor: str, goal_id: str | None, on_raise=None, **fields) -> dict:
    """Change objective, done_when, verify, priority or max_parallel (``goal.updated``).

    ``max_parallel`` (1..64) is how many runners may drive the goal at once, each in its own git
    worktree (docs/multi-agent.md). Raising it is a human decision: ``on_raise()`` is called under
    the store lock when the new value is above the current one and raises to refuse (the CLI
    passes ``loopx.kernel.humans.require_human``)."""
    changes: dict = {}
    if fields.get("objective") is not None:
        changes["objective"] = validate.text(fields["objective"], "objective")
    if fields.get("done_when") is not None:
        changes["done_when"] = validate.text(fields["done_when"], "done_when")
    if fields.get("verify") is not None:
        changes["verify"] = validate.command(fields["verify"], "verify")
    if fields.get("priority") is not None:
        changes["priority"] = validate.count(fields["priority"], "priority", low=-1000, high=1000)
    if fields.get("host") is not None:
        changes["host"] = validate.choice(fields["host"], tuple(hostfacts.agent_hosts()), "host")
    if fields.get("permission_mode") is not None:
        if actors.is_agent(actor):
            raise HumanRequired("an agent cannot set a goal's permission mode", "ask a human to set it")
        changes["permission_mode"] = validate.choice(fields["permission_mode"], PERMISSION_MODES, "permission_mode")
    if fields.get("max_parallel") is not None:
        changes["max_parallel"] = validate.count(fields["max_parallel"], "max_parallel", low=1, high=MAX_PARALLEL)
    if fields.get("shared") is not None:
        changes["shared"] = bool(fields["shared"])
    if fields.get("tz") is not None:  # the zone of daily and weekly cadences (kernel.read.localtime)

        tz = str(fields["tz"]).strip()
        if tz and not localtime.valid_zone(tz):
            raise FieldError("tz", "{field}: unknown time zone " + repr(tz), "use an IANA name such as Europe/Berlin or UTC",
                             code="bad_zone")
        changes["tz"] = tz or None
    if not changes:
        raise UsageError("nothing to update", "pass " + either(UPDATABLE), code="nothing_to_update",
                         details={"fields": list(UPDATABLE)})
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        if changes.get("max_parallel", 0) > max_parallel(g) and on_raise is not None:
            on_raise()
        out.update(goal_id=g["id"], changed=sorted(changes))
        return [Draft("goal.updated", g["id"], changes)]

    store.transact(plan, actor=actor)
    return out


def set_status(store: Store, actor: str, goal_id: str | None, status: str, note: str | None = None, *,
               human=None) -> dict:
    """Move a goal to ``status`` (paused, active, done, stopped). A no-op when already there,
    except that a human resuming an active goal whose verify command could not run
    (``verify_broken``) records ``goal.resumed``, which tells should-run to retry it.
    Finishing or stopping a goal with open protected work (it protects an action, or a gate is
    pending) needs ``human`` (a ``humans.HumanChannel``); raises HumanRequired without one."""
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        if status in ("done", "stopped") and g["status"] != status and (
                g["scope"].get("protect") or queries.pending_gates(state, g["id"])):
            humans.check_channel(human, "goal.finish")
        out.update(goal_id=g["id"], status=status, previous=g["status"], changed=g["status"] != status)
        # "I fixed the setup": the next check retries
        err = open_error(state, g) if g["status"] == status == "active" and actors.is_human(actor) else None
        if err:
            host = str(err.get("reason") or "").startswith("host_")  # the agent's host, not the verify command
            out.update(changed=True, retry=True, setup_error=err.get("reason"))
            return [Draft("goal.resumed", g["id"], {"note": validate.text(note, "note", required=False)
                                                    or ("the host was fixed: retry the agent" if host else
                                                        "the setup was fixed: retry the verify command")})]
        if g["status"] == status:
            return []
        if g["status"] not in ALLOWED_FROM[status]:
            raise Conflict(f"goal {g['id']} is {g['status']}; it cannot become {status}",
                           "resume it first" if status != "active" else None,
                           details={"reason": "goal_not_active", "goal": g["id"], "status": g["status"]}
                           if status != "active" else None)
        return [Draft(STATUS_EVENTS[status], g["id"], {"note": validate.text(note, "note", required=False)})]

    store.transact(plan, actor=actor)
    return out


def set_scope(store: Store, actor: str, goal_id: str | None, *, allow=None, deny=None, protect=None,
              human=None) -> dict:
    """Replace the given scope lists (``scope.set``); lists not given stay as they are. Widening
    (a new allowed glob, allowing everything, dropping a denied glob or a protected action) needs
    ``human`` (a ``humans.HumanChannel``); raises HumanRequired without one."""
    changes: dict = {}
    if allow is not None:
        changes["allow"] = validate.globs(allow, "allow")
    if deny is not None:
        changes["deny"] = validate.globs(deny, "deny")
    if protect is not None:
        changes["protect"] = sorted({validate.choice(p, validate.GATE_KINDS, "protected action") for p in protect})
    if not changes:
        raise UsageError("nothing to set", "pass " + either(SCOPE_LISTS) + " (an empty list clears one)",
                         code="nothing_to_set", details={"fields": list(SCOPE_LISTS), "lists": True})
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        scope = dict(g["scope"], **changes)
        if widens(g["scope"], scope):
            humans.check_channel(human, "scope.widen")
        out.update(goal_id=g["id"], scope=scope)
        return [Draft("scope.set", g["id"], changes)]

    store.transact(plan, actor=actor)
    return out


def widens(old: dict, new: dict) -> bool:
    """True when scope ``new`` allows something ``old`` did not (or protects less)."""
    old_allow, new_allow = list(old.get("allow") or []), list(new.get("allow") or [])
    if old_allow and (not new_allow or set(new_allow) - set(old_allow)):
        return True
    return bool(set(old.get("deny") or []) - set(new.get("deny") or [])) or \
        bool(set(old.get("protect") or []) - set(new.get("protect") or []))


def raises_quota(old: dict, policy: dict) -> bool:
    """True when ``policy`` gives the goal more turns: more slots, a shorter window or cooldown,
    a higher stall limit."""
    def more(key, sign):
        if key not in policy or policy[key] is None:
            return False
        cur = old.get(key)
        return cur is None or (policy[key] - cur) * sign > 0
    if more("slots", 1) or more("window", -1) or more("cooldown", -1) or more("stall_after", 1):
        return True
    if "turns" in policy:  # the turn budget: None means the default (twice the slots)
        slots = policy.get("slots", old.get("slots", 0))
        new = policy["turns"] or quotas.TURNS_PER_SLOT * slots
        cur = old.get("turns") or quotas.TURNS_PER_SLOT * old.get("slots", 0)
        return new > cur
    return False


def loosened(quota: dict, policy: dict) -> list[str]:
    """The human-only changes in ``policy`` against ``quota``: a money or token limit raised or
    cleared, the host reserve lowered. Returns the flags, e.g. ``["--max-usd"]``."""
    out = []
    for key, flag in (("max_usd", "--max-usd"), ("max_tokens", "--max-tokens")):
        if key in policy and quota.get(key) is not None and (policy[key] is None or policy[key] > quota[key]):
            out.append(flag)
    if "host_reserve" in policy and policy["host_reserve"] < quota.get("host_reserve", 10):
        out.append("--host-reserve")
    return out


def set_quota(store: Store, actor: str, goal_id: str | None, policy: dict, *, human=None) -> dict:
    """Change the goal's quota policy (``quota.set``). Returns {goal_id, quota, loosened}. Raising
    it (``raises_quota``: more slots, a shorter window or cooldown, a higher stall limit) or
    loosening it (``loosened``: a money or token limit raised or cleared, the host reserve
    lowered) needs ``human`` (a ``humans.HumanChannel``); raises HumanRequired without one."""
    if not policy:
        raise UsageError("nothing to set", "pass " + either(QUOTA_FIELDS), code="nothing_to_set",
                         details={"fields": list(QUOTA_FIELDS)})
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        looser = loosened(g["quota"], policy)
        if looser or raises_quota(g["quota"], policy):
            humans.check_channel(human, "quota.raise")
        out["loosened"] = looser
        out.update(goal_id=g["id"], quota=dict(g["quota"], **policy))
        return [Draft("quota.set", g["id"], policy)]

    store.transact(plan, actor=actor)
    return out
