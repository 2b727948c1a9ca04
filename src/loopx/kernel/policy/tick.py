"""The step before the decision: run the watch checks that are due and reopen due recurring todos.

Called by ``quota should-run`` and ``loopx run`` (``decide.should_run(..., tick=True)``) and by
``loopx watch run``; never by a hook (hooks stay fast pure reads) and never by the dashboard.

Idle budget. Per-check bookkeeping lives in ``.loopx/cache/watches.json`` (disposable; mode 0600):
``{watch_id: {last_run, outcome, exit_code, hash, matched, excerpt, error, duration, checks,
errors}}``. The store gets a line only when something a person or agent would act on happens:

- ``watch.checked`` when a watch's recorded result changes (its first result, pass <-> fail <->
  error, a match appearing or going, the watch starting or stopping to fail repeatedly);
- ``watch.fired`` plus ``todo.added`` when its trigger fires and it has no open todo;
- ``todo.reopened`` when a done recurring todo is due again.

So a watch whose result never changes adds one line in its lifetime, whatever its cadence. With the
cache deleted, the last recorded result in the store is the baseline (nothing is lost; at worst a
``change`` watch compares against an older output and fires once more).

Concurrency: one process runs checks at a time (a non-blocking OS lock on
``.loopx/cache/watch.lock``); another caller skips the checks and decides on the state as it is.
Events are written through ``Store.transact``, which re-checks "one open todo per watch" under the
store lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time

from loopx.errors import LoopxError
from loopx.kernel.read import watching as watches
from loopx.kernel.storage import actors, bounded, clock, ids, layout
from loopx.kernel.storage.fs import atomic_write, locked, open_file
from loopx.kernel.storage.redact import redact_text
from loopx.kernel.storage.store import Draft

EXCERPT = 600
OUTPUT_CAP = 256 * 1024
ACTOR = actors.LOOPX + "watch"


def load_book(store) -> dict:
    """The bookkeeping dict (``{}`` when missing or unreadable: it is a disposable cache). Entries
    that do not have the expected shape (a hand-edited or damaged file) are dropped, so their
    watches count as never checked and run at once."""
    try:
        with open_file(store.path(layout.WATCH_BOOK), "r", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if _entry_ok(v)}


def _entry_ok(v) -> bool:
    if not isinstance(v, dict) or not isinstance(v.get("last_run"), str):
        return False
    try:
        clock.parse_ts(v["last_run"])
    except Exception:  # noqa: BLE001 - any unparsable time drops the entry
        return False
    return (isinstance(v.get("checks", 0), int) and isinstance(v.get("errors", 0), int)
            and all(isinstance(v.get(k), (str, type(None))) for k in ("outcome", "hash", "excerpt", "error")))


def _save_book(store, book: dict) -> None:
    try:
        os.makedirs(store.path(layout.CACHE), exist_ok=True)
        atomic_write(store.path(layout.WATCH_BOOK), json.dumps(book, sort_keys=True).encode(), sync=False, follow=False)
    except OSError:
        pass


def earliest_due(state: dict, book: dict | None, now_iso: str, goal_id: str | None = None) -> str | None:
    """The earliest moment a watch check or a recurring todo of an active goal falls due (ISO), or None."""
    cands = []
    for w in watches.live(state, goal_id):
        g = state["goals"].get(w["goal"])
        if g and g["status"] == "active":
            cands.append(watches.next_due(w, book, state) or now_iso)
    for t in state["todos"].values():
        if t.get("every") and (goal_id is None or t["goal"] == goal_id):
            g = state["goals"].get(t["goal"])
            due = watches.recurring_due(t, state)
            if due and g and g["status"] == "active":
                cands.append(due)
    return min(cands) if cands else None


def run_check(command: str, cwd: str, timeout: float, match: str | None = None) -> dict:
    """Run ``command`` through the shell in ``cwd`` with a hard ``timeout`` (seconds; its whole
    process group is killed). Returns ``{outcome: pass|fail|error, exit_code, hash, excerpt, matched,
    error, duration}``: output (stdout + stderr) redacted, then hashed (sha256) and cut to an excerpt."""
    t0 = time.monotonic()
    error = None
    try:  # the limit covers the check's whole process group, and a background child cannot hold us
        res = bounded.run(command, cwd=cwd, timeout=timeout, merge=True, cap=OUTPUT_CAP)
    except OSError as exc:
        return {"outcome": "error", "exit_code": None, "hash": None, "excerpt": "", "matched": False,
                "error": f"cannot start the check: {exc.strerror or exc}", "duration": 0.0}
    out, code = res["stdout"], res["code"]
    if res["timed_out"]:
        error = f"timed out after {clock.format_duration(timeout)} (killed)"
    text = redact_text(out[-OUTPUT_CAP:].decode("utf-8", "replace"))
    if error is None and code in (126, 127):
        error = f"the check could not run (exit {code})"
    matched = False
    if match and error is None:
        try:
            matched = re.search(match, text) is not None
        except re.error as exc:
            error = f"--match is not a valid regular expression: {exc}"
    outcome = "error" if error else ("pass" if code == 0 else "fail")
    excerpt = text.strip()[-EXCERPT:]
    return {"outcome": outcome, "exit_code": code, "hash": hashlib.sha256(text.encode()).hexdigest(),
            "excerpt": excerpt, "matched": matched, "error": error,
            "duration": round(time.monotonic() - t0, 3)}


def _fires(w: dict, prev: dict | None, res: dict) -> bool:
    if res["outcome"] == "error":
        return False
    on = w["on"]
    if on == "change":
        return prev is not None and bool(prev.get("hash")) and prev.get("hash") != res["hash"]
    if on == "fail":
        return res["outcome"] == "fail" and (prev or {}).get("outcome") != "fail"
    if on == "pass":
        return res["outcome"] == "pass" and (prev or {}).get("outcome") != "pass"
    return res["matched"] and not (prev or {}).get("matched")


def _key(d: dict | None) -> tuple:
    d = d or {}
    return (d.get("outcome"), bool(d.get("matched")), bool(d.get("failing")))


def _todo_title(w: dict, res: dict) -> str:
    if w.get("todo"):
        return w["todo"]
    what = {"change": "output changed", "fail": "check failed", "pass": "check passed",
            "match": "output matched"}[w["on"]]
    return f"watch {w['name']}: {what}"[:200]


def tick(store, state: dict, now, *, only: str | None = None, force: bool = False) -> dict:
    """Run the due checks (``only`` one watch id; ``force`` = all active ones now) and reopen due
    recurring todos. Returns ``{"checked": [{watch_id, name, outcome, exit_code, fired, todo_id,
    error, excerpt}], "reopened": [todo ids], "wrote": bool, "busy": bool, "book": dict}``."""
    now_iso = clock.iso(now)
    out = {"checked": [], "reopened": [], "wrote": False, "busy": False, "book": None}
    due_w = [w for w in watches.live(state)
             if state["goals"].get(w["goal"], {}).get("status") == "active"
             and (only is None or w["id"] == only)]
    due_t = [t for t in state["todos"].values() if t.get("every") and t["status"] == "done"
             and state["goals"].get(t["goal"], {}).get("status") == "active"
             and (watches.recurring_due(t, state) or "~") <= now_iso] if only is None else []
    if not due_w and not due_t:
        out["book"] = {}
        return out

    os.makedirs(store.path(layout.CACHE), exist_ok=True)
    held = locked.now(store.path(layout.WATCH_LOCK))
    if held is None:
        out["busy"] = True
        out["book"] = load_book(store)
        return out
    with held:
        book = load_book(store)
        out["book"] = book
        if not force:
            due_w = [w for w in due_w if (watches.next_due(w, book, state) or now_iso) <= now_iso]
        results = []
        for w in due_w:
            timeout = min(max(1.0, w.get("timeout") or watches.DEFAULT_TIMEOUT), watches.MAX_TIMEOUT)
            res = run_check(w["check"], store.project_dir, timeout, w.get("match"))
            prev = book.get(w["id"]) or w.get("last")
            errors = ((book.get(w["id"]) or {}).get("errors", 0) + 1) if res["outcome"] == "error" else 0
            res["failing"] = errors >= watches.FAILING_AFTER
            fire = _fires(w, prev, res)
            entry = dict(res, last_run=now_iso, errors=errors,
                         checks=(book.get(w["id"]) or {}).get("checks", 0) + 1)
            book[w["id"]] = entry
            results.append((w, res, fire))
        if due_w:  # an untouched book is not rewritten: its stamp keeps should-run's kept answers valid
            _save_book(store, book)
        if due_w or due_t:
            _record(store, results, due_t, out, Draft)
    return out


def _record(store, results, due_t, out, Draft) -> None:
    """Write what changed, re-checked under the store lock."""
    fired: dict[str, str] = {}

    def plan(state, now):
        drafts = []
        fired.clear()
        taken = set(state["todos"])
        for w, res, fire in results:
            cur = state.get("watches", {}).get(w["id"])
            if cur is None or cur["status"] != "active":
                continue
            data = {"watch_id": w["id"], "outcome": res["outcome"], "matched": res["matched"],
                    "hash": res["hash"], "exit_code": res["exit_code"], "excerpt": res["excerpt"][-300:],
                    "failing": res["failing"]}
            if res["error"]:
                data["error"] = res["error"]
            if fire and watches.open_todo(state, w["id"]) is None:
                tid = ids.new_id("todo", taken)
                taken.add(tid)
                detail = f"watch {w['name']} ({w['on']}) fired; check: {w['check']}\n{res['excerpt']}"
                drafts.append(Draft("todo.added", w["goal"], {"todo_id": tid, "title": _todo_title(w, res),
                                                              "priority": 0, "detail": detail[:4000],
                                                              "watch": w["id"]}))
                drafts.append(Draft("watch.fired", w["goal"], dict(data, todo_id=tid, trigger=w["on"])))
                fired[w["id"]] = tid
            elif _key(dict(cur.get("last") or {}, failing=cur.get("failing"))) != _key(data) or (w["on"] == "change" and not (cur.get("last") or {}).get("hash")):
                drafts.append(Draft("watch.checked", w["goal"], data))
        for t in due_t:
            cur = state["todos"].get(t["id"])
            if cur and cur["status"] == "done" and cur.get("every"):
                drafts.append(Draft("todo.reopened", cur["goal"], {"todo_id": cur["id"], "reason": "recurring",
                                                                   "note": "recurring: due again"}))
        return drafts

    try:
        records, _ = store.transact(plan, actor=ACTOR)
    except Exception as exc:  # a busy or read-only store never fails the check; next tick retries

        if not isinstance(exc, LoopxError):
            raise
        records = []
    out["wrote"] = bool(records)
    out["reopened"] = [r["data"]["todo_id"] for r in records if r["type"] == "todo.reopened"]
    for w, res, _fire in results:
        out["checked"].append({"watch_id": w["id"], "name": w["name"], "outcome": res["outcome"],
                               "exit_code": res["exit_code"], "error": res["error"], "excerpt": res["excerpt"],
                               "fired": w["id"] in fired, "todo_id": fired.get(w["id"])})
