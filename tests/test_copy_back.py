"""A sequential turn's uncommitted work lands in the checkout as uncommitted work
(``runner.worktree.uncommitted`` / ``can_copy_back`` / ``copy_back``), on real git repositories:
new, changed, removed, executable and symlinked files; the user's carried work in progress the
agent left alone is not touched; a path the user changed meanwhile stops the copy."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from loopx.runner import worktree

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(cwd, *args) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture
def pair(tmp_path):
    """(checkout, workspace, carried, base_sha): a checkout with tracked files and a work-in-progress
    file, and a clone of it with that file carried in, as ``loopx run`` makes them."""
    proj = tmp_path / "proj"
    proj.mkdir()
    git(proj, "init", "-q", "-b", "main")
    for name in ("keep.txt", "edit.txt", "gone.txt"):
        (proj / name).write_text(name + "\n")
    git(proj, "add", "-A")
    git(proj, "commit", "-q", "-m", "base")
    (proj / "wip.txt").write_text("the user's draft\n")  # untracked: carried
    ws = tmp_path / "ws"
    git(tmp_path, "clone", "-q", "--shared", str(proj), str(ws))
    carried = worktree.carry(str(proj), str(ws))
    return proj, ws, carried, git(proj, "rev-parse", "HEAD").strip()


def _agent_works(ws):
    (ws / "edit.txt").write_text("changed by the agent\n")
    (ws / "gone.txt").unlink()
    (ws / "new").mkdir()
    (ws / "new" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(ws / "new" / "run.sh", 0o755)
    os.symlink("keep.txt", ws / "link")


def test_the_agents_uncommitted_work_lands_as_it_left_it_and_nothing_else_moves(pair):
    proj, ws, carried, base = pair
    _agent_works(ws)
    pending = worktree.uncommitted(str(ws), carried)
    assert pending == ["edit.txt", "gone.txt", "link", "new/run.sh"]  # not wip.txt: left as carried
    assert worktree.can_copy_back(str(proj), str(ws), pending, carried, "main", base)
    assert worktree.copy_back(str(proj), str(ws), pending) == []
    assert (proj / "edit.txt").read_text() == "changed by the agent\n"
    assert not (proj / "gone.txt").exists()
    assert os.access(proj / "new" / "run.sh", os.X_OK)
    assert os.readlink(proj / "link") == "keep.txt"
    assert (proj / "wip.txt").read_text() == "the user's draft\n"
    assert git(proj, "rev-parse", "HEAD").strip() == base  # uncommitted, as if the agent had worked here


@pytest.mark.parametrize("meanwhile", ["edit a tracked file", "edit the carried draft", "move the branch"])
def test_a_checkout_that_changed_under_the_turn_is_not_copied_over(pair, meanwhile):
    proj, ws, carried, base = pair
    _agent_works(ws)
    (ws / "wip.txt").write_text("the agent rewrote the draft\n")
    pending = worktree.uncommitted(str(ws), carried)
    if meanwhile == "edit a tracked file":
        (proj / "edit.txt").write_text("the user's edit\n")
    elif meanwhile == "edit the carried draft":
        (proj / "wip.txt").write_text("the user kept typing\n")
    else:
        git(proj, "commit", "-q", "--allow-empty", "-m", "the user's commit")
    assert not worktree.can_copy_back(str(proj), str(ws), pending, carried, "main", base)
