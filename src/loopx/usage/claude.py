"""Claude Code's usage windows, built from its transcripts.

Transcripts are JSONL files under ``$CLAUDE_CONFIG_DIR/projects/**/*.jsonl`` (default
``~/.claude``; sidechain and subagent files count too). Assistant lines carry::

    {"timestamp": ISO, "requestId": "req_...", "isSidechain": bool,
     "message": {"id": "msg_...", "model": "...", "usage": {"input_tokens", "output_tokens",
                 "cache_creation_input_tokens", "cache_read_input_tokens"}}}

Counting them (messages, the 5-hour blocks, the rolling week) is ``claudescan``'s: a command
reads it only when a transcript changed since the last answer. ``windows(now)`` first asks a quick
cache (``<data folder>/cache/usage/claude-<hash>.quick``), keyed by the transcripts' stats, which
answers while nothing changed and no block or week edge passed: no transcript byte and no JSON read.
"""

from __future__ import annotations

import os

from loopx.usage import files

QUICK_VERSION = 2  # the quick cache's; bumped with claudescan.STATE_VERSION (what it answers is the scan's)


def transcripts(roots: list[str], folders: dict | None = None) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of every ``*.jsonl`` under ``<root>/projects``; with ``folders``, the
    mtime (ns) of every folder listed is put there (``files.tree_stamp``)."""
    out = []
    for root in roots:
        base = os.path.join(root, "projects")
        stack = [base]
        while stack:
            d = stack.pop()
            if folders is not None:
                folders[d] = files.folder_mtime(d)  # 0 for a missing one: its making is a change
            try:
                it = os.scandir(d)
            except OSError:
                continue
            with it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.name.endswith(".jsonl"):
                            st = e.stat()
                            out.append((e.path, st.st_size, st.st_mtime_ns))
                    except OSError:
                        continue
    out.sort()
    return out


def state_path(roots: list[str], ext: str = "json") -> str:
    import zlib

    h = f"{zlib.crc32(chr(10).join(os.path.abspath(r) for r in roots).encode()):08x}"
    return files.cache_path(f"claude-{h}.{ext}")


def windows(now) -> dict:
    """The windows at ``now``. A quick cache (marshal) keyed by a digest of every transcript's (path,
    size, mtime) and the user config's stamp answers while nothing changed and no block or week edge
    passed: no transcript byte and no JSON read. Whether nothing changed is told by the tree's
    stamp (``files.tree_stamp``: a stat of each folder and of each transcript changed in the last
    day, for up to ``files.SWEEP`` seconds), else by a stat of every transcript."""
    roots = files.home_dir("CLAUDE_CONFIG_DIR", ".claude")
    now_epoch = now.timestamp()
    quick_path = state_path(roots, "quick")
    quick = files.load_quick(quick_path)
    config = files.config_stamp()
    valid = _usable(quick) and quick["at"] <= now_epoch < quick["until"]
    if valid and quick.get("config") == config and files.unchanged(quick.get("tree")):
        return _answer(quick, now_epoch)
    folders: dict = {}
    found = transcripts(roots, folders)
    stats = [[p, size, mtime] for p, size, mtime in found]
    key = files.digest([stats, config])  # the file is read on every check: not a row per transcript
    tree = files.tree_stamp(folders, stats)
    if valid and quick.get("key") == key:
        files.save_quick(quick_path, dict(quick, config=config, tree=tree))  # the walk found nothing new
        return _answer(quick, now_epoch)
    from loopx.usage import claudescan  # only when a transcript changed

    out, until, newest = claudescan.compute(roots, state_path(roots), now_epoch, found)
    files.save_quick(quick_path, {"v": QUICK_VERSION, "key": key, "config": config, "tree": tree, "at": now_epoch,
                                  "until": until, "newest": newest, "result": out})
    return out


def _usable(quick) -> bool:
    """Whether ``quick`` (the quick cache file, as read) has the shape ``windows`` writes: a
    hand-edited or foreign file is no cache, never an error."""
    num = (int, float)
    return (isinstance(quick, dict) and quick.get("v") == QUICK_VERSION and isinstance(quick.get("at"), num)
            and isinstance(quick.get("until"), num) and isinstance(quick.get("result"), dict)
            and isinstance(quick.get("newest"), (*num, type(None))))


def _answer(quick: dict, now_epoch: float) -> dict:
    return dict(quick["result"], bytes_read=0,
                age_seconds=int(now_epoch - quick["newest"]) if quick.get("newest") else None)
