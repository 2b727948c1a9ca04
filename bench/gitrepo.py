"""Make a benchmark project a real git repository with tracked files, as users run loopx (issue 26):
a few hundred source and test files committed, the ``.loopx/`` store tracked too (as when a goal
is shared through the repository; its cache and lock stay ignored by ``.loopx/.gitignore``).

    from gitrepo import make_repo, clone
    make_repo(proj)                    # git init + tracked files + one commit (idempotent)
    fresh = clone(proj, dest)          # a fresh clone: the store without any cache
"""

from __future__ import annotations

import os
import subprocess
import time

ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "bench",
       "GIT_COMMITTER_EMAIL": "bench@example.invalid"}


def git(cwd: str, *args: str) -> str:
    env = dict(os.environ, **ENV)
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(proj: str, files: int = 300) -> str:
    """``proj`` as a git repository with ``files`` tracked source/test files and the store; returns it.
    The source files are dated an hour back, as a user's are older than their index: files written
    in the same second as the index are "racily clean" and every ``git status`` would hash them all
    again (twice the CPU of a status on a settled checkout); an existing repository's index is
    refreshed for the same reason.

    An existing repository's store is first put back as committed (``git checkout`` and ``git clean``
    of ``.loopx``, its ignored cache and lock left alone): every timed run writes (todos added, runs
    started), and a store reused run after run grew a backlog of a thousand open todos where the
    built store has about 30, so each run measured a bigger live view than the one before. The
    put-back history is one the anchors would report as rewritten, so the repository's anchor refs
    go too (the caller clears the anchors under its ``LOOPX_HOME``)."""
    if os.path.isdir(os.path.join(proj, ".git")):
        git(proj, "checkout", "-q", "HEAD", "--", ".loopx")
        git(proj, "clean", "-fdq", "--", ".loopx")
        for ref in git(proj, "for-each-ref", "--format=%(refname)", "refs/loopx/").split():
            git(proj, "update-ref", "-d", ref)
        git(proj, "status", "--porcelain")  # refreshes the index (no --no-optional-locks)
        return proj
    for i in range(files):
        folder = os.path.join(proj, "src" if i % 4 else "tests", f"pkg{i % 10}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"mod{i}.py"), "w") as fh:
            fh.write(f'"""Module {i}."""\n\n' + "".join(f"def f{j}(x):\n    return x + {j}\n\n" for j in range(30)))
    with open(os.path.join(proj, "README.md"), "w") as fh:
        fh.write("# bench project\n")
    old = time.time() - 3600
    for folder, _, names in os.walk(proj):
        if f"{os.sep}.loopx" not in folder:
            for name in names:
                os.utime(os.path.join(folder, name), (old, old))
    git(proj, "init", "-q", "-b", "main")
    git(proj, "add", "-A", ".")
    git(proj, "commit", "-q", "-m", "bench project with its loopx store")
    return proj


def clone(proj: str, dest: str) -> str:
    """A fresh local clone of ``proj`` at ``dest`` (its store without a cache); returns ``dest``."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", proj, dest], check=True, capture_output=True,
                   env=dict(os.environ, **ENV))
    return dest
