"""Self-update against a local package index (a folder with built versions of loopx): ``plan``
names the channel and the exact pinned command for a venv pip install and an editable install;
``apply`` upgrades the venv install; a target whose smoke check fails is rolled back."""

from __future__ import annotations

import json
import os
import sys

import pytest

import wheelkit

OLD, NEW, BAD = "9.0.0", "9.1.0", "9.2.0"


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """(good index URL with OLD and NEW, bad index URL with OLD, NEW and a broken BAD)."""
    root = tmp_path_factory.mktemp("index")
    old, new = wheelkit.build_wheel(OLD), wheelkit.build_wheel(NEW)
    bad = wheelkit.build_wheel(BAD, broken=True)
    return (wheelkit.make_index(root / "good", [old, new]),
            wheelkit.make_index(root / "bad", [old, new, bad]),
            wheelkit.make_index(root / "only-bad", [bad]))


def _venv_with_old(path, indexes):
    py = wheelkit.make_venv(path)
    proc = wheelkit.run([py, "-m", "pip", "install", "--index-url", indexes[0], f"loopx=={OLD}"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory, indexes):
    """A fresh venv with loopx OLD installed by pip from the good index, shared by the tests that
    leave it as it is (they assert OLD is installed, so none of them may upgrade it)."""
    return _venv_with_old(tmp_path_factory.mktemp("venv") / "v", indexes)


@pytest.fixture
def own_venv(tmp_path, indexes):
    """A venv with loopx OLD for one test that upgrades it (the shared one must stay at OLD,
    whatever order the tests run in)."""
    return _venv_with_old(tmp_path / "own-venv", indexes)


def loopx(venv, *args, cwd=None, env=None):
    """The venv's loopx (on Windows through its python: a running loopx.exe cannot be replaced)."""
    exe = [wheelkit.venv_bin(venv, "python"), "-m", "loopx"] if os.name == "nt" else [wheelkit.venv_bin(venv, "loopx")]
    return wheelkit.run([*exe, *args], cwd=cwd, env=env)


def envelope(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plan_for_a_venv_pip_install(venv, indexes, tmp_path):
    proc = loopx(venv, "update", "plan", "--index-url", indexes[0], "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = envelope(proc)["data"]
    assert d["channel"] == "pip-venv" and not d["manual"]
    assert d["installed"] == OLD and d["target"] == NEW
    py = d["command"][0]
    assert os.path.realpath(os.path.dirname(py)) == os.path.realpath(wheelkit.venv_bin(venv, "python").parent)
    assert d["command"][1:] == ["-m", "pip", "install", "--index-url", indexes[0], f"loopx=={NEW}"]
    assert d["rollback"][-1] == f"loopx=={OLD}" and d["rollback"][:4] == d["command"][:4]
    text = loopx(venv, "update", "plan", "--index-url", indexes[0], cwd=tmp_path)
    assert f"loopx=={NEW}" in text.stdout and f"loopx=={OLD}" in text.stdout and "pip-venv" in text.stdout


def test_check_reports_the_newer_version(venv, indexes, tmp_path):
    env = wheelkit.pip_env(LOOPX_NO_UPDATE_CHECK="")
    proc = loopx(venv, "update", "check", "--index-url", indexes[0], "--json", cwd=tmp_path, env=env)
    d = envelope(proc)["data"]
    assert proc.returncode == 0 and d["newest"] == NEW and d["update_available"] is True
    off = loopx(venv, "update", "check", "--index-url", "http://192.0.2.1:9/simple", cwd=tmp_path)
    assert off.returncode == 0 and "not checked" in off.stdout  # LOOPX_NO_UPDATE_CHECK=1: no network


def test_update_errors_are_one_line_with_a_hint(venv, indexes, tmp_path):
    env = wheelkit.pip_env(LOOPX_NO_UPDATE_CHECK="")
    none = loopx(venv, "update", "plan", cwd=tmp_path, env=env)
    assert none.returncode == 2 and "hint:" in none.stderr and "Traceback" not in none.stderr
    missing = loopx(venv, "update", "plan", "--to", "7.7.7", "--index-url", indexes[0], cwd=tmp_path)
    assert missing.returncode == 2 and "7.7.7" in missing.stderr
    gone = loopx(venv, "update", "check", "--index-url", (tmp_path / "nope").as_uri(), cwd=tmp_path, env=env)
    assert gone.returncode == 3 and "does not exist" in gone.stderr
    offline = loopx(venv, "update", "check", "--index-url", "http://127.0.0.1:9/simple", cwd=tmp_path, env=env)
    assert offline.returncode == 3 and "could not reach the package index" in offline.stderr
    assert "offline" in offline.stderr and "Traceback" not in offline.stderr
    noyes = loopx(venv, "update", "apply", "--index-url", indexes[0], cwd=tmp_path)
    assert noyes.returncode == 2 and "--yes" in noyes.stderr
    assert "loopx 9.0.0" in loopx(venv, "--version").stdout  # nothing changed


def test_apply_upgrades_then_a_broken_target_is_rolled_back(own_venv, indexes, tmp_path):
    venv = own_venv
    up = loopx(venv, "update", "apply", "--yes", "--index-url", indexes[0], cwd=tmp_path)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"{OLD} -> {NEW}" in up.stdout
    assert loopx(venv, "--version").stdout.strip() == f"loopx {NEW}"

    again = loopx(venv, "update", "apply", "--yes", "--index-url", indexes[0], cwd=tmp_path)
    assert again.returncode == 0 and "nothing changed" in again.stdout

    bad = loopx(venv, "update", "apply", "--yes", "--to", BAD, "--index-url", indexes[1], "--json", cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    d = envelope(bad)["data"]
    assert d["result"] == "rolled_back"
    assert d["smoke"]["ok"] is False and d["rollback_smoke"]["ok"] is True
    assert loopx(venv, "--version").stdout.strip() == f"loopx {NEW}"
    # the index no longer offers the installed version: the way back is a wheel of the installation
    plan = envelope(loopx(venv, "update", "plan", "--to", BAD, "--index-url", indexes[2], "--json", cwd=tmp_path))
    assert plan["data"]["rollback_source"] == "backup"
    bad = loopx(venv, "update", "apply", "--yes", "--to", BAD, "--index-url", indexes[2], "--json", cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    d = envelope(bad)["data"]
    assert d["result"] == "rolled_back" and d["backup"].endswith(f"loopx-{NEW}-py3-none-any.whl")
    assert loopx(venv, "--version").stdout.strip() == f"loopx {NEW}"
    doc = loopx(venv, "doctor", "--json", cwd=tmp_path)
    checks = {c["id"]: c for c in envelope(doc)["data"]["checks"]}
    assert checks["install"]["status"] == "ok" and "virtual environment" in checks["install"]["finding"]


def test_plan_for_an_editable_install(tmp_path, indexes):
    checkout = wheelkit.source_copy(OLD, dest=tmp_path / "checkout")
    py = wheelkit.make_venv(tmp_path / "ve")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = wheelkit.run([py, "-m", "pip", "install", "-e", checkout], env=env)  # pip's own config
    if proc.returncode and ("No matching distribution" in proc.stderr or "Could not find" in proc.stderr):
        pytest.skip("pip cannot fetch the build backend (hatchling) for an editable install: no index reachable")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    venv = tmp_path / "ve"
    plan = loopx(venv, "update", "plan", "--index-url", indexes[0], "--json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    d = envelope(plan)["data"]
    assert d["channel"] == "editable" and d["manual"] is True
    assert any(f"pip install -e {checkout}" in s for s in d["steps"])
    assert not any("loopx==" in s for s in d["steps"])  # never proposes another channel
    apply = loopx(venv, "update", "apply", "--yes", "--index-url", indexes[0], cwd=tmp_path)
    assert apply.returncode == 3 and "pip install -e" in apply.stderr
    assert loopx(venv, "--version").stdout.strip() == f"loopx {OLD}"
    # the checkout moves on without a reinstall: doctor notices the stale metadata
    init = checkout / "src" / "loopx" / "__init__.py"
    init.write_text(init.read_text().replace(OLD, "9.9.9"))
    doc = envelope(loopx(venv, "doctor", "--json", cwd=tmp_path))
    checks = {c["id"]: c for c in doc["data"]["checks"]}
    assert checks["install"]["status"] == "warning" and f"says {OLD}" in checks["install"]["finding"]
    assert f"pip install -e {checkout}" in checks["install"]["fix"]


def test_version_ordering():
    from loopx.ops.update import newest, vkey

    vs = sorted(["1.0.0", "1.0.0rc1", "0.9", "1.0.0.post1", "1.0.0.dev3", "1.0"], key=vkey)
    assert vs[0] == "0.9" and vs[-1] == "1.0.0.post1"
    assert vs.index("1.0.0.dev3") < vs.index("1.0.0rc1") < vs.index("1.0.0")
    assert newest(["1.0.0", "2.0.0b1"]) == "1.0.0" and newest(["1.0.0", "2.0.0b1"], pre=True) == "2.0.0b1"


def test_channel_detection_from_metadata(tmp_path, monkeypatch):
    from loopx.ops import channel

    info = channel.detect()
    assert info["channel"] in ("editable", "pip-venv", "pip-system", "pip-user", "source", "uv-pip", "pip-target")
    assert info["python"] == sys.executable
    (tmp_path / "pipx_metadata.json").write_text("{}")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    got = channel._classify({"site_dir": "/x/lib/site-packages"}, None, "pip")
    assert got["channel"] == "pipx"
    (tmp_path / "pipx_metadata.json").unlink()
    (tmp_path / "uv-receipt.toml").write_text("")
    assert channel._classify({"site_dir": "/x"}, None, "uv")["channel"] == "uv-tool"
    assert channel._classify({"site_dir": "/x"}, None, "conda")["channel"] == "system"
    du = {"url": "https://github.com/o/loopx", "vcs_info": {"vcs": "git", "commit_id": "abc"}}
    assert channel._classify({"site_dir": "/x"}, du, "pip")["channel"] == "vcs"


def test_plan_for_a_pip_target_install(tmp_path, indexes):
    target = tmp_path / "target"
    proc = wheelkit.run([sys.executable, "-m", "pip", "install", "--index-url", indexes[0], "--target", target,
                         f"loopx=={OLD}"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = wheelkit.pip_env(PYTHONPATH=str(target))
    plan = wheelkit.run([sys.executable, "-m", "loopx", "update", "plan", "--index-url", indexes[0], "--json"],
                        cwd=tmp_path, env=env)
    d = envelope(plan)["data"]
    assert d["channel"] == "pip-target" and d["installed"] == OLD
    assert d["command"][-5:] == ["--target", str(target), "--index-url", indexes[0], f"loopx=={NEW}"]
    apply = wheelkit.run([sys.executable, "-m", "loopx", "update", "apply", "--yes", "--index-url", indexes[0]],
                         cwd=tmp_path, env=env)
    assert apply.returncode == 0, apply.stdout + apply.stderr
    ver = wheelkit.run([sys.executable, "-m", "loopx", "--version"], cwd=tmp_path, env=env)
    assert ver.stdout.strip() == f"loopx {NEW}"


def test_tool_channels_keep_their_tool():
    from loopx.ops.channel import install_command

    base = {"python": "/p/bin/python", "site_dir": "/p/lib/site-packages"}
    pipx = install_command(dict(base, channel="pipx"), "1.2.3", None, "/wheels")
    assert pipx[:3] == ["pipx", "install", "--force"] and pipx[-1] == "loopx==1.2.3"
    assert "--pip-args=--find-links=/wheels" in pipx
    uv = install_command(dict(base, channel="uv-tool"), "1.2.3", "https://i/simple", None)
    assert uv == ["uv", "tool", "install", "--force", "--index-url", "https://i/simple", "loopx==1.2.3"]
    user = install_command(dict(base, channel="pip-user"), "1.2.3", "https://i/simple", None)
    assert user[:5] == ["/p/bin/python", "-m", "pip", "install", "--user"]


@pytest.mark.skipif(os.name == "nt", reason="needs a POSIX pseudo-terminal")
def test_apply_on_a_terminal_asks_first(venv, indexes, tmp_path):
    import pty
    import select

    current = loopx(venv, "--version").stdout.split()[-1]
    other = OLD if current != OLD else NEW
    exe = str(wheelkit.venv_bin(venv, "loopx"))
    pid, fd = pty.fork()
    if pid == 0:  # the child: loopx with a terminal on stdin
        os.chdir(tmp_path)
        os.execve(exe, [exe, "update", "apply", "--to", other, "--index-url", indexes[0]], wheelkit.pip_env())
    out = b""
    answered = False
    while True:
        ready, _, _ = select.select([fd], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if not answered and b"proceed? [y/N]" in out:
            os.write(fd, b"n\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    text = out.decode("utf-8", "replace")
    assert answered, text
    assert os.waitstatus_to_exitcode(status) == 1
    assert f"loopx=={other}" in text and "cancelled; nothing changed" in text
    assert loopx(venv, "--version").stdout.split()[-1] == current


def test_old_backup_wheels_are_pruned(tmp_path):
    from loopx.ops.backup import prune

    for i in range(5):
        w = tmp_path / f"loopx-0.{i}.0-py3-none-any.whl"
        w.write_bytes(b"x")
        os.utime(w, (1000 + i, 1000 + i))
    prune(str(tmp_path), keep=str(tmp_path / "loopx-0.4.0-py3-none-any.whl"))
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [f"loopx-0.{i}.0-py3-none-any.whl" for i in (2, 3, 4)]


# ------------------------------------------------------------------ issue 9 items 8 and 20
def test_check_on_an_editable_checkout_shows_the_git_steps(cli, tmp_path, monkeypatch):
    """The README's own install (pip install -e .): no index is needed, the git steps are shown."""
    from loopx.ops import channel

    info = channel.detect()
    if info["channel"] not in ("editable", "source"):
        pytest.skip("the test suite runs from an installed wheel here")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPX_INDEX_URL", raising=False)
    r = cli("update", "check", json=True)
    assert r.code == 0, r.out
    d = r.data
    assert d["channel"] == info["channel"] and "source checkout" in d["reason"]
    assert d["steps"][0] == f"git -C {info['source_dir']} pull --ff-only"
    text = cli("update", "check")
    assert text.code == 0 and "source checkout" in text.out and "pull --ff-only" in text.out


def _index_page(root, files: list[tuple[str, dict]]):
    """A PEP 503 page for loopx whose anchors carry the PEP 592/503 data attributes."""
    import html

    proj = root / "loopx"
    proj.mkdir(parents=True)
    links = "".join(f'<a href="{html.escape(n)}#sha256=00"' + "".join(
        f' {k}="{html.escape(v)}"' if v is not None else f" {k}" for k, v in attrs.items()) + f">{n}</a>\n"
        for n, attrs in files)
    (proj / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root.as_uri()


def test_check_skips_yanked_releases_and_those_for_another_python(tmp_path, monkeypatch):
    from loopx.ops import update

    here = ".".join(map(str, sys.version_info[:2]))
    nxt = f"{sys.version_info[0]}.{sys.version_info[1] + 1}"
    url = _index_page(tmp_path, [
        ("loopx-9.0.0-py3-none-any.whl", {}),
        ("loopx-9.1.0-py3-none-any.whl", {"data-requires-python": f">={here}"}),
        ("loopx-9.2.0-py3-none-any.whl", {"data-yanked": "broken upload"}),
        ("loopx-9.3.0-py3-none-any.whl", {"data-yanked": None}),
        ("loopx-9.4.0-py3-none-any.whl", {"data-requires-python": f">={nxt}"}),
        ("loopx-9.5.0.tar.gz", {"data-requires-python": f"<{here}"}),
    ])
    assert update.available(url, None) == ["9.0.0", "9.1.0"]
    monkeypatch.setenv("LOOPX_NO_UPDATE_CHECK", "")
    d = update.check(url, None, info={"channel": "pip-venv", "summary": "venv", "python": sys.executable})
    assert d["newest"] == "9.1.0"
    # pinned, pip installs a yanked release; never one for another Python
    assert "9.2.0" in update.available(url, None, yanked=True) and "9.4.0" not in update.available(url, None, yanked=True)


def test_requires_python_of_wheels_in_a_plain_folder_is_read(tmp_path):
    import zipfile

    from loopx.ops import update

    nxt = f"{sys.version_info[0]}.{sys.version_info[1] + 1}"
    for v, rp in (("9.0.0", ">=3.8"), ("9.9.0", f">={nxt}")):
        with zipfile.ZipFile(tmp_path / f"loopx-{v}-py3-none-any.whl", "w") as zf:
            zf.writestr(f"loopx-{v}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: loopx\nVersion: {v}\n"
                                                         f"Requires-Python: {rp}\n\nbody\n")
    assert update.available(None, str(tmp_path)) == ["9.0.0"]


@pytest.mark.parametrize(("spec", "py", "ok"), [
    (">=3.11", "3.11.4", True), (">=3.12", "3.11.9", False), ("<3.12,>=3.10", "3.11.0", True),
    ("!=3.11.*", "3.11.2", False), ("==3.11.*", "3.11.2", True), ("~=3.10", "3.13.0", True),
    ("~=3.10.1", "3.11.0", False), (">3.11", "3.11.0", False), ("", "3.11.0", True), ("junk", "3.11.0", False),
])
def test_requires_python_specifiers(spec, py, ok):
    from loopx.ops.update import python_ok

    assert python_ok(spec, py) is ok


FAKE_LOOPX = """\
import json, sys
if sys.argv[1] == "--version":
    print("loopx 9.1.0")
else:  # doctor: exit 1 (findings) with an envelope longer than the report keeps of the output
    print(json.dumps({"schema": 1, "command": "doctor", "ok": False, "exit_code": 1,
                      "data": {"checks": [{"id": "path", "detail": "x" * 3000}]}}))
    print("a note on stderr", file=sys.stderr)
    sys.exit(1)
"""


def test_the_smoke_check_reads_doctors_envelope_whole_however_long(tmp_path):
    """A doctor with findings (exit 1) whose one-line envelope is longer than the 2,000 characters
    the report keeps passes the smoke check: under load a longer envelope rolled a good update back."""
    from loopx.ops import update

    script = tmp_path / "fake_loopx.py"
    script.write_text(FAKE_LOOPX)
    res = update.smoke([sys.executable, str(script)], "9.1.0")
    assert res["ok"], res
    assert len(res["steps"][1]["output"]) <= 2000  # the report still keeps only the tail
