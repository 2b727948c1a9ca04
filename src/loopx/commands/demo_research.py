"""``loopx demo --research``: a research experiment end to end, on real input (issue 20).

Copies the bundled ``examples/research-project`` (a plain-Python KNN classifier, a data set made
with a fixed seed, a dev split and a holdout split), makes it a git repository on ``main``,
connects it and starts experiment goal ``knn`` (metric ``val_acc``, measure ``eval.py``, holdout
``holdout.py`` on ``data/holdout.csv``, plateau 3). loopx measures the baseline, then drives the
deterministic ``examples/agents/researcher.py`` through trials (some improve, some do not, one
crashes) until the plateau, opens the ``promote`` gate with the holdout result for the human,
and stops there. With ``--approve`` (you are the human) it approves, merges the frontier into
``main``, writes the review packet (``review.md``) and a trace archive (``trace.tar.gz``) that
``loopx trace verify`` accepts. The project goes to ``<data folder>/demo-research`` unless
``--dir`` is given.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from loopx import output
from loopx.commands.demokit import agent_session as _agent_session  # the two demos share these
from loopx.commands.demokit import new_project
from loopx.commands.demokit import python_command as _python
from loopx.commands.experiment import holdout_lines
from loopx.config import data_home
from loopx.errors import HumanRequired, UsageError
from loopx.kernel import humans
from loopx.kernel.policy import review, trialstep
from loopx.kernel.read import experiments, queries
from loopx.kernel.read import experiments as ex
from loopx.kernel.storage import clock, layout
from loopx.kernel.storage.store import Store
from loopx.kernel.write import gates, goals, trials
from loopx.ops import trace
from loopx.output import safe
from loopx.resources import data_path
from loopx.runner import loop
from loopx.runner.presets import quote
from loopx.sandbox import holdout_policy

GOAL = "knn"


def default_dir() -> str:
    return os.path.join(data_home(), layout.DEMO_RESEARCH)


def setup(path, actor: str) -> dict:
    """Copy the research project to ``path``, make it a git repository, connect it, start
    experiment goal ``knn`` and measure its baseline. Returns {dir, goal_id, baseline}."""
    store = new_project(path, "research-project", "knn: a k-nearest-neighbours classifier and its data",
                        again="loopx demo --research", ignore="__pycache__/\ndata/holdout.csv\n")  # holdout data: never tracked
    py = _python()
    cfg = trials.config(metric="val_acc", direction="max", measure=f"{py} eval.py", trial_timeout="2m",
                        min_delta="0.005", holdout=f"{py} holdout.py", plateau="3",
                        protect=["knn.py", "data/train.csv", "data/dev.csv", "data/make_data.py"],
                        holdout_paths=["data/holdout.csv"])
    goals.start_goal(store, actor, goal_id=GOAL, objective="Raise the KNN classifier's dev accuracy (val_acc)",
                     done_when="a human promotes the best configuration", quota=goals.quota_policy(slots=20, window="24h"))
    exp = trialstep.start(store, actor, GOAL, cfg)
    return {"dir": str(path), "goal_id": GOAL, "baseline": exp["baseline"]}


def run(ctx, dir=None, approve=False, timeout="2m"):
    path = Path(dir or default_dir()).resolve()
    if approve and (ctx.agent or _agent_session()):
        raise HumanRequired("--approve is for a human at a terminal, not an agent session",
                            "run the demo without --approve and let a human approve the gate")
    fresh = not (path / layout.DIRNAME).is_dir()
    if fresh and path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{path} exists and is not a loopx demo", "pass --dir with a new or empty directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    log = (lambda m: output.print_text(output.safe(m), sys.stderr)) if not (ctx.json or ctx.quiet) else None
    if fresh:
        info = setup(path, ctx.actor)
        if log:
            b = info["baseline"]
            log(f"set up the research demo in {path}; baseline val_acc {experiments.fmt_value(b.get('value'))}")
    store = Store.open(str(path))
    if not experiments.is_experiment(store.load(), GOAL):
        raise UsageError(f"{path} is a loopx project without the research demo", "pass --dir with a new or empty directory")
    res = _drive(store, clock.parse_duration(timeout), ctx, log)
    out = {"dir": str(path), "goal_id": GOAL, "fresh": fresh, "turns": res["turns"], "stop": res.get("stop") or {},
           "stage": "stopped"}
    state = store.load()
    stop = out["stop"]
    pending = [g for g in queries.pending_gates(state, GOAL) if g["kind"] == "promote"]
    human = humans.channel_or_none(ctx)
    if not pending and stop.get("reason") == "plateau" and human is not None and not experiments.get(state, GOAL).get("promoted"):
        p = trialstep.promote(store, human.actor, GOAL, confine=holdout_policy)
        out["holdout"] = p["holdout"]
        pending = [queries.resolve_gate(store.load(), p["gate_id"])]
    elif pending and human is not None:
        out["holdout"] = trialstep.read_holdout(store, pending[0]["id"])
    if pending:
        gate = pending[0]
        out.update(stage="gate", gate_id=gate["id"], question=gate["question"],
                   approve_command=f"loopx --project {path} gate approve {gate['id']} --confirm {gate['id']}",
                   continue_command="loopx demo --research" + ("" if str(path) == str(Path(default_dir()).resolve())
                                                               else f" --dir {path}"))
        if approve:
            human = humans.require_human(ctx, "gate.decide", via="confirm-flag")
            gates.decide(store, human.actor, gate["id"], approve=True, channel="confirm-flag",
                         note="approved with `loopx demo --research --approve`", human=human)
            out["promoted"] = trialstep.promote_approved(store, human.actor)
            if log:
                log(f"approved gate {gate['id']} as {human.actor}: the frontier is merged into main")
    state = store.load()
    if experiments.get(state, GOAL).get("promoted"):
        out.update(_finish(store, ctx, path))
    out["summary"] = experiments.summary(state, GOAL)
    return output.Reply(out, 1 if out["stage"] == "stopped" else 0)


def _drive(store, secs, ctx, log):
    agent = data_path("examples", "agents", "researcher.py")
    done_before = sum(1 for r in store.load()["runs"].values() if r["goal"] == GOAL)
    return loop.drive(store, "researcher", goal_id=GOAL, agent_cmd=f"{_python()} {quote(str(agent))}", timeout=secs,
                      echo=None if ctx.json or ctx.quiet else sys.stderr, log=log, first_turn=done_before + 1)


def _finish(store, ctx, path) -> dict:
    g = store.load()["goals"][GOAL]
    if g["status"] != "done":
        goals.set_status(store, ctx.actor, GOAL, "done", note="the best configuration was promoted",
                         human=humans.channel_or_none(ctx))
    d = review.build(store, GOAL)
    md = review.render_markdown(d)
    with open(os.path.join(path, "review.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    archive = os.path.join(path, "trace.tar.gz")
    trace.export(store, GOAL, archive)
    verdict = trace.verify(archive)
    return {"stage": "done", "review": md, "review_file": os.path.join(path, "review.md"), "trace": archive,
            "trace_ok": bool(verdict.get("ok")), "trace_verify": f"loopx trace verify {archive}"}


def render(d: dict) -> str:
    n = len(d["turns"])
    L = [f"research demo: {safe(d['dir'])}  ({n} trial{'' if n == 1 else 's'} this time)"]
    for t in d["turns"]:
        tr = t.get("trial") or {}
        L.append(f"  trial {tr.get('number', '?')} {tr.get('trial_id') or '-'}: {tr.get('decision', t['result']):8} "
                 f"val_acc {ex.fmt_value(tr.get('value')):7} {safe(ex.clip(tr.get('hypothesis'), 64))}")
    s = d.get("summary") or {}
    if s:
        L.append(f"baseline {ex.fmt_value((s.get('baseline') or {}).get('value'))} -> frontier "
                 f"{ex.fmt_value((s.get('frontier') or {}).get('value'))}; {ex.tally(s)}")
    if d["stage"] == "gate":
        L += ["", "The loop stopped at the plateau; promotion is your decision:", f"  {d['gate_id']}: {safe(d['question'])}"]
        if "holdout" in d:
            L += holdout_lines(d["holdout"])
        L += ["", "Approve it (you are the human):", f"  {d['approve_command']}", "then continue the demo:",
              f"  {d['continue_command']}"]
    elif d["stage"] == "done":
        L += ["", f"Promoted into main. Review packet: {safe(d['review_file'])}; trace: {safe(d['trace'])} "
                  f"({'verified' if d['trace_ok'] else 'DID NOT VERIFY'}: {d['trace_verify']})"]
    else:
        s = d.get("stop") or {}
        L.append(f"stopped: {s.get('decision')} {s.get('reason')}: {safe(s.get('message') or '')}")
    return "\n".join(L)
