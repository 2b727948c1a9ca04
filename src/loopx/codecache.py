"""loopx's own code for its hot commands in one file, the way CPython starts fast.

The interpreter's start-up modules are frozen into it: no finder, no file per module. A hot loopx
command (``cli.FAST``: should-run, status, next, turn finish, the hooks ...) imports 40 to 60 of
loopx's small modules, and through the standard path finder each one costs a directory lookup, a
stat, an open and a read of its ``.pyc`` and the import system's bookkeeping: about a third of what
such a command spends over a bare interpreter (docs/performance.md). This module does for those
modules what freezing does for the standard library's: their code objects live in one file,
``loopx/__pycache__/hot.<cache_tag>.bin``, one open file read where each module lies, served by a meta-path finder
(``Finder``) that ``loopx/__init__`` puts in front of the others.

The contract, as Python keeps it for ``.pyc`` files:

- An entry is used only while its source file has the size and modification time (nanoseconds)
  recorded when its code was compiled, and only by an interpreter with the same bytecode magic
  number (the file is named by ``sys.implementation.cache_tag`` and carries the number): an edited,
  upgraded or reinstalled module loads the normal way, and the next hot command takes it in again.
- A package's ``__init__`` always loads the normal way (``importlib.resources`` reads a package
  through its own loader); so does every module a cold command imports: the file holds what the
  hot commands use, not the whole tree (about 1 MB).
- A missing, truncated or foreign file is the same as no file: every module loads the normal way.
  Nothing here ever fails a command.
- The file is written at the end of a hot command that loaded a module the normal way, never when
  Python would not write bytecode (``sys.dont_write_bytecode``: ``PYTHONDONTWRITEBYTECODE``, ``-B``)
  or where it cannot (a read-only install); by a temporary file renamed over it, so a reader sees
  the old file or the new one. Deleting the file is always safe: the next hot command writes it.
- ``__file__`` and tracebacks name the source file, as with a ``.pyc``.

The file: ``b"LXC1"``, the interpreter's 4-byte magic number, a 4-byte little-endian header length,
the header (``marshal``: ``{module name: (source path, mtime_ns, size, offset, length)}``), then the
modules' marshalled code objects at ``offset`` (from the end of the header), ``length`` bytes each.

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
MAGIC = _ext.MAGIC_NUMBER
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def path() -> str | None:
    """The cache file of this interpreter (``loopx/__pycache__/hot.<cache_tag>[.opt-N].bin``), or
    None when the interpreter keeps no bytecode cache or puts it elsewhere (``sys.pycache_prefix``)."""
    tag = sys.implementation.cache_tag
    if tag is None or sys.pycache_prefix:
        return None
    opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    return os.path.join(PACKAGE_DIR, "__pycache__", f"hot.{tag}{opt}.bin")


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
        try:
            st = os.stat(e[0])
        except OSError:
            return None
        if st.st_mtime_ns != e[1] or st.st_size != e[2]:
            return None  # edited or reinstalled: the normal way, and update() takes it in again
        spec = _boot.ModuleSpec(name, self, origin=e[0])
        spec.has_location = True  # __file__ is the source, as for a .pyc
        return spec

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        exec(self.get_code(module.__name__), module.__dict__)  # noqa: S102 - loopx's own compiled code

    def get_code(self, name: str):
        """The module's code object (``runpy`` asks for it: ``python -m loopx.x``)."""
        e = self.entries[name]
        data = self.code_bytes(e)
        if data is not None:
            try:
                return marshal.loads(data)
            except (ValueError, EOFError, TypeError):
                pass  # damaged bytes: the source, as if there were no file
        with open(e[0], "rb") as fh:
            return compile(fh.read(), e[0], "exec", dont_inherit=True)

    def code_bytes(self, e: tuple) -> bytes | None:
        """The marshalled code of entry ``e``, or None when the file cannot give it whole."""
        if self.fd is None:
            return None
        try:
            data = os.pread(self.fd, e[4], self.base + e[3])
        except OSError:
            return None
        return data if len(data) == e[4] else None

    def is_package(self, name: str) -> bool:
        return False  # packages are never in the file


def install() -> Finder:
    """Open the cache file and put its finder first on ``sys.meta_path`` (with no entries when the
    file is missing or unreadable: it still tells ``update`` which modules a hot command used)."""
    finder = read(path())
    sys.meta_path.insert(0, finder)  # also when empty: it notes what a hot command should keep
    return finder


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
            if isinstance(entries, dict) and all(e[3] + e[4] <= room for e in entries.values()):
                return Finder(entries, fd, 12 + size)
            # cut short or not ours: another writer's file is renamed whole, so this is damage
    except (OSError, ValueError, EOFError, TypeError, IndexError, KeyError):
        pass
    if fd is not None:
        os.close(fd)
    return Finder({}, None, 0)


def _plain() -> list[tuple[str, str, object]]:
    """``(name, source path, loader)`` of every plain loopx module loaded (not a package, not this
    module, which loads before the finder exists)."""
    out = []
    for name, mod in list(sys.modules.items()):
        spec = getattr(mod, "__spec__", None)
        if (name.startswith("loopx.") and name != __name__ and spec is not None and spec.origin
                and spec.submodule_search_locations is None and spec.origin.endswith(".py")):
            out.append((name, spec.origin, spec.loader))
    return out


def update() -> bool:
    """At the end of a hot command: write the cache file anew when this process loaded a plain
    loopx module the normal way (new to the file, or edited since), keeping the entries that are
    still current and adding every plain loopx module now loaded. Best effort (a cache); True
    when the file was written."""
    if sys.dont_write_bytecode:
        return False
    file = path()
    mods = _plain()
    if file is None or all(isinstance(loader, Finder) for _, _, loader in mods):
        return False
    try:
        return _write(file, sorted(mods))
    except Exception:  # noqa: BLE001 - a cache never fails the command that fills it
        return False


def _write(file: str, mods: list) -> bool:
    finder = next((f for f in sys.meta_path if isinstance(f, Finder)), None) or Finder({}, None, 0)
    old = finder.entries
    header: dict = {}
    parts: list[bytes] = []
    offset = 0
    origins = {name: e[0] for name, e in old.items()}  # what other hot commands use stays
    origins.update((name, origin) for name, origin, _ in mods)
    for name, origin in sorted(origins.items()):
        try:
            st = os.stat(origin)
        except OSError:
            continue  # removed by an upgrade
        e = old.get(name)
        code = finder.code_bytes(e) if e is not None and e[:3] == (origin, st.st_mtime_ns, st.st_size) else None
        if code is None:
            if name not in sys.modules:
                continue  # stale, and not loaded here: the next command that loads it takes it in
            code = _code(origin, st)
        header[name] = (origin, st.st_mtime_ns, st.st_size, offset, len(code))
        parts.append(code)
        offset += len(code)
    head = marshal.dumps(header)
    os.makedirs(os.path.dirname(file), exist_ok=True)
    tmp = f"{file}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(TAG + MAGIC + len(head).to_bytes(4, "little") + head)
            fh.writelines(parts)
        os.replace(tmp, file)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


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
