"""The fingerprint's git facts read from the repository's files (``kernel/read/gitrefs.py``, issue 26)
must be exactly what ``git rev-parse -q --verify HEAD`` and ``git for-each-ref`` print, so a
fingerprint does not change with how it was gathered. Real repositories, real git."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from loopx.kernel.read import fingerprint, gitrefs
from loopx.kernel.storage import gitcli

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
       "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


def git(cwd, *args) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, env={**env, **ENV}, capture_output=True, check=True).stdout


def from_git(cwd) -> tuple[bytes, bytes, str]:
    head = subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=cwd, capture_output=True).stdout.strip()
    refs = git(cwd, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags", "refs/stash")
    top = git(cwd, "rev-parse", "--show-toplevel").decode().strip()
    return head, refs, top


def same(cwd):
    got = gitrefs.read(gitcli.git_dir(str(cwd)))
    assert got is not None
    assert got == from_git(cwd)


@pytest.fixture()
def repo(tmp_path, monkeypatch):
    for k in list(os.environ):
        if k.startswith("GIT_"):
            monkeypatch.delenv(k)
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    return r


def test_unborn_branch(repo):
    assert gitrefs.read(str(repo / ".git"))[:2] == (b"", b"")
    same(repo)


def test_branches_tags_stash_packed_and_loose(repo):
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "branch", "feature/x")
    git(repo, "tag", "light")
    git(repo, "tag", "-a", "annotated", "-m", "an annotated tag")  # its own object, peeled in packed-refs
    same(repo)
    git(repo, "pack-refs", "--all")
    same(repo)
    (repo / "a.txt").write_text("b")
    git(repo, "commit", "-q", "-am", "two")  # main loose again, newer than its packed line
    (repo / "a.txt").write_text("c")
    git(repo, "stash", "-q")
    git(repo, "branch", "loopx/run-1")
    same(repo)
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    same(repo)
    (repo / "sub").mkdir()
    head, _, top = gitrefs.read(gitcli.git_dir(str(repo / "sub")))
    assert top == str(repo) and head == from_git(repo)[0]


def test_a_packed_refs_file_of_hundreds_of_kb_is_read_whole(repo):
    """A mature project's thousands of release tags, packed: the listing is git's to the last one
    (the reader cut the file at 64 KB and gave a third of the tags)."""
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    head = git(repo, "rev-parse", "HEAD").decode().strip()
    lines = "".join(f"create refs/tags/v1.{i}.0 {head}\n" for i in range(3000))
    subprocess.run(["git", "update-ref", "--stdin"], cwd=repo, input=lines.encode(), check=True,
                   env={**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **ENV})
    git(repo, "pack-refs", "--all")
    assert (repo / ".git" / "packed-refs").stat().st_size > 150_000
    same(repo)
    git(repo, "branch", "zz-last")  # a loose ref sorted after every packed one
    git(repo, "pack-refs", "--all")
    same(repo)


def test_a_worktree_reads_its_own_head_and_the_shared_refs(repo, tmp_path):
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"))
    (tmp_path / "wt" / "a.txt").write_text("w")
    git(tmp_path / "wt", "commit", "-q", "-am", "in the worktree")
    same(tmp_path / "wt")
    same(repo)


def test_what_it_does_not_model_is_left_to_git(repo, monkeypatch):
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    assert gitrefs.read(str(repo / ".git")) is None  # for-each-ref resolves a symbolic ref: git answers
    os.remove(repo / ".git" / "refs" / "heads" / "alias")
    assert gitrefs.read(str(repo / ".git")) is not None
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    assert gitrefs.read(str(repo / ".git")) is None


def test_the_fingerprint_is_the_one_four_git_calls_gave(repo, monkeypatch):
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "tag", "v1")
    (repo / "b.txt").write_text("untracked")
    fast = fingerprint.git_part(str(repo))
    monkeypatch.setattr(gitrefs, "read", lambda _dot_git: None)  # as before: every fact from git
    assert fingerprint.git_part(str(repo)) == fast != ""


def test_the_one_git_process_is_started_without_subprocess(repo):
    import sys

    from loopx.kernel.storage import spawn

    if not hasattr(os, "posix_spawnp"):
        pytest.skip("no posix_spawnp here: subprocess is used")
    code, out = spawn.output(["git", "-C", str(repo), "status", "--porcelain=v1", "-z"], 30)
    assert code == 0 and out == b""
    (repo / "new.txt").write_text("x")
    assert spawn.output(["git", "-C", str(repo), "status", "--porcelain=v1", "-z"], 30) == (0, b"?? new.txt\0")
    assert spawn.output(["git", "-C", str(repo / "nowhere"), "status"], 30)[0] != 0
    with pytest.raises(FileNotFoundError):
        spawn.output(["no-such-program-loopx"], 30)
    with pytest.raises(TimeoutError):
        spawn.output([sys.executable, "-c", "import time; time.sleep(30)"], 0.3)


def test_packed_refs_of_a_clone_merge_with_loose_refs_in_gits_order(repo, tmp_path):
    """A clone packs every tag and remote branch; the loose refs written since (a new commit, a tag,
    a branch) go in between the packed ones as git sorts them, and a ref whose loose file is newer
    than its packed line shows the loose one."""
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    for name in ("v1.0", "v1.2", "v2.0"):
        git(repo, "tag", "-a", name, "-m", name)  # annotated: a peeled "^" line follows each
    git(repo, "branch", "b-packed")
    git(tmp_path, "clone", "-q", str(repo), "clone")
    clone = tmp_path / "clone"
    assert b"refs/remotes/" in (clone / ".git" / "packed-refs").read_bytes()
    same(clone)
    (clone / "a.txt").write_text("b")
    git(clone, "commit", "-q", "-am", "two")  # main: loose, over its packed line
    git(clone, "tag", "v1.1")  # loose, sorted between two packed tags
    git(clone, "branch", "a-first")  # loose, sorted before every packed branch
    git(clone, "stash", "list")
    same(clone)
    assert b"refs/tags/v1.1" in gitrefs.read(str(clone / ".git"))[1]


def test_a_hand_written_packed_refs_file_is_sorted_as_git_sorts_it(repo):
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    head = git(repo, "rev-parse", "HEAD").decode().strip()
    git(repo, "update-ref", "-d", "refs/heads/main")
    lines = [f"{head} refs/tags/zeta", f"{head} refs/heads/main", f"{head} refs/tags/alpha"]
    (repo / ".git" / "packed-refs").write_text("# pack-refs with: peeled\n" + "\n".join(lines) + "\n")
    same(repo)


@pytest.mark.parametrize("line", ["{sha_upper} refs/tags/x", "{short} refs/tags/x", "{sha}  refs/tags/x\r"])
def test_a_packed_line_git_would_not_print_as_it_is_is_left_to_git(repo, line):
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "pack-refs", "--all")
    sha = git(repo, "rev-parse", "HEAD").decode().strip()
    packed = repo / ".git" / "packed-refs"
    bad = line.format(sha=sha, sha_upper=sha.upper(), short=sha[:12])
    packed.write_text(packed.read_text() + bad + "\n")
    assert gitrefs.read(str(repo / ".git")) is None


def test_a_loose_ref_whose_name_is_not_utf8_is_left_to_git(repo):
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    sha = git(repo, "rev-parse", "HEAD")
    tags = os.path.join(os.fsencode(repo), b".git", b"refs", b"tags")
    with open(os.path.join(tags, b"caf\xe9"), "wb") as fh:  # Latin-1: not UTF-8
        fh.write(sha)
    assert gitrefs.read(str(repo / ".git")) is None


@pytest.mark.parametrize("newline", [True, False])
def test_heads_branch_found_in_packed_refs_without_parsing_it(repo, newline):
    """HEAD's branch only packed (after a clone or ``git gc``), found by its line alone; a file whose
    last line lacks its newline is one git refuses (exit 128): left to git."""
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "tag", "v1")
    git(repo, "pack-refs", "--all")
    packed = repo / ".git" / "packed-refs"
    if not newline:
        packed.write_text(packed.read_text().rstrip("\n"))
        gitrefs._MEMO.clear()
        assert gitrefs.facts(str(repo / ".git")) is None and gitrefs.read(str(repo / ".git")) is None
        return
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    gitrefs._MEMO.clear()
    assert gitrefs._packed_one(str(repo / ".git"), "refs/heads/main", 40) == from_git(repo)[0].decode()
    assert gitrefs._packed_one(str(repo / ".git"), "refs/heads/none", 40) == ""
    same(repo)


def _one_commit(repo) -> str:
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "tag", "v1")
    git(repo, "pack-refs", "--all")  # main and v1 packed: HEAD's branch is found in packed-refs
    return git(repo, "rev-parse", "HEAD").decode().strip()


PACKED_GIT_READS_OTHERWISE = {
    # what git refuses (exit 128), ignores with a warning, or reads another way than in file order
    "two lines for HEAD's branch, no sorted trait": lambda sha, text: (
        text.replace(" sorted", "") + f"{'0' * 40} refs/heads/main\n"),
    "two short lines whose spaces add up": lambda sha, text: text + f"{sha}\n{sha[:39]}  refs/tags/zz\n",
    "a space inside the hash": lambda sha, text: text + f"{sha[:10]} {sha[10:40]}refs/tags/zz\n",
    "a comment line after the header": lambda sha, text: text + "# a comment\n",
    "a header git does not write": lambda sha, text: "# junk header\n" + text.split("\n", 1)[1],
    "lines out of the order the sorted trait claims": lambda sha, text: text + f"{sha} refs/heads/aaa\n",
    "a name with ..": lambda sha, text: text + f"{sha} refs/tags/zz..bad\n",
    "a name with a space": lambda sha, text: text + f"{sha} refs/tags/zz bad\n",
    "a name with a control character": lambda sha, text: text + f"{sha} refs/tags/zz\x01\n",
    "refs/stash/* (listed under refs/stash)": lambda sha, text: text + f"{sha} refs/stash/zz\n",
    "a peeled line of another length": lambda sha, text: text + f"^{sha[:20]}\n",
    "a 64-digit hash in a SHA-1 repository": lambda sha, text: text + f"{sha}{sha[:24]} refs/tags/zz\n",
    "two peeled lines in a row": lambda sha, text: text + f"{sha} refs/tags/zz\n^{sha}\n^{sha}\n",
    "a sorted trait right after the colon, lines out of order": lambda sha, text: (
        "# pack-refs with:sorted\n" + text.split("\n", 1)[1] + f"{sha} refs/heads/aaa\n"),
    "a null hash (git calls the ref broken)": lambda sha, text: text + f"{'0' * 40} refs/tags/zz\n",
}


@pytest.mark.parametrize("case", sorted(PACKED_GIT_READS_OTHERWISE))
def test_a_packed_refs_file_git_reads_otherwise_is_left_to_git(repo, case):
    """Each file here is one git refuses or reads another way than line by line in file order: the
    reader says None (git answers), also for HEAD's packed branch found by its line alone
    (``facts(lazy=True)``, whose listing then says None)."""
    sha = _one_commit(repo)
    packed = repo / ".git" / "packed-refs"
    packed.write_text(PACKED_GIT_READS_OTHERWISE[case](sha, packed.read_text()))
    gitrefs._MEMO.clear()
    assert gitrefs.read(str(repo / ".git")) is None
    assert gitrefs.facts(str(repo / ".git")) is None
    lazy = gitrefs.facts(str(repo / ".git"), lazy=True)
    assert lazy is None or lazy[1]() is None
    (repo / ".git" / "refs" / "heads" / "main").write_text(sha + "\n")  # HEAD's branch loose: still git's
    gitrefs._MEMO.clear()
    assert gitrefs.facts(str(repo / ".git")) is None


def test_loose_refs_git_reads_otherwise_are_left_to_git(repo, tmp_path):
    sha = _one_commit(repo)
    refs = repo / ".git" / "refs"
    for name, make in [
        ("heads/a..b", lambda p: p.write_text(sha + "\n")),
        ("heads/x~1", lambda p: p.write_text(sha + "\n")),
        ("heads/long", lambda p: p.write_text(sha + sha[:24] + "\n")),  # SHA-256 length in a SHA-1 repository
        ("stash/zz", lambda p: p.write_text(sha + "\n")),  # refs/stash/*
        ("heads/linked", lambda p: p.symlink_to(refs / "tags", target_is_directory=True)),  # git follows it
    ]:
        path = refs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        make(path)
        gitrefs._MEMO.clear()
        assert gitrefs.read(str(repo / ".git")) is None, name
        path.unlink()
        if path.parent.name == "stash":
            path.parent.rmdir()
        gitrefs._MEMO.clear()
        same(repo)


def test_a_bare_setting_and_a_nul_in_a_path_are_left_to_git(repo):
    _one_commit(repo)
    config = repo / ".git" / "config"
    text = config.read_text()
    for setting in ("\tbare\n", "\tbare=true\n"):  # "bare" alone is true
        config.write_text(text.replace("\tbare = false\n", setting))
        assert gitrefs.read(str(repo / ".git")) is None, setting
    config.write_text(text)
    (repo / ".git" / "commondir").write_bytes(b"..\x00/elsewhere\n")
    assert gitrefs.read(str(repo / ".git")) is None  # it raised ValueError (embedded null byte) before


def test_refs_named_refs_heads_and_refs_tags_themselves_are_listed_as_git_lists_them(repo):
    sha = _one_commit(repo)
    rows = sorted([f"{sha} refs/heads", f"{sha} refs/heads-x", f"{sha} refs/heads/main", f"{sha} refs/tags",
                   f"{sha} refs/tags/v1", f"{sha} refs/tagsy"], key=lambda r: r.split(" ")[1].encode())
    (repo / ".git" / "packed-refs").write_text("# pack-refs with: peeled fully-peeled sorted \n" + "\n".join(rows) + "\n")
    gitrefs._MEMO.clear()
    same(repo)
    assert b" refs/heads\n" in gitrefs.read(str(repo / ".git"))[1]


HEADS_GIT_READS_OTHERWISE = {
    "a leading space": lambda sha: " ref: refs/heads/main\n",
    "no space after ref:": lambda sha: "ref:refs/heads/main\n",
    "two lines": lambda sha: f"ref: refs/heads/main\n{sha} refs/tags/v1\n",
    "a name outside refs/": lambda sha: "ref: ORIG_HEAD\n",
    "a per-worktree ref": lambda sha: "ref: refs/worktree/x\n",
    "a name git refuses": lambda sha: "ref: refs/x/../heads/main\n",
    "a detached hash with a leading space": lambda sha: f" {sha}\n",
    "a detached hash with a vertical tab": lambda sha: f"{sha}\v\n",
    "a detached null hash": lambda sha: "0" * 40 + "\n",
}


@pytest.mark.parametrize("case", sorted(HEADS_GIT_READS_OTHERWISE))
def test_a_head_git_reads_otherwise_is_left_to_git(repo, case):
    sha = _one_commit(repo)
    (repo / ".git" / "HEAD").write_text(HEADS_GIT_READS_OTHERWISE[case](sha))
    gitrefs._MEMO.clear()
    assert gitrefs.read(str(repo / ".git")) is None
    assert gitrefs.facts(str(repo / ".git"), lazy=True) is None


def test_loose_refs_and_files_git_reads_otherwise_are_left_to_git(repo):
    import threading

    sha = _one_commit(repo)
    heads = repo / ".git" / "refs" / "heads"
    for content in (f" {sha}\n", f"{sha}\v\n", f"{sha}\u00a0\n", "0" * 40 + "\n", f"{sha} junk\n"):
        (heads / "odd").write_text(content)
        gitrefs._MEMO.clear()
        assert gitrefs.read(str(repo / ".git")) is None, repr(content)
    (heads / "odd").unlink()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    os.symlink("main", heads / "alias")  # git follows a symlinked ref
    assert gitrefs.read(str(repo / ".git")) is None
    (heads / "alias").unlink()
    os.mkfifo(heads / "pipe")  # reading it would block: git's calls have a timeout, this read has none
    got = []
    reader = threading.Thread(target=lambda: got.append(gitrefs.read(str(repo / ".git"))), daemon=True)
    reader.start()
    reader.join(30)
    assert got == [None]
    (heads / "pipe").unlink()
    tags = repo / ".git" / "refs" / "tags"
    shutil.rmtree(tags)
    tags.write_text(sha + "\n")  # refs/tags a ref itself: git lists it
    assert gitrefs.read(str(repo / ".git")) is None


@pytest.mark.parametrize("config", [
    "[core] bare = true\n",  # one line
    "[core]\n\trepositoryformatversion = 2\n",
    "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tfoo = bar\n",
    "[core]\n\trepositoryformatversion = 0\n[extensions]\n\tobjectformat = sha256\n",
    "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = SHA1\n",
    "[include]\n\tpath = other.config\n",
])
def test_a_repository_config_git_reads_otherwise_is_left_to_git(repo, config):
    _one_commit(repo)
    path = repo / ".git" / "config"
    path.write_text(path.read_text() + config)
    gitrefs._MEMO.clear()
    assert gitrefs.read(str(repo / ".git")) is None


def test_another_users_repository_is_left_to_git(repo):
    """git reads a repository another user owns only where ``safe.directory`` says so."""
    _one_commit(repo)
    try:
        os.chown(repo, os.geteuid() + 1, -1)
    except PermissionError:
        pytest.skip("changing a folder's owner needs root")
    assert gitrefs.read(str(repo / ".git")) is None
