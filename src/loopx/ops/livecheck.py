"""Doctor's check of the live view on a store past one segment (``store.snapshot`` when
``storechecks.too_large``): the cached live view (``cache/live.bin`` and the tail after it)
against one rebuilt from the newest checkpoint (``events/NNNNNN.live.json``, written when that
segment was closed) and the tail after that, without folding the history. Two live views of the
same log can hold different records (each was pruned at other times), so they are compared on what
the commands read from them: each goal's status summary, should-run decision and fingerprint.
"""

from __future__ import annotations

from loopx.kernel.policy import decide
from loopx.kernel.read import fingerprint, status
from loopx.kernel.storage import caches, clock, fold, layout, logfold
from loopx.ops.check import result

NAME = "store.snapshot"


def _forward(store, state: dict, offsets: dict) -> dict:
    for name in layout.STREAMS:
        logfold.fold_stream(store, state, name, offsets[name])
    return fold.guarded(state)


def _answers(state: dict, now) -> dict:
    now_iso = clock.iso(now)
    out = {}
    for gid in sorted(state["goals"]):
        s = status.summary(state, now_iso, gid)["goals"]
        d = decide.evaluate(state, now, goal_id=gid, fingerprint=lambda g: fingerprint.state_part(state, g))
        out[gid] = (s, {k: d.get(k) for k in ("decision", "reason", "todo_id", "gate_id", "mode")},
                    fingerprint.state_part(state, gid))
    return out


def check(store, snapshot_bytes: int) -> dict:
    """The ``store.snapshot`` result for a store whose full snapshot is too large to compare."""
    size = f"{snapshot_bytes / (1 << 20):.0f} MB"
    cached, offsets = caches.load_snapshot(store, layout.LIVE)
    if not offsets:
        return result(NAME, "ok", f"the full snapshot ({size}) is not compared past one segment of history, and the live view is "
                                  "stale; the next reads rebuild it")
    base, base_offsets = caches.load_checkpoint(store)
    if not base_offsets:
        return result(NAME, "ok", f"the full snapshot ({size}) is not compared past one segment of history; no checkpoint to "
                                  "check the live view against (`loopx doctor --fix` rebuilds the cache)")
    cached, fresh = _forward(store, cached, offsets), _forward(store, base, base_offsets)
    if any(m.get("unordered") for v in (cached, fresh) for m in v["meta"]["files"].values()):
        return result(NAME, "ok", "the log was union-merged since the cache was written; the next reads rebuild it")
    now = clock.now()
    try:
        a, b = _answers(cached, now), _answers(fresh, now)
    except fold.NotInLiveView:
        return result(NAME, "ok", f"the full snapshot ({size}) is not compared past one segment of history; the live view "
                                  "defers to it for an old record, so it was not compared either")
    differ = sorted(g for g in set(a) | set(b) if a.get(g) != b.get(g))
    if differ:
        return result(NAME, "error", f"the cached live view disagrees with the log (goal {', '.join(differ[:5])})",
                      "loopx doctor --fix (rebuilds .loopx/cache/ from the log)", "rebuild_cache")
    return result(NAME, "ok", f"the live view matches the log (compared with the newest checkpoint and the "
                              f"tail); the full snapshot ({size}) is not compared past one segment of history")
