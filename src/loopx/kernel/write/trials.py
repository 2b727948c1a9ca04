"""The write operations of research experiments (issue 20); each is one transaction.

- ``config(...) -> dict``: the validated experiment settings (UsageError, exit 2, on a bad one).
- ``start(store, actor, goal_id, cfg) -> dict``: ``experiment.started``.
- ``hypothesize(store, actor, text, claims, goal_id=None, run_id=None) -> dict``:
  ``trial.hypothesized`` for the caller's open run on an experiment goal (the claims are what the
  agent says it measured: shown as claims, never deciding anything).
- ``record(store, actor, goal_id, trial, expect_frontier=...) -> dict``: ``trial.recorded``; with
  ``expect_frontier`` the write refuses (Conflict ``frontier_moved``, exit 4) when the frontier is
  no longer that commit, so no trial is ever decided against a frontier it did not see.
- ``continue_after_plateau(store, actor, goal_id, note, human)``: ``experiment.continued``
  (human-only).
- ``measuring_changes(...)``, ``update_measuring(store, actor, goal_id, changes, human)``:
  ``experiment.updated`` (human-only; the measure command and pattern only before a baseline).
- ``promoted(store, actor, goal_id, data)``, ``applied(store, actor, goal_id, trial_id, onto)``.
"""

from __future__ import annotations

import math

from loopx.errors import Conflict, FieldError, NotFound, UsageError
from loopx.kernel import humans
from loopx.kernel.read import experiments, metrics, queries, validate
from loopx.kernel.storage import clock, ids
from loopx.kernel.storage.store import Draft, Store

MAX_HYPOTHESIS = 500


def config(*, metric, direction="max", measure, trial_timeout=None, metric_pattern=None, min_delta=None,
           guard=None, holdout=None, plateau=None, protect=(), holdout_paths=()) -> dict:
    if not metric:
        raise UsageError("an experiment needs a metric", "e.g. metric val_acc, direction max", code="no_metric",
                         details={"field": "metric"})
    if not measure:
        raise UsageError("an experiment needs a measure command", "e.g. 'python eval.py'", code="no_measure",
                         details={"field": "measure"})
    metric = validate.text(metric, "metric", limit=64)
    validate.choice(direction or "max", ("max", "min"), "direction")
    timeout = 600.0 if trial_timeout in (None, "") else _timeout(trial_timeout)
    delta = _min_delta(min_delta) if min_delta not in (None, "") else 0.0
    n = validate.count(plateau, "plateau", low=1, high=10000) if plateau not in (None, "") else 0
    paths = []
    for p in list(protect or ()) + list(holdout_paths or ()):
        p = validate.text(p, "protect_path", limit=500).strip()
        if p.startswith("/") or ".." in p.replace("\\", "/").split("/"):
            raise UsageError(f"{p!r} must be a path inside the project", "name it relative to the project root")
        paths.append(p)
    return {"metric": metric, "direction": direction or "max", "measure": validate.command(measure, "measure"),
            "guard": validate.command(guard, "guard") if guard else None,
            "holdout": validate.command(holdout, "holdout") if holdout else None,
            "metric_pattern": metrics.check_pattern(metric_pattern), "min_delta": delta, "plateau": n,
            "trial_timeout": timeout, "protect": [p.rstrip("/") for p in protect or ()],
            "holdout_paths": [p.rstrip("/") for p in holdout_paths or ()]}


def _timeout(value) -> float:
    timeout = clock.parse_duration(str(value))
    if timeout <= 0:
        raise FieldError("trial_timeout", "{field} must be positive", "e.g. {field} 300", code="bad_timeout")
    return timeout


def _min_delta(value) -> float:
    try:
        delta = float(value)
    except ValueError:
        raise FieldError("min_delta", "{field} " + repr(value) + " is not a number", "e.g. {field} 0.002") from None
    if delta < 0 or not math.isfinite(delta):
        raise FieldError("min_delta", "{field} must be a finite number, 0 or more", "e.g. {field} 0.002")
    return delta


def measuring_changes(*, measure=None, metric_pattern=None, trial_timeout=None, guard=None, min_delta=None) -> dict:
    """The validated fields of ``experiment.updated`` from ``goal update``'s flags (None: not
    given; ``""`` clears ``metric_pattern`` and ``guard``). UsageError, exit 2, on a bad one."""
    out: dict = {}
    if measure is not None:
        out["measure"] = validate.command(measure, "measure")
    if metric_pattern is not None:
        out["metric_pattern"] = metrics.check_pattern(metric_pattern) if metric_pattern else None
    if trial_timeout is not None:
        out["trial_timeout"] = _timeout(trial_timeout)
    if guard is not None:
        out["guard"] = validate.command(guard, "guard") if guard.strip() else None
    if min_delta is not None:
        out["min_delta"] = _min_delta(min_delta)
    return out


# what makes the trials' numbers: changed after a baseline was measured, the frontier's value and
# the next trial's would come from two different measurements
NUMBERS = ("measure", "metric_pattern")


def update_measuring(store: Store, actor: str, goal_id: str | None, changes: dict, human) -> dict:
    """``experiment.updated`` (human-only: the measuring is governance). The measure command and
    the metric pattern change only while the experiment has no measured baseline (no frontier:
    the baseline crashed); after that they are refused (Conflict ``measure_frozen``, exit 4),
    since every kept value was measured by the old command: start a new experiment goal. The
    trial timeout, the guard and ``min_delta`` decide keep or discard, not the numbers, and change
    at any time."""
    humans.check_channel(human, "experiment.measuring")
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        e = experiments.get(state, g["id"])
        if e is None:
            raise UsageError(f"goal {g['id']} is not an experiment: {', '.join(sorted(changes))} belong to an "
                             "experiment goal", "a goal's own check is its verify command",
                             code="not_an_experiment", details={"goal": g["id"], "action": "update",
                                                                 "fields": sorted(changes)})
        frozen = sorted(k for k in NUMBERS if k in changes and changes[k] != e.get(k))
        if frozen and e.get("frontier"):
            front = e["frontier"]
            raise Conflict(f"experiment {g['id']} has a measured baseline ({front['trial']}, {e['metric']}="
                           f"{experiments.fmt_value(front.get('value'))}): a new {frozen[0].replace('_', ' ')} would "
                           "make its numbers incomparable with the next trials'",
                           "stop this goal and start a new experiment goal with the new command",
                           code="measure_frozen",
                           details={"goal": g["id"], "fields": frozen})
        out.update(goal_id=g["id"], changed=sorted(changes), experiment=True,
                   baseline_needed=e.get("frontier") is None)
        return [Draft("experiment.updated", g["id"], dict(changes))]

    store.transact(plan, actor=actor)
    return out


def start(store: Store, actor: str, goal_id: str, cfg: dict) -> dict:
    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        if experiments.is_experiment(state, g["id"]):
            raise Conflict(f"goal {g['id']} is already an experiment", "look at the experiment",
                           details={"reason": "already_an_experiment", "goal": g["id"]})
        return [Draft("experiment.started", g["id"], cfg)]

    store.transact(plan, actor=actor)
    return dict(cfg, goal_id=goal_id)


def _open_run(state: dict, actor: str, goal_id: str | None, run_id: str | None) -> dict | None:
    if run_id:
        return queries.resolve_run(state, run_id)
    mine = [r for r in queries.open_runs(state) if r["agent"] == actor
            and (goal_id is None or r["goal"] == goal_id) and experiments.is_experiment(state, r["goal"])]
    return max(mine, key=lambda r: r.get("seq", 0)) if mine else None


def hypothesize(store: Store, actor: str, text: str, claims: dict | None = None, *, goal_id: str | None = None,
                run_id: str | None = None) -> dict:
    text = validate.text(text, "hypothesis", limit=MAX_HYPOTHESIS)
    out: dict = {}

    def plan(state, now):
        run = _open_run(state, actor, goal_id, run_id)
        if run is None and goal_id is None:
            raise NotFound("no open turn of yours on an experiment goal",
                           "start a turn first (or name the goal for the next trial)", code="no_open_trial",
                           details={"field": "goal_id"})
        gid = run["goal"] if run else queries.resolve_goal(state, goal_id)["id"]
        if not experiments.is_experiment(state, gid):
            raise UsageError(f"goal {gid} is not an experiment", "start an experiment goal", code="not_an_experiment",
                             details={"goal": gid, "action": "hypothesize"})
        if run is not None and run["finished"] is not None:
            raise Conflict(f"run {run['id']} is finished", "state the hypothesis during the turn", code="run_finished")
        rid = run["id"] if run else None
        out.update(goal_id=gid, run_id=rid, hypothesis=text, claims=claims or {})
        return [Draft("trial.hypothesized", gid, {"run_id": rid, "hypothesis": text, "claims": claims or {}})]

    store.transact(plan, actor=actor)
    return out


def record(store: Store, actor: str, goal_id: str, trial: dict, *, expect_frontier=...) -> dict:
    """Append ``trial`` (the fields of trialfold's ``trial.recorded``) and return it with its id and number."""
    out: dict = {}

    def plan(state, now):
        e = experiments.get(state, goal_id)
        if e is None:
            raise UsageError(f"goal {goal_id} is not an experiment", "look at the experiment goals",
                             code="not_an_experiment", details={"goal": goal_id, "action": "record"})
        if expect_frontier is not ...:
            cur = (e.get("frontier") or {}).get("commit")
            if cur != expect_frontier:
                raise Conflict(f"the frontier of {goal_id} moved to {str(cur)[:12]} since this trial was measured",
                               "measure it again on top of the new frontier", code="frontier_moved")
        tid = trial.get("trial_id") or ids.new_id("trial", state.get("trials") or {})
        data = dict(trial, trial_id=tid)
        out.update(data, number=e["trials"] + 1, goal_id=goal_id)
        return [Draft("trial.recorded", goal_id, data)]

    store.transact(plan, actor=actor)
    return out


def continue_after_plateau(store: Store, actor: str, goal_id: str | None, note: str | None, human) -> dict:
    humans.check_channel(human, "experiment.continue")
    note = validate.text(note, "note", required=False, limit=500)
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        if not experiments.is_experiment(state, g["id"]):
            raise UsageError(f"goal {g['id']} is not an experiment", "look at the goal", code="not_an_experiment",
                             details={"goal": g["id"], "action": "continue"})
        out.update(goal_id=g["id"], note=note)
        return [Draft("experiment.continued", g["id"], {"note": note})]

    store.transact(plan, actor=actor)
    return out


def promoted(store: Store, actor: str, goal_id: str, data: dict) -> dict:
    store.transact(lambda state, now: [Draft("experiment.promoted", goal_id, data)], actor=actor)
    return data


def applied(store: Store, actor: str, goal_id: str, trial_id: str, onto: str | None) -> None:
    store.transact(lambda state, now: [Draft("trial.applied", goal_id, {"trial_id": trial_id, "onto": onto})],
                   actor=actor)
