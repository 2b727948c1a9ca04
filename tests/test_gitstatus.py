"""The stat cache of ``git status`` (``loopx/kernel/read/gitstatus.py``, issue 26): whatever the work
tree went through, the listing it gives is the one a plain ``git status`` gives at that moment, and
an unchanged, settled project is answered without starting git. Real repositories, real git: each
answer is compared with git's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopx.kernel.read import fingerprint, gitrefs, gitstatus
from loopx.kernel.storage import gitcli

pytestmark = pytest.mark.skipif(shutil.which("git") is None or os.name == "nt", reason="needs git (POSIX)")

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
SETTLE = 0.05  # the tests' racy window (s): a step waits longer than this before an answer may be kept


def git(cwd, *args) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **ENV}, capture_output=True, check=True).stdout


def plain(cwd) -> bytes:
    """What loopx asked git before the cache: the listing every answer must equal."""
    return git(cwd, *fingerprint.STATUS)


class Counted:
    """``listing``'s ``run``: starts the real git and counts the starts."""

    def __init__(self, cwd):
        self.cwd, self.n = str(cwd), 0

    def __call__(self, extra):
        self.n += 1
        return gitcli.output(self.cwd, *fingerprint.STATUS, *extra)


def answer(cwd, run=None) -> bytes | None:
    dot_git = os.path.join(str(cwd), ".git")
    known = gitrefs.read(dot_git)  # None where the refs reader defers to git (an included config)
    head, _refs, top = known or (git(cwd, "rev-parse", "HEAD").strip(), b"", str(cwd))
    return gitstatus.listing(str(cwd), dot_git, top, head, False, run or Counted(cwd))


@pytest.fixture()
def repo(tmp_path, monkeypatch):
    monkeypatch.setattr(gitstatus, "RACY_NS", int(SETTLE * 1e9))
    for k in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    r = tmp_path / "repo"
    (r / "src" / "deep").mkdir(parents=True)
    (r / ".loopx" / "cache").mkdir(parents=True)
    git(r, "init", "-q")
    (r / ".gitignore").write_text("build/\n*.log\n.loopx/\n")
    (r / "src" / "a.py").write_text("a = 1\n")
    (r / "src" / "deep" / "b.py").write_text("b = 2\n")
    (r / "README").write_text("read me\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "one")
    return r


def settle():
    time.sleep(SETTLE * 1.5)


def test_the_listing_without_ignored_lines_is_the_plain_one(repo):
    """The status that fills the cache asks git for ignored paths too; removed again, what is left is
    byte for byte the plain listing: modified, staged, deleted, renamed, untracked files and folders,
    a folder of ignored files only, names with spaces, quotes, newlines and non-ASCII letters."""
    (repo / "src" / "a.py").write_text("a = 10\n")
    (repo / "new file ü.txt").write_text("x")
    (repo / 'odd"\nname').write_text("x")
    (repo / "untracked" / "inner").mkdir(parents=True)
    (repo / "untracked" / "inner" / "f").write_text("x")
    (repo / "logs").mkdir()
    (repo / "logs" / "x.log").write_text("ignored")
    (repo / "build" / "out").mkdir(parents=True)
    (repo / "build" / "out" / "o").write_text("ignored")
    (repo / "src" / "trace.log").write_text("ignored")
    git(repo, "mv", "README", "README.md")
    os.remove(repo / "src" / "deep" / "b.py")
    (repo / "staged").write_text("s")
    git(repo, "add", "staged")
    raw = git(repo, *fingerprint.STATUS, gitstatus.IGNORED)
    kept, skip = gitstatus.split_ignored(raw)
    assert kept == plain(repo)
    assert b"R  README.md\0README\0" in kept  # a rename keeps its source path
    assert skip == frozenset({"build/", ".loopx/"})  # folders ignored by a pattern: not walked
    assert raw != kept  # git did report ignored paths


def test_a_settled_unchanged_project_is_answered_without_git(repo, monkeypatch):
    (repo / "src" / "a.py").write_text("a = 10\n")
    monkeypatch.setattr(gitstatus, "RACY_NS", 1 << 62)  # "changed just now" whatever the machine's load
    first = Counted(repo)
    assert answer(repo, first) == plain(repo) and first.n == 1
    again = Counted(repo)
    assert answer(repo, again) == plain(repo) and again.n == 1  # changed just now: the answer was not kept
    monkeypatch.setattr(gitstatus, "RACY_NS", int(SETTLE * 1e9))
    settle()
    kept = Counted(repo)
    answer(repo, kept)
    assert kept.n == 1  # taken after the entries settled: kept
    later = Counted(repo)
    assert answer(repo, later) == plain(repo) and later.n == 0
    (repo / "build").mkdir()
    settle()
    run = Counted(repo)
    answer(repo, run)  # a new (ignored) folder changed the top folder: asked once more, and kept
    assert run.n == 1
    (repo / "build" / "x").write_text("inside an ignored folder")
    quiet = Counted(repo)
    assert answer(repo, quiet) == plain(repo) and quiet.n == 0  # git does not look there either


def test_an_edit_that_restores_size_and_mtime_is_still_seen(repo):
    """``touch -d`` puts an mtime back; the ctime moves anyway (userspace cannot set it)."""
    f = repo / "src" / "a.py"
    settle()
    answer(repo)
    assert answer(repo) == plain(repo) == b""
    st = f.stat()
    f.write_text("a = 9\n")  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    run = Counted(repo)
    assert answer(repo, run) == plain(repo) == b" M src/a.py\0" and run.n == 1


@pytest.mark.parametrize("change", ["index", "head", "exclude", "gitignore", "config", "global_ignore", "attributes"])
def test_what_git_reads_besides_the_tree_invalidates(repo, change):
    (repo / "notes.txt").write_text("n")
    (repo / "src" / "a.py").write_text("a = 10\n")
    settle()
    answer(repo)
    kept = Counted(repo)
    assert answer(repo, kept) == plain(repo) and kept.n == 0
    if change == "index":
        git(repo, "add", "notes.txt")  # only the index moves
    elif change == "head":
        git(repo, "update-ref", "HEAD", git(repo, "commit-tree", "-m", "x", git(repo, "write-tree").strip()
                                           .decode()).strip().decode())
    elif change == "exclude":
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "exclude").write_text("notes.txt\n")
    elif change == "gitignore":
        with open(repo / ".gitignore", "a") as fh:
            fh.write("notes.txt\n")
    elif change == "config":
        git(repo, "config", "status.showUntrackedFiles", "no")  # overridden by -u normal; still a new answer
    elif change == "attributes":  # a stat-dirty file is hashed again by git, through the attributes
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "attributes").write_text("*.py text eol=crlf\n")
    else:
        (Path(os.environ["HOME"]) / ".config" / "git").mkdir(parents=True)
        (Path(os.environ["HOME"]) / ".config" / "git" / "ignore").write_text("notes.txt\n")
    run = Counted(repo)
    assert answer(repo, run) == plain(repo)
    assert run.n == 1


def test_what_is_never_cached(repo, monkeypatch):
    settle()
    answer(repo)
    assert answer(repo, Counted(repo)) == b""  # the usual case is cached...
    (repo / "vendored" / ".git").mkdir(parents=True)  # ... a nested repository is not
    settle()
    for _ in range(2):
        run = Counted(repo)
        assert answer(repo, run) == plain(repo) and run.n == 1
    shutil.rmtree(repo / "vendored")
    with open(repo / ".git" / "config", "a") as fh:
        fh.write("[include]\n\tpath = elsewhere\n")  # an included file could change unseen
    settle()
    for _ in range(2):
        run = Counted(repo)
        assert answer(repo, run) == plain(repo) and run.n == 1


@pytest.mark.parametrize("setting", ["GIT_INDEX_FILE", "GIT_CONFIG_COUNT", "replace"])
def test_what_changes_the_tree_git_compares_with_is_never_cached(repo, monkeypatch, setting):
    """Another index, config entries in the environment, a replace object: git reads something the
    stat data does not show, so it is asked every time (found by a reviewer: each was stale)."""
    if setting == "GIT_INDEX_FILE":
        shutil.copy(repo / ".git" / "index", repo / ".git" / "other-index")
        monkeypatch.setenv("GIT_INDEX_FILE", str(repo / ".git" / "other-index"))
    elif setting == "GIT_CONFIG_COUNT":
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.excludesFile")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(repo / "elsewhere"))
    else:
        other = git(repo, "commit-tree", "-m", "x", git(repo, "write-tree").strip().decode()).strip().decode()
        git(repo, "replace", git(repo, "rev-parse", "HEAD").strip().decode(), other)
    settle()
    for _ in range(2):
        run = Counted(repo)
        assert answer(repo, run) == plain(repo) and run.n == 1
    assert not (repo / ".loopx" / "cache" / "gitstatus.bin").exists()


def test_a_file_named_like_the_store_is_a_file_like_any_other(repo):
    (repo / "src" / ".loopx").write_text("not a store\n")
    git(repo, "add", "-f", "src/.loopx")
    git(repo, "commit", "-q", "-m", "odd name")
    settle()
    answer(repo)
    (repo / "src" / ".loopx").write_text("changed, same length?\n")
    run = Counted(repo)
    assert answer(repo, run) == plain(repo) == b" M src/.loopx\0" and run.n == 1


def test_a_project_in_a_subfolder_leaves_its_own_store_out(repo):
    """The store of a project in a subfolder that git does not ignore: its files (the cache file
    included) are loopx's own, out of every listing, cached or not."""
    (repo / ".gitignore").write_text("build/\n*.log\n")
    sub = repo / "app"
    (sub / ".loopx" / "cache").mkdir(parents=True)
    (sub / "main.py").write_text("x = 1\n")
    settle()
    dot_git = str(repo / ".git")
    head, _refs, top = gitrefs.read(dot_git)
    got = [gitstatus.listing(str(sub), dot_git, top, head, False, Counted(repo)) for _ in range(3)]
    assert (sub / ".loopx" / "cache" / "gitstatus.bin").exists()
    assert got[0] == got[1] == got[2] == b" M .gitignore\0?? app/\0"
    (sub / ".loopx" / "events.jsonl").write_text("{}\n")  # a write of the store: not a change
    assert gitstatus.listing(str(sub), dot_git, top, head, False, Counted(repo)) == got[0]


def test_a_git_without_ignored_matching_gets_the_plain_call(repo):
    def old_git(extra):
        return None if gitstatus.IGNORED in extra else gitcli.output(str(repo), *fingerprint.STATUS, *extra)

    (repo / "src" / "a.py").write_text("a = 10\n")
    settle()
    assert answer(repo, old_git) == plain(repo) == b" M src/a.py\0"


def test_the_cache_file_is_never_written_through_a_symlink(repo, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    os.symlink(victim, repo / ".loopx" / "cache" / "gitstatus.bin")
    settle()
    for _ in range(2):
        assert answer(repo) == plain(repo)
    assert victim.read_text() == "keep me"


def test_a_large_tree_is_not_walked_until_the_index_or_head_moves(repo, monkeypatch):
    monkeypatch.setattr(gitstatus, "CAP", 3)
    walks = []
    real = gitstatus._walk
    monkeypatch.setattr(gitstatus, "_walk", lambda top, skip: walks.append(1) or real(top, skip))
    settle()
    for _ in range(3):
        run = Counted(repo)
        assert answer(repo, run) == plain(repo) and run.n == 1
    assert len(walks) == 1  # the first found it large; the others asked git straight away
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "two")
    answer(repo)
    assert len(walks) == 2


@pytest.mark.parametrize("damage", [b"", b"garbage", b"\xe3" * 40, b"LXGS\0\0\0\0(\xff\xff\xff\x7f",
                                    b"(\xff\xff\xff\x7f", "crc"])
def test_a_damaged_cache_file_is_no_cache(repo, damage):
    settle()
    answer(repo)
    cache = repo / ".loopx" / "cache" / "gitstatus.bin"
    assert cache.exists()
    if damage == "crc":  # a body that unmarshals but whose CRC is wrong
        data = cache.read_bytes()
        damage = data[:4] + bytes(4) + data[8:]
    cache.write_bytes(damage)
    (repo / "src" / "a.py").write_text("a = 10\n")
    run = Counted(repo)
    assert answer(repo, run) == plain(repo) == b" M src/a.py\0" and run.n == 1


def test_no_cache_folder_means_no_cache_file(repo):
    shutil.rmtree(repo / ".loopx")
    settle()
    for _ in range(2):
        run = Counted(repo)
        assert answer(repo, run) == plain(repo) and run.n == 1
    assert not (repo / ".loopx").exists()


OPS = st.lists(st.tuples(st.sampled_from(["edit", "same_size", "restore_mtime", "new", "new_in_untracked",
                                          "new_ignored", "new_in_ignored", "remove", "add", "commit", "ignore",
                                          "mkdir", "rename", "settle", "ask"]),
                         st.integers(0, 3)), min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_every_answer_is_the_one_git_gives(repo, ops):
    """A stateful property: after any sequence of edits, restored mtimes, new, removed and renamed
    files, ignored paths, index and HEAD moves and pauses long enough for an answer to be kept,
    the cached listing is git's listing of that moment."""
    try:
        _replay(repo, ops)
    finally:
        git(repo, "reset", "-q", "--hard")
        git(repo, "clean", "-qfdx", "-e", ".loopx")


def _edit(repo: Path, path: Path, op: str, i: int) -> None:
    if path.exists():
        before = path.stat()
        text = path.read_text()
        path.write_text(text + "+" if op == "edit" else text[::-1] if len(set(text)) > 1 else text.upper())
        if op == "restore_mtime":
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _new(repo: Path, path: Path, op: str, i: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"new {i}\n")


def _new_in(folder: str):
    def make(repo: Path, path: Path, op: str, i: int) -> None:
        (repo / folder / f"d{i}").mkdir(parents=True, exist_ok=True)
        (repo / folder / f"d{i}" / "f").write_text("x")
    return make


def _ignore(repo: Path, path: Path, op: str, i: int) -> None:
    with open(repo / ".gitignore", "a") as fh:
        fh.write(f"{path.relative_to(repo)}\n")


STEPS = {
    "edit": _edit, "same_size": _edit, "restore_mtime": _edit, "new": _new,
    "new_in_untracked": _new_in("fresh"), "new_in_ignored": _new_in("build"),
    "new_ignored": lambda repo, path, op, i: (repo / f"x{i}.log").write_text("x"),
    "remove": lambda repo, path, op, i: path.exists() and path.unlink(),
    "add": lambda repo, path, op, i: git(repo, "add", "-A"),
    "commit": lambda repo, path, op, i: git(repo, "commit", "-q", "--allow-empty", "-m", f"c{i}"),
    "ignore": _ignore,
    "mkdir": lambda repo, path, op, i: (repo / "empty" / str(i)).mkdir(parents=True, exist_ok=True),
    "rename": lambda repo, path, op, i: path.exists() and path.rename(repo / f"renamed{i}"),
    "settle": lambda repo, path, op, i: settle(),
    "ask": lambda repo, path, op, i: None,
}


def _replay(repo: Path, ops) -> None:
    names = ["src/a.py", "src/deep/b.py", "README", "top.txt"]
    last = None
    for op, i in ops:
        STEPS[op](repo, repo / names[i], op, i)
        run = Counted(repo)
        assert answer(repo, run) == plain(repo), ops
        if op == "ask" and last == "settle":  # nothing changed since an answer taken on a settled tree
            assert run.n == 0, ops
        last = op
