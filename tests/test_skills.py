"""``loopx workflow-skills`` and ``loopx heartbeat-prompt``: every host into a temporary HOME and
project, hash-tracked check/install/remove, managed blocks around user text, the shipped wheel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO

SKILLS = ("loopx", "loopx-start", "loopx-review")
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
PROJECT_DOCS = ("AGENTS.md", "CLAUDE.md", "GEMINI.md")
PROJECT_SKILL_DIRS = (".claude/skills", ".agents/skills", ".cursor/skills")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)  # Claude Code reads ~/.claude then
    return h


def front_matter(text: str) -> dict:
    """The top-level ``key: value`` pairs of a Markdown file's YAML front matter."""
    assert text.startswith("---\n"), "no front matter"
    head = text[4:text.index("\n---\n", 4)]
    out = {}
    for line in head.splitlines():
        if line and not line.startswith(" ") and ":" in line:
            k, _, v = line.partition(":")
            out[k.strip()] = v.strip()
    return out


def check_skill(path: Path) -> None:
    fm = front_matter(path.read_text(encoding="utf-8"))
    assert fm["name"] == path.parent.name and NAME_RE.match(fm["name"]) and len(fm["name"]) <= 64
    assert 20 <= len(fm["description"]) <= 1024 and "Use when" in fm["description"]


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_skill_sources_follow_the_agent_skills_format():
    for name in SKILLS:
        check_skill(REPO / "skills" / name / "SKILL.md")


def test_install_every_host_in_both_scopes_then_check_is_current(project, home, cli):
    r = cli("workflow-skills", "--install", json=True)
    assert r.code == 0, r.err
    for d in PROJECT_SKILL_DIRS:
        for name in SKILLS:
            check_skill(project / d / name / "SKILL.md")
    rule = (project / ".cursor" / "rules" / "loopx.mdc").read_text(encoding="utf-8")
    fm = front_matter(rule)
    assert fm["alwaysApply"] == "false" and fm["description"]
    for doc in PROJECT_DOCS:
        text = (project / doc).read_text(encoding="utf-8")
        assert re.search(r"<!-- loopx:begin version=\S+ hash=[0-9a-f]{12} -->", text) and "<!-- loopx:end -->" in text
    assert cli("workflow-skills", "--install", "--scope", "user").code == 0
    for d in (".claude/skills", ".agents/skills", ".cursor/skills"):
        for name in SKILLS:
            check_skill(home / d / name / "SKILL.md")
    for doc in (".claude/CLAUDE.md", ".codex/AGENTS.md", ".config/opencode/AGENTS.md", ".gemini/GEMINI.md"):
        assert "<!-- loopx:begin" in (home / doc).read_text(encoding="utf-8")
    for scope in ("project", "user"):
        r = cli("workflow-skills", "--check", "--scope", scope, json=True)
        assert r.code == 0 and r.data["all_current"] and {f["status"] for f in r.data["files"]} == {"current"}
    before = {p: (project / p).read_bytes() for p in files_under(project) if not p.startswith(".loopx")}
    r = cli("workflow-skills", "--install", json=True)
    assert {f["action"] for f in r.data["files"]} == {"unchanged"}
    assert {p: (project / p).read_bytes() for p in before} == before


def test_dry_run_lists_every_path_and_writes_nothing(project, home, cli):
    r = cli("workflow-skills", "--install", "--dry-run", json=True)
    assert r.code == 0
    paths = {Path(f["path"]).relative_to(project).as_posix() for f in r.data["files"]}
    assert {f"{d}/{n}/SKILL.md" for d in PROJECT_SKILL_DIRS for n in SKILLS} <= paths
    assert {".cursor/rules/loopx.mdc", *PROJECT_DOCS} <= paths
    assert all(f["action"].startswith("would ") for f in r.data["files"])
    assert files_under(project) == {p for p in files_under(project) if p.startswith(".loopx/")}
    text = cli("workflow-skills", "--install", "--dry-run", "--host", "cursor").out
    assert ".cursor/rules/loopx.mdc" in text and "nothing changed" in text


def test_an_edited_file_is_reported_modified_and_survives_reinstall(project, home, cli):
    assert cli("workflow-skills", "--install", "--host", "claude-code").code == 0
    skill = project / ".claude" / "skills" / "loopx" / "SKILL.md"
    edited = skill.read_text(encoding="utf-8") + "\nMy own rule: always run the linter.\n"
    skill.write_text(edited, encoding="utf-8")
    r = cli("workflow-skills", "--check", "--host", "claude-code", json=True)
    assert r.code == 1
    assert {f["path"]: f["status"] for f in r.data["files"]}[str(skill)] == "modified"
    r = cli("workflow-skills", "--install", "--host", "claude-code")
    assert r.code == 0 and "--force" in r.err
    assert skill.read_text(encoding="utf-8") == edited
    assert cli("workflow-skills", "--install", "--host", "claude-code", "--force").code == 0
    from loopx.hosts.plan import with_loopx_path

    # the bundled text, with the line that names this loopx by its absolute path (issue 23)
    assert skill.read_text(encoding="utf-8") == with_loopx_path((REPO / "skills" / "loopx" / "SKILL.md").read_text(
        encoding="utf-8"))
    backups = list(skill.parent.glob("SKILL.md.loopx-backup-*"))
    assert len(backups) == 1 and backups[0].read_text(encoding="utf-8") == edited


def test_stale_files_and_blocks_are_updated(project, home, cli):
    assert cli("workflow-skills", "--install", "--host", "codex").code == 0
    agents = project / "AGENTS.md"
    old = agents.read_text(encoding="utf-8").replace("version=", "version=0.0.1-old", 1)
    agents.write_text(old, encoding="utf-8")
    skill = project / ".agents" / "skills" / "loopx-review" / "SKILL.md"
    skill.write_text("---\nname: loopx-review\ndescription: older text. Use when old.\n---\nold\n", encoding="utf-8")
    from loopx.hosts import files

    m = files.load_manifest()
    m["files"][str(skill)]["sha256"] = files.sha(skill.read_text(encoding="utf-8"))  # as an older loopx wrote it
    files.save_manifest(m)
    r = cli("workflow-skills", "--check", "--host", "codex", json=True)
    status = {Path(f["path"]).name if f["what"] != "skill loopx-review" else "review": f["status"] for f in r.data["files"]}
    assert status["AGENTS.md"] == "stale" and status["review"] == "stale"
    assert cli("workflow-skills", "--install", "--host", "codex").code == 0
    assert cli("workflow-skills", "--check", "--host", "codex").code == 0


def test_remove_leaves_no_loopx_file_and_keeps_user_text(project, home, cli):
    (project / "AGENTS.md").write_text("# Team rules\n\nUse tabs.\n", encoding="utf-8")
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text("{}\n", encoding="utf-8")
    assert cli("workflow-skills", "--install").code == 0
    with open(project / "AGENTS.md", "a", encoding="utf-8") as fh:
        fh.write("\n## After loopx\n\nKeep this.\n")
    gemini = project / "GEMINI.md"
    gemini.write_text(gemini.read_text(encoding="utf-8").replace("Never edit", "NEVER edit"), encoding="utf-8")
    r = cli("workflow-skills", "--remove", json=True)
    assert r.code == 0 and gemini.exists() and "--force" in r.json["warnings"][0]  # the edited block is kept
    assert cli("workflow-skills", "--remove", "--force").code == 0
    left = {p for p in files_under(project) if not p.startswith(".loopx/")}
    assert {p for p in left if "loopx-backup" not in p} == {"AGENTS.md", ".claude/settings.json"}
    agents = (project / "AGENTS.md").read_text(encoding="utf-8")
    assert agents.startswith("# Team rules\n\nUse tabs.\n") and agents.rstrip().endswith("Keep this.")
    assert "loopx:begin" not in agents and not (project / "CLAUDE.md").exists()
    assert not (project / ".agents").exists() and not (project / ".cursor").exists()
    assert cli("workflow-skills", "--check").code == 1


def test_files_loopx_cannot_read_safely_are_never_rewritten(project, home, cli):
    (project / "AGENTS.md").write_bytes(b"\xff\xfe binary \x00 notes")
    (project / "CLAUDE.md").write_text("intro\n<!-- loopx:begin version=0.1.0 hash=000000000000 -->\nhalf a block\n",
                                       encoding="utf-8")
    r = cli("workflow-skills", "--install", json=True)
    status = {Path(f["path"]).name: f["status"] for f in r.data["files"] if f["what"] == "instructions block"}
    assert status["AGENTS.md"] == "modified" and status["CLAUDE.md"] == "modified"
    assert cli("workflow-skills", "--install", "--force").code == 0
    assert (project / "AGENTS.md").read_bytes() == b"\xff\xfe binary \x00 notes"
    assert "half a block" in (project / "CLAUDE.md").read_text(encoding="utf-8")


def test_bad_arguments_are_usage_errors(project, cli):
    for args in (("--host", "vim"), ("--scope", "galaxy")):
        r = cli("workflow-skills", "--check", *args, json=True)
        assert r.code == 2 and r.json["error"]["hint"]


def test_heartbeat_prompt_is_built_around_should_run(project, cli):
    r = cli("heartbeat-prompt", "--goal-id", "g1", "--agent", "codex")
    assert r.code == 0
    assert "loopx quota should-run --goal-id g1 --agent codex" in r.out and "Never approve" in r.out
    assert json.loads(cli("heartbeat-prompt", json=True).out)["data"]["prompt"].startswith("This is one scheduled")
    assert cli("heartbeat-prompt", "--goal-id", "Bad Id!").code == 2


@pytest.mark.slow
def test_the_wheel_ships_the_skills(tmp_path):
    import wheelkit

    wheel = wheelkit.build_wheel()
    py = wheelkit.make_venv(tmp_path / "venv")
    r = wheelkit.run([py, "-m", "pip", "install", "--no-index", "--no-deps", wheel])
    assert r.returncode == 0, r.stderr
    proj, home = tmp_path / "elsewhere", tmp_path / "h"
    proj.mkdir()
    home.mkdir()
    env = wheelkit.pip_env(HOME=str(home), LOOPX_HOME=str(tmp_path / "lh"))
    loopx = wheelkit.venv_bin(tmp_path / "venv", "loopx")
    r = wheelkit.run([loopx, "workflow-skills", "--install", "--host", "claude-code", "--scope", "project", "--json"],
                     cwd=proj, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in SKILLS:
        got = (proj / ".claude" / "skills" / name / "SKILL.md").read_text(encoding="utf-8")
        from loopx.hosts.plan import with_loopx_path

        assert got == with_loopx_path((REPO / "skills" / name / "SKILL.md").read_text(encoding="utf-8"), str(loopx))
    where = wheelkit.run([py, "-c", "import loopx.hosts.plan as p; print(p.skills_root())"], env=env)
    assert str(tmp_path / "venv") in where.stdout and str(REPO) not in where.stdout


# ------------------------------------------------------------------ issue 9 item 9
def test_install_says_what_it_wrote(project, home, cli):
    r = cli("workflow-skills", "--install", "--host", "claude-code")
    assert r.code == 0
    assert "missing" not in r.out and "created  .claude/skills/loopx/SKILL.md" in r.out
    assert "\n4 created\n" in r.out  # the count closes the file list (the sandbox's shell functions follow)
    data = cli("workflow-skills", "--install", "--host", "claude-code", json=True).data
    assert data["outcomes"] == {"unchanged": 4} and {f["outcome"] for f in data["files"]} == {"unchanged"}
    gone = cli("workflow-skills", "--remove", "--host", "claude-code")
    assert re.search(r"^removed\s+\.claude/skills/loopx/SKILL\.md$", gone.out, re.M)
    assert gone.out.rstrip().endswith("3 removed, 1 removed block")


def test_install_outside_any_project_goes_to_the_home_folder(tmp_path, home, cli, monkeypatch):
    shell_dir = tmp_path / "downloads"
    shell_dir.mkdir()
    monkeypatch.chdir(shell_dir)
    r = cli("workflow-skills", "--install", json=True)
    assert r.code == 0, r.out
    assert r.data["scope"] == "user" and "no loopx project here" in r.data["scope_reason"]
    assert list(shell_dir.iterdir()) == []  # no CLAUDE.md, AGENTS.md, GEMINI.md, .agents/, .cursor/ here
    assert (home / ".claude" / "skills" / "loopx" / "SKILL.md").exists()
    text = cli("workflow-skills", "--check")
    assert text.code == 0 and "user scope" in text.out


def test_install_inside_a_project_names_its_scope_and_the_other(project, home, cli, monkeypatch):
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    r = cli("workflow-skills", "--install", "--host", "codex")
    assert r.code == 0 and (project / "AGENTS.md").exists() and not (sub / "AGENTS.md").exists()
    assert f"scope: project, inside the loopx project {project}" in r.out and "--scope user" in r.out
    assert not (home / ".agents").exists()
