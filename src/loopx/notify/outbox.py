"""Send the notices that are due, each once per channel (deduplicated by event id).

``flush(store) -> {"sent": [...], "failed": [...], "busy": bool, "channels": [...]}``. One process
sends at a time (a non-blocking OS lock on ``.loopx/cache/notify.lock``; a second caller skips, the
holder sends everything due). The holder reads the store *after* taking the lock, so a notice that
another process delivered (``notify.delivered`` written before that process released the lock) is
never sent again. A failed attempt is recorded as ``notify.failed`` with ``retry_at`` (back-off
30 s, 2 m, 10 m, 30 m, 1 h; at most 6 attempts). A crash between a successful POST and its record
can repeat that one notification (at-least-once at that edge); receivers can dedupe on the
``X-Loopx-Event`` header.
"""

from __future__ import annotations

import os

from loopx.kernel.read import notices
from loopx.kernel.storage import clock, layout
from loopx.kernel.storage.clock import timedelta


def user_cfg() -> dict:
    """The ``[notify]`` table of the user's config (``{}`` without a config file). Raises StateError
    for a config file that is not valid TOML."""
    from loopx.config import config_path, get_user_value

    if not os.path.exists(config_path()):
        return {}
    cfg = get_user_value("notify", {})
    if not isinstance(cfg, dict):
        return {}
    if not isinstance(cfg.get("since"), str):
        cfg.pop("since", None)
    return cfg


def budget() -> float:
    """Seconds a decision may spend sending notifications (``LOOPX_NOTIFY_BUDGET``, default 3;
    UsageError when malformed)."""
    from loopx.config import seconds

    return seconds("LOOPX_NOTIFY_BUDGET")


def _send_within(ch, channel: str, cfg: dict, notice: dict, project: str, seconds: float) -> dict:
    """``ch.send`` with a hard limit: the attempt runs in a daemon thread and is given up after
    ``seconds`` (a receiver that accepts and never answers, a DNS lookup that hangs: the socket
    timeout bounds each read, not the whole attempt). A given-up attempt is a failure; its thread
    ends with the process (if it does get through later, the notice may arrive twice: receivers
    dedupe on ``X-Loopx-Event``)."""
    import threading

    box: list = []

    def go() -> None:
        try:
            box.append(ch.send(channel, cfg, notice, project))
        except Exception as exc:  # noqa: BLE001 - a delivery problem is a failed attempt, never a crash
            box.append({"ok": False, "skipped": False, "detail": f"{type(exc).__name__}: {exc}"[:200]})

    t = threading.Thread(target=go, name="loopx-notify", daemon=True)
    t.start()
    t.join(max(0.0, seconds))
    if box:
        return box[0]
    return {"ok": False, "skipped": False,
            "detail": f"no answer within {seconds:.1f}s, what was left of the notification budget (given up; retried later)"}


def flush(store, cfg: dict | None = None, limit: float | None = None) -> dict:
    """Send what is due. ``limit`` (seconds; None: no limit but each channel's own timeout) bounds
    the whole call: each attempt gets what is left of it, a channel that fails is not tried again in
    this call (its other notices stay queued, unattempted) and what does not fit waits for the next
    call. Returns {"sent", "failed", "busy", "channels", "deferred": number left queued}."""
    import time

    deadline = None if limit is None else time.monotonic() + limit
    cfg = user_cfg() if cfg is None else cfg
    if not cfg:  # no [notify] table: nothing to send, and nothing more to import
        return {"sent": [], "failed": [], "busy": False, "channels": []}
    from loopx.kernel.storage.fs import locked
    from loopx.kernel.storage.store import Draft
    from loopx.notify import channels as ch

    chans = ch.configured(cfg)
    out: dict = {"sent": [], "failed": [], "busy": False, "channels": chans}
    if not chans:
        return out
    os.makedirs(store.path(layout.CACHE), exist_ok=True)
    held = locked.now(store.path(layout.NOTIFY_LOCK))
    if held is None:
        out["busy"] = True
        return out
    with held:
        state = store.load(view="live")  # notices and deliveries are kept whole in the live view
        now_iso = clock.now_iso()
        from loopx.notify import actions

        project = os.path.basename(store.project_dir) or store.project_dir
        down: set[str] = set()
        out["deferred"] = 0
        for notice, channel, attempt in notices.pending(state, chans, now_iso, cfg.get("since")):
            notice = actions.enrich(notice, state, store.project_dir)  # project, goal, how to decide
            left = None if deadline is None else deadline - time.monotonic()
            if channel in down or (left is not None and left <= 0.05):
                out["deferred"] += 1  # stays queued: the next decision, `notify flush` or the dashboard sends it
                continue
            res = ch.send(channel, cfg, notice, project) if left is None else \
                _send_within(ch, channel, cfg, notice, project, left)
            if not res["ok"]:
                down.add(channel)
            data = {"event_id": notice["event_id"], "channel": channel, "attempt": attempt,
                    "detail": res["detail"], "goal_event": notice["type"]}
            if res["ok"]:
                kind = "notify.delivered"
                out["sent"].append(data)
            else:
                kind = "notify.failed"
                if attempt < notices.MAX_ATTEMPTS:
                    data["retry_at"] = clock.iso(clock.parse_ts(now_iso)
                                                 + timedelta(seconds=notices.retry_delay(attempt)))
                data["error"] = res["detail"]
                out["failed"].append(data)
            _write(store, Draft(kind, notice.get("goal"), data))
    return out


def _write(store, draft) -> None:
    from loopx.errors import LoopxError
    from loopx.kernel.storage import actors

    try:
        store.transact(lambda state, now: [draft], actor=actors.LOOPX + "notify")
    except LoopxError:
        pass


def after_decision(store, state: dict, decision: dict) -> None:
    """``decide.should_run``'s ``on_decided`` hook: send queued notices when any may be pending
    (a decision just recorded may itself be one). Never raises for delivery problems."""
    if decision.get("recorded") or notices.maybe_pending(state, clock.now_iso()):
        flush(store, limit=budget())  # bounded: a receiver that never answers never holds the decision
