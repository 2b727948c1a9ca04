"""``loopx next``: start a turn (claim the todo, open a run) and print the turn packet."""

from __future__ import annotations

from loopx.commands import add, goal_opt


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=turn_next, render=render_next, command="next",
            example="loopx --agent codex next --goal-id g1",
            description="When should-run says run: claim the todo with a lease, open a run and print the "
                        "turn packet. Otherwise print the decision and exit 1 without claiming.")
    goal_opt(p)
    p.add_argument("--lease", metavar="DUR", help="lease on the todo and the run (default 30m)")
    p.add_argument("--dry-run", action="store_true", help="print the packet without claiming or opening a run")
    p.add_argument("--sync", action="store_true",
                   help="sync with the git remote first and claim through refs/loopx/claims, so two machines "
                        "never work the same todo")
    p.add_argument("--remote", metavar="NAME", help="the git remote for --sync (default origin)")


def turn_next(ctx, goal_id=None, lease=None, dry_run=False, sync=False, remote=None):
    from loopx import output
    from loopx.kernel.policy import turn

    if sync and not dry_run:  # claim through the git remote (docs/multi-agent.md, "loopx next --sync")
        from loopx.sync import shared

        res = shared.next_turn_synced(ctx.store(), ctx.actor, goal_id=goal_id, lease=lease, remote=remote)
    else:
        res = turn.next_turn(ctx.store(), ctx.actor, goal_id=goal_id, lease=lease, dry_run=dry_run)
    d = res["decision"]
    if d["decision"] == "error":
        from loopx.errors import StateError

        raise StateError(d["message"], "see `loopx doctor`", code=d["reason"], details={"decision": d})
    if not res["started"] and not res["packet"]:
        from loopx.kernel.policy import decide

        return output.Reply(res, decide.exit_code(d))
    if res["started"] and res.get("mode") == "trial" and not res.get("resumed") and not dry_run:
        from loopx.kernel.policy import trialstep  # a new trial starts on the frontier, never on leftovers

        trialstep.prepare(ctx.store(), res["goal_id"], res["run_id"], parallel=False)
    return res


def render_next(d: dict) -> str:
    from loopx.output import safe

    if d.get("packet_text"):
        head = f"(resuming your open run {d['run_id']}: finish it before asking for new work)\n" if d.get("resumed") else ""
        return head + safe(d["packet_text"], one_line=False)
    dec = d["decision"]
    extra = f"\nnext check: {dec['next_check_at']}" if dec.get("next_check_at") else ""
    return f"no turn: {dec['decision']} ({dec['reason']}): {safe(dec['message'])}{extra}"

