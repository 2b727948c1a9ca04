"""The fingerprint's git part kept for a repository with thousands of refs
(``loopx/kernel/read/gitmemo.py``, issue 26): the part it gives is, at every step of a repository's
life, the one made from git's refs and status at that moment, and an unchanged repository is
answered without making the ref listing again. Real repositories, real git."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from loopx.kernel.read import fingerprint, gitmemo, gitrefs, gitstatus
from loopx.kernel.storage import layout

pytestmark = pytest.mark.skipif(shutil.which("git") is None or os.name == "nt", reason="needs git (POSIX)")

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
SETTLE = 0.05  # the tests' racy window (s)


def git(cwd, *args, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **ENV}, input=stdin, capture_output=True,
                          check=True).stdout


@pytest.fixture()
def repo(tmp_path, monkeypatch):
    monkeypatch.setattr(gitmemo, "RACY_NS", int(SETTLE * 1e9))
    monkeypatch.setattr(gitstatus, "RACY_NS", int(SETTLE * 1e9))
    for k in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    r = tmp_path / "repo"
    (r / ".loopx" / "cache").mkdir(parents=True)
    git(r, "init", "-q", "-b", "main")
    (r / ".gitignore").write_text(".loopx/\n")
    (r / "a.txt").write_text("a\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "one")
    head = git(r, "rev-parse", "HEAD").decode().strip()
    tags = "".join(f"create refs/tags/v1.{i}.0 {head}\n" for i in range(1500))
    git(r, "update-ref", "--stdin", stdin=tags.encode())
    git(r, "pack-refs", "--all")
    assert (r / ".git" / "packed-refs").stat().st_size >= fingerprint.BIG_PACKED
    return r


def from_git(cwd) -> str:
    """The git part made from git's own answers (every fact asked of git, nothing kept)."""
    head = subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=cwd, capture_output=True).stdout.strip()
    refs = git(cwd, *fingerprint.FOR_EACH_REF)
    status = git(cwd, *fingerprint.STATUS)
    return fingerprint._hash(head, refs, status, git(cwd, "rev-parse", "--show-toplevel").decode().strip(),
                             __import__("loopx.kernel.storage.chain", fromlist=["sha256"]).sha256)


def part(cwd) -> str:
    gitrefs._MEMO.clear()  # a new process each time, as each command is
    return fingerprint.git_part(str(cwd))


def memo(cwd):
    return cwd / ".loopx" / layout.GITREFS


class Listings:
    """Counts the ref listings made (``gitrefs._listing``)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = gitrefs._listing

        def counted(packed, loose):
            self.n += 1
            return real(packed, loose)
        monkeypatch.setattr(gitrefs, "_listing", counted)


def settle():
    time.sleep(SETTLE * 1.5)


def test_the_kept_part_is_gits_at_every_step_and_an_unchanged_repository_makes_no_listing(repo, monkeypatch):
    listings = Listings(monkeypatch)
    settle()
    steps = [  # (what happens, whether the part changes)
        ("as packed", True, lambda: None),
        ("a commit: main loose again", True, lambda: ((repo / "a.txt").write_text("b\n"),
                                                      git(repo, "commit", "-qam", "two"))),
        ("a dirty file", True, lambda: (repo / "a.txt").write_text("c\n")),
        ("an untracked file", True, lambda: (repo / "new.txt").write_text("n\n")),
        ("a new loose tag", True, lambda: git(repo, "tag", "v0.9")),
        ("a stash", True, lambda: git(repo, "stash", "-q", "-u")),
        ("packed again: the same refs", False, lambda: git(repo, "pack-refs", "--all")),
        ("a packed tag moved", True, lambda: (git(repo, "tag", "-f", "v1.7.0", "HEAD"),
                                              git(repo, "pack-refs", "--all"))),
        ("a detached HEAD", True, lambda: git(repo, "checkout", "-q", "--detach", "HEAD~1")),
        ("a parallel run's branch", False, lambda: git(repo, "branch", "loopx/run-1")),
    ]
    before = None
    for name, changes, step in steps:
        step()
        settle()
        made = listings.n
        first = part(repo)
        assert first == from_git(repo), name
        assert listings.n == made + 1, name  # a change: the listing made once
        assert memo(repo).is_file(), name
        again = part(repo)
        assert again == first and listings.n == made + 1, name  # unchanged: kept, no listing made
        assert (first != before) == changes, name
        before = first


def test_nothing_is_kept_while_packed_refs_just_changed(repo, monkeypatch):
    monkeypatch.setattr(gitmemo, "RACY_NS", 10**12)  # every file changed "just now"
    listings = Listings(monkeypatch)
    assert part(repo) == from_git(repo)
    assert not memo(repo).exists()
    assert part(repo) == from_git(repo) and listings.n == 2  # made again: nothing was kept


@pytest.mark.parametrize("damage", [b"", b"LXGR\x00\x00\x00\x00garbage", b"not a memo at all"])
def test_a_damaged_memo_is_no_memo(repo, damage):
    settle()
    good = part(repo)
    memo(repo).write_bytes(damage)
    assert part(repo) == good == from_git(repo)
    assert memo(repo).read_bytes()[:4] == b"LXGR"  # written anew


def test_a_small_repository_keeps_nothing(repo):
    """Below ``BIG_PACKED`` making the listing costs less than reading the memo: no file."""
    git(repo, "tag", "-d", *[f"v1.{i}.0" for i in range(1400)])
    git(repo, "pack-refs", "--all")
    assert (repo / ".git" / "packed-refs").stat().st_size < fingerprint.BIG_PACKED
    settle()
    assert part(repo) == from_git(repo)
    assert not memo(repo).exists()


def test_a_symlink_at_the_memo_is_replaced_not_followed(repo, tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("the user's file\n")
    memo(repo).symlink_to(target)
    settle()
    assert part(repo) == from_git(repo)
    assert target.read_text() == "the user's file\n"
    assert not memo(repo).is_symlink() and memo(repo).read_bytes()[:4] == b"LXGR"


def test_a_packed_line_git_must_read_is_left_to_git_and_nothing_is_kept(repo):
    """A line the reader does not take (here a hash in capitals, after HEAD's branch went loose):
    git gives every fact, the part is git's, and nothing is kept under a key that says nothing of
    what git listed (a git that failed or raced once would be kept wrong)."""
    (repo / "a.txt").write_text("b\n")
    git(repo, "commit", "-qam", "two")
    sha = git(repo, "rev-parse", "HEAD").decode().strip()
    packed = repo / ".git" / "packed-refs"
    packed.write_text(packed.read_text() + f"{sha.upper()} refs/tags/zz-upper\n")
    settle()
    assert part(repo) == from_git(repo)
    assert part(repo) == from_git(repo)
    assert not memo(repo).exists()


def test_the_scope_checks_head_trusts_a_packed_line_only_in_a_file_checked_whole(repo, monkeypatch):
    """``turnscope`` finds HEAD's packed branch by its line; it parses ``packed-refs`` whole unless a
    kept git part vouches for that very file, and a file git refuses gives git's answer."""
    from loopx.kernel.read import turnscope

    head = git(repo, "rev-parse", "HEAD").decode().strip()
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()  # main is packed
    settle()
    parsed = []
    real = gitrefs._packed
    monkeypatch.setattr(gitrefs, "_packed", lambda *a, **k: parsed.append(1) or real(*a, **k))
    gitrefs._MEMO.clear()
    assert turnscope._head_and_top(str(repo)) == (head, str(repo)) and parsed  # no memo yet: parsed
    part(repo)  # the fingerprint keeps its part: the file was checked whole
    assert memo(repo).is_file()
    parsed.clear()
    gitrefs._MEMO.clear()
    assert turnscope._head_and_top(str(repo)) == (head, str(repo)) and not parsed
    packed = repo / ".git" / "packed-refs"
    packed.write_text(packed.read_text() + "abc refs/tags/short\n")  # git: "unexpected line" (exit 128)
    gitrefs._MEMO.clear()
    assert turnscope._head_and_top(str(repo)) == (None, str(repo))  # git's answer: no HEAD
