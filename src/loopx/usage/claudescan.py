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

import os

from loopx.kernel.storage.fs import open_file
from loopx.usage import files, limits, unknown

BLOCK = 5 * 3600
WEEK = 7 * 86400
KEEP = 8 * 86400
WEEK_SLACK = 300      # seconds the quick cache may keep a week total while messages leave the window
READ_CHUNK = 1024 * 1024
MAX_LINE = 64 * 1024 * 1024  # bytes: a longer "line" (a sparse or damaged file) is skipped, never held
MAX_SCAN = 256 * 1024 * 1024  # bytes one scan reads; a file it stops in goes on at the next scan
STATE_VERSION = 2  # 2: blocks anchored across the prune (``anchor``); the quick answers' too (claude.QUICK_VERSION)


def _entry(line: bytes, where: str):
    """(key, [epoch, input, output, cache_write, cache_read, model]) of one transcript line, "skip"
    for a JSON line that is not a counted message, or None for a line that is not JSON."""
    obj = files.json_object(line)
    if obj is None:
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


def _take(blob: bytes, where: str, entries: dict) -> int:
    """Take each line of ``blob`` (complete lines, ``where``: the file and the offset it starts at)
    into ``entries``; returns the number of bad lines."""
    bad = 0
    for i, line in enumerate(blob.split(b"\n")):
        line = line.strip()
        if not line:
            continue
        got = _entry(line, f"{where}:{i}")
        if got is None:
            bad += 1
        elif got != "skip":
            entries[got[0]] = got[1]
    return bad


def _past_hole(fd: int, at: int, size: int) -> int:
    """Where data starts again at or after ``at`` in the open file ``fd`` (a hole in a sparse file
    holds no newline), ``size`` when only a hole is left, ``at`` where the system cannot tell."""
    if hasattr(os, "SEEK_DATA"):
        try:
            return min(size, os.lseek(fd, at, os.SEEK_DATA))
        except OSError as exc:  # ENXIO: nothing but a hole to the end; anything else: read on from here
            return size if exc.errno == 6 else at
    return at


def _read_new(path: str, start: int, size: int, entries: dict, counter: list) -> tuple[int, int, bool]:
    """Read complete lines of ``path`` from ``start`` to ``size``: (the offset after the last line
    taken, bad lines, whether the file was read to ``size``). ``counter[0]`` counts the bytes read in
    this scan: past ``MAX_SCAN`` the file stops after the last line it completed (a line begun is read
    again), and the next scan goes on there.

    Linear in what it reads, however the lines are cut: a line's pieces wait in a growing buffer and
    are joined once its newline arrives (joining the waiting piece to every new chunk made a file
    without newlines, such as a sparse one an agent can make in no time, cost the square of its
    size: a 1 GB one never finished, and with it every should-run). A line longer than ``MAX_LINE``
    counts as one bad line and is skipped to its newline, across any hole in a sparse file."""
    bad = 0
    pos = start  # the offset after the last complete line taken
    try:
        # a host's folder the agent can write: a FIFO or device named *.jsonl is refused, never waited on
        with open_file(path) as fh:
            fd = fh.fileno()  # read with pread at ``at``: the file object's read-ahead never gets in between
            at = start  # the offset read to
            carry = bytearray()  # the line being read, while it has no newline
            skipping = False  # inside a line longer than MAX_LINE: dropped up to its newline
            while at < size:
                if counter[0] >= MAX_SCAN and skipping:  # in a skipped line: the next scan skips on
                    return at, bad, False
                if skipping and (at := _past_hole(fd, at, size)) >= size:
                    break
                chunk = os.pread(fd, min(READ_CHUNK, size - at), at)
                if not chunk:
                    break
                counter[0] += len(chunk)
                at += len(chunk)
                cut = chunk.rfind(b"\n")
                if cut < 0:
                    if not skipping:
                        carry += chunk
                        if len(carry) > MAX_LINE:
                            bad, skipping = bad + 1, True
                            carry = bytearray()
                    continue
                if skipping:  # the long line ends at this chunk's first newline
                    first = chunk.index(b"\n") + 1
                    blob, base, skipping = chunk[first:cut], at - len(chunk) + first, False
                else:
                    carry += chunk[:cut]
                    blob, base = bytes(carry), pos
                bad += _take(blob, f"{path}:{base}", entries)
                pos = at - (len(chunk) - cut - 1)
                carry = bytearray(chunk[cut + 1:])
                if len(carry) > MAX_LINE:
                    bad, skipping = bad + 1, True
                    carry = bytearray()
                if counter[0] >= MAX_SCAN and at < size:  # the line begun here is read again next time
                    return (at if skipping else pos), bad, False
    except OSError:
        return start, bad, True
    return (at if skipping else pos), bad, True


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
    whole = True
    seen = set()
    for p, size, mtime in found:
        seen.add(p)
        prev = known.get(p)
        if prev and prev[0] == size and prev[1] == mtime:
            continue
        if counter[0] >= MAX_SCAN:  # this scan's bytes are spent: the file waits for the next one
            whole = False
            continue
        start = prev[2] if prev and size >= prev[2] and size >= prev[0] else 0  # shrunk: rewritten
        offset, bad, done = _read_new(p, start, size, entries, counter)
        st["skipped"] = st.get("skipped", 0) + bad
        known[p] = [size, mtime if done else -1, offset]  # -1: not read to its end, the next scan goes on
        whole = whole and done
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
    st["bytes_read"], st["file_count"], st["whole"] = counter[0], len(found), whole
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
    # a scan that stopped at MAX_SCAN holds for no time: the next check goes on reading
    return out, (min(edges) if st["whole"] else now_epoch), newest
