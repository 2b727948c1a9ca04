"""Leases that survive clock skew between machines (docs/multi-agent.md, "Clocks that disagree").

A lease's ``until`` is written in the clock of the machine that took it. A machine whose clock runs
ten minutes ahead would judge a five-minute lease taken a second ago as long expired and take the
todo. Two rules keep that from happening, neither of which trusts the local clock about another
machine's time:

- **Leases in the ledger** (``refs/loopx/claims``): an entry of another node is live while
  ``until`` is in the future of this clock, *or* while less than its lease duration (``until - at``,
  both in the writer's clock, so skew cancels) has passed on this clock since this clone first saw
  the entry (kept in ``.loopx/cache/claims-seen.json``). Either rule alone errs on the safe side
  (a lease judged a little longer, never shorter); an entry whose ``until`` lies more than
  ``MAX_SKEW`` behind this clock is dead whatever was seen, so a machine that died does not hold its
  todos forever for a clone that meets its entry late.
- **Runs of other machines** are closed by this clone's run reaper only once their lease is
  ``MAX_SKEW`` past (``kernel.write.runs.reap_drafts``); this clone's own runs as before.

``offsets(store)`` names the machines whose clock is off: a record stamped (``ts``, the writer's
wall clock; ``hlc`` is bumped past every record a writer saw, so it follows the fastest clock) in
this machine's future proves its writer's clock is at least that far ahead. When most of the other
machines look ahead of this one, this machine is the one behind. ``doctor`` reports both.
"""

from __future__ import annotations

import json

from loopx.kernel.storage import clock, layout, machines
from loopx.kernel.storage.fs import atomic_write, open_file
from loopx.kernel.storage.machines import (
    MAX_SKEW,  # seconds: beyond this a lease is over whatever the clocks say
)

SLACK = 60.0  # seconds of disagreement that are not reported (sync latency, NTP steps)
SCAN_RECORDS = 20000  # the newest records doctor reads to find each node's newest stamp


def _key(tid: str, e: dict) -> str:
    return f"{tid}|{e.get('node')}|{e.get('at')}"


class ClaimClock:
    """When this clone first saw each ledger entry (its own clock). ``live(claims, now, node)``:
    the entries still live (those of ``node`` left out when given); ``save()`` keeps the file to
    the entries of the last ledger read. Never raises on a missing or damaged cache file."""

    def __init__(self, store) -> None:
        self.path = store.path(layout.CLAIMS_SEEN)
        try:
            with open_file(self.path, "r", encoding="utf-8") as fh:
                data = json.load(fh)
            self.seen = {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.seen = {}
        self.keys: set[str] = set()

    def live(self, claims: dict, now, node: str | None = None) -> dict:
        now_iso = clock.iso(now)
        floor = clock.iso(now - clock.timedelta(seconds=MAX_SKEW))
        out = {}
        for tid, e in claims.items():
            if not isinstance(e, dict) or (node is not None and e.get("node") == node):
                continue
            until = str(e.get("until", ""))
            key = _key(tid, e)
            self.keys.add(key)
            first = self.seen.setdefault(key, now_iso)
            if until > now_iso:
                out[tid] = e
                continue
            if until <= floor:
                continue
            try:
                lease = (clock.parse_ts(until) - clock.parse_ts(e["at"])).total_seconds()
                if (now - clock.parse_ts(first)).total_seconds() < lease:
                    out[tid] = e  # this clock says it ended; the lease has not run its length since we saw it
            except Exception:  # noqa: BLE001 - a malformed entry: judged by `until` alone
                pass
        return out

    def save(self) -> None:
        keep = {k: v for k, v in self.seen.items() if k in self.keys}
        try:
            atomic_write(self.path, json.dumps(keep, sort_keys=True).encode(), sync=False, follow=False)
        except OSError:
            pass


def offsets(store, state: dict, now) -> dict:
    """How far each machine's clock is off, as far as this clone's records show:
    ``{"ahead": [{"node", "host", "seconds"}], "self_behind": seconds | None}``. ``ahead``: the other
    nodes whose newest record is stamped more than SLACK in this clock's future (at least that far
    ahead); ``self_behind``: when most of the other nodes are, how far this clock is behind (their
    median). Reads at most SCAN_RECORDS records from the end of the events log."""
    me = state["meta"].get("self_node")
    chain = state["meta"].get("chain") or {}
    nodes = state.get("nodes") or {}
    want = {n for n in chain if n != me and not (nodes.get(n) or {}).get("legacy")}
    newest: dict[str, str] = {}
    for i, rec in enumerate(store.iter_records_newest("events")):
        n = rec.get("node")
        ts = rec.get("ts")
        if n in want and isinstance(ts, str) and ts > newest.get(n, ""):
            newest[n] = ts
        if i >= SCAN_RECORDS or (len(newest) == len(want) and i > 2000):
            break
    labels = machines.labels(state)
    ahead, offs = [], []
    for n in sorted(want):
        try:
            secs = (clock.parse_ts(newest[n]) - now).total_seconds() if n in newest else None
        except Exception:  # noqa: BLE001 - a malformed stamp says nothing
            secs = None
        if secs is None:
            continue
        offs.append(secs)
        if secs > SLACK:
            ahead.append({"node": n, "host": machines.label(labels, n), "seconds": int(secs)})
    self_behind = None
    if offs and len(ahead) * 2 > len(offs):  # most machines look ahead: this clock is the one behind
        s = sorted(x["seconds"] for x in ahead)
        self_behind = s[len(s) // 2]
        ahead = [a for a in ahead if a["seconds"] - self_behind > SLACK]
    return {"ahead": ahead, "self_behind": self_behind}
