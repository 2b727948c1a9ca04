"""Small shared helpers of the usage readers: the cache folder, JSON cache files, timestamps, and
the stamp of a tree of host files that tells, without a stat per file, that nothing changed."""

from __future__ import annotations

import os

from loopx.kernel.storage import layout
from loopx.kernel.storage.clock import UTC
from loopx.kernel.storage.fs import MOST_CACHE, read_bytes


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
        data = json.loads(read_bytes(path, most=MOST_CACHE))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def json_object(line: bytes) -> dict | None:
    """The JSON object on one line of a host's session file (a transcript, a rollout), or None when
    the line holds no object (not JSON, or another value)."""
    import json

    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


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
        return marshal.loads(read_bytes(path, most=MOST_CACHE))
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


def digest(value) -> str:
    """A short digest (SHA-256, 16 hex digits) of ``value`` as ``marshal`` writes it: a cache key
    that stays small however many files it covers."""
    import marshal

    from loopx.kernel.storage.chain import sha256

    return sha256(marshal.dumps(value)).hexdigest()[:16]


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


SWEEP = 300  # seconds: a tree stamp stands in for a full walk at most this long
RECENT = 86400  # seconds: files changed this recently are stat'd on every check of a tree stamp
RACY_NS = 2_000_000_000  # a folder changed within this of its stat: its stamp cannot be trusted


def tree_stamp(folders: dict, files: list) -> dict | None:
    """What ``unchanged`` checks later, for a walk just made that listed ``folders`` ({folder:
    mtime_ns}, every folder it listed; 0 for a top folder that is missing) and ``files`` ([path,
    size, mtime_ns] of every file it kept): the folders and the files changed in the last
    ``RECENT`` seconds. None when a folder changed
    within ``RACY_NS`` of now (a file added in the same clock tick could leave the mtime as it was):
    the next check walks again. Times are the system's clock, which stamps the files (never
    ``LOOPX_NOW``).

    Why: a Claude Code user's transcripts run to thousands of files, and a stat of each on every
    decision cost ``next`` a fifth of its time. A new, removed or renamed file changes its
    folder's mtime; an appended file changes its own size and mtime, and a host appends to the
    sessions in use, whose files are recent. A file older than ``RECENT`` that is appended to (an old
    session resumed in place) is seen at the next full walk, at most ``SWEEP`` seconds later."""
    import time

    now_ns = time.time_ns()
    if any(mt and now_ns - mt < RACY_NS for mt in folders.values()):
        return None
    cut = now_ns - int(RECENT * 1e9)
    return {"at": now_ns / 1e9, "folders": folders, "files": [f for f in files if f[2] >= cut]}


def folder_mtime(path: str) -> int:
    """The folder's mtime (ns), or 0 when there is none: a folder that was missing at a walk and
    is made later (a host used for the first time) changes the stamp."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def unchanged(stamp) -> bool:
    """Whether a walk now would find what the one that made ``stamp`` (``tree_stamp``) found: taken
    less than ``SWEEP`` seconds ago, every folder with its mtime, every recent file with its size
    and mtime. A stat per folder and per recent file; anything odd is False."""
    import time

    try:
        if not 0 <= time.time() - stamp["at"] < SWEEP:
            return False
        for folder, mtime in stamp["folders"].items():
            if folder_mtime(folder) != mtime:
                return False
        for path, size, mtime in stamp["files"]:
            st = os.stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime:
                return False
    except (OSError, TypeError, KeyError, AttributeError, ValueError):
        return False
    return True
