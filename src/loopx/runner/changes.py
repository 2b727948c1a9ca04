"""What a turn changed in a git work tree: commits made during the run and a diff stat.

``head(project_dir) -> str | None`` is the commit checked out before the turn (None outside git or
in a repository without commits). ``measure(project_dir, before) -> dict | None``::

    {"commits": [sha, ...] (made since ``before``, newest first, at most 20), "commit_count": int,
     "files": int, "added": int, "removed": int (lines, tracked files, committed and not),
     "untracked": int (new files git does not track yet), "committed": bool (work tree clean)}

None outside git. Git failures give None, never an exception.
"""

from __future__ import annotations

from loopx.kernel.storage import gitcli


def _git(cwd: str, *args: str) -> str | None:
    out = gitcli.output(cwd, *args, timeout=30, pinned=True)  # an agent's worktree never picks loopx's git dir
    return out.decode("utf-8", "replace") if out is not None else None


def head(project_dir: str) -> str | None:
    out = _git(project_dir, "rev-parse", "--verify", "-q", "HEAD")
    return out.strip() or None if out else None


def measure(project_dir: str, before: str | None) -> dict | None:
    if _git(project_dir, "rev-parse", "--is-inside-work-tree") is None:
        return None
    now = head(project_dir)
    commits: list[str] = []
    if before and now and now != before:
        out = _git(project_dir, "rev-list", f"{before}..{now}")
        commits = out.split() if out else []
    base = before or now
    files = added = removed = 0
    if base:
        out = _git(project_dir, "diff", "--numstat", base, "--") or ""
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            files += 1
            added += int(parts[0]) if parts[0].isdigit() else 0
            removed += int(parts[1]) if parts[1].isdigit() else 0
    status = _git(project_dir, "status", "--porcelain", "--untracked-files=all") or ""
    untracked = sum(1 for ln in status.splitlines() if ln.startswith("??"))
    dirty = any(ln and not ln.startswith("??") for ln in status.splitlines())
    return {"commits": commits[:20], "commit_count": len(commits), "files": files, "added": added,
            "removed": removed, "untracked": untracked, "committed": not dirty and not untracked}
