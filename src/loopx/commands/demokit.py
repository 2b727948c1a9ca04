"""What the two demos (``loopx demo`` and ``loopx demo --research``) share: the interpreter
command their example agents run with, git in the demo project, and whether an agent asks."""

from __future__ import annotations


def python_command() -> str:
    import sys

    from loopx.runner.presets import quote

    return quote(sys.executable)


def git(cwd, *args, again: str = "loopx demo"):
    """``git ARGS`` in ``cwd`` (a new repository's branch is ``main``); its stdout. Raises
    StateError when git is missing (the hint names ``again``, the command to run once it is
    installed) or fails."""
    import subprocess

    from loopx.errors import StateError

    try:
        proc = subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise StateError("git is not installed", f"the demo needs git: install it and run `{again}` again",
                         code="git_missing") from None
    if proc.returncode != 0:
        raise StateError(f"git {' '.join(args)} failed: {proc.stderr.strip()[:200]}", "check your git installation")
    return proc.stdout


def agent_session() -> bool:
    from loopx.context import agent_markers

    return bool(agent_markers())
