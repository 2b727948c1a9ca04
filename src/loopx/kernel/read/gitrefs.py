"""A git repository's HEAD and its branch, tag and stash heads, read from the files git keeps them
in (``HEAD``, loose refs, ``packed-refs``) instead of starting ``git rev-parse`` and
``git for-each-ref``: the fingerprint of every ``next`` and ``turn finish`` needs them, and each
git process costs about as much as the rest of the command.

``read(dot_git)`` returns exactly what those two commands print (``fingerprint.git_part`` hashes
it; ``facts`` gives the same with the listing made only when asked, and what it is made of), or
None for anything this reader does not model, and for anything git itself would refuse, warn
about or read another way: a reftable repository, a symbolic ref or a symlink among the refs,
``GIT_DIR``-style overrides, a ``core.worktree`` or ``bare`` setting, a hash of the wrong length
for the repository's object format, a ref name git calls invalid, a ``packed-refs`` line or
header git would not take, two lines for one ref, lines out of the order the file claims, a
``refs/stash/*`` ref, an unreadable file. The caller then asks git itself, as before.
``tests/test_gitrefs.py`` compares both on real repositories.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time (the fingerprint is on the hot path)
if TYPE_CHECKING:
    from collections.abc import Callable

PATTERNS = ("refs/heads/", "refs/tags/")
STASH = "refs/stash"
_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES",
        "GIT_DISCOVERY_ACROSS_FILESYSTEM")  # they change which repository or refs git would read
_HEX = "0123456789abcdef"
_HEX_BYTES = _HEX.encode()
# what git's check-ref-format refuses in a name: control characters and these (one translate)...
_BAD_BYTES = bytes(range(32)) + b"\x7f ~^:?*[\\"
# ...and these, with each name followed by "\n" (components that start with "." or end with
# ".lock", "..", "@{", empty components, a trailing "/" or ".")
_BAD_IN_NAME = (b"..", b"/.", b".lock/", b".lock\n", b"@{", b"//", b"/\n", b".\n")


class _Unsure(Exception):
    """Something only git itself should interpret."""


_PER_WORKTREE = ("refs/worktree/", "refs/bisect/", "refs/rewritten/")  # kept in each worktree's own folder
_ERRORS = (OSError, ValueError, _Unsure)  # ValueError: a NUL in a path, bytes that are not UTF-8


def _text(path: str, limit: int = 1 << 16) -> str:
    """The text of the regular file at ``path`` (a symlink, a FIFO, a folder: ``_Unsure``; git may
    follow or block where this must not), at most ``limit`` bytes (a ref or a config: anything
    longer is not git's); ``packed-refs`` is read whole (``_packed``)."""
    if not _regular(path):
        raise _Unsure
    with open(path, "rb") as fh:
        return fh.read(limit).decode("utf-8")


def _regular(path: str) -> bool:
    """Whether ``path`` is a regular file itself (``lstat``: not a symlink). Raises
    FileNotFoundError when there is nothing there."""
    return os.lstat(path).st_mode & 0o170000 == 0o100000


def _dirs(dot_git: str) -> tuple[str, str, str, int]:
    """(the gitdir holding HEAD, the common dir holding the refs, the work tree's top, the length
    of the repository's hashes: 40, or 64 with ``extensions.objectformat = sha256``)."""
    top = os.path.dirname(os.path.abspath(dot_git))
    if os.stat(top).st_uid != os.geteuid():
        raise _Unsure  # another user's repository: git's safe.directory rules decide whether it reads it
    gitdir = dot_git
    if os.path.isfile(dot_git):  # a worktree's or submodule's ".git" file: "gitdir: <path>"
        line = _text(dot_git).rstrip("\n")
        if not line.startswith("gitdir: ") or "\n" in line:
            raise _Unsure
        where = line[len("gitdir: "):]
        gitdir = where if os.path.isabs(where) else os.path.join(top, where)
    common = gitdir
    if os.path.exists(os.path.join(gitdir, "commondir")):
        rel = _text(os.path.join(gitdir, "commondir")).strip()
        common = rel if os.path.isabs(rel) else os.path.join(gitdir, rel)
    if (os.path.exists(os.path.join(common, "reftable")) or not os.path.isdir(os.path.join(common, "refs"))
            or not os.path.isdir(os.path.join(common, "objects"))):
        raise _Unsure  # reftable, or no repository git would recognise
    try:
        config = _text(os.path.join(common, "config"))
    except FileNotFoundError:
        config = ""
    width = _WIDTH.get(config)
    if width is None:
        width = _WIDTH[config] = _width(config)  # a pure function of the text: a command asks up to three times
    return gitdir, common, top, width


_WIDTH: dict[str, int] = {}


def _width(config: str) -> int:
    """The hash length (40, 64) a repository with this ``config`` text uses; ``_Unsure`` for a
    config that may change what git reads or how (``core.worktree``, ``core.bare``, any extension
    but ``objectformat``, a ref storage, a format version git may not take). Sections are read
    line by line, ``[core] bare = true`` on one line too."""
    section = ""
    values: dict[str, str] = {}
    for raw in config.replace("]", "]\n").splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            section = line[1:].split("]", 1)[0].strip().lower()
            continue
        name, eq, value = line.partition("=")
        values[f"{section}.{name.strip().lower()}"] = value.strip() if eq else "true"  # "bare" alone is true
    if any(k.startswith("extensions.") and k != "extensions.objectformat" for k in values):
        raise _Unsure  # worktreeconfig, refstorage, an extension unknown here
    if "core.worktree" in values or any(k.startswith(("include.", "includeif")) for k in values):
        raise _Unsure  # another work tree, or an included file where any setting may hide
    if values.get("core.bare", "false").lower() not in ("false", "no", "off", "0"):
        raise _Unsure
    version = values.get("core.repositoryformatversion", "0")
    fmt = values.get("extensions.objectformat")
    if version not in ("0", "1") or (fmt is not None and (version != "1" or fmt not in ("sha1", "sha256"))):
        raise _Unsure  # git refuses, or reads what this module does not model
    return 64 if fmt == "sha256" else 40


def _names_ok(names: list[bytes]) -> bool:
    """Whether git's check-ref-format takes every name (refs/...): no control character, none of
    ``_BAD_IN_NAME``."""
    if not names:
        return True
    joined = b"\n".join(names) + b"\n"
    return (len(joined.translate(None, _BAD_BYTES)) == len(joined) - len(names)  # only the "\n"s went
            and not any(bad in joined for bad in _BAD_IN_NAME))


def _loose(common: str, width: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for prefix in PATTERNS:
        base = os.path.join(common, *prefix.rstrip("/").split("/"))
        if os.path.islink(base) or (os.path.lexists(base) and not os.path.isdir(base)):
            raise _Unsure  # refs/heads or refs/tags a file (git lists it) or a link (git follows it)
        for folder, subdirs, files in os.walk(base):
            subdirs.sort()
            rel = os.path.relpath(folder, common).replace(os.sep, "/")
            for name in subdirs:
                if os.path.islink(os.path.join(folder, name)):
                    raise _Unsure  # git follows it; this walk would not
            for name in files:
                if name.endswith(".lock") or name.startswith("."):
                    raise _Unsure
                out[f"{rel}/{name}"] = _sha(_text(os.path.join(folder, name)), width)  # regular files only
    stash = os.path.join(common, "refs", "stash")
    if os.path.isdir(stash):
        raise _Unsure  # refs/stash/*: git lists those under the pattern refs/stash too
    if os.path.lexists(stash):
        out[STASH] = _sha(_text(stash), width)
    if out and not _names_ok([n.encode() for n in out]):
        raise _Unsure
    return out


def _sha(content: str, width: int) -> str:
    """The hash a loose ref or a detached HEAD holds, written as git writes it (``width`` lowercase
    hex digits and a newline, not all zeros); anything else is ``_Unsure`` (a symbolic ref, another
    object format, whitespace git reads otherwise, a null hash git calls broken)."""
    value = content[:-1] if content.endswith("\n") else content
    if len(value) != width or value.strip(_HEX) or value == "0" * width:  # strip: what is left is not hex
        raise _Unsure
    return value


_MEMO: dict = {}  # this process's last packed-refs and listing: a command reads the refs up to three times


class _Packed:
    """What ``packed-refs`` holds, as bytes (what git prints): ``lines`` (``b"<sha> <name>"``, as
    ``git for-each-ref`` prints them) of the heads, tags and stash, in refname order (bytes order,
    git's ``strcmp``); ``names`` their names; ``every`` every ref line (for a HEAD that names
    another ref); ``width`` the hash's length (40, or 64 in a SHA-256 repository)."""

    __slots__ = ("lines", "names", "every", "width")

    def __init__(self, lines: list[bytes], names: list[bytes], every: list[bytes], width: int) -> None:
        self.lines, self.names, self.every, self.width = lines, names, every, width

    def get(self, name: str, default: str = "") -> str:
        """The hash ``name`` has here, or ``default``."""
        want = name.encode()
        i = _find(self.names, want)
        if i < len(self.names) and self.names[i] == want:
            return self.lines[i][:self.width].decode("ascii")
        for line in self.every:  # a ref outside the heads, tags and stash (rare: HEAD names one)
            if line[self.width + 1:] == want:
                return line[:self.width].decode("ascii")
        return default


def _find(names: list[bytes], name: bytes) -> int:
    """Where ``name`` is or would go in the sorted ``names`` (binary search)."""
    lo, hi = 0, len(names)
    while lo < hi:
        mid = (lo + hi) // 2
        if names[mid] < name:
            lo = mid + 1
        else:
            hi = mid
    return lo


def packed_key(common: str) -> tuple:
    """``(path, mtime_ns, ctime_ns, size, inode)`` of ``packed-refs`` in ``common``, or ``(path,
    None)`` when there is none: what its content is known by (git replaces the file whole)."""
    path = os.path.join(common, "packed-refs")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return (path, None)
    if st.st_mode & 0o170000 != 0o100000:
        raise _Unsure  # a symlink, a FIFO: git follows or blocks where this must not
    return (path, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def _fixed(rows: list[bytes], width: int, peeled: bool) -> bool:
    """Whether every row is ``"<hash> <name>"`` (``peeled``: exactly ``"^<hash>"``) with ``width``
    lowercase hex digits: checked over the joined rows with C-level operations (a length, a strided
    slice, a ``translate``) rather than row by row."""
    n = len(rows)
    if not n:
        return True
    size = width + 1  # "<hash> " or "^<hash>"
    joined = b"\n".join(rows if peeled else [row[:size] for row in rows])
    if len(joined) != n * (size + 1) - 1:
        return False  # a row shorter than its fields (or, peeled, longer)
    mark = b"^" if peeled else b" "
    return (joined[0 if peeled else width::size + 1] == mark * n
            and joined.translate(None, _HEX_BYTES + b"\n") == mark * n)


def _packed(common: str, width: int, expect: tuple | None = None) -> _Packed:
    """The refs of ``packed-refs``, the whole file (a repository with thousands of tags has one of
    hundreds of KB: a cut file would give a listing git never prints). Parsed once per process
    while the file's stat is the same (git replaces the file, never rewrites it in place), in a
    few passes over its lines that do their work in C (3,000 tags: 7 ms with Python work per line,
    1.5 ms now). ``expect``: the ``packed_key`` the caller read the rest by (another file now is
    ``_Unsure``). Raises ``_Unsure`` for anything git would refuse or read another way (module
    docstring)."""
    key = packed_key(common)
    if expect is not None and key != expect:
        raise _Unsure  # replaced since the caller looked: git may list either
    if _MEMO.get("packed_key") == key and _MEMO.get("packed_width") == width:
        return _MEMO["packed"]
    data = b""
    if key[1] is not None:
        with open(key[0], "rb") as fh:
            data = fh.read()
    if b"\r" in data or (data and not data.endswith(b"\n")):  # git refuses an unterminated last line
        raise _Unsure
    rows = data.split(b"\n")[:-1] if data else []
    traits = b" "
    head = b"# pack-refs with:"
    if rows and rows[0].startswith(b"#"):
        if not rows[0].startswith(head):
            raise _Unsure
        traits, rows = b" " + rows[0][len(head):] + b" ", rows[1:]  # git splits them on spaces
    every = [row for row in rows if row[:1] != b"^"]  # "^<hash>": the object an annotated tag names
    peeled = [row for row in rows if row[:1] == b"^"] if len(every) < len(rows) else []
    if not _fixed(every, width, False) or not _fixed(peeled, width, True):
        raise _Unsure  # a comment, an empty line, a hash of another length or not hex, a bad peel
    if peeled and (rows[0][:1] == b"^" or b"^^" in b"".join([row[:1] for row in rows])):
        raise _Unsure  # a peel that follows no ref line
    if (b"\n" + data).find(b"\n" + b"0" * width + b" ") >= 0:
        raise _Unsure  # a null hash: git calls the ref broken
    start = width + 1
    names = [row[start:] for row in every]
    if not _names_ok(names) or len(set(names)) != len(names) or any(n.startswith(b"refs/stash/") for n in names):
        raise _Unsure  # names git refuses, one ref twice, refs/stash/* (listed under refs/stash)
    if names != sorted(names):
        if b" sorted " in traits:
            raise _Unsure  # git trusts the trait and would look lines up where they are not
        pairs = sorted(zip(names, every, strict=True))
        names, every = [n for n, _ in pairs], [row for _, row in pairs]
    # sorted, the heads, the stash and the tags are three runs ("refs/heads/" < "refs/stash" <
    # "refs/tags/"; "0" follows "/"): cut out by binary search, not a test per line
    lines: list[bytes] = []
    shown: list[bytes] = []
    for lo, hi in ((b"refs/heads", b"refs/heads\x00"), (b"refs/heads/", b"refs/heads0"), (b"refs/stash", b"refs/stash\x00"),
                   (b"refs/tags", b"refs/tags\x00"), (b"refs/tags/", b"refs/tags0")):  # the name itself, its folder
        a, b = _find(names, lo), _find(names, hi)
        lines += every[a:b]
        shown += names[a:b]
    out = _Packed(lines, shown, every, width)
    _MEMO.clear()  # the listing goes with the packed refs it was made of
    _MEMO.update(packed_key=key, packed_width=width, packed=out)
    return out


def _packed_one(common: str, name: str, width: int) -> str:
    """The hash of ref ``name`` in ``packed-refs`` ("" when it is not there), found by searching the
    file's bytes for its line rather than parsing every line: only for a caller that checks the
    whole file later or holds proof it was checked (``facts(lazy=True)``: the fingerprint's kept
    git part exists only for a file ``_packed`` took). Raises ``_Unsure`` for a line git would not
    read that way."""
    key = packed_key(common)
    if _MEMO.get("packed_key") == key and _MEMO.get("packed_width") == width:
        return _MEMO["packed"].get(name, "")
    if key[1] is None:
        return ""
    with open(key[0], "rb") as fh:
        data = b"\n" + fh.read()
    if b"\r" in data or not data.endswith(b"\n"):  # git refuses an unterminated last line
        raise _Unsure
    end = data.find(b" " + name.encode() + b"\n")
    if end < 0:
        return ""
    start = data.rfind(b"\n", 0, end) + 1
    return _sha(data[start:end].decode("ascii"), width)


def _listing(packed: _Packed, loose: dict[str, str]) -> bytes:
    """What ``git for-each-ref`` prints for these refs (loose ones over packed ones, in refname
    order), kept for the process while the packed refs (``_packed``'s, which it was called with)
    and the loose ones are the same. The loose refs (a few: git packs the rest) go into the
    packed lines by binary search."""
    key = (_MEMO.get("packed_key"), tuple(sorted(loose.items())))
    if _MEMO.get("listing_key") != key:
        lines, names = packed.lines, packed.names
        shown = sorted((n.encode(), f"{sha_} {n}".encode()) for n, sha_ in loose.items()
                       if n == STASH or n.startswith(PATTERNS))
        if shown:
            lines, names = list(lines), list(names)
            for name, line in shown:
                i = _find(names, name)
                if i < len(names) and names[i] == name:
                    lines[i] = line
                else:
                    names.insert(i, name)
                    lines.insert(i, line)
        _MEMO.update(listing_key=key, listing=b"\n".join(lines) + b"\n" if lines else b"")
    return _MEMO["listing"]


def read(dot_git: str) -> tuple[bytes, bytes, str] | None:
    """``(head, refs, top)``: what ``git rev-parse -q --verify HEAD`` prints (stripped; b"" on an
    unborn branch), what ``git for-each-ref --format='%(objectname) %(refname)' refs/heads
    refs/tags refs/stash`` prints, and the work tree's top folder; None when git must answer."""
    got = facts(dot_git)
    refs = got[1]() if got is not None else None
    return None if got is None or refs is None else (got[0], refs, got[2])


def facts(dot_git: str, lazy: bool = False) -> tuple[bytes, Callable[[], bytes | None], str, tuple] | None:
    """``(head, refs, top, key)`` as ``read`` gives them, but ``refs`` a callable that gives the
    listing when asked (None: git must answer it), and ``key`` what the listing is made of
    (``packed_key`` and the loose refs with their hashes). None when git must answer.

    ``lazy``: HEAD's branch, when only packed, is found by its line (``_packed_one``) without
    checking the rest of ``packed-refs``; the caller must then call ``refs`` (which checks it) or
    hold proof the file under ``key`` was checked before (``gitmemo``'s entry). Otherwise the
    whole file is checked first, and a file git would refuse gives None."""
    if any(os.environ.get(k) for k in _ENV):
        return None
    try:
        gitdir, common, top, width = _dirs(dot_git)
        key0 = packed_key(common)
        loose = _loose(common, width)
        head = _text(os.path.join(gitdir, "HEAD"))
        if head.startswith("ref: "):  # as git writes it: "ref: <name>\n", a name it takes, under refs/
            target = head[5:-1] if head.endswith("\n") else head[5:]
            if (not target.startswith("refs/") or not _names_ok([target.encode()])
                    or target.startswith(_PER_WORKTREE)):
                raise _Unsure  # git refuses it, or reads it from the worktree's own folder
            shown = target.startswith(("refs/heads/", "refs/tags/")) or target == STASH
            path = os.path.join(common, *target.split("/"))
            if shown and target in loose:
                sha = loose[target]
            elif not shown and os.path.lexists(path):
                sha = _sha(_text(path), width)
            else:
                sha = _packed_one(common, target, width) if lazy else _packed(common, width, key0).get(target, "")
        else:
            sha = _sha(head, width)
        if not lazy:
            _packed(common, width, key0)  # every line checked whatever HEAD names (git reads them all)
        key = (key0, tuple(sorted(loose.items())))
    except _ERRORS:  # git answers
        return None

    def refs() -> bytes | None:
        try:
            return _listing(_packed(common, width, key0), loose)
        except _ERRORS:
            return None
    return sha.encode("ascii"), refs, top, key
