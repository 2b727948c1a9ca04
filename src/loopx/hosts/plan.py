"""What ``loopx workflow-skills`` writes for each host and scope (docs/hosts.md has the table and
the sources).

Project scope (root = the project directory):

- claude-code: ``.claude/skills/<skill>/…`` and a managed block in ``CLAUDE.md``
- codex, opencode, gemini: ``.agents/skills/<skill>/…`` (the shared Agent Skills folder all three
  read), a block in ``AGENTS.md`` (codex, opencode) or ``GEMINI.md`` (gemini)
- cursor: ``.cursor/skills/<skill>/…``, ``.cursor/rules/loopx.mdc`` and a block in ``AGENTS.md``

- pi, generic: ``.agents/skills/<skill>/…`` and a block in ``AGENTS.md``
- gemini also gets ``.gemini/commands/loopx.toml`` (a ``/loopx`` command)

User scope (root = the home folder): ``~/.claude/skills`` + ``~/.claude/CLAUDE.md``;
``~/.agents/skills`` + ``$CODEX_HOME/AGENTS.md`` (codex), ``~/.config/opencode/AGENTS.md``
(opencode), ``~/.gemini/GEMINI.md`` + ``~/.gemini/commands/loopx.toml`` (gemini);
``~/.cursor/skills`` (cursor has no user rule file); ``~/.pi/agent/skills`` +
``~/.pi/agent/AGENTS.md`` (pi, ``$PI_CODING_AGENT_DIR``); ``~/.agents/skills`` (generic).
"""

from __future__ import annotations

import os
from pathlib import Path

from loopx import hostfacts
from loopx.errors import StateError
from loopx.exe import loopx_command
from loopx.hosts.files import Item
from loopx.resources import data_path

# where each host's files go is its row of the host table (loopx.hostfacts: skills, doc, extra)
SKILL_DIR = {h: r["skills"]["project"] for h, r in hostfacts.HOSTS.items()}
PROJECT_DOC = {h: r["doc"]["project"] for h, r in hostfacts.HOSTS.items()}

BLOCK = """## loopx

When a project has a `.loopx/` directory, its long-running work is governed by loopx.

- `loopx status` shows the goals, gates waiting for a human, and the next step.
- Work one turn at a time: `loopx next` gives the turn packet; stay inside the goal's scope; record
  evidence (`loopx evidence add`); close the turn with `loopx turn finish`.
- Protected actions (merge, release, production writes, ...) need a gate a human approved: open one
  with `loopx gate open` and stop. Never approve or reject a gate yourself.
- Never edit files under `.loopx/` directly.
- Skills: `loopx` (one governed turn), `loopx-start` (a new goal), `loopx-review` (a handoff report).
"""

CURSOR_RULE = """---
description: loopx governs long-running work in projects with a .loopx/ directory. Use when continuing a loopx goal, taking a turn with `loopx next`, recording evidence, or before merging, releasing or deploying.
alwaysApply: false
---

""" + BLOCK.split("\n", 2)[2]


GEMINI_COMMAND = '''# Written by `loopx workflow-skills --install --host gemini`: the /loopx command.
description = "Take one governed loopx turn: loopx next, work inside scope, record evidence, finish the turn"
prompt = """
Follow the loopx skill for one governed turn in this project.
1. Run `loopx quota should-run`; if it exits non-zero, report its message and stop.
2. Run `loopx next --format json` and read the turn packet (objective, scope, protected actions, your todo).
3. Do that one todo inside the scope, run the verify command, record evidence with `loopx evidence add`.
4. Finish with `loopx turn finish --run RUN --result ...`. Open a gate (`loopx gate open`) and stop before
   any protected action; never approve a gate yourself. {{args}}
"""
'''


# the texts of the host table's ``extra`` files, by name: (text, label)
EXTRA = {"cursor-rule": (CURSOR_RULE, "rule"), "gemini-command": (GEMINI_COMMAND, "/loopx command")}


def with_loopx_path(text: str, exe: str | None = None) -> str:
    """``text`` (a SKILL.md) with a line after its front matter naming the absolute loopx that
    installed it (``exe``, default this one), so a host whose shell resets PATH (Codex runs
    ``bash -lc``) can still run every ``loopx`` line of the skill. A moved loopx makes the skill
    ``stale`` (like the hooks) until ``workflow-skills --install`` writes it again."""
    exe = exe or loopx_command()
    note = (f"\n> This loopx is `{exe}`. If `loopx` is not found in your shell (a login shell may reset PATH), "
            f"run `{exe}` wherever a line below says `loopx`.\n")
    if text.startswith("---\n") and "\n---\n" in text[4:]:
        end = text.index("\n---\n", 4) + 5
        return text[:end] + note + text[end:]
    return note.lstrip("\n") + text


def skills_root() -> Path:
    """The bundled skills: ``loopx/_data/skills`` in a wheel, the repository's ``skills/`` in a checkout."""
    p = data_path("skills")
    if not p.is_dir():
        raise StateError(f"loopx's bundled skills are missing from this installation ({p})",
                         "reinstall loopx (pipx reinstall loopx, or pip install --force-reinstall)")
    return p


def skill_files() -> list[tuple[str, str]]:
    """``[(relative path like "loopx/SKILL.md", text)]`` for every bundled skill file, sorted."""
    root = skills_root()
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not any(part.startswith((".", "__")) for part in rel.split("/")):
            out.append((rel, p.read_text(encoding="utf-8")))
    return out


def user_doc(host: str, home: str) -> str | None:
    return hostfacts.doc_file(host, "user", home)


def pi_agent_dir(home: str) -> str:
    return hostfacts.host_home("pi", home)


def skill_base(host: str, scope: str, root: str) -> str:
    """The skills folder of ``host`` in ``scope`` (the host table's ``skills``)."""
    return hostfacts.skills_dir(host, scope, root)


def items(hosts: list[str], scope: str, root: str) -> list[Item]:
    """Every item to install for ``hosts`` in ``scope`` under ``root``; shared paths appear once
    (the first host that needs them names them)."""
    out: dict[str, Item] = {}
    files = skill_files()

    def put(item: Item) -> None:
        out.setdefault(item.path, item)

    for host in hosts:
        base = skill_base(host, scope, root)
        for rel, text in files:
            if rel.endswith("/SKILL.md"):
                text = with_loopx_path(text)
            put(Item(os.path.join(base, *rel.split("/")), "file", text, host, f"skill {rel.split('/')[0]}"))
        doc = hostfacts.doc_file(host, scope, root)
        if doc:
            put(Item(doc, "block", BLOCK, host, "instructions block"))
        for name, path in hostfacts.extra_files(host, scope, root):
            if name in EXTRA:
                put(Item(path, "file", EXTRA[name][0], host, EXTRA[name][1]))
    return list(out.values())
