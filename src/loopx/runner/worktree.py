"""A turn's workspace (docs/multi-agent.md, docs/security.md): one per run, on branch
``loopx/<run-id>``, made from the goal's base branch under ``.loopx/worktrees/<run-id>``.

The workspace is a private clone (``git clone --shared``), not a linked worktree: its own ``.git``
(index, refs, new objects) lies inside the sandbox's write grant, and it reads the project's
objects through ``objects/info/alternates`` without writing them. A linked worktree would write
its commits into the project's common object store and refs, so the project's ``.git`` would have
to stay writable. After the turn loopx, outside the sandbox with hooks off, fetches the
workspace's ``HEAD`` into the project's ``refs/heads/loopx/<run-id>`` (``fetch_back``); the
workspace's configuration is read-only inside the sandbox (``loopx.sandbox.profile``), and git's
upload-pack ignores the one setting that would run a command from it.

- ``base_branch(project_dir) -> str``: the branch checked out in the project (the base of every
  run's branch). Raises UsageError (``not_git``/``detached_head``) when there is none.
- ``create(store, run_id, base) -> {"path", "branch", "base", "base_sha", "cwd"}``: ``cwd`` is
  the project's copy inside the worktree (the worktree itself unless the project is a
  subfolder of its repository).
- ``fetch_back(store, run_id) -> str | None``: bring the workspace's ``HEAD`` into the project
  as ``refs/heads/loopx/<run-id>``; its commit, or None when the workspace has no commit.
- ``carry(project_dir, cwd, also) -> {path: sha256}``: the user's work in progress copied in.
- ``commit_all(path, message, carried=None) -> bool``: commit whatever the agent left
  uncommitted (no ``.loopx/`` folder at any depth, no ``carried`` file it left unchanged); True
  when a commit was made.
- ``uncommitted(cwd, carried) -> [rel]``: what the agent changed and left uncommitted in a
  sequential turn's workspace; ``can_copy_back`` / ``copy_back`` bring it into the checkout as
  uncommitted work, where it would have been had the agent worked there.
- ``ahead(path, base_sha) -> int``: commits on the run's branch that the base did not have.
- ``remove(store, run_id, delete_branch) -> None``: remove the worktree (and the branch), and its
  record.
- ``save_record(store, run_id, info)`` / ``drop_record(store, run_id)``: a sequential turn's
  workspace record (``loopx.kernel.read.worktrees.record``), written before the clone is made and
  again once the agent can start, so a runner killed at any point leaves what the next one needs
  to bring the turn's work back (``loopx.runner.recover``).

All git calls use the user's own ``git``; a failing call raises GitError (a Conflict, exit 4)
with git's message.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat

from loopx.errors import UsageError
from loopx.kernel.read import worktrees
from loopx.kernel.storage import fs, gitcli, layout
from loopx.kernel.storage.fs import ensure_lines
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
    ensure_lines(store.path(layout.GITIGNORE), (worktrees.DIRNAME + "/",))


IDENTITY_KEYS = ("user.name", "user.email")


def create(store, run_id: str, base: str, *, view: bool = False) -> dict:
    """``view``: the workspace is shown at the project's own path inside the sandbox
    (``loopx.sandbox.mounts``, a sequential turn): it works on a branch named like ``base`` and
    reads the project's objects through ``.git/project-objects``, which the sandbox's view fills."""
    git_dir = gitcli.git_dir

    _ignore_worktrees(store)
    path = worktrees.path(store.root, run_id)
    branch = base if view else worktrees.branch(run_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    base_sha = git(store.project_dir, "rev-parse", "--verify", base + "^{commit}").stdout.strip()
    source = os.path.realpath(git_dir(store.project_dir) or store.project_dir)
    _clone(source, path)
    git(path, "checkout", "-q", "-B", branch, base_sha)
    others = git(path, "for-each-ref", "--format=%(refname:short)", "refs/heads/").stdout.split()
    for name in [o for o in others if o != branch]:  # the run's branch only: the project's are origin/*
        git(path, "branch", "-q", "-D", name, check=False)
    _like_the_project(store.project_dir, path, source)
    branches = {branch: base_sha}
    if view:  # the project's other branches too, as they are: the agent may work on them (landed below)
        for line in git(store.project_dir, "for-each-ref", "--format=%(objectname) %(refname:short)",
                        "refs/heads/").stdout.splitlines():
            sha, _, name = line.partition(" ")
            if name and name != branch and not name.startswith(worktrees.BRANCH_PREFIX):
                git(path, "update-ref", f"refs/heads/{name}", sha)
                branches[name] = sha
        # the project's objects at ../project-objects (a folder only the sandbox's view fills: the
        # same path at the project's place), then at their own path (outside the view; inside it
        # that is the clone's own store, which git skips as an alternate)
        os.makedirs(os.path.join(path, ".git", "project-objects"), exist_ok=True)
        with open(os.path.join(path, ".git", "objects", "info", "alternates"), "w", encoding="utf-8") as fh:
            fh.write(f"../project-objects\n{os.path.join(source, 'objects')}\n")
    cwd = worktrees.project_in(store.root, run_id, store.project_dir) or path
    os.makedirs(cwd, exist_ok=True)
    # an empty store folder where the project has its own, read-only in the sandbox: nothing
    # store-shaped is made there and brought back (``.loopx/`` is never committed, see commit_all)
    os.makedirs(os.path.join(cwd, layout.DIRNAME), exist_ok=True)
    return {"path": path, "branch": worktrees.branch(run_id), "branches": branches, "base": base, "base_sha": base_sha, "cwd": cwd}


def _like_the_project(project_dir: str, path: str, source: str) -> None:
    """The project's identity and remotes in the clone (its ``.git/config`` is not the clone's),
    and the project's remote-tracking branches: ``origin`` is what it is in the project, so a
    push the agent tries goes where it would go from the checkout (and the guard judges it so)."""
    for key in IDENTITY_KEYS:
        val = git(project_dir, "config", key, check=False).stdout.strip()
        if val:
            git(path, "config", key, val)
    urls = git(project_dir, "config", "--get-regexp", r"^remote\..*\.url$", check=False).stdout.splitlines()
    if not urls:
        return
    git(path, "remote", "remove", "origin", check=False)
    for line in urls:
        key, _, url = line.partition(" ")
        git(path, "remote", "add", key[len("remote."):-len(".url")], url, check=False)
    git(path, "fetch", "-q", "--no-tags", source, "+refs/remotes/*:refs/remotes/*", check=False)


def _clone(source: str, path: str) -> None:
    gitcli.clone_shared(source, path, GIT_TIMEOUT)


def is_clone(path: str) -> bool:
    """True for a workspace made by ``create`` (its own ``.git`` folder), False for a linked worktree."""
    return os.path.isdir(os.path.join(path, ".git"))


def fetch_back(store, run_id: str, branch: str | None = None) -> str | None:
    """``branch`` (default ``HEAD``) of the workspace into the project as ``refs/heads/loopx/<run>``."""
    path = worktrees.path(store.root, run_id)
    src = f"refs/heads/{branch}" if branch else "HEAD"
    head = git(path, "rev-parse", "-q", "--verify", src + "^{commit}", check=False).stdout.strip()
    if not head:
        return None
    if is_clone(path):  # a linked worktree's commits are in the project already
        git(store.project_dir, "fetch", "-q", "--no-tags", "--no-write-fetch-head", os.path.join(path, ".git"),
            f"+{src}:refs/heads/{worktrees.branch(run_id)}")
    return head


def moved_branches(store, run_id: str, start: dict, base: str) -> dict:
    """The workspace's branches other than ``base`` that the agent moved or made: ``{name: sha}``,
    each fetched into the project as ``refs/loopx/landing/<run>/<name>`` (loopx's namespace, never
    a branch) for ``loopx.runner.merge.land_branches``."""
    path = worktrees.path(store.root, run_id)
    out = {}
    for line in git(path, "for-each-ref", "--format=%(objectname) %(refname:short)", "refs/heads/").stdout.splitlines():
        sha, _, name = line.partition(" ")
        if not name or name == base or start.get(name) == sha or name.startswith(worktrees.BRANCH_PREFIX):
            continue
        got = git(store.project_dir, "fetch", "-q", "--no-tags", "--no-write-fetch-head", os.path.join(path, ".git"),
                  f"+refs/heads/{name}:refs/loopx/landing/{run_id}/{name}", check=False)
        if got.returncode == 0:
            out[name] = sha
    return out


def carry(project_dir: str, cwd: str, also=()) -> dict:
    """Copy the user's work in progress (changed tracked files and untracked files git does not
    ignore, never ``.loopx/``) from ``project_dir`` into a workspace's project folder ``cwd``, so
    the agent sees what it would see in the checkout; ``also`` names more copied files (relative
    to the project: the installed hook files). Returns ``{path in the workspace: sha256}``:
    ``commit_all`` leaves such a file out unless the agent changed it."""
    listed = git(project_dir, "ls-files", "-z", "--modified", "--others", "--exclude-standard", "--", ".",
                 ":(exclude,glob)**/.loopx/**", ":(exclude).loopx").stdout.split("\0")
    folders = git(project_dir, "ls-files", "-z", "--others", "--directory", "--exclude-standard", "--", ".",
                  ":(exclude).loopx").stdout.split("\0")
    for rel in folders:  # untracked folders, empty ones too (git keeps no folder): the agent expects them
        if rel.endswith("/") and not os.path.lexists(os.path.join(cwd, rel)):
            try:
                os.makedirs(os.path.join(cwd, rel), exist_ok=True)
            except OSError:
                continue
    out: dict = {}
    named = [r for r in listed if r]
    for rel in also:  # a copied folder (a host's skills): each file in it
        top = os.path.join(project_dir, rel)
        named += [os.path.relpath(os.path.join(d, f), project_dir) for d, _, fs in os.walk(top) for f in fs] \
            if os.path.isdir(top) else [rel]
    also = set(named[len([r for r in listed if r]):])
    for rel in dict.fromkeys(named):
        src, dst = os.path.join(project_dir, rel), os.path.join(cwd, rel)
        if not os.path.isfile(src) or os.path.islink(src):
            continue
        try:
            if not os.path.exists(dst) or rel not in also:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy2(src, dst)
            with open(dst, "rb") as fh:
                out[dst] = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            continue
    return out


MAX_SHARED = 200


def ignored(project_dir: str, cwd: str) -> list[str]:
    """The files and folders of the checkout that git ignores (a virtualenv, ``node_modules``, a
    host's own config such as ``opencode.json``), never ``.loopx/``: a clone has none of them, so
    the sandbox's view shows the project's own at their place, writable as before (they are not
    versioned: nothing of them is brought back). A placeholder is made in the clone at each path
    (the view's mount point). Returns their real paths (at most ``MAX_SHARED``, outermost first)."""
    listed = git(project_dir, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory",
                 "--", ".", ":(exclude).loopx", ":(exclude,glob)**/.loopx/**").stdout.split("\0")
    out: list[str] = []
    for rel in sorted((r.rstrip("/") for r in listed if r), key=lambda r: (r.count("/"), r))[:MAX_SHARED]:
        src, dst = os.path.join(project_dir, rel), os.path.join(cwd, rel)
        if os.path.islink(src) or not os.path.exists(src) or any(rel.startswith(o + "/") for o in out):
            continue
        try:
            if os.path.isdir(src):
                os.makedirs(dst, exist_ok=True)
            elif not os.path.lexists(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                open(dst, "a").close()
        except OSError:
            continue
        out.append(rel)
    return [os.path.realpath(os.path.join(project_dir, r)) for r in out]


def _unchanged(carried: dict) -> list[str]:
    return [p for p, sha in carried.items() if _sha(p) == sha]


_NO_STORE = (":(exclude).loopx", ":(exclude,glob)**/.loopx/**")


def uncommitted(cwd: str, carried: dict) -> list[str]:
    """Paths (relative to ``cwd``, the workspace's project folder) that differ from the workspace's
    ``HEAD`` (staged, unstaged, deleted or untracked and not ignored; never under ``.loopx/``),
    less the user's carried work in progress that the agent left as it found it, plus carried
    files the agent removed. Sorted."""
    changed = git(cwd, "diff", "--name-only", "-z", "--relative", "HEAD", "--", ".", *_NO_STORE).stdout.split("\0")
    new = git(cwd, "ls-files", "-z", "--others", "--exclude-standard", "--", ".", *_NO_STORE).stdout.split("\0")
    same = {os.path.relpath(p, cwd) for p in _unchanged(carried)}
    gone = {os.path.relpath(p, cwd) for p in carried if not os.path.lexists(p)}
    return sorted(({r for r in changed + new if r} | gone) - same)


def _sha(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def can_copy_back(project_dir: str, cwd: str, pending: list[str], carried: dict, base: str, base_sha: str) -> bool:
    """True when the checkout is as the turn found it at every ``pending`` path: ``base`` still at
    ``base_sha``, each carried file as it was carried, every other path clean in git's eyes. Only
    then can the agent's uncommitted work be written into the checkout without touching an edit
    the user made during the turn."""
    if git(project_dir, "rev-parse", "-q", "--verify", f"refs/heads/{base}", check=False).stdout.strip() != base_sha:
        return False
    others = []
    for rel in pending:
        key = os.path.join(cwd, rel)
        if key in carried:
            if _sha(os.path.join(project_dir, rel)) != carried[key]:
                return False
        else:
            others.append(rel)
    for i in range(0, len(others), 200):
        if git(project_dir, "status", "--porcelain", "-z", "--untracked-files=all", "--",
               *(":(literal)" + r for r in others[i:i + 200])).stdout.strip("\0"):
            return False
    return True


def copy_back(project_dir: str, cwd: str, pending: list[str]) -> list[str]:
    """Write each ``pending`` path of the workspace into the checkout as the agent left it (a file
    with its mode, a symlink, or removed); returns the paths that could not be written."""
    failed = []
    for rel in pending:
        src, dst = os.path.join(cwd, rel), os.path.join(project_dir, rel)
        try:
            # never write through a link of the checkout; a link or a removal replaces what is there
            if os.path.islink(dst) or (os.path.lexists(dst) and (os.path.islink(src) or not os.path.lexists(src))):
                os.remove(dst)
            if os.path.islink(src):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.symlink(os.readlink(src), dst)
            elif os.path.isfile(src):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(src, "rb") as fh:
                    fs.atomic_write(dst, fh.read(), mode=stat.S_IMODE(os.stat(src).st_mode))
        except OSError:
            failed.append(rel)
    return failed


def commit_all(path: str, message: str, carried: dict | None = None) -> bool:
    git(path, "add", "-A", "--", ".", ":(exclude,glob)**/.loopx/**")
    # nor what the agent staged there itself (`git checkout BRANCH -- .loopx/...`): never loopx's commit
    git(path, "reset", "-q", "--", ":(glob)**/.loopx/**", check=False)
    same = _unchanged(carried or {})
    for i in range(0, len(same), 200):  # the user's own work in progress, untouched: not the agent's
        git(path, "reset", "-q", "--", *same[i:i + 200], check=False)
    if git(path, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return False
    git(path, *identity(path), "commit", "-q", "--no-verify", "-m", message)
    return True


def ahead(path: str, base_sha: str) -> int:
    out = git(path, "rev-list", "--count", f"{base_sha}..HEAD").stdout.strip()
    return int(out or 0)


def diff_stat(project_dir: str, base: str, branch: str) -> str:
    return git(project_dir, "diff", "--stat", f"{base}...{branch}").stdout.rstrip()


def save_record(store, run_id: str, info: dict) -> None:
    _ignore_worktrees(store)
    os.makedirs(os.path.join(store.root, worktrees.DIRNAME), exist_ok=True)
    fs.atomic_write(worktrees.record_path(store.root, run_id), json.dumps(info, sort_keys=True))


def drop_record(store, run_id: str) -> None:
    try:
        os.remove(worktrees.record_path(store.root, run_id))
    except FileNotFoundError:
        pass


def remove(store, run_id: str, *, delete_branch: bool) -> None:
    path = worktrees.path(store.root, run_id)
    if os.path.isdir(path) and is_clone(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.isdir(path):
        git(store.project_dir, "worktree", "remove", "--force", path)
    git(store.project_dir, "worktree", "prune", check=False)
    if delete_branch:
        git(store.project_dir, "branch", "-D", worktrees.branch(run_id), check=False)
    if not os.path.lexists(path):
        drop_record(store, run_id)
    elif os.path.exists(worktrees.record_path(store.root, run_id)):
        # part of it could not be removed (a read-only folder, a file still open elsewhere): what is
        # left is no killed turn's workspace, and its git folder may be gone, so the next runner
        # must never "bring it back" (git would then act on the project's own repository)
        rec = worktrees.record(store.root, run_id) or {}
        try:
            save_record(store, run_id, dict(rec, kept="loopx could not remove all of it after its turn: "
                                                     "remove it by hand"))
        except OSError:
            pass
