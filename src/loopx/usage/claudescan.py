"""Counting Claude Code's usage from its transcripts (``claude``: where they are, and the quick
answer when none changed).

A message is counted once: the key is ``message.id`` + ``requestId`` (the same response is written
again when a session is resumed or forked). Tokens of a message = input + output + cache creation +
cache read. The 5-hour block: a block starts at the first message after the previous block ended,
floored to the hour, and ends 5 hours later (a gap of 5 hours also ends it); the active block is
the one ``now`` falls in. The chain of blocks starts at the oldest message the cache ever read and is
kept across the 8-day prune (``prune`` drops whole blocks and keeps the last one's end as the
anchor), so a block never moves when old history ages out. The week is the rolling 7 days before ``now``.

Reading is incremental: ``<data folder>/cache/usage/claude-<hash>.json`` remembers each file's
size, mtime and the offset of the last complete line read, and the messages of the last 8 days; a
second call with nothing new reads no transcript bytes. A line without its newline (still being
written, or torn) is read once it is complete; lines that are not JSON are skipped and counted.
"""

from __future__ import annotations

import json
import os

from loopx.kernel.storage.fs import open_file
from loopx.usage import files, limits, unknown

BLOCK = 5 * 3600
WEEK = 7 * 86400
KEEP = 8 * 86400
WEEK_SLACK = 300      # seconds the quick cache may keep a week total while messages leave the window
READ_CHUNK = 1024 * 1024
STATE_VERSION = 2  # 2: blocks anchored across the prune (``anchor``); the quick answers' too (claude.QUICK_VERSION)


def _entry(line: bytes, where: str):
    """(key, [epoch, input, output, cache_write, cache_read, model]) of one transcript line, "skip"
    for a JSON line that is not a counted message, or None for a line that is not JSON."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    msg = obj.get("message")
    if not isinstance(msg, dict) or not isinstance(msg.get("usage"), dict):
        return "skip"
    u = msg["usage"]

    def n(k):
        v = u.get(k)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0

    epoch = files.epoch_of(obj.get("timestamp"))
    if epoch is None:
        return "skip"
    mid, rid = msg.get("id"), obj.get("requestId")
    key = f"{mid}:{rid}" if mid and rid else (mid or rid or obj.get("uuid") or where)
    model = msg.get("model") if isinstance(msg.get("model"), str) else None
    return str(key)[:200], [epoch, n("input_tokens"), n("output_tokens"), n("cache_creation_input_tokens"),
                            n("cache_read_input_tokens"), model]


def _read_new(path: str, start: int, size: int, entries: dict, counter: list) -> tuple[int, int]:
    """Read complete lines of ``path`` from ``start`` to ``size``; returns (new offset, bad lines)."""
    bad = 0
    pos = start
    try:
        # a host's folder the agent can write: a FIFO or device named *.jsonl is refused, never waited on
        with open_file(path) as fh:
            fh.seek(start)
            carry = b""
            while pos + len(carry) < size:
                chunk = fh.read(min(READ_CHUNK, size - pos - len(carry)))
                if not chunk:
                    break
                counter[0] += len(chunk)
                data = carry + chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = data
                    continue
                for i, line in enumerate(data[:cut].split(b"\n")):
                    line = line.strip()
                    if not line:
                        continue
                    got = _entry(line, f"{path}:{pos}:{i}")
                    if got is None:
                        bad += 1
                    elif got != "skip":
                        entries[got[0]] = got[1]
                pos += cut + 1
                carry = data[cut + 1:]
    except OSError:
        return start, bad
    return pos, bad


def blocks(entries: list[list], anchor: list | None = None) -> list[dict]:
    """5-hour blocks of ``entries`` ([epoch, in, out, cache_write, cache_read, model], any order):
    ``[{"start", "end", "last", "tokens", "input", "output", "cache_write", "cache_read", "messages"}]``.
    ``anchor`` ([end, last] of the block before the oldest entry, one whose messages were pruned)
    continues the chain where it left off, so the blocks are the ones the whole history gives."""
    out: list[dict] = []
    cur = {"end": anchor[0], "last": anchor[1]} if anchor else None
    for e in sorted(entries, key=lambda x: x[0]):
        t = e[0]
        if cur is None or t >= cur["end"] or t - cur["last"] >= BLOCK:
            start = t - (t % 3600)
            cur = {"start": start, "end": start + BLOCK, "last": t, "tokens": 0, "input": 0, "output": 0,
                   "cache_write": 0, "cache_read": 0, "messages": 0}
            out.append(cur)
        elif "start" not in cur:  # older than the anchor's end: a message of a pruned block
            continue
        cur["last"] = t
        cur["input"] += e[1]
        cur["output"] += e[2]
        cur["cache_write"] += e[3]
        cur["cache_read"] += e[4]
        cur["tokens"] += e[1] + e[2] + e[3] + e[4]
        cur["messages"] += 1
    return out


def prune(st: dict, cut: float) -> None:
    """Drop the messages of the blocks that ended before ``cut`` (whole blocks only) and remember the
    last dropped block as ``st["anchor"]`` ([end, last]), so the blocks after it stay where the whole
    history puts them: they never move when old history ages out."""
    entries = st["entries"]
    gone = [b for b in blocks(list(entries.values()), st.get("anchor")) if b["end"] <= cut and b["last"] < cut]
    if not gone:
        return
    last = gone[-1]
    st["anchor"] = [last["end"], last["last"]]
    for k in [k for k, e in entries.items() if e[0] <= last["last"]]:
        del entries[k]


def scan(path: str, now_epoch: float, found: list) -> dict:
    """Bring the incremental state in ``path`` up to date with the transcripts ``found`` ((path,
    size, mtime_ns) each, ``claude.transcripts``); returns it with ``bytes_read`` and ``files``."""
    st = files.load(path)
    if st.get("v") != STATE_VERSION:
        st = {"v": STATE_VERSION, "files": {}, "entries": {}, "max_block": 0, "skipped": 0}
    known, entries = st["files"], st["entries"]
    counter = [0]
    changed = False
    seen = set()
    for p, size, mtime in found:
        seen.add(p)
        prev = known.get(p)
        if prev and prev[0] == size and prev[1] == mtime:
            continue
        start = prev[2] if prev and size >= prev[2] and size >= prev[0] else 0  # shrunk: rewritten
        offset, bad = _read_new(p, start, size, entries, counter)
        st["skipped"] = st.get("skipped", 0) + bad
        known[p] = [size, mtime, offset]
        changed = True
    for p in list(known):
        if p not in seen:
            del known[p]
            changed = True
    if changed:
        cut = now_epoch - KEEP
        for b in blocks(list(entries.values()), st.get("anchor")):
            if b["end"] <= now_epoch or now_epoch - b["last"] >= BLOCK:  # finished blocks only
                st["max_block"] = max(st.get("max_block", 0), b["tokens"])
        prune(st, cut)
        files.save(path, st)
    st["bytes_read"], st["file_count"] = counter[0], len(found)
    return st


def compute(roots: list[str], path: str, now_epoch: float, found: list) -> tuple[dict, float, float | None]:
    """(windows dict, the epoch until which it holds if no file changes, the newest message) of the
    transcripts ``found`` under ``roots``, the incremental state kept in ``path``."""
    st = scan(path, now_epoch, found)
    out = unknown("claude-code", None)
    out.update(source="claude-transcripts", bytes_read=st["bytes_read"], files=st["file_count"],
               skipped_lines=st.get("skipped", 0))
    if not st["file_count"]:
        out["note"] = "no Claude Code transcripts under " + os.pathsep.join(os.path.join(r, "projects") for r in roots)
        return out, now_epoch + 3600, None
    entries = [e for e in st["entries"].values() if e[0] <= now_epoch]
    bl = blocks(entries, st.get("anchor"))
    done = [b for b in bl if b["end"] <= now_epoch or now_epoch - b["last"] >= BLOCK]
    largest = max([st.get("max_block", 0)] + [b["tokens"] for b in done])
    active = bl[-1] if bl and bl[-1] not in done else None
    lim = limits("claude-code")
    block_limit = lim.get("block_tokens") if isinstance(lim.get("block_tokens"), int) else None
    week_limit = lim.get("week_tokens") if isinstance(lim.get("week_tokens"), int) else None
    block_src = "usage set" if block_limit else ("largest block seen" if largest else None)
    block_limit = block_limit or largest or None
    tokens = active["tokens"] if active else 0
    block = {"name": "5h block", "tokens": tokens, "limit": block_limit, "limit_source": block_src,
             "used_percent": round(100.0 * tokens / block_limit, 1) if block_limit else None,
             "resets_at": files.iso_of(active["end"]) if active else None,
             "starts_at": files.iso_of(active["start"]) if active else None, "window_minutes": 300,
             "messages": active["messages"] if active else 0}
    week_entries = [e for e in entries if e[0] > now_epoch - WEEK]
    wt = sum(e[1] + e[2] + e[3] + e[4] for e in week_entries)
    oldest = min((e[0] for e in week_entries), default=None)
    week = {"name": "7 days", "tokens": wt, "limit": week_limit, "limit_source": "usage set" if week_limit else None,
            "used_percent": round(100.0 * wt / week_limit, 1) if week_limit else None,
            "resets_at": files.iso_of(oldest + WEEK) if oldest is not None else None,
            "starts_at": files.iso_of(now_epoch - WEEK), "window_minutes": WEEK // 60, "messages": len(week_entries)}
    newest = max((e[0] for e in entries), default=None)
    out.update(known=True, windows=[block, week], as_of=files.iso_of(newest) if newest else None,
               age_seconds=int(now_epoch - newest) if newest else None)
    if not week_limit:
        out["note"] = "no week limit set (`loopx usage set --host claude-code --week-tokens N`)"
    edges = [now_epoch + 3600]
    if active:
        edges += [active["end"], active["last"] + BLOCK]
    if oldest is not None and week_limit:  # the rolling week moves all the time: a 5-minute-old
        edges.append(max(oldest + WEEK, now_epoch + WEEK_SLACK))  # total is close enough (it can only overcount)
    future = [e[0] for e in st["entries"].values() if e[0] > now_epoch]
    if future:
        edges.append(min(future))
    return out, min(edges), newest
