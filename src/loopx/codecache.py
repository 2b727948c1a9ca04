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
- A package's ``__init__`` always loads the normal way (``importlib.resources`` reads a package
  through its own loader); so does every module a cold command imports: the file holds what the
  hot commands use, not the whole tree (about 1.5 MB, of which a command reads the code it runs).
- A missing, truncated or foreign file is the same as no file: every module loads the normal way.
  Nothing here ever fails a command.
- The file is written at the end of a hot command that loaded a module the normal way, never when
  Python would not write bytecode (``sys.dont_write_bytecode``: ``PYTHONDONTWRITEBYTECODE``, ``-B``)
  or where it cannot (a read-only install: found out before any work); through
  ``fs.atomic_write``, so a reader sees the old file or the new one (a temporary file left by a
  killed writer is removed by a later write). Deleting the file is always safe.
- ``__file__``, ``inspect`` and tracebacks name the source file where it is now, as with a
  ``.pyc`` (the code's file names are set on load, as CPython's loader does).

The file: ``b"LXC1"``, the interpreter's 4-byte magic number, a 4-byte little-endian header length,
the header (``marshal``: ``{module name: (mtime_ns, size, offset, length)}``), then the modules'
marshalled code objects at ``offset`` (from the end of the header), ``length`` bytes each.

Deliberately small and standard-library only: ``_frozen_importlib`` (the import system's own
classes, already loaded) instead of ``importlib``, whose import alone would cost what this saves.
"""

from __future__ import annotations

import marshal
import os
import sys

TAG = b"LXC1"
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


def source_of(name: str) -> str:
    """The source file that module ``name`` (``loopx.a.b``) is in this package: ``<package>/a/b.py``."""
    return os.path.join(PACKAGE_DIR, *name[len(PREFIX):].split(".")) + ".py"


_CODE = type(source_of.__code__)  # the code type, without importing types


class Finder:
    """A meta-path finder and loader for the modules in the cache file (the import protocol of the
    language reference: ``find_spec``, ``create_module``, ``exec_module``). ``fd`` is the open
    file (None: no file), ``base`` where its code starts; a module's bytes are read when it is
    imported (``os.pread``: a command reads the code it runs, not the whole file)."""

    def __init__(self, entries: dict, fd: int | None, base: int) -> None:
        self.entries = entries
        self.fd = fd
        self.base = base

    def find_spec(self, name: str, path=None, target=None):
        e = self.entries.get(name)
        if e is None:
            return None
        origin = source_of(name)
        if path is not None and os.path.dirname(origin) not in path:
            return None  # the parent package was loaded from elsewhere
        try:
            st = os.stat(origin)
        except OSError:
            return None
        if st.st_mtime_ns != e[0] or st.st_size != e[1] or os.path.isdir(origin[:-3]):
            return None  # edited or reinstalled (update() takes it in again), or a package of that name
        spec = _boot.ModuleSpec(name, self, origin=origin)
        spec.has_location = True  # __file__ is the source, as for a .pyc
        return spec

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        exec(self.get_code(module.__name__), module.__dict__)  # noqa: S102 - loopx's own compiled code

    def get_code(self, name: str):
        """The module's code object (``runpy`` asks for it: ``python -m loopx.x``)."""
        origin = source_of(name)
        data = self.code_bytes(self.entries[name])
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
        return False  # packages are never in the file


def install() -> Finder:
    """Open the cache file and put its finder first on ``sys.meta_path`` (with no entries when the
    file is missing or unreadable: it still tells ``update`` which modules a hot command used).
    Again (``importlib.reload(loopx)``): the finder before is replaced, not added to."""
    for old in [f for f in sys.meta_path if type(f).__name__ == "Finder" and hasattr(f, "code_bytes")]:
        sys.meta_path.remove(old)
    finder = read(path())
    sys.meta_path.insert(0, finder)  # also when empty: it notes what a hot command should keep
    return finder


def _entry_ok(name, e, room: int) -> bool:
    return (isinstance(name, str) and name.startswith(PREFIX) and isinstance(e, tuple) and len(e) == 4
            and all(type(x) is int and x >= 0 for x in e) and e[2] + e[3] <= room)


def read(file: str | None) -> Finder:
    """A finder over ``file``'s header, the file left open for its code; one with no entries when
    the file is missing, damaged or another interpreter's."""
    if file is None:
        return Finder({}, None, 0)
    fd = None
    try:
        fd = os.open(file, os.O_RDONLY)
        head = os.pread(fd, 12, 0)
        size = int.from_bytes(head[8:12], "little")
        if head[:4] == TAG and head[4:8] == MAGIC:
            entries = marshal.loads(os.pread(fd, size, 12))
            room = os.fstat(fd).st_size - 12 - size
            if isinstance(entries, dict) and all(_entry_ok(n, e, room) for n, e in entries.items()):
                return Finder(entries, fd, 12 + size)
            # cut short or not ours: another writer's file is renamed whole, so this is damage
    except (OSError, ValueError, EOFError, TypeError, OverflowError, MemoryError):
        pass
    if fd is not None:
        os.close(fd)
    return Finder({}, None, 0)


def _plain() -> list[tuple[str, object]]:
    """``(name, loader)`` of every plain loopx module loaded from this package (not a package, not
    this module, which loads before the finder exists)."""
    out = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith(PREFIX) or name == __name__:
            continue
        spec = getattr(mod, "__spec__", None)
        if spec is None or spec.submodule_search_locations is not None:
            continue
        if isinstance(spec.loader, Finder) or spec.origin == source_of(name):  # served ones are ours
            out.append((name, spec.loader))
    return out


def update(fs) -> bool:
    """At the end of a hot command: write the cache file anew when this process loaded a plain
    loopx module the normal way (new to the file, or edited since), keeping the entries that are
    still current and adding every plain loopx module now loaded. ``fs`` is
    ``loopx.kernel.storage.fs``, the one writer of files (``atomic_write``, ``stale_temporaries``),
    which lies in a layer above this module (the caller, ``cli.entry``, passes it). Best effort (a
    cache); True when the file was written."""
    if sys.dont_write_bytecode:
        return False
    try:
        file = path()
        mods = _plain()
        if file is None or all(isinstance(loader, Finder) for _, loader in mods):
            return False
        return _write(fs, file, [name for name, _ in mods])
    except Exception:  # noqa: BLE001 - a cache never fails the command that fills it
        return False


def _write(fs, file: str, loaded: list[str]) -> bool:
    folder = os.path.dirname(file)
    os.makedirs(folder, exist_ok=True)
    if not os.access(folder, os.W_OK):  # a read-only install: found out before collecting any code
        return False
    finder = next((f for f in sys.meta_path if isinstance(f, Finder)), None) or Finder({}, None, 0)
    header, parts = _collect(finder, loaded)
    head = marshal.dumps(header)
    fs.atomic_write(file, b"".join([TAG, MAGIC, len(head).to_bytes(4, "little"), head, *parts]), sync=False)
    for tmp in fs.stale_temporaries(folder):  # a writer killed mid-write (hosts kill slow hooks)
        if os.path.basename(tmp).startswith("hot."):
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return True


def _collect(finder: Finder, loaded: list[str]) -> tuple[dict, list[bytes]]:
    """The header and the code of every entry still current and every module ``loaded``."""
    header: dict = {}
    parts: list[bytes] = []
    offset = 0
    for name in sorted({*finder.entries, *loaded}):  # what other hot commands use stays
        origin = source_of(name)
        try:
            st = os.stat(origin)
        except OSError:
            continue  # removed by an upgrade
        e = finder.entries.get(name)
        code = finder.code_bytes(e) if e is not None and e[:2] == (st.st_mtime_ns, st.st_size) else None
        if code is None:
            if name not in loaded:
                continue  # stale, and not loaded here: the next command that loads it takes it in
            code = _code(origin, st)
        header[name] = (st.st_mtime_ns, st.st_size, offset, len(code))
        parts.append(code)
        offset += len(code)
    return header, parts


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
