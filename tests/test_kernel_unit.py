"""Pure kernel unit tests (fixed clock, no subprocesses): clock, ids, record encoding, fold and
queries, plus a hypothesis state machine that drives the todo lifecycle through the real Store and
checks it against a small model of the rules in ``loopx.kernel.write.todos``."""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from loopx.errors import Ambiguous, Conflict, NotFound, UsageError
from loopx.kernel.read import budget, queries
from loopx.kernel.storage import clock, codec, fold, ids
from loopx.kernel.storage.store import Store
from loopx.kernel.write import todos

T0 = datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC)


# ----------------------------------------------------------------- clock
@pytest.mark.parametrize("text,secs", [("90s", 90), ("30m", 1800), ("24h", 86400), ("7d", 604800), ("1w", 604800),
                                       ("1h30m", 5400), (" 2m ", 120), ("45", 45), ("1.5h", 5400), ("0", 0)])
def test_parse_duration(text, secs):
    assert clock.parse_duration(text) == secs


@pytest.mark.parametrize("text", ["", "soon", "5x", "-1", "-5m", "1h junk", "m", "nan", "inf", "99999d"])
def test_parse_duration_rejects(text):
    with pytest.raises(UsageError):
        clock.parse_duration(text)


@pytest.mark.parametrize("secs,text", [(45, "45s"), (720, "12m"), (3600, "1h"), (12000, "3h20m"),
                                       (86400 * 2 + 3600 * 4, "2d4h"), (-90, "-1m")])
def test_format_duration(secs, text):
    assert clock.format_duration(secs) == text


def test_iso_and_parse_ts_round_trip():
    assert clock.iso(T0) == "2026-03-01T09:00:00Z"
    assert clock.iso(T0 + timedelta(microseconds=5)) == "2026-03-01T09:00:00Z"  # floored to whole seconds
    assert clock.parse_ts("2026-03-01T09:00:00Z") == T0
    assert clock.parse_ts("2026-03-01T10:00:00+01:00") == T0
    assert clock.parse_ts("2026-03-01T09:00:00") == T0          # naive means UTC
    with pytest.raises(UsageError):
        clock.parse_ts("yesterday")


def test_loopx_now_overrides_the_clock(monkeypatch):
    monkeypatch.setenv("LOOPX_NOW", "2026-03-01T09:00:00Z")
    assert clock.now() == T0 and clock.now_iso() == "2026-03-01T09:00:00Z"
    monkeypatch.setenv("LOOPX_NOW", "not a time")
    with pytest.raises(UsageError, match="LOOPX_NOW"):
        clock.now()
    monkeypatch.delenv("LOOPX_NOW")
    assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 60


def test_since_arg():
    assert clock.since_arg("24h", T0) == T0 - timedelta(hours=24)
    assert clock.since_arg("2026-02-01T00:00:00Z", T0) == datetime(2026, 2, 1, tzinfo=UTC)
    with pytest.raises(UsageError):
        clock.since_arg("last week", T0)


def test_timestamps_sort_as_text_in_time_order():
    base = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    times = [base + timedelta(microseconds=us) for us in (0, 1, 499_999, 500_000, 999_999, 1_000_000, 1_500_000)]
    texts = [clock.iso(t) for t in times]
    assert len({len(x) for x in texts}) == 1  # one fixed width
    assert texts == sorted(texts)
    early = [clock.iso(datetime(y, 1, 1, tzinfo=UTC)) for y in (999, 1000, 2026)]  # a year below 1000 too
    assert early == ["0999-01-01T00:00:00Z", "1000-01-01T00:00:00Z", "2026-01-01T00:00:00Z"] == sorted(early)
    assert clock.iso(datetime(2026, 6, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=2)))) == "2026-05-31T23:00:00Z"
    t = {"claim": {"holder": "agent:a", "lease_until": clock.iso(base + timedelta(seconds=1)), "fence": 1}}
    assert queries.claim_live(t, clock.iso(base + timedelta(microseconds=999_999)))
    assert not queries.claim_live(t, clock.iso(base + timedelta(seconds=1)))


# ----------------------------------------------------------------- ids
def test_new_id_prefix_and_uniqueness():
    taken = set()
    for _ in range(500):
        i = ids.new_id("todo", taken)
        assert i.startswith("t-") and i not in taken
        taken.add(i)
    assert ids.new_id("gate").startswith("gate-") and ids.new_id("evidence").startswith("ev-")


def test_new_id_grows_when_crowded():
    taken = {f"t-{n:02x}" for n in range(256)}       # every 1-byte id is taken
    assert len(ids.new_id("todo", taken, nbytes=1)) > len("t-00")


@pytest.mark.parametrize("good", ["a", "g1", "fix-the-ci", "0-start", "a" * 64])
def test_goal_id_accepts(good):
    assert ids.check_goal_id(good) == good


@pytest.mark.parametrize("bad", ["", "-a", "A", "a_b", "a b", "../x", "a/b", "é", "a" * 65, "a\n", "a\x00"])
def test_goal_id_rejects(bad):
    with pytest.raises(UsageError):
        ids.check_goal_id(bad)


@pytest.mark.parametrize("text,slug", [("Fix the flaky CI!", "fix-the-flaky-ci"), ("Über café", "uber-cafe"),
                                       ("🚀", "goal"), ("  --x--  ", "x"), ("a" * 80, "a" * 40)])
def test_slugify(text, slug):
    assert ids.slugify(text) == slug
    ids.check_goal_id(ids.slugify(text))


def test_resolve():
    pool = {"t-3f9a1c": 1, "t-3f0000": 2, "t-ab12cd": 3}
    assert ids.resolve("todo", "t-3f9a1c", pool) == "t-3f9a1c"
    assert ids.resolve("todo", "t-3f9", pool) == "t-3f9a1c"
    assert ids.resolve("todo", "ab", pool) == "t-ab12cd"          # without the kind prefix
    assert ids.resolve("todo", "  t-ab12cd ", pool) == "t-ab12cd"
    with pytest.raises(Ambiguous):
        ids.resolve("todo", "t-3f", pool)
    with pytest.raises(NotFound):
        ids.resolve("todo", "t-zz", pool)
    with pytest.raises(UsageError):
        ids.resolve("todo", " ", pool)


# ----------------------------------------------------------------- record encoding
def test_encode_decode_round_trip():
    rec = {"v": 1, "seq": 7, "id": "e-1", "ts": "2026-03-01T09:00:00Z", "actor": "human:x", "type": "todo.added",
           "goal": "g", "data": {"todo_id": "t-1", "title": "ünïcode 🚀 \n \u202e"}}
    line = codec.encode(rec)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = codec.decode(line[:-1])
    assert {k: v for k, v in back.items() if k != "crc"} == rec
    assert codec.decode(b"\xef\xbb\xbf" + line[:-1] + b"\r")["seq"] == 7   # BOM and CR tolerated


@pytest.mark.parametrize("mutate,reason", [
    (lambda b: b.replace(b'"seq":7', b'"seq":8'), "crc"),
    (lambda b: b[:-3] + b'"}', "crc"),
    (lambda b: b[: b.rfind(b',"crc"')] + b"}", "no crc"),
    (lambda b: b"garbage", "no crc"),
])
def test_decode_rejects_damage(mutate, reason):
    line = codec.encode({"v": 1, "seq": 7, "type": "x.y", "data": {}})[:-1]
    with pytest.raises(ValueError, match=reason):
        codec.decode(mutate(line))


def test_decode_rejects_valid_crc_non_records():
    import zlib

    for body in ('[1,2', '{"type":1,"seq":1', '{"seq":"1","type":"a.b"'):
        head = body.encode()
        line = head + b',"crc":"%08x"}' % zlib.crc32(head)
        with pytest.raises(ValueError):
            codec.decode(line)


def test_clean_replaces_each_lone_surrogate_once():
    assert codec.clean({"a": ["x\udcff\udcfe", "\ud800"]}) == {"a": ["x\ufffd\ufffd", "\ufffd"]}
    assert codec.clean_text("fine 🚀") == "fine 🚀"


# ----------------------------------------------------------------- fold and queries
def rec(seq, type_, goal="g", actor="human:h", ts="2026-03-01T09:00:00Z", **data):
    return {"v": 1, "seq": seq, "id": f"e-{seq}", "ts": ts, "actor": actor, "type": type_, "goal": goal, "data": data}


def folded(*records):
    s = fold.empty()
    for r in records:
        fold.apply(s, r)
    return s


def base_records():
    return [rec(1, "goal.started", objective="o", quota={"slots": 3, "window": 3600}),
            rec(2, "todo.added", todo_id="t-a", title="a"),
            rec(3, "todo.added", todo_id="t-b", title="b", priority=5),
            rec(4, "todo.added", todo_id="t-c", title="c", depends_on=["t-a"])]


def test_fold_goal_and_todos():
    s = folded(*base_records())
    assert s["goals"]["g"]["status"] == "active" and s["goals"]["g"]["quota"]["slots"] == 3
    assert [t["id"] for t in queries.goal_todos(s, "g")] == ["t-b", "t-a", "t-c"]   # priority, then order
    now = "2026-03-01T09:10:00Z"
    assert [t["id"] for t in queries.ready_todos(s, "g", now)] == ["t-b", "t-a"]   # t-c waits for t-a
    fold.apply(s, rec(5, "todo.completed", todo_id="t-a", evidence=["ev-1"]))
    assert [t["id"] for t in queries.ready_todos(s, "g", now)] == ["t-b", "t-c"]
    assert s["todos"]["t-a"]["evidence"] == ["ev-1"] and s["todos"]["t-a"]["claim"] is None


def test_fold_claim_fence_and_expiry():
    s = folded(*base_records(), rec(5, "todo.claimed", actor="agent:x", todo_id="t-b", holder="agent:x",
                                    lease_until="2026-03-01T09:30:00Z"))
    t = s["todos"]["t-b"]
    assert t["claim"]["fence"] == 5 and t["status"] == "claimed"
    assert queries.claim_live(t, "2026-03-01T09:29:59Z") and not queries.claim_live(t, "2026-03-01T09:30:00Z")
    assert "t-b" not in [x["id"] for x in queries.ready_todos(s, "g", "2026-03-01T09:10:00Z")]
    assert "t-b" in [x["id"] for x in queries.ready_todos(s, "g", "2026-03-01T09:10:00Z", holder="agent:x")]
    assert "t-b" in [x["id"] for x in queries.ready_todos(s, "g", "2026-03-01T09:31:00Z")]
    groups = queries.by_status(s, "g", "2026-03-01T09:31:00Z")
    assert [x["id"] for x in groups["expired"]] == ["t-b"]
    fold.apply(s, rec(6, "todo.renewed", todo_id="t-b", lease_until="2026-03-01T10:00:00Z"))
    assert t["claim"]["fence"] == 5 and t["claim"]["lease_until"] == "2026-03-01T10:00:00Z"
    assert s["agents"]["x"]["last_seen"] == "2026-03-01T09:00:00Z"


def test_pending_gates_block_ready_todos():
    s = folded(*base_records(), rec(5, "gate.opened", gate_id="gate-1", kind="merge", question="q", blocks=["t-b"]))
    now = "2026-03-01T09:10:00Z"
    assert [t["id"] for t in queries.ready_todos(s, "g", now)] == ["t-a"]
    fold.apply(s, rec(6, "gate.opened", gate_id="gate-2", kind="release", question="q2"))   # blocks the goal
    assert queries.ready_todos(s, "g", now) == []
    fold.apply(s, rec(7, "gate.approved", gate_id="gate-2", channel="terminal"))
    fold.apply(s, rec(8, "gate.rejected", gate_id="gate-1", channel="terminal", note="no"))
    assert [t["id"] for t in queries.ready_todos(s, "g", now)] == ["t-b", "t-a"]
    assert s["gates"]["gate-2"]["decided_by"] == "human:h" and s["gates"]["gate-2"]["channel"] == "terminal"


def test_unknown_and_malformed_records_are_counted_not_fatal():
    s = folded(*base_records(), rec(5, "future.thing", x=1), rec(6, "future.thing"),
               rec(7, "todo.claimed", todo_id="t-nope", holder="agent:x", lease_until="z"),
               {"v": 1, "seq": 8, "type": "todo.added", "goal": "g", "data": "not a dict", "ts": "t"})
    assert s["meta"]["unknown_types"] == {"future.thing": 2}
    assert s["meta"]["malformed"] == 1
    assert s["meta"]["events"] == 8
    assert len(s["todos"]) == 3


def test_window_spend_and_resolve_goal():
    s = folded(*base_records(), rec(5, "quota.spent", ts="2026-03-01T08:00:00Z", run_id="r1", slots=1),
               rec(6, "quota.spent", ts="2026-03-01T09:00:00Z", run_id="r2", slots=2))
    assert budget.window_spend(s, "g", "2026-03-01T08:30:00Z")[0] == 2
    assert budget.window_spend(s, "g", "2026-03-01T07:00:00Z")[0] == 3
    assert queries.resolve_goal(s, None)["id"] == "g"
    fold.apply(s, rec(7, "goal.started", goal="g2", objective="two"))
    with pytest.raises(UsageError):
        queries.resolve_goal(s, None)           # two active goals: ask which
    assert queries.resolve_goal(s, "g")["id"] == "g"     # also a prefix of "g2": the exact id wins
    fold.apply(s, rec(9, "goal.started", goal="gx-1", objective="three"))
    fold.apply(s, rec(10, "goal.started", goal="gx-2", objective="four"))
    with pytest.raises(UsageError, match="ambiguous"):
        queries.resolve_goal(s, "gx")
    assert queries.resolve_goal(s, "gx-2")["id"] == "gx-2"
    with pytest.raises(NotFound):
        queries.resolve_goal(s, "x")
    for n, gid in enumerate(("g2", "gx-1", "gx-2")):
        fold.apply(s, rec(11 + n, "goal.paused", goal=gid))
    assert queries.resolve_goal(s, None)["id"] == "g"


def test_store_health_reports_problems():
    s = folded(*base_records(), rec(5, "future.thing"))
    s["meta"]["files"]["events"]["bad"] = 2
    s["meta"]["torn"] = {"evidence": 17}
    h = queries.store_health(s)
    assert h["files"]["events"]["bad_lines"] == 2 and h["files"]["evidence"]["torn_tail_bytes"] == 17
    assert any("bad line" in p for p in h["problems"]) and any("torn" in p for p in h["problems"])
    assert any("future.thing" in p for p in h["problems"])


# ----------------------------------------------------------------- the todo lifecycle, against a model
AGENTS = ["agent:a", "agent:b", "human:h"]


class TodoMachine(RuleBasedStateMachine):
    """Model: todo id -> {status, claim: None | [holder, until (s since T0), fence]}; clock in seconds."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="loopx-sm-")
        self.store, _ = Store.create(self.dir)
        self.now = 0
        self.model: dict[str, dict] = {}
        self.order: list[str] = []
        self.last_fence = 0
        self._env = os.environ.get("LOOPX_NOW")
        self._tick()

    def teardown(self):
        if self._env is None:
            os.environ.pop("LOOPX_NOW", None)
        else:
            os.environ["LOOPX_NOW"] = self._env
        shutil.rmtree(self.dir, ignore_errors=True)

    def _tick(self):
        os.environ["LOOPX_NOW"] = clock.iso(T0 + timedelta(seconds=self.now))

    def _iso(self, secs):
        return clock.iso(T0 + timedelta(seconds=secs))

    @initialize()
    def start(self):
        from loopx.kernel.write import evidence, goals

        goals.start_goal(self.store, "human:h", objective="model", goal_id="g")
        self.ev = evidence.add(self.store, "human:h", "g", kind="test", summary="proof", exit_code=0)["evidence_id"]

    def _pick(self, i):
        return self.order[i % len(self.order)]

    def _other_holds(self, t, actor):
        c = t["claim"]
        return c is not None and c[0] != actor and actor.startswith("agent:")

    def _expect(self, fn, conflict: bool):
        if conflict:
            with pytest.raises(Conflict):
                fn()
            return None
        return fn()

    # ---- rules
    @precondition(lambda self: len(self.order) < 4)      # few todos, so agents collide on them often
    @rule(title=st.text(min_size=1, max_size=20).filter(lambda s: s.strip()))
    def add(self, title):
        tid = todos.add(self.store, "agent:a", "g", title)["todo_id"]
        self.model[tid] = {"status": "open", "claim": None}
        self.order.append(tid)

    @rule(minutes=st.integers(1, 90))
    def advance(self, minutes):
        self.now += minutes * 60
        self._tick()

    @precondition(lambda self: self.order)
    @rule(i=st.integers(0, 3), actor=st.sampled_from(AGENTS), lease=st.integers(1, 60))
    def claim(self, i, actor, lease):
        tid, t = self._pick(i), None
        t = self.model[tid]
        c = t["claim"]
        refused = (t["status"] in ("done", "archived", "blocked")
                   or (c is not None and c[0] != actor and c[1] > self.now))
        out = self._expect(lambda: todos.claim(self.store, actor, tid, f"{lease}m"), refused)
        if refused:
            return
        until = self.now + lease * 60
        if c is not None and c[0] == actor and c[1] > self.now:
            c[1] = until
            assert out["fence"] == c[2]
        else:
            assert out["fence"] > self.last_fence
            self.last_fence = out["fence"]
            t["claim"] = [actor, until, out["fence"]]
            t["status"] = "claimed"
        assert out["lease_until"] == self._iso(until)

    def _fence_refused(self, t, actor, fence):
        c = t["claim"]
        if fence is not None:
            return c is None or c[2] != fence or c[0] != actor
        return self._other_holds(t, actor)

    def _fence_for(self, t, use_fence, stale):
        if not use_fence or t["claim"] is None:
            return None
        return t["claim"][2] - 1 if stale else t["claim"][2]

    @precondition(lambda self: self.order)
    @rule(i=st.integers(0, 3), actor=st.sampled_from(AGENTS), use_fence=st.booleans(), stale=st.booleans())
    def renew(self, i, actor, use_fence, stale):
        tid = self._pick(i)
        t = self.model[tid]
        fence = self._fence_for(t, use_fence, stale)
        refused = (t["status"] in ("done", "archived") or t["claim"] is None
                   or self._fence_refused(t, actor, fence))
        self._expect(lambda: todos.renew(self.store, actor, tid, "10m", fence), refused)
        if not refused:
            t["claim"][1] = self.now + 600

    @precondition(lambda self: self.order)
    @rule(i=st.integers(0, 3), actor=st.sampled_from(AGENTS), use_fence=st.booleans(), stale=st.booleans())
    def release(self, i, actor, use_fence, stale):
        tid = self._pick(i)
        t = self.model[tid]
        fence = self._fence_for(t, use_fence, stale)
        if t["status"] in ("done", "archived"):
            self._expect(lambda: todos.release(self.store, actor, tid, fence), True)
            return
        if t["claim"] is None:
            assert todos.release(self.store, actor, tid, fence)["changed"] is False
            return
        refused = self._fence_refused(t, actor, fence)
        self._expect(lambda: todos.release(self.store, actor, tid, fence), refused)
        if not refused:
            t.update(status="open", claim=None)

    @precondition(lambda self: self.order)
    @rule(i=st.integers(0, 3), actor=st.sampled_from(AGENTS))
    def block(self, i, actor):
        tid = self._pick(i)
        t = self.model[tid]
        refused = t["status"] in ("done", "archived") or self._other_holds(t, actor)
        self._expect(lambda: todos.block(self.store, actor, tid, "waiting"), refused)
        if not refused:
            t.update(status="blocked", claim=None)

    @precondition(lambda self: self.order)
    @rule(i=st.integers(0, 3), actor=st.sampled_from(AGENTS), use_fence=st.booleans(), stale=st.booleans())
    def done(self, i, actor, use_fence, stale):
        tid = self._pick(i)
        t = self.model[tid]
        fence = self._fence_for(t, use_fence, stale)
        refused = t["status"] in ("done", "archived") or self._fence_refused(t, actor, fence)
        self._expect(lambda: todos.done(self.store, actor, tid, [self.ev], fence=fence), refused)
        if not refused:
            t.update(status="done", claim=None)

    @precondition(lambda self: self.order)
    @rule(i=st.integers(0, 3), actor=st.sampled_from(AGENTS))
    def archive(self, i, actor):
        tid = self._pick(i)
        t = self.model[tid]
        if t["status"] == "archived":
            assert todos.archive(self.store, actor, tid)["changed"] is False
            return
        refused = self._other_holds(t, actor)
        self._expect(lambda: todos.archive(self.store, actor, tid), refused)
        if not refused:
            t.update(status="archived", claim=None)

    @precondition(lambda self: self.order)
    @rule(i=st.integers(0, 3), actor=st.sampled_from(AGENTS))
    def reopen(self, i, actor):
        tid = self._pick(i)
        t = self.model[tid]
        refused = t["status"] == "claimed" and self._other_holds(t, actor)
        from loopx.kernel import humans

        human = humans.HumanChannel("human:tester", "terminal", _seal=humans._SEAL)  # a human asked
        self._expect(lambda: todos.update(self.store, actor, tid, reopen=True, human=human), refused)
        if not refused and t["status"] != "open":
            t.update(status="open", claim=None)

    # ---- the store agrees with the model, read back from disk by a fresh reader
    @invariant()
    def agrees(self):
        state = Store(self.store.root).load()
        assert set(state["todos"]) == set(self.model)
        now_iso = self._iso(self.now)
        for tid, m in self.model.items():
            t = state["todos"][tid]
            assert t["status"] == m["status"], tid
            if m["claim"] is None:
                assert t["claim"] is None, tid
            else:
                holder, until, fence = m["claim"]
                assert (t["claim"]["holder"], t["claim"]["lease_until"], t["claim"]["fence"]) == \
                    (holder, self._iso(until), fence)
                assert queries.claim_live(t, now_iso) == (until > self.now)
        files = state["meta"]["files"]
        assert files["events"]["bad"] == 0 and files["events"].get("seq_gaps", 0) == 0


def test_todo_lifecycle_matches_the_model():
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(TodoMachine, settings=settings(
        max_examples=60, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


def test_agent_last_seen_is_the_newest_whatever_the_fold_order():
    from loopx.kernel.storage import fold

    state = fold.empty()
    newer = {"v": 1, "seq": 1, "ts": "2026-03-01T09:00:05Z", "actor": "agent:a", "type": "project.noted",
             "goal": None, "data": {}}
    older = dict(newer, ts="2026-03-01T09:00:01Z")
    fold.apply(state, newer)
    fold.apply(state, older)  # e.g. evidence.jsonl folded after events.jsonl
    assert state["agents"]["a"]["last_seen"] == "2026-03-01T09:00:05Z"
