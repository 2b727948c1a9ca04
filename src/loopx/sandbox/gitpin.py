"""Git calls loopx makes (outside the sandbox) in a folder an agent could write.

A sandboxed agent can rewrite its worktree's ``.git`` file and the files of its own git folder
(``.git/worktrees/<run>/commondir``, ``gitdir``), which would point loopx's next ``git`` call
in that worktree at a repository and configuration the agent wrote (``core.fsmonitor`` and
``core.hooksPath`` run commands). ``env(cwd, base) -> dict`` pins such a call: for a run's
worktree under ``.loopx/worktrees/<run>`` it names ``GIT_DIR``, ``GIT_COMMON_DIR`` and
``GIT_WORK_TREE`` from the project's own ``.git`` (never from files in the worktree); for the
main checkout, whose ``.git`` the agent may write in (it commits there), it names the common
folder, so a ``commondir`` file the agent planted is never followed; for every call it turns
repository hooks and the fsmonitor off (``GIT_CONFIG_COUNT``). ``pin_process(cwd)`` does the same
for every git call of the process (``loopx run`` while a sandboxed agent runs, and the broker's
calls), ``unpin`` restores.

``git(cwd, *args, check, timeout, hint)`` is loopx's own git call in such a folder (the runner's
worktrees, an experiment's trials): pinned, no prompt, text output; a failure raises ``GitError``
(a Conflict, exit 4, code ``git_failed``) with git's last line and ``hint``. ``identity(cwd)``
gives the ``-c user.*`` options for a commit loopx makes where the user has no git identity.
"""

from __future__ import annotations

import os

from loopx.errors import Conflict

TYPE_CHECKING = False  # no `typing` at run time (a hot path imports this module)
if TYPE_CHECKING:  # imported by git() only: `next` and `turn finish` pin their one git call through env()
    import subprocess

SAFE_CONFIG = (("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false"))


def env(cwd: str, base: dict | None = None) -> dict:
    out = dict(os.environ if base is None else base)
    for k in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        out.pop(k, None)
    n = int(out.get("GIT_CONFIG_COUNT", "0") or 0) if str(out.get("GIT_CONFIG_COUNT", "0")).isdigit() else 0
    for i, (k, v) in enumerate(SAFE_CONFIG, start=n):
        out[f"GIT_CONFIG_KEY_{i}"], out[f"GIT_CONFIG_VALUE_{i}"] = k, v
    out["GIT_CONFIG_COUNT"] = str(n + len(SAFE_CONFIG))
    pinned = worktree_dirs(cwd) or main_dirs(cwd)
    if pinned:
        out["GIT_DIR"], out["GIT_COMMON_DIR"], out["GIT_WORK_TREE"] = pinned
    return out


def main_dirs(cwd: str) -> tuple[str, str, str] | None:
    """``(git_dir, git_dir, work_tree)`` for a main checkout: naming the common folder stops git
    from following a ``commondir`` file an agent could create in a writable ``.git``."""
    from loopx.kernel.storage.fs import git_dir

    g = git_dir(cwd)
    if g is None or not os.path.isdir(g):
        return None
    g = os.path.realpath(g)
    return g, g, os.path.dirname(g)


def pin_process(cwd: str) -> dict:
    """Pin every git call this process (and its children) makes for the checkout at ``cwd``
    (``env``'s variables set in ``os.environ``). Returns what to pass to ``unpin``."""
    saved = {k: os.environ.get(k) for k in list(os.environ) if k.startswith("GIT_")}
    new = env(cwd)
    for k in [k for k in os.environ if k.startswith("GIT_")]:
        if k not in new:
            del os.environ[k]
    os.environ.update({k: v for k, v in new.items() if k.startswith("GIT_")})
    return saved


def unpin(saved: dict) -> None:
    for k in [k for k in os.environ if k.startswith("GIT_")]:
        del os.environ[k]
    os.environ.update({k: v for k, v in saved.items() if v is not None})


def worktree_dirs(cwd: str) -> tuple[str, str, str] | None:
    """``(git_dir, common_dir, work_tree)`` when ``cwd`` lies in a run's worktree
    (``<project>/.loopx/worktrees/<run>``), read from the folder layout only."""
    p = os.path.realpath(cwd)
    parts = p.split(os.sep)
    for i in range(len(parts) - 2):
        if parts[i] == ".loopx" and parts[i + 1] == "worktrees" and i + 2 < len(parts):
            run = parts[i + 2]
            project_top = os.sep.join(parts[:i]) or os.sep
            from loopx.kernel.storage.fs import git_dir

            g = git_dir(project_top)
            if g is None or not os.path.isdir(g):
                return None
            common = os.path.realpath(g)
            wt_git = os.path.join(common, "worktrees", run)
            if not os.path.isdir(wt_git):
                return None
            return wt_git, common, os.sep.join(parts[:i + 3])
    return None


class GitError(Conflict):
    code = "git_failed"


def git(cwd: str, *args: str, check: bool = True, timeout: float = 120.0,
        hint: str = "see `git status` in the project") -> subprocess.CompletedProcess:
    """``git args`` in ``cwd`` with ``env(cwd)`` (module docstring); raises GitError when git
    cannot run, or exits non-zero and ``check``."""
    import subprocess

    e = env(cwd)
    e["GIT_TERMINAL_PROMPT"] = "0"
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, encoding="utf-8",
                              errors="replace", timeout=timeout, env=e, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {args[0]} could not run: {exc}", "check that git is installed and on PATH") from None
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitError(f"git {' '.join(args[:2])} failed: {msg[-1] if msg else 'exit ' + str(proc.returncode)}", hint)
    return proc


def identity(cwd: str) -> list[str]:
    """``-c user.name=... -c user.email=...`` for commits loopx makes, only when the user has no
    git identity configured (theirs is always used when it exists)."""
    if git(cwd, "config", "user.email", check=False).stdout.strip():
        return []
    return ["-c", "user.name=loopx", "-c", "user.email=loopx@localhost"]
