"""The fingerprint's git part kept for a repository with thousands of refs.

The git part (``fingerprint.digest``) hashes git's ref listing: in a repository with thousands of
packed tags that listing is hundreds of KB, and making it (``gitrefs``: reading and checking
``packed-refs``) and hashing it (the interpreter's own SHA-256, about 48 instructions a byte) cost
more than the rest of a ``next`` does (3,000 tags: 13M instructions of 120M). Between two turns the
refs rarely change, so the part is kept in ``.loopx/cache/gitrefs.bin`` under everything it was
made of, and given again while all of that is the same: a memo, so the part is the one
``fingerprint.digest`` gives, never an approximation of it.

What an entry is kept under (``fingerprint.git_facts`` builds the key): ``packed-refs``' stat
(path, mtime and ctime in ns, size, inode: git replaces the file whole, never edits it in place),
the loose refs with their hashes, HEAD's hash, the work tree's top and the dirty-file lines
(``fingerprint.items``: path, size and mtime of each). Only ``packed-refs`` stands in by its stat,
so an entry is not kept while that file changed less than ``RACY_NS`` ago (a rewrite in the same
clock tick could keep the stat: git's "racy" rule); a later change gives a later ctime, which no
one can set back.

The file is ``b"LXGR"``, the CRC-32 of the rest (4 bytes, little-endian), then
``{"v": VERSION, "entries": [[key, part], ...]}`` (marshal), the newest ``KEEP`` entries (a turn
and the next one see two work trees). A missing, damaged or foreign file is no memo, and anything
odd in it is never an error; written best effort (disposable), never through a symlink.
"""

from __future__ import annotations

import marshal
import os
import time
import zlib

from loopx.kernel.storage import layout
from loopx.kernel.storage.fs import MOST_CACHE, atomic_write, read_bytes

VERSION = 1
MAGIC = b"LXGR"
KEEP = 4
RACY_NS = 2_000_000_000


def git_part(project_dir: str, key: tuple, refs_of, part_of) -> str | None:
    """The git part for ``key`` (see the module docstring): the kept one, or ``part_of(refs_of())``
    kept for the next call. ``refs_of`` gives the ref listing ``gitrefs`` made (which checks the
    whole ``packed-refs``: an entry is kept only for a file it took, which is what lets ``facts``
    find HEAD's packed branch by its line), or None when git must list the refs: then None, and
    nothing is kept. Never raises for the file."""
    path = os.path.join(project_dir, layout.DIRNAME, layout.GITREFS)
    entries = _load(path)
    for k, part in entries:
        if k == key:
            return part
    begun = time.time_ns()
    refs = refs_of()
    if refs is None:
        return None
    part = part_of(refs)
    packed = key[0][0]
    if packed[1] is None or (packed[1] < begun - RACY_NS and packed[2] < begun - RACY_NS):
        _save(path, [[key, part], *[e for e in entries if e[0] != key]][:KEEP])
    return part


def checked(project_dir: str, packed: tuple) -> bool:
    """Whether an entry was kept for the ``packed-refs`` of stat key ``packed`` (``gitrefs.packed_key``):
    entries are kept only for a file ``gitrefs`` checked whole, so such a file need not be checked
    again to trust a line found in it (``gitrefs.facts(lazy=True)``)."""
    return any(k[0][0] == packed for k, _ in _load(os.path.join(project_dir, layout.DIRNAME, layout.GITREFS))
               if isinstance(k, tuple) and k and isinstance(k[0], tuple) and k[0])


def _load(path: str) -> list:
    try:
        data = read_bytes(path, most=MOST_CACHE)
        if data[:4] != MAGIC or int.from_bytes(data[4:8], "little") != zlib.crc32(data[8:]):
            return []
        body = marshal.loads(data[8:])
    except Exception:  # noqa: BLE001 - a disposable memo: anything odd in it is no memo
        return []
    if not isinstance(body, dict) or body.get("v") != VERSION or not isinstance(body.get("entries"), list):
        return []
    return [e for e in body["entries"] if isinstance(e, list) and len(e) == 2 and isinstance(e[1], str)]


def _save(path: str, entries: list) -> None:
    """Write the file (best effort), never through a symlink nor into a linked cache folder."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    body = marshal.dumps({"v": VERSION, "entries": entries})
    try:
        atomic_write(path, MAGIC + zlib.crc32(body).to_bytes(4, "little") + body, sync=False, follow=False)
    except OSError:  # a read-only store: the next call makes the part again
        pass
