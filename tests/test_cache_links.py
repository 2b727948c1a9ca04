"""A file under ``.loopx/cache/`` is loopx's own: a symlink planted at its path (by an agent that
can write the project, say) is replaced by the new file, never written through to its target."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loopx.kernel.storage import caches, fs
from loopx.kernel.storage.store import Store
from loopx.kernel.write import goals, todos

H = "human:tester"


@pytest.fixture
def victim(tmp_path):
    p = tmp_path / "victim.txt"
    p.write_text("keep me\n")
    return p


def _plant(project, name: str, victim) -> str:
    path = project / ".loopx" / "cache" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    os.symlink(victim, path)
    return str(path)


def _store(project):
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="links", goal_id="g1")
    return store


@pytest.mark.parametrize("name", ["live.bin", "snapshot.bin", "heads.bin", "decisions.bin"])
def test_a_planted_link_is_replaced_not_written_through(project, victim, monkeypatch, cli, name):
    store = _store(project)
    path = _plant(project, name, victim)
    if name == "heads.bin":
        monkeypatch.setattr(caches, "LIVE_EVERY", 1000)  # the write leaves the view: its heads go to heads.bin
    todos.add(store, H, "g1", "one")
    if name == "snapshot.bin":
        store.load(save_snapshot="refresh")
    if name == "decisions.bin":
        for _ in range(2):  # the first answer is recorded (a write); the second is kept
            assert cli("quota", "should-run", "--goal-id", "g1").code in (0, 1)
    assert victim.read_text() == "keep me\n"
    assert not os.path.islink(path) and os.path.isfile(path)  # loopx's own file now
    assert store.load(view="live")["todos"]  # and it reads back


def test_a_followed_write_still_follows(tmp_path):
    """What a user's own config relies on (a dotfile manager's link): the default follows."""
    target = tmp_path / "real.toml"
    target.write_text("old")
    link = tmp_path / "config.toml"
    os.symlink(target, link)
    fs.atomic_write(link, "new")
    assert os.path.islink(link) and target.read_text() == "new"
    fs.atomic_write(link, "mine", follow=False)
    assert not os.path.islink(link) and link.read_text() == "mine" and target.read_text() == "new"


# ---------------------------------------------------------------- a FIFO where a file belongs
def _cache_files() -> list[str]:
    """Every plain file ``layout.PROJECT`` names under ``cache/`` (no placeholder, no folder)."""
    from loopx.kernel.storage import layout

    return [p.split("/", 1)[1] for p, _ in layout.PROJECT
            if p.startswith("cache/") and "<" not in p and "*" not in p and not p.endswith("/")]


def _fifo_at(path) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


_HOT = (["status"], ["quota", "should-run"], ["todo", "add", "another", "--quiet"], ["next", "--quiet"])


@pytest.mark.parametrize("name", _cache_files())
def test_a_fifo_planted_at_a_cache_path_is_no_cache_and_nothing_waits_on_it(project, goal, name):
    """A FIFO at a cache file's path (planted by a process that can write the project) would make
    a plain ``open()`` wait for a writer forever: every hot command, and the hooks a host gives a
    minute, would hang. Such a file is no cache: the commands answer as without it."""
    from conftest import run_loopx

    _fifo_at(project / ".loopx" / "cache" / name)
    for args in (*_HOT, ["doctor"]):
        r = run_loopx(args, cwd=project, env={"LOOPX_AGENT": "tester-agent"}, timeout=30)
        assert r.code == 0, (name, args, r.out, r.err)
        assert "Traceback" not in r.err, (name, args, r.err)


@pytest.mark.parametrize("name", ["format.json", "node", "events.jsonl", "evidence.jsonl"])
def test_a_fifo_planted_at_a_store_file_is_an_error_not_a_hang(project, goal, name):
    """The same at one of the store's own files: a one-line error naming the file (exit 3 or 4),
    never a wait (the node id is rewritten by a writer, as when it is unreadable)."""
    from conftest import run_loopx

    _fifo_at(project / ".loopx" / name)
    for args in _HOT:
        r = run_loopx(args, cwd=project, env={"LOOPX_AGENT": "tester-agent"}, timeout=30)
        assert "Traceback" not in r.err, (name, args, r.err)
        assert r.code in (0, 3, 4), (name, args, r.code, r.err)
        if r.code:
            assert name in r.err and "hint:" in r.err, (name, args, r.err)
    if name != "node":  # doctor names it among the store's problems (a node id is rewritten)
        r = run_loopx(["doctor"], cwd=project, timeout=60)
        assert r.code == 1 and "not a regular file" in r.out and "Traceback" not in r.err, (name, r.out, r.err)


def test_fifos_at_the_hooks_files_and_a_link_at_node_neither_hang_nor_reach_outside(project, goal, victim):
    """The hooks' own files (the stop hook's per-session counter, the guard's per-run call count)
    as FIFOs: the hooks answer without waiting. A symlink planted at ``.loopx/node`` aims no write
    elsewhere: the writer that gives the clone a node id replaces the link itself."""
    import hashlib
    import json

    from conftest import run_loopx

    hooks = project / ".loopx" / "cache" / "hooks"
    key = hashlib.sha256(b"s1").hexdigest()[:16]
    _fifo_at(hooks / f"stop-claude-code-{key}.json")
    _fifo_at(hooks / "guard-run-x.calls")
    stop = {"hook_event_name": "Stop", "session_id": "s1", "cwd": str(project), "stop_hook_active": False}
    r = run_loopx(["hook", "stop", "--host", "claude-code"], cwd=project, input=json.dumps(stop), timeout=30)
    assert r.code == 0 and "Traceback" not in r.err, r.err
    pre = {"hook_event_name": "PreToolUse", "session_id": "s1", "cwd": str(project), "tool_name": "Bash",
           "tool_input": {"command": "ls"}}
    r = run_loopx(["hook", "pre-tool", "--host", "claude-code"], cwd=project, input=json.dumps(pre), timeout=30,
                  env={"LOOPX_RUN_ID": "run-x", "LOOPX_PROJECT_DIR": str(project)})
    assert r.code == 0 and "Traceback" not in r.err, r.err

    node = project / ".loopx" / "node"
    node.unlink()
    node.symlink_to(victim)
    assert run_loopx(["todo", "add", "after the link", "--quiet"], cwd=project, timeout=30).code == 0
    assert victim.read_text() == "keep me\n"
    assert not node.is_symlink() and node.read_text().startswith("n-")


def test_a_node_file_that_cannot_be_read_is_an_error_not_a_new_identity(project, goal, monkeypatch, cli):
    """``.loopx/node`` names this clone: its runs and claims are "mine" by it. One that is there but
    cannot be read (its permissions, an I/O error) is an error naming it, for readers and writers,
    and is never replaced: a new id handed this clone's open runs and claims to a node no longer here
    (the tests run as root, which no permission stops: the read is made to fail as a denied one does)."""
    from loopx.kernel.storage import store as store_module

    node = project / ".loopx" / "node"
    before = node.read_text()
    assert cli("next", "--agent", "a1").code == 0  # an open run and a claim of this clone
    real = fs.read_bytes

    def denied(path, limit=None):
        if os.path.basename(os.fspath(path)) == "node":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, limit)

    monkeypatch.setattr(store_module, "read_bytes", denied)
    for args in (["status"], ["todo", "add", "x", "--quiet"], ["next", "--agent", "a2"]):
        r = cli(*args)
        assert r.code == 3, (args, r.code, r.err)
        assert "node cannot be read: Permission denied" in r.err and "hint:" in r.err, r.err
    assert node.read_text() == before
    doc = cli("doctor", json=True)  # its own words, not "the check itself failed ... report it"
    found = [c for c in doc.data["checks"] if "node cannot be read" in c["finding"]]
    assert found and all(c["status"] == "error" and "report it" not in str(c) for c in found), doc.data["checks"]
    monkeypatch.setattr(store_module, "read_bytes", real)
    r = cli("status", json=True)
    assert r.code == 0 and node.read_text() == before


def _returns_within(fn, seconds: float = 20):
    """``fn()``'s value, run in a thread that must end within ``seconds`` (a plain ``open()`` of a
    FIFO never does: the test then fails instead of hanging the suite)."""
    import threading

    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} waited on a FIFO"
    return out[0]


def test_a_fifo_at_the_user_registry_is_no_registry_and_connect_replaces_it(project, tmp_path, monkeypatch):
    """``$LOOPX_HOME/projects.json`` (the dashboard's, ``inbox``'s and ``connect``'s list of projects)
    as a FIFO: read as an empty registry, never waited on; ``connect`` writes a real one in its place."""
    from conftest import run_loopx
    from loopx.kernel.storage import registry

    path = tmp_path / "fifo-home" / "projects.json"
    _fifo_at(path)
    env = {"LOOPX_HOME": str(path.parent)}
    r = run_loopx(["inbox"], cwd=project, env=env, timeout=30)
    assert r.code == 0 and "Traceback" not in r.err, r.err
    r = run_loopx(["connect"], cwd=project, env=env, timeout=30)
    assert r.code == 0, r.err
    assert path.is_file() and str(project.resolve()) in path.read_text()
    _fifo_at(path)
    monkeypatch.setenv("LOOPX_HOME", str(path.parent))
    assert _returns_within(registry.load) == {}


def test_a_fifo_at_the_stores_gitignore_or_a_holdout_file_is_never_waited_on(project, tmp_path, monkeypatch):
    """``.loopx/.gitignore`` (lines added by parallel runs and trials, ``fs.ensure_lines``) and a
    promotion's holdout result in the user's data folder, each a FIFO: left alone and no result,
    where a plain ``open()`` waited for a writer forever."""
    from loopx import config
    from loopx.kernel.policy import trialstep

    gi = project / ".loopx" / ".gitignore"
    _fifo_at(gi)
    _returns_within(lambda: fs.ensure_lines(str(gi), ["worktrees/"]))
    assert not gi.is_file()  # left alone
    store = _store(project)
    monkeypatch.setattr(config, "data_home", lambda: str(tmp_path / "data"))
    hold = trialstep.holdout_file(store, "gate-1")
    _fifo_at(Path(hold))
    assert _returns_within(lambda: trialstep.read_holdout(store, "gate-1")) is None


# ---------------------------------------------------------------- a huge sparse file where a small one belongs
def _sparse(path, size: int = 50 << 30) -> None:
    """A file of ``size`` bytes (50 GB) that costs no disk space, as an agent can make in no time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size)


@pytest.mark.parametrize("name", ["cache/live.bin", "cache/decisions.bin", "cache/sync.json"])
def test_a_huge_sparse_cache_is_no_cache(project, goal, name):
    """A cache read whole, made a 50 GB sparse file: the read failed for memory (exit 70, "internal
    error") on every command. Past ``fs.MOST_CACHE`` it is no cache: the commands answer as without it."""
    from conftest import run_loopx

    _sparse(project / ".loopx" / name)
    for args in _HOT:
        r = run_loopx(args, cwd=project, env={"LOOPX_AGENT": "tester-agent"}, timeout=60)
        assert r.code in (0, 1) and "Traceback" not in r.err and "internal error" not in r.err, (name, args, r.err)


def test_a_huge_sparse_format_json_or_user_config_is_an_error_naming_it(project, goal, tmp_path):
    """``format.json`` or the user's ``config.toml`` at 50 GB: one line naming the file (exit 3), not
    a failure for memory."""
    from conftest import run_loopx

    fmt = project / ".loopx" / "format.json"
    saved = fmt.read_bytes()
    _sparse(fmt)
    r = run_loopx(["status"], cwd=project, timeout=60)
    assert r.code == 3 and "format.json is unreadable: File too large" in r.err and "hint:" in r.err, r.err
    fmt.write_bytes(saved)
    home = tmp_path / "huge-home"
    _sparse(home / "config.toml")
    r = run_loopx(["usage", "set", "--host", "claude-code", "--week-tokens", "7"], cwd=project, timeout=60,
                  env={"LOOPX_HOME": str(home)})
    assert r.code == 3 and "config.toml cannot be read" in r.err and "too large" in r.err, r.err
