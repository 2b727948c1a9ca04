"""Git worktrees for parallel runs (docs/multi-agent.md): one per run, on branch
``loopx/<run-id>``, created from the goal's base branch under ``.loopx/worktrees/<run-id>``.

- ``base_branch(project_dir) -> str``: the branch checked out in the project (the base of every
  run's branch). Raises UsageError (``not_git``/``detached_head``) when there is none.
- ``create(store, run_id, base) -> {"path", "branch", "base", "base_sha", "cwd"}``: ``cwd`` is
  the project's copy inside the worktree (the worktree itself unless the project is a
  subfolder of its repository).
- ``commit_all(path, message) -> bool``: commit whatever the agent left uncommitted (no
  ``.loopx/`` folder at any depth); True when a commit was made.
- ``ahead(path, base_sha) -> int``: commits on the run's branch that the base did not have.
- ``remove(store, run_id, delete_branch) -> None``: remove the worktree (and the branch).

All git calls use the user's own ``git``; a failing call raises GitError (a Conflict, exit 4)
with git's message.
"""

from __future__ import annotations

import os

from loopx.errors import UsageError
from loopx.kernel.read import worktrees
from loopx.kernel.storage import gitcli, layout
from loopx.kernel.storage.gitcli import GitError  # noqa: F401 - the runner's callers name it here

GIT_TIMEOUT = gitcli.TIMEOUT


def git(cwd: str, *args: str, check: bool = True, timeout: float = GIT_TIMEOUT) -> gitcli.Result:
    """Run ``git args`` in ``cwd`` (pinned: a run's worktree is the agent's); text output. Raises
    GitError on a non-zero exit when ``check``."""
    return gitcli.git(cwd, *args, check=check, timeout=timeout,
                      hint="see `git status` in the project; `loopx doctor` lists kept worktrees")


def identity(cwd: str) -> list[str]:
    """The ``-c user.*`` options for a commit loopx makes (``gitcli.identity_options``)."""
    return gitcli.identity_options(cwd)


def base_branch(project_dir: str) -> str:
    if gitcli.git_dir(project_dir) is None:
        raise UsageError(f"{project_dir} is not a git repository; parallel runs need git worktrees",
                         "run `git init` and commit, or run without --parallel", code="not_git")
    proc = git(project_dir, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    name = proc.stdout.strip()
    if proc.returncode != 0 or not name:
        raise UsageError("the project has no current branch (detached HEAD); parallel runs branch off it",
                         "check out the goal's base branch first (`git switch main`)", code="detached_head")
    if git(project_dir, "rev-parse", "-q", "--verify", "HEAD", check=False).returncode != 0:
        raise UsageError(f"branch {name} has no commit yet; worktrees start from a commit",
                         "make a first commit, then run again", code="no_commit")
    return name


def _ignore_worktrees(store) -> None:
    """Make sure ``.loopx/.gitignore`` lists ``worktrees/`` (stores made before parallel runs)."""
    from loopx.kernel.storage.fs import ensure_lines

    ensure_lines(store.path(layout.GITIGNORE), (worktrees.DIRNAME + "/",))


def create(store, run_id: str, base: str) -> dict:
    _ignore_worktrees(store)
    path = worktrees.path(store.root, run_id)
    branch = worktrees.branch(run_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    base_sha = git(store.project_dir, "rev-parse", "--verify", base + "^{commit}").stdout.strip()
    git(store.project_dir, "worktree", "add", "-q", "-b", branch, path, base_sha)
    cwd = worktrees.project_in(store.root, run_id, store.project_dir) or path
    os.makedirs(cwd, exist_ok=True)
    return {"path": path, "branch": branch, "base": base, "base_sha": base_sha, "cwd": cwd}


def commit_all(path: str, message: str) -> bool:
    git(path, "add", "-A", "--", ".", ":(exclude,glob)**/.loopx/**")
    if git(path, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return False
    git(path, *identity(path), "commit", "-q", "--no-verify", "-m", message)
    return True


def ahead(path: str, base_sha: str) -> int:
    out = git(path, "rev-list", "--count", f"{base_sha}..HEAD").stdout.strip()
    return int(out or 0)


def diff_stat(project_dir: str, base: str, branch: str) -> str:
    return git(project_dir, "diff", "--stat", f"{base}...{branch}").stdout.rstrip()


def remove(store, run_id: str, *, delete_branch: bool) -> None:
    path = worktrees.path(store.root, run_id)
    if os.path.isdir(path):
        git(store.project_dir, "worktree", "remove", "--force", path)
    git(store.project_dir, "worktree", "prune", check=False)
    if delete_branch:
        git(store.project_dir, "branch", "-D", worktrees.branch(run_id), check=False)
