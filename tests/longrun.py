"""The long-run simulator of issue 21: a seeded random walk that drives a real store (a real git
repository, real verify commands) through many ticks with scripted agents of many kinds, random
human actions, a Codex usage window that fills and resets, a watch on a CI file, and clock jumps, checking at every
tick the invariants a user relies on:

- turns started per window never exceed the turn budget, and slots spent never exceed the slots;
- a goal with nothing left to do reaches done or one stable ``wait_human`` within a bounded
  number of ticks, and then writes nothing more;
- should-run, ``status``, the dashboard's API, ``inbox`` and ``heartbeat-prompt`` give the same
  decision and reason (they share ``decide.for_client``; checked every ``AGREE_EVERY`` ticks);
- an idle tick (no action, the same answer as before) writes nothing;
- a ready todo is never starved by another todo's stall.

``simulate(project_dir, seed, ticks)`` returns the statistics; tests/test_longrun.py runs it in the
suite with a fixed seed, bench/longrun_soak.py runs longer soaks with many seeds. The clock is
``LOOPX_NOW`` (set in ``os.environ``; the caller restores it).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from datetime import UTC, datetime, timedelta

from loopx.errors import LoopxError
from loopx.kernel import humans
from loopx.kernel.policy import decide, turn
from loopx.kernel.read import budget, queries, stall
from loopx.kernel.storage import clock
from loopx.kernel.storage.store import Store
from loopx.kernel.write import evidence, gates, goals, todos

START = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)
AGENTS = ("honest", "silent", "failer", "timeout", "stray", "claimer", "unverified", "codex")
AGREE_EVERY = 25
SETTLE_TICKS = 4  # a goal with nothing left must reach its end within this many of its ticks
GIT_ENV = {"GIT_AUTHOR_NAME": "sim", "GIT_AUTHOR_EMAIL": "sim@example.com", "GIT_COMMITTER_NAME": "sim",
           "GIT_COMMITTER_EMAIL": "sim@example.com"}


def _human():
    return humans.HumanChannel("human:pat", "confirm-flag", _seal=humans._SEAL)


class Sim:
    def __init__(self, project_dir: str, seed: int):
        self.dir = project_dir
        self.store = Store.open(project_dir)
        self.rng = random.Random(seed)
        self.now = START
        self.stats = {"ticks": 0, "turns": 0, "idle_ticks": 0, "agreements": 0, "decisions": {}, "ended": 0,
                      "refused_claims": 0, "out_of_scope": 0, "stalls_seen": 0, "human_actions": 0}
        self.last_answer: dict[str, tuple] = {}
        self.settling: dict[str, int] = {}   # goal -> ticks since it had nothing left to do
        self.ended: dict[str, tuple] = {}    # goal -> (answer, line counts) once it reached its end
        self.codex_used = 10.0

    # ------------------------------------------------------------------ world
    def at(self, when: datetime) -> None:
        self.now = when
        os.environ["LOOPX_NOW"] = clock.iso(when)

    def git(self, *args: str) -> None:
        subprocess.run(["git", *args], cwd=self.dir, check=True, capture_output=True, env={**os.environ, **GIT_ENV})

    def setup(self) -> None:
        self.at(START)
        self.git("init", "-q")
        with open(os.path.join(self.dir, ".gitignore"), "w") as fh:
            fh.write(".loopx/\n")
        self.git("add", ".gitignore")
        self.git("commit", "-q", "-m", "init")
        os.makedirs(os.path.join(self.dir, "src"), exist_ok=True)
        h = "human:pat"
        goals.start_goal(self.store, h, objective="Code", goal_id="code", verify="test -d src", allow=["src/**"],
                         protect=["merge"], quota=goals.quota_policy(slots=4, window="6h", stall_after=3),
                         todos=[{"title": f"c{i}", "verify": f"test -f src/c{i}.done"} for i in range(4)])
        goals.start_goal(self.store, h, objective="Notes", goal_id="notes", allow=["src/**"],
                         quota=goals.quota_policy(slots=3, window="4h", stall_after=2), todos=["n0", "n1"])
        goals.start_goal(self.store, h, objective="Ship", goal_id="ship", verify="true",
                         quota=goals.quota_policy(slots=6, window="12h"),
                         todos=[{"title": f"s{i}", "verify": f"test -f src/s{i}.done"} for i in range(3)])
        goals.start_goal(self.store, h, objective="Watch CI", goal_id="ci", quota=goals.quota_policy(slots=2, window="6h"))
        from loopx.kernel.write import watches

        with open(os.path.join(self.dir, "src", "ci.txt"), "w") as fh:
            fh.write("green\n")
        watches.add(self.store, h, "ci", every="30m", check="cat src/ci.txt", on="change", name="ci")
        self.codex(10.0)

    def codex(self, used: float) -> None:
        """The Codex usage window loopx reads: ``used`` percent, resetting in 2 hours."""
        self.codex_used = used
        d = os.path.join(os.environ["CODEX_HOME"], "sessions", "2026", "06", "01")
        os.makedirs(d, exist_ok=True)
        reset = int((self.now + timedelta(hours=2)).timestamp())
        line = {"timestamp": clock.iso(self.now), "type": "event_msg",
                "payload": {"type": "token_count", "info": None, "rate_limits": {
                    "primary": {"used_percent": used, "window_minutes": 300, "resets_at": reset}}}}
        with open(os.path.join(d, "rollout-2026-06-01T08-00-00-0199aaaa.jsonl"), "w") as fh:
            fh.write(json.dumps(line) + "\n")

    def lines(self) -> tuple[int, int]:
        out = []
        for f in ("events.jsonl", "evidence.jsonl"):
            p = os.path.join(self.dir, ".loopx", f)
            with open(p, "rb") as fh:
                out.append(fh.read().count(b"\n"))
        return tuple(out)

    # ------------------------------------------------------------------ actors
    def agent_turn(self, gid: str, kind: str) -> None:
        actor = f"agent:{kind}"
        t = turn.next_turn(self.store, actor, goal_id=gid, lease="20m")
        if not t["started"]:
            return
        self.stats["turns"] += 1
        tid, rid = t["todo_id"], t["run_id"]
        state = self.store.load()
        todo = state["todos"].get(tid or "") or {}
        if kind in ("honest", "codex"):
            self._honest(actor, gid, tid, rid, todo)
        elif kind == "silent":
            pass  # exits without writing back: the lease lapses and the run is reaped
        elif kind == "failer":
            turn.finish(self.store, actor, rid, "failed", note="tool error")
        elif kind == "timeout":  # what the runner records when the host hangs past --timeout
            turn.close(self.store, actor, rid, "failed", "timed out after 30m",
                       report={"setup_error": {"reason": "host_timed_out", "message": "the host timed out"}})
        elif kind == "stray":
            self._stray(actor, rid, state)
        elif kind == "claimer":
            self._claimer(actor, gid, t, state)
        elif kind == "unverified":
            turn.finish(self.store, actor, rid, "progress", note="did some of it")
        if self.rng.random() < 0.05 and tid:
            try:
                gates.open_gate(self.store, actor, gid, kind="merge", question="merge it?", blocks=[tid])
            except LoopxError:
                pass

    def _honest(self, actor: str, gid: str, tid: str | None, rid: str, todo: dict) -> None:
        if todo.get("verify"):
            open(os.path.join(self.dir, "src", f"{todo['title']}.done"), "w").close()
            fin = turn.finish(self.store, actor, rid, "completion", verify=True)
        elif tid:
            ev = evidence.add(self.store, actor, gid, kind="artifact", summary="notes written", run=rid, todo=tid)
            todos.done(self.store, actor, tid, [ev["evidence_id"]])
            fin = turn.finish(self.store, actor, rid, "completion")
        else:
            fin = turn.finish(self.store, actor, rid, "no_progress", note="nothing to plan")
        if fin["verified"]:
            turn.spend_slot(self.store, actor, rid)

    def _stray(self, actor: str, rid: str, state: dict) -> None:
        with open(os.path.join(self.dir, f"stray-{self.stats['turns']}.txt"), "w") as fh:
            fh.write("outside the scope\n")
        fin = turn.finish(self.store, actor, rid, "completion", verify=bool(turn.verify_command(state, state["runs"][rid])))
        if fin.get("out_of_scope"):
            self.stats["out_of_scope"] += 1
            assert not fin["verified"] and fin["todo_status"] != "done", fin
        os.remove(os.path.join(self.dir, f"stray-{self.stats['turns']}.txt"))

    def _claimer(self, actor: str, gid: str, t: dict, state: dict) -> None:
        tid, rid = t["todo_id"], t["run_id"]
        others = [x for x in state["todos"].values() if x["goal"] == gid and x.get("claim")
                  and x["claim"]["holder"] != actor and x["status"] == "claimed"]
        tries = [(x["id"], None, "claimed_by_other") for x in others[:1]]
        if tid:  # its own todo with a stale fence: refused too, before the verify command runs
            tries.append((tid, int(t["fence"] or 0) + 999, "stale_fence"))
        for target, fence, code in tries:
            before = self.lines()
            try:
                todos.done(self.store, actor, target, [], fence=fence)
                raise AssertionError(f"{actor} closed {target} without holding it")
            except LoopxError as exc:
                assert exc.code == code, (exc.code, code)
                assert self.lines() == before  # refused before any verify ran or evidence was written
                self.stats["refused_claims"] += 1
        turn.finish(self.store, actor, rid, "no_progress")

    def human(self, answers: dict) -> bool:
        """Random human actions; True when one was taken (that tick is not idle)."""
        r = self.rng.random()
        state = self.store.load()
        h = "human:pat"
        pending = [g for g in state["gates"].values() if g["status"] == "pending"]
        try:
            if pending and r < 0.15:
                gates.decide(self.store, h, pending[0]["id"], approve=self.rng.random() < 0.7, channel="confirm-flag",
                             human=_human(), note="sim")
                return True
            stalled = [g for g, d in answers.items() if d["reason"] in ("stalled", "out_of_scope")]
            if stalled and r < 0.3:  # a human reads the history and nudges the goal
                goals.update_goal(self.store, h, stalled[0], done_when=f"nudged at {clock.iso(self.now)}")
                self.stats["human_actions"] += 1
                return True
            rejected = [d for d in answers.values() if d["reason"] == "gate_rejected" and d.get("todo_id")]
            if rejected and r < 0.3:  # a human re-opens the work the rejection blocked
                todos.update(self.store, h, rejected[0]["todo_id"], reopen=True, human=_human())
                self.stats["human_actions"] += 1
                return True
            if r < 0.04:  # CI changes colour: the watch fires on its next check
                with open(os.path.join(self.dir, "src", "ci.txt"), "w") as fh:
                    fh.write(self.rng.choice(("green\n", "red\n", "flaky\n")))
                return True
            unchanged = [g for g, d in answers.items() if d["reason"] == "no_change"]
            if unchanged and r < 0.35:  # a human commits a fix by hand: the fingerprint moves
                with open(os.path.join(self.dir, "src", "human.txt"), "a") as fh:
                    fh.write(f"{self.stats['ticks']}\n")
                self.git("add", "-A")
                self.git("commit", "-q", "-m", "human fix")
                self.stats["human_actions"] += 1
                return True
            done = [g["id"] for g in state["goals"].values() if g["status"] == "done"]
            if done and r < 0.33:  # new work on a finished goal
                gid = self.rng.choice(done)
                goals.set_status(self.store, h, gid, "active", human=_human())
                todos.add(self.store, h, gid, f"follow-up {self.stats['ticks']}",
                          verify=f"test -f src/f{self.stats['ticks']}.done" if gid != "notes" else None)
                self.stats["human_actions"] += 1
                return True
            closable = [g for g, d in answers.items() if d["reason"] == "close_goal"]
            if closable and r < 0.05:
                goals.set_status(self.store, h, closable[0], "done", human=_human())
                return True
            active = [g["id"] for g in state["goals"].values() if g["status"] == "active"]
            if active and r < 0.02:
                gid = self.rng.choice(active)
                todos.add(self.store, h, gid, f"more work {self.stats['ticks']}",
                          verify=f"test -f src/m{self.stats['ticks']}.done" if gid != "notes" else None)
                return True
            if active and r < 0.025:
                gid = self.rng.choice(active)
                goals.set_status(self.store, h, gid, "paused", human=_human())
                return True
            paused = [g["id"] for g in state["goals"].values() if g["status"] == "paused"]
            if paused and r < 0.1:
                goals.set_status(self.store, h, paused[0], "active", human=_human())
                return True
        except LoopxError:
            return True  # a refused human action may still have written nothing; not an idle tick to judge
        return False

    # ------------------------------------------------------------------ invariants
    def check_budgets(self, state: dict) -> None:
        for gid, g in state["goals"].items():
            window = timedelta(seconds=g["quota"]["window"])
            turns = sorted(e[0] for e in (state.get("turns") or {}).get(gid, []))
            limit = budget.turn_limit(g)
            for i, ts in enumerate(turns):  # every window ending at a turn's start
                start = clock.iso(clock.parse_ts(ts) - window)
                n = sum(1 for x in turns[: i + 1] if x > start)
                assert n <= limit, (gid, ts, n, limit)
            spends = sorted(state["spends"].get(gid, []))
            for i, (ts, _s, _r) in enumerate(spends):
                start = clock.iso(clock.parse_ts(ts) - window)
                assert sum(e[1] for e in spends[: i + 1] if e[0] > start) <= g["quota"]["slots"], (gid, ts)

    def check_not_starved(self, state: dict, gid: str, d: dict) -> None:
        """A stalled answer: every ready todo is itself stalled or unchanged since its last no-progress turn."""
        if d["reason"] != "stalled":
            return
        self.stats["stalls_seen"] += 1
        g = state["goals"][gid]
        stuck = stall.stalled(state, g)
        gated = {b for x in queries.pending_gates(state, gid) for b in x["blocks"]}  # waits for a human anyway
        ready = [t["id"] for t in queries.ready_todos(state, gid, clock.iso(self.now)) if t["id"] not in gated]
        last = decide._last_judged(state, gid, ready)
        for tid in ready:
            r = last.get(tid)
            unchanged = r is not None and r["result"] in decide.NO_PROGRESS
            assert tid in stuck or unchanged, (gid, tid, stuck, d["todo_id"], d["message"])

    def check_agree(self) -> None:
        from loopx.commands.inbox import _project_items
        from loopx.dashboard.api import Api, project_key

        state = self.store.load()
        status_rows = {}
        from loopx.kernel.read.status import summary

        decisions = {g: decide.for_client(self.store, state, g) for g in state["goals"]}
        for row in summary(state, clock.iso(self.now), decisions=decisions)["goals"]:
            status_rows[row["id"]] = row
        (p,) = [x for x in Api().status(clock.iso(self.now))["projects"] if x["key"] == project_key(self.dir)]
        dash = {g["id"]: g for g in p["goals"]}
        inbox = {i["goal"]: i for i in _project_items(self.dir, {}) if i["kind"] == "goal"}
        from loopx.kernel import reasons

        for gid, g in state["goals"].items():
            sr = decide.should_run(self.store, goal_id=gid, record=False, cache=False, host_usage=True)
            want = (sr["decision"], sr["reason"])
            row = status_rows[gid]["decision"]
            assert (row["decision"], row["reason"]) == want, (gid, row, want)
            if g["status"] == "active":
                assert (dash[gid]["decision"], dash[gid]["decision_reason"]) == want, (gid, dash[gid], want)
                in_inbox = gid in inbox
                assert in_inbox == (reasons.needs_you(sr) and sr["reason"] != "gate_pending"), (gid, want)
                if in_inbox:
                    assert inbox[gid]["reason"] == sr["reason"]
            hb = decide.for_client(self.store, state, gid)  # heartbeat-prompt's schedule reads this same answer
            assert (hb["decision"], hb["reason"]) == want
        self.stats["agreements"] += 1

    def check_end(self, state: dict, gid: str, d: dict, before: tuple, acted: bool) -> None:
        """Nothing left to do: done or one stable wait_human within SETTLE_TICKS, then no writes."""
        g = state["goals"][gid]
        live = [t for t in queries.goal_todos(state, gid) if t["status"] not in queries.DONE_STATES]
        watching = any(w["goal"] == gid and w["status"] == "active" for w in (state.get("watches") or {}).values()) \
            or any(t.get("every") for t in queries.goal_todos(state, gid))  # a watching goal waits for its checks
        nothing_left = g["status"] == "active" and not live and not queries.pending_gates(state, gid) and not watching
        if not nothing_left:
            self.settling.pop(gid, None)
            self.ended.pop(gid, None)
            return
        n = self.settling[gid] = self.settling.get(gid, 0) + 1
        final = d["reason"] in ("close_goal", "goal_done") or d["decision"] == "stop" and d["reason"] != "complete"
        if n > SETTLE_TICKS:
            assert final, (gid, d["decision"], d["reason"], n)
        if final:
            if gid in self.ended and not acted:
                assert self.ended[gid][0] == (d["decision"], d["reason"])
                assert self.lines() == before, (gid, "an ended goal wrote records")
            if gid not in self.ended:
                self.stats["ended"] += 1
            self.ended[gid] = ((d["decision"], d["reason"]), self.lines())

    def check_due(self) -> bool:
        from loopx.kernel.policy import tick as tk

        state = self.store.load(view="live")
        if not state.get("watches"):
            return False
        due = tk.earliest_due(state, tk.load_book(self.store), clock.iso(self.now))
        return due is not None and due <= clock.iso(self.now)

    # ------------------------------------------------------------------ the walk
    def tick(self) -> None:
        self.stats["ticks"] += 1
        step = self.rng.choice((60, 300, 600, 900, 1800)) if self.rng.random() > 0.03 else self.rng.choice((3, 8, 20)) * 3600
        self.at(self.now + timedelta(seconds=step))  # clock jumps now and then
        if self.rng.random() < 0.05:
            self.codex(self.rng.choice((20.0, 60.0, 97.0)))
        state = self.store.load()
        answers = {}
        acted = False
        due = self.check_due()  # a due watch check may write: such a tick is not idle
        for gid in sorted(state["goals"]):
            kind = self.rng.choice(AGENTS)
            before = self.lines()
            d = decide.should_run(self.store, goal_id=gid, agent=kind, tick=True)
            answers[gid] = d
            self.stats["decisions"][d["reason"]] = self.stats["decisions"].get(d["reason"], 0) + 1
            key = (d["decision"], d["reason"], d.get("todo_id"), d.get("gate_id"))
            if self.last_answer.get(gid) == key and d["decision"] != "run" and not due:
                assert self.lines() == before, (gid, key, "an idle tick wrote records")  # idle: nothing written
                self.stats["idle_ticks"] += 1
            self.last_answer[gid] = key
            if d["decision"] == "stop" and d["reason"] == "complete":  # what `loopx run` does with it
                from loopx.runner.loop import Driver

                Driver(self.store, kind, preset=None, agent_cmd="true", timeout=60, lease=600).complete_goal(gid)
                acted = True
            elif d["decision"] == "run":
                self.agent_turn(gid, kind)
                acted = True
            state = self.store.load()
            self.check_not_starved(state, gid, d)
            self.check_end(state, gid, d, before, acted)
        if self.human(answers):
            self.last_answer.clear()
        self.check_budgets(self.store.load())
        if self.stats["ticks"] % AGREE_EVERY == 0:
            self.check_agree()


def simulate(project_dir: str, seed: int, ticks: int) -> dict:
    """Run ``ticks`` ticks of the walk with ``seed`` on the connected project at ``project_dir``;
    raises AssertionError naming the invariant that broke. Returns the statistics."""
    sim = Sim(project_dir, seed)
    sim.setup()
    for _ in range(ticks):
        sim.tick()
    sim.check_agree()
    return sim.stats
