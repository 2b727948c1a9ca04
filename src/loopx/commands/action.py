"""``loopx action push|perform|list``: protected actions loopx performs itself after a human's
approval (loopx.sandbox.actions). An agent asks (``push``: a gate pinned to remote, URL, branch and
commit); a human approves the gate; loopx performs it once (``perform``, or ``loopx run``)."""

from __future__ import annotations

from loopx.commands import actions, add, goal_opt
from loopx.config import env
from loopx.kernel.humans import require_human
from loopx.output import Reply
from loopx.sandbox import actions as act


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx action push --remote origin --branch main --sha $(git rev-parse HEAD)")
    acts = actions(p)
    ps = add(acts, "push", "ask a human to approve a push loopx will make (pinned to remote, branch, commit)",
             handler=action_push, render=render_push, command="action push",
             example="loopx action push --remote origin --branch main --sha 3f9a...")
    goal_opt(ps)
    ps.add_argument("--remote", required=True, help="the remote's name (its URL is pinned in the request)")
    ps.add_argument("--branch", required=True, help="the branch on the remote")
    ps.add_argument("--sha", required=True, help="the commit to push (a full or abbreviated SHA)")
    ps.add_argument("--run", metavar="RUN", help="the run that asked")
    pf = add(acts, "perform", "perform an approved action once (humans only)", handler=action_perform,
             render=render_perform, command="action perform", example="loopx action perform gate-8b20d4")
    pf.add_argument("gate")
    ls = add(acts, "list", "list requested actions", handler=action_list, render=render_list, command="action list",
             example="loopx action list")
    goal_opt(ls)


def action_push(ctx, goal_id=None, remote=None, branch=None, sha=None, run=None) -> dict:

    return act.request_push(ctx.store(), ctx.actor, goal_id, remote, branch, sha,
                            run=run or env("LOOPX_RUN_ID"))


def action_perform(ctx, gate=None):
    human = require_human(ctx, "action.perform")
    res = act.perform(ctx.store(), human.actor, gate)
    return Reply(res, exit_code=0 if res["performed"] else 1)


def action_list(ctx, goal_id=None) -> dict:
    return {"actions": act.listing(ctx.store().load())}


def render_push(d: dict) -> str:
    return (f"requested: {d['question']}\n  gate {d['gate_id']} (code {d['code']}); after a human approves it, "
            f"loopx pushes once: loopx action perform {d['gate_id']}")


def render_perform(d: dict) -> str:
    a = d["action"]
    word = "pushed" if d["performed"] else f"push failed (exit {d['exit_code']})"
    return f"{word}: {a['sha'][:12]} to {a['remote']} {a['branch']} ({d['gate_id']})\n{d['output']}".rstrip()


def render_list(d: dict) -> str:
    if not d["actions"]:
        return "no action requests"
    return "\n".join(f"{a['gate_id']}  {a['status']}{' (used)' if a['used'] else ''}  push {a['sha'][:12]} -> "
                     f"{a['remote']} {a['branch']}" for a in d["actions"])
