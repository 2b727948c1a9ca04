"""The should-run decision (docs/architecture.md#the-governed-loop): is the next agent turn worth its tokens?

``evaluate(state, now, ...)`` is a pure function of the folded state, the clock and a
fingerprint callable; ``should_run(store, ...)`` loads the store, evaluates, and records a
``decision.recorded`` event only when the decision (decision, reason, todo) differs from the last
one recorded for that goal, so an idle day of per-minute checks adds a handful of lines.

Rules, per goal, in order; the first that applies decides:

1. ``store``   store unreadable, newer format or conflict markers -> ``error``
2. ``status``  goal done/stopped -> ``stop``; paused or quota slots 0 -> ``pause``
3. ``gates``   a pending gate blocks the goal or every ready todo -> ``wait_human``
4. ``work``    nothing ready: claimed by others -> ``wait``; handed to another agent ->
               ``handoff``; all done -> ``stop`` (complete); blocked -> ``wait_human``;
               no todos -> continue in ``plan`` mode
4b. ``setup``  the last run's verify command could not run (``verify_broken``, see
               loopx.kernel.read.verify) and neither a human nor the environment changed since ->
               ``wait_human``; once the caller's PATH or the command's resolution differs, the
               next check retries (``run``) instead of skipping
4c. ``scope``  the last judged turn changed files outside the goal's scope
               (loopx.kernel.read.turnscope) and no human acted since -> ``wait_human``
               (``out_of_scope``)
5. ``host``    the asking agent's last turn ended on a host setup error (not logged in, offline,
               rate limited, crashed, timed out, idle) and its retry time has not come ->
               ``wait_human`` (``host_*`` reason; ``wait`` for a rate limit with a reset time)
6. ``budget``  slots spent in the rolling window >= slots -> ``wait``; money or tokens spent (plus
               one typical turn) over ``max_usd`` / ``max_tokens`` -> ``wait`` (``budget_usd`` /
               ``budget_tokens``); the turns started in the window (every turn, verified or
               not) reached the turn budget -> ``wait`` (``budget_turns``); cooldown -> ``wait``
7. ``window``  the host that would run the turn is above ``100 - host_reserve`` percent of one of
               its usage windows -> ``wait`` (``host_window``) until the window resets; a goal
               set to ``use_leftover`` waits (``leftover_not_due``) until a window resets soon
8. ``value``   per todo: ``stall_after`` turns in a row on it without verified progress
               (loopx.kernel.read.stall) make it stalled; its last judged run made no progress
               and the fingerprint has not changed -> it is skipped; the first other ready todo
               runs; when none is left -> ``wait_human`` (stalled) or ``skip`` (no_change)
9. ``run``     -> ``run``, naming the todo (or ``mode: plan``)

The returned dict (stable; the CLI, dashboard, hooks and runner rely on it)::

    {"decision": "run|skip|wait|wait_human|pause|stop|handoff|error",
     "reason": stable snake_case code, "message": one line, "goal_id": str|None,
     "todo_id": str|None, "mode": "work"|"plan"|None, "gate_id": str|None, "question": str|None,
     "next_check_at": ISO time|None, "scheduler_hint": seconds (int),
     "budget": budget.decision_view(...) (slots and real units) | None, "evaluated_at": ISO time,
     "host_windows": [{"host", "windows": [...]}] (when a host's usage was consulted),
     "rules": [{"rule", "outcome": "pass"|"decides", "detail"}] (only with explain),
     "goals": [{"goal_id", "decision", "reason"}] (when several goals were evaluated),
     "recorded": bool, "cached": bool (answered from the decision cache)}
"""

from __future__ import annotations

from loopx.errors import LoopxError, StateError
from loopx.kernel.read import budget, hosts, queries, schedule
from loopx.kernel.storage import actors, clock, fold, quotas
from loopx.kernel.storage.clock import datetime, timedelta

DECISIONS = ("run", "skip", "wait", "wait_human", "pause", "stop", "handoff", "error")
NO_PROGRESS = ("no_progress", "failed", "blocked")
# when several goals are evaluated and none may run, the most useful answer wins
_RANK = {"wait_human": 0, "wait": 1, "skip": 2, "handoff": 3, "pause": 4, "stop": 5}


def _newest_goal_check(state: dict, goal: dict) -> dict | None:
    """The newest goal-level run of the goal's verify command (evidence without todo and run)."""
    cmd = goal.get("verify")
    if not cmd:
        return None
    hits = [e for e in state["evidence"].values() if e["goal"] == goal["id"] and e.get("command") == cmd
            and not e.get("todo") and not e.get("run")]
    return max(hits, key=lambda x: x.get("seq", 0)) if hits else None


def goal_verify_failed(state: dict, goal: dict) -> dict | None:
    """The newest goal-level run of the goal's verify command when it failed and no turn since
    made progress (runs after its ``after_run``)."""
    e = _newest_goal_check(state, goal)
    if e is None or e.get("exit_code") in (0, None):
        return None
    # a live view keeps this check (fold.live_view keeps each goal's newest goal-level check per
    # command); the run it followed may be one the view left out: NotInLiveView, the full state decides
    after = (state["runs"].get(e.get("after_run") or "") or {}).get("seq", 0)
    for r in state["runs"].values():  # progress since the check makes it worth checking again
        if r["goal"] == goal["id"] and r.get("seq", 0) > after and r.get("result") in ("progress", "completion"):
            return None
    return e


def goal_verify_passed(state: dict, goal: dict) -> dict | None:
    """The newest goal-level run of the goal's verify command when it passed and no run of the
    goal started since (its ``after_run`` is still the goal's last run), else None."""
    e = _newest_goal_check(state, goal)
    if e is None or e.get("exit_code") != 0 or (e.get("after_run") or None) != (goal.get("last_run") or None):
        return None
    return e


def exit_code(decision: dict, skip_exit: int = 1) -> int:
    """0 for run, 3 for error, else ``skip_exit`` (default 1)."""
    if decision["decision"] == "run":
        return 0
    if decision["decision"] == "error":
        return 3
    return skip_exit


def _reserved_for_others(state: dict, goal_id: str, me: str | None, now: datetime) -> dict[str, str]:
    """``{todo_id: agent}`` for every todo of the goal whose newest handoff recently reserved it for
    an agent that is not ``me``: one pass over the handoffs and one time formatted, whatever the
    number of ready todos (it used to rescan them per todo)."""
    limit = clock.iso(now - timedelta(seconds=schedule.HANDOFF_HOLD))
    newest: dict = {}
    for h in state.get("handoffs") or ():
        if h.get("goal") == goal_id:
            newest[h.get("todo")] = h
    return {tid: h["to"] for tid, h in newest.items() if h["ts"] > limit and h.get("to") and h["to"] != me}


def _last_judged(state: dict, goal_id: str, keys: list) -> dict:
    """{todo id ("" for planning turns): its newest finished run without a setup error}. A run cut
    short before it could be judged (``unjudged``: interrupted, or an agent command that could not
    start) made no attempt at the work: it is passed over, so it never makes the next turn a
    ``no_change`` skip."""
    want = set(keys)
    out: dict = {}
    for r in state["runs"].values():
        k = r.get("todo") or ""
        if (r["goal"] != goal_id or k not in want or r["finished"] is None or r.get("setup_error")
                or r.get("unjudged")):
            continue
        if k not in out or r.get("seq", 0) > out[k].get("seq", 0):
            out[k] = r
    return out


class _Eval:
    """Evaluation of one goal; ``rules`` collects the trace for ``--explain``."""

    def __init__(self, state, goal, now, agent, fingerprint, book=None, host_windows=None, caller_path=...,
                 explain=False):
        self.state, self.goal, self.now, self.agent = state, goal, now, agent
        self.explain = explain  # the trace of every todo is wanted, not only the decision
        self.book = book  # watch bookkeeping (loopx.kernel.policy.tick), for next-due times
        self.caller_path = caller_path
        self.retry_setup = False
        self.me = actors.agent(agent) if agent else None
        self.now_iso = clock.iso(now)
        self.fingerprint = fingerprint
        self.host_windows = host_windows
        self.windows_seen: list[dict] = []
        self.rules: list[dict] = []
        self.budget = budget.budget(state, goal, now)

    def passed(self, rule: str, detail: str) -> None:
        self.rules.append({"rule": rule, "outcome": "pass", "detail": detail})

    def decide(self, rule, decision, reason, message, *, todo_id=None, next_check_at=None, **extra) -> dict:
        self.rules.append({"rule": rule, "outcome": "decides", "detail": f"{decision} ({reason}): {message}"})
        out = {"decision": decision, "reason": reason, "message": message, "goal_id": self.goal["id"],
               "todo_id": todo_id, "mode": extra.pop("mode", None), "gate_id": extra.pop("gate_id", None),
               "question": extra.pop("question", None), "next_check_at": next_check_at,
               "budget": budget.decision_view(self.budget)}
        if self.windows_seen:
            out["host_windows"] = self.windows_seen
        out.update(extra)
        return out

    def run(self) -> dict:
        return (self.status() or self.watch_note() or self.gates_and_work() or self.setup() or self.scope_rule()
                or self.host_rule()
                or self.budget_rule() or self.turn_rule() or self.money_rule() or self.cooldown_rule() or self.window_rule()
                or self.value() or self.go())

    def watch_note(self):
        """Watches are checked before the decision (loopx.kernel.policy.tick); here they only explain."""
        if self.state.get("watches"):
            from loopx.kernel.read import watching as watches

            note = watches.rule_note(self.state, self.goal["id"], self.book, self.now_iso)
            if note:
                self.passed("watches", note)
        return None

    def setup(self):
        from loopx.kernel.read import verify

        err = verify.open_error(self.state, self.goal)
        if err is not None and str(err.get("reason") or "").startswith("host_"):
            err = None  # a host that could not work is the host rule's, per agent (rule 5), not the goal's setup
        if err is None:
            last = self.state["runs"].get(self.goal.get("last_run") or "")
            if last and last.get("setup_error"):  # a human said it is fixed, or the command changed
                self.retry_setup = True
                self.passed("setup", f"the setup error of {last['id']} was cleared: retrying")
            else:
                self.passed("setup", "no setup error stands")
            return None
        why = verify.changed_since(err, self.caller_path)
        if why:
            self.retry_setup = True
            self.passed("setup", f"run {err['run']} could not verify, but {why}: retrying")
            return None
        return self.decide("setup", "wait_human", err.get("reason") or verify.REASON,
                           f"{err.get('message') or 'the verify command could not run'} (run {err['run']}); "
                           f"then `loopx goal resume {self.goal['id']}`",
                           run_id=err["run"], setup_error={k: err.get(k) for k in
                                                           ("command", "exit_code", "timed_out", "path", "resolved")})
    def scope_rule(self):
        """The goal's last judged turn changed files outside the scope (loopx.kernel.read.turnscope):
        a human looks before any more turns, until a human change or the todo closing."""
        last = self.state["runs"].get(self.goal.get("last_judged_run") or "")
        if not last or not last.get("out_of_scope"):
            return None
        from loopx.kernel.read import stall

        t = self.state["todos"].get(last.get("todo") or "")
        if (t and t["status"] in queries.DONE_STATES) or \
                stall.reset_at(self.state, self.goal) > (last["finished"] or "", last.get("finished_seq") or 0):
            self.passed("scope", f"run {last['id']} changed files outside the scope; a human acted since")
            return None
        files = last["out_of_scope"]
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        return self.decide("scope", "wait_human", "out_of_scope",
                           f"run {last['id']} changed {len(files)} file(s) outside the goal's scope "
                           f"({', '.join(files[:5])}{more}); a human reviews them, then widens the scope "
                           f"(`loopx scope set`), reverts them or closes the todo", run_id=last["id"],
                           todo_id=last.get("todo"), out_of_scope=files)

    def host_rule(self):
        err = hosts.error_for(self.state, self.goal, self.agent)
        if not err:
            self.passed("host", "no host setup error for this turn's agent")
            return None
        at = hosts.retry_at(err)
        who = err.get("host") or (self.agent or "the host")
        if at <= self.now_iso:
            self.passed("host", f"{who} failed ({err['reason']}) at {err['ts']}; retrying since {at}")
            return None
        if (self.goal.get("updated") or "") > err["ts"]:
            self.passed("host", f"{who} failed ({err['reason']}) at {err['ts']}; the goal changed since: retrying")
            return None
        decision = "wait" if hosts.is_wait(err) else "wait_human"
        return self.decide("host", decision, err["reason"],
                           f"{who} could not work in run {err.get('run')}: {err.get('message') or err['reason']} "
                           f"(retried at {at}; see docs/usage.md)", next_check_at=at,
                           host_error=err)

    def money_rule(self):
        b = self.budget
        for unit, reason, fmt in (("usd", "budget_usd", lambda v: f"{v:.2f} USD"),
                                  ("tokens", "budget_tokens", lambda v: f"{v:,} tokens")):
            if not b.get(f"{unit}_exhausted"):
                continue
            at = b.get(f"{unit}_frees_at")
            typical = b.get(f"turn_{unit}")
            more = f" (a turn costs about {fmt(typical)})" if typical else ""
            when = f"; enough frees at {at}" if at else "; only a higher limit helps (`loopx quota set`)"
            return self.decide("budget", "wait", reason,
                               f"{fmt(b[f'spent_{unit}'])} of {fmt(b[f'max_{unit}'])} spent in the last "
                               f"{clock.format_duration(b['window'])}{more}{when}", next_check_at=at)
        parts = [f"{b['left']} of {b['slots']} slots left in the window",
                 f"{b['turns_left']} of {b['turns']} turns left",
                 f"{b['spent_usd']:.2f}/{b['max_usd']:.2f} USD spent" if b.get("max_usd") is not None else None,
                 f"{b['spent_tokens']:,}/{b['max_tokens']:,} tokens spent" if b.get("max_tokens") is not None
                 else None]
        self.budget_detail = "; ".join(p for p in parts if p)
        return None

    def window_rule(self):
        if self.host_windows is None:
            self.passed("window", "host usage windows not read here")
            return None
        reserve = self.goal["quota"].get("host_reserve", hosts.DEFAULT_RESERVE)
        limit = 100 - reserve
        leftover = self.goal["quota"].get("use_leftover") or 0
        soon: list[str] = []
        due = False
        for kind in hosts.kinds(self.state, self.goal, self.agent):
            info = self.host_windows(kind)
            if not info or not info.get("windows"):
                continue
            self.windows_seen.append({"host": kind, "as_of": info.get("as_of"), "source": info.get("source"),
                                      "windows": info["windows"]})
            for w in info["windows"]:
                used, reset = w.get("used_percent"), w.get("resets_at")
                if used is None or (reset and reset <= self.now_iso):
                    continue
                if used >= limit:
                    src = w.get("limit_source")
                    of = f" of {src}" if src and src != "host" else ""
                    return self.decide("window", "wait", "host_window",
                                       f"{kind}'s {w['name']} window is {used:.0f}% used{of} (reserve {reserve}%: "
                                       f"turns stop at {limit}%); it resets at {reset or 'an unknown time'}",
                                       next_check_at=reset, host=kind, window=w)
                if leftover and reset:
                    left = (clock.parse_ts(reset) - self.now).total_seconds()
                    if left <= leftover:
                        due = True
                    else:
                        soon.append(clock.iso(clock.parse_ts(reset) - timedelta(seconds=leftover)))
        detail = "; ".join(f"{h['host']} " + ", ".join(
            f"{w['name']} {w['used_percent']:.0f}%" if w.get("used_percent") is not None else f"{w['name']} ?"
            for w in h["windows"]) for h in self.windows_seen) or "no host window known"
        if leftover and not due:
            at = min(soon) if soon else None
            return self.decide("window", "wait", "leftover_not_due",
                               f"the goal uses leftover quota only: no window resets within "
                               f"{clock.format_duration(leftover)} with more than {reserve}% left ({detail})",
                               next_check_at=at)
        self.passed("window", f"{detail} (reserve {reserve}%)")
        return None

    def status(self):
        g = self.goal
        if g["status"] in ("done", "stopped"):
            return self.decide("status", "stop", f"goal_{g['status']}", f"goal {g['id']} is {g['status']}")
        if g["status"] == "paused":
            return self.decide("status", "pause", "goal_paused", f"goal {g['id']} is paused (`loopx goal resume`)")
        if g["quota"]["slots"] <= 0:
            return self.decide("status", "pause", "quota_zero",
                               f"goal {g['id']} has 0 slots: automatic turns are paused (`loopx quota set --slots N`)")
        self.passed("status", f"goal is {g['status']} with {g['quota']['slots']} slots")
        return None

    def gates_and_work(self):
        s, gid = self.state, self.goal["id"]
        pending = sorted(queries.pending_gates(s, gid), key=lambda x: x["created"])
        for gate in pending:
            if queries.gate_blocks_goal(gate):
                return self._wait_gate(gate, "a pending gate blocks the goal")
        cands = queries.candidates(s, gid, self.now_iso, self.me)
        blocked = {b for gate in pending for b in gate["blocks"]}
        ready = [t for t in cands if t["id"] not in blocked]
        if cands and not ready:
            gate = next(x for x in pending if set(x["blocks"]) & {t["id"] for t in cands})
            return self._wait_gate(gate, "pending gates block every ready todo")
        self.passed("gates", f"{len(pending)} pending gate(s); none blocks all ready work")
        if ready and self.me:
            others = _reserved_for_others(s, gid, self.me, self.now)
            mine = [t for t in ready if t["id"] not in others]
            if not mine:
                to = others[ready[0]["id"]]
                return self.decide("work", "handoff", "handed_off",
                                   f"the ready work was handed off to {to}", todo_id=ready[0]["id"],
                                   handed_to=to)
            ready = mine
        self.ready = ready
        if ready:
            self.passed("work", f"{len(ready)} ready todo(s); next {ready[0]['id']}")
            return None
        return self._nothing_ready()

    def _wait_gate(self, gate, why):
        return self.decide("gates", "wait_human", "promote" if gate["kind"] == "promote" else "gate_pending",
                           f"{why}: gate {gate['id']} ({gate['kind']}) asks: {gate['question'][:200]}",
                           gate_id=gate["id"], question=gate["question"])

    def _nothing_ready(self):
        todos = queries.goal_todos(self.state, self.goal["id"])
        live = [t for t in todos if t["status"] not in queries.DONE_STATES]
        closed = sum(self.state.get("closed", {}).get(self.goal["id"], {}).values())  # a live view's left-out todos
        if not live:
            watching = self._watching()
            if watching:
                return watching
        if not todos and not closed:
            self.passed("work", "no todos: the next turn plans (mode plan)")
            return None
        if not live:
            bad = goal_verify_failed(self.state, self.goal)
            if bad:  # the goal's own command decides completion of the goal
                self.plan_note = (f"all {len(todos)} todos are done but the goal's verify command failed "
                                  f"({bad['id']}, exit {bad['exit_code']}): plan the remaining work")
                self.passed("work", self.plan_note)
                return None
            n = len(todos) + closed
            passed = goal_verify_passed(self.state, self.goal)
            gid = self.goal["id"]
            if self.goal.get("verify") and passed is None:
                return self.decide("work", "stop", "complete",
                                   f"all {n} todos are done: goal looks complete (`loopx run` checks the goal's "
                                   "verify command once and marks it done)")
            if passed is not None and not self.goal["scope"].get("protect"):
                return self.decide("work", "stop", "complete",
                                   f"all {n} todos are done and the goal's verify command passed ({passed['id']}): "
                                   f"`loopx run` marks it done", evidence_id=passed["id"])
            why = (f"its verify command passed ({passed['id']}) and it protects {', '.join(self.goal['scope']['protect'])}"
                   if passed is not None else "nothing checks its done_when (no verify command)")
            return self.decide("work", "wait_human", "close_goal",
                               f"all {n} todos are done and {why}: a human closes the goal (`loopx goal done {gid}`) "
                               "or adds a todo", evidence_id=passed["id"] if passed else None)
        held = [t for t in live if queries.claim_live(t, self.now_iso)]
        if held:
            first = min(t["claim"]["lease_until"] for t in held)
            return self.decide("work", "wait", "claimed",
                               f"{len(held)} todo(s) held by other agents; the first lease ends {first}",
                               next_check_at=first)
        rejected = [t for t in live if t["status"] == "blocked" and t.get("blocked_by")]
        if rejected:
            b = rejected[0]["blocked_by"]
            return self.decide("work", "wait_human", "gate_rejected",
                               f"{len(rejected)} todo(s) are blocked by a rejected gate ({b.get('note') or b['gate']}); "
                               f"a human re-opens them (`loopx todo update {rejected[0]['id']} --reopen`) or the work "
                               "is re-planned as new todos", gate_id=b["gate"], todo_id=rejected[0]["id"])
        if any(t["status"] == "blocked" for t in live):
            n = sum(t["status"] == "blocked" for t in live)
            return self.decide("work", "wait_human", "todos_blocked",
                               f"{n} todo(s) are blocked and nothing else is ready (`loopx todo list`)")
        waits = [g for t in live for g in queries.goals_waited_on(self.state, t)]
        if waits:
            return self.decide("work", "wait", "goal_dependency",
                               f"the open todos wait for goal {waits[0]} to be done; it is worked on first")
        return self.decide("work", "wait_human", "dependencies",
                           "open todos wait on dependencies that cannot progress")

    def _watching(self):
        """A goal whose only work is watches or recurring todos is watching, never planning or complete."""
        from loopx.kernel.read import watching as watches

        hit = watches.idle_rule(self.state, self.goal, self.book, self.now_iso)
        if hit is None:
            return None
        decision, reason, message, at, extra = hit
        return self.decide("work", decision, reason, message, next_check_at=at, **extra)

    def budget_rule(self):
        b = self.budget
        if b["spent"] >= b["slots"]:
            at = b["frees_at"]
            return self.decide("budget", "wait", "budget_exhausted",
                               f"{b['spent']} of {b['slots']} slots spent in the last "
                               f"{clock.format_duration(b['window'])}; a slot frees at {at}", next_check_at=at)
        return None

    def turn_rule(self):
        b = self.budget
        if b["turns_started"] >= b["turns"]:
            at = b["turns_free_at"]
            return self.decide("budget", "wait", "budget_turns",
                               f"{b['turns_started']} of {b['turns']} turns started in the last "
                               f"{clock.format_duration(b['window'])} (every turn counts, verified or not); "
                               f"one leaves the window at {at} (a human raises it: `loopx quota set --turns N`)",
                               next_check_at=at)
        return None

    def cooldown_rule(self):
        b = self.budget
        until = b["cooldown_until"]
        if until:
            return self.decide("budget", "wait", "cooldown",
                               f"cooldown of {clock.format_duration(b['cooldown'])} after the last run ends {until}",
                               next_check_at=until)
        self.passed("budget", getattr(self, "budget_detail", ""))
        return None

    def value(self):
        """Per todo (docs/loop.md#stalls): a todo whose streak of unverified turns reached
        ``stall_after`` is stalled, a todo whose last judged run made no progress with nothing
        changed since is skipped; any other ready todo runs. Only when none is left: ``stalled``
        (``wait_human``) before ``no_change`` (``skip``)."""
        from loopx.kernel.read import stall

        g = self.goal
        exp = (self.state.get("experiments") or {}).get(g["id"])
        if exp is not None:  # research experiments: the plateau rule replaces stall and no-change (issue 20)
            from loopx.kernel.read import experiments

            hit = experiments.value_rule(exp)
            if hit is not None:
                return self.decide("value", hit[0], hit[1], hit[2], **hit[3])
            self.passed("value", f"{exp['since_improvement']} trial(s) since the last kept improvement")
            return None
        stall_after = quotas.value(g, "stall_after")
        streaks = stall.streaks(self.state, g)
        ready = getattr(self, "ready", [])
        keys = [t["id"] for t in ready] or [""]
        last = _last_judged(self.state, g["id"], keys)
        fp_box: list = []

        def fp():
            if not fp_box:
                fp_box.append(self.fingerprint(g["id"]) if self.fingerprint else None)
            return fp_box[0]

        avail, stalled, unchanged = [], [], []
        for k in keys:
            if avail and not self.explain:
                # the decision is the first todo worth a turn; the ones after it only fill --explain's
                # trace, so their fingerprint (a `git status`) is not asked, and an answer that never
                # asked it is cached without the git part (decision_cache: no git call on a hit)
                break
            if streaks.get(k, 0) >= stall_after:
                stalled.append(k)
                continue
            r = last.get(k)
            if (not self.retry_setup and r and r["finished"] and r["result"] in NO_PROGRESS and r.get("fp_after")
                    and fp() == r["fp_after"]):
                unchanged.append((k, r))
                continue
            avail.append(k)
        if avail:
            if ready:
                self.ready = [t for t in ready if t["id"] in avail]
            held = [f"{k} stalled" for k in stalled] + [f"{k or 'planning'} unchanged" for k, _ in unchanged]
            if held:
                self.passed("value", f"{len(avail)} todo(s) worth a turn ({', '.join(held)})")
            elif self.retry_setup:
                self.passed("value", "the last run could not verify; its setup changed since")
            else:
                self.passed("value", "the last run made progress" if last else "no run yet")
            return None
        if stalled:
            k = stalled[0]
            what = f"todo {k}" if k else "planning"
            return self.decide("value", "wait_human", "stalled",
                               f"{streaks[k]} turns in a row on {what} ended without verified progress; look at "
                               "`loopx history`, then add a todo, update the goal or set its quota "
                               "to continue", todo_id=k or None, streak=streaks[k])
        k, r = unchanged[0]
        return self.decide("value", "skip", "no_change",
                           f"the last run ({r['id']}) made no progress and nothing changed since "
                           "(a commit, an edited file, a new or changed todo or a decided gate "
                           "makes the next check run)", fingerprint=fp())

    def go(self):
        ready = getattr(self, "ready", [])
        if not ready and (self.state.get("experiments") or {}).get(self.goal["id"]) is not None:
            return self.decide("run", "run", "trial", f"next trial of experiment {self.goal['id']}",
                               mode="trial", next_check_at=self.now_iso)
        if not ready:
            note = getattr(self, "plan_note", None)
            return self.decide("run", "run", "goal_unverified" if note else "plan",
                               note or "no todos yet: run a planning turn that adds them",
                               mode="plan", next_check_at=self.now_iso)
        t = ready[0]
        return self.decide("run", "run", "ready", f"next todo {t['id']}: {t['title'][:120]}",
                           todo_id=t["id"], mode="work", next_check_at=self.now_iso)

    def finish(self, out: dict) -> dict:
        """Fill ``next_check_at`` and ``scheduler_hint`` by the one schedule rule."""
        since = schedule.same_since(self.state, self.goal["id"], out["decision"], out["reason"])
        out["next_check_at"], out["scheduler_hint"] = schedule.hint(out["decision"], self.now,
                                                                    out.get("next_check_at"), since)
        return out


def evaluate(state: dict, now: datetime, *, goal_id: str | None = None, agent: str | None = None,
             fingerprint=None, explain: bool = False, book: dict | None = None, host_windows=None,
             caller_path=...) -> dict:
    """The decision for ``goal_id`` (or the best of all active goals) at ``now``. Pure, given
    ``fingerprint(goal_id) -> str`` (called only when the value rule needs it), the watch
    bookkeeping ``book`` (loopx.kernel.policy.tick.load_book; None = next-due times unknown) and
    ``host_windows(kind) -> loopx.usage.windows(...) dict | None`` (None: the window rule is
    skipped). ``caller_path`` is the PATH the caller's turns would run with (None = unset;
    ``...`` = unknown, as for the dashboard): a verify command that could not run is retried when
    it differs from the PATH it failed under. Raises UsageError/NotFound for an unknown ``goal_id``."""
    reason = state["meta"].get("read_only")
    if reason:
        return error_decision("store_read_only", f"the store cannot be used: {reason}", now)
    if goal_id:
        goals = [queries.resolve_goal(state, goal_id)]
    else:
        goals = sorted((g for g in state["goals"].values() if g["status"] == "active"),
                       key=lambda g: (-(g.get("priority") or 0), g["created"]))
        if not goals:
            msg = "no active goal" if state["goals"] else "no goal yet"
            return _bare("stop", "no_active_goal" if state["goals"] else "no_goal",
                         msg + ' (`loopx start-goal --goal-text "..."`)', now)
    results = []
    for g in goals:
        ev = _Eval(state, g, now, agent, fingerprint, book, host_windows, caller_path, explain)
        out = ev.finish(ev.run())
        if explain:
            out["rules"] = [{"rule": "store", "outcome": "pass", "detail": "store readable"}] + ev.rules
        results.append(out)
        if out["decision"] == "run":
            break
    best = next((r for r in results if r["decision"] == "run"), None)
    if best is None:
        best = min(results, key=lambda r: (_RANK.get(r["decision"], 9), r.get("next_check_at") or "~"))
    if len(goals) > 1 or (not goal_id and len(results) > 1):
        best["goals"] = [{"goal_id": r["goal_id"], "decision": r["decision"], "reason": r["reason"]}
                         for r in results]
    best["evaluated_at"] = clock.iso(now)
    return best


def _bare(decision: str, reason: str, message: str, now: datetime, hint: int = schedule.HINT_MAX) -> dict:
    return {"decision": decision, "reason": reason, "message": message, "goal_id": None, "todo_id": None,
            "mode": None, "gate_id": None, "question": None, "next_check_at": None,
            "scheduler_hint": hint, "budget": None, "evaluated_at": clock.iso(now)}


def error_decision(reason: str, message: str, now: datetime | None = None) -> dict:
    """An ``error`` decision (exit 3) for a store that cannot be read or written."""
    return _bare("error", reason, message, now or clock.now())


def _key(d: dict) -> tuple:
    return (d.get("decision"), d.get("reason"), d.get("todo_id"), d.get("gate_id"))


def should_run(store, *, goal_id: str | None = None, agent: str | None = None, record: bool = True,
               explain: bool = False, actor: str | None = None, cache: bool = True, tick: bool = False,
               on_decided=None, host_usage: bool = True, defer_run: bool = False, git=None,
               state: dict | None = None) -> dict:
    """Load ``store`` and decide (see the module docstring for the returned dict). Writes a
    ``decision.recorded`` event only when ``record`` and the decision changed for that goal; a
    busy store never fails the check (``recorded`` is then False). Raises UsageError for an
    unknown goal; an unreadable store yields an ``error`` decision instead of raising.
    ``cache`` answers from ``.loopx/cache/decisions.bin`` while the files and every
    time-dependent input are unchanged (see loopx.kernel.policy.decision_cache); ``explain`` bypasses it.
    ``tick`` (``quota should-run`` and ``loopx run``, never a hook) first runs the watch checks
    that are due and reopens due recurring todos (loopx.kernel.policy.tick); a cached answer is
    valid only until the next due check. ``on_decided(store, state, decision)`` is called after a
    fresh (not cached) evaluation (the CLI and the runner send queued notifications there,
    loopx.notify.outbox.after_decision); anything it raises is ignored.
    ``host_usage`` reads the hosts' usage windows (loopx.usage, itself cached by file size and
    mtime) for the window rule; hooks and views pass False.
    ``defer_run``: a ``run`` decision that should be recorded is not written here but marked
    ``record_deferred`` (``loopx next`` writes it with the claim, one transaction: ``decision_draft``).``git`` (a callable returning ``fingerprint.git_part``) lets a caller that needs the git part
    too share the one ``git status`` (``turn.next_turn``). ``state``: the live view the caller read
    moments ago (``next``, which looked for its own open run in it), used instead of reading it again;
    an answer from it is not saved in the decision cache (the files may have moved since it was read).
    """
    from loopx.kernel.policy import decision_cache as dc

    now = clock.now()
    k = dc.key(goal_id, agent) + "|" + (caller_path() or "")  # answers depend on the PATH (verify_broken)
    files = dc.stamp(store) if cache and not explain else None
    if files is not None:
        try:
            hit = dc.lookup(store, k, files, now)
        except LoopxError:
            hit = None
        if hit is not None:
            hit["recorded"], hit["cached"] = False, True
            return hit
    if state is not None:
        files = None  # read before the files were stamped: never cached under that stamp
    else:
        try:
            state = store.load(view="live")
        except StateError as exc:
            return error_decision("store_unreadable", exc.message)
    checks = _has_checks(state)
    book = None
    if tick and not state["meta"].get("read_only"):
        book = _tick(store, state, now) if checks else {}  # nothing to check: the watch code is not imported
    if book is not None and book.pop("_wrote", False):
        state = store.load(view="live")
    box = {"state": state}
    got = inputs(store, box, now, book=... if book is None else book, host_usage=host_usage, caller=caller_path(),
                 git=git)
    book = got["kwargs"]["book"]
    try:
        d = evaluate(state, now, goal_id=goal_id, agent=agent, explain=explain, **got["kwargs"])
    except fold.NotInLiveView:  # the rule looked up a record the live view left out: ask the full state
        state = box["state"] = store.load()
        d = evaluate(state, now, goal_id=goal_id, agent=agent, explain=explain, **got["kwargs"])
    seen, seen_hosts = got["seen"], got["hosts"]
    d["recorded"], d["cached"] = False, False
    changed = d["decision"] != "error" and _changed(state, d)
    if record and changed and defer_run and d["decision"] == "run":
        d["record_deferred"] = True
    elif record and changed:
        d["recorded"] = record_decision(store, d, actor or (actors.agent(agent) if agent else actors.LOOPX + "should-run"))
    elif files is not None and not changed and d.get("reason") != "verify_broken":  # that one hangs on the
        # environment (an installed program), which the cache cannot see
        dc.save(store, k, files, d, state, now, seen.get("git"), seen_hosts, cap=_cap(state, book, now))
    if on_decided is not None:
        try:
            on_decided(store, state, d)
        except Exception:  # noqa: BLE001 - a follow-up (sending notifications) never fails the decision
            pass
    return d


def inputs(store, box: dict, now: datetime, *, book=..., host_usage: bool = True, caller=..., git=None,
           hosts: dict | None = None) -> dict:
    """Every input of a decision, gathered in one place so no client evaluates with fewer (issue
    21): the watch bookkeeping (``book``; ``...`` loads it when the state has checks), the hosts'
    usage windows (``host_usage``; loopx.usage keeps them in a small cache by file size and
    mtime), the caller's PATH (``caller``; ``...`` = unknown, as for a view), the fingerprint
    (the state part of ``box["state"]`` plus the git part, read at most once; ``git()`` may supply
    a cached one) and the host errors, windows and leases that are in the state itself.
    ``hosts`` ({kind: windows}) shares the windows read across several evaluations at one moment.
    Returns ``{"kwargs": for evaluate, "seen": {"git": str} once read, "hosts": {kind: windows}}``."""
    from loopx.kernel.read import fingerprint as fpmod

    state = box["state"]
    if book is ...:
        book = None
        if _has_checks(state):
            from loopx.kernel.policy.tick import load_book

            book = load_book(store)
    seen: dict = {}
    seen_hosts: dict = {} if hosts is None else hosts

    def fp(gid: str) -> str:
        if "git" not in seen:
            seen["git"] = git() if git is not None else fpmod.git_part(store.project_dir)
        return fpmod.combine(fpmod.state_part(box["state"], gid), seen["git"])

    def windows(kind: str):
        if kind not in seen_hosts:
            seen_hosts[kind] = host_windows(kind, now)
        return seen_hosts[kind]

    return {"kwargs": {"fingerprint": fp, "book": book, "host_windows": windows if host_usage else None,
                       "caller_path": caller},
            "seen": seen, "hosts": seen_hosts}


def for_client(store, state: dict, goal_id: str | None = None, *, now: datetime | None = None,
               agent: str | None = None, git=None, explain: bool = False, hosts: dict | None = None,
               files: list | None = None, kept: dict | None = None) -> dict:
    """The decision ``status``, the dashboard, ``inbox``, ``heartbeat-prompt`` and
    ``review-packet`` render: what ``loopx quota should-run [--goal-id G]`` answers now with the
    same inputs (``inputs``), without recording it or running due checks. The caller's PATH is
    unknown to a view (a verify command that could not run under cron's PATH stays standing). ``state`` may be a
    live view (the full state is loaded when a rule needs more). Raises UsageError/NotFound for
    an unknown goal; an unreadable store gives an ``error`` decision. ``hosts``: see ``inputs``.
    ``files``: ``decision_cache.stamp(store)`` taken before ``state`` was read; the answer is then
    looked up in, and kept in, the decision cache under a view's own key (``decision_cache.VIEW``) with
    should-run's validity rules (a poll of an unchanged store evaluates nothing); ``kept``: a dict
    that collects the new entry instead (``decision_cache.write`` saves a screen's answers at once)."""
    from loopx.kernel.policy import decision_cache as dc

    now = now or clock.now()
    k = dc.key(goal_id, agent) + dc.VIEW if files is not None and not explain else None
    if k is not None:
        hit = dc.lookup_view(store, goal_id, agent, files, now, git=git, hosts=hosts)
        if hit is not None:
            return hit
    box = {"state": state}
    got = inputs(store, box, now, git=git, hosts=hosts)  # the PATH is unknown: a view says what a scheduler would hear
    try:
        d = evaluate(state, now, goal_id=goal_id, agent=agent, explain=explain, **got["kwargs"])
    except fold.NotInLiveView:
        box["state"] = store.load()
        d = evaluate(box["state"], now, goal_id=goal_id, agent=agent, explain=explain, **got["kwargs"])
    if k is not None and d.get("reason") != "verify_broken":
        book = got["kwargs"]["book"]
        dc.save(store, k, files, d, box["state"], now, got["seen"].get("git"), got["hosts"], cap=_cap(box["state"], book, now),
                kept=kept)
    return d


def caller_path():
    """The PATH this process's turns (and verify commands) run with; None when unset."""
    import os

    return os.environ.get("PATH")


def _tick(store, state: dict, now) -> dict | None:
    """Run due checks (loopx.kernel.policy.tick); the bookkeeping, with ``_wrote`` when events were written."""
    from loopx.kernel.policy import tick as tk

    res = tk.tick(store, state, now)
    book = dict(res["book"] or {})
    book["_wrote"] = res["wrote"]
    return book


def _has_checks(state: dict) -> bool:
    """Whether the state has a watch or a recurring todo (anything ``tick`` could find due)."""
    return bool(state.get("watches")) or any(t.get("every") for t in state["todos"].values())


def _cap(state: dict, book: dict | None, now) -> str | None:
    """The earliest due check, recurring todo or notification retry: a cached answer ends there."""
    from loopx.kernel.read import notices

    now_iso = clock.iso(now)
    due = None
    if _has_checks(state):
        from loopx.kernel.policy import tick as tk

        due = tk.earliest_due(state, book, now_iso)
    cands = [c for c in (due, notices.next_retry(state)) if c]
    return min(cands) if cands else None


def host_windows(kind: str, now: datetime) -> dict | None:
    """loopx.usage.windows for ``kind`` at ``now``, or None when the host's files cannot be read."""
    from loopx import usage

    return usage.safe_windows(kind, now)


def _changed(state: dict, d: dict) -> bool:
    prev = state["decisions"].get(d.get("goal_id") or "*")
    return prev is None or _key(prev) != _key(d)


def record_decision(store, d: dict, actor: str) -> bool:
    """Append ``decision.recorded`` unless the last recorded decision for the goal is the same.
    Returns True when a line was written; a busy or read-only store returns False."""
    def plan(state, now):
        draft = decision_draft(state, d)
        return [draft] if draft else []

    import loopx.kernel.write  # noqa: F401 (registers the write layer's housekeeping for this write)

    try:
        records, _ = store.transact(plan, actor=actor)
    except LoopxError:
        return False
    return bool(records)


def decision_draft(state: dict, d: dict):
    """The ``decision.recorded`` Draft of ``d``, or None when the last recorded decision for the goal
    in ``state`` is the same."""
    if not _changed(state, d):
        return None
    data = {k: d.get(k) for k in ("decision", "reason", "todo_id", "gate_id", "next_check_at")}
    data["message"] = (d.get("message") or "")[:300]
    return _draft(d.get("goal_id"), data)


def _draft(goal_id, data):
    from loopx.kernel.storage.store import Draft

    return Draft("decision.recorded", goal_id, data)
