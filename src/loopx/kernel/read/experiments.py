"""The read model of research experiments (issue 20): one place for every number that status,
should-run, history, the review packet, ``trial list``, ``experiment show`` and the dashboard
show about an experiment goal.

- ``get(state, goal_id) -> dict | None``: the folded experiment (loopx.kernel.storage.trialfold).
- ``summary(state, goal_id) -> dict | None``: baseline, frontier, best, total improvement,
  kept/discarded/crashed/stale counts, trials since the last improvement, plateau, cost per kept
  improvement, promotion. Constant time: it reads only the folded summary.
- ``rows(state, goal_id) -> [row]``: the trials in order (id, number, hypothesis, agent, value,
  delta, decision, commit, duration, claims...), for ``trial list`` and the chart.
- ``plateaued(state, goal) -> dict | None``: the plateau the decision waits on, or None.
- ``TSV_COLUMNS`` / ``row_cells(row)``: the results.tsv layout.
"""

from __future__ import annotations

from loopx.kernel.storage import actors

COLUMNS = ("id", "number", "hypothesis", "agent", "value", "delta", "decision", "commit", "duration")
TSV_COLUMNS = ("trial", "commit", "metric", "value", "delta", "decision", "agent", "duration_s", "hypothesis")


def get(state: dict, goal_id: str | None) -> dict | None:
    return (state.get("experiments") or {}).get(goal_id or "")


def is_experiment(state: dict, goal_id: str | None) -> bool:
    return get(state, goal_id) is not None


def improvement(exp: dict, value, base) -> float | None:
    """``value - base`` signed so that a positive number is an improvement in the experiment's direction."""
    if value is None or base is None:
        return None
    d = value - base
    return round(d if exp["direction"] == "max" else -d, 12)


def summary(state: dict, goal_id: str) -> dict | None:
    e = get(state, goal_id)
    if e is None:
        return None
    base = (e.get("baseline") or {}).get("value")
    front = e.get("frontier") or None
    c = e["counts"]
    kept = c.get("keep", 0) - (1 if e.get("baseline") else 0)  # the baseline is kept, but is no improvement
    total = improvement(e, (front or {}).get("value"), base)
    return {
        "goal_id": goal_id, "metric": e["metric"], "direction": e["direction"], "min_delta": e["min_delta"],
        "measure": e["measure"], "guard": e.get("guard"), "has_holdout": bool(e.get("holdout")),
        "branch": e["branch"], "worktree": e["worktree"], "base_branch": e.get("base_branch"),
        "baseline": e.get("baseline"), "frontier": front, "best": e.get("best"),
        "total_improvement": total, "trials": e["trials"], "kept": max(0, kept), "discarded": c.get("discard", 0),
        "crashed": c.get("crash", 0), "stale": c.get("stale", 0), "since_improvement": e["since_improvement"],
        "plateau": e.get("plateau") or 0,
        "plateaued": bool(e.get("plateau")) and e["since_improvement"] >= e["plateau"],
        "usd": e.get("usd") or 0.0,
        "cost_per_kept": round(e["usd_kept"] / kept, 6) if kept > 0 and e.get("usd_kept") else None,
        "promoted": e.get("promoted"), "last_trial": e.get("last_trial"),
        "protect": list(e.get("protect") or []), "holdout_paths": list(e.get("holdout_paths") or []),
    }


def tally(x: dict, total: bool = True) -> str:
    """A summary's trial counts in one phrase that adds up: ``5 trials: baseline, 3 kept, 0 discarded,
    1 crashed`` (``trials`` counts the baseline, which is none of kept, discarded or crashed); without
    ``total``, only what follows the colon."""
    kinds = (("baseline, " if x.get("baseline") else "")
             + f"{x['kept']} kept, {x['discarded']} discarded, {x['crashed']} crashed"
             + (f", {x['stale']} stale" if x.get("stale") else ""))
    return f"{x['trials']} trial{'' if x['trials'] == 1 else 's'}: {kinds}" if total else kinds


def clip(text: str | None, n: int) -> str:
    """``text`` on one line in at most ``n`` characters: cut at a word boundary (when one is near)
    and ended with "…", never mid-word."""
    s = " ".join((text or "").split())
    if len(s) <= n:
        return s
    head = s[: n - 1]
    space = head.rfind(" ")
    if space >= n // 2:
        head = head[:space]
    return head.rstrip(" ,;:.-") + "…"


def rows(state: dict, goal_id: str) -> list[dict]:
    """Every trial of the goal the state holds, in trial order (a live view holds the recent ones)."""
    e = get(state, goal_id)
    if e is None:
        return []
    out = [t for t in (state.get("trials") or {}).values() if t["goal"] == goal_id]
    out.sort(key=lambda t: t.get("number", 0))
    return out


def plateaued(state: dict, goal: dict) -> dict | None:
    s = summary(state, goal["id"])
    if s is None or not s["plateaued"]:
        return None
    return s


def fmt_value(v) -> str:
    if v is None:
        return "-"
    return f"{v:.6g}"


def fmt_delta(v) -> str:
    if v is None:
        return "-"
    return f"{v:+.6g}"


def row_cells(exp_metric: str, t: dict) -> list[str]:
    """One results.tsv row (``TSV_COLUMNS``)."""
    return [t["id"], (t.get("commit") or "")[:12], exp_metric, "" if t.get("value") is None else repr(t["value"]),
            "" if t.get("delta") is None else repr(t["delta"]), t["decision"], t.get("agent") or "",
            "" if t.get("duration") is None else f"{t['duration']:.1f}", (t.get("hypothesis") or "").replace("\t", " ")]


def value_rule(e: dict) -> tuple | None:
    """The decision's rule for an experiment goal (replacing stall and no-change): ``(decision,
    reason, message, extra)`` or None (run the next trial). Reasons: ``baseline_crashed`` (no
    frontier: the measure command did not measure the unchanged code) and ``plateau``."""
    if e.get("frontier") is None:
        return ("wait_human", "baseline_crashed",
                f"the baseline of experiment {e['goal']} did not measure (`loopx trial list`); fix the measure "
                f"command (`loopx goal update {e['goal']} --measure CMD`) or commit the fix of what it runs, then "
                f"`loopx experiment baseline {e['goal']}`", {})
    n = e.get("plateau") or 0
    if n and e["since_improvement"] >= n:
        return ("wait_human", "plateau",
                f"{e['since_improvement']} trials in a row without a kept improvement (--plateau {n}); a human "
                f"decides: continue (`loopx experiment continue {e['goal']}`), change direction (`loopx goal update`), "
                f"promote (`loopx experiment promote {e['goal']}`) or stop (`loopx goal stop {e['goal']}`)",
                {"since_improvement": e["since_improvement"]})
    return None


def packet_part(state: dict, e: dict, run_id: str, actor: str, cut, n) -> dict:
    """The turn packet's ``experiment`` field: the rules of the trial, the frontier, the recent
    trials (hypothesis, value, decision; never a holdout number) and the hypothesis command."""
    who = f"loopx --agent {actors.agent_name(actor)}" if actors.is_agent(actor) else "loopx"
    recent = rows(state, e["goal"])[-n(6):]
    front = e.get("frontier") or {}
    return {"metric": e["metric"], "direction": e["direction"], "min_delta": e.get("min_delta") or 0.0,
            "frontier": front.get("value"), "frontier_trial": front.get("trial"),
            "baseline": (e.get("baseline") or {}).get("value"), "trials": e["trials"],
            "since_improvement": e["since_improvement"], "plateau": e.get("plateau") or 0,
            "worktree": e["worktree"], "branch": e["branch"], "measure": cut(e["measure"], 200),
            "holdout": bool(e.get("holdout")),
            "recent": [{"id": t["id"], "hypothesis": cut(t.get("hypothesis"), 120), "value": t.get("value"),
                        "decision": t["decision"]} for t in recent],
            "hypothesis_command": f"{who} trial hypothesis 'WHAT YOU TRY AND WHY' --run {run_id}"}


def packet_lines(x: dict) -> list[str]:
    goal = "higher" if x["direction"] == "max" else "lower"
    L = ["", f"TRIAL MODE: one experiment trial. Make ONE change that you expect to make {x['metric']} {goal}.",
         f"  work in: {x['worktree']} (branch {x['branch']} is the frontier; loopx commits your change there)",
         f"  frontier {x['metric']} = {fmt_value(x['frontier'])} (baseline {fmt_value(x['baseline'])}); a change is kept "
         f"only when loopx's own measurement beats it by more than {x['min_delta']:g}",
         f"  loopx runs the measure command itself after you exit: {x['measure']}",
         "  the measure, guard and holdout commands and the files they read are protected: do not edit them",
         f"  state your hypothesis first: {x['hypothesis_command']}",
         "  (a number you report yourself is shown as a claim; it decides nothing)"]
    if x["holdout"]:
        L.append("  a holdout evaluation exists; only a human sees its numbers, at promotion")
    if x["plateau"]:
        L.append(f"  {x['since_improvement']} of {x['plateau']} trials without improvement before a human is asked")
    if x["recent"]:
        L.append("RECENT TRIALS (do not repeat a discarded idea as is):")
        L += [f"  {t['id']} {t['decision']} {fmt_value(t['value'])}: {t['hypothesis']}" for t in x["recent"]]
    return L
