"""Ids never become paths, and loopx writes nowhere but ``.loopx/`` and the user registry
(issue 2, acceptance 8). Real processes; the whole scratch tree, a fake HOME, XDG folders and TMPDIR
are compared before and after.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from conftest import run_loopx

HOSTILE_IDS = ["../../x", "..", "../", "/etc/passwd", "a/b", "a\\b", "C:\\x", "-rf", "UPPER",
               "with space", "é", "a" * 65, ".hidden", "~root", "$(id)", "`id`", "%2e%2e%2fx"]


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under ``root`` -> sha256 of its bytes ('dir' for directories)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.mark.parametrize("bad", HOSTILE_IDS)
def test_hostile_goal_ids_are_refused(project, bad):
    r = run_loopx(["start-goal", "--goal-text", "x", "--goal-id", bad], project)
    assert r.code == 2, (bad, r.code, r.err)
    assert r.err.startswith("loopx: error: ") and "hint:" in r.err
    assert not (project / ".loopx" / "events.jsonl").read_bytes()


@pytest.mark.parametrize("bad", ["../../x", "/etc/passwd", "a/b", "..", "-1", "a" * 65])
def test_hostile_agent_names_are_refused(goal, project, bad):
    before = (project / ".loopx" / "events.jsonl").read_bytes()
    for args, env in ((["--agent", bad, "todo", "add", "x"], None), (["todo", "add", "x"], {"LOOPX_AGENT": bad}),
                      (["agent", "register", bad, "--kind", "shell"], None),
                      (["handoff", "--to", bad, "--note", "n"], None)):
        r = run_loopx(args, project, env=env)
        assert r.code == 2, (args, r.code, r.err)
        assert "Traceback" not in r.err
    assert (project / ".loopx" / "events.jsonl").read_bytes() == before


def test_nul_in_ids_is_refused_in_process(goal, project, cli):
    """NUL cannot travel through argv or the environment, but can through main(argv)."""
    before = (project / ".loopx" / "events.jsonl").read_bytes()
    for args in (["start-goal", "--goal-text", "x", "--goal-id", "x\x00y"], ["--agent", "a\x00b", "todo", "add", "x"],
                 ["todo", "show", "t-\x00"], ["agent", "register", "a\x00", "--kind", "shell"]):
        r = cli(*args, json=True)
        assert r.code == 2, (args, r.out)
        assert r.json["ok"] is False and r.json["error"]["hint"]
    assert (project / ".loopx" / "events.jsonl").read_bytes() == before


@pytest.mark.parametrize("command", [["todo", "show"], ["todo", "claim"], ["todo", "done", "--evidence", "ev-1"],
                                     ["gate", "show"], ["gate", "approve", "--confirm", "x"], ["evidence", "show"],
                                     ["goal", "show"], ["goal", "pause"]])
def test_path_like_ids_are_not_found(goal, project, command):
    before = (project / ".loopx" / "events.jsonl").read_bytes()
    for bad in ("../../x", "/etc/passwd", "../.loopx/format.json"):
        args = command[:2] + [bad] + command[2:]
        r = run_loopx(args, project)
        assert r.code == 2, (args, r.code, r.err)
        assert "Traceback" not in r.err
    assert (project / ".loopx" / "events.jsonl").read_bytes() == before


def test_nothing_written_outside_store_and_registry(tmp_path):
    root = tmp_path / "world"
    home, fake_home, tmp, xdg = root / "loopx-home", root / "home", root / "tmp", root / "xdg"
    proj = root / "proj"
    for d in (home, fake_home, tmp, xdg, proj / "src" / "deep", root / "sibling"):
        d.mkdir(parents=True)
    (proj / "README.md").write_text("hello\n")
    (proj / "src" / "app.py").write_text("print('hi')\n")
    (root / "sibling" / "keep.txt").write_text("untouched\n")
    output = root / "out.txt"
    output.write_text("3 passed\ntoken=ghp_" + "a1B2" * 10 + "\n" + "x" * 50_000 + "\n")
    env = {"LOOPX_HOME": str(home), "HOME": str(fake_home), "TMPDIR": str(tmp), "XDG_DATA_HOME": str(xdg / "data"),
           "XDG_CONFIG_HOME": str(xdg / "config"), "XDG_CACHE_HOME": str(xdg / "cache"), "USERPROFILE": str(fake_home)}
    before = tree(root)

    def ok(*args, cwd=proj, **kw):
        r = run_loopx(list(args), cwd, env=dict(env, **kw))
        assert r.code == 0, (args, r.err)
        return r

    ok("connect")
    ok("connect", "--project", str(proj))
    ok("start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--todo", "one", "--todo", "two",
       "--protect", "merge", "--scope", "src/**", cwd=proj / "src" / "deep")
    todo = ok("todo", "add", "three", "--format", "json").data["todo_id"]
    ok("--agent", "bot", "todo", "claim", todo, "--lease", "10m")
    ev = ok("--agent", "bot", "evidence", "add", "--kind", "test", "--summary", "green", "--exit-code", "0",
            "--output-file", str(output), "--todo", todo, "--format", "json").data["evidence_id"]
    ok("--agent", "bot", "todo", "done", todo, "--evidence", ev, "--next", "four")
    gate = ok("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "merge?", "--format",
              "json").data["gate_id"]
    ok("gate", "approve", gate, "--confirm", gate)
    ok("scope", "set", "--allow", "src/**", "--deny", "src/secrets/**")
    ok("agent", "register", "bot", "--kind", "shell")
    ok("--agent", "bot", "handoff", "--to", "other", "--note", "over to you")
    for args in (["status"], ["todo", "list"], ["goal", "show"], ["evidence", "show", ev], ["gate", "list"],
                 ["scope", "check", "src/app.py"], ["agent", "list"], ["status", "--format", "json"]):
        ok(*args, cwd=proj / "src")
    for bad in (["start-goal", "--goal-text", "x", "--goal-id", "../../x"], ["todo", "show", "../../x"],
                ["--agent", "../../x", "todo", "add", "x"]):
        assert run_loopx(bad, proj, env=env).code == 2
    after = tree(root)

    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    outside = [k for k in changed
               if not (k.startswith(os.path.join("proj", ".loopx")) or k.startswith("loopx-home"))]
    assert outside == [], f"loopx wrote outside .loopx/ and LOOPX_HOME: {outside}"
    assert any(k.startswith("loopx-home") for k in changed), "the project should be registered"
    # blobs are content-addressed by sha256 (never by an id)
    blobs = [p for p in (proj / ".loopx" / "blobs").rglob("*") if p.is_file()]
    for b in blobs:
        assert len(b.name) == 64 and all(c in "0123456789abcdef" for c in b.name)
