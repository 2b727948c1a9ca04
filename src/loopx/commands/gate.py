"""``loopx gate open|list|show|approve|reject|check``.

Approve and reject are for humans only: they refuse when the caller is an agent (``--agent``,
``LOOPX_AGENT`` or an agent host's environment marker, here or in a parent process; see
``loopx.kernel.humans``) and need either the gate's code typed on the
controlling terminal (channel ``terminal``) or ``--confirm ID`` (channel ``confirm-flag``).
"""

from __future__ import annotations

import os
import sys

from loopx.commands import actions, add, goal_opt
from loopx.output import Reply, safe, table


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx gate list")
    acts = actions(p)
    o = add(acts, "open", "ask a human a concrete question before a protected action", handler=gate_open,
            render=render_open, command="gate open",
            example='loopx gate open --kind merge --question "Merge PR #12 into main?" --blocks t-3f9a')
    goal_opt(o)
    o.add_argument("--kind", required=True, help="merge, release, production-write, sensitive-data, route-change, spend, custom")
    o.add_argument("--question", required=True, metavar="TEXT")
    o.add_argument("--blocks", action="append", metavar="TODO", help="todo it blocks (repeatable; default: the whole goal)")
    o.add_argument("--context", metavar="TEXT", help="what the human needs to know to decide")
    o.add_argument("--run", metavar="RUN", help="the run that asked")

    lst = add(acts, "list", "list gates", handler=gate_list, render=render_list, command="gate list",
              example="loopx gate list --status pending")
    goal_opt(lst)
    lst.add_argument("--status", choices=["pending", "approved", "rejected", "all"], default="all")

    s = add(acts, "show", "show one gate", handler=gate_show, render=render_show, command="gate show",
            example="loopx gate show gate-8b20")
    s.add_argument("gate")

    for action, approve in (("approve", True), ("reject", False)):
        a = add(acts, action, f"{action} a pending gate (humans only)", handler=gate_decide, render=render_decide,
                command=f"gate {action}",
                example=f"loopx gate {action} gate-8b20d4" + (" --note 'not before the release'" if not approve else ""))
        a.add_argument("gate")
        a.add_argument("--note", metavar="TEXT", required=not approve, help="why (required to reject)")
        a.add_argument("--confirm", metavar="ID", help="confirm without a terminal prompt by repeating the gate id")
        if approve:
            a.add_argument("--standing", action="store_true",
                           help="approve every later action of this kind for the goal, not just one (shown as standing)")
        a.set_defaults(approve=approve)

    sg = add(acts, "signing", "turn signed approvals on or off, or show them (humans only to change)",
             handler=gate_signing, render=render_signing, command="gate signing",
             example="loopx gate signing --enable --key ~/.ssh/id_ed25519")
    mode = sg.add_mutually_exclusive_group()
    mode.add_argument("--enable", dest="enable", action="store_const", const=True,
                      help="sign every approval with --key (ssh-keygen -Y sign, namespace loopx-gate)")
    mode.add_argument("--disable", dest="enable", action="store_const", const=False,
                      help="stop requiring signatures (the change itself is signed)")
    sg.add_argument("--key", metavar="PATH", help="private key, or the .pub of an ssh-agent or security key")
    sg.add_argument("--principal", metavar="NAME", help="the signer's name in allowed_signers (default: your login)")

    c = add(acts, "check", "exit 0 when an approved gate covers an action, else 1", handler=gate_check,
            render=render_check, command="gate check", example="loopx gate check --action merge && git push origin main")
    goal_opt(c)
    c.add_argument("--action", required=True, metavar="KIND")


def gate_open(ctx, kind, question, goal_id=None, blocks=None, context=None, run=None) -> dict:
    from loopx.kernel.write import gates

    return gates.open_gate(ctx.store(), ctx.actor, goal_id, kind=kind, question=question, blocks=blocks,
                           context=context, run=run)


def render_open(d: dict) -> str:
    return (f"opened gate {d['gate_id']} ({d['kind']}) on {d['goal_id']}: {safe(d['question'])}\n"
            f"a human approves with: loopx gate approve {d['gate_id']}\n"
            "stop here until it is decided (agents cannot approve gates)")


def _brief(g: dict) -> dict:
    return {k: g.get(k) for k in ("id", "goal", "kind", "status", "question", "context", "blocks", "requested_by",
                                  "decided_by", "channel", "note", "created", "decided", "standing", "used")}


def _status_word(g: dict) -> str:
    if g["status"] != "approved":
        return g["status"]
    if g.get("standing"):
        return "approved (standing)"
    return "approved (used)" if g.get("used") else "approved (once)"


def gate_list(ctx, goal_id=None, status="all") -> dict:
    from loopx.kernel.read import queries

    state = ctx.store().load()
    gid = queries.resolve_goal(state, goal_id)["id"] if goal_id else None
    rows = [_brief(g) for g in sorted(state["gates"].values(), key=lambda g: g["created"])
            if (gid is None or g["goal"] == gid) and (status == "all" or g["status"] == status)]
    return {"gates": rows, "count": len(rows)}


def render_list(d: dict) -> str:
    if not d["gates"]:
        return "no gates"
    return table([[g["id"], _status_word(g), g["kind"], g["goal"], safe(g["question"], limit=70)] for g in d["gates"]],
                 ["GATE", "STATUS", "KIND", "GOAL", "QUESTION"])


def gate_show(ctx, gate) -> dict:
    from loopx.kernel.read import queries
    from loopx.kernel.write import gates

    g = queries.resolve_gate(ctx.store().load(), gate)
    out: dict = {"gate": dict(_brief(g), code=gates.short_code(g["id"]))}
    if g["kind"] == "promote":  # the holdout result of a research experiment: for a human's eyes only
        from loopx.kernel import humans

        if humans.channel_or_none(ctx) is not None:
            from loopx.kernel.policy import trialstep

            out["holdout"] = trialstep.read_holdout(ctx.store(), g["id"])
    return out


def render_show(d: dict) -> str:
    g = d["gate"]
    lines = [f"gate {g['id']}  ({g['status']}, {g['kind']})  goal {g['goal']}",
             f"  question:  {safe(g['question'])}"]
    if g.get("context"):
        lines.append(f"  context:   {safe(g['context'])}")
    if "holdout" in d:
        from loopx.commands.experiment import holdout_lines

        lines += holdout_lines(d["holdout"])
    lines.append(f"  blocks:    {', '.join(g['blocks']) or 'the whole goal'}")
    lines.append(f"  asked by:  {safe(g['requested_by'])} at {g['created']}")
    if g["status"] == "pending":
        lines.append(f"  decide:    loopx gate approve {g['id']}   |   loopx gate reject {g['id']} --note '...'")
    else:
        lines.append(f"  decided:   {_status_word(g)} by {safe(g['decided_by'])} via {g['channel']} at {g['decided']}")
        if g.get("used"):
            u = g["used"]
            lines.append(f"  used:      {u.get('count', 1)}x, last at {u.get('ts')} by {safe(u.get('by') or '?')}: "
                         f"{safe(u.get('command') or '', limit=100)}")
        if g.get("note"):
            lines.append(f"  note:      {safe(g['note'])}")
    return "\n".join(lines)


def _tty_confirm(gate: dict, approve: bool) -> bool:
    """Ask on the controlling terminal for the gate's code. False when there is no terminal."""
    from loopx.kernel.write.gates import short_code

    code = short_code(gate["id"])
    try:
        if os.name == "nt":  # pragma: no cover
            tin = open("CONIN$", encoding="utf-8")  # noqa: SIM115
            tout = open("CONOUT$", "w", encoding="utf-8")  # noqa: SIM115
        else:
            tin = open("/dev/tty", encoding="utf-8", errors="replace")  # noqa: SIM115
            tout = open("/dev/tty", "w", encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError:
        return False
    with tin, tout:
        verb = "APPROVE" if approve else "REJECT"
        tout.write(f"gate {gate['id']} ({gate['kind']}): {safe(gate['question'])}\n"
                   f"type {code} (or the full id) to {verb}; anything else cancels: ")
        tout.flush()
        answer = tin.readline().strip().lower()
    from loopx.errors import UsageError

    if answer not in (code, gate["id"]):
        raise UsageError("not confirmed; nothing was written", f"type the code {code} exactly, or pass --confirm {gate['id']}",
                         code="not_confirmed")
    return True


def gate_decide(ctx, gate, approve, note=None, confirm=None, standing=False) -> dict:
    from loopx.errors import HumanRequired, UsageError
    from loopx.kernel import humans
    from loopx.kernel.read import queries
    from loopx.kernel.write import gates

    human = humans.require_human(ctx, "gate.standing" if standing else "gate.decide")
    store = ctx.store()
    g = queries.resolve_gate(store.load(), gate)
    if confirm is not None:
        if confirm.strip() not in (g["id"], gates.short_code(g["id"])):
            raise UsageError(f"--confirm {confirm!r} does not name gate {g['id']}", f"pass --confirm {g['id']}",
                             code="bad_confirmation")
        channel = "confirm-flag"
    elif ctx.json or not _tty_confirm(g, approve):
        raise HumanRequired("no terminal to confirm on", f"run it in a terminal, or pass --confirm {g['id']}",
                            code="confirmation_required")
    else:
        channel = "terminal"
    human.via = channel
    from loopx.kernel.write import signsetup

    signature = signsetup.sign_approval(g, standing) if approve else None
    from loopx.sync import shared

    out = shared.decide_gate(store, human.actor, g["id"], approve=approve, note=note, channel=channel,
                       user_agent=f"loopx-cli/{sys.platform}", human=human, standing=standing, signature=signature)
    if approve and g["kind"] == "promote":  # research experiments: approval merges the frontier (issue 20)
        from loopx.kernel.policy import trialstep

        out["promoted"] = trialstep.promote_approved(store, human.actor)
    if signature:
        out["signed_by"] = f"{signature['principal']} {signature['fingerprint']}"
    return out


def gate_signing(ctx, enable=None, key=None, principal=None) -> dict:
    from loopx.kernel import humans
    from loopx.kernel.write import signing, signsetup

    if enable is None:
        return dict(signsetup.check(), allowed_signers=signing.signers_path(), log=signing.log_path())
    human = humans.require_human(ctx, "signing.config")
    return signsetup.configure(enable=enable, key=key, principal=principal, human=human)


def render_signing(d: dict) -> str:
    if "signers" not in d:
        state = "on" if d["enabled"] else "off"
        return f"signed approvals {state} for {safe(d['principal'])} ({d['fingerprint']}); allowed signers: {safe(d['allowed_signers'])}"
    lines = [f"signed approvals: {'on' if d['enabled'] else 'off'} ({d['entries']} signed change(s) in {safe(d['log'])})"]
    lines += [f"  signer {safe(s['principal'])}  {s['fingerprint']}" for s in d["signers"]]
    lines += [f"  problem: {safe(p)}" for p in d["problems"]]
    return "\n".join(lines)


def render_decide(d: dict) -> str:
    extra = ""
    if d["status"] == "approved":
        extra = ("\nstanding approval: it covers every later " + d["kind"] + " action of the goal") if d.get("standing") \
            else "\nsingle-use approval: it covers one " + d["kind"] + " action (the guard records its use)"
    if d.get("signed_by"):
        extra += f"\nsigned by {safe(d['signed_by'])}"
    if d.get("blocked"):
        extra += (f"\n  blocked {', '.join(d['blocked'])} until a human re-opens them "
                  f"(`loopx todo update {d['blocked'][0]} --reopen`) or the agent re-plans the work")
    return f"{d['status']} gate {d['gate_id']} ({d['kind']}) on {d['goal_id']} as {safe(d['decided_by'])} via {d['channel']}" + extra


def gate_check(ctx, action, goal_id=None):
    from loopx.kernel.read import approvals, queries

    state = ctx.store().load()
    g = queries.resolve_goal(state, goal_id)
    from loopx.guard.verdicts import verify_gate

    hit = approvals.covering_gate(state, g["id"], action, verify=verify_gate)
    pending = [x["id"] for x in queries.pending_gates(state, g["id"]) if x["kind"] == action]
    used = approvals.last_used(state, g["id"], action) if hit is None else None
    unsigned = [x["id"] for x in state["gates"].values() if x["goal"] == g["id"] and x["kind"] == action
                and approvals.usable(x) and not verify_gate(x)]
    data = {"goal_id": g["id"], "action": action, "allowed": hit is not None, "gate_id": hit["id"] if hit else None,
            "standing": bool(hit and hit.get("standing")), "used": used["id"] if used else None,
            "pending": pending, "protected": action in g["scope"]["protect"], "unsigned": unsigned}
    return Reply(data, exit_code=0 if hit else 1)


def render_check(d: dict) -> str:
    if d["allowed"]:
        return f"allowed: gate {d['gate_id']} approved {d['action']} for {d['goal_id']}"
    if d.get("unsigned") and not d["pending"]:
        return (f"not allowed: signing is on and the approval of {', '.join(d['unsigned'])} is unsigned or does not "
                "verify against the allowed signers")
    if d.get("used") and not d["pending"]:
        return f"not allowed: gate {d['used']} approved one {d['action']} action and it was used; open a new gate"
    if d["pending"]:
        return f"not yet: gate {d['pending'][0]} for {d['action']} is pending a human decision"
    return f"not allowed: no approved {d['action']} gate for {d['goal_id']}; open one with `loopx gate open --kind {d['action']} --question ...`"
