"""The reason registry: every (decision, reason) the should-run decision can give, declared once.

Each row says what the answer is (``decision``), whether a person hears about it (``notifies``:
the notification list of loopx.kernel.storage.fold and ``loopx inbox`` read it), which
time-dependent inputs it reads (``clock``: the decision cache ends a cached answer when one of
them moves; see loopx.kernel.policy.decision_cache.valid_until), the command a human runs next
(``human``) and the one an agent runs (``agent``; templates with ``{goal}``, ``{gate}``,
``{todo}``, ``{run}``), the dashboard group (``group``) and its line in docs/loop.md (``doc``,
generated and checked like docs/cli.md: ``python docs/gen_reasons.py``).

``status``, the dashboard, ``inbox``, ``heartbeat-prompt`` and ``review-packet`` render the
decision through ``group(d)``, ``needs_you(d)`` and ``next_command(d, human=...)``; none of
them branches on a message's text. Adding a reason is one row in ``ROWS``.

Clock inputs (``CLOCK``): ``leases`` (todo claims and run leases ending), ``handoffs`` (a
handoff reservation ending), ``spends`` (a slot leaving the rolling window), ``turns`` (a turn
leaving the window), ``costs`` (money or tokens leaving the window), ``cooldown``, ``host_retry``
(a host error's retry time), ``host_windows`` (a usage window resetting), ``due`` (a watch
check or recurring todo coming due). Every answer also ends with the store's files changing.

Pure data and string formatting; no imports (every layer may read it).
"""

from __future__ import annotations

GROUPS = ("needs_you", "running", "ready", "waiting", "stopped")
CLOCK = ("leases", "handoffs", "spends", "turns", "costs", "cooldown", "host_retry", "host_windows", "due")
ALL = CLOCK  # an answer that a lease, a spend or a window could change
BASE = ("leases", "handoffs", "due")  # a claim or reservation ending makes another todo ready

_HOST_FIX = "fix the host ({reason}), see docs/usage.md; the next check retries by itself"


class Reason(tuple):
    """One row: (decision, reason, group, notifies, clock, human, agent, doc)."""

    __slots__ = ()
    decision = property(lambda s: s[0])
    reason = property(lambda s: s[1])
    group = property(lambda s: s[2])
    notifies = property(lambda s: s[3])
    clock = property(lambda s: s[4])
    human = property(lambda s: s[5])
    agent = property(lambda s: s[6])
    doc = property(lambda s: s[7])


def _r(decision, reason, group, notifies, clock, human, agent, doc) -> Reason:
    return Reason((decision, reason, group, notifies, tuple(clock), human, agent, doc))


ROWS: tuple[Reason, ...] = (
    # decision, reason, group, notifies, clock inputs, human's next command, agent's next command, doc line
    _r("run", "ready", "ready", False, ALL, "loopx run --agent-cmd CMD  (or an agent: loopx next)",
       "loopx next --goal-id {goal}", "a todo is ready and worth a turn (`todo_id` names it)"),
    _r("run", "plan", "ready", False, ALL, "loopx run --agent-cmd CMD  (a planning turn adds todos)",
       "loopx next --goal-id {goal}", "no todos yet: the next turn plans them (`mode: plan`)"),
    _r("run", "goal_unverified", "ready", False, ALL, "loopx run --agent-cmd CMD  (a planning turn)",
       "loopx next --goal-id {goal}", "every todo is done but the goal's verify command failed: a planning turn"),
    _r("run", "trial", "ready", False, ALL, "loopx run --agent-cmd CMD  (each turn is a trial loopx measures)",
       "loopx next --goal-id {goal}", "an experiment goal (docs/experiments.md): the next turn is a measured trial (`mode: trial`)"),
    _r("run", "resumed", "running", False, (), "wait for the open run", "loopx next --goal-id {goal}",
       "`next` handed the agent its own open run again"),
    _r("skip", "no_change", "needs_you", False, ALL,
       "loopx history --goal-id {goal}  (then commit, edit a todo or add one)", "stop: nothing changed since the last try",
       "every ready todo's last turn made no progress and nothing changed since"),
    _r("skip", "watching", "waiting", False, BASE, "nothing: the goal is watching (`loopx watch list`)",
       "stop", "no live todos; watches or recurring todos wait for their next check"),
    _r("wait", "claimed", "running", False, BASE, "wait for the leases to end", "stop",
       "every remaining todo is held by another agent's live lease"),
    _r("wait", "agent_alive", "running", False, BASE, "wait for the agent, or stop it (`kill -TERM -PGID`)",
       "stop", "the todo's last agent still runs on this machine"),
    _r("wait", "claim_moved", "running", False, (), "loopx next --sync", "loopx next --sync",
       "the todo claimed through the remote is not this clone's answer any more"),
    _r("wait", "remote_unreachable", "waiting", False, (), "loopx sync  (check the remote)", "stop",
       "a shared goal's claims wait for the git remote"),
    _r("wait", "goal_dependency", "waiting", False, BASE, "loopx status --goal-id OTHER", "stop",
       "the open todos wait for another goal to be done"),
    _r("wait", "budget_exhausted", "waiting", True, BASE + ("spends",), "wait: the budget of this window is spent (or raise it: loopx quota set --goal-id {goal} --slots N)",
       "stop", "slots spent in the rolling window reached the quota's slots"),
    _r("wait", "budget_turns", "waiting", True, BASE + ("turns",), "wait: the turn budget of this window is spent (or raise it: loopx quota set --goal-id {goal} --turns N)",
       "stop", "turns started in the window (verified or not) reached the turn budget (default twice the slots)"),
    _r("wait", "budget_usd", "waiting", False, BASE + ("costs",), "wait, or raise it: loopx quota set --goal-id {goal} --max-usd X",
       "stop", "money the hosts reported in the window (plus one typical turn) is over `max_usd`"),
    _r("wait", "budget_tokens", "waiting", False, BASE + ("costs",),
       "wait, or raise it: loopx quota set --goal-id {goal} --max-tokens N", "stop",
       "tokens reported in the window (plus one typical turn) are over `max_tokens`"),
    _r("wait", "cooldown", "waiting", False, BASE + ("cooldown",), "wait for the cooldown", "stop",
       "the cooldown after the last run is not over"),
    _r("wait", "host_window", "waiting", False, BASE + ("host_windows",), "wait for the host's window to reset (`loopx usage`)",
       "stop", "the turn's host is above 100 - host_reserve % of a usage window"),
    _r("wait", "leftover_not_due", "waiting", False, BASE + ("host_windows",), "wait: the goal uses leftover quota only",
       "stop", "`--use-leftover`: no window resets soon enough"),
    _r("wait", "host_rate_limited", "waiting", True, BASE + ("host_retry",), "wait for the host's reset time", "stop",
       "the agent's host is rate limited until a known reset time"),
    _r("wait", "host_overloaded", "waiting", False, BASE + ("host_retry",),
       "wait: the model provider is overloaded; the next check retries by itself", "stop",
       "the agent's host said its model provider is overloaded (529 \"Overloaded\", 503): a short wait, then a retry"),
    _r("handoff", "handed_off", "waiting", False, BASE, "wait for the agent it was handed to", "stop",
       "the ready work was handed off to another agent (30 min reservation)"),
    _r("wait_human", "gate_pending", "needs_you", True, BASE, "a human decides gate {gate}: loopx gate approve {gate}  (or reject with --note)",
       "stop: a human decides gate {gate}", "a pending gate blocks the goal or every ready todo"),
    _r("wait_human", "gate_rejected", "needs_you", True, BASE, "loopx todo update {todo} --reopen  (or re-plan the work)",
       "stop", "the rest is blocked by a gate a human rejected"),
    _r("wait_human", "todos_blocked", "needs_you", True, BASE, "loopx todo list --goal-id {goal}  (unblock a todo)",
       "stop", "the open todos are blocked and nothing else is ready"),
    _r("wait_human", "dependencies", "needs_you", True, BASE, "loopx todo list --goal-id {goal}", "stop",
       "the open todos wait on dependencies that cannot progress"),
    _r("wait_human", "verify_broken", "needs_you", True, BASE, "fix the setup, then: loopx goal resume {goal}", "stop",
       "a verify command could not run (not found, not executable, timed out)"),
    _r("wait_human", "out_of_scope", "needs_you", True, BASE,
       "loopx history --goal-id {goal}  (review {run}; widen the scope, revert, or close the todo)", "stop",
       "the last turn changed files outside the goal's scope"),
    _r("wait_human", "stalled", "needs_you", True, BASE, "loopx history --goal-id {goal}  (then add a todo or update the goal)",
       "stop", "`stall_after` turns in a row on every ready todo ended without verified progress"),
    _r("wait_human", "close_goal", "needs_you", True, (), "loopx goal done {goal}  (or add a todo)", "stop",
       "nothing is left: the goal's verify passed (it protects actions) or it has none; a human closes it"),
    _r("wait_human", "plateau", "needs_you", True, BASE,
       "loopx experiment show {goal}  (then: loopx experiment continue {goal}, experiment promote {goal}, or goal stop)",
       "stop", "an experiment made `--plateau N` trials in a row without a kept improvement"),
    _r("wait_human", "baseline_crashed", "needs_you", True, BASE,
       "fix the measure command (loopx goal update {goal} --measure CMD) or commit the fix of what it runs, "
       "then: loopx experiment baseline {goal}", "stop",
       "the experiment's baseline trial did not measure (its measure command failed or timed out)"),
    _r("wait_human", "promote", "needs_you", False, BASE,
       "a human decides gate {gate}: loopx gate approve {gate}  (the question shows the holdout result)", "stop",
       "an experiment's `promote` gate waits for a human (heard of through gate.opened)"),
    _r("wait_human", "watch_failing", "needs_you", True, BASE, "loopx watch list  (fix the failing check)", "stop",
       "a watch's check keeps erroring"),
    _r("wait_human", "host_not_logged_in", "needs_you", True, BASE + ("host_retry",), _HOST_FIX, "stop",
       "the agent's host is not logged in"),
    _r("wait_human", "host_offline", "needs_you", True, BASE + ("host_retry",), _HOST_FIX, "stop", "the agent's host is offline"),
    _r("wait_human", "host_rate_limited", "needs_you", True, BASE + ("host_retry",), _HOST_FIX, "stop",
       "the agent's host is rate limited without a reset time"),
    _r("wait_human", "host_crashed", "needs_you", True, BASE + ("host_retry",), _HOST_FIX, "stop", "the agent's host crashed"),
    _r("wait_human", "host_timed_out", "needs_you", True, BASE + ("host_retry",), _HOST_FIX, "stop",
       "the agent's host timed out"),
    _r("wait_human", "host_idle", "needs_you", True, BASE + ("host_retry",), _HOST_FIX, "stop",
       "the agent's host sat idle without output"),
    _r("pause", "goal_paused", "stopped", False, (), "loopx goal resume {goal}", "stop", "the goal is paused"),
    _r("pause", "quota_zero", "stopped", False, (), "loopx quota set --goal-id {goal} --slots N", "stop",
       "the quota has 0 slots: automatic turns are paused"),
    _r("stop", "complete", "needs_you", False, (),
       "loopx run --agent-cmd CMD  (it checks the goal's verify command once), or: loopx goal done {goal}", "stop",
       "every todo is done: `loopx run` checks the goal's verify command once and marks it done"),
    _r("stop", "goal_done", "stopped", True, (), "nothing: the goal is done", "stop", "the goal is done"),
    _r("stop", "goal_stopped", "stopped", False, (), "nothing: the goal is stopped", "stop", "the goal is stopped"),
    _r("stop", "no_active_goal", "stopped", False, (), 'loopx start-goal --goal-text "..."', "stop", "no goal is active"),
    _r("stop", "no_goal", "stopped", False, (), 'loopx start-goal --goal-text "..."', "stop", "no goal yet"),
    _r("error", "store_unreadable", "needs_you", False, (), "loopx doctor", "stop", "the store cannot be read"),
    _r("error", "store_read_only", "needs_you", False, (), "loopx doctor", "stop",
       "the store is newer than this loopx or has conflict markers"),
)

_BY: dict[tuple[str, str], Reason] = {(r.decision, r.reason): r for r in ROWS}
_FALLBACK = {"run": "ready", "skip": "waiting", "wait": "waiting", "wait_human": "needs_you", "handoff": "waiting",
             "pause": "stopped", "stop": "stopped", "error": "needs_you"}


def get(decision: str | None, reason: str | None) -> Reason | None:
    """The row of (``decision``, ``reason``), or None for an undeclared pair."""
    return _BY.get((decision or "", reason or ""))


def notifying() -> tuple[str, ...]:
    """The reasons a person hears about (notifications, ``loopx inbox``), except gates and a
    goal finishing, which have their own events."""
    return tuple(sorted({r.reason for r in ROWS if r.notifies and r.reason not in ("gate_pending", "goal_done")}))


def clock_inputs(d: dict | None) -> tuple[str, ...]:
    """The time-dependent inputs the answer ``d`` read (``CLOCK`` for an undeclared one); when
    several goals were evaluated (``d["goals"]``), those of every goal's answer."""
    out: set[str] = set()
    for x in [d or {}] + list((d or {}).get("goals") or []):
        row = get(x.get("decision"), x.get("reason"))
        out.update(row.clock if row else CLOCK)
    return tuple(c for c in CLOCK if c in out)


def group(d: dict | None) -> str:
    """The dashboard group of the answer ``d`` (``needs_you`` ... ``stopped``)."""
    if not d:
        return "waiting"
    row = get(d.get("decision"), d.get("reason"))
    return row.group if row else _FALLBACK.get(d.get("decision") or "", "waiting")


def needs_you(d: dict | None) -> bool:
    """True when the answer waits for a person (``needs_you`` group)."""
    return group(d) == "needs_you"


def next_command(d: dict | None, *, human: bool = True) -> str:
    """The one command a human (or, with ``human=False``, an agent) runs next for answer ``d``."""
    if not d:
        return "loopx quota should-run --explain"
    row = get(d.get("decision"), d.get("reason"))
    if row is None:
        return "loopx quota should-run --explain"
    text = row.human if human else row.agent
    return text.format(goal=d.get("goal_id") or "G", gate=d.get("gate_id") or "GATE", todo=d.get("todo_id") or "TODO",
                       run=d.get("run_id") or "the last run", reason=d.get("reason") or "")


def markdown() -> str:
    """The generated table of docs/loop.md (between the ``reasons`` markers)."""
    lines = ["| decision | reason | needs you | notifies | a human runs | time it reads | what it means |",
             "|---|---|---|---|---|---|---|"]
    for r in ROWS:
        lines.append(f"| `{r.decision}` | `{r.reason}` | {'yes' if r.group == 'needs_you' else ''} | "
                     f"{'yes' if r.notifies else ''} | `{r.human}` | {', '.join(r.clock) or '-'} | {r.doc} |")
    return "\n".join(lines)
