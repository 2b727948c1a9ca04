"""Small shared helpers of the usage readers: the cache folder, JSON cache files, timestamps."""

from __future__ import annotations

import os

from loopx.kernel.storage import layout
from loopx.kernel.storage.clock import UTC


def cache_path(name: str) -> str:
    """``<data folder>/cache/usage/<name>`` (the folder is created)."""
    from loopx import config

    d = os.path.join(config.data_home(), layout.USAGE_CACHE)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def load(path: str) -> dict:
    """A JSON cache file as a dict; a missing or damaged file is ``{}`` (the cache is disposable)."""
    import json

    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save(path: str, data: dict) -> None:
    """Write ``data`` atomically (best effort)."""
    import json

    from loopx.kernel.storage.fs import atomic_write

    try:
        atomic_write(path, json.dumps(data, separators=(",", ":")), sync=False)
    except (OSError, ValueError):
        pass


def load_quick(path: str):
    """A marshal cache file (read without importing json: should-run's hot path), or None."""
    import marshal

    try:
        with open(path, "rb") as fh:
            return marshal.loads(fh.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def save_quick(path: str, obj) -> None:
    """Write the marshal cache ``path`` atomically (best effort: a failure leaves the old file)."""
    import marshal

    from loopx.kernel.storage.fs import atomic_write

    try:
        atomic_write(path, marshal.dumps(obj), sync=False)
    except (OSError, ValueError):
        pass


def config_stamp() -> list:
    """(size, mtime_ns) of the user's config file (the usage limits live there), or []."""
    from loopx import config

    try:
        st = os.stat(config.config_path())
    except OSError:
        return []
    return [st.st_size, st.st_mtime_ns]


def epoch_of(ts) -> float | None:
    """Seconds since the epoch of an ISO-8601 timestamp (``Z`` or an offset), or None."""
    if not isinstance(ts, str) or len(ts) < 10:
        return None
    from loopx.kernel.storage.clock import datetime

    try:
        t = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


def iso_of(epoch: float) -> str:
    from loopx.kernel.storage import clock
    from loopx.kernel.storage.clock import datetime

    return clock.iso(datetime.fromtimestamp(epoch, tz=UTC))


def home_dir(env_var: str, default: str) -> list[str]:
    """The host's config folder(s): ``env_var`` (several separated by ``os.pathsep`` or a comma),
    else ``~/<default>``."""
    val = os.environ.get(env_var)
    if val:
        parts = [p for chunk in val.split(os.pathsep) for p in chunk.split(",")]
        return [os.path.expanduser(p.strip()) for p in parts if p.strip()]
    return [os.path.join(os.path.expanduser("~"), default)]
