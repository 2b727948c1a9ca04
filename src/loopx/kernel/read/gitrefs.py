"""A git repository's HEAD and its branch, tag and stash heads, read from the files git keeps them
in (``HEAD``, loose refs, ``packed-refs``) instead of starting ``git rev-parse`` and
``git for-each-ref``: the fingerprint of every ``next`` and ``turn finish`` needs them, and each
git process costs about as much as the rest of the command.

``read(dot_git)`` returns exactly what those two commands print (``fingerprint.git_part`` hashes
it; ``facts`` gives the same with the listing made only when asked, and what it is made of), or
None for anything this reader does not model (a reftable repository, a symbolic ref among
the heads, ``GIT_DIR``-style overrides, a ``core.worktree`` setting, an unreadable file): the caller
then asks git itself, as before. ``tests/test_gitrefs.py`` compares both on real repositories.
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


class _Unsure(Exception):
    """Something only git itself should interpret."""


def _text(path: str, limit: int = 1 << 16) -> str:
    """The file's text, at most ``limit`` bytes (a ref or a config: anything longer is not git's);
    ``packed-refs`` is read whole (``_packed``)."""
    with open(path, "rb") as fh:
        return fh.read(limit).decode("utf-8")


def _dirs(dot_git: str) -> tuple[str, str, str]:
    """(the gitdir holding HEAD, the common dir holding the refs, the work tree's top)."""
    top = os.path.dirname(os.path.abspath(dot_git))
    gitdir = dot_git
    if os.path.isfile(dot_git):  # a worktree's or submodule's ".git" file: "gitdir: <path>"
        line = _text(dot_git).strip()
        if not line.startswith("gitdir:"):
            raise _Unsure
        where = line[len("gitdir:"):].strip()
        gitdir = where if os.path.isabs(where) else os.path.join(top, where)
    common = gitdir
    if os.path.exists(os.path.join(gitdir, "commondir")):
        rel = _text(os.path.join(gitdir, "commondir")).strip()
        common = rel if os.path.isabs(rel) else os.path.join(gitdir, rel)
    if os.path.exists(os.path.join(common, "reftable")):
        raise _Unsure
    try:
        config = _text(os.path.join(common, "config")).lower()
    except FileNotFoundError:
        config = ""
    if "worktree" in config or "refstorage" in config or "bare = true" in config:
        raise _Unsure
    return gitdir, common, top


def _loose(common: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for prefix in PATTERNS:
        base = os.path.join(common, *prefix.rstrip("/").split("/"))
        for folder, subdirs, files in os.walk(base):
            subdirs.sort()
            rel = os.path.relpath(folder, common).replace(os.sep, "/")
            for name in files:
                if name.endswith(".lock") or name.startswith("."):
                    raise _Unsure
                out[f"{rel}/{name}"] = _sha(_text(os.path.join(folder, name)))
    stash = os.path.join(common, "refs", "stash")
    if os.path.isfile(stash):
        out[STASH] = _sha(_text(stash))
    return out


_HEX = "0123456789abcdef"


def _sha(content: str) -> str:
    value = content.strip()
    if len(value) not in (40, 64) or value.strip(_HEX):  # strip: what is left is not lowercase hex
        raise _Unsure  # a symbolic ref, or something git would warn about
    return value


_MEMO: dict = {}  # this process's last packed-refs and listing: a command reads the refs up to three times
_HEX_BYTES = _HEX.encode()
_SHOWN = tuple(p.encode() for p in PATTERNS)


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
        st = os.stat(path)
    except FileNotFoundError:
        return (path, None)
    return (path, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def _packed(common: str) -> _Packed:
    """The refs of ``packed-refs``, the whole file (a repository with thousands of tags has one of
    hundreds of KB: a cut file would give a listing git never prints). Parsed once per process
    while the file's stat is the same (git replaces the file, never rewrites it in place), in a
    few passes over its lines that do their work in C (3,000 tags: 7 ms with Python work per line,
    1.5 ms now). Raises ``_Unsure`` for a line git would refuse (a hash that is not lowercase hex
    of the file's one length) or a carriage return."""
    key = packed_key(common)
    path = key[0]
    if _MEMO.get("packed_key") == key:
        return _MEMO["packed"]
    data = b""
    if key[1] is not None:
        with open(path, "rb") as fh:
            data = fh.read()
    if b"\r" in data or (data and not data.endswith(b"\n")):  # git refuses an unterminated last line
        raise _Unsure
    every = [line for line in data.split(b"\n") if line and line[0] not in b"#^"]  # "^": an annotated tag's target
    width = every[0].find(b" ") if every else 40
    start = width + 1
    # every line is "<hash> <name>" with one hash length: its first `start` bytes are hex and a space
    if width not in (40, 64) or b"".join([line[:start] for line in every]).translate(None, _HEX_BYTES) != b" " * len(every):
        raise _Unsure
    lines = [line for line in every if line.startswith(_SHOWN, start) or line[start:] == b"refs/stash"]
    names = [line[start:] for line in lines]
    if names != sorted(names):  # git writes the file sorted (its "sorted" trait); a hand-made one may not be
        pairs = sorted(zip(names, lines, strict=True))
        names, lines = [n for n, _ in pairs], [ln for _, ln in pairs]
    out = _Packed(lines, names, every, width)
    _MEMO.clear()  # the listing goes with the packed refs it was made of
    _MEMO.update(packed_key=key, packed=out)
    return out


def _packed_one(common: str, name: str) -> str:
    """The hash of ref ``name`` in ``packed-refs`` ("" when it is not there), found by searching the
    file's bytes for its line rather than parsing every line (HEAD's branch is packed after a
    clone or a ``git gc``, and the listing may not be needed: ``fingerprint``'s kept git part).
    Raises ``_Unsure`` for a line git would not read that way."""
    key = packed_key(common)
    if _MEMO.get("packed_key") == key:
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
    return _sha(data[start:end].decode("ascii"))


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


def facts(dot_git: str) -> tuple[bytes, Callable[[], bytes | None], str, tuple] | None:
    """``(head, refs, top, key)`` as ``read`` gives them, but ``refs`` a callable that gives the
    listing when asked (None: git must answer it), and ``key`` what the listing is made of
    (``packed_key`` and the loose refs with their hashes): a caller that kept what it derived from a
    listing under its key (``fingerprint``'s git part) need not make the listing again. None when
    git must answer."""
    if any(os.environ.get(k) for k in _ENV):
        return None
    try:
        gitdir, common, top = _dirs(dot_git)
        loose = _loose(common)
        head = _text(os.path.join(gitdir, "HEAD")).strip()
        if head.startswith("ref:"):
            target = head[4:].strip()
            if target.startswith(("refs/heads/", "refs/tags/")) or target == STASH:
                sha = loose.get(target) or _packed_one(common, target)
            else:
                path = os.path.join(common, *target.split("/"))
                sha = _sha(_text(path)) if os.path.isfile(path) else _packed_one(common, target)
        else:
            sha = _sha(head)
        key = (packed_key(common), tuple(sorted(loose.items())))
    except (OSError, UnicodeError, _Unsure):  # UnicodeError: a ref name that is not UTF-8 (git answers)
        return None

    def refs() -> bytes | None:
        try:
            return _listing(_packed(common), loose)
        except (OSError, UnicodeError, _Unsure):
            return None
    return sha.encode("ascii"), refs, top, key
