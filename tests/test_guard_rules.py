"""The guard's default mapping is a table (issue 25): ``loopx.guard.rules.RULES``, one row per
program. The verdicts follow the table, and docs/hosts.md names every program in it. What each
row protects against a hostile agent is tested in tests/test_hostile_guard.py."""

from __future__ import annotations

import re
from pathlib import Path

from loopx.guard import rules, verdicts

DOCS = Path(__file__).resolve().parents[1] / "docs"
# spellings of a program the docs name once (`mvn deploy` covers `./mvnw deploy`)
ALIASES = {"git-push", "git-send-pack", "./mvnw", "mvnw", "./gradlew", "gradlew"}
CFG = {"rules": [], "branches": list(rules.DEFAULT_BRANCHES), "defaults": True}


def _kinds(command: str) -> list[str | None]:
    return [h["kind"] for h in verdicts.command_kinds(command, CFG, git=object())]


def test_a_row_of_the_table_is_what_protects_a_program(monkeypatch):
    assert _kinds("shipctl ship --all") == []
    monkeypatch.setitem(rules.RULES, "shipctl", rules._first(rules.PROD, "ship"))
    assert _kinds("shipctl ship --all") == ["production-write"]
    assert _kinds("shipctl --all ship") == ["production-write"]  # the rule sees the verb, options skipped
    assert _kinds("shipctl status") == []
    monkeypatch.delitem(rules.RULES, "twine")
    assert _kinds("twine upload dist/*") == []


def test_the_rule_makers_read_the_positional_words():
    def kind(rule, words):
        return rule(rules.Call(words[0], words[1:], branches=rules.DEFAULT_BRANCHES, cwd=None, git=None, env=None))[0]

    assert kind(rules.RULES["kubectl"], ["kubectl", "-n", "prod", "apply", "-f", "x.yaml"]) == "production-write"
    assert kind(rules.RULES["kubectl"], ["kubectl", "get", "apply"]) is None  # only the first verb counts
    assert kind(rules.RULES["npm"], ["npm", "--tag", "next", "publish"]) == "release"
    assert kind(rules.RULES["yarn"], ["yarn", "npm", "publish"]) == "release"
    assert kind(rules.RULES["npm"], ["npm", "run", "build", "publish"]) is None  # a third word is an argument
    assert kind(rules.RULES["aws"], ["aws", "--region", "eu", "cloudformation", "deploy"]) == "production-write"
    assert kind(rules.RULES["aws"], ["aws", "s3", "cloudformation", "deploy"]) is None
    assert kind(rules.RULES["netlify"], ["netlify", "deploy"]) is None
    assert kind(rules.RULES["netlify"], ["netlify", "deploy", "--prod"]) == "production-write"
    assert kind(rules.RULES["gradle"], ["gradle", "clean", "publishToMavenCentral"]) == "release"
    assert kind(rules.RULES["glab"], ["glab", "mr", "merge", "1"]) == "merge"
    assert kind(rules.RULES["glab"], ["glab", "release", "create", "v1"]) == "release"
    assert kind(rules.RULES["glab"], ["glab", "mr", "list"]) is None


def test_docs_name_every_program_of_the_table():
    text = (DOCS / "hosts.md").read_text(encoding="utf-8")
    section = text.split("### Default command -> gate-kind mapping", 1)[1].split("\n### ", 1)[0]
    named = {tok.split()[0] for tok in re.findall(r"`([^`]+)`", section) if tok.split()}
    missing = sorted(set(rules.RULES) - ALIASES - named)
    assert not missing, f"programs of guard/rules.py RULES that docs/hosts.md does not name: {missing}"
