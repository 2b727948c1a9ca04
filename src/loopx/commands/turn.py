"""``loopx turn finish|renew``: close a run with its result, or extend its lease."""

from __future__ import annotations

import os

from loopx import output
from loopx.commands import actions, add, stop_signals_interrupt
from loopx.kernel.policy import turn
from loopx.kernel.storage import layout

# A hot module (`turn finish` ends every turn): the experiment, sync and handover code loads only
# on the path that needs it (tests/test_imports.py).


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx turn finish --run run-3f9a1c --result progress --verify")
    acts = actions(p)
    f = add(acts, "finish", "close a run with its result (optionally verifying it first)", handler=turn_finish,
            render=render_finish, command="turn finish",
            example="loopx turn finish --run run-3f9a1c --result completion --evidence ev-1a2b3c4d --verify")
    f.add_argument("--run", required=True, metavar="RUN")
    f.add_argument("--result", required=True, metavar="RESULT",
                   help="progress, completion, no_progress, failed or blocked")
    f.add_argument("--evidence", action="append", metavar="ID", help="evidence of this turn (repeatable)")
    f.add_argument("--verify", action="store_true", help="run the todo's or goal's verify command and record it")
    f.add_argument("--note", metavar="TEXT")
    r = add(acts, "renew", "extend an open run's lease (and the todo claim)", handler=turn_renew,
            render=lambda d: f"{d['run_id']} leased until {d['lease_until']}", command="turn renew",
            example="loopx turn renew --run run-3f9a1c --lease 30m")
    r.add_argument("--run", required=True, metavar="RUN")
    r.add_argument("--lease", metavar="DUR")
    h = add(acts, "handover", "move another machine's open run to this one (human-only)", handler=turn_handover,
            render=render_handover, command="turn handover", example="loopx turn handover --run run-3f9a1c",
            description="A run is resumed and finished only on the machine that started it. When that machine "
                        "is gone, hand its open run (and the todo's claim) to this clone: its agent resumes it "
                        "here with `loopx next`.")
    h.add_argument("--run", required=True, metavar="RUN")


def turn_finish(ctx, run, result, evidence=None, verify=False, note=None):
    if verify:  # the verify command ends with this command, SIGTERM (the runner stopping the agent's group) or not
        stop_signals_interrupt()
    res = _trial_finish(ctx, run, result, note) or turn.finish(ctx.store(), ctx.actor, run, result,
                                                               evidence=evidence or (), verify=verify, note=note)
    warnings = res.pop("warnings", [])
    v = res.get("verify")
    if v and v.get("setup_error") and not res.get("repeat"):
        warnings.append(f"{v['setup_error']['message']}: a setup error, not the agent's; should-run answers "
                        "verify_broken until it is fixed (`loopx doctor` shows the recorded PATH)")
    elif v and not res["verified"] and result in ("progress", "completion") and not res.get("repeat") \
            and not res.get("trial"):  # a trial has no todo nor verify: its measurement decided (already said)
        warnings.append(f"the verify command failed (exit {v['exit_code']}): the run is recorded as unverified "
                        "progress and cannot be charged; fix it in the next turn, or ask a human to reopen the todo "
                        "(`loopx todo update <todo> --reopen`) if it was closed on evidence that did not hold")
    return output.Reply(res, 0, warnings)


def _trial_finish(ctx, run, result, note):
    """A run on a research experiment goal is measured by loopx (issue 20); only a store with an
    experiment worktree pays for the check."""
    store = ctx.store()
    try:
        if not any(n.startswith("exp-") for n in os.listdir(store.path(layout.WORKTREES))):
            return None
    except OSError:
        return None
    from loopx.kernel.policy import trialstep
    from loopx.sync import shared

    stop_signals_interrupt()  # the measure command ends with this command, SIGTERM or not
    return trialstep.finish_by_agent(store, ctx.actor, run, result, note, spend_slot=shared.spend_slot)


def render_finish(d: dict) -> str:
    again = " (already finished; nothing changed)" if d.get("repeat") else ""
    ver = f", verified {'yes' if d['verified'] else 'no'}" if d["result"] in ("progress", "completion") else ""
    line = f"finished {d['run_id']}: {d['result']}{ver}{again}"
    if d.get("trial"):
        t = d["trial"]
        line += f"\n  trial {t['trial_id']}: {t['decision']} ({t.get('reason')})"
    v = d.get("verify")
    if v and d.get("trial"):  # the trial's measurement, recorded as evidence (its exit: keep 0, else 1)
        line += f"\n  measured -> evidence {v['evidence_id']}"
    elif v:
        line += f"\n  verify exit {v['exit_code']} -> evidence {v['evidence_id']}"
    if d.get("todo_id"):
        line += f"\n  todo {d['todo_id']} is {d.get('todo_status')}"
    spend = d.get("spend") or {}
    if d.get("trial") and spend.get("spent") and not spend.get("repeat"):  # a keep: loopx charged it itself
        line += f"\n  loopx spent {spend.get('slots', 1)} slot(s) for the keep"
    if d["verified"] and d["result"] in ("progress", "completion") and not d.get("repeat") and not d.get("trial"):
        line += f"\n  spend the slot: loopx quota spend-slot --run {d['run_id']}"
    return line


def turn_handover(ctx, run):
    from loopx.kernel.humans import require_human
    from loopx.kernel.write import runs

    require_human(ctx, "run.handover")
    return runs.hand_over(ctx.store(), ctx.actor, run)


def render_handover(d: dict) -> str:
    from loopx.kernel.storage import actors

    if not d["moved"]:
        return f"{d['run_id']} already runs on this machine; nothing changed"
    return (f"{d['run_id']} ({d['agent']} on {d['todo_id'] or 'planning'}) now belongs to this machine: "
            f"`loopx --agent {actors.agent_name(d['agent']) or d['agent'] or ''} next` resumes it here")


def turn_renew(ctx, run, lease=None):
    from loopx.sync import shared

    return shared.renew(ctx.store(), ctx.actor, run, lease=lease)
