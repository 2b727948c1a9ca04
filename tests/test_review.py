"""review-packet: the Markdown handoff report (objective, progress, rounds, gates, evidence,
stalls, next steps), its JSON form, --since and --output."""

from __future__ import annotations

import pytest

from conftest import human_channel
from loopx.kernel.policy import review, turn
from loopx.kernel.storage.store import Store
from loopx.kernel.write import gates, todos
from test_decide import start


@pytest.fixture
def store(project, clk):
    s = Store.open(str(project))
    start(s, clk, todos_=("parse the header", "write the docs", "ship"))
    t = turn.next_turn(s, "agent:bot", goal_id="g1")
    clk.advance(60)
    turn.finish(s, "agent:bot", t["run_id"], "completion", verify=True)
    turn.spend_slot(s, "agent:bot", t["run_id"])
    clk.advance(60)
    t2 = turn.next_turn(s, "agent:bot", goal_id="g1")
    clk.advance(60)
    turn.finish(s, "agent:bot", t2["run_id"], "failed", note="tool crashed <script>alert(1)</script>")
    clk.advance(60)
    g = gates.open_gate(s, "agent:bot", "g1", kind="merge", question="Merge the parser?")
    gates.decide(s, "human:tester", g["gate_id"], approve=True, channel="confirm-flag", note="fine", human=human_channel())
    gates.open_gate(s, "agent:bot", "g1", kind="release", question="Release 1.0?",
                    blocks=[todos.queries.goal_todos(s.load(), "g1")[-1]["id"]])
    clk.advance(60)
    return s


def test_build_gathers_the_report(store):
    d = review.build(store, "g1")
    assert d["goal"]["objective"] == "Make the tests pass"
    assert d["progress"]["counts"]["done"] == 1 and len(d["progress"]["open"]) == 2
    assert d["rounds"]["count"] == 2 and d["rounds"]["progress_rate"] == 0.5
    assert d["rounds"]["slots_spent"] == 1 and d["rounds"]["budget"]["left"] == 47
    assert [x["status"] for x in d["gates"]["decided"]] == ["approved"]
    assert [x["question"] for x in d["gates"]["pending"]] == ["Release 1.0?"]
    assert len(d["evidence"]["tests"]) == 1
    assert d["problems"]["failures"][0]["result"] == "failed"
    assert any("Release 1.0?" in s for s in d["next_steps"])


def test_markdown_has_every_section_and_escapes_agent_text(store):
    md = review.render_markdown(review.build(store, "g1"))
    for head in ("# Review: g1", "## Progress", "## Rounds", "## Gates", "## Key evidence",
                 "## Stalls and failures", "## Next steps"):
        assert head in md
    assert "<script>" not in md and "&lt;script>" in md  # < and & escaped: no tag can open
    assert "&gt;" not in md  # a lone > opens nothing: "val_acc 0.5 -> 0.8" reads as itself in a terminal
    assert review._t("val_acc 0.58 -> 0.84 <b>&amp;") == "val_acc 0.58 -> 0.84 &lt;b>&amp;amp;"
    assert "- [x] parse the header" in md and "**pending**" in md


def test_cli_output_file_and_json(store, cli, project):
    out = project / "review.md"
    r = cli("review-packet", "--goal-id", "g1", "--output", out)
    assert r.code == 0 and out.read_text().startswith("# Review: g1")
    j = cli("review-packet", "--json")
    assert j.code == 0 and j.data["markdown"].startswith("# Review") and j.data["rounds"]["count"] == 2


def test_since_limits_the_period(store, cli, clk):
    clk.advance(3600)
    d = cli("review-packet", "--since", "30m", json=True).data
    assert d["rounds"]["count"] == 0 and d["progress"]["done"] == []
    assert d["gates"]["pending"]  # pending gates are always shown


@pytest.mark.parametrize("args,code", [(["--since", "whenever"], 2), (["--goal-id", "zzz"], 2)])
def test_bad_input(store, cli, args, code):
    r = cli("review-packet", *args)
    assert r.code == code and "hint:" in r.err


def test_output_to_a_directory_is_refused(store, cli, project):
    r = cli("review-packet", "--output", project)
    assert r.code == 2 and "directory" in r.err
