"""Idempotent installation of files and managed blocks, tracked by content hash.

Two kinds of target:

- ``file``: a whole file loopx owns (a SKILL.md, a Cursor rule). The manifest remembers the sha256
  of what loopx wrote, so a later check can tell ``stale`` (loopx's old text, safe to replace) from
  ``modified`` (someone edited it: never overwritten or removed without ``force``, and then a backup
  ``<name>.loopx-backup-<UTC stamp>`` is kept next to it).
- ``block``: a managed block inside a file the user owns (AGENTS.md, CLAUDE.md, GEMINI.md), between
  ``<!-- loopx:begin version=V hash=H -->`` and ``<!-- loopx:end -->``. The marker carries the
  loopx version and the sha256 (12 hex) of the block's text, so the file itself says whether the
  block was edited; text around the block is never touched.

Statuses: ``missing``, ``current``, ``stale``, ``modified``. The manifest is
``<LOOPX_HOME>/hosts/manifest.json``: ``{"files": {abs_path: {"sha256", "version", "installed",
"created_file"}}}``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from loopx import __version__
from loopx.kernel.storage import registry
from loopx.kernel.storage.chain import sha256  # the built-in one: hashlib loads OpenSSL (~4 MB)
from loopx.kernel.storage.fs import atomic_write, resolve

BEGIN_RE = re.compile(r"<!-- loopx:begin[^>]*?hash=([0-9a-f]{12})[^>]*-->\n?")
BEGIN_ANY = re.compile(r"<!-- loopx:begin[^>]*-->\n?")
END = "<!-- loopx:end -->"
UNDECODABLE = "\x00undecodable"  # read_text's answer for a file that is not UTF-8: never rewritten


@dataclass
class Item:
    """One thing to install: ``path`` (absolute), ``kind`` ``file``|``block``, ``content`` (the
    file's text or the block's inner text), ``host`` and ``what`` (a label for reports)."""

    path: str
    kind: str
    content: str
    host: str
    what: str


def sha(text: str) -> str:
    return sha256(text.encode("utf-8")).hexdigest()


def block_text(content: str) -> str:
    inner = content if content.endswith("\n") else content + "\n"
    return f"<!-- loopx:begin version={__version__} hash={sha(inner)[:12]} -->\n{inner}{END}\n"


# ------------------------------------------------------------------ manifest
def manifest_path() -> str:
    return os.path.join(registry.home(), "hosts", "manifest.json")


def load_manifest() -> dict:
    try:
        with open(manifest_path(), encoding="utf-8") as fh:
            data = json.load(fh)
        if isinstance(data, dict) and isinstance(data.get("files"), dict):
            return data
    except (OSError, ValueError):
        pass
    return {"files": {}}


def save_manifest(data: dict) -> None:
    path = manifest_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_text(path: str, text: str) -> None:
    """Write ``text`` atomically through ``kernel.fs.atomic_write``: a symlink keeps pointing at
    its target, which gets the new text; the target's file mode is kept. Creates parent folders."""
    os.makedirs(os.path.dirname(resolve(path)) or ".", exist_ok=True)
    atomic_write(path, text)


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        return UNDECODABLE


# ------------------------------------------------------------------ status
def find_block(text: str) -> tuple[int, int, str | None, str] | None:
    """(start, end, marker hash or None, inner text) of the managed block in ``text``, or None."""
    m = BEGIN_ANY.search(text)
    if not m:
        return None
    end = text.find(END, m.end())
    if end < 0:
        return None
    stop = end + len(END)
    if text[stop:stop + 1] == "\n":
        stop += 1
    h = BEGIN_RE.match(text, m.start())
    return m.start(), stop, (h.group(1) if h else None), text[m.end():end]


def status(item: Item, manifest: dict) -> str:
    """``missing`` | ``current`` | ``stale`` | ``modified`` for one item."""
    cur = read_text(item.path)
    if cur == UNDECODABLE:
        return "modified"
    if item.kind == "block":
        found = find_block(cur) if cur is not None else None
        if found is None:
            return "modified" if cur is not None and BEGIN_ANY.search(cur) else "missing"
        start, _, marker, inner = found
        if marker is None or sha(inner)[:12] != marker:
            return "modified"
        want = item.content if item.content.endswith("\n") else item.content + "\n"
        same_version = cur is not None and cur.startswith(f"<!-- loopx:begin version={__version__} ", start)
        return "current" if inner == want and same_version else "stale"
    if cur is None:
        return "missing"
    if cur == item.content:
        return "current"
    rec = manifest["files"].get(item.path)
    if rec and sha(cur) == rec.get("sha256"):
        return "stale"
    return "modified"


# ------------------------------------------------------------------ actions
def backup(path: str, now_stamp: str) -> str:
    dest = f"{path}.loopx-backup-{now_stamp}"
    n = 2
    while os.path.exists(dest):
        dest = f"{path}.loopx-backup-{now_stamp}-{n}"
        n += 1
    with open(path, "rb") as src, open(dest, "wb") as out:
        out.write(src.read())
    return dest


def install(item: Item, manifest: dict, *, force: bool, dry_run: bool, stamp: str) -> dict:
    """Install one item. Returns a report row {path, host, what, status, action, backup}."""
    st = status(item, manifest)
    row: dict = {"path": item.path, "host": item.host, "what": item.what, "status": st, "action": "unchanged",
           "backup": None}
    if st == "current":
        return row
    if item.kind == "block" and read_text(item.path) == UNDECODABLE:
        row["action"] = "kept (not UTF-8 text; add the block by hand)"
        return row
    if st == "modified" and not force:
        row["action"] = "kept (edited; --force replaces it and keeps a backup)"
        return row
    row["action"] = {"missing": "create", "stale": "update", "modified": "replace"}[st]
    if dry_run:
        row["action"] = "would " + row["action"]
        return row
    if st == "modified":
        row["backup"] = backup(item.path, stamp)
    existed = os.path.exists(item.path)
    if item.kind == "block":
        cur = read_text(item.path) or ""
        new = upsert_block(cur, item.content)
        write_text(item.path, new)
        rec = manifest["files"].get(item.path) or {"created_file": not existed}
        rec.update(sha256=sha(block_text(item.content)), version=__version__, installed=stamp, kind="block")
    else:
        write_text(item.path, item.content)
        rec = {"sha256": sha(item.content), "version": __version__, "installed": stamp, "kind": "file",
               "created_file": True}
    manifest["files"][item.path] = rec
    return row


def upsert_block(text: str, content: str) -> str:
    """``text`` with the loopx block replaced (or appended after a blank line)."""
    found = find_block(text)
    block = block_text(content)
    if found:
        start, stop, _, _ = found
        return text[:start] + block + text[stop:]
    if not text:
        return block
    sep = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + block


def remove(item: Item, manifest: dict, *, force: bool, dry_run: bool, stamp: str) -> dict:
    """Remove what loopx installed for one item; user text around a block stays."""
    st = status(item, manifest)
    row: dict = {"path": item.path, "host": item.host, "what": item.what, "status": st, "action": "nothing to remove",
           "backup": None}
    if st == "missing":
        manifest["files"].pop(item.path, None)
        return row
    if st == "modified" and (not force or (item.kind == "block" and read_text(item.path) == UNDECODABLE)):
        row["action"] = "kept (edited; --force removes it and keeps a backup)"
        return row
    row["action"] = "remove" if item.kind == "file" else "remove block"
    if dry_run:
        row["action"] = "would " + row["action"]
        return row
    if st == "modified":
        row["backup"] = backup(item.path, stamp)
    rec = manifest["files"].pop(item.path, None) or {}
    if item.kind == "file":
        os.remove(item.path)
    else:
        text = read_text(item.path) or ""
        found = find_block(text)
        assert found is not None, "status() found the block a moment ago"
        start, stop, _, _ = found
        before, after = text[:start], text[stop:]
        if not after and before.endswith("\n\n"):
            before = before[:-1]  # the blank line loopx put before its block
        rest = before + after
        if not rest.strip() and rec.get("created_file"):
            os.remove(item.path)
        else:
            write_text(item.path, rest)
    return row


def prune_dirs(path: str, stop_at: str) -> None:
    """Remove empty folders from ``dirname(path)`` up to (not including) ``stop_at``."""
    d = os.path.dirname(path)
    stop_at = os.path.abspath(stop_at)
    while os.path.abspath(d).startswith(stop_at + os.sep) and os.path.abspath(d) != stop_at:
        try:
            os.rmdir(d)
        except OSError:
            return
        d = os.path.dirname(d)
