"""Reducers of research experiments (issue 20): ``experiment.*`` and ``trial.*`` events.

Two collections join the folded state (created on first use, so stores without experiments are
unchanged):

``experiments`` goal -> {goal, metric, direction (max|min), measure, guard, holdout, metric_pattern,
              min_delta, plateau, trial_timeout (s), protect[] (paths relative to the project),
              holdout_paths[], worktree (path relative to the project), branch (``loopx/exp/<goal>``),
              base_branch, base_commit, started, frontier {trial, commit, value} | None,
              baseline {trial, commit, value} | None, best {trial, value, kept} | None (the best value measured, kept or not),
              counts {keep, discard, crash, stale}, trials (count), since_improvement (trials in a
              row without a kept improvement since the last keep), usd (sum of the trials' cost),
              usd_kept (cost of the trials up to the last keep), pending {run_id: {hypothesis,
              claims, ts}} (stated during a turn, taken by its trial), promoted {...} | None,
              last_trial}
``trials``    trial id -> {id, goal, number, run, hypothesis, agent, commit, parent (the frontier
              commit it was made on), parent_value, metrics {name: float}, value, delta (value -
              parent_value, signed), decision (keep|discard|crash|stale), reason, guard {exit_code,
              passed} | None, duration (s), tokens, cost_usd, claims {name: float}, tail (last
              output lines of a crash), baseline (bool), remeasured (bool), ts, seq}

The summary fields are updated by the reducers, so every reader (status, should-run, history,
review-packet, the dashboard) reads the same numbers in constant time; the live view keeps the
summary and only the last ``LIVE_TRIALS`` trials per goal (``live_part``).
"""

from __future__ import annotations

from loopx.kernel.storage import events

LIVE_TRIALS = 40
DECISIONS = ("keep", "discard", "crash", "stale")

def _exp(s, gid):
    return s["experiments"][gid]


def _started(s, r, d):
    gid = r["goal"]
    s.setdefault("experiments", {})[gid] = {
        "goal": gid, "metric": d["metric"], "direction": d["direction"], "measure": d["measure"],
        "guard": d.get("guard"), "holdout": d.get("holdout"), "metric_pattern": d.get("metric_pattern"),
        "min_delta": d.get("min_delta") or 0.0, "plateau": d.get("plateau") or 0,
        "trial_timeout": d.get("trial_timeout") or 600, "protect": list(d.get("protect") or []),
        "holdout_paths": list(d.get("holdout_paths") or []), "worktree": d["worktree"], "branch": d["branch"],
        "base_branch": d.get("base_branch"), "base_commit": d.get("base_commit"), "started": r["ts"],
        "frontier": None, "baseline": None, "best": None,
        "counts": {k: 0 for k in DECISIONS}, "trials": 0, "since_improvement": 0, "usd": 0.0, "usd_kept": 0.0,
        "pending": {}, "promoted": None, "last_trial": None,
    }
    s.setdefault("trials", {})


def _hypothesized(s, r, d):
    e = _exp(s, r["goal"])
    e["pending"][d.get("run_id") or ""] = {"hypothesis": d["hypothesis"], "claims": dict(d.get("claims") or {}),
                                           "ts": r["ts"], "by": r.get("actor")}


def better(exp: dict, value, than) -> bool:
    """Whether ``value`` beats ``than`` in the experiment's direction (ties do not)."""
    if value is None:
        return False
    if than is None:
        return True
    return value > than if exp["direction"] == "max" else value < than


def _recorded(s, r, d):
    gid = r["goal"]
    e = _exp(s, gid)
    tid = d["trial_id"]
    decision = d["decision"]
    t = {k: d.get(k) for k in events.copied("trial.recorded")}  # the plain fields of a trial (events.COPY)
    t.update(id=tid, goal=gid, decision=decision, metrics=dict(d.get("metrics") or {}),
             claims=dict(d.get("claims") or {}), baseline=bool(d.get("baseline")),
             remeasured=bool(d.get("remeasured")), ts=r["ts"], seq=r["seq"])
    trials = s.setdefault("trials", {})
    e["trials"] += 1
    t["number"] = e["trials"]
    trials[tid] = t
    e["counts"][decision] = e["counts"].get(decision, 0) + 1
    e["last_trial"] = tid
    usd = d.get("cost_usd")
    if isinstance(usd, (int, float)):
        e["usd"] = round(e["usd"] + usd, 6)
    if t["run"]:
        e["pending"].pop(t["run"], None)
    if decision == "keep":
        e["frontier"] = {"trial": tid, "commit": t["commit"], "value": t["value"]}
        if t["baseline"]:
            e["baseline"] = {"trial": tid, "commit": t["commit"], "value": t["value"]}
        else:
            e["usd_kept"] = e["usd"]
        e["since_improvement"] = 0
    elif not t["baseline"]:
        e["since_improvement"] += 1
    if t["value"] is not None and decision in ("keep", "discard") and better(e, t["value"], (e["best"] or {}).get("value")):
        e["best"] = {"trial": tid, "value": t["value"], "kept": decision == "keep"}  # best measured, kept or not


def _promoted(s, r, d):
    e = _exp(s, r["goal"])
    e["promoted"] = {"trial": d["trial_id"], "gate": d["gate_id"], "commit": d.get("commit"), "into": d.get("into"),
                     "holdout": d.get("holdout"), "ts": r["ts"], "by": r.get("actor")}


def _continued(s, r, d):
    """A human answered a plateau: count trials without improvement from here."""
    e = _exp(s, r["goal"])
    e["since_improvement"] = 0
    e["continued"] = {"ts": r["ts"], "by": r.get("actor"), "note": d.get("note")}


MEASURING = ("measure", "metric_pattern", "trial_timeout", "guard", "min_delta")  # experiment.updated


def _updated(s, r, d):
    """A human changed the measuring (``goal update --measure ...``): the fields given."""
    e = _exp(s, r["goal"])
    for k in MEASURING:
        if k in d:
            e[k] = d[k]
    e["updated"] = {"ts": r["ts"], "by": r.get("actor"), "fields": sorted(k for k in MEASURING if k in d)}


def _applied(s, r, d):
    t = s.get("trials", {}).get(d["trial_id"])
    if t is not None:
        t.setdefault("applied", []).append({"ts": r["ts"], "by": r.get("actor"), "onto": d.get("onto")})


REDUCERS = {
    "experiment.started": _started,
    "experiment.promoted": _promoted,
    "experiment.continued": _continued,
    "experiment.updated": _updated,
    "trial.hypothesized": _hypothesized,
    "trial.recorded": _recorded,
    "trial.applied": _applied,
}


def live_part(state: dict) -> dict:
    """What a live view keeps of the trials: the last ``LIVE_TRIALS`` per goal and every trial an
    experiment's summary names (frontier, baseline, best). ``{}`` for a store without trials."""
    trials = state.get("trials")
    if not trials:
        return {}
    keep: set = set()
    for e in state.get("experiments", {}).values():
        for k in ("frontier", "baseline", "best"):
            if e.get(k):
                keep.add(e[k]["trial"])
    per: dict[str, list] = {}
    for t in trials.values():
        per.setdefault(t["goal"], []).append((t.get("seq", 0), t["id"]))
    for items in per.values():
        keep.update(i for _, i in sorted(items)[-LIVE_TRIALS:])
    return {"trials": {k: v for k, v in trials.items() if k in keep}}
