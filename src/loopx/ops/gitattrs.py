"""The ``merge=union`` rule that lets git merge two clones' ``.loopx/`` logs without a conflict
(docs/multi-agent.md#several-machines-through-git).

``ensure(project_dir) -> "added" | "present" | "not_git"``: append ``RULE`` to the project's
``.gitattributes`` (created if missing; existing lines are kept as they are) when the project is
inside a git work tree. The store's readers accept the union of two logs (see
``loopx.kernel.storage.store``: duplicates by id dropped, a deterministic order). Raises OSError
when the file cannot be written.
"""

from __future__ import annotations

import os

from loopx.kernel.storage.fs import atomic_write
from loopx.kernel.storage.gitcli import git_dir

RULE = ".loopx/**/*.jsonl merge=union"
COMMENT = "# loopx: the append-only logs merge by union (readers drop duplicates and order them)"


def has_rule(text: str) -> bool:
    return any(line.split() == RULE.split() for line in text.splitlines())


def ensure(project_dir: str) -> str:
    if git_dir(project_dir) is None:
        return "not_git"
    path = os.path.join(project_dir, ".gitattributes")
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read()
    except FileNotFoundError:
        text = ""
    if has_rule(text):
        return "present"
    sep = "" if not text or text.endswith("\n") else "\n"
    atomic_write(path, (text + sep + COMMENT + "\n" + RULE + "\n").encode("utf-8", "surrogateescape"))
    return "added"
