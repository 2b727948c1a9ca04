"""``cli.FAST`` repeats the argparse options of the hot commands (to skip argparse's imports); it
must say what the parser says, for every command in it (issue 25, item 4): the same options with
the same dests and kinds (flag or value), the same required options, positionals and exclusive
group; and for each command a full argument list gives the handler the same arguments either way
(the fast path's missing options fall to the handler's defaults, argparse's to its own)."""

from __future__ import annotations

import argparse
import inspect

import pytest

from loopx import cli

SPECIAL = ("<pos>", "<opt>", "<req>", "<excl>")


def _subparser(words: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = cli.build_parser(words[0])
    for w in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[w]
    return parser


def _options(parser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


# A value each option accepts (the fast path does not convert: the handlers validate strings).
VALUES = {"goal_id": "g1", "skip_exit": "0", "detail": "d", "priority": "2", "acceptance": "a", "verify": "true",
          "title": "a title", "lease": "20m", "run": "run-abc123", "result": "progress", "note": "n",
          "kind": "note", "summary": "s", "todo": "t-abc123", "cmd": "make", "exit_code": "0", "commit": "abc1234",
          "host": "claude-code", "cap": "3", "event": "stop", "since": "1h", "type_prefix": "todo.",
          "limit": "5", "question": "q?", "context": "c", "goal": "knn", "blocks": "t-abc123", "evidence": "ev-1",
          "next_titles": "then this", "fence": "3", "slots": "2", "path": "src/a.py"}


@pytest.mark.parametrize("words", list(cli.FAST), ids=" ".join)
def test_the_fast_table_matches_the_parser(words):
    module, handler, render, name, table = cli.FAST[words]
    parser = _subparser(words)
    options = _options(parser)
    for opt, (dest, const) in ((k, v) for k, v in table.items() if k not in SPECIAL):
        assert opt in options, f"{name}: FAST knows {opt}, argparse does not"
        act = options[opt]
        assert act.dest == dest, f"{name} {opt}: FAST dest {dest}, argparse dest {act.dest}"
        if const is None or const is int or const is list:
            assert act.nargs is None and act.const is None, f"{name} {opt}: argparse does not take one value"
            assert (act.type is int) == (const is int), f"{name} {opt}: argparse converts with {act.type}"
            assert isinstance(act, argparse._AppendAction) == (const is list), f"{name} {opt}: repeatable or not"
        else:
            assert act.nargs == 0 and act.const == const, f"{name} {opt}: argparse's flag stores {act.const}"
    positionals = [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    assert [a.dest for a in positionals] == list(table.get("<pos>", ())) + list(table.get("<opt>", ())), name
    assert [a.nargs == "?" for a in positionals] == [False] * len(table.get("<pos>", ())) + [True] * len(
        table.get("<opt>", ())), f"{name}: <opt> lists the optional positionals, after the required ones"
    required = sorted({a.dest for a in parser._actions if a.option_strings and a.required})
    assert required == sorted(table.get("<req>", ())), name
    known = {dest for k, (dest, *_c) in table.items() if k not in SPECIAL}
    groups = [sorted(a.dest for a in g._group_actions if a.dest in known) for g in parser._mutually_exclusive_groups]
    groups = [g for g in groups if len(g) > 1]  # a group the table knows one member of: that member's token is enough
    assert groups == ([sorted(table["<excl>"])] if "<excl>" in table else []), name
    assert parser.get_default("_name") in (name, None) and parser.get_default("_handler").__name__ == handler


def _argvs(words, table) -> list[list[str]]:
    """Every option of the table once (one spelling per dest, one member of the exclusive group),
    and the bare minimum (positionals and required options only)."""
    full, minimal, seen = list(words), list(words), set()
    excl = set(table.get("<excl>", ()))
    for opt, (dest, const) in ((k, v) for k, v in table.items() if k not in SPECIAL):
        if dest in seen or (dest in excl and seen & excl):
            continue
        seen.add(dest)
        full += [opt, VALUES[dest]] if const is None or const is int or const is list else [opt]
        if const is list:
            full += [opt, VALUES[dest] + "-again"]  # repeated: both kept, in order
        if dest in table.get("<req>", ()):
            minimal += [opt, VALUES[dest]]
    pos = [VALUES[d] for d in table.get("<pos>", ())]
    opt = [VALUES[d] for d in table.get("<opt>", ())]
    return [full + pos + opt, minimal + pos]


@pytest.mark.parametrize("words", list(cli.FAST), ids=" ".join)
def test_both_paths_give_the_handler_the_same_arguments(words):
    module, handler, render, name, table = cli.FAST[words]
    for args in _argvs(words, table):
        fast = cli._fast(args)
        assert fast is not None, f"the fast path fell back on {args}"
        slow = cli._parse(args)
        assert fast[0] is slow[0] and fast[1] is slow[1] and fast[2] == slow[2] == name, args
        params = inspect.signature(fast[0]).parameters
        assert set(slow[3]) <= set(params), f"{name}: argparse gives {set(slow[3]) - set(params)}, the handler lacks"
        for p in list(params)[1:]:  # after ctx
            got_fast = fast[3].get(p, params[p].default)
            assert got_fast is not inspect.Parameter.empty, f"{name}: the fast path leaves {p} unset"
            assert got_fast == slow[3].get(p, params[p].default), f"{name}: {p} differs on {args}"


def test_a_token_the_table_does_not_know_falls_back_to_argparse():
    for words, (*_rest, table) in cli.FAST.items():
        pos = ["x" for _ in table.get("<pos>", ())]
        assert cli._fast([*words, *pos, "--no-such-option"]) is None, words
        assert cli._fast([*words, *pos, "--help"]) is None, words
