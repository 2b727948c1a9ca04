"""Codex's usage windows: the newest ``token_count`` event in ``$CODEX_HOME/sessions/**/rollout-*.jsonl``.

Codex logs the rate-limit headers of every response as an event line::

    {"timestamp": ISO, "type": "event_msg", "payload": {"type": "token_count", "info": {...}|null,
     "rate_limits": {"primary": {"used_percent": 97.0, "window_minutes": 300, "resets_at": <epoch s>},
                     "secondary": {...}}}}

Older versions give ``resets_in_seconds`` (relative to the event's timestamp) instead of
``resets_at``. The figure is the host's own: loopx uses it as it is and says how old it is. The
newest rollout files (by modification time) are read backwards from their end until a figure is
found; the answer is cached by (path, size, mtime) so an unchanged folder reads no bytes.
"""

from __future__ import annotations

import os

from loopx.usage import files, unknown

TAIL_CHUNK = 256 * 1024
MAX_BACK = 16 * 1024 * 1024   # bytes read backwards per file before giving up on it
MAX_FILES = 5                 # newest files tried
CACHE = "codex.quick"


def _rollouts(sessions: str) -> list[tuple[float, int, str]]:
    """(mtime_ns, size, path) of the rollout files, newest first. Walks the date folders newest
    first and stops after the folders that can hold the newest files."""
    found: list[tuple[float, int, str]] = []

    def walk(d: str, depth: int) -> None:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name, reverse=True)
        except OSError:
            return
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    if depth < 4 and (depth == 0 or len(found) < 64):
                        walk(e.path, depth + 1)
                elif e.name.startswith("rollout-") and e.name.endswith(".jsonl"):
                    st = e.stat()
                    found.append((st.st_mtime_ns, st.st_size, e.path))
            except OSError:
                continue

    walk(sessions, 0)
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
    import json

    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
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
        with open(path, "rb") as fh:
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


def windows(now) -> dict:
    roots = files.home_dir("CODEX_HOME", ".codex")
    sessions = [os.path.join(r, "sessions") for r in roots]
    rollouts = sorted((f for s in sessions for f in _rollouts(s)), reverse=True)
    if not rollouts:
        return unknown("codex", f"no Codex sessions under {os.pathsep.join(sessions)}")
    path = files.cache_path(CACHE)
    cached = files.load_quick(path)
    cached = cached if isinstance(cached, dict) else {}
    key = [[p, sz, mt] for mt, sz, p in rollouts[:MAX_FILES]]
    counter = [0]
    if cached.get("key") == key and isinstance(cached.get("figure"), (dict, type(None))):
        fig, bad = cached.get("figure"), cached.get("bad", 0)
    else:
        fig, bad = None, 0
        for _mt, sz, p in rollouts[:MAX_FILES]:
            fig, b = _scan_back(p, sz, counter)
            bad += b
            if fig:
                break
        files.save_quick(path, {"key": key, "figure": fig, "bad": bad})
    out = unknown("codex", None)
    out.update(source="codex-rollout", files=len(rollouts), bytes_read=counter[0], skipped_lines=bad)
    if not fig:
        out["note"] = "no token_count event with rate limits in the newest Codex sessions"
        return out
    out.update(known=True, as_of=fig["as_of"], windows=fig["windows"])
    if fig["as_of"]:
        from loopx.kernel.storage import clock

        out["age_seconds"] = max(0, int((now - clock.parse_ts(fig["as_of"])).total_seconds()))
    return out
