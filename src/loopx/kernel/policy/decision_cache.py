"""A disposable cache of should-run answers, so a cron job polling an unchanged store does not
fold it again (``.loopx/cache/decisions.bin``, marshal: reading it needs no `json` import).

An entry is keyed by (goal argument, agent) and stores the decision with:

- the size, mtime and inode of ``events.jsonl``, ``evidence.jsonl`` and ``format.json`` taken
  *before* the state was loaded (any append, repair or rewrite invalidates the entry);
- ``valid_until``: the earliest moment a time-dependent input could change the answer (a claim,
  run lease or handoff reservation ending, a spend leaving the rolling window, a cooldown ending),
  capped at one hour;
- ``git``: the git part of the fingerprint when the value rule consulted it (compared again on a
  hit, which costs one ``git status``), else None;
- ``hosts``: what the window rule saw of each host's usage windows (read again on a hit, which
  costs a stat of the host's files: loopx.usage caches by size and mtime);
- ``evaluated_at``; a clock that went backwards (``LOOPX_NOW``) misses.

Entries are written only when the call recorded nothing, and the whole file is rewritten
atomically as ``{"crc": crc32(body), "body": marshal of the entries}``; a damaged or hand-edited
file (a CRC that does not match) is a miss, never an error. Time fields of a hit (``next_check_at``,
``scheduler_hint``, ``evaluated_at``) are recomputed for the current time.
"""

from __future__ import annotations

import marshal
import os
import zlib

from loopx.errors import LoopxError
from loopx.kernel.storage import clock, layout
from loopx.kernel.storage.clock import datetime, timedelta
from loopx.kernel.storage.fs import MOST_CACHE, open_file

MAX_TTL = 3600
KEEP = 64


def key(goal_id: str | None, agent: str | None) -> str:
    return f"{goal_id or '*'}|{agent or ''}"


def stamp(store) -> list | None:
    """(size, mtime_ns, inode) of the files a decision depends on; None when one is missing. The
    watch book (``cache/watches.json``, whose due times a `watch run` may move without writing an
    event) counts too, as None while there is none."""
    out: list = []
    for name in (*map(layout.open_log, layout.STREAMS), layout.FORMAT):
        try:
            st = os.stat(store.path(name))
        except OSError:
            return None
        out.append([st.st_size, st.st_mtime_ns, st.st_ino])
    try:
        st = os.stat(store.path(layout.WATCH_BOOK))
        out.append([st.st_size, st.st_mtime_ns, st.st_ino])
    except OSError:
        out.append(None)
    return out


_READ: dict = {}  # path -> ((size, mtime_ns, inode), entries): one read of the file per process and version


def _read(store) -> dict:
    path = store.path(layout.DECISIONS)
    try:
        with open_file(path, most=MOST_CACHE) as fh:
            st = os.fstat(fh.fileno())
            mark = (st.st_size, st.st_mtime_ns, st.st_ino)
            known = _READ.get(path)
            if known is not None and known[0] == mark:
                return known[1]
            outer = marshal.loads(fh.read())
        body = outer["body"]
        if outer["crc"] != zlib.crc32(body):
            return {}  # changed by hand or damaged: entries loopx did not write could be any shape
        data = marshal.loads(body)
        if not isinstance(data, dict):
            return {}
    except (OSError, ValueError, EOFError, TypeError, KeyError, IndexError):
        return {}
    _READ[path] = (mark, data)
    return data


def lookup(store, k: str, files: list | None, now: datetime, git=None, hosts: dict | None = None) -> dict | None:
    """The cached decision for ``k`` refreshed to ``now``, or None on a miss. ``git`` (a callable
    giving the fingerprint's git part) and ``hosts`` ({kind: usage windows}) share what several
    lookups of one moment read (``status``'s goals) instead of reading it again for each."""
    if files is None:
        return None
    e = _read(store).get(k)
    if not isinstance(e, dict) or e.get("files") != files:
        return None
    now_iso = clock.iso(now)
    try:
        if not (e["evaluated_at"] <= now_iso < e["valid_until"]):
            return None
        if e.get("git") is not None:
            if git is None:
                from loopx.kernel.read import fingerprint

                git = lambda: fingerprint.git_part(store.project_dir)  # noqa: E731
            if git() != e["git"]:
                return None
        if e.get("hosts"):
            from loopx import usage

            seen = {} if hosts is None else hosts
            for kind, sig in e["hosts"].items():
                if kind not in seen:
                    seen[kind] = usage.safe_windows(kind, now)
                if [list(x) for x in usage.signature(seen[kind])] != sig:
                    return None
        return refresh(marshal.loads(marshal.dumps(e["decision"])), now, e.get("prev_ts"))  # a copy: the
        # entries are read once per process (_READ), so a caller changing a nested dict must not change them
    except (KeyError, TypeError, ValueError):
        return None


VIEW = "|\0view"  # a view's answers: the caller's PATH unknown (no PATH holds a NUL), so never should-run's


def lookup_view(store, goal_id: str | None, agent: str | None, files: list | None, now: datetime, git=None,
                hosts: dict | None = None) -> dict | None:
    """A view's (``decide.for_client``'s) kept answer for ``goal_id``, or None; ``status`` asks
    here first, so an unchanged store's screen needs neither the rules nor an evaluation."""
    try:
        return lookup(store, key(goal_id, agent) + VIEW, files, now, git=git, hosts=hosts)
    except LoopxError:
        return None


class _Root:
    """What the cache needs of a Store (``path``, ``project_dir``), for the quick path that
    answers before a Store is opened."""

    def __init__(self, root: str) -> None:
        self.root, self.project_dir = root, os.path.dirname(root)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)


def quick(root: str, goal_id: str | None, agent: str | None, caller_path: str | None) -> dict | None:
    """The cached answer of a plain ``quota should-run`` (no --explain, not --no-record) for the
    store at ``root`` (the ``.loopx`` directory), looked up without opening the store or importing
    the decision rules; None on a miss. The key and the checks are ``decide.should_run``'s, so
    both paths give one answer (the caller syncs a shared goal first, and then takes the full path).
    A bad ``LOOPX_NOW`` is a miss here (the full path then reports it: UsageError, exit 2)."""
    where = _Root(root)
    files = stamp(where)
    if files is None:
        return None
    try:
        hit = lookup(where, key(goal_id, agent) + "|" + (caller_path or ""), files, clock.now())
    except LoopxError:
        return None
    if hit is not None:
        hit["recorded"], hit["cached"] = False, True
    return hit


def refresh(d: dict, now: datetime, prev_ts: str | None) -> dict:
    """Recompute the time fields of decision ``d`` for ``now`` (the same schedule rule as decide)."""
    from loopx.kernel.read import schedule

    timed = d["decision"] in ("wait", "pause", "stop", "error") or d.get("reason") == "watching"
    keep = d.get("next_check_at") if timed else None
    d["next_check_at"], d["scheduler_hint"] = schedule.hint(d["decision"], now, keep, prev_ts)
    d["evaluated_at"] = clock.iso(now)
    return d


def _first_ends(stamps: list, seconds: float, now: datetime, now_iso: str) -> list[str]:
    """``[the earliest stamp + seconds that is after now]`` (or []): what a loop over every stamp
    would add to ``valid_until``'s candidates as its minimum, with one time parsed instead of one
    per entry (a day's ledger holds hundreds). loopx writes every stamp in one ISO form, so their
    string order is their time order; the stamps before ``now - seconds`` cannot end later."""
    if not stamps:
        return []
    cut = clock.iso(now - timedelta(seconds=seconds))
    for ts in sorted(t for t in stamps if t >= cut):
        end = clock.iso(clock.parse_ts(ts) + timedelta(seconds=seconds))
        if end > now_iso:
            return [end]
    return []


def valid_until(state: dict, now: datetime, inputs: tuple | None = None) -> str:
    """The earliest time after ``now`` at which elapsed time alone could change a decision that
    read the time-dependent ``inputs`` (loopx.kernel.reasons.CLOCK names; None: all of them)."""
    from loopx.kernel.read.queries import lease_live
    from loopx.kernel.reasons import CLOCK

    # the answer carries the budget (slots, turns, money spent in the window): whatever the
    # reason, a ledger entry leaving the window changes those numbers
    use = set(CLOCK if inputs is None else inputs) | {"spends", "turns", "costs"}
    now_iso = clock.iso(now)
    cands = [clock.iso(now + timedelta(seconds=MAX_TTL))]
    if "leases" not in use:
        return _rest(state, now, now_iso, use, cands)
    for t in state["todos"].values():
        c = t.get("claim")
        if lease_live(c, now_iso):
            cands.append(c["lease_until"])
    for r in state["runs"].values():
        if r["finished"] is None and lease_live(r, now_iso):
            cands.append(r["lease_until"])
    return _rest(state, now, now_iso, use, cands)


def _rest(state: dict, now: datetime, now_iso: str, use: set, cands: list) -> str:
    from loopx.kernel.read import schedule

    if "handoffs" in use:
        cands += _first_ends([h["ts"] for h in state.get("handoffs") or []], schedule.HANDOFF_HOLD, now, now_iso)
    for gid, g in state["goals"].items():
        window = g["quota"]["window"]
        for name, ledger in (("spends", state["spends"]), ("costs", state.get("costs") or {}),
                             ("turns", state.get("turns") or {})):
            if name in use:
                cands += _first_ends([e[0] for e in ledger.get(gid, [])], window, now, now_iso)
        last = state["runs"].get(g.get("last_run") or "")
        if "cooldown" in use and last and g["quota"].get("cooldown"):
            end = clock.iso(clock.parse_ts(last["finished"] or last["started"]) + timedelta(seconds=g["quota"]["cooldown"]))
            if end > now_iso:
                cands.append(end)
    for err in (state.get("host_errors") or {}).values() if "host_retry" in use else ():
        try:
            from loopx.kernel.read import hosts

            end = hosts.retry_at(err)
        except (KeyError, TypeError, ValueError, LoopxError):
            continue
        if end > now_iso:
            cands.append(end)
    return min(cands)


def save(store, k: str, files: list | None, d: dict, state: dict, now: datetime, git: str | None,
         hosts: dict | None = None, cap: str | None = None, kept: dict | None = None) -> None:
    """Remember ``d`` for ``k`` (best effort: the cache is disposable); ``cap`` (ISO) ends its
    validity earlier (the next due watch check or notification retry); ``hosts`` are the usage
    windows the window rule saw (their signature is compared again on a hit, their resets end it).
    A ``wait`` is kept no later than its own ``next_check_at`` (the moment it names, such as
    the start of a leftover period, is when it may change). ``kept``: collect the entry there
    instead of writing (``write`` then saves several in one go, as ``status`` does for its goals)."""
    if files is None or d["decision"] == "error":
        return
    prev = state["decisions"].get(d.get("goal_id") or "*")
    prev_ts = prev.get("ts") if prev and (prev.get("decision"), prev.get("reason")) == (d["decision"], d["reason"]) \
        else None
    body = {k2: v for k2, v in d.items() if k2 not in ("recorded", "cached", "rules")}
    from loopx.kernel.reasons import clock_inputs

    now_iso = clock.iso(now)
    until = valid_until(state, now, clock_inputs(d))
    if cap is not None:
        if cap <= now_iso:
            return
        until = min(until, cap)
    own = d.get("next_check_at")
    if d["decision"] == "wait" and own and now_iso < own < until:
        until = own
    sigs = {}
    if hosts:
        from loopx import usage

        for kind, info in hosts.items():
            sigs[kind] = [list(x) for x in usage.signature(info)]
            for w in (info or {}).get("windows") or []:
                if w.get("resets_at") and now_iso < w["resets_at"] < until and "host_windows" in clock_inputs(d):
                    until = w["resets_at"]
    entry = {"files": files, "evaluated_at": now_iso, "valid_until": until,
             "git": git, "prev_ts": prev_ts, "decision": body, "hosts": sigs}
    if kept is not None:
        kept[k] = entry
    else:
        write(store, {k: entry})


KEEP_VIEWS = 256  # the views' answers (one per goal) have their own room: they never push out should-run's


def write(store, entries: dict) -> None:
    """Add ``entries`` ({key: entry}) to the file in one rewrite, the oldest beyond ``KEEP``
    should-run answers and ``KEEP_VIEWS`` view answers dropped (best effort)."""
    if not entries:
        return
    from loopx.kernel.storage.fs import atomic_write

    data = dict(_read(store))
    for k, entry in entries.items():
        data.pop(k, None)
        data[k] = entry
    views = [k for k in data if k.endswith(VIEW)]
    others = [k for k in data if not k.endswith(VIEW)]
    for k in views[:-KEEP_VIEWS] + others[:-KEEP]:
        data.pop(k)
    try:
        os.makedirs(store.path(layout.CACHE), exist_ok=True)
        packed = marshal.dumps(data)
        atomic_write(store.path(layout.DECISIONS), marshal.dumps({"crc": zlib.crc32(packed), "body": packed}), sync=False,
                     follow=False)
    except (OSError, ValueError):
        pass
