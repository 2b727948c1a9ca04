"""The runner's side of research experiments (issue 20): a turn on an experiment goal is a trial.

``prepare(driver, started) -> dict | None``: where the agent works (the experiment's own private
clone, or a private clone of the run in parallel mode; loopx.kernel.policy.trialstep.prepare), None for
an ordinary goal. ``settle(driver, started, res, meas, out, report) -> out``: after the agent
exited, loopx commits, measures, decides (trialstep.settle) and closes the run
(trialstep.finish_turn); ``out`` gains ``trial`` (the recorded trial).
"""

from __future__ import annotations

from loopx.kernel.policy import trialstep, turn
from loopx.kernel.read import experiments
from loopx.kernel.storage import clock
from loopx.sync import shared


def prepare(drv, started: dict) -> dict | None:
    store = drv.store
    gid = started["goal_id"]
    if not store.read(lambda st: experiments.is_experiment(st, gid)):
        return None
    return trialstep.prepare(store, gid, started["run_id"], parallel=drv.isolate)


def settle(drv, started: dict, res: dict, meas: dict, out: dict, report: dict) -> dict:
    store, actor, rid = drv.store, drv.actor, started["run_id"]
    where = started["trial_where"]
    setup = meas.get("setup_error")
    if setup:  # the host could not work: no trial, the worktree back at the frontier
        trialstep.reset_worktree(store, started["goal_id"], where)
        why = f"{setup['reason'].replace('_', ' ')}: {setup['message']}"
        fin = turn.close(store, actor, rid, "failed", why, report=dict(report, setup_error=setup))
        out.update(result=fin["result"], verified=fin["verified"], slots=0, note=why, trial=None)
        return out
    run = turn.load_run(store, rid)[1]  # the live view: the run opened this turn
    if run["finished"] is not None:  # the agent finished it (e.g. blocked at a gate, or measured already)
        trialstep.reset_worktree(store, started["goal_id"], where)
        turn.report(store, actor, rid, report)
        out.update(result=run["result"], verified=run["verified"], slots=0, note="finished by the agent", trial=None)
        return out
    failed = None
    if res["timed_out"] or res["exit_code"] != 0:
        failed = (f"the agent timed out after {clock.format_duration(drv.timeout or 0)}" if res["timed_out"]
                  else f"the agent exited {res['exit_code']}")
    rec = trialstep.settle(store, actor, rid, where, usage=meas.get("usage"), agent_failed=failed)
    fin = trialstep.finish_turn(store, actor, rid, rec, spend_slot=shared.spend_slot, report=report,
                                result="failed" if failed else None)
    spend = fin.get("spend")
    out.update(result=fin["result"], verified=fin["verified"], note=fin.get("note") or rec.get("reason"),
               trial={k: rec.get(k) for k in ("trial_id", "number", "decision", "value", "delta", "reason",
                                              "hypothesis", "commit", "replays")},
               spend=spend, slots=spend["slots"] if spend and spend.get("spent") else 0)
    out["note"] = f"trial {rec['trial_id']}: {rec['decision']} ({rec.get('reason')})"
    return out
