"""The state fingerprint: a short hash of everything a turn depends on (docs/architecture.md#the-governed-loop).

It covers the goal (objective, done_when, verify, status, scope), the goal's todos that are not
done or archived (id, title, detail, priority, dependencies, acceptance, verify and status, with
``claimed`` counted as ``open`` so a claim and its release do not look like a change), the
goal's gates (id and status), and, when the project is a git repository, HEAD, every local
branch and tag head and the stash (``git for-each-ref refs/heads refs/tags refs/stash``: a merge
into another branch followed by a checkout back is a change), plus the list of dirty files (with
size and mtime for files). Paths under ``.loopx/`` are ignored, and so are parallel runs'
branches (``refs/heads/loopx/*``) and their worktrees under ``.loopx/worktrees/``: they never
look like a change, only HEAD moving (a merge back) does. ``git status`` runs with
``--no-optional-locks`` so a check never holds the index lock that a merge back or the user's
own git needs.

``state_part`` is pure; ``git_part`` reads ``.git`` and runs ``git status`` (a few ms), so
callers compute it only when the value rule needs it. In a repository with thousands of refs the
git part is kept under what it is made of (``gitmemo``, from ``BIG_PACKED`` bytes of
``packed-refs``): the same value, without listing and hashing the refs again. ``combine`` joins the two into the
16-hex-digit fingerprint stored on runs (``fp_before``/``fp_after``).
"""

from __future__ import annotations

import os

from loopx.kernel.storage import gitcli, layout

GIT_TIMEOUT = 10.0


def state_part(state: dict, goal_id: str, overrides: dict | None = None) -> str:
    """Hash of the goal, its live todos and its gates. ``overrides`` maps todo id -> status to
    use instead of the folded one (for the state a transaction is about to produce).
    Closed todos and decided gates count only by id and status, folded into one order-free 64-bit
    mark (``fold.closed_mark``), so a live view (which keeps that mark for what it left out, in
    ``closed_fp``) and the full state give the same hash."""
    from loopx.kernel.storage.fold import closed_mark

    g = state["goals"].get(goal_id) or {}
    from loopx.kernel.storage.chain import sha256  # the built-in module: no OpenSSL load
    from loopx.kernel.storage.cjson import dumps

    overrides = overrides or {}
    mark = state.get("closed_fp", {}).get(goal_id, 0)
    todos = []
    for t in state["todos"].values():
        if t["goal"] != goal_id:
            continue
        status = overrides.get(t["id"], t["status"])
        if status in ("done", "archived"):
            mark ^= closed_mark(t["id"], status)
            continue
        if status == "claimed":
            status = "open"
        row = [t["id"], status, t.get("title"), t.get("detail"), t.get("priority"),
               sorted(t.get("depends_on") or []), t.get("acceptance"), t.get("verify")]
        if t.get("depends_on_goals"):  # another goal finishing makes this todo ready: a change
            row.append([[x, (state["goals"].get(x) or {}).get("status")] for x in t["depends_on_goals"]])
        todos.append(row)
    todos.sort(key=_first)  # ids are unique: the order sorting the whole rows gives, without comparing lists
    gates = []
    for x in state["gates"].values():
        if x["goal"] != goal_id:
            continue
        if x["status"] == "pending":
            gates.append([x["id"], x["status"]])
        else:
            mark ^= closed_mark(x["id"], x["status"])
    gates.sort()
    body = [g.get("objective"), g.get("done_when"), g.get("verify"), g.get("status"), g.get("scope"),
            todos, gates, f"{mark:016x}"]
    return sha256(dumps(body, ascii=True, sort_keys=True, default=str, separators=(", ", ": ")).encode()).hexdigest()[:16]


def _first(row: list):
    return row[0]


def in_git(project_dir: str | None) -> bool:
    """True when ``project_dir`` lies inside a git work tree (file changes are then visible)."""
    return bool(project_dir) and gitcli.git_dir(project_dir or ".") is not None


def git_part(project_dir: str | None) -> str:
    """HEAD, the branch, tag and stash heads and the dirty-file list of the git repository holding
    ``project_dir``: one ``git status`` call, the refs read from their files (``gitrefs``; four
    ``git`` calls where that reader defers to git); ``""`` when
    there is none or git is not installed (then only the loopx state counts)."""
    return git_facts(project_dir)[0]


def git_facts(project_dir: str | None, pinned: bool = False) -> tuple[str, bytes | None]:
    """``(git_part, the raw ``git status`` listing)``: the listing (``STATUS``'s ``-z`` output,
    paths relative to the work tree's top) lets the scope check of the same moment
    (``turnscope.start``/``outside``) reuse this one git process instead of starting its own; None
    when there was no listing. ``pinned``: git runs in ``gitcli``'s pinned mode (the folder's own
    git dirs, hooks and fsmonitor off), as ``next`` and ``turn finish`` ask."""
    if not project_dir:
        return "", None
    dot_git = gitcli.git_dir(project_dir)
    if dot_git is None:
        return "", None
    from loopx.kernel.read import gitrefs
    from loopx.kernel.storage.chain import sha256

    # the usual case: refs from their files, then one `git status` (started without subprocess);
    # lazy: HEAD's packed branch found by its line, the whole file checked by refs_of() or proven
    # checked by a kept part (gitmemo)
    known = gitrefs.facts(dot_git, lazy=True)
    if known is None:
        return _from_git(project_dir, pinned, sha256)
    from loopx.kernel.read import gitstatus

    head, refs_of, top, key = known
    big = big_packed(key[0])
    refs = None if big else refs_of()
    if not big and refs is None:  # packed-refs holds what only git reads
        return _from_git(project_dir, pinned, sha256)
    status = gitstatus.listing(project_dir, dot_git, top, head, pinned, lambda extra: gitcli.output(
        project_dir, *STATUS, *extra, timeout=GIT_TIMEOUT, pinned=pinned))
    if status is None:  # git not installed, failed or hung past the timeout
        return "", None
    if refs is None:  # thousands of refs: the part is kept per what it was made of (gitmemo)
        from loopx.kernel.read import gitmemo

        lines = items(status, top)
        part = gitmemo.git_part(project_dir, (key, head, top, tuple(lines)), refs_of,
                                lambda listing: digest(head, listing, lines, sha256))
        return (part, status) if part is not None else _from_git(project_dir, pinned, sha256)
    return _hash(head, refs, status, top, sha256), status


def big_packed(packed: tuple) -> bool:
    """Whether the ``packed-refs`` of stat key ``packed`` (``gitrefs.packed_key``) is one the git part
    is kept for (``gitmemo``): ``BIG_PACKED`` bytes or more."""
    return packed[1] is not None and packed[3] >= BIG_PACKED


def _from_git(project_dir: str, pinned: bool, sha256) -> tuple[str, bytes | None]:
    """``git_facts`` with every fact asked of git (four git processes): for refs the reader defers to git."""
    head = (gitcli.output(project_dir, "rev-parse", "-q", "--verify", "HEAD", timeout=GIT_TIMEOUT,
                          pinned=pinned) or b"").strip()
    refs = gitcli.output(project_dir, *FOR_EACH_REF, timeout=GIT_TIMEOUT, pinned=pinned) or b""
    top = (gitcli.output(project_dir, "rev-parse", "--show-toplevel", timeout=GIT_TIMEOUT, pinned=pinned)
           or b"").decode("utf-8", "replace").strip() or project_dir
    status = gitcli.output(project_dir, *STATUS, timeout=GIT_TIMEOUT, pinned=pinned)
    if status is None:  # git not installed, failed or hung past the timeout
        return "", None
    return _hash(head, refs, status, top, sha256), status


STATUS = ("--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=normal")
FOR_EACH_REF = ("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags", "refs/stash")
# from this size of packed-refs (about 1,000 refs) the git part is kept in cache/gitrefs.bin
# (gitmemo): below it, listing and hashing the refs costs less than reading that file
BIG_PACKED = 1 << 16


def _hash(head: bytes, refs: bytes, status: bytes, top: str, sha256) -> str:
    """The git part's hash from HEAD, the refs listing, ``git status -z`` output and the work tree's top."""
    return digest(head, refs, items(status, top), sha256)


def items(status: bytes, top: str) -> list[str]:
    """The dirty-file lines the git part hashes: ``"<XY> <path> <size>:<mtime_ns>"`` (``gone`` for a
    file that is no more, nothing after a folder) for each entry of ``git status -z`` output outside
    ``.loopx/`` folders, sorted; one ``stat`` per file listed."""
    out = []
    for entry in status.split(b"\0"):
        if len(entry) < 4:
            continue
        path = entry[3:].decode("utf-8", "replace")
        if path == layout.DIRNAME or path.startswith(layout.DIRNAME + "/") or "/" + layout.DIRNAME + "/" in f"/{path}":
            continue
        stamp = ""
        if not path.endswith("/"):
            try:
                s = os.stat(os.path.join(top, path))
                stamp = f"{s.st_size}:{s.st_mtime_ns}"
            except OSError:
                stamp = "gone"
        out.append(f"{entry[:2].decode('ascii', 'replace')} {path} {stamp}")
    out.sort()
    return out


def digest(head: bytes, refs: bytes, lines: list[str], sha256) -> str:
    """The git part: 16 hex digits of the SHA-256 of HEAD, the refs listing (without parallel runs'
    ``refs/heads/loopx/`` branches) and the dirty-file ``lines`` (``items``)."""
    if b" refs/heads/loopx/" in refs:  # parallel runs' own branches (a line each: thousands of tags are not looked at)
        refs = b"\n".join(ln for ln in refs.split(b"\n") if b" refs/heads/loopx/" not in ln)
    body = head.decode("ascii", "replace") + "\n" + refs.decode("utf-8", "replace") + "\n" + "\n".join(lines)
    return sha256(body.encode()).hexdigest()[:16]


def combine(state_hash: str, git_hash: str) -> str:
    from loopx.kernel.storage.chain import sha256

    return sha256(f"{state_hash}|{git_hash}".encode()).hexdigest()[:16]


def compute(state: dict, goal_id: str, project_dir: str | None, overrides: dict | None = None) -> str:
    """The full fingerprint of ``goal_id`` now."""
    return combine(state_part(state, goal_id, overrides), git_part(project_dir))
