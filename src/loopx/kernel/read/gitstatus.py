"""``git status`` answered from a stat cache while nothing git looks at has changed.

Every hot command that needs the fingerprint's git part (``status``, a should-run whose answer
depends on it, ``next``, ``turn finish``, the stop hook) starts one ``git status``: about 3 ms of
CPU in git plus the spawn, a fifth to a third of such a command over a bare interpreter. Between
two polls of a quiet project nothing changes, so the answer is kept in
``.loopx/cache/gitstatus.bin`` with what it was computed from, and given again while all of it is
unchanged: the way git itself trusts its index's stat data for files it does not re-read.

What an answer is valid for (``_facts`` and ``_walk``):

- HEAD's commit, the environment's ``GIT_*`` variables, whether the call was pinned, and the
  ``stat`` (mtime and ctime in ns, size, inode) of the index, ``info/exclude``, ``info/attributes``,
  ``info/sparse-checkout``, ``info/grafts``, ``packed-refs``, ``refs/replace``, the repository's
  ``config`` and the user's and system's git config, ignore and attributes files;
- the ``lstat`` of every entry of every folder of the work tree that git walks (all but ``.git``,
  loopx's own ``.loopx/`` folders and the folders git reports as ignored by a pattern, which is why
  the status that fills the cache asks for ``--ignored=matching``; those lines are removed from
  what callers get, and so are the paths in ``.loopx/`` folders, which every caller leaves out). A
  changed, new, removed or renamed file changes a size, an mtime, a ctime or its folder's mtime;
  userspace can set an mtime back (``touch -d``) but never a ctime.

Never cached (git is asked every time): a work tree with ``.gitmodules`` or any ``.git`` below its
top (a submodule's or nested repository's state is inside it), a linked worktree (its ``.git`` is
a file), replace objects, a ``GIT_*`` variable that may change what git reads (an index file, config
entries: anything but authorship, prompts, editors, tracing, transport and TLS, ``_QUIET_ENV``), more than ``CAP`` entries to
walk (a large tree: git's C walk is faster; the answer says so, so the next call does not walk
until the index or HEAD moves), a git config that includes other files or names its own excludes
or attributes file (their changes would be invisible), Windows (its ctime is the creation time), a
git too old for ``--ignored=matching`` (before 2.16), and a listing taken less than ``RACY_NS``
after any walked entry or watched file last changed: a file written in the same clock tick as the
snapshot could change again with the same stamps, so such an answer is given but not kept (git's
"racy clean" rule).

Not seen (a limit, as for git's own stat data): a file changed through a shared writable ``mmap``
after its first write fault, whose mtime the kernel updates only at writeback.

The file is ``b"LXGS"``, the CRC-32 of the rest (4 bytes, little-endian), then the entry
(marshal); a missing, damaged or foreign file is no cache, and anything odd in it is never an
error. It is written best effort (``fs.atomic_write`` without fsync: it is disposable), never
through a symlink. Start-up cost on a hit: one small file read and one ``lstat`` per walked entry
(about 1 ms for 300 files).
"""

from __future__ import annotations

import marshal
import os
import time
import zlib

from loopx.kernel.storage import layout
from loopx.kernel.storage.fs import MOST_CACHE, atomic_write, read_bytes

VERSION = 2
MAGIC = b"LXGS"
CAP = 1000  # entries walked before the tree counts as large: about 3 ms of lstat from Python, what git status costs
RACY_NS = 2_000_000_000  # an answer taken within 2 s of a walked entry's change is not kept
IGNORED = "--ignored=matching"
_CONFIG_WORDS = (b"excludesfile", b"attributesfile", b"[include", b"[includeif")
# what the environment may hold without changing what `git status` prints (authorship, prompts,
# editors, tracing, transport and TLS; the global and system config files, whose stat is in the
# facts); any other GIT_* variable (an index file, config entries, replace objects, another object
# store...) means git is asked every time. The values are part of the facts either way.
_QUIET_ENV = ("GIT_AUTHOR_", "GIT_COMMITTER_", "GIT_TRACE", "GIT_SSH", "GIT_ASKPASS", "GIT_TERMINAL_PROMPT",
              "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_MERGE_", "GIT_CONFIG_NOSYSTEM",
              "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_HTTP_", "GIT_SSL_", "GIT_CURL_", "GIT_PROXY_",
              "GIT_PROTOCOL", "GIT_ALLOW_PROTOCOL", "GIT_FLUSH", "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR",
              "GIT_REDACT_")


def listing(project_dir: str, dot_git: str, top: str, head: bytes, pinned: bool, run) -> bytes | None:
    """The ``git status --porcelain=v1 -z --untracked-files=normal`` output of ``project_dir``
    (its work tree's top is ``top``, its ``.git`` is ``dot_git``, HEAD's commit ``head``) without
    the entries of loopx's own ``.loopx/`` folders (which every caller leaves out): from the
    cache when it is valid (module docstring), else from ``run(extra_args) -> bytes | None``, which
    starts git with ``extra_args`` appended (None: git failed; passed on). Never raises."""
    cache = os.path.join(project_dir, layout.DIRNAME, layout.GITSTATUS)
    facts = _facts(dot_git, top, head, pinned) if os.name != "nt" else None
    if facts is None or not os.path.isdir(os.path.dirname(cache)):
        return _strip(run(()))
    entry = _load(cache)
    if entry is not None and entry.get("facts") == facts[0]:
        if entry.get("large"):
            return _strip(run(()))
        stamps = _walk(top, entry["skip"])
        if stamps is not None and stamps == entry["stamps"]:
            return entry["listing"]
    begun = time.time_ns()
    raw = run((IGNORED,))
    if raw is None:  # a git without --ignored=matching (before 2.16): the plain call, never cached
        return _strip(run(()))
    plain, skip = split_ignored(raw)
    stamps = _walk(top, skip)
    if stamps is None:
        _save(cache, {"v": VERSION, "facts": facts[0], "large": True})
    elif _settled(stamps, facts[1], begun) and _config_plain(dot_git):
        _save(cache, {"v": VERSION, "facts": facts[0], "skip": skip, "stamps": stamps, "listing": plain})
    return plain


def own(path: bytes) -> bool:
    """Whether a listed path lies in a ``.loopx/`` folder (loopx's own files, never a change)."""
    name = layout.DIRNAME.encode()
    return path == name or path.startswith(name + b"/") or b"/" + name + b"/" in b"/" + path


def _strip(raw: bytes | None) -> bytes | None:
    return None if raw is None else split_ignored(raw)[0]


def split_ignored(raw: bytes) -> tuple[bytes, frozenset[str]]:
    """``(raw without its "!! " entries and loopx's own paths, the ignored folders it named)``:
    the second field of a rename or copy (its source path, which has no status letters) goes with
    its entry."""
    fields = raw.split(b"\0")
    kept: list[bytes] = []
    skip = set()
    i = 0
    while i < len(fields):
        f = fields[i]
        pair = len(f) >= 3 and (f[0:1] in b"RC" or f[1:2] in b"RC") and i + 1 < len(fields)
        if f.startswith(b"!! "):
            if f.endswith(b"/"):
                skip.add(f[3:].decode("utf-8", "surrogateescape"))
        elif len(f) > 3 and own(f[3:]) and not pair:
            pass
        else:
            kept.append(f)
            if pair:
                kept.append(fields[i + 1])
        i += 2 if pair else 1
    return b"\0".join(kept), frozenset(skip)


def _stat(path: str):
    try:
        s = os.stat(path)
    except OSError:
        return None
    return (s.st_mtime_ns, s.st_ctime_ns, s.st_size, s.st_ino)


def _facts(dot_git: str, top: str, head: bytes, pinned: bool) -> tuple[tuple, list] | None:
    """``(what the answer depends on besides the work tree's entries, their stat stamps)``; None:
    never cached here."""
    if not os.path.isdir(dot_git) or os.path.lexists(os.path.join(top, ".gitmodules")):
        return None
    env = os.environ
    git_env = tuple(sorted((k, v) for k, v in env.items() if k.startswith("GIT_")))
    if any(not k.startswith(_QUIET_ENV) for k, _ in git_env):
        return None
    xdg = _xdg()
    replace = os.path.join(dot_git, "refs", "replace")
    if os.path.isdir(replace) and os.listdir(replace):  # replace objects: git compares against other trees
        return None
    files = [os.path.join(dot_git, "index"), os.path.join(dot_git, "info", "exclude"),
             os.path.join(dot_git, "info", "attributes"), os.path.join(dot_git, "info", "sparse-checkout"),
             os.path.join(dot_git, "info", "grafts"), os.path.join(dot_git, "packed-refs"), replace,
             os.path.join(dot_git, "config"), *_user_configs(), os.path.join(xdg, "git", "ignore"),
             os.path.join(xdg, "git", "attributes"), "/etc/gitattributes"]
    stats = [_stat(f) for f in files]
    return (VERSION, head, pinned, top, xdg, git_env, tuple(stats)), [s for s in stats if s is not None]


def _xdg() -> str:
    """Where git looks for the user's ``git/config``, ``git/ignore`` and ``git/attributes``."""
    return os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.environ.get("HOME", ""), ".config")


def _user_configs() -> list[str]:
    """The global and system config files git reads (``GIT_CONFIG_GLOBAL``/``SYSTEM`` name others)."""
    env = os.environ
    return [env.get("GIT_CONFIG_GLOBAL") or os.path.join(env.get("HOME", ""), ".gitconfig"),
            os.path.join(_xdg(), "git", "config"), env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"]


def _config_plain(dot_git: str) -> bool:
    """False when a git config this answer depends on includes another file or names an excludes
    or attributes file (a change there would not show in ``_facts``), or a packed ref is a replace
    object."""
    try:
        with open(os.path.join(dot_git, "packed-refs"), "rb") as fh:
            if b" refs/replace/" in fh.read():
                return False
    except OSError:
        pass
    for path in (os.path.join(dot_git, "config"), *_user_configs()):
        try:
            with open(path, "rb") as fh:
                text = fh.read().lower()
        except OSError:
            continue
        if any(w in text for w in _CONFIG_WORDS):
            return False
    return True


def _walk(top: str, skip: frozenset[str]) -> list | None:
    """The ``lstat`` stamps of every entry git walks, in walk order; None when the tree has more
    than ``CAP`` entries, a ``.git`` below its top, or a folder that cannot be read."""
    try:
        s = os.stat(top)
    except OSError:
        return None
    out: list = [("", s.st_mtime_ns, s.st_ctime_ns, s.st_ino)]
    todo = [""]
    n = 0
    while todo:
        rel = todo.pop()
        try:
            it = os.scandir(os.path.join(top, rel) if rel else top)
        except OSError:
            return None
        with it:
            for e in it:
                name = e.name
                if name == ".git":
                    if rel:
                        return None
                    continue
                if name == layout.DIRNAME and e.is_dir(follow_symlinks=False):
                    continue  # a store: its changes are loopx's own (left out of every listing)
                n += 1
                if n > CAP:
                    return None
                path = rel + name
                folder = e.is_dir(follow_symlinks=False)
                if folder and path + "/" in skip:  # ignored by a pattern: what happens inside is not git's
                    out.append((path, 0, 0))  # business, only that it is there (its folder's mtime says so)
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    return None
                out.append((path, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode))
                if folder:
                    todo.append(path + "/")
    return out


def _settled(stamps: list, facts: list, begun: int) -> bool:
    """True when every walked entry (``(path, mtime, ctime, ...)``) and every file of the facts
    (``(mtime, ctime, ...)``) last changed at least ``RACY_NS`` before ``begun``."""
    limit = begun - RACY_NS
    return all(s[1] < limit and s[2] < limit for s in stamps) and all(f[0] < limit and f[1] < limit for f in facts)


def _load(path: str) -> dict | None:
    """The cache file's entry, or None for a missing, damaged (CRC), foreign or old one."""
    try:
        data = read_bytes(path, most=MOST_CACHE)
        if data[:4] != MAGIC or int.from_bytes(data[4:8], "little") != zlib.crc32(data[8:]):
            return None
        entry = marshal.loads(data[8:])
    except Exception:  # noqa: BLE001 - a disposable cache: anything odd in it is no cache
        return None
    if not isinstance(entry, dict) or entry.get("v") != VERSION:
        return None
    if not entry.get("large") and not (isinstance(entry.get("listing"), bytes) and isinstance(entry.get("stamps"), list)
                                       and isinstance(entry.get("skip"), frozenset)):
        return None
    return entry


def _save(path: str, entry: dict) -> None:
    """Write the cache file (best effort); never through a symlink (this file is nobody's but
    loopx's: a link planted there would aim the write elsewhere), nor into a linked cache folder."""
    if os.path.islink(os.path.dirname(path)):
        return
    body = marshal.dumps(entry)
    try:
        atomic_write(path, MAGIC + zlib.crc32(body).to_bytes(4, "little") + body, sync=False, follow=False)
    except OSError:  # a read-only store: the next call asks git again
        pass
