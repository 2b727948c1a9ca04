"""Codex's usage windows: the newest ``token_count`` event in ``$CODEX_HOME/sessions/**/rollout-*.jsonl``.

Codex logs the rate-limit headers of every response as an event line::

    {"timestamp": ISO, "type": "event_msg", "payload": {"type": "token_count", "info": {...}|null,
     "rate_limits": {"primary": {"used_percent": 97.0, "window_minutes": 300, "resets_at": <epoch s>},
                     "secondary": {...}}}}

Older versions give ``resets_in_seconds`` (relative to the event's timestamp) instead of
``resets_at``. The figure is the host's own: loopx uses it as it is and says how old it is. The
figure used is the one with the newest timestamp across all rollout files (``newest_figure``):
each file's tail is read backwards to its last figure, files newest-modified first, until a file
older than the best figure; each file's answer is cached by (path, size, mtime), so an unchanged
folder reads no bytes, and the answer itself while the folders' stamp says nothing changed
(``files.tree_stamp``), so an unchanged folder needs no stat per file either.
"""

from __future__ import annotations

import os

from loopx.errors import LoopxError
from loopx.kernel.storage.fs import open_file
from loopx.usage import files, unknown

TAIL_CHUNK = 256 * 1024
MAX_BACK = 16 * 1024 * 1024   # bytes read backwards per file before giving up on it
MAX_FILES = 5                 # newest files tried
CACHE = "codex.quick"


def _rollouts(sessions: str, folders: dict | None = None) -> list[tuple[float, int, str]]:
    """(mtime_ns, size, path) of every rollout file, newest first. Every date folder is listed (a
    stat per file, no byte read): an old session that gets a new prompt is appended to in its old
    folder, so the folder says nothing about how new a file's last figure is. With ``folders``,
    the mtime (ns) of every folder listed is put there (``files.tree_stamp``)."""
    found: list[tuple[float, int, str]] = []
    stack = [(sessions, 0)]
    while stack:
        d, depth = stack.pop()
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
                        if depth < 4:
                            stack.append((e.path, depth + 1))
                    elif e.name.startswith("rollout-") and e.name.endswith(".jsonl"):
                        st = e.stat()
                        found.append((st.st_mtime_ns, st.st_size, e.path))
                except OSError:
                    continue
    found.sort(reverse=True)
    return found


def _window(name: str, raw, event_epoch: float | None) -> dict | None:
    if not isinstance(raw, dict):
        return None
    used = raw.get("used_percent")
    used = float(used) if isinstance(used, (int, float)) and not isinstance(used, bool) else None
    minutes = raw.get("window_minutes")
    minutes = int(minutes) if isinstance(minutes, (int, float)) and not isinstance(minutes, bool) else None
    reset = None
    ra = raw.get("resets_at")
    if isinstance(ra, (int, float)) and not isinstance(ra, bool) and ra > 0:
        reset = files.iso_of(ra / 1000 if ra > 1e12 else ra)
    elif isinstance(ra, str):
        e = files.epoch_of(ra)
        reset = files.iso_of(e) if e else None
    else:
        rin = raw.get("resets_in_seconds")
        if isinstance(rin, (int, float)) and event_epoch is not None:
            reset = files.iso_of(event_epoch + rin)
    return {"name": name, "used_percent": used, "resets_at": reset, "window_minutes": minutes, "tokens": None,
            "limit": None, "limit_source": "host", "starts_at": None}


def _figure(line: bytes) -> dict | None:
    """The rate-limit figure of one rollout line, or None."""
    if b"rate_limits" not in line:
        return None
    obj = files.json_object(line)
    if obj is None:
        return None
    payload = obj.get("payload")
    if not isinstance(payload, dict):
        payload = obj
    rl = payload.get("rate_limits")
    if not isinstance(rl, dict):
        return None
    ts = obj.get("timestamp") or payload.get("timestamp")
    epoch = files.epoch_of(ts)
    wins = [w for w in (_window("primary", rl.get("primary"), epoch), _window("secondary", rl.get("secondary"), epoch))
            if w]
    if not wins:
        return None
    return {"as_of": files.iso_of(epoch) if epoch else None, "windows": wins}


def _scan_back(path: str, size: int, counter: list) -> tuple[dict | None, int]:
    """The newest figure in ``path`` reading backwards; (figure, lines that were not JSON)."""
    bad = 0
    try:
        with open_file(path) as fh:  # a FIFO named rollout-*.jsonl is refused, never waited on
            pos, carry = size, b""
            while pos > 0 and size - pos < MAX_BACK:
                step = min(TAIL_CHUNK, pos)
                pos -= step
                fh.seek(pos)
                chunk = fh.read(step)
                counter[0] += len(chunk)
                data = chunk + carry
                lines = data.split(b"\n")
                carry = lines[0] if pos > 0 else b""
                body = lines[1:] if pos > 0 else lines
                for line in reversed(body):
                    line = line.strip()
                    if not line:
                        continue
                    fig = _figure(line)
                    if fig:
                        return fig, bad
                    if not line.startswith(b"{"):
                        bad += 1
    except OSError:
        return None, bad
    return None, bad


def newest_figure(rollouts: list[tuple[float, int, str]], cached: dict, counter: list) -> tuple[dict | None, int, dict]:
    """The figure with the newest timestamp of its own across ``rollouts`` ((mtime_ns, size, path),
    newest first): each file's last figure (read backwards from its end), compared by ``as_of``,
    not by which file was written last: a forked or resumed session replays old ``rate_limits``
    lines into a new file. A file last modified before the best figure so far cannot hold a newer
    one, so the walk stops there. ``cached`` ({path: [size, mtime_ns, figure, bad]}) answers for
    unchanged files. Returns (figure, lines that were not JSON, the cache entries to keep)."""
    best, best_epoch, bad, keep = None, None, 0, {}
    for tried, (mt, sz, p) in enumerate(rollouts):
        if best_epoch is not None and mt / 1e9 < best_epoch - 1:
            break
        if best is not None and tried >= MAX_FILES and best_epoch is None:
            break  # figures without a timestamp: only the newest files are worth reading
        hit = cached.get(p)
        if isinstance(hit, list) and len(hit) == 4 and hit[0] == sz and hit[1] == mt:
            fig, b = hit[2], hit[3]
        else:
            fig, b = _scan_back(p, sz, counter)
        keep[p] = [sz, mt, fig, b]
        bad += b
        if not fig:
            continue
        epoch = files.epoch_of(fig.get("as_of"))
        if best is None or (epoch is not None and (best_epoch is None or epoch > best_epoch)):
            best, best_epoch = fig, epoch
    return best, bad, keep


def windows(now) -> dict:
    """The windows at ``now``: the last answer while the sessions' tree stamp says nothing changed
    (``files.tree_stamp``: a stat of each folder and of each rollout changed in the last day, for
    up to ``files.SWEEP`` seconds; an old session appended to in place waits for the next full
    walk), else the newest figure of a walk that stats every rollout file."""
    roots = files.home_dir("CODEX_HOME", ".codex")
    sessions = [os.path.join(r, "sessions") for r in roots]
    path = files.cache_path(CACHE)
    cached = files.load_quick(path)
    cached = cached if isinstance(cached, dict) and cached.get("v") == 2 else {}
    answer = cached.get("answer")
    if (isinstance(answer, dict) and answer.get("sessions") == sessions and isinstance(answer.get("out"), dict)
            and files.unchanged(cached.get("tree"))):
        try:
            return _aged(dict(answer["out"]), now)
        except (LoopxError, TypeError, ValueError):  # a hand-edited figure: no cache, never an error
            pass
    folders: dict = {}
    rollouts = sorted((f for s in sessions for f in _rollouts(s, folders)), reverse=True)
    if not rollouts:
        return unknown("codex", f"no Codex sessions under {os.pathsep.join(sessions)}")
    counter = [0]
    fig, bad, keep = newest_figure(rollouts, cached.get("files") or {}, counter)
    out = unknown("codex", None)
    out.update(source="codex-rollout", files=len(rollouts), bytes_read=counter[0], skipped_lines=bad)
    if not fig:
        out["note"] = "no token_count event with rate limits in the newest Codex sessions"
    else:
        out.update(known=True, as_of=fig["as_of"], windows=fig["windows"])
    tree = files.tree_stamp(folders, [[p, sz, mt] for mt, sz, p in rollouts])
    files.save_quick(path, {"v": 2, "files": keep, "tree": tree,
                            "answer": {"sessions": sessions, "out": dict(out, bytes_read=0)}})
    return _aged(out, now)


def _aged(out: dict, now) -> dict:
    """``out`` with ``age_seconds``, how old its figure is at ``now``."""
    if out.get("as_of"):
        from loopx.kernel.storage import clock

        out["age_seconds"] = max(0, int((now - clock.parse_ts(out["as_of"])).total_seconds()))
    return out
