"""loopx.codecache: the hot commands' modules load from one file, and that file is never trusted
over the sources (an edit, a damaged file, another interpreter's file, a folder that cannot hold
it), as Python's own bytecode cache is not.

Every test works on a copy of the package (``tmp/pkg/loopx``) run as a real process with
bytecode writing on, so the repository's own ``__pycache__`` is never touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, subprocess_env

TAG = sys.implementation.cache_tag


@pytest.fixture
def pkg(tmp_path) -> Path:
    """A copy of src/loopx under tmp/pkg (no bytecode of its own yet)."""
    root = tmp_path / "pkg"
    shutil.copytree(REPO / "src" / "loopx", root / "loopx", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _env(pkg: Path, **extra: str) -> dict:
    env = subprocess_env(extra)
    env["PYTHONPATH"] = str(pkg)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    return env


def _loopx(pkg: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loopx", *args], cwd=cwd, env=_env(pkg, **env),
                          capture_output=True, text=True, timeout=120)


def _served(pkg: Path, module: str) -> str:
    """Which loader a fresh process uses for ``module``: ``Finder`` (the file) or the normal one."""
    code = f"import {module} as m, sys; print(type(m.__loader__).__name__, m.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=_env(pkg), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _cache(pkg: Path) -> Path:
    return pkg / "loopx" / "__pycache__" / f"hot.{TAG}.bin"


def _header(pkg: Path) -> tuple[dict, dict]:
    """The cache file's (entries, sets)."""
    import marshal

    data = _cache(pkg).read_bytes()
    return marshal.loads(data[12:12 + int.from_bytes(data[8:12], "little")])


@pytest.fixture
def proj(tmp_path, pkg) -> Path:
    p = tmp_path / "proj"
    p.mkdir()
    assert _loopx(pkg, p, "connect").returncode == 0
    assert _loopx(pkg, p, "start-goal", "--goal-text", "cache me", "--todo", "first").returncode == 0
    return p


def test_a_hot_command_fills_the_file_and_the_next_process_loads_from_it(pkg, proj):
    first = _loopx(pkg, proj, "status")
    assert first.returncode == 0, first.stderr
    assert _cache(pkg).is_file()
    loader, file = _served(pkg, "loopx.kernel.storage.store").split()
    assert loader == "Finder" and file == str(pkg / "loopx" / "kernel" / "storage" / "store.py")
    again = _loopx(pkg, proj, "status")
    assert (again.returncode, again.stdout) == (0, first.stdout)
    # a package's __init__ keeps its own loader (importlib.resources reads the dashboard's files through it)
    assert _served(pkg, "loopx.dashboard").split()[0] != "Finder"
    res = subprocess.run([sys.executable, "-c", "from importlib import resources; "
                          "print(resources.files('loopx.dashboard').joinpath('static').is_dir())"],
                         env=_env(pkg), capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "True", res.stderr


def test_an_edited_module_is_loaded_from_its_source_and_taken_in_again(pkg, proj):
    assert _loopx(pkg, proj, "status").returncode == 0
    src = pkg / "loopx" / "commands" / "status.py"
    text = src.read_text(encoding="utf-8")
    edited = text.replace('"no goals yet"', '"NO GOALS YET"').replace('lines = [f"project {', 'lines = [f"PROJECT {')
    assert len(edited) == len(text) and edited != text  # the same size: only the time can tell
    src.write_text(edited, encoding="utf-8")
    out = _loopx(pkg, proj, "status")
    assert out.returncode == 0 and out.stdout.startswith("PROJECT "), out.stdout
    assert _served(pkg, "loopx.commands.status").split()[0] == "Finder"  # taken in again, edited
    assert _loopx(pkg, proj, "status").stdout.startswith("PROJECT ")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other interpreter"])
def test_a_damaged_or_foreign_file_is_no_file(pkg, proj, damage):
    good = _loopx(pkg, proj, "status")
    cache = _cache(pkg)
    data = cache.read_bytes()
    bad = {"garbage": b"\x00not a cache\xff" * 50, "truncated": data[: len(data) // 2],
           "other interpreter": data[:4] + b"\x00\x00\r\n" + data[8:]}[damage]
    cache.write_bytes(bad)
    out = _loopx(pkg, proj, "status")
    assert (out.returncode, out.stdout, out.stderr) == (0, good.stdout, "")
    assert cache.read_bytes() != bad  # written anew by that command
    assert _served(pkg, "loopx.kernel.storage.store").split()[0] == "Finder"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_at_the_files_path_is_no_file_and_nothing_waits_on_it(pkg, proj):
    """A FIFO put where the code file belongs would make a plain open wait for a writer, and with
    it every loopx command: it is passed over (opened without waiting), the command answers as
    without a file and writes a real one in its place."""
    good = _loopx(pkg, proj, "status")
    cache = _cache(pkg)
    cache.unlink()
    os.mkfifo(cache)
    out = _loopx(pkg, proj, "status")  # _loopx gives up after 120 s: a wait fails the test
    assert (out.returncode, out.stdout, out.stderr) == (0, good.stdout, "")
    assert cache.is_file() and not cache.is_fifo()
    assert _served(pkg, "loopx.kernel.storage.store").split()[0] == "Finder"


def test_a_link_at_the_files_path_is_replaced_never_written_through(pkg, proj, tmp_path):
    """A symlink put where the code file belongs would aim loopx's write at its target (any file
    the user may write; /dev/zero under root): the write replaces the link itself."""
    good = _loopx(pkg, proj, "status")
    cache = _cache(pkg)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    cache.unlink()
    cache.symlink_to(victim)
    out = _loopx(pkg, proj, "status")
    assert (out.returncode, out.stdout, out.stderr) == (0, good.stdout, "")
    assert victim.read_text() == "keep me"
    assert cache.is_file() and not cache.is_symlink()


@pytest.mark.parametrize("how", ["PYTHONDONTWRITEBYTECODE", "no room"])
def test_nothing_is_written_where_python_would_write_no_bytecode(pkg, proj, how):
    env = {"PYTHONDONTWRITEBYTECODE": "1"} if how == "PYTHONDONTWRITEBYTECODE" else {}
    cache = _cache(pkg)
    if cache.exists():
        cache.unlink()
    if how == "no room":  # a file where the folder should be: nothing can be written under it
        shutil.rmtree(cache.parent, ignore_errors=True)
        cache.parent.write_text("not a folder")
    out = _loopx(pkg, proj, "status", **env)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert not cache.exists()


def test_a_cold_command_adds_nothing_and_the_file_keeps_every_hot_commands_modules(pkg, proj):
    assert _loopx(pkg, proj, "status").returncode == 0
    assert _loopx(pkg, proj, "todo", "list").returncode == 0
    assert _loopx(pkg, proj, "goal", "list").returncode == 0  # not a fast-path command

    names = set(_header(pkg)[0])
    assert {"loopx.commands.status", "loopx.commands.todo"} <= names
    assert "loopx.commands.goal" not in names
    assert {"loopx.kernel", "loopx.kernel.storage", "loopx.commands"} <= names  # the packages they load
    assert not {"loopx", "loopx.codecache", "loopx.dashboard"} & names  # the finder's own, and a cold package
    assert not [p for p in os.listdir(_cache(pkg).parent) if p.endswith(".tmp")]


def test_a_module_in_the_file_still_runs_with_python_m(pkg, proj):
    """``python -m loopx.<module>`` (the sandbox's launcher is one) takes the code from the finder."""
    assert _loopx(pkg, proj, "status").returncode == 0
    assert _served(pkg, "loopx.kernel.storage.clock").split()[0] == "Finder"
    code = "import runpy, sys; sys.argv = ['x']; g = runpy.run_module('loopx.kernel.storage.clock'); print(g['UTC'])"
    out = subprocess.run([sys.executable, "-c", code], env=_env(pkg), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "UTC", out.stderr


def test_a_copied_package_runs_its_own_code_never_the_originals(pkg, proj, tmp_path):
    """The file names modules, not paths: a copy with the original's __pycache__ (cp -a, rsync -a, a
    relocated venv) serves its own files, and its code objects name them (inspect, tracebacks)."""
    assert _loopx(pkg, proj, "status").returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(pkg, copy)  # keeps mtimes and the cache file
    src = copy / "loopx" / "commands" / "status.py"
    src.write_text(src.read_text(encoding="utf-8").replace('lines = [f"project {', 'lines = [f"PROJECT {'),
                   encoding="utf-8")
    assert _loopx(copy, proj, "status").stdout.startswith("PROJECT ")
    shutil.rmtree(pkg)  # the original is gone: the copy's code must still name its own files
    code = ("import inspect, loopx.kernel.storage.clock as c; "
            "print(type(c.__loader__).__name__, c.now.__code__.co_filename); inspect.getsource(c.now)")
    out = subprocess.run([sys.executable, "-c", code], env=_env(copy), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Finder", str(copy / "loopx" / "kernel" / "storage" / "clock.py")]


def test_a_package_of_the_same_name_wins_over_a_module_in_the_file(pkg, proj):
    assert _loopx(pkg, proj, "status").returncode == 0
    shadow = pkg / "loopx" / "kernel" / "storage" / "clock"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("from _datetime import UTC\nMARK = 'package'\n")
    code = "import loopx.kernel.storage.clock as c; print(getattr(c, 'MARK', None))"
    out = subprocess.run([sys.executable, "-c", code], env=_env(pkg), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "package", out.stderr


def test_a_killed_writers_temporary_file_is_removed_by_a_later_write_and_reload_adds_no_finder(pkg, proj):
    cache = _cache(pkg)
    cache.parent.mkdir(parents=True, exist_ok=True)
    left = cache.parent / f"{cache.name}.99999.a1b2c3.tmp"  # fs.atomic_write's temporary name
    left.write_bytes(b"LXC1 half written")
    os.utime(left, (0, 0))  # long ago
    assert _loopx(pkg, proj, "status").returncode == 0  # writes the file, and sweeps
    assert cache.is_file() and not left.exists()
    code = ("import importlib, sys, loopx; importlib.reload(loopx); importlib.reload(loopx); "
            "print(sum(type(f).__name__ == 'Finder' for f in sys.meta_path))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(pkg), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "1", out.stderr


def test_without_os_pread_every_module_loads_the_normal_way(pkg, proj):
    """Windows has no os.pread: there the file is neither read nor written, and loopx works."""
    code = ("import os; del os.pread; import sys; sys.argv = ['loopx', 'status']; "
            "from loopx import codecache, cli; print(codecache.path()); cli.entry()")
    out = subprocess.run([sys.executable, "-c", code], cwd=proj, env=_env(pkg), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("None\nproject "), out.stdout + out.stderr
    assert not _cache(pkg).exists()


_TRACE = """
import sys, _frozen_importlib as boot
asked = []
plain = boot._find_and_load
def traced(name, import_):
    if name not in sys.modules:
        asked.append(name)
    return plain(name, import_)
boot._find_and_load = traced  # what an import statement calls for a module not yet loaded
"""


def _imported(pkg: Path, code: str) -> dict:
    """Run ``code`` in a fresh process after ``_TRACE``: the modules the import system loaded
    (``asked``) and which loader each loopx module has."""
    show = ("import json; print(json.dumps({'asked': asked, 'loaders': {n: type(m.__loader__).__name__ "
            "for n, m in sys.modules.items() if n.startswith('loopx.') and m is not None}}))")
    out = subprocess.run([sys.executable, "-c", _TRACE + code + "\n" + show], env=_env(pkg), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_a_module_from_the_file_brings_its_imports_without_the_import_system(pkg, proj):
    """A module served from the file loads the loopx modules its body imports first, straight from
    the file: the import system is asked for the module itself, not for each of its imports."""
    assert _loopx(pkg, proj, "status").returncode == 0
    got = _imported(pkg, "import loopx.kernel.storage.store")
    deps = ["loopx.kernel.storage.fold", "loopx.kernel.storage.caches", "loopx.kernel.storage.cjson",
            "loopx.config", "loopx.errors"]
    assert all(got["loaders"][d] == "Finder" for d in ["loopx.kernel.storage.store", *deps]), got["loaders"]
    assert "loopx.kernel.storage.store" in got["asked"]
    assert not set(deps) & set(got["asked"]), got["asked"]
    assert got["loaders"]["loopx.kernel.storage"] == "Finder"  # a package, served too
    # a second thread running: each module goes through the import system and its locks
    threaded = _imported(pkg, "import threading; stop = threading.Event(); "
                              "threading.Thread(target=stop.wait, daemon=True).start(); "
                              "import loopx.kernel.storage.store; stop.set()")
    assert set(deps) <= set(threaded["asked"]), threaded["asked"]


def test_an_import_that_fails_inside_the_file_fails_where_the_statement_asks_for_it(pkg, proj):
    """A module whose own import fails while it is loaded ahead of the statement that needs it is
    left out of sys.modules, and that statement raises as it would without the file."""
    assert _loopx(pkg, proj, "todo", "add", "a writer's modules in the file").returncode == 0
    assert _served(pkg, "loopx.kernel.write.runs").split()[0] == "Finder"
    code = ("sys.modules['loopx.kernel.storage.cjson'] = None  # an import of it now fails\n"
            "try:\n    import loopx.kernel.write.runs\nexcept ImportError as exc:\n    print('raised', exc)\n"
            "print(sorted(n for n in ('loopx.kernel.write.runs', 'loopx.kernel.storage.store') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", "import sys\n" + code], env=_env(pkg), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("raised ") and "cjson" in lines[0], out.stdout
    assert lines[1] == "[]", out.stdout


def test_a_served_package_gives_importlib_resources_its_folder(pkg, proj):
    assert _loopx(pkg, proj, "status").returncode == 0
    code = ("import loopx.kernel.storage, sys\nfrom importlib import resources\n"
            "print(type(sys.modules['loopx.kernel.storage'].__loader__).__name__, "
            "resources.files('loopx.kernel.storage').joinpath('fold.py').is_file())")
    out = subprocess.run([sys.executable, "-c", code], env=_env(pkg), capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["Finder", "True"], out.stderr


def test_the_imports_kept_for_a_module_are_those_its_body_always_runs(tmp_path):
    """Top-level imports and those in a top-level ``try`` count; one under an ``if`` (such as
    ``TYPE_CHECKING``) or inside a function does not, nor does a name that is not a loopx module."""
    from loopx import codecache

    src = tmp_path / "probe.py"
    src.write_text("from __future__ import annotations\n"
                   "import os\n"
                   "from loopx.kernel.storage import clock, layout\n"
                   "from loopx.errors import UsageError\n"
                   "try:\n    from loopx.kernel.storage import fcntl_missing, ids\nexcept ImportError:\n    pass\n"
                   "if False:\n    from loopx.kernel.policy import decide\n"
                   "def f():\n    from loopx.kernel.policy import turn\n", encoding="utf-8")
    assert codecache._imports(str(src)) == ("loopx.kernel.storage", "loopx.kernel.storage.clock",
                                            "loopx.kernel.storage.layout", "loopx.errors",
                                            "loopx.kernel.storage.ids")


def test_a_module_its_package_imports_first_runs_once(pkg, proj):
    """A module whose package's ``__init__`` imports it (``loopx.kernel.write`` imports ``runs``)
    is not loaded a second time by the module that asked for it: one module object, one run."""
    probe = pkg / "loopx" / "zz_probe.py"
    probe.write_text("from loopx.kernel.write.runs import reap_drafts\n", encoding="utf-8")
    fill = ("import loopx.zz_probe\nfrom loopx import codecache\nfrom loopx.kernel.storage import fs\n"
            "print(codecache.update(fs))")
    out = subprocess.run([sys.executable, "-c", fill], env=_env(pkg), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr
    count = ("import sys\nruns = []\n"
             "sys.addaudithook(lambda ev, args: ev == 'exec' and getattr(args[0], 'co_filename', '')"
             ".endswith('write/runs.py') and args[0].co_name == '<module>' and runs.append(1))\n"
             "import loopx.zz_probe as z\n"
             "r = sys.modules['loopx.kernel.write.runs']\n"
             "print(len(runs), z.reap_drafts is r.reap_drafts, sys.modules['loopx.kernel.write'].runs is r, "
             "type(r.__loader__).__name__)")
    out = subprocess.run([sys.executable, "-c", count], env=_env(pkg), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "True", "True", "Finder"], out.stdout


def test_a_damaged_entry_loads_the_normal_way_and_the_others_still_come_from_the_file(pkg, proj):
    """Entries are checked when used: one whose code would lie past the file's end (or whose fields
    are not what codecache writes) is the normal way for its module alone, and the next write
    leaves it out and takes the module in again."""
    import marshal

    assert _loopx(pkg, proj, "status").returncode == 0
    cache = _cache(pkg)
    data = cache.read_bytes()
    size = int.from_bytes(data[8:12], "little")
    header, sets = marshal.loads(data[12:12 + size])
    e = header["loopx.kernel.storage.store"]
    header["loopx.kernel.storage.store"] = (e[0], e[1], len(data), e[3], e[4], e[5])  # past the end
    header["loopx.kernel.storage.fold"] = ("not", "an", "entry")
    header["loopx.no.such.module"] = (1,)  # no command loads it: only the write can drop it
    head = marshal.dumps((header, sets))
    cache.write_bytes(data[:8] + len(head).to_bytes(4, "little") + head + data[12 + size:])
    assert "loopx.kernel.storage.store" in sets["status"][2]  # its code is in the set too: never served from it
    assert _served(pkg, "loopx.kernel.storage.store").split()[0] != "Finder"
    assert _served(pkg, "loopx.kernel.storage.fold").split()[0] != "Finder"
    assert _served(pkg, "loopx.kernel.storage.layout").split()[0] == "Finder"
    good = _loopx(pkg, proj, "status")
    assert good.returncode == 0 and good.stderr == ""
    assert _served(pkg, "loopx.kernel.storage.store").split()[0] == "Finder"  # written anew
    assert _served(pkg, "loopx.kernel.storage.fold").split()[0] == "Finder"
    assert "loopx.no.such.module" not in _header(pkg)[0]


_SET_PROBE = """
import sys
sys.argv = ["loopx", "status"]
import loopx
finder = next(f for f in sys.meta_path if type(f).__name__ == "Finder")
import gc
import loopx.kernel.storage.store as store
print(finder.key, finder.set_read, finder.set_damaged, type(store.__loader__).__name__,
      store.Store.open.__code__.co_filename == store.__file__, gc.get_freeze_count() > 0)
"""


def _set_probe(pkg: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _SET_PROBE], env=_env(pkg), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_command_reads_its_modules_from_its_set_in_one_piece(pkg, proj):
    """The file keeps, per command, the code of the modules its runs loaded, marshalled together;
    the command's next run reads that set and serves its modules from it. A module a later run did
    not need leaves the set (it comes from its own entry when a run needs it)."""
    first = _loopx(pkg, proj, "status")  # decides, and keeps the decision
    entries, sets = _header(pkg)
    names = sets["status"][2]
    assert {"loopx.commands.status", "loopx.kernel.storage.store", "loopx.cli"} <= set(names) <= set(entries)
    assert "loopx.kernel.policy.decide" in names
    assert _set_probe(pkg) == ["status", "True", "False", "Finder", "True", "True"]
    again = _loopx(pkg, proj, "status")  # answers from the kept decision: the rules are not loaded
    assert (again.returncode, again.stdout, again.stderr) == (0, first.stdout, "")
    names = _header(pkg)[1]["status"][2]
    assert "loopx.kernel.policy.decide" not in names and "loopx.kernel.storage.store" in names
    assert "loopx.kernel.policy.decide" in _header(pkg)[0]  # still in the file, on its own
    before = _cache(pkg).read_bytes()
    assert _loopx(pkg, proj, "status").stdout == first.stdout
    assert _cache(pkg).read_bytes() == before  # the same modules: nothing to write


def test_a_damaged_set_is_no_set_and_is_written_again(pkg, proj):
    """A set whose bytes are not its code objects serves nothing (each module then comes from its
    own entry) and the command that found it writes the file again."""
    good = _loopx(pkg, proj, "status")
    cache = _cache(pkg)
    data = bytearray(cache.read_bytes())
    base = 12 + int.from_bytes(data[8:12], "little")
    offset, length, _ = _header(pkg)[1]["status"]
    data[base + offset:base + offset + length] = (b"\x00garbage" * (length // 8 + 1))[:length]
    cache.write_bytes(bytes(data))
    assert _set_probe(pkg) == ["status", "True", "True", "Finder", "True", "False"]
    out = _loopx(pkg, proj, "status")
    assert (out.returncode, out.stdout, out.stderr) == (0, good.stdout, "")
    assert _set_probe(pkg) == ["status", "True", "False", "Finder", "True", "True"]  # written anew


def test_a_copied_package_serves_its_sets_code_under_its_own_file_names(pkg, proj, tmp_path):
    """A set's code objects name the files they were compiled from; served from a copy of the
    package (its __pycache__ with it), they name the copy's."""
    assert _loopx(pkg, proj, "status").returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(pkg, copy)
    assert _set_probe(copy) == ["status", "True", "False", "Finder", "True", "True"]


def test_a_run_that_reports_an_error_makes_no_set_and_changes_none(pkg, proj):
    """A command that stopped at an error loaded only part of what it loads: it never makes its
    command's set, nor takes a module out of one."""
    assert _loopx(pkg, proj, "status", "--goal-id", "no-such-goal").returncode != 0
    assert "status" not in _header(pkg)[1]
    assert _loopx(pkg, proj, "status").returncode == 0
    assert _loopx(pkg, proj, "status").returncode == 0  # the decision kept: its set settles
    before = _cache(pkg).read_bytes()
    assert _loopx(pkg, proj, "status", "--goal-id", "no-such-goal").returncode != 0
    assert _cache(pkg).read_bytes() == before


def test_a_set_that_lost_a_module_is_made_again_whole(pkg, proj):
    """A module edited (or removed) and not loaded by the command that rewrites the file takes its
    command sets with it; each is made again, whole, by its command's next complete run (cut
    down to what the writer saw, it would have stayed cut down)."""
    assert _loopx(pkg, proj, "todo", "add", "a writer's set").returncode == 0
    assert _loopx(pkg, proj, "status").returncode == 0
    sets = _header(pkg)[1]
    writer, reader = "loopx.kernel.write.todos", "loopx.commands.status"
    assert writer in sets["todo add"][2] and writer not in sets["status"][2], sets
    for name in (writer, reader):  # both edited; status loads only the second, and writes the file
        src = pkg / (name.replace(".", "/") + ".py")
        src.write_text(src.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert _loopx(pkg, proj, "status").returncode == 0
    entries, sets = _header(pkg)
    assert writer not in entries and "todo add" not in sets and "status" in sets
    assert _loopx(pkg, proj, "todo", "add", "again").returncode == 0
    assert writer in _header(pkg)[1]["todo add"][2]  # made again, whole


def test_a_set_keeps_what_every_complete_run_of_its_command_loaded():
    """A command's first complete run makes its set; a module a later complete run did not load
    leaves it; a run that reported an error, or that loaded the same modules, changes nothing."""
    from loopx import codecache

    def finder(names):
        f = codecache.Finder({}, None, 0, room=100, key="next")
        f.sets = {"next": (0, 10, tuple(names))} if names is not None else {}
        return f

    assert codecache._set_wanted(finder(None), {"a", "b"}, True) == {"a", "b"}
    assert codecache._set_wanted(finder(None), {"a", "b"}, False) is None  # failed: maybe stopped early
    assert codecache._set_wanted(finder("ab"), {"a"}, True) == {"a"}
    assert codecache._set_wanted(finder("ab"), {"a"}, False) is None
    assert codecache._set_wanted(finder("ab"), {"a", "b", "d"}, True) is None  # d comes on its own
    assert codecache._set_wanted(finder("ab"), {"a", "b"}, True) is None
    damaged = finder("ab")
    damaged.set_damaged = True
    assert codecache._set_wanted(damaged, {"a"}, True) == {"a"}
    keyless = finder("ab")
    keyless.key = None
    assert codecache._set_wanted(keyless, {"z"}, True) is None


def test_the_file_keeps_the_sets_written_last():
    from loopx import codecache

    f = codecache.Finder({}, None, 0, room=100, key="k0")
    f.sets = {f"k{i}": (0, 1, ("a", "b")) for i in range(codecache.MAX_SETS + 5)}
    f.sets["lost"] = (0, 1, ("a", "gone"))
    out = codecache._set_names(f, {"a", "c"}, {"a": 1, "b": 1, "c": 1})
    assert len(out) == codecache.MAX_SETS and list(out)[-1] == "k0"  # this command's: written last
    assert out["k0"] == ("a", "c") and out[f"k{codecache.MAX_SETS + 4}"] == ("a", "b")
    assert "lost" not in out  # a module of it is gone: dropped whole, made again by its next run
    assert codecache._set_names(f, None, {"a": 1, "b": 1})["k0"] == ("a", "b")  # this one's as it was
    assert "k0" not in codecache._set_names(f, None, {"a": 1})


@pytest.mark.parametrize("orig, key", [
    (["python", "-m", "loopx", "next"], "next"), (["python", "-X", "dev", "-mloopx", "next"], "next"),
    (["python", "-I", "-m", "loopx.__main__", "next"], "next"), (["python", "-m", "mytool", "next"], None),
    (["python", "script.py", "-m", "loopx"], None), (["python", "-c", "import loopx", "-m", "loopx"], None),
    (["python"], None)])
def test_python_m_is_the_loopx_command_only_when_it_runs_loopx(orig, key):
    """``python -m mytool next``, whose package imports loopx, has ``-m`` as ``argv[0]`` too while
    loopx is imported: only the interpreter's own command line tells the two apart."""
    from loopx import codecache

    assert codecache.command_key(["-m", "next"], orig) == key


@pytest.mark.parametrize("argv, key", [
    (["loopx", "next", "--goal-id", "g"], "next"), (["loopx", "quota", "should-run"], "quota should-run"),
    (["loopx", "hook", "stop", "--host", "codex"], "hook stop"), (["loopx", "todo", "add", "title"], "todo add"),
    (["loopx", "--format", "json", "status"], None), (["pytest", "tests/test_x.py"], None),
    (["loopx", "ÉTAT"], None), (["loopx"], None), (["loopx", "x" * 40], None), ([], None),
    (["-m", "status"], "status"), (["/venv/bin/loopx", "next"], "next"), (["my_script.py", "next"], None)])
def test_a_command_is_known_by_its_first_words(argv, key):
    from loopx import codecache

    assert codecache.command_key(argv, ["python", "-m", "loopx"]) == key
