"""Where parallel runs work: one git worktree per run under ``.loopx/worktrees/<run-id>``
(docs/multi-agent.md). Pure path logic and a directory listing; the git side is in
``loopx.runner.worktree``.

- ``DIRNAME``: the folder under ``.loopx/`` holding the worktrees.
- ``path(store_root, run_id) -> str``: the worktree folder of a run (it may not exist).
- ``branch(run_id) -> str``: the run's branch, ``loopx/<run-id>``.
- ``for_run(store_root, run_id) -> str | None``: the folder when it exists.
- ``listing(store_root) -> [{"run_id", "path", "branch"}]``: the worktree folders present.
- ``strip(rel) -> str``: a project-relative path inside a run's worktree made relative to that
  worktree (``.loopx/worktrees/run-1/src/a.py`` -> ``src/a.py``), so scope rules read the same
  in a worktree as in the main checkout; other paths are returned unchanged.
"""

from __future__ import annotations

import os

DIRNAME = "worktrees"
BRANCH_PREFIX = "loopx/"


def path(store_root: str, run_id: str) -> str:
    return os.path.join(store_root, DIRNAME, run_id)


def branch(run_id: str) -> str:
    return BRANCH_PREFIX + run_id


def for_run(store_root: str, run_id: str | None) -> str | None:
    if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
        return None
    p = path(store_root, run_id)
    return p if os.path.isdir(p) else None


def listing(store_root: str) -> list[dict]:
    try:
        names = sorted(os.listdir(os.path.join(store_root, DIRNAME)))
    except OSError:
        return []
    return [{"run_id": n, "path": path(store_root, n), "branch": branch(n)} for n in names
            if os.path.isdir(path(store_root, n))]


def strip(rel: str) -> str:
    prefix = f".loopx/{DIRNAME}/"
    if rel.startswith(prefix):
        rest = rel[len(prefix):]
        _, sep, inner = rest.partition("/")
        return inner if sep else "."
    return rel
