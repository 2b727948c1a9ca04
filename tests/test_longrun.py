"""Issue 21's long-run simulator in the suite: a fixed seed, a real store and git repository,
scripted agents of every kind, random humans, a Codex window and clock jumps; the invariants are
checked at every tick (tests/longrun.py says which). bench/longrun_soak.py runs longer soaks."""

from __future__ import annotations

import os

import pytest

from longrun import simulate

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the scripted agents use POSIX commands")

SEED = 21
TICKS = 400


def test_the_decision_holds_over_a_long_seeded_run(project, monkeypatch, capsys):
    monkeypatch.setenv("LOOPX_NOW", "2026-06-01T08:00:00Z")  # restored after the test
    stats = simulate(str(project), SEED, TICKS)
    with capsys.disabled():
        print(f"\nlongrun: {stats}")
    # the walk exercised what the invariants are about
    assert stats["turns"] > 50 and stats["idle_ticks"] > 50 and stats["agreements"] >= TICKS // 25
    assert stats["ended"] >= 1 and stats["refused_claims"] >= 1 and stats["out_of_scope"] >= 1
