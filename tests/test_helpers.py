"""The small named helpers for facts that used to be written out in several places: a goal's
quota defaults (kernel.storage.quotas), whether a lease still holds (queries.lease_live) and the
kinds of actors (kernel.storage.actors)."""

from __future__ import annotations

from loopx.kernel.read import budget, queries, stall
from loopx.kernel.storage import actors, clock, fold, quotas

NOW = "2026-03-01T09:00:00Z"


def _goal_started(quota: dict | None = None) -> dict:
    state = fold.empty()
    fold.apply(state, {"seq": 1, "ts": NOW, "type": "goal.started", "goal": "g1", "actor": "human:tester",
                       "data": {"objective": "o", **({"quota": quota} if quota is not None else {})}})
    return state


def test_one_change_to_the_quota_defaults_reaches_the_reducer_the_budget_and_the_stall_rule(monkeypatch):
    monkeypatch.setitem(quotas.DEFAULTS, "slots", 5)
    monkeypatch.setitem(quotas.DEFAULTS, "stall_after", 7)
    state = _goal_started()
    g = state["goals"]["g1"]
    assert g["quota"] == {"slots": 5, "window": 86400, "cooldown": 0, "stall_after": 7}
    b = budget.budget(state, g, clock.parse_ts(NOW))
    assert b["slots"] == 5 and b["left"] == 5 and b["turns"] == quotas.TURNS_PER_SLOT * 5
    del g["quota"]["stall_after"]  # a goal written before the key existed reads the default
    assert quotas.value(g, "stall_after") == 7
    state.setdefault("stalls", {})["g1"] = {"": [(NOW, n) for n in range(2, 9)]}  # 7 unverified turns
    assert stall.stalled(state, g) == {"": 7}


def test_a_given_quota_wins_over_the_defaults_and_a_missing_goal_reads_them():
    g = _goal_started({"slots": 3, "window": 3600})["goals"]["g1"]
    assert g["quota"] == {"slots": 3, "window": 3600, "cooldown": 0, "stall_after": 3}
    assert quotas.value(None, "window") == 86400 and quotas.value({"quota": None}, "slots") == 48


def test_a_lease_holds_until_its_end_and_never_without_one():
    before, at, after = "2026-03-01T08:59:59Z", NOW, "2026-03-01T09:00:01Z"
    claim = {"holder": "agent:a", "lease_until": NOW}
    assert queries.lease_live(claim, before) and not queries.lease_live(claim, at)
    assert not queries.lease_live(claim, after)
    assert not queries.lease_live(None, before) and not queries.lease_live({}, before)
    assert not queries.lease_live({"lease_until": None}, before)  # a run opened without a lease
    assert queries.claim_live({"claim": claim}, before) and not queries.claim_live({"claim": None}, before)


def test_actor_kinds_come_from_the_prefix_only():
    assert actors.is_agent(actors.agent("codex")) and not actors.is_human(actors.agent("codex"))
    assert actors.is_human("human:ann") and not actors.is_agent("human:agent:x")
    assert actors.agent_name("agent:codex") == "codex" and actors.agent_name("human:ann") is None
