"""The one way loopx runs git: where a checkout is, the environment, the timeout, the errors.

Where: ``checkout(start)`` is the work tree holding ``start`` (the folder with the nearest
``.git``, a directory or a worktree's ``.git`` file), ``git_dir(start)`` that ``.git``; both read
the folder layout only (``fs.find_up``), never run git, and say None outside a checkout.

Running: ``run(cwd, *args, data=None, timeout=TIMEOUT, pinned=False, identity=False, text=False)``
starts ``git ARGS`` in ``cwd`` and returns a ``Result`` (``returncode``, ``stdout`` and ``stderr``:
bytes, or with ``text`` str decoded as UTF-8 with undecodable bytes replaced; ``out``, ``why``).
Every call gets:

- no prompt: ``GIT_TERMINAL_PROMPT=0`` and stdin from ``data`` or ``/dev/null``, so a remote that
  wants a password fails instead of hanging;
- ``timeout`` seconds (``TIMEOUT`` = 120 by default; callers on a hot path or talking to a
  remote pass less), the process then killed;
- with ``pinned`` (a folder an agent can write: the runner's worktrees, an experiment's trials,
  a sandboxed run's checkout), ``sandbox.gitpin.env``: ``GIT_DIR``/``GIT_COMMON_DIR``/
  ``GIT_WORK_TREE`` named from the project's own ``.git``, hooks and fsmonitor off;
- with ``identity``, loopx's own author and committer (``loopx <loopx@localhost>``) for commits
  that are loopx's, not the user's (``loopx sync``'s record commits).

Pinned: A sandboxed agent can rewrite its worktree's ``.git`` file and the files of its own git folder
(``.git/worktrees/<run>/commondir``, ``gitdir``), which would point loopx's next ``git`` call
in that worktree at a repository and configuration the agent wrote (``core.fsmonitor`` and
``core.hooksPath`` run commands). ``pinned_env(cwd, base) -> dict`` pins such a call: for a run's
worktree under ``.loopx/worktrees/<run>`` it names ``GIT_DIR``, ``GIT_COMMON_DIR`` and
``GIT_WORK_TREE`` from the project's own ``.git`` (never from files in the worktree); for the
main checkout, whose ``.git`` the agent may write in (it commits there), it names the common
folder, so a ``commondir`` file the agent planted is never followed; for every call it turns
repository hooks and the fsmonitor off (``GIT_CONFIG_COUNT``). ``pin_process(cwd)`` does the same
for every git call of the process (``loopx run`` while a sandboxed agent runs, and the broker's
calls), ``unpin`` restores.

Cloning: ``clone_shared(source, path)`` makes a private clone (``git clone --shared``) whose own
``.git`` a sandbox may grant while the source's objects stay read-only (a turn's workspace, an
experiment's trials).

Errors: ``run`` raises ``GitUnavailable`` (an OSError) when git is not installed, cannot start or
outlives ``timeout``; a non-zero exit is in the Result, and ``checked`` (or ``git(..., check=True)``)
turns it into ``GitError`` (a Conflict, exit 4, code ``git_failed``) with git's last line and a
hint. ``output(cwd, *args)`` is the hot path's reader: stdout or None on any failure, started
with ``os.posix_spawnp`` where there is one, so ``should-run``, ``status`` and ``next`` never
import ``subprocess`` (tests/test_flat_cost.py counts).
"""

from __future__ import annotations

import os

from loopx.errors import Conflict
from loopx.kernel.storage import layout
from loopx.kernel.storage.fs import find_up

TYPE_CHECKING = False  # `typing` costs the hot commands start-up time; annotations are strings
if TYPE_CHECKING:
    from typing import Any

TIMEOUT = 120.0
LOOPX_IDENTITY = {"GIT_AUTHOR_NAME": "loopx", "GIT_AUTHOR_EMAIL": "loopx@localhost",
                  "GIT_COMMITTER_NAME": "loopx", "GIT_COMMITTER_EMAIL": "loopx@localhost"}


class GitError(Conflict):
    """git ran and failed (or could not run) on a call loopx needed."""

    code = "git_failed"


class GitUnavailable(OSError):
    """git is not installed, could not start, or took longer than its timeout (``timed_out``)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


# ----------------------------------------------------------------------------- where
def git_dir(start: str) -> str | None:
    """The nearest ``.git`` (directory, or a worktree's ``.git`` file) at or above ``start``."""
    return find_up(start, ".git", dir_only=False)


def checkout(start: str) -> str | None:
    """The top of the work tree holding ``start`` (the folder of its ``.git``), or None."""
    g = git_dir(start)
    return os.path.dirname(g) if g else None


# ----------------------------------------------------------------------------- pinned
SAFE_CONFIG = (("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false"))


def pinned_env(cwd: str, base: dict | None = None) -> dict:
    """``base`` (default ``os.environ``) with the git call in ``cwd`` pinned (see "Pinned" above)."""
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
    g = git_dir(cwd)
    if g is None or not os.path.isdir(g):
        return None
    g = os.path.realpath(g)
    return g, g, os.path.dirname(g)


def pin_process(cwd: str) -> dict:
    """Pin every git call this process (and its children) makes for the checkout at ``cwd``
    (``pinned_env``'s variables set in ``os.environ``). Returns what to pass to ``unpin``."""
    saved = {k: os.environ.get(k) for k in list(os.environ) if k.startswith("GIT_")}
    new = pinned_env(cwd)
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
        if parts[i] == layout.DIRNAME and parts[i + 1] == layout.WORKTREES and i + 2 < len(parts):
            run = parts[i + 2]
            project_top = os.sep.join(parts[:i]) or os.sep
            g = git_dir(project_top)
            if g is None or not os.path.isdir(g):
                return None
            common = os.path.realpath(g)
            wt_git = os.path.join(common, "worktrees", run)
            if not os.path.isdir(wt_git):
                return None
            return wt_git, common, os.sep.join(parts[:i + 3])
    return None


# ----------------------------------------------------------------------------- running
def _str(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else b


class Result:
    """What one git call gave: ``returncode``, ``stdout`` and ``stderr`` (bytes, or str when the
    call asked for ``text``)."""

    __slots__ = ("args", "returncode", "stdout", "stderr")

    def __init__(self, args: tuple[str, ...], returncode: int, stdout: Any, stderr: Any) -> None:
        self.args, self.returncode = args, returncode
        self.stdout: Any = stdout
        self.stderr: Any = stderr

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def out(self) -> str:
        """stdout as text, stripped."""
        return _str(self.stdout).strip()

    @property
    def why(self) -> str:
        """git's last line of complaint (stderr, else stdout), or ``exit N``."""
        lines = _str(self.stderr or self.stdout).strip().splitlines()
        return lines[-1] if lines else f"exit {self.returncode}"


def environment(cwd: str, *, pinned: bool = False, identity: bool = False, base: dict | None = None) -> dict:
    """The environment of a git call in ``cwd`` (module docstring)."""
    if pinned:
        env = pinned_env(cwd, base)
    else:
        env = dict(os.environ if base is None else base)
    env["GIT_TERMINAL_PROMPT"] = "0"
    if identity:
        env.update(LOOPX_IDENTITY)
    return env


def run(cwd: str, *args: str, data: bytes | str | None = None, timeout: float = TIMEOUT, pinned: bool = False,
        identity: bool = False, env: dict | None = None, base: dict | None = None, text: bool = False) -> Result:
    """``git ARGS`` in ``cwd``. ``env``: extra variables; ``base``: the environment to start from
    (default this process's). Raises GitUnavailable (not installed, cannot start, past ``timeout``
    seconds: then killed); a non-zero exit is the Result's."""
    import subprocess

    if isinstance(data, str):
        data = data.encode("utf-8")
    e = environment(cwd, pinned=pinned, identity=identity, base=base)
    if env:
        e.update(env)
    try:
        p = subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, timeout=timeout, env=e,
                           stdin=None if data is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise GitUnavailable(f"git {args[0] if args else ''} took longer than {timeout:g} s", timed_out=True) from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitUnavailable(f"git {args[0] if args else ''} could not run: {exc}") from None
    if text:
        return Result(tuple(args), p.returncode, _str(p.stdout), _str(p.stderr))
    return Result(tuple(args), p.returncode, p.stdout, p.stderr)


def checked(res: Result, hint: str) -> Result:
    """``res`` when git exited 0; else raises GitError naming the command and git's last line."""
    if res.returncode != 0:
        raise GitError(f"git {' '.join(res.args[:2])} failed: {res.why}", hint)
    return res


def git(cwd: str, *args: str, check: bool = True, timeout: float = TIMEOUT,
        hint: str = "see `git status` in the project", pinned: bool = True, data: bytes | str | None = None) -> Result:
    """loopx's own git call that must work, text output: pinned by default (a folder an agent
    could write); a GitError (exit 4) when git cannot run, or exits non-zero and ``check``."""
    try:
        res = run(cwd, *args, data=data, timeout=timeout, pinned=pinned, text=True)
    except GitUnavailable as exc:
        raise GitError(str(exc), "check that git is installed and on PATH") from None
    return checked(res, hint) if check else res


def output(cwd: str, *args: str, timeout: float = 30.0, pinned: bool = False) -> bytes | None:
    """stdout of ``git -C cwd ARGS``, or None when git is missing, fails or outlives ``timeout``.
    Started without importing ``subprocess`` where ``os.posix_spawnp`` exists (the hot path)."""
    from loopx.kernel.storage import spawn

    e = environment(cwd, pinned=pinned)
    argv = ["git", "-C", cwd, *args]
    try:
        got = spawn.output(argv, timeout, e)
    except OSError:
        return None
    if got is None:  # no posix_spawnp (Windows)
        try:
            res = run(cwd, *args, timeout=timeout, pinned=pinned)
        except GitUnavailable:
            return None
        got = (res.returncode, res.stdout)
    return got[1] if got[0] == 0 else None


def identity_options(cwd: str) -> list[str]:
    """``-c user.name=... -c user.email=...`` for commits loopx makes in the user's history, only
    when the user has no git identity configured (theirs is always used when it exists)."""
    if git(cwd, "config", "user.email", check=False).out:
        return []
    return ["-c", "user.name=loopx", "-c", "user.email=loopx@localhost"]


def clone_shared(source: str, path: str, timeout: float = TIMEOUT) -> None:
    """A private clone of the repository whose git folder is ``source`` at ``path`` (``git clone
    --shared --no-checkout --no-tags``): its own ``.git`` (index, refs, new objects), the source's
    objects read through ``objects/info/alternates`` and never written. Hooks and the fsmonitor
    off; the clone names its own folders. Raises GitError."""
    env = pinned_env(os.path.dirname(path))
    for k in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE"):
        env.pop(k, None)
    try:
        res = run(os.path.dirname(path), "clone", "-q", "--shared", "--no-checkout", "--no-tags", source, path,
                  base=env, timeout=timeout, text=True)
    except GitUnavailable as exc:
        raise GitError(str(exc), "check that git is installed and on PATH") from None
    checked(res, "see `git status` in the project")
