"""What the two demos (``loopx demo`` and ``loopx demo --research``) share: the interpreter
command their example agents run with, git in the demo project, making that project from the
bundled example, and whether an agent asks."""

from __future__ import annotations

import os
import shutil
import sys

from loopx.context import agent_markers
from loopx.errors import StateError
from loopx.kernel.storage import gitcli, registry
from loopx.kernel.storage.store import Store
from loopx.resources import data_path
from loopx.runner.presets import quote


def python_command() -> str:
    return quote(sys.executable)


def git(cwd, *args, again: str = "loopx demo"):
    """``git ARGS`` in ``cwd`` (a new repository's branch is ``main``); its stdout. Raises
    StateError when git is missing (the hint names ``again``, the command to run once it is
    installed) or fails."""
    try:
        proc = gitcli.run(cwd, "-c", "init.defaultBranch=main", *args, text=True)
    except gitcli.GitUnavailable as exc:
        if exc.timed_out:
            raise StateError(str(exc), "check your git installation") from None
        raise StateError("git is not installed", f"the demo needs git: install it and run `{again}` again",
                         code="git_missing") from None
    if proc.returncode != 0:
        raise StateError(f"git {' '.join(args)} failed: {proc.stderr.strip()[:200]}", "check your git installation")
    return proc.stdout


def agent_session() -> bool:
    return bool(agent_markers())


def new_project(path, example: str, message: str, *, again: str, ignore: str | None = None):
    """Copy the bundled ``examples/<example>`` to ``path`` (new or empty), make it a git repository
    on ``main`` with one commit (``message``; ``ignore``: a .gitignore written first), create its
    store and register it. Returns the Store. Raises StateError when the example is missing from
    this installation or git fails (``again``: the command to run once git is installed)."""
    src = data_path("examples", example)
    if not src.is_dir():
        raise StateError(f"the bundled {example} is missing from this installation",
                         "reinstall loopx (pip install --force-reinstall loopx from your checkout)")
    shutil.copytree(src, path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for args in (("init", "-q"), ("symbolic-ref", "HEAD", "refs/heads/main"), ("config", "user.name", "loopx demo"),
                 ("config", "user.email", "demo@loopx.invalid")):
        git(path, *args, again=again)
    if ignore is not None:
        with open(os.path.join(path, ".gitignore"), "w", encoding="utf-8") as fh:
            fh.write(ignore)
    git(path, "add", "-A", again=again)
    git(path, "commit", "-q", "-m", message, again=again)
    store, _ = Store.create(str(path))
    registry.add(str(path), store.format_info()["project_id"])
    return store
