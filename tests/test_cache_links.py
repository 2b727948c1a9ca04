"""A file under ``.loopx/cache/`` is loopx's own: a symlink planted at its path (by an agent that
can write the project, say) is replaced by the new file, never written through to its target."""

from __future__ import annotations

import os

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
