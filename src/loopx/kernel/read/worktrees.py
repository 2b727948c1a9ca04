"""Where parallel runs work: one git worktree per run under ``.loopx/worktrees/<run-id>``
(docs/multi-agent.md). Pure path logic and a directory listing; the git side is in
``loopx.runner.worktree``.

- ``DIRNAME``: the folder under ``.loopx/`` holding the worktrees.
- ``path(store_root, run_id) -> str``: the worktree folder of a run (it may not exist).
- ``branch(run_id) -> str``: the run's branch, ``loopx/<run-id>``.
- ``for_run(store_root, run_id) -> str | None``: the folder when it exists.
- ``listing(store_root) -> [{"run_id", "path", "branch"}]``: the run worktree folders present
  (an experiment's own ``exp-<goal>`` worktree is not a run's and is not listed).
- ``record_path(store_root, run_id) -> str`` / ``record(store_root, run_id) -> dict | None``: a
  sequential turn's workspace record, ``.loopx/worktrees/<run-id>.json`` beside the clone (outside
  the sandbox's write grant): what bringing its work back needs (``base``, ``base_sha``,
  ``carried``, ...), ``creating`` while loopx makes the clone, ``kept`` (why) once a runner kept
  the workspace for a human. A leftover clone with a record and no ``kept`` is a turn whose runner
  died (``loopx.runner.recover``).
- ``prefix(project_dir) -> str``: the project's folder relative to the top of its git work tree
  (``""`` at the top, ``"services/api"`` in a monorepo).
- ``project_in(store_root, run_id, project_dir) -> str | None``: where the project lies inside
  the run's worktree (the worktree is a checkout of the whole repository).
- ``strip(rel, prefix="") -> str``: a project-relative path inside a run's worktree made relative
  to the project's copy in that worktree (``.loopx/worktrees/run-1/src/a.py`` -> ``src/a.py``), so
  scope rules read the same in a worktree as in the main checkout; a path in the worktree but
  outside the project's copy becomes ``../...``; other paths are returned unchanged.
"""

from __future__ import annotations

import os

DIRNAME = "worktrees"
EXPERIMENT_PREFIX = "exp-"  # an experiment's own worktree (docs/experiments.md): kept for the experiment's life
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
            if os.path.isdir(path(store_root, n)) and not n.startswith(EXPERIMENT_PREFIX)]


RECORD_SUFFIX = ".json"


def record_path(store_root: str, run_id: str) -> str:
    return path(store_root, run_id) + RECORD_SUFFIX


def record(store_root: str, run_id: str) -> dict | None:
    import json

    try:
        from loopx.kernel.storage.fs import open_file

        with open_file(record_path(store_root, run_id), "r", encoding="utf-8") as fh:
            got = json.load(fh)
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def prefix(project_dir: str) -> str:
    from loopx.kernel.storage.gitcli import git_dir

    g = git_dir(project_dir)
    if g is None:
        return ""
    rel = os.path.relpath(os.path.abspath(project_dir), os.path.dirname(g))
    return "" if rel == "." else rel.replace(os.sep, "/")


def project_in(store_root: str, run_id: str | None, project_dir: str) -> str | None:
    p = for_run(store_root, run_id)
    if p is None:
        return None
    pre = prefix(project_dir)
    return os.path.join(p, *pre.split("/")) if pre else p


def strip(rel: str, prefix: str = "") -> str:
    head = f".loopx/{DIRNAME}/"
    if not rel.startswith(head):
        return rel
    _, sep, inner = rel[len(head):].partition("/")
    inner = inner if sep else "."
    if not prefix:
        return inner
    if inner == prefix:
        return "."
    if inner.startswith(prefix + "/"):
        return inner[len(prefix) + 1:]
    return "../" + inner
