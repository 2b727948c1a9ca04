"""Scope after every turn (issue 21): which files a turn changed outside its goal's scope.

Whatever ran the turn (a host preset, ``--agent-cmd``, an agent working through ``next`` by
hand), ``start(project_dir, scope)`` is taken when the run opens and ``outside(project_dir,
scope, start)`` when it is recorded; ``turn.finish`` writes the result on ``run.finished`` as
``out_of_scope`` and such a turn is never a verified completion.

``start(...) -> {"head": sha | None, "dirty": {path: "size:mtime_ns"}} | None`` (None: not a git
work tree, or the goal has no allow or deny list, so nothing is checked). ``dirty`` holds the
project-relative paths that were already changed (or untracked) outside the scope when the run
opened, so a file a human left dirty is not blamed on the agent unless the turn touched it again.

``outside(...) -> [path, ...]`` (project-relative, sorted, at most ``LIMIT``): files committed,
changed or created since ``start`` that ``loopx.kernel.read.scope.check`` puts outside the scope
(paths under ``.loopx/`` are loopx's own and never listed). Git failures give ``[]``.
"""

from __future__ import annotations

import os

from loopx.kernel.storage import layout

LIMIT = 50
GIT_TIMEOUT = 30


def _git(cwd: str, *args: str) -> str | None:
    """What ``git --no-optional-locks ARGS`` prints in ``cwd``, or None when it fails. Started with
    ``os.posix_spawnp`` where there is one (``next`` opens a run on the hot path: no ``subprocess``
    import), else through ``subprocess``."""
    from loopx.kernel.storage import gitcli

    # pinned: the folder's own git dirs (a run's worktree: its own), whatever GIT_DIR a sandboxed
    # run pinned for the process
    out = gitcli.output(cwd, "--no-optional-locks", *args, timeout=GIT_TIMEOUT, pinned=True)
    return out.decode("utf-8", "replace") if out is not None else None


def _head_and_top(project_dir: str) -> tuple[str | None, str] | None:
    """(HEAD's sha or None on an unborn branch, the work tree's top) from git's files
    (``gitrefs``), or from git itself where that reader defers."""
    from loopx.kernel.read import gitrefs
    from loopx.kernel.storage import gitcli

    dot_git = gitcli.git_dir(project_dir)
    if dot_git is None:
        return None
    known = None if os.environ.get("GIT_DIR") else gitrefs.facts(dot_git, lazy=True)  # pinned: ask git (with _git's env)
    if known is not None and not _checked(project_dir, known[3][0]) and known[1]() is None:
        known = None  # packed-refs holds what only git reads
    if known is not None:
        return (known[0].decode("ascii") or None), known[2]
    top = (_git(project_dir, "rev-parse", "--show-toplevel") or "").strip()
    if not top:
        return None
    return ((_git(project_dir, "rev-parse", "-q", "--verify", "HEAD") or "").strip() or None), top


def _checked(project_dir: str, packed: tuple) -> bool:
    """Whether the ``packed-refs`` of stat key ``packed`` is known to be one ``gitrefs`` takes whole
    without reading it again: a big one the fingerprint's kept git part vouches for (``gitmemo``)."""
    from loopx.kernel.read import fingerprint

    if not fingerprint.big_packed(packed):
        return False  # small (or none): checking it costs less than the memo's file
    from loopx.kernel.read import gitmemo

    return gitmemo.checked(project_dir, packed)


def checked(scope: dict | None) -> bool:
    """True when the scope limits anything (an allow or deny list)."""
    return bool(scope and (scope.get("allow") or scope.get("deny")))


def _changed(project_dir: str, head: str | None, listing: bytes | None = None,
             known: tuple[str | None, str] | None = None) -> tuple[str, list[str]] | None:
    """(repository top, top-relative paths changed since ``head``: committed, modified, untracked).
    ``listing``: a ``git status`` of this moment with untracked folders collapsed
    (``fingerprint.git_facts``), used instead of starting another ``git status``; ``known``:
    ``_head_and_top`` of this moment when the caller has it."""
    known = known or _head_and_top(project_dir)
    if known is None:
        return None
    top = known[1]
    paths: set[str] = set()
    if head and head != known[0]:  # committed since the run opened (an unmoved HEAD needs no diff)
        out = _git(project_dir, "diff", "--name-only", "-z", head, "--", ":/")
        if out is None:
            return None
        paths.update(p for p in out.split("\0") if p)
    st = _listed(project_dir, top, listing) if listing is not None else None
    if st is None:
        st = _git(project_dir, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ":/")
    if st is None:
        return None
    for entry in st.split("\0"):
        if len(entry) >= 4 and entry[2] == " ":
            paths.add(entry[3:])
    return top, sorted(paths)


def _listed(project_dir: str, top: str, listing: bytes) -> str | None:
    """``listing`` as ``git status --untracked-files=all`` would print it: a folder git collapsed
    (``?? dir/``, wholly untracked) is listed file by file by one more ``git status`` on those
    folders only; loopx's own folders are left collapsed (never checked). None when git fails."""
    text = listing.decode("utf-8", "replace")
    folders = [e[3:] for e in text.split("\0") if e.startswith("?? ") and e.endswith("/")
               and not _own(_rel(project_dir, top, e[3:].rstrip("/")))]
    if not folders:
        return text
    more = _git(project_dir, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--",
                *(f":(top,literal){f}" for f in folders))
    if more is None:
        return None
    return "\0".join(e for e in text.split("\0") if e[3:] not in folders) + "\0" + more


def _own(rel: str) -> bool:
    """True for a project-relative path under ``.loopx/`` (loopx's own files, never checked)."""
    return rel == layout.DIRNAME or rel.startswith(layout.DIRNAME + "/") or "/" + layout.DIRNAME + "/" in f"/{rel}"


def _rel(project_dir: str, top: str, path: str) -> str:
    rel = os.path.relpath(os.path.join(top, path), os.path.realpath(project_dir))
    return rel.replace(os.sep, "/")


def _stamp(top: str, path: str) -> str:
    try:
        s = os.stat(os.path.join(top, path))
        return f"{s.st_size}:{s.st_mtime_ns}"
    except OSError:
        return "gone"


def _outside_paths(project_dir: str, scope: dict, head: str | None, listing: bytes | None = None,
                   known: tuple[str | None, str] | None = None) -> list[tuple[str, str]] | None:
    from loopx.kernel.read import scope as sc

    got = _changed(project_dir, head, listing, known)
    if got is None:
        return None
    top, paths = got
    out = []
    for p in paths:
        rel = _rel(project_dir, top, p)
        if _own(rel):
            continue
        if not sc.check(scope, rel)["inside"]:
            out.append((rel, _stamp(top, p)))
    return out


def start(project_dir: str | None, scope: dict | None, listing: bytes | None = None) -> dict | None:
    """What the run starts from (module docstring); None when nothing is checked. ``listing``: a
    ``git status`` of ``project_dir`` taken moments ago (``fingerprint.git_facts``), reused."""
    if not project_dir or not checked(scope):
        return None
    known = _head_and_top(project_dir)  # None: not a git work tree
    if known is None:
        return None
    head = known[0]
    dirty = _outside_paths(project_dir, scope or {}, None, listing, known) or []
    return {"head": head, "dirty": dict(dirty[:200])}


def outside(project_dir: str | None, scope: dict | None, begun: dict | None,
            listing: bytes | None = None) -> list[str]:
    """The files the turn changed outside ``scope`` since ``begun`` (module docstring); ``listing``
    as for ``start``."""
    if not project_dir or not begun or not checked(scope):
        return []
    found = _outside_paths(project_dir, scope or {}, begun.get("head"), listing) or []
    before = begun.get("dirty") or {}
    return sorted(rel for rel, stamp in found if before.get(rel) != stamp)[:LIMIT]
