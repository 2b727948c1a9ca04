"""loopx's own code for its hot commands in one file, the way CPython starts fast.

The interpreter's start-up modules are frozen into it: no finder, no file per module. A hot loopx
command (``cli.FAST``: should-run, status, next, turn finish, the hooks ...) imports 40 to 60 of
loopx's small modules, and through the standard path finder each one costs a directory lookup, a
stat, an open and a read of its ``.pyc`` and the import system's bookkeeping: about a third of what
such a command spends over a bare interpreter (docs/performance.md). This module does for those
modules what freezing does for the standard library's: their code objects live in one file,
``loopx/__pycache__/hot.<cache_tag>.bin``, each read where it lies in the open file, and served by
a meta-path finder (``Finder``) that ``loopx/__init__`` puts in front of the others.

The contract, as Python keeps it for ``.pyc`` files:

- An entry is used only while its source file has the size and modification time (nanoseconds)
  recorded when its code was compiled, and only by an interpreter with the same bytecode magic
  number (the file is named by ``sys.implementation.cache_tag`` and carries the number): an edited,
  upgraded or reinstalled module loads the normal way, and the next hot command takes it in again.
- An entry names a module, never a path: it serves ``loopx.a.b`` only as ``a/b.py`` of the
  package this module belongs to, so a copied or moved package (with its ``__pycache__``) never
  runs the original's code; a folder ``a/b/`` beside ``a/b.py`` (a package wins, as in CPython)
  and a parent package whose ``__path__`` lies elsewhere load the normal way.
- Packages are served too (``loopx.kernel``, ``loopx.commands`` ...: a path finder's import of an
  ``__init__`` costs about what a module's does), except ``loopx`` itself, whose ``__init__`` puts
  this finder in place. Every module and package a cold command imports loads the normal way: the
  file holds what the hot commands use, not the whole tree (about 1.5 MB of modules, up to some
  11 MB with the command sets below, of which a command reads the code it runs), so the packages
  that hold data files (``loopx.dashboard``, read with ``importlib.resources``) keep their own
  loader.
- A missing or foreign file, or anything but a regular file (a FIFO or a device put there is
  never opened or waited on; a symlink is replaced by the next write, never written through), is
  the same as no file: every module loads the normal way. An entry
  is checked when a module is looked up, not all of them at start (110 checks were 0.3 ms of every
  command): one whose fields are not what this module writes, or whose code lies past the end of a
  cut file, loads the normal way, and the next write leaves it out. Nothing here ever fails a command.
- The file is written at the end of a hot command that loaded a module the normal way, never when
  Python would not write bytecode (``sys.dont_write_bytecode``: ``PYTHONDONTWRITEBYTECODE``, ``-B``)
  or where it cannot (a read-only install: found out before any work); through
  ``fs.atomic_write``, so a reader sees the old file or the new one (a temporary file left by a
  killed writer is removed by a later write). Deleting the file is always safe.
- ``__file__``, ``inspect`` and tracebacks name the source file where it is now, as with a
  ``.pyc`` (the code's file names are set on load, as CPython's loader does).
- A module's own imports come with it. The import system's bookkeeping for each module (its
  lock, spec and attributes, the parent's ``from`` list) is work a single-threaded command does
  not need (1-2% of ``next``'s instructions, counted with ``valgrind``). So each entry also lists the
  loopx modules its body imports unconditionally (its top-level ``import`` statements, and those
  in a top-level ``try``: never one under an ``if``, such as ``TYPE_CHECKING``), and loading a
  module from the file first loads those (``Finder.load``, recursively) the way the import system
  would, without its per-module locks: only while this is the one thread, which it is in a CLI
  command (a second thread could see a module whose code had not finished), and not under
  ``-X importtime`` or ``-v`` (which then list every module, as without the file). It changes the order
  in which a module's imports run, never what runs: module imports form no circle (test_layers),
  and a module that fails there is left to the import statement that asks for it, which runs it
  again and raises as it would have. (An import in a top-level ``try`` body is loaded even when a
  statement before it in that body would fail; no loopx module has such a body.)

- A command's modules come in one piece. Unmarshalling is most of what loading a module costs
  (16M of the 35M instructions ``next`` spent loading its 57 modules), and a module marshalled on
  its own carries its own copy of every name it shares with the others (``self``, ``state``,
  ``get`` ...), each created and then looked up in the interpreter's table of interned strings.
  So the file also keeps, per command (``key``: the first two words of the ``loopx`` command's
  arguments: ``next``, ``quota should-run``, ``hook stop``), a set: the code of the modules every
  run of that command has loaded (its first complete run's modules, less each one a later
  complete run did not load), marshalled together, so shared names are made once (about 15% less
  unmarshalling for ``next``).
  A command reads its set with one ``pread`` the first time it needs one of its modules; the
  modules outside it (another path's) come from their own entries. Each module is still served
  only after ``find_spec`` checked its entry against its source, and a set is only ever written
  with the entries it was made from, so its code is always the entry's code. A run that reported
  an error (it may have stopped early) never changes a set; a damaged set is written again, and
  so is one that lost a module (edited or removed, and not loaded by the command that rewrote the
  file: the set goes whole and its command's next complete run makes it again). At most
  ``MAX_SETS`` sets are kept (the ones written last).

The file: ``b"LXC3"``, the interpreter's 4-byte magic number, a 4-byte little-endian header length,
the header (``marshal``: ``(entries, sets)``; ``entries``: ``{module name: (mtime_ns, size, offset,
length, imports, package)}``, ``imports`` a tuple of module names, ``package`` a bool; ``sets``:
``{key: (offset, length, names)}``, ``names`` a tuple of module names), then the modules'
marshalled code objects at ``offset`` (from the end of the header), ``length`` bytes each, then each
set's tuple of code objects (one ``marshal`` of the tuple, in the order of ``names``) at its own
``offset`` and ``length``. (``LXC1`` and ``LXC2`` files are foreign: rewritten.) Modules loaded
through ``Finder.load`` have no ``__cached__`` (no ``.pyc`` is involved either way).

Deliberately small and standard-library only: ``_frozen_importlib`` (the import system's own
classes, already loaded) instead of ``importlib``, whose import alone would cost what this saves.
"""

from __future__ import annotations

import marshal
import os
import sys

TAG = b"LXC3"
MAX_SETS = 24  # command sets kept in the file (each the code of one command's modules: 0.3-1 MB)
_boot = sys.modules["_frozen_importlib"]
_ext = sys.modules["_frozen_importlib_external"]
_imp = sys.modules["_imp"]
MAGIC = _ext.MAGIC_NUMBER
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
PREFIX = __name__.rpartition(".")[0] + "."  # "loopx."


def path() -> str | None:
    """The cache file of this interpreter (``loopx/__pycache__/hot.<cache_tag>[.opt-N].bin``), or
    None when the interpreter keeps no bytecode cache or puts it elsewhere (``sys.pycache_prefix``),
    and where ``os.pread`` is missing (Windows: every module loads the normal way there)."""
    tag = sys.implementation.cache_tag
    if tag is None or sys.pycache_prefix or not hasattr(os, "pread"):  # no os.pread: Windows
        return None
    opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    return os.path.join(PACKAGE_DIR, "__pycache__", f"hot.{tag}{opt}.bin")


def source_of(name: str, package: bool = False) -> str:
    """The source file that module ``name`` (``loopx.a.b``) is in this package: ``<package>/a/b.py``,
    or ``<package>/a/b/__init__.py`` for a package."""
    base = os.path.join(PACKAGE_DIR, *name[len(PREFIX):].split("."))
    return os.path.join(base, "__init__.py") if package else base + ".py"


_CODE = type(source_of.__code__)  # the code type, without importing types


class Finder:
    """A meta-path finder and loader for the modules in the cache file (the import protocol of the
    language reference: ``find_spec``, ``create_module``, ``exec_module``). ``fd`` is the open
    file (None: no file), ``base`` where its code starts; a module's bytes are read when it is
    imported (``os.pread``: a command reads the code it runs, not the whole file)."""

    def __init__(self, entries: dict, fd: int | None, base: int, room: int = 0, sets: dict | None = None,
                 key: str | None = None) -> None:
        self.entries = entries  # as read: an entry is checked (_entry_ok) when it is used
        self.fd = fd
        self.base = base
        self.room = room  # bytes of code after the header
        self.sets = sets or {}  # as read: checked (_set) when used
        self.key = key  # this command's set (command_key), None: none
        self.set_code: dict = {}  # code read from this command's set and not yet used: {name: code}
        self.set_read = False
        self.set_damaged = False

    def find_spec(self, name: str, path=None, target=None):
        e = self.entries.get(name)
        if e is None or not _entry_ok(name, e, self.room):  # a damaged entry: the normal way
            return None
        package = e[5]
        origin = source_of(name, package)
        folder = os.path.dirname(origin)
        if path is not None and (os.path.dirname(folder) if package else folder) not in path:
            return None  # the parent package was loaded from elsewhere
        try:
            st = os.stat(origin)
        except OSError:
            return None
        if st.st_mtime_ns != e[0] or st.st_size != e[1] or (not package and os.path.isdir(origin[:-3])):
            return None  # edited or reinstalled (update() takes it in again), or a package of that name
        spec = _boot.ModuleSpec(name, self, origin=origin, is_package=package)
        if package:
            spec.submodule_search_locations = [folder]
        spec.has_location = True  # __file__ is the source, as for a .pyc
        return spec

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        name = module.__name__
        if _bulk():
            for dep in self.entries[name][4]:
                if dep not in sys.modules:
                    self.load(dep)
        exec(self.get_code(name), module.__dict__)  # noqa: S102 - loopx's own compiled code

    def load(self, name: str) -> None:
        """Import ``name`` from the file as the import system would (``importlib._bootstrap``'s
        ``_load_unlocked``: the module in ``sys.modules`` while its code runs, removed if that
        fails, then set on its parent package), without the per-module lock, spec bookkeeping and
        ``from`` list handling; its own imports first (``exec_module``). Nothing when ``name`` is
        not served from the file (not in it, edited or removed) or its code fails: the import
        statement that asks for it then does it the normal way, and raises as it would."""
        parent_name, _, child = name.rpartition(".")
        try:
            __import__(parent_name)  # a package: the normal way (the statement would do that first)
        except Exception:  # noqa: BLE001 - left to the import statement, as below
            return
        if name in sys.modules:  # the package's own __init__ imported it
            return
        parent = sys.modules[parent_name]
        spec = self.find_spec(name, getattr(parent, "__path__", None))
        if spec is None:
            return
        module = type(sys)(name)
        module.__spec__, module.__file__ = spec, spec.origin
        module.__loader__ = self  # type: ignore[assignment]  # a loader by protocol (exec_module)
        if spec.submodule_search_locations is not None:
            module.__path__ = spec.submodule_search_locations
            module.__package__ = name
        else:
            module.__package__ = parent_name
        sys.modules[name] = module
        try:
            self.exec_module(module)
        except BaseException as exc:
            if sys.modules.get(name) is module:
                del sys.modules[name]  # as the import system does: never a half-run module left behind
            if not isinstance(exc, Exception):
                raise  # an interrupt goes on as it came
            return  # left to the import statement, which runs the module's code again and raises
        setattr(parent, child, sys.modules[name])

    def get_code(self, name: str):
        """The module's code object (``runpy`` asks for it: ``python -m loopx.x``)."""
        e = self.entries[name]
        origin = source_of(name, e[5])
        code = self.from_set(name)
        if code is not None:
            _imp._fix_co_filename(code, origin)
            return code
        data = self.code_bytes(e)
        if data is not None:
            try:
                code = marshal.loads(data)
                if type(code) is not _CODE:
                    raise TypeError("not a code object")  # exec would compile a str: never run one
                _imp._fix_co_filename(code, origin)  # where the source is now, as CPython's loader does
                return code
            except (ValueError, EOFError, TypeError):
                pass  # damaged bytes: the source, as if there were no file
        with open(origin, "rb") as fh:
            return compile(fh.read(), origin, "exec", dont_inherit=True)

    def from_set(self, name: str):
        """The code of module ``name`` from this command's set, or None when the set lacks it or
        cannot give it (damaged: noted, so ``update`` writes it again). The set is read whole the
        first time one of its modules is needed."""
        code = self.set_code.pop(name, None)  # a module's code object runs once (a reload compiles anew)
        if code is not None or self.set_read or self.key is None:
            return code
        got = _set(self.sets.get(self.key), self.room)
        if got is None or name not in got[2]:
            return None
        self.set_read = True
        codes = None
        try:
            data = os.pread(self.fd, got[1], self.base + got[0]) if self.fd is not None else b""
            codes = _unmarshal(data) if len(data) == got[1] else None
        except (OSError, ValueError, EOFError, TypeError, OverflowError, MemoryError):
            pass
        if type(codes) is tuple and len(codes) == len(got[2]) and all(type(c) is _CODE for c in codes):
            self.set_code.update(zip(got[2], codes, strict=True))
            return self.set_code.pop(name)
        self.set_damaged = True
        return None

    def code_bytes(self, e: tuple) -> bytes | None:
        """The marshalled code of entry ``e``, or None when the file cannot give it whole."""
        if self.fd is None:
            return None
        try:
            data = os.pread(self.fd, e[3], self.base + e[2])
        except (OSError, ValueError, OverflowError, MemoryError):
            return None
        return data if len(data) == e[3] else None

    def is_package(self, name: str) -> bool:
        return bool(self.entries[name][5])

    def get_resource_reader(self, name: str):
        """What ``importlib.resources.files(package)`` asks a package's loader for: an object whose
        ``files()`` is the package's folder (as the path finder's loader gives)."""
        folder = os.path.dirname(source_of(name, True))

        class Reader:
            def files(self):
                import pathlib

                return pathlib.Path(folder)
        return Reader()


def install() -> Finder:
    """Open the cache file and put its finder first on ``sys.meta_path`` (with no entries when the
    file is missing or unreadable: it still tells ``update`` which modules a hot command used).
    Again (``importlib.reload(loopx)``): the finder before is replaced, not added to."""
    for old in [f for f in sys.meta_path if type(f).__name__ == "Finder" and hasattr(f, "code_bytes")]:
        sys.meta_path.remove(old)
    finder = read(path())
    finder.key = command_key(sys.argv)
    sys.meta_path.insert(0, finder)  # also when empty: it notes what a hot command should keep
    return finder


def _runs_loopx(orig: list[str]) -> bool:
    """Whether the interpreter's own command line (``sys.orig_argv``) runs ``-m loopx``, not
    another module that imports loopx (``python -m mytool next``)."""
    i = 1
    while i < len(orig):
        arg = orig[i]
        if arg == "-m":
            return orig[i + 1:i + 2] in (["loopx"], ["loopx.__main__"])
        if arg.startswith("-m"):
            return arg[2:] in ("loopx", "loopx.__main__")
        if arg == "-c" or arg == "-" or not arg.startswith("-"):
            return False  # a script or -c comes first: a -m after it is the program's own argument
        i += 2 if arg in ("-X", "-W") else 1  # the options that take a separate value
    return False


def command_key(argv: list[str], orig: list[str] | None = None) -> str | None:
    """Which set of the file this process reads (module docstring): the first two words of its
    arguments before any option (``next``, ``quota should-run``, ``hook stop``); None when the first
    argument is not such a word (an option first, a path, the test runner's arguments), and when
    the process is not the ``loopx`` command (its console script, or ``python -m loopx``, whose
    ``argv[0]`` is ``-m`` while the package is imported; ``orig``, default ``sys.orig_argv``, tells
    which module ``-m`` runs): a program that imports loopx as a library never reads a set
    (reading one freezes what is alive out of the collector's reach)."""
    if orig is None:
        orig = list(getattr(sys, "orig_argv", []))
    if not argv or not (_runs_loopx(orig) if argv[0] == "-m" else
                        os.path.basename(argv[0]).lower() in ("loopx", "loopx.exe")):
        return None
    words = []
    for arg in argv[1:3]:
        if arg.startswith("-") or not (0 < len(arg) <= 32 and arg.isascii() and arg.replace("-", "").isalnum()
                                       and arg.islower()):
            break
        words.append(arg)
    return " ".join(words) or None


def _entry_ok(name, e, room: int) -> bool:
    return (isinstance(name, str) and name.startswith(PREFIX) and isinstance(e, tuple) and len(e) == 6
            and all(type(x) is int and x >= 0 for x in e[:4]) and e[2] + e[3] <= room
            and type(e[4]) is tuple and all(type(d) is str and d.startswith(PREFIX) for d in e[4])
            and type(e[5]) is bool)


def _unmarshal(data: bytes):
    """``marshal.loads`` of a set with the cyclic collector kept off it: a set is some 10^5 fresh
    objects (code objects, their names and constants: never garbage while the process runs, none
    in a cycle), read before ``cli`` pauses the collector for a hot command. The collector is
    paused while they are made, and then they (with everything else alive then) are moved out of
    its reach (``gc.freeze``): left young, the first collection after it would walk them all, and
    every later one of the older generations again (1.6M instructions of ``next``, counted)."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        codes = marshal.loads(data)
        gc.freeze()
        return codes
    finally:
        if was:
            gc.enable()


def _set(got, room: int) -> tuple[int, int, tuple[str, ...]] | None:
    """A set as read from the file, ``(offset, length, names)``, or None when it is not one or
    lies past the end of the file."""
    if (type(got) is tuple and len(got) == 3 and all(type(x) is int and x >= 0 for x in got[:2])
            and got[0] + got[1] <= room and type(got[2]) is tuple and all(type(n) is str for n in got[2])):
        return got
    return None


def _bulk() -> bool:
    """Whether a module's imports may come with it (``Finder.load``): only while no thread but this
    one runs Python code (``threading`` not even imported, or one active thread), so no other thread
    can import while a module is half run, and not under ``python -X importtime`` or ``-v``, which
    report each module the import system loads (the tests count a command's imports that way)."""
    if sys.flags.verbose or "importtime" in getattr(sys, "_xoptions", {}) or os.environ.get("PYTHONPROFILEIMPORTTIME"):
        return False
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


def read(file: str | None) -> Finder:
    """A finder over ``file``'s header, the file left open for its code; one with no entries when
    the file is missing, damaged or another interpreter's."""
    if file is None:
        return Finder({}, None, 0)
    fd = None
    try:
        # a regular file only, as the store's files (fs.open_file): a device is never opened (a link to
        # one included), and the open never waits (a FIFO would hold every command waiting for a writer)
        if os.stat(file).st_mode & 0o170000 != 0o100000:
            raise OSError("not a regular file")
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        st = os.fstat(fd)
        head = os.pread(fd, 12, 0) if st.st_mode & 0o170000 == 0o100000 else b""
        size = int.from_bytes(head[8:12], "little")
        if head[:4] == TAG and head[4:8] == MAGIC:
            header = marshal.loads(os.pread(fd, size, 12))
            room = st.st_size - 12 - size
            if (type(header) is tuple and len(header) == 2 and all(type(h) is dict for h in header)
                    and room >= 0):  # each entry and set is checked when it is used
                return Finder(header[0], fd, 12 + size, room, header[1])
            # cut short or not ours: another writer's file is renamed whole, so this is damage
    except (OSError, ValueError, EOFError, TypeError, OverflowError, MemoryError):
        pass
    if fd is not None:
        os.close(fd)
    return Finder({}, None, 0)


def _plain() -> list[tuple[str, object, bool]]:
    """``(name, loader, is a package)`` of every loopx module and package loaded from this package
    (not ``loopx`` itself, whose ``__init__`` puts the finder in place, nor this module, which loads
    before it)."""
    out = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith(PREFIX) or name == __name__:
            continue
        spec = getattr(mod, "__spec__", None)
        if spec is None:
            continue
        package = spec.submodule_search_locations is not None
        if isinstance(spec.loader, Finder) or spec.origin == source_of(name, package):  # served ones are ours
            out.append((name, spec.loader, package))
    return out


def update(fs, complete: bool = True) -> bool:
    """At the end of a hot command: write the cache file anew when this process loaded a plain
    loopx module the normal way (new to the file, or edited since), or when its command's set
    (module docstring) should change; keeping the entries that are still current, adding every
    plain loopx module now loaded, and making every set again from the entries written.
    ``complete``: the command did its work (no error reported), so its set may be made or a
    module it did not load leave it. ``fs`` is ``loopx.kernel.storage.fs``, the one writer of files
    (``atomic_write``, ``stale_temporaries``), which lies in a layer above this module (the caller,
    ``cli.entry``, passes it). Best effort (a cache); True when the file was written."""
    if sys.dont_write_bytecode:
        return False
    try:
        file = path()
        mods = _plain()
        finder = next((f for f in sys.meta_path if isinstance(f, Finder)), None) or Finder({}, None, 0)
        loaded = {name: package for name, _, package in mods}
        wanted = _set_wanted(finder, set(loaded), complete)
        if file is None or (all(isinstance(loader, Finder) for _, loader, _ in mods) and wanted is None):
            return False
        return _write(fs, file, finder, loaded, wanted)
    except Exception:  # noqa: BLE001 - a cache never fails the command that fills it
        return False


def _set_wanted(finder: Finder, loaded: set[str], complete: bool) -> set[str] | None:
    """The modules of this command's set when it should be written anew, else None: a complete
    run's modules when there is no set (or a damaged one), the set less the modules a complete run
    did not load. A run that reported an error changes nothing."""
    if finder.key is None or not complete:
        return None
    got = None if finder.set_damaged else _set(finder.sets.get(finder.key), finder.room)
    if got is None:
        return loaded
    kept = set(got[2]) & loaded
    return None if len(kept) == len(got[2]) else kept


def _write(fs, file: str, finder: Finder, loaded: dict[str, bool], wanted: set[str] | None) -> bool:
    folder = os.path.dirname(file)
    os.makedirs(folder, exist_ok=True)
    if not os.access(folder, os.W_OK):  # a read-only install: found out before collecting any code
        return False
    header, parts = _collect(finder, loaded)
    offset = sum(map(len, parts))
    marshalled = dict(zip(header, parts, strict=True))  # header and parts are in the same order
    codes: dict = {}
    sets = {}
    for key, names in _set_names(finder, wanted, header).items():
        for name in names:
            if name not in codes:
                codes[name] = marshal.loads(marshalled[name])
        blob = marshal.dumps(tuple(codes[name] for name in names))  # a name the modules share: once
        sets[key] = (offset, len(blob), names)
        parts.append(blob)
        offset += len(blob)
    head = marshal.dumps((header, sets))
    fs.atomic_write(file, b"".join([TAG, MAGIC, len(head).to_bytes(4, "little"), head, *parts]), sync=False,
                    follow=False)  # a link put there is replaced, never written through
    for tmp in fs.stale_temporaries(folder):  # a writer killed mid-write (hosts kill slow hooks)
        if os.path.basename(tmp).startswith("hot."):
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return True


def _set_names(finder: Finder, wanted: set[str] | None, header: dict) -> dict[str, tuple[str, ...]]:
    """{key: module names} of the sets to write: those of the file (their modules still in
    ``header``: one that lost a module is dropped whole), and this command's (``wanted``:
    ``_set_wanted``, else as it was) written last; at most ``MAX_SETS``, the ones written last."""
    out: dict[str, tuple[str, ...]] = {}
    for key, got in finder.sets.items():
        found = _set(got, finder.room)
        # a set with a module no longer in the file (edited and not loaded here, or removed) goes
        # whole: its command's next complete run makes it again (cut down, it would stay cut down)
        if type(key) is str and found is not None and key != finder.key and all(n in header for n in found[2]):
            out[key] = found[2]
    if finder.key is not None:
        mine = None if finder.set_damaged else _set(finder.sets.get(finder.key), finder.room)
        names = wanted if wanted is not None else set(mine[2] if mine is not None else ())
        if all(n in header for n in names):
            out[finder.key] = tuple(sorted(names))
    return {k: v for k, v in list(out.items())[-MAX_SETS:] if v}


def _collect(finder: Finder, loaded: dict[str, bool]) -> tuple[dict, list[bytes]]:
    """The header and the code of every entry still current and every module ``loaded`` (name ->
    whether it is a package)."""
    header: dict = {}
    parts: list[bytes] = []
    offset = 0
    kept = {n: e for n, e in finder.entries.items() if _entry_ok(n, e, finder.room)}  # damaged ones go
    for name in sorted({*kept, *loaded}):  # what other hot commands use stays
        e = kept.get(name)
        package = loaded[name] if name in loaded else bool(e and e[5])
        origin = source_of(name, package)
        try:
            st = os.stat(origin)
        except OSError:
            continue  # removed by an upgrade
        current = e is not None and e[:2] == (st.st_mtime_ns, st.st_size) and e[5] == package
        code = finder.code_bytes(e) if e is not None and current else None
        if e is not None and code is not None:
            imports = e[4]
        else:
            if name not in loaded:
                continue  # stale, and not loaded here: the next command that loads it takes it in
            code = _code(origin, st)
            imports = _imports(origin)
        header[name] = (st.st_mtime_ns, st.st_size, offset, len(code), imports, package)
        parts.append(code)
        offset += len(code)
    return header, parts


def _imports(origin: str) -> tuple[str, ...]:
    """The loopx modules and packages that the module at ``origin`` imports whenever its code
    runs, in the order its code imports them: top-level ``import`` and ``from`` statements and
    those in the body of a top-level ``try`` (not under an ``if``: ``TYPE_CHECKING``, a platform).
    Parsed from the source when the file is written, never on a command's way in."""
    import ast  # only here: a write of the file, after the command's own work

    with open(origin, "rb") as fh:
        tree = ast.parse(fh.read(), origin)
    names: list[str] = []

    def take(body: list) -> None:
        for node in body:
            if isinstance(node, ast.Try):
                take(node.body)  # the handlers run only when the body failed
            elif isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.extend([node.module, *(f"{node.module}.{a.name}" for a in node.names)])

    take(tree.body)
    out = (n for n in names if n.startswith(PREFIX) and (os.path.isfile(source_of(n, True))
                                                        or os.path.isfile(source_of(n))))
    return tuple(dict.fromkeys(out))


def _code(origin: str, st: os.stat_result) -> bytes:
    """The marshalled code of the module at ``origin``: from its ``.pyc`` when that is a timestamp
    pyc of this source's mtime and size written after the source was (a pyc written in the same
    clock tick as an edit of the same size could hold the code before it: such a source is
    compiled again), else compiled now."""
    cached = _ext.cache_from_source(origin)
    try:
        with open(cached, "rb") as fh:
            pyc = fh.read()
            fresh = os.fstat(fh.fileno()).st_mtime_ns > st.st_mtime_ns
        if (fresh and pyc[:4] == MAGIC and int.from_bytes(pyc[4:8], "little") == 0
                and int.from_bytes(pyc[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
                and int.from_bytes(pyc[12:16], "little") == st.st_size & 0xFFFFFFFF):
            return pyc[16:]
    except (OSError, ValueError):
        pass
    with open(origin, "rb") as fh:
        source = fh.read()
    return marshal.dumps(compile(source, origin, "exec", dont_inherit=True))
