"""The one git adapter (``kernel/storage/gitcli.py``): every git call of loopx goes through it, with
one answer to "is this a checkout, and where", no prompt, a bounded time, the pinned mode for
folders an agent can write, and errors that are one line with a hint."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env
from loopx.errors import EXIT_CONFLICT
from loopx.kernel.storage import gitcli

SRC = Path(gitcli.__file__).resolve().parents[2]  # src/loopx
posix_only = pytest.mark.skipif(os.name == "nt", reason="a shell script stands in for git")


def _starts_git(node: ast.Call) -> bool:
    """A call whose first argument is an argv list starting with "git" (subprocess.run,
    Popen, spawn.output...)."""
    if not node.args or not isinstance(node.args[0], ast.List) or not node.args[0].elts:
        return False
    first = node.args[0].elts[0]
    return isinstance(first, ast.Constant) and first.value == "git"


def test_no_module_but_gitcli_starts_git():
    found = []
    for f in SRC.rglob("*.py"):
        rel = f.relative_to(SRC).as_posix()
        if rel == "kernel/storage/gitcli.py":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _starts_git(node):
                found.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.BinOp) and isinstance(node.left, ast.List) and node.left.elts \
                    and isinstance(node.left.elts[0], ast.Constant) and node.left.elts[0].value == "git":
                found.append(f"{rel}:{node.lineno} (an argv built from [\"git\"])")
    assert not found, "run git through loopx.kernel.storage.gitcli: " + ", ".join(found)


def _repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    env = subprocess_env({})
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    return path


def test_where_is_one_answer_from_the_folder_layout(tmp_path):
    repo = _repo(tmp_path / "repo")
    deep = repo / "a" / "b"
    deep.mkdir(parents=True)
    assert gitcli.git_dir(str(deep)) == str(repo / ".git")
    assert gitcli.checkout(str(deep)) == str(repo)
    outside = tmp_path / "plain"
    outside.mkdir()
    assert gitcli.checkout(str(outside)) is None or gitcli.checkout(str(outside)) != str(repo)
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text("gitdir: ../repo/.git/worktrees/wt\n")  # a worktree's .git is a file
    assert gitcli.checkout(str(wt)) == str(wt)


def test_a_failing_call_is_one_line_with_a_hint_and_exit_4(tmp_path):
    repo = _repo(tmp_path / "repo")
    res = gitcli.run(str(repo), "rev-parse", "--verify", "-q", "HEAD")  # no commit yet: a non-zero exit
    assert not res.ok and isinstance(res.stdout, bytes)
    with pytest.raises(gitcli.GitError) as exc:
        gitcli.git(str(repo), "rev-parse", "--verify", "HEAD", hint="make a first commit")
    err = exc.value
    assert err.exit_code == EXIT_CONFLICT and err.code == "git_failed"
    assert str(err).startswith("git rev-parse --verify failed: ") and "\n" not in str(err)
    assert err.hint == "make a first commit"
    assert gitcli.output(str(repo), "rev-parse", "--verify", "-q", "HEAD") is None


def test_every_call_has_no_prompt_and_the_pinned_mode_turns_hooks_off(tmp_path):
    repo = _repo(tmp_path / "repo")
    plain = gitcli.environment(str(repo))
    assert plain["GIT_TERMINAL_PROMPT"] == "0" and "GIT_DIR" not in plain
    pinned = gitcli.environment(str(repo), pinned=True, identity=True)
    keys = {pinned[f"GIT_CONFIG_KEY_{i}"]: pinned[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(pinned["GIT_CONFIG_COUNT"]))}
    assert keys["core.hooksPath"] == "/dev/null" and keys["core.fsmonitor"] == "false"
    assert os.path.realpath(pinned["GIT_DIR"]) == os.path.realpath(repo / ".git")
    assert pinned["GIT_AUTHOR_NAME"] == pinned["GIT_COMMITTER_NAME"] == "loopx"
    # a hook an agent planted in the checkout never runs in the pinned mode
    hook = repo / ".git" / "hooks" / "post-checkout"
    marker = tmp_path / "hook-ran"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    gitcli.git(str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    gitcli.git(str(repo), "checkout", "-q", "-b", "other")
    assert not marker.exists()


@posix_only
def test_git_missing_or_hanging_is_git_unavailable(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(gitcli.GitUnavailable) as missing:
        gitcli.run(str(tmp_path), "status")
    assert not missing.value.timed_out
    assert gitcli.output(str(tmp_path), "status") is None
    with pytest.raises(gitcli.GitError) as err:
        gitcli.git(str(tmp_path), "status")
    assert "could not run" in str(err.value) and "installed" in err.value.hint
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "git").write_text("#!/bin/sh\nexec sleep 600\n")  # a git that never answers (a dead remote)
    (fake / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}/usr/bin{os.pathsep}/bin")
    with pytest.raises(gitcli.GitUnavailable) as hung:
        gitcli.run(str(tmp_path), "fetch", timeout=0.5)
    assert hung.value.timed_out and "took longer than 0.5 s" in str(hung.value)
    assert gitcli.output(str(tmp_path), "fetch", timeout=0.5) is None


@posix_only
def test_the_hot_path_reader_does_not_import_subprocess(tmp_path):
    repo = _repo(tmp_path / "repo")
    code = ("import sys; from loopx.kernel.storage import gitcli; "
            "out = gitcli.output(sys.argv[1], 'rev-parse', '--git-dir'); "
            "print(out is not None, 'subprocess' in sys.modules, 'typing' in sys.modules)")
    got = subprocess.run([sys.executable, "-S", "-c", code, str(repo)], capture_output=True, text=True,
                         env=subprocess_env({}), check=True).stdout.split()
    assert got == ["True", "False", "False"], got
