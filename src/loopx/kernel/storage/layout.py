"""Every path loopx uses under a project's ``.loopx/`` and under the user's data folder, named once.

Names are relative to their folder, ``/``-separated (``os.path.join`` and every OS loopx runs on
accept that); join them with ``Store.path(name)`` or ``os.path.join(folder, name)``. A file whose
name carries an id is a function of that id. ``PROJECT`` and ``DATA`` are the tables of what each
path holds: docs/file-format.md's layout block is ``project_block()`` and tests/test_layout.py
fails when they differ, so a new file is one row here and the docs follow.

Plain strings and small functions only: the hot commands import this module, so it imports
nothing but ``os``.
"""

from __future__ import annotations

import os

DIRNAME = ".loopx"                 # the project's folder of loopx state
STREAMS = ("events", "evidence")   # the two logs, oldest segment first, then the open file

# ---------------------------------------------------------------- .loopx/ (committed with the project)
FORMAT = "format.json"
BLOBS = "blobs"
QUARANTINE = "quarantine"
GITIGNORE = ".gitignore"
# ---------------------------------------------------------------- .loopx/ (machine-local, git-ignored)
LOCK = "lock"
NODE = "node"
BACKUP = "backup"
FORMAT1_BACKUP = "backup/format-1"
WORKTREES = "worktrees"
CACHE = "cache"
LOCAL = (LOCK, CACHE + "/", NODE, BACKUP + "/", WORKTREES + "/")  # what .loopx/.gitignore lists

# ---------------------------------------------------------------- .loopx/cache/ (disposable)
SNAPSHOT = "cache/snapshot.bin"
LIVE = "cache/live.bin"
HEADS = "cache/heads.bin"
DECISIONS = "cache/decisions.bin"
GITSTATUS = "cache/gitstatus.bin"
GITREFS = "cache/gitrefs.bin"
WATCH_BOOK = "cache/watches.json"
WATCH_LOCK = "cache/watch.lock"
NOTIFY_LOCK = "cache/notify.lock"
MERGE_LOCK = "cache/merge.lock"
SYNC = "cache/sync.json"
SYNC_LOCK = "cache/sync.lock"
SYNC_HEADS = "cache/sync-heads.json"
PENDING = "cache/pending.json"
PENDING_LOCK = "cache/pending.lock"
CLAIMS_SEEN = "cache/claims-seen.json"
HOOKS = "cache/hooks"
EDIT_REPORT = "cache/hooks/after-edit-report.json"


def schedule_lock(kind: str) -> str:
    """The lock ``loopx schedule`` takes while it edits the ``kind`` (cron, systemd) entries."""
    return f"{CACHE}/{kind}.lock"


def open_log(stream: str) -> str:
    """The open segment of ``stream``: ``events.jsonl``."""
    return f"{stream}.jsonl"


def segment(stream: str, number: int) -> str:
    """Closed segment ``number`` (1-based) of ``stream``: ``events/000001.jsonl``."""
    return f"{stream}/{segment_name(number)}"


def segment_name(number: int) -> str:
    """A closed segment's file name inside its stream's folder: ``000001.jsonl``."""
    return f"{number:06d}.jsonl"


def is_segment_name(name: str) -> bool:
    """True for a closed segment's file name inside its stream's folder (``000001.jsonl``)."""
    return len(name) == 12 and name.endswith(".jsonl") and name[:6].isdigit()


def checkpoint(number: int) -> str:
    """The live view kept beside closed events segment ``number``: ``events/000001.live.json``."""
    return f"events/{number:06d}.live.json"


def blob(digest: str) -> str:
    """A content-addressed blob: ``blobs/ab/<sha256>``."""
    return f"{BLOBS}/{digest[:2]}/{digest}"


def quarantined(name: str) -> str:
    """Bytes cut from a damaged log, kept for inspection: ``quarantine/<name>``."""
    return f"{QUARANTINE}/{name}"


def guard_calls(run_id: str) -> str:
    """The guard hook's call counter of one run: ``cache/hooks/guard-<run>.calls``."""
    return f"{HOOKS}/guard-{run_id}.calls"


def stop_marker(host: str, key: str) -> str:
    """A stop hook's once-per-session marker: ``cache/hooks/stop-<host>-<key>.json``."""
    return f"{HOOKS}/stop-{host}-{key}.json"


def experiment_lock(goal_id: str) -> str:
    """The lock one experiment's trial steps take: ``cache/experiment-<goal>.lock``."""
    return f"{CACHE}/experiment-{goal_id}.lock"


def trials_cache(goal_id: str, kind: str) -> str:
    """An experiment's trial table cache (``kind`` bin, or a lock): ``cache/trials-<goal>.<kind>``."""
    return f"{CACHE}/trials-{goal_id}.{kind}"


def slot_lock(stem: str, number: int = 1) -> str:
    """A runner's slot lease lock: ``cache/<stem>.lock``, then ``cache/<stem>-2.lock``, ..."""
    return f"{CACHE}/{stem}.lock" if number == 1 else f"{CACHE}/{stem}-{number}.lock"


def project_path(project_dir: str, name: str) -> str:
    """``name`` (one of the above) under ``project_dir``'s ``.loopx/`` without opening the store."""
    return os.path.join(project_dir, DIRNAME, name)


# ---------------------------------------------------------------- the user's data folder (config.data_home)
PROJECTS = "projects.json"
AGENT_SESSIONS = "agent-sessions.json"
DATA_LOCK = "lock"
USAGE_CACHE = "cache/usage"
DEMO = "demo"
DEMO_RESEARCH = "demo-research"
CONFIG = "config.toml"  # under LOOPX_HOME only; otherwise the platform's config folder (config.config_path)


def anchors(project_id: str) -> str:
    """The data folder's anchor log of one project: ``anchors/<project_id>.jsonl``."""
    return f"anchors/{project_id}.jsonl"


HOLDOUT = "holdout"


def holdout(project_id: str, gate_id: str) -> str:
    """A held-out evaluation's sealed result: ``holdout/<project_id>/<gate>.json``."""
    return f"{HOLDOUT}/{project_id}/{gate_id}.json"


# ---------------------------------------------------------------- what each path holds (the docs' table)
PROJECT: tuple[tuple[str, str], ...] = (
    (FORMAT, '{"format": 2, "created_by": "loopx 0.1.0", "project_id": "p-…", "created_at": "…"}'),
    (open_log("events"), "the open segment of control events: goals, todos, claims, gates, scope, quota, runs, …"),
    (segment("events", 1), "closed segments of events.jsonl, oldest first; renamed whole, never rewritten"),
    (checkpoint(1), "the live view when that segment was closed (a checkpoint; derived data)"),
    (open_log("evidence"), "the open segment of evidence records (bulky; cited by id from control events)"),
    (segment("evidence", 1), "closed evidence segments"),
    (f"{BLOBS}/ab/<sha256>", "large outputs, content-addressed, write-once"),
    (NODE, "this clone's node id (n- + 16 hex); machine-local, git-ignored"),
    (SNAPSHOT, "folded state + the file offsets it covers (marshal; stamped with fold.FOLD_VERSION and its sources' stamps); disposable, git-ignored"),
    (LIVE, "the live view (what is still open) + offsets; rewritten once its tail grows long (caches.LIVE_EVERY lines); disposable"),
    (HEADS, "the last write's chain heads and open files' lengths (marshal); disposable"),
    (DECISIONS, "should-run's and the views' recent answers, validated by file stamps (marshal); disposable"),
    (GITSTATUS, "the last `git status`, valid while the work tree's stat data is unchanged; disposable"),
    (GITREFS, "the fingerprint's git part in a repository with thousands of refs, kept under what it was made of; disposable"),
    (WATCH_BOOK, "each watch's last check and result; disposable"),
    (CLAIMS_SEEN, "when this clone first saw each claim (the clock-skew guard); disposable"),
    (SYNC, "the last `loopx sync`: time, remote, error, shared goals, claims; disposable"),
    (SYNC_HEADS, "how far the last sync pushed and imported; disposable"),
    (PENDING, "spends and lease renewals of shared goals waiting for the remote; disposable"),
    (trials_cache("<goal>", "bin"), "an experiment's trial table, folded once per change; disposable"),
    (trials_cache("<goal>", "txt"), "its full listing as last rendered (also .tsv, .json): a line of version, key "
                                    "and byte length, then UTF-8 written out as it is; disposable"),
    (HOOKS + "/", "the host hooks' markers, call counters and the after-edit report; disposable"),
    ("cache/*.lock", "locks of one job each (sync, pending, merge, notify, watch, slots, experiments)"),
    (QUARANTINE + "/", "bytes cut from a torn tail (<file>-<time>-<rand>.torn), kept for inspection"),
    (FORMAT1_BACKUP + "/", "the verified copy of a format-1 store kept by its migration; git-ignored"),
    (WORKTREES + "/", "the git worktrees of `loopx run --parallel`; git-ignored"),
    (LOCK, "the writers' OS lock file; never deleted; git-ignored"),
    (GITIGNORE, ", ".join(f'"{x}"' for x in LOCAL[:-1]) + f' and "{LOCAL[-1]}"'),
)

DATA: tuple[tuple[str, str], ...] = (
    (PROJECTS, "the projects this user connected (the dashboard's list)"),
    (AGENT_SESSIONS, "agent sessions seen by the hooks"),
    (anchors("<project_id>"), "chain heads anchored outside the project"),
    (holdout("<project_id>", "<gate>"), "sealed results of held-out evaluations"),
    (USAGE_CACHE + "/", "what the hosts' own usage files held when last read; disposable"),
    (DATA_LOCK, "the lock of the files above"),
)


def _block(folder: str, rows: tuple[tuple[str, str], ...]) -> str:
    width = max(len(p) for p, _ in rows)
    lines = [folder]
    for p, what in rows:
        lines.append(f"  {p.ljust(width)}  {what}".rstrip())
    return "\n".join(lines) + "\n"


def project_block() -> str:
    """docs/file-format.md's ``.loopx/`` layout block (without its fences)."""
    return _block(DIRNAME + "/", PROJECT)


def data_block() -> str:
    """docs/file-format.md's data folder block (without its fences)."""
    return _block("<data folder>/", DATA)
