"""``loopx quota show|set|should-run|spend-slot``: the compute budget and the run decision."""

from __future__ import annotations

from loopx.commands import actions, add, goal_opt


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx quota should-run --explain")
    acts = actions(p)
    s = add(acts, "show", "slots, window, spend in the window and when the next slot frees",
            handler=quota_show, render=render_show, command="quota show", example="loopx quota show --goal-id g1")
    goal_opt(s)

    st = add(acts, "set", "change the goal's quota policy (slots 0 pauses automatic turns)",
             handler=quota_set, render=render_set, command="quota set",
             example="loopx quota set --goal-id g1 --slots 12 --window 24h --cooldown 10m")
    goal_opt(st)
    st.add_argument("--slots", metavar="N", help="verified turns allowed per window (0 pauses)")
    st.add_argument("--window", metavar="DUR", help="rolling window, e.g. 24h")
    st.add_argument("--cooldown", metavar="DUR", help="minimum time between turns, e.g. 10m (0 for none)")
    st.add_argument("--stall-after", metavar="N", help="turns in a row on one todo without verified progress before "
                                                       "asking a human")
    st.add_argument("--turns", metavar="N", help="turns that may start per window, verified or not (default twice "
                                                 "the slots; off restores it; raising it is human-only)")
    st.add_argument("--max-usd", metavar="AMOUNT", help="money the goal's turns may cost per window, as the hosts "
                                                        "report it (off clears; raising it is human-only)")
    st.add_argument("--max-tokens", metavar="N", help="tokens the goal's turns may use per window "
                                                      "(off clears; raising it is human-only)")
    st.add_argument("--host-reserve", metavar="PERCENT", help="share of each host usage window kept free: turns wait "
                                                              "above 100-PERCENT used (default 10; lowering is human-only)")
    st.add_argument("--use-leftover", metavar="DUR", help="run only when a host window resets within DUR with more "
                                                          "than the reserve left (burn leftover quota; off clears)")

    sr = add(acts, "should-run", "decide whether the next agent turn is worth running (exit 0 = run)",
             handler=quota_should_run, render=render_decision, command="quota should-run",
             example="loopx quota should-run --skip-exit 0 --explain",
             description="Decide whether the next agent turn should run. Exit 0 only for `run`; 1 for every "
                         "clean no (or N with --skip-exit N); 3 when the store cannot be read. Writes "
                         "nothing but a decision record when the decision changes.")
    goal_opt(sr)
    sr.add_argument("--skip-exit", metavar="N", help="exit code for a clean no (default 1; 0 for cron/chronic)")
    sr.add_argument("--explain", action="store_true", help="list every rule evaluated and its outcome")
    sr.add_argument("--no-record", dest="record", action="store_false",
                    help="do not write the decision record (read-only check)")

    sp = add(acts, "spend-slot", "charge one slot for a run whose verification passed (idempotent per run)",
             handler=quota_spend, render=render_spend, command="quota spend-slot",
             example="loopx quota spend-slot --run run-3f9a1c")
    sp.add_argument("--run", required=True, metavar="RUN", help="the run id (or a unique prefix)")
    sp.add_argument("--slots", default=1, metavar="N", help="slots to charge (default 1)")


def quota_show(ctx, goal_id=None) -> dict:

    from loopx.kernel.read import budget, queries
    from loopx.kernel.storage import clock, quotas

    state = ctx.store().load()
    now = clock.now()
    goals = [queries.resolve_goal(state, goal_id)] if goal_id or len(state["goals"]) <= 1 \
        else sorted(state["goals"].values(), key=lambda g: g["created"])
    if not goals:
        queries.resolve_goal(state, None)
    out = []
    for g in goals:
        b = budget.budget(state, g, now)
        q = g["quota"]
        out.append({"goal_id": g["id"], "status": g["status"], "slots": b["slots"], "window": b["window"],
                    "cooldown": b["cooldown"], "stall_after": quotas.value(g, "stall_after"),
                    "spent": b["spent"], "left": b["left"], "next_slot_at": b["frees_at"],
                    "turns": b["turns"], "turns_started": b["turns_started"], "turns_left": b["turns_left"],
                    "next_turn_at": b["turns_free_at"],
                    "cooldown_until": b["cooldown_until"],
                    "max_usd": b["max_usd"], "spent_usd": b["spent_usd"], "max_tokens": b["max_tokens"],
                    "spent_tokens": b["spent_tokens"], "costed_runs": b["costed_runs"],
                    "unpriced_runs": b["unpriced_runs"],
                    "host_reserve": q.get("host_reserve", 10), "use_leftover": q.get("use_leftover") or 0,
                    "ledger": [{"ts": e[0], "slots": e[1], "run_id": e[2]} for e in b["ledger"]]})
    return {"quotas": out, "now": clock.iso(now)}


def render_show(d: dict) -> str:
    from loopx.kernel.storage.clock import format_duration

    lines = []
    for q in d["quotas"]:
        line = (f"{q['goal_id']}: {q['spent']}/{q['slots']} slots spent in the last {format_duration(q['window'])}"
                f" ({q['left']} left)")
        if q["cooldown"]:
            line += f", cooldown {format_duration(q['cooldown'])}"
        line += f", stall after {q['stall_after']}"
        if q["next_slot_at"]:
            line += f"; next slot frees at {q['next_slot_at']}"
        line += f"\n  turns started in the window: {q['turns_started']}/{q['turns']} (verified or not)"
        if q["next_turn_at"]:
            line += f"; the next turn may start at {q['next_turn_at']}"
        unpriced = q.get("unpriced_runs") or 0
        # turns ran but none reported usage: the cost is unknown, never 0.00 USD (nor 0 tokens)
        unreported = not q["costed_runs"] and bool(q["turns_started"])
        usd = "unknown" if unreported or (unpriced and unpriced == q["costed_runs"]) else f"{q['spent_usd']:.2f} USD"
        toks = "tokens unknown" if unreported else f"{q['spent_tokens']:,} tokens"
        line += f"\n  cost in the window: {usd}" + (
            f" of {q['max_usd']:.2f}" if q["max_usd"] is not None else "") + f", {toks}" + (
            f" of {q['max_tokens']:,}" if q["max_tokens"] is not None else "") + \
            f" ({q['costed_runs']} run(s) reported usage" + (
                f", {q['unpriced_runs']} without a price: their cost is unknown" if q.get("unpriced_runs") else "") + \
            f"); host reserve {q['host_reserve']}%"
        lines.append(line)
    return "\n".join(lines)


def quota_set(ctx, goal_id=None, slots=None, window=None, cooldown=None, stall_after=None, max_usd=None,
              max_tokens=None, host_reserve=None, use_leftover=None, turns=None) -> dict:
    from loopx.kernel import humans
    from loopx.kernel.read import queries
    from loopx.kernel.write import goals

    policy = goals.quota_policy(slots=slots, window=window, cooldown=cooldown, stall_after=stall_after,
                                max_usd=max_usd, max_tokens=max_tokens, host_reserve=host_reserve,
                                use_leftover=use_leftover, turns=turns)
    store = ctx.store()
    if policy:
        quota = queries.resolve_goal(store.load(), goal_id)["quota"]
        looser = goals.loosened(quota, policy) + (["the turn budget"] if goals.raises_quota(quota, policy) else [])
        if looser:
            from loopx.kernel.humans import require_human

            require_human(ctx, "loosening " + ", ".join(looser))
    return goals.set_quota(store, ctx.actor, goal_id, policy, human=humans.channel_or_none(ctx))


def render_set(d: dict) -> str:
    from loopx.kernel.storage.clock import format_duration

    q = d["quota"]
    extra = " (automatic turns paused)" if q["slots"] == 0 else ""
    money = "".join([f", max {q['max_usd']:.2f} USD" if q.get("max_usd") is not None else "",
                     f", max {q['max_tokens']:,} tokens" if q.get("max_tokens") is not None else "",
                     f", host reserve {q.get('host_reserve', 10)}%",
                     f", leftover only (window resets within {format_duration(q['use_leftover'])})"
                     if q.get("use_leftover") else ""])
    from loopx.kernel.read.budget import turn_limit

    money += f", {turn_limit({'quota': q})} turns per window"
    return (f"{d['goal_id']}: {q['slots']} slots per {format_duration(q['window'])}, cooldown "
            f"{format_duration(q.get('cooldown') or 0)}, stall after {q.get('stall_after', 3)}{money}{extra}")


def quota_should_run(ctx, goal_id=None, skip_exit=None, explain=False, record=True):
    from loopx import output

    skip = 1
    if skip_exit is not None:
        from loopx.kernel.read import validate

        skip = validate.count(skip_exit, "--skip-exit", low=0, high=255)
    shared = False
    if record:
        from loopx.config import seconds
        from loopx.sync.sharing import is_shared

        seconds("LOOPX_NOTIFY_BUDGET")  # malformed: exit 2 on every recorded poll (the send itself never fails one)

        root = ctx.root()
        shared = is_shared(root)
    if record and not explain and not shared:  # a poll of an unchanged store: answered before the rules are imported
        import os

        from loopx.kernel.policy import decision_cache

        hit = decision_cache.quick(root, goal_id, ctx.agent, os.environ.get("PATH"))
        if hit is not None:
            return output.Reply(hit, 0 if hit["decision"] == "run" else skip)
    from loopx.kernel.policy import decide

    warnings = []
    if shared:  # a shared goal syncs first (bounded; loopx.sync.shared.shared_tick); --no-record stays local
        from loopx.sync.shared import shared_tick

        note = shared_tick(ctx.store(), goal_id)
        if note:
            warnings.append(note)
    d = decide.should_run(ctx.store(), goal_id=goal_id, agent=ctx.agent, record=record, explain=explain,
                          actor=ctx.actor, tick=record, on_decided=_notify if record else None)
    if not d.get("cached"):  # a broken user config never stops cron, but it is said (doctor says it too)
        from loopx.config import user_config_problem

        problem = user_config_problem()
        if problem:
            warnings.append(problem + "; should-run goes on without the usage limits and notification targets in it")
    if d["decision"] == "error":
        from loopx.errors import StateError

        raise StateError(d["message"], "see `loopx doctor`", code=d["reason"], details={"decision": d})
    return output.Reply(d, decide.exit_code(d, skip), warnings)


def _notify(store, state, d) -> None:
    from loopx.notify.outbox import after_decision

    after_decision(store, state, d)


def render_decision(d: dict) -> str:
    from loopx.output import safe

    head = f"{d['decision']}: {safe(d['message'])}"
    lines = [head, f"  reason: {d['reason']}"]
    if d.get("goal_id"):
        lines.append(f"  goal:   {d['goal_id']}" + (f"  todo: {d['todo_id']}" if d.get("todo_id") else ""))
    if d.get("question"):
        lines.append(f"  gate:   {d['gate_id']}: {safe(d['question'], limit=300)}")
    b = d.get("budget")
    if b:
        extra = "".join([f", {b['spent_usd']:.2f}/{b['max_usd']:.2f} USD" if b.get("max_usd") is not None else "",
                         f", {b['spent_tokens']:,}/{b['max_tokens']:,} tokens" if b.get("max_tokens") is not None
                         else ""])
        lines.append(f"  budget: {b['spent']}/{b['slots']} slots spent, {b['left']} left{extra}")
    for h in d.get("host_windows") or []:
        ws = ", ".join(f"{w['name']} {w['used_percent']:.0f}%" if w.get("used_percent") is not None
                       else f"{w['name']} (no limit known)" for w in h["windows"])
        lines.append(f"  host:   {h['host']}: {ws}" + (f" (as of {h['as_of']})" if h.get("as_of") else ""))
    if d.get("decision") == "run":
        lines.append(f"  after this turn, poll again in {d['scheduler_hint']}s")
    elif d.get("next_check_at"):
        lines.append(f"  next check: {d['next_check_at']} (poll again in {d['scheduler_hint']}s)")
    for r in d.get("rules") or []:
        lines.append(f"  [{r['outcome']:>7}] {r['rule']:<7} {safe(r['detail'], limit=200)}")
    if d.get("goals"):
        lines.append("  goals: " + ", ".join(f"{g['goal_id']}={g['decision']}" for g in d["goals"]))
    return "\n".join(lines)


def quota_spend(ctx, run, slots=1):
    from loopx import output
    from loopx.kernel.policy import turn
    from loopx.kernel.read import validate
    from loopx.sync.sharing import goal_is_shared

    n = validate.count(slots, "--slots", low=1, high=1000)
    store = ctx.store()
    state, r = turn.load_run(store, run)
    if goal_is_shared(state, r["goal"]):
        from loopx.sync import shared  # the remote's ledger (json, git): only a shared goal's spends

        receipt = shared.spend_slot(store, ctx.actor, run, slots=n, seen=state)
    else:
        receipt = turn.spend_slot(store, ctx.actor, r["id"], n)
    return output.Reply(receipt, 0 if receipt["spent"] else 1)


def render_spend(d: dict) -> str:
    if not d["spent"]:
        return f"not spent: {d['message']}"
    again = " (already charged; this is the first receipt)" if d.get("repeat") else ""
    b = d.get("budget") or {}
    return (f"charged {d['slots']} slot(s) for {d['run_id']} at {d['ts']}{again}; "
            f"{b.get('left', '?')} of {b.get('slots', '?')} left")
