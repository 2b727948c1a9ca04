"""Scope matching: is a path inside a goal's allowed globs and outside its denied ones?

Globs are project-relative with ``/`` separators; ``**`` matches any number of directories,
``*`` and ``?`` stay within one path segment. A path outside the project is always outside scope.
"""

from __future__ import annotations

import os

from loopx.kernel.storage import layout

_COMPILED: dict = {}  # glob -> compiled pattern; `re` is imported on the first glob, not at start-up


def _compile(glob: str):
    pat = _COMPILED.get(glob)
    if pat is None:
        if len(_COMPILED) > 256:
            _COMPILED.clear()
        pat = _COMPILED[glob] = _translate(glob)
    return pat


def _translate(glob: str):
    import re

    g = glob.strip()
    if g.startswith("./"):
        g = g[2:]
    if g.endswith("/"):
        g += "**"
    out, i = [], 0
    while i < len(g):
        c = g[i]
        if g.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif g.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(glob: str, rel: str) -> bool:
    """True when project-relative ``rel`` matches ``glob`` (a directory glob also covers its contents)."""
    if _compile(glob).match(rel):
        return True
    if not any(c in glob for c in "*?"):  # a plain directory name covers what is inside it
        return rel.startswith(glob.strip().removeprefix("./").rstrip("/") + "/")
    return False


def project_relative(project_dir: str, path: str, cwd: str) -> str:
    """``path`` (absolute, or relative to ``cwd``) as a ``/``-separated path relative to the project.
    Paths outside the project come back starting with ``../``."""
    full = os.path.realpath(os.path.join(cwd, path))
    try:
        rel = os.path.relpath(full, os.path.realpath(project_dir))
    except ValueError:  # another drive on Windows
        return "../" + path
    return rel.replace(os.sep, "/")


def check(scope: dict, rel: str) -> dict:
    """``{"inside": bool, "reason": str}`` for a project-relative path."""
    if rel == ".." or rel.startswith("../"):
        return {"inside": False, "reason": "outside the project"}
    if rel.startswith(layout.DIRNAME + "/") or rel == layout.DIRNAME:
        return {"inside": False, "reason": "loopx's own store is never in scope"}
    for g in scope.get("deny") or []:
        if matches(g, rel):
            return {"inside": False, "reason": f"denied by {g}"}
    allow = scope.get("allow") or []
    if not allow:
        return {"inside": True, "reason": "no allow list: the whole project"}
    for g in allow:
        if matches(g, rel):
            return {"inside": True, "reason": f"allowed by {g}"}
    return {"inside": False, "reason": "matches no allowed glob"}
