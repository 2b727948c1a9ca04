"""``loopx demo``: the main job on real input, end to end.

Copies the bundled example project (a Python package whose tests fail for three real reasons),
makes it a git repository on branch ``loopx/fixes``, connects it, starts goal ``demo`` (one todo
per failing test, each with its own verify command, and a protected ``merge`` step), then drives
it with ``loopx run`` and the bundled deterministic example agent. It stops at the human gate and
prints the exact approve command; run ``loopx demo`` again after approving (or pass ``--approve``
to approve as yourself in one go) and it finishes and prints the review packet.

The project goes to ``<loopx data folder>/demo`` (``$LOOPX_HOME/demo`` when set; see
``kernel.registry.home``), never into the current folder, so running the demo from a checkout
leaves the checkout clean; ``--dir`` picks another place. The output says where it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loopx import output
from loopx.commands import add, demo_research
from loopx.commands.demokit import agent_session as _agent_session  # shared with demo --research
from loopx.commands.demokit import git as _git
from loopx.commands.demokit import new_project
from loopx.commands.demokit import python_command as _python
from loopx.config import data_home, env
from loopx.errors import HumanRequired, UsageError
from loopx.kernel import humans
from loopx.kernel.policy import review
from loopx.kernel.storage import clock, layout
from loopx.kernel.storage.store import Store
from loopx.kernel.write import gates, goals, todos
from loopx.output import safe
from loopx.resources import data_path
from loopx.runner import loop
from loopx.runner.presets import quote

GOAL = "demo"
TODOS = [
    ("Fix subtotal: count each line's quantity", "TestSubtotal"),
    ("Fix apply_discount: treat the percent as a percentage", "TestDiscount"),
    ("Fix format_price: always show two decimals", "TestFormat"),
]
MERGE = "Merge branch loopx/fixes into main (protected action: merge)"


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=demo, render=render, command="demo",
            example="loopx demo --dir /tmp/loopx-demo --approve")
    p.add_argument("--dir", metavar="DIR", default=None,
                   help="where to put the demo project (default: demo/ in loopx's data folder, "
                        "$LOOPX_HOME/demo when set); run again to continue")
    p.add_argument("--approve", action="store_true",
                   help="approve the merge gate yourself when the demo reaches it (you are the human)")
    p.add_argument("--timeout", metavar="DUR", default="5m", help="per-turn agent timeout (default 5m)")
    p.add_argument("--research", action="store_true",
                   help="the research demo instead: a KNN classifier, trials kept or discarded, a promotion gate "
                        "(docs/experiments.md)")


def setup(path, actor: str) -> dict:
    """Copy the example project to ``path`` (a new or empty directory), git-init it, connect it
    and start goal ``demo``. Returns {dir, goal_id, todo_ids}."""
    store = new_project(path, "demo-project", "shopcart: initial import (tests fail)", again="loopx demo")
    _git(path, "checkout", "-q", "-b", "loopx/fixes")
    py = _python()
    goals.start_goal(store, actor, goal_id=GOAL, objective="Make shopcart's test suite pass and merge the fixes into main",
                     done_when="`python -m unittest` passes on main", verify=f"{py} -m unittest -q",
                     protect=["merge"], quota=goals.quota_policy(slots=10, window="24h"))
    ids = []
    for title, case in TODOS:
        t = todos.add(store, actor, GOAL, title, verify=f"{py} -m unittest -q tests.test_cart.{case}",
                      acceptance=f"tests.test_cart.{case} passes")
        ids.append(t["todo_id"])
    t = todos.add(store, actor, GOAL, MERGE, depends_on=ids, acceptance="main contains the fixes; the suite passes")
    ids.append(t["todo_id"])
    return {"dir": str(path), "goal_id": GOAL, "todo_ids": ids}


def default_dir() -> str:
    """``demo`` in the user's loopx data folder (``$LOOPX_HOME/demo`` when set)."""
    return os.path.join(data_home(), layout.DEMO)


def demo(ctx, dir=None, approve=False, timeout="5m", research=False):
    if research:
        return demo_research.run(ctx, dir=dir, approve=approve, timeout=timeout)

    path = Path(dir or default_dir()).resolve()
    if approve and (ctx.agent or _agent_session()):
        raise HumanRequired("--approve is for a human at a terminal, not an agent session",
                            "run the demo without --approve and let a human approve the gate")
    fresh = not (path / layout.DIRNAME).is_dir()
    if fresh and path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{path} exists and is not a loopx demo", "pass --dir with a new or empty directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    info = setup(path, ctx.actor) if fresh else {"dir": str(path), "goal_id": GOAL}
    store = Store.open(str(path))
    if GOAL not in store.load()["goals"]:
        raise UsageError(f"{path} is a loopx project without the demo goal", "pass --dir with a new or empty directory")
    secs = clock.parse_duration(timeout)
    log = (lambda m: output.print_text(output.safe(m), sys.stderr)) if not (ctx.json or ctx.quiet) else None
    if log:
        log(("set up " if fresh else "continuing ") + f"the demo in {path}")
        if fresh:
            log(f"shopcart's test suite before the loop: {_suite(path)}")
    turns = []
    while True:
        # number turns after the goal's earlier runs, so a second `loopx demo` (or the drive after an
        # approval) goes on counting instead of starting at 1 again
        done_before = sum(1 for r in store.load()["runs"].values() if r["goal"] == GOAL)
        res = _drive(store, secs, ctx, log, first_turn=done_before + 1)
        turns += res["turns"]
        stop = res.get("stop") or {}
        if res["exit_code"] or stop.get("decision") != "wait_human" or not stop.get("gate_id") or not approve:
            break

        human = humans.require_human(ctx, "gate.decide", via="confirm-flag")
        gates.decide(store, human.actor, stop["gate_id"], approve=True, channel="confirm-flag",
                     note="approved with `loopx demo --approve`", human=human)
        if log:
            log(f"approved gate {stop['gate_id']} as {ctx.actor} (--approve)")
    out = {"dir": str(path), "goal_id": GOAL, "fresh": fresh, "turns": turns, "stop": stop, "stage": "stopped"}
    if env("LOOPX_DEMO_DEBUG"):
        out["info"] = info
    return output.Reply(*_conclude(store, ctx, out, res))


def _suite(path) -> str:
    """The last line of the demo project's unittest run (e.g. ``FAILED (failures=4)``)."""
    proc = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=path, capture_output=True, text=True)
    lines = [x for x in (proc.stderr + proc.stdout).splitlines() if x.strip()]
    return lines[-1].strip() if lines else f"exit {proc.returncode}"


def _drive(store, secs, ctx, log, first_turn: int = 1):
    agent = data_path("examples", "agents", "fixer.py")
    cmd = f"{_python()} {quote(str(agent))}"
    echo = None if ctx.json or ctx.quiet else sys.stderr
    return loop.drive(store, "fixer", goal_id=GOAL, agent_cmd=cmd, timeout=secs, echo=echo, log=log,
                      first_turn=first_turn)


def _conclude(store, ctx, out, res):
    stop = out["stop"]
    if res["exit_code"]:
        out["stage"] = "agent_failed"
        return out, 1
    if stop.get("decision") == "wait_human" and stop.get("gate_id"):
        gid = stop["gate_id"]

        flag = "" if out["dir"] == str(Path(default_dir()).resolve()) else f" --dir {quote(out['dir'])}"
        out.update(stage="gate", gate_id=gid, question=stop.get("question"),
                   approve_command=f"loopx --project {quote(out['dir'])} gate approve {gid} --confirm {gid}",
                   continue_command=f"loopx demo{flag}")
        return out, 0
    if stop.get("reason") in ("complete", "close_goal"):
        goals.set_status(store, ctx.actor, GOAL, "done", note="every todo done with evidence; merge approved",
                         human=humans.channel_or_none(ctx))
    state = store.load()
    if state["goals"][GOAL]["status"] == "done":
        d = review.build(store, GOAL)
        out.update(stage="done", review=review.render_markdown(d), suite_after=_suite(out["dir"]))
        return out, 0
    return out, 1


def render(d: dict) -> str:
    if d.get("goal_id") == "knn" and "summary" in d:
        return demo_research.render(d)

    n = len(d["turns"])
    lines = [f"demo project: {safe(d['dir'])}  ({n} turn{'' if n == 1 else 's'} this time)"]
    for t in d["turns"]:
        spent = " +1 slot" if t.get("slots") else ""
        lines.append(f"  turn {t.get('number', '?')}: {t['run_id']} {t['todo_id'] or 'planning'}: {t['result']}{spent}"
                     f"  {safe(t.get('note') or '')}".rstrip())
    if d["stage"] == "gate":
        lines += ["", "The loop stopped at a human gate:", f"  {d['gate_id']}: {safe(d['question'])}", "",
                  "Approve it (you are the human):", f"  {d['approve_command']}",
                  "then continue the demo:", f"  {d['continue_command']}"]
    elif d["stage"] == "done":
        lines += ["", f"The goal is done; shopcart's test suite on main: {safe(d['suite_after'])}", "",
                  "Review packet:", "", safe(d["review"], one_line=False)]
    else:
        s = d.get("stop") or {}
        lines.append(f"stopped ({d['stage']}): {s.get('decision')} {s.get('reason')}: {safe(s.get('message'))}")
    return "\n".join(lines)
