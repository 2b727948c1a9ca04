"""``loopx experiment show|baseline|continue|promote``: a research experiment as a whole
(docs/experiments.md). ``continue`` and ``promote`` are for humans only; the holdout's numbers
are shown only to a human (``promote`` runs the holdout; ``gate show`` shows them again)."""

from __future__ import annotations

from loopx.commands import actions, add, goal_opt, stop_signals_interrupt
from loopx.commands.trial import _goal
from loopx.errors import Conflict
from loopx.kernel import humans
from loopx.kernel.read import experiments
from loopx.kernel.read import experiments as ex
from loopx.output import Reply, safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx experiment show")
    acts = actions(p)
    s = add(acts, "show", "baseline, best, total improvement, kept/discarded/crashed, plateau, cost per kept trial",
            handler=experiment_show, render=render_show, command="experiment show", example="loopx experiment show knn")
    s.add_argument("goal", nargs="?", metavar="GOAL")
    b = add(acts, "baseline", "measure the unchanged code again (after fixing a measure command that crashed)",
            handler=experiment_baseline, render=render_trial, command="experiment baseline",
            example="loopx experiment baseline knn")
    b.add_argument("goal", nargs="?", metavar="GOAL")
    c = add(acts, "continue", "answer a plateau: go on with more trials (humans only)", handler=experiment_continue,
            render=lambda d: f"experiment {d['goal_id']} continues; trials without improvement count from 0",
            command="experiment continue", example="loopx experiment continue knn --note 'try feature scaling next'")
    c.add_argument("goal", nargs="?", metavar="GOAL")
    c.add_argument("--note", metavar="TEXT")
    pr = add(acts, "promote", "open a promote gate for the frontier, with the holdout result for you (humans only)",
             handler=experiment_promote, render=render_promote, command="experiment promote",
             example="loopx experiment promote knn --as-branch knn-best")
    pr.add_argument("goal", nargs="?", metavar="GOAL")
    pr.add_argument("--as-branch", metavar="NAME", help="on approval make this branch instead of merging")
    goal_opt(s)


def _gid(ctx, goal, goal_id=None):
    return _goal(ctx.store().load(), goal or goal_id)


def experiment_show(ctx, goal=None, goal_id=None):
    store = ctx.store()
    state = store.load(view="live")
    gid = store.read(lambda st: _goal(st, goal or goal_id), state)
    s = experiments.summary(state, gid)
    pending = [g for g in state["gates"].values() if g["goal"] == gid and g["kind"] == "promote"
               and g["status"] == "pending"]
    s["promote_gate"] = pending[0]["id"] if pending else None
    return s


def render_show(d: dict) -> str:
    b, f, best = d.get("baseline") or {}, d.get("frontier") or {}, d.get("best") or {}
    L = [f"experiment {d['goal_id']}: {d['metric']} ({'higher' if d['direction'] == 'max' else 'lower'} is better, "
         f"min delta {d['min_delta']:g})",
         f"  baseline   {ex.fmt_value(b.get('value'))}  ({b.get('trial', '-')})",
         f"  frontier   {ex.fmt_value(f.get('value'))}  ({f.get('trial', '-')}, {(f.get('commit') or '')[:12]} on {d['branch']})",
         f"  best seen  {ex.fmt_value(best.get('value'))}  ({best.get('trial', '-')}{'' if best.get('kept', True) else ', not kept'})",
         f"  improvement {ex.fmt_delta(d['total_improvement'])} over the baseline",
         f"  {ex.tally(d)}",
         f"  since the last improvement: {d['since_improvement']}" + (f" of {d['plateau']} (plateau)" if d["plateau"] else "")
         + ("  -> waiting for a human" if d["plateaued"] else "")]
    if d.get("cost_per_kept") is not None:
        L.append(f"  cost per kept improvement: {d['cost_per_kept']:.4f} USD (total {d['usd']:.4f})")
    L.append(f"  measure: {safe(d['measure'])}" + (f"; guard: {safe(d['guard'])}" if d.get("guard") else "")
             + ("; holdout: yes (run at promotion)" if d["has_holdout"] else ""))
    if d.get("promote_gate"):
        L.append(f"  promotion waits at gate {d['promote_gate']} (`loopx gate show {d['promote_gate']}`)")
    if d.get("promoted"):
        p = d["promoted"]
        L.append(f"  promoted {p['trial']} into {p.get('into')} (gate {p['gate']})")
    return "\n".join(L)


def experiment_baseline(ctx, goal=None):
    from loopx.kernel.policy import trialstep  # the trial step loads the sandbox: not for `experiment show`

    human = humans.require_human(ctx, "experiment.baseline")
    store = ctx.store()
    gid = _gid(ctx, goal)
    if (experiments.get(store.load(), gid) or {}).get("frontier"):
        raise Conflict(f"experiment {gid} has a measured baseline and frontier already",
                       "a new baseline would rewrite the results; start a new experiment goal instead",
                       code="baseline_measured")
    e = experiments.get(store.load(), gid)
    note = trialstep.uncommitted_note(store, e)  # said before measuring: the baseline measures the commit
    stop_signals_interrupt()  # the measure command ends with this command, SIGTERM or not
    res = trialstep.measure_baseline(store, human.actor, gid)
    if res["decision"] != "crash":
        return Reply(res, 0, [note] if note else [])
    res["next"] = baseline_fix(gid, res)
    return Reply(res, 1, [note] if note else [])  # a crashed baseline is a clean "no": nothing to trial yet


def baseline_fix(gid: str, t: dict) -> str:
    """The next step after a crashed baseline ``t``: the fix, then the baseline again."""
    reason = str(t.get("reason") or "")
    if "timed out" in reason:
        fix = f"loopx goal update {gid} --trial-timeout DUR"
    elif reason.startswith("the guard"):
        fix = f"fix the guard (loopx goal update {gid} --guard CMD) or commit the fix of the code"
    else:
        fix = f"fix the measure command (loopx goal update {gid} --measure CMD) or commit the fix of what it runs"
    return f"{fix}, then: loopx experiment baseline {gid}"


def tail_lines(t: dict, n: int = 5) -> list[str]:
    return ["    " + safe(x) for x in (t.get("tail") or "").splitlines()[-n:]]


def render_trial(d: dict) -> str:
    line = f"baseline {d['trial_id']}: {d['decision']} {ex.fmt_value(d.get('value'))}"
    if d["decision"] == "crash":
        line += f" ({safe(d.get('reason') or '')})"
        return "\n".join([line, *tail_lines(d), f"next: {d['next']}"])
    return line


def experiment_continue(ctx, goal=None, note=None):
    from loopx.kernel.write import trials  # imports the metric reader (re): not for `experiment show`

    human = humans.require_human(ctx, "experiment.continue")
    return trials.continue_after_plateau(ctx.store(), human.actor, _gid(ctx, goal), note, human)


def experiment_promote(ctx, goal=None, as_branch=None):
    from loopx.kernel.policy import trialstep
    from loopx.sandbox import holdout_policy  # the holdout runs code the agent wrote: in its own sandbox

    human = humans.require_human(ctx, "experiment.promote")

    stop_signals_interrupt()  # the holdout command ends with this command, SIGTERM or not
    res = trialstep.promote(ctx.store(), human.actor, _gid(ctx, goal), as_branch=as_branch, confine=holdout_policy)
    res["approve_command"] = f"loopx gate approve {res['gate_id']} --confirm {res['gate_id']}"
    return Reply(res)


def holdout_lines(h: dict | None) -> list[str]:
    if h is None:
        return ["  holdout: none"]
    if h.get("timed_out") or h.get("exit_code") != 0:
        return [f"  holdout: the command failed (exit {h.get('exit_code')}{', timed out' if h.get('timed_out') else ''})"]
    return ["  holdout (for you only): " + ", ".join(f"{k}={ex.fmt_value(v)}" for k, v in (h.get("metrics") or {}).items())]


def render_promote(d: dict) -> str:
    L = [f"gate {d['gate_id']} (promote) asks: {safe(d['question'])}"] + holdout_lines(d.get("holdout"))
    L += ["", "Approve it (this merges the frontier):", f"  {d['approve_command']}"]
    return "\n".join(L)
