"""The parser-free fast path for `status` and `quota should-run` must behave exactly like argparse."""

from __future__ import annotations

import inspect

import pytest

from loopx import cli


@pytest.mark.parametrize("argv", [
    ["status"], ["status", "--goal-id", "g1"], ["status", "--goal=g1"], ["status", "--orient"],
    ["quota", "should-run"], ["quota", "should-run", "--goal-id", "g1", "--skip-exit", "0", "--explain"],
    ["quota", "should-run", "--no-record", "--skip-exit=3"],
    ["history"], ["history", "--limit", "20"], ["history", "--limit=0", "--events"],
    ["history", "--goal", "g1", "--since", "24h", "--type", "gate.", "--rounds"],
])
def test_fast_path_parses_like_argparse(argv):
    fast = cli._fast(argv)
    assert fast is not None
    handler, render, name, args = cli._parse(argv)
    assert fast[0] is handler and fast[1] is render and fast[2] == name
    defaults = {k: p.default for k, p in inspect.signature(handler).parameters.items() if k != "ctx"}
    assert {**defaults, **fast[3]} == args  # the handler's defaults fill in what the fast path omits


@pytest.mark.parametrize("argv", [
    ["status", "--help"], ["status", "--bogus"], ["status", "--goal-id"], ["status", "--goal-id", "--orient"],
    ["status", "extra"], ["quota", "should-run", "--explain=yes"], ["quota", "show"],
    ["history", "--rounds", "--events"], ["history", "--limit"],
])
def test_anything_unusual_falls_back_to_argparse(argv):
    assert cli._fast(argv) is None


def test_same_output_both_ways(goal, cli, monkeypatch):
    fast_out = cli("quota", "should-run", "--goal-id", goal, "--no-record", json=True)
    monkeypatch.setattr("loopx.cli._fast", lambda rest: None)
    slow_out = cli("quota", "should-run", "--goal-id", goal, "--no-record", json=True)
    assert fast_out.code == slow_out.code and fast_out.json == slow_out.json
    assert cli("status", "--bogus").code == 2  # the argparse error, not a fast-path crash
