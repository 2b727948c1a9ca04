"""``loopx heartbeat-prompt``: the prompt a scheduled automation (Codex App, cron) runs each tick."""

from __future__ import annotations

from loopx.commands import add
from loopx.errors import LoopxError
from loopx.kernel.policy import decide
from loopx.kernel.read.schedule import HINT_MIN
from loopx.kernel.storage import clock, ids, quotas

SCHEDULERS = [
    "Claude Code: /loop 30m <prompt> in a session, or cron: claude -p \"$(loopx heartbeat-prompt --agent claude-code)\"",
    "Codex app: an automation whose prompt is this text; CLI: codex exec \"$(loopx heartbeat-prompt --agent codex)\"",
    "Any: loopx quota should-run && <agent> -p \"$(loopx heartbeat-prompt)\" (see docs/hosts.md)",
]


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=heartbeat_prompt, render=render_heartbeat,
            example='claude -p "$(loopx heartbeat-prompt --goal-id my-goal --agent claude-code)"')
    p.add_argument("--goal-id", "--goal", dest="goal_id", metavar="ID", help="the goal (default: the best eligible one)")
    p.add_argument("--agent", dest="agent_name", metavar="NAME", help="the agent the tick runs as")


def heartbeat_prompt(ctx, goal_id=None, agent_name=None) -> dict:
    if goal_id:
        ids.check_goal_id(goal_id)
    agent = agent_name or ctx.agent
    if agent:
        ids.check_agent_name(agent)
    return {"prompt": build_heartbeat(goal_id, agent), "goal_id": goal_id, "agent": agent,
            "schedulers": SCHEDULERS, "schedule": recommend_schedule(ctx, goal_id)}


def recommend_schedule(ctx, goal_id: str | None) -> dict | None:
    """The fixed interval a scheduled automation (Codex app, cron) should use for the goal: the
    goal's budget spread over its window (window / slots), never more often than should-run's
    shortest ``scheduler_hint``; plus the current hint. None outside a connected project."""
    try:
        store = ctx.store()
        state = store.load(view="live")
        d = store.read(lambda st: decide.for_client(store, st, goal_id, now=clock.now(), agent=ctx.agent), state)  # what should-run says
    except (LoopxError, OSError, ValueError):  # no project, unreadable store: the prompt alone is useful
        return None
    goal = state["goals"].get(d.get("goal_id") or "") or {}
    q = goal.get("quota") or {}
    slots, window = int(q.get("slots") or quotas.DEFAULTS["slots"]), int(q.get("window") or quotas.DEFAULTS["window"])
    every = max(HINT_MIN, window // max(slots, 1)) // 60 * 60
    minutes = max(5, every // 60)
    cron = f"*/{minutes} * * * *" if minutes < 60 and 60 % minutes == 0 else (
        f"0 */{minutes // 60} * * *" if minutes % 60 == 0 and 24 % (minutes // 60) == 0 else None)
    return {"every_minutes": minutes, "cron": cron, "goal_id": d.get("goal_id"), "decision": d.get("decision"),
            "reason": d.get("reason"), "message": d.get("message"), "scheduler_hint": d.get("scheduler_hint"),
            "why": f"{slots} slots per {window // 3600}h window: one tick every {minutes} min spends the budget "
                   "evenly; ticks that find nothing to do stop at the should-run check"}


def render_heartbeat(d: dict) -> str:
    s = d.get("schedule")
    if not s:
        return d["prompt"]
    when = f"every {s['every_minutes']} minutes" + (f" (cron: {s['cron']})" if s.get("cron") else "")
    now = f"\n# Right now should-run says: {s['decision']} ({s['reason']})." if s.get("decision") else ""
    return d["prompt"] + f"\n\n# Schedule it {when}: {s['why']}.{now}"


def build_heartbeat(goal_id: str | None, agent: str | None) -> str:
    """The text a scheduled tick runs: should-run first, then at most one governed turn."""
    g = f" --goal-id {goal_id}" if goal_id else ""
    a = f" --agent {agent}" if agent else ""
    return f"""This is one scheduled loopx tick. Do at most one governed turn, then stop.

1. Run `loopx quota should-run{g}{a}`. If it exits non-zero, reply with its one-line message
   and stop: do not work around it (it means waiting for a human, budget spent, nothing ready,
   or the goal is done).
2. Run `loopx next{g}{a} --format json`. If it exits non-zero, reply with its message and stop.
   Otherwise read `data.packet`: objective, done_when, scope, protected actions, your todo and
   its acceptance, and the write-back commands with the run id filled in.
3. Do that one todo, changing only paths inside the scope. Run the verify command.
4. Record what you ran: `loopx evidence add --run RUN --kind test --summary "..." --command "..." --exit-code N`.
   If the todo is done: `loopx todo done TODO --evidence EV`.
5. Close the turn honestly: `loopx turn finish --run RUN --result progress|completion|no_progress|failed|blocked --verify`,
   then `loopx quota spend-slot --run RUN` (it only charges a verified run).
6. If the work needs a protected action (merge, release, deploy, production data, spending),
   open a gate with `loopx gate open --kind KIND --question "..."`, finish with `--result blocked`
   and stop. Never approve or reject a gate yourself.

Reply with one line: the todo, the result, and the evidence id (or why no turn ran)."""

