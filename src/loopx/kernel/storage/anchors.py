"""Anchors: the chain heads (``chain.chain_heads``) written where rewriting them is visible.

An anchor is one JSON object ``{"v": 1, "project_id": str, "at": iso, "reason": str, "node": the
writer's node id | None, "heads": {node: {"seq", "hash", "stream", "hlc"}}}``. It is written to two
places:

- the user's data folder, one line appended to ``data_home()/anchors/<project_id>.jsonl``;
- the project's git repository, as a commit on the ref ``refs/loopx/anchors`` whose tree holds
  ``<project_id>.json`` (git plumbing only: ``hash-object -w``, ``mktree``, ``commit-tree`` and
  ``update-ref`` with the old value as compare-and-swap; the working tree, the index and the
  branches are never touched). Each commit's parent is the previous anchor, so a pushed ref that
  a remote refuses to rewind (a protected ref) keeps every anchor ever pushed.

Anchors are written at every gate decision (``gates.decide``), by ``loopx anchor`` and at most daily
from any writer (``maybe_daily``: one ``stat`` when the last anchor is younger than a day).
``compare(store, anchors)`` checks anchors against the log (docs/security.md says what that proves:
local anchors can be rewritten by the same user; only a pushed anchor on a ref the agent cannot
rewind counts against a determined agent).
"""

from __future__ import annotations

import os

from loopx.kernel.storage import layout
from loopx.kernel.storage.fs import open_append

# A hot module: every write ends with ``maybe_daily``, which needs git only on the day an anchor is
# due, so the git adapter loads in the functions that call it.

REF = "refs/loopx/anchors"
NODE_REFS = "refs/loopx/node-anchors/"  # on a remote, per node, when several machines write the store
DAY = 86400.0
_ZERO = "0" * 40


def data_path(project_id: str) -> str:
    """``data_home()/anchors/<project_id>.jsonl``."""
    from loopx.config import data_home

    return os.path.join(data_home(), layout.anchors(project_id))


def git_dir_of(project_dir: str) -> str | None:
    """The work tree top holding ``project_dir`` (``gitcli.checkout``), or None outside git."""
    from loopx.kernel.storage import gitcli

    return gitcli.checkout(project_dir)


def git(cwd: str, *args: str, data: bytes | None = None, timeout: float = 20.0) -> str:
    """Run git in ``cwd`` as loopx (its own commit identity); stdout stripped. Raises
    gitcli.GitUnavailable (an OSError: git missing, or past ``timeout``) or RuntimeError (a
    non-zero exit, with git's message)."""
    from loopx.kernel.storage import gitcli

    res = gitcli.run(cwd, *args, data=data, timeout=timeout, identity=True)
    if not res.ok:
        raise RuntimeError(res.stderr.decode("utf-8", "replace").strip() or f"git {args[0]} failed")
    return res.out


def _payload(store, reason: str) -> dict:
    from loopx.kernel.storage import chain, clock

    return {"v": 1, "project_id": store.format_info().get("project_id") or "unknown", "at": clock.now_iso(),
            "reason": reason, "node": store.node_id(), "heads": chain.chain_heads(store)}


def push_ref(store) -> str:
    """Where ``loopx anchor --push`` puts this clone's anchors on a remote: ``REF`` while only one
    machine wrote the store, else ``NODE_REFS + <node>`` (one ref per node, so machines never push
    over each other's anchors and each ref only fast-forwards)."""
    from loopx.kernel.storage import machines

    node = store.node_id()
    if node is None or not machines.several(store.load(view="live")):
        return REF
    return NODE_REFS + node


def _to_git(cwd: str, anchor: dict, text: bytes) -> str:
    """Add one commit to ``REF`` (compare-and-swap on the old value; retried once on a race)."""
    name = f"{anchor['project_id']}.json"
    for _attempt in range(3):
        try:
            old = git(cwd, "rev-parse", "--verify", "-q", REF + "^{commit}")
        except RuntimeError:
            old = ""
        blob = git(cwd, "hash-object", "-w", "--stdin", data=text)
        rows = []
        if old:
            for row in git(cwd, "ls-tree", old).splitlines():
                if row and row.split("\t", 1)[-1] != name:
                    rows.append(row)
        rows.append(f"100644 blob {blob}\t{name}")
        tree = git(cwd, "mktree", data=("\n".join(rows) + "\n").encode())
        args = ["commit-tree", tree, "-m", f"loopx anchor: {anchor['reason']}"]
        if old:
            args += ["-p", old]
        commit = git(cwd, *args)
        try:
            git(cwd, "update-ref", "-m", "loopx anchor", REF, commit, old or _ZERO)
            return commit
        except RuntimeError:
            continue  # another writer moved the ref: build on its commit
    raise RuntimeError(f"{REF} kept moving while anchoring")


def write(store, reason: str) -> dict:
    """Write one anchor now. Returns ``{"anchor": dict, "file": path | None, "commit": sha | None,
    "warnings": [str]}``; a place that cannot be written gives a warning, never an exception
    (except what reading the store raises)."""
    from json import dumps

    anchor = _payload(store, reason)
    text = dumps(anchor, sort_keys=True, separators=(",", ":")).encode()
    out: dict = {"anchor": anchor, "file": None, "commit": None, "warnings": []}
    path = data_path(anchor["project_id"])
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open_append(path) as fh:
            fh.write(text + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        from loopx.kernel.storage import clock

        t = clock.now().timestamp()  # the loopx clock, which maybe_daily compares with
        os.utime(path, (t, t))
        out["file"] = path
    except OSError as exc:
        out["warnings"].append(f"the data-folder anchor was not written: {exc}")
    cwd = git_dir_of(store.project_dir)
    if cwd is not None:
        try:
            out["commit"] = _to_git(store.project_dir, anchor, text)
        except Exception as exc:  # noqa: BLE001 - anchoring is best effort; the caller warns
            out["warnings"].append(f"the git anchor ({REF}) was not written: {exc}")
    return out


def maybe_daily(store) -> dict | None:
    """Write an anchor when the data-folder copy is missing or older than a day (by the loopx clock).
    Cheap when not due: one ``stat``. Never raises; returns what ``write`` returned or None."""
    try:
        from loopx.kernel.storage import clock

        pid = store.format_info().get("project_id")
        if not pid:
            return None
        try:
            age = clock.now().timestamp() - os.stat(data_path(pid)).st_mtime
        except FileNotFoundError:
            age = DAY
        if age < DAY:
            return None
        return write(store, "daily")
    except Exception:  # noqa: BLE001 - a writer never fails because of an anchor
        return None


# ----------------------------------------------------------------------------------- reading
def read_file(project_id: str) -> list[dict]:
    """The anchors in the data folder, oldest first (unreadable lines skipped)."""
    from json import loads

    out = []
    try:
        with open(data_path(project_id), "rb") as fh:
            for line in fh:
                try:
                    a = loads(line)
                except ValueError:
                    continue
                if isinstance(a, dict) and isinstance(a.get("heads"), dict):
                    out.append(a)
    except OSError:
        pass
    return out


def read_ref(cwd: str, ref: str, project_id: str, limit: int = 2000) -> tuple[str | None, list[dict]]:
    """(tip commit, anchors for ``project_id`` along ``ref``'s first-parent history, oldest first),
    at most ``limit`` of them; (None, []) when the ref does not exist. Raises what ``git`` raises."""
    from json import loads

    try:
        tip = git(cwd, "rev-parse", "--verify", "-q", ref + "^{commit}")
    except RuntimeError:
        return None, []
    commits = git(cwd, "rev-list", "--first-parent", f"--max-count={limit}", tip).split()
    if not commits:
        return tip, []
    req = "".join(f"{c}:{project_id}.json\n" for c in commits).encode()
    from loopx.kernel.storage import gitcli

    data, out, seen = gitcli.run(cwd, "cat-file", "--batch", data=req, timeout=30).stdout, [], set()
    i = 0
    while i < len(data):
        nl = data.index(b"\n", i)
        head = data[i:nl].split()
        i = nl + 1
        if len(head) == 3 and head[1] == b"blob":
            size = int(head[2])
            body = data[i:i + size]
            i += size + 1
            if body in seen:
                continue  # the commit did not change this project's anchor
            seen.add(body)
            try:
                a = loads(body)
            except ValueError:
                continue
            if isinstance(a, dict) and isinstance(a.get("heads"), dict):
                out.append(a)
    out.reverse()
    return tip, out


def is_ancestor(cwd: str, older: str, newer: str) -> bool:
    """True when commit ``older`` is in ``newer``'s history."""
    from loopx.kernel.storage import gitcli

    return gitcli.run(cwd, "merge-base", "--is-ancestor", older, newer, timeout=20).ok


# ----------------------------------------------------------------------------------- checking
def compare(store, anchors: list[dict], *, strict: bool = True, here: str | None = None,
            facts=None) -> dict | None:
    """Check every anchored head against the log: the record at (node, stream, seq) must exist and
    hash to the anchored hash (its chain then vouches for every earlier record of its node).

    With ``strict`` False (anchors another machine may have written: the data folder, a remote),
    a head of node N in an anchor written by node W is skipped when N and W are not ``here`` (this
    clone's node) and the record is newer than this clone's newest record of N: W saw records
    that have not reached this clone yet (``loopx sync`` brings them). An anchor without a writer
    (older loopx) counts as another machine's when the store holds records of several machines.

    Returns None when all hold, else ``{"node", "stream", "seq", "after_seq", "kind", "reason"}`` for
    the earliest anchor that fails: ``kind`` is ``"truncated"`` (the anchored record is gone; ``seq`` is
    the first missing one) or ``"rewritten"`` (another record is there; the damage starts after
    ``after_seq``, the newest anchored record of that node and stream that still matches, and at or
    before ``seq``).

    ``facts`` (doctor's one pass over the log, ``ops.segscan.AnchorFacts``) answers the log's side
    instead of reading the whole log again: ``last_seq`` {(node, stream): seq}, ``newest`` {node:
    hlc}, ``repaired`` {(stream, seq)} and ``hashes(keys)`` {(node, stream, seq): hex}."""
    several = False
    if not strict:
        from loopx.kernel.storage import machines

        several = machines.several(store.load(view="live"))
        anchors = [a for a in anchors if isinstance(a.get("heads"), dict)]
    wanted: dict[tuple, str] = {}
    for a in anchors:
        for node, h in a["heads"].items():
            if isinstance(h, dict) and isinstance(h.get("seq"), int):
                wanted[(node, h.get("stream"), h["seq"])] = ""
    if not wanted:
        return None
    if facts is not None:
        log = _LogFacts(facts.last_seq, facts.newest, facts.repaired)
        wanted.update(facts.hashes(set(wanted)))
    else:
        log = _read_log(store, wanted)
    good: dict[tuple, int] = {}
    excused = None
    for a in sorted(anchors, key=lambda a: a.get("at") or ""):
        for node, h in sorted(a["heads"].items()):
            if not isinstance(h, dict) or not isinstance(h.get("seq"), int):
                continue
            stream, seq = h.get("stream"), h["seq"]
            found = wanted.get((node, stream, seq))
            if found == h.get("hash"):
                good[(node, stream)] = max(seq, good.get((node, stream), 0))
                continue
            writer = a.get("node")
            if (not found and not strict and node != here and (writer != here if writer else several)
                    and _not_here_yet(log.newest, node, h)):
                continue  # another machine's view of a node whose newest records have not come here yet
            failure = _failure(a, node, stream, seq, bool(found), good.get((node, stream), 0), log)
            if failure["kind"] != "repaired":
                return failure
            excused = excused or failure
    return excused


class _LogFacts:
    """The log's side of ``compare``: ``last_seq`` {(node, stream): seq}, ``newest`` {node: hlc},
    ``repaired`` {(stream, seq)} of lines `doctor --fix` moved to quarantine/."""

    __slots__ = ("last_seq", "newest", "repaired")

    def __init__(self, last_seq: dict, newest: dict, repaired: set) -> None:
        self.last_seq, self.newest, self.repaired = last_seq, newest, repaired


def _read_log(store, wanted: dict[tuple, str]) -> _LogFacts:
    """One pass over both streams: the log's facts, and the hash of each ``wanted`` record filled in."""
    from loopx.kernel.storage import chain, chainwalk

    log = _LogFacts({}, {}, set())
    for log_name in ("events", "evidence"):
        for _key, s, seq, rec, line in chainwalk.records(store, log_name):
            if b'"store.repaired"' in line:
                log.repaired.update(_repaired_seqs(store, line))
            node = rec.get("node")
            if node is None:
                continue
            log.last_seq[(node, s)] = max(seq, log.last_seq.get((node, s), 0))
            hlc = rec.get("hlc")
            if isinstance(hlc, list) and (node not in log.newest or hlc > log.newest[node]):
                log.newest[node] = hlc
            if (node, s, seq) in wanted:
                wanted[(node, s, seq)] = chain.line_hash(line)
    return log


def _repaired_seqs(store, line: bytes) -> list[tuple]:
    """(stream, seq) of each line a ``store.repaired`` record moved to quarantine/, or []."""
    try:
        data = store.decode(line.rstrip(b"\n")).get("data") or {}
    except ValueError:
        return []
    name = str(data.get("file") or "").split(".")[0]
    return [(name, q) for q in data.get("seqs") or [] if isinstance(q, int)]


def _not_here_yet(newest: dict, node: str, head: dict) -> bool:
    """True when the anchored ``head`` of ``node`` is newer than anything of ``node`` this log holds."""
    return node not in newest or not isinstance(head.get("hlc"), list) or head["hlc"] > newest[node]


def _failure(a: dict, node: str, stream, seq: int, found: bool, after: int, log: _LogFacts) -> dict:
    """How the anchored record (node, stream, seq) of anchor ``a`` fails: ``kind`` "repaired" (a
    line ``doctor --fix`` quarantined: excused unless something else fails), "truncated" or
    "rewritten"; ``after`` is the newest anchored seq of that node and stream that still matches."""
    if (stream, seq) in log.repaired:
        return {"node": node, "stream": stream, "seq": seq, "after_seq": after, "kind": "repaired",
                "reason": f"{stream} seq {seq} of node {node}, anchored at {a.get('at')}, was a "
                          "damaged line that `doctor --fix` moved to .loopx/quarantine/ (a "
                          "store.repaired record says so); compare the quarantined line"}
    if not found:
        first = log.last_seq.get((node, stream), 0) + 1
        return {"node": node, "stream": stream, "seq": min(first, seq), "after_seq": after,
                "kind": "truncated",
                "reason": f"the log has no {stream} seq {seq} of node {node}, anchored at {a.get('at')}: "
                          f"the records from {stream} seq {min(first, seq)} on were cut off or removed"}
    return {"node": node, "stream": stream, "seq": seq, "after_seq": after, "kind": "rewritten",
            "reason": f"{stream} seq {seq} of node {node} is not the record anchored at {a.get('at')}: "
                      f"the history was rewritten or forged, starting after seq {after} and at or "
                      f"before seq {seq}"}
