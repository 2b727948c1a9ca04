"""Guarded wherever the host runs (issue 23): what ``loopx run`` gives the host besides the packet.

- ``copy_hooks(project_dir, cwd)``: a parallel run's worktree gets the project's installed hook
  files, plugins and loopx skills (the host table's project-scope files, ``loopx.hostfacts``):
  they are untracked, so ``git worktree add`` leaves them out and the host would run unguarded.
- ``env_for(host, cwd)``: ``PWD`` and the host's own project-folder variable (OpenCode and Pi
  work in ``$PWD``; Claude Code reads ``CLAUDE_PROJECT_DIR``).
- ``guard_calls(project_dir, run_id)``: how many times the host's pre-tool hook called loopx's
  guard during the run (``loopx hook pre-tool`` counts them while ``LOOPX_RUN_ID`` is set, one
  byte appended per call, so concurrent hooks never lose one); a
  turn with none ran unguarded.
"""

from __future__ import annotations

import os
import shutil

from loopx import hostfacts
from loopx.kernel.storage import layout


def copy_hooks(project_dir: str, cwd: str, host: str | None = None) -> list[str]:
    """Copy every project-scope file loopx installed (for ``host``, default every host) that
    exists in ``project_dir`` but not in ``cwd``; returns the copied paths relative to the
    project. Never raises: a file that cannot be copied is skipped (the turn's guard count shows
    the result)."""
    hosts = [host] if host in hostfacts.HOSTS else hostfacts.names()
    rels: list[str] = []
    for h in hosts:
        paths = [hostfacts.hook_file(h, "project", project_dir),
                 *(p for _, p in hostfacts.extra_files(h, "project", project_dir)),
                 *(hostfacts.resolve(h, t, "project", project_dir) for t in hostfacts.HOSTS[h]["config"]["project"])]
        skills = hostfacts.skills_dir(h, "project", project_dir)
        try:
            paths += [os.path.join(skills, n) for n in os.listdir(skills)
                      if n == hostfacts.SKILL_PREFIX or n.startswith(hostfacts.SKILL_PREFIX + "-")]
        except OSError:
            pass
        for p in paths:
            if p and os.path.exists(p):
                rel = os.path.relpath(p, project_dir)
                if not rel.startswith("..") and rel not in rels:
                    rels.append(rel)
    done = []
    for rel in rels:
        src, dst = os.path.join(project_dir, rel), os.path.join(cwd, rel)
        if os.path.exists(dst):
            continue
        try:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.isdir(src):
                shutil.copytree(src, dst)
            else:
                shutil.copy2(src, dst)
            done.append(rel)
        except OSError:
            continue
    return done


def env_for(host: str | None, cwd: str) -> dict:
    """``{"PWD": cwd, <the host's project-folder variable>: cwd}``."""
    out = {"PWD": cwd}
    var = (hostfacts.HOSTS.get(host or "") or {}).get("project_dir_var")
    if var:
        out[var] = cwd
    return out


def counter_path(project_dir: str, run_id: str) -> str:
    return layout.project_path(project_dir, layout.guard_calls(run_id))


def guard_calls(project_dir: str, run_id: str) -> tuple[int, int]:
    """``(calls, refusals)`` the guard counted for ``run_id`` (0, 0 when none), and forget them."""
    path = counter_path(project_dir, run_id)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        os.remove(path)
    except OSError:
        return 0, 0
    return data.count(b"."), data.count(b"x")
