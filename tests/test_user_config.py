"""The user's config is read without parsing TOML on the hot paths (``config.load_user_config``):
a parsed copy beside ``config.toml`` stands for it while the file's stat is unchanged, and never
when it could be stale, damaged or unable to hold the values."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import subprocess_env
from loopx import config
from loopx.errors import StateError

SETTINGS = '[notify]\ndesktop = true\n\n[usage.claude-code]\nblock_tokens = 5000000\n'


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPX_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    config._memo.clear()
    yield tmp_path / "home"
    config._memo.clear()


def _settled(path) -> None:
    """Put the file's mtime out of the racy window (its ctime is the kernel's: tests that need
    that settled too patch the window instead)."""
    old = time.time() - 60
    os.utime(path, (old, old))


def test_a_settled_config_is_kept_parsed_and_read_back_the_same(home, monkeypatch):
    monkeypatch.setattr(config, "_RACY_NS", 0)
    (home / "config.toml").write_text(SETTINGS, encoding="utf-8")
    first = config.load_user_config()
    assert first == {"notify": {"desktop": True}, "usage": {"claude-code": {"block_tokens": 5000000}}}
    assert (home / config.PARSED).is_file()
    assert oct((home / config.PARSED).stat().st_mode & 0o777) == "0o600"  # webhook URLs may hold tokens
    config._memo.clear()
    again = config.load_user_config()
    assert again == first and again is not first
    again["notify"]["desktop"] = False  # a caller's change never reaches the next caller
    assert config.load_user_config()["notify"]["desktop"] is True


def test_a_fresh_process_reads_the_parsed_copy_without_importing_tomllib(home):
    (home / "config.toml").write_text(SETTINGS, encoding="utf-8")
    time.sleep(2.1)  # past the racy window of the file's ctime, which no call can set back
    code = ("import sys; from loopx import config; c = config.load_user_config(); "
            "print(c['usage']['claude-code']['block_tokens'], 'tomllib' in sys.modules)")
    env = subprocess_env({"LOOPX_HOME": str(home)})
    outs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
            for _ in range(2)]
    assert [o.stdout.split() for o in outs] == [["5000000", "True"], ["5000000", "False"]], outs[1].stderr


def test_an_edited_config_is_read_again(home, monkeypatch):
    monkeypatch.setattr(config, "_RACY_NS", 0)
    path = home / "config.toml"
    path.write_text(SETTINGS, encoding="utf-8")
    _settled(path)
    assert config.load_user_config()["notify"]["desktop"] is True
    path.write_text(SETTINGS.replace("desktop = true", "desktop = 1234"), encoding="utf-8")  # the same size
    assert config.load_user_config()["notify"]["desktop"] == 1234
    config._memo.clear()  # and from the copy, in another process
    assert config.load_user_config()["notify"]["desktop"] == 1234


def test_a_config_changed_within_the_racy_window_is_parsed_not_kept(home, monkeypatch):
    # every change counts as just made (a window of years: no timing margin on a loaded machine)
    monkeypatch.setattr(config, "_RACY_NS", 10**18)
    path = home / "config.toml"
    path.write_text(SETTINGS, encoding="utf-8")
    assert config.load_user_config()["notify"]["desktop"] is True
    assert not (home / config.PARSED).exists()
    # an edit in the same clock tick could keep every stamp: nothing from before is trusted
    st = path.stat()
    path.write_text(SETTINGS.replace("desktop = true", "desktop = 1234"), encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert config.load_user_config()["notify"]["desktop"] == 1234


@pytest.mark.parametrize("damage", ["garbage", "cut", "flipped byte", "other key", "not a dict", "empty"])
def test_a_damaged_or_foreign_parsed_copy_is_no_copy(home, monkeypatch, damage):
    import marshal
    import zlib

    monkeypatch.setattr(config, "_RACY_NS", 0)
    (home / "config.toml").write_text(SETTINGS, encoding="utf-8")
    want = config.load_user_config()
    copy = home / config.PARSED
    blob = copy.read_bytes()

    def sealed(entry) -> bytes:
        body = marshal.dumps(entry)
        return b"LXCF" + zlib.crc32(body).to_bytes(4, "little") + body

    entry = marshal.loads(blob[8:])
    bad = {"garbage": b"\xff\x00junk" * 9, "cut": blob[:-5], "flipped byte": blob[:-1] + bytes([blob[-1] ^ 1]),
           "other key": sealed(dict(entry, key=[1, 2, 3, 4, 5], config={"notify": {"desktop": False}})),
           "not a dict": sealed(dict(entry, config=["x"])), "empty": b""}[damage]
    copy.write_bytes(bad)
    config._memo.clear()
    assert config.load_user_config() == want
    assert copy.read_bytes() != bad  # written again from the file


def test_a_config_marshal_cannot_hold_is_read_every_time_and_never_kept(home, monkeypatch):
    monkeypatch.setattr(config, "_RACY_NS", 0)
    (home / "config.toml").write_text("[notify]\nsince = 2026-01-02T03:04:05Z\n", encoding="utf-8")
    assert config.load_user_config()["notify"]["since"].year == 2026  # a TOML date: a datetime
    assert not (home / config.PARSED).exists()
    assert config.load_user_config()["notify"]["since"].year == 2026


def test_a_broken_config_is_still_an_error_naming_the_file(home, monkeypatch):
    monkeypatch.setattr(config, "_RACY_NS", 0)
    path = home / "config.toml"
    path.write_text(SETTINGS, encoding="utf-8")
    config.load_user_config()
    path.write_text("[notify\n", encoding="utf-8")
    with pytest.raises(StateError, match="config.toml cannot be read"):
        config.load_user_config()
    path.unlink()
    assert config.load_user_config() == {}


def test_a_symlink_planted_at_the_parsed_copy_is_replaced_not_written_through(home, monkeypatch, tmp_path):
    monkeypatch.setattr(config, "_RACY_NS", 0)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me", encoding="utf-8")
    (home / config.PARSED).symlink_to(victim)
    (home / "config.toml").write_text(SETTINGS, encoding="utf-8")
    assert config.load_user_config()["notify"]["desktop"] is True
    assert victim.read_text(encoding="utf-8") == "keep me"
    assert not (home / config.PARSED).is_symlink()


def test_a_fifo_at_the_config_or_its_parsed_copy_is_never_waited_on(home, tmp_path):
    """A FIFO at ``config.toml`` is a config that cannot be read (one line naming it, exit 3), and
    one at the parsed copy is no copy: a plain ``open()`` of either waited for a writer forever,
    holding every command that reads a setting (usage limits, notifications, signing)."""
    from conftest import run_loopx

    os.mkfifo(home / "config.toml")
    r = run_loopx(["usage", "set", "--host", "claude-code", "--week-tokens", "7"], cwd=tmp_path, timeout=30)
    assert r.code == 3 and "config.toml cannot be read" in r.err and "hint:" in r.err, (r.code, r.err)
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 2
    (home / "config.toml").unlink()
    (home / "config.toml").write_text(SETTINGS, encoding="utf-8")
    _settled(home / "config.toml")
    os.mkfifo(home / config.PARSED)
    r = run_loopx(["usage", "set", "--host", "claude-code", "--week-tokens", "7"], cwd=tmp_path, timeout=30)
    assert r.code == 0, r.err
    config._memo.clear()
    got = config.load_user_config()
    assert got["usage"]["claude-code"] == {"block_tokens": 5000000, "week_tokens": 7} and got["notify"]["desktop"]
