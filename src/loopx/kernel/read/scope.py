"""Scope matching: is a path inside a goal's allowed globs and outside its denied ones?

Globs are project-relative with ``/`` separators; ``**`` matches any number of directories,
``*`` and ``?`` stay within one path segment. A path outside the project is always outside scope.
"""

from __future__ import annotations

import os

from loopx.kernel.storage import layout

# A glob is matched by hand, not by a compiled pattern: `re` and the modules it imports (enum,
# functools, collections) cost a fresh process about half of a bare interpreter's start, and the
# scope of every `next` and `turn finish` in a git work tree with a changed file is checked here.
# The semantics are those of this translation to a regular expression, matched in full (the test
# suite checks the two agree on random globs and paths):
#   "**/" -> (?:.*/)?    any number of whole directories, none included
#   "**"  -> .*          anything, "/" included
#   "*"   -> [^/]*       within one path segment
#   "?"   -> [^/]        one character of a segment
#   anything else        itself
# (like "." in a pattern, the "**" forms do not run across a line break).
_STAR, _ONE, _ANY, _DIRS = 0, 1, 2, 3
_PARSED: dict = {}  # glob -> its tokens


def _tokens(glob: str) -> tuple:
    """``glob`` as a tuple of literal strings and the wildcard codes above."""
    toks = _PARSED.get(glob)
    if toks is not None:
        return toks
    g = glob.strip()
    if g.startswith("./"):
        g = g[2:]
    if g.endswith("/"):
        g += "**"
    out: list = []
    i = 0
    while i < len(g):
        if g.startswith("**/", i):
            out.append(_DIRS)
            i += 3
        elif g.startswith("**", i):
            out.append(_ANY)
            i += 2
        elif g[i] in "*?":
            out.append(_STAR if g[i] == "*" else _ONE)
            i += 1
        else:
            j = i
            while j < len(g) and g[j] not in "*?":
                j += 1
            out.append(g[i:j])
            i = j
    if len(_PARSED) > 256:
        _PARSED.clear()
    toks = _PARSED[glob] = tuple(out)
    return toks


def _match(toks: tuple, s: str) -> bool:
    """Whether ``toks`` matches all of ``s``: the set of positions in ``s`` each token can end at,
    token by token (no recursion and no backtracking: any glob a scope may hold, against any path,
    in time proportional to their lengths' product)."""
    here = {0}
    for t in toks:
        if t.__class__ is str:
            here = {p + len(t) for p in here if s.startswith(t, p)}
        elif t == _ONE:
            here = {p + 1 for p in here if p < len(s) and s[p] != "/"}
        else:
            here = _spread(t, sorted(here), s)
        if not here:
            return False
    return len(s) in here


def _spread(t: int, starts: list[int], s: str) -> set[int]:
    """Where wildcard ``t`` can end from any of ``starts`` (ascending): ``*`` anywhere up to the
    next ``/``, ``**`` up to the next line break, ``**/`` right there or just after any ``/`` before
    the next line break. Each character is looked at once (``done``: the positions already covered)."""
    out: set[int] = set()
    done = 0
    for p in starts:
        stop = s.find("/" if t == _STAR else "\n", p)
        stop = len(s) if stop < 0 else stop
        if t == _DIRS:
            out.add(p)
            out.update(j + 1 for j in range(max(p, done), stop) if s[j] == "/")
        else:
            out.update(range(max(p, done), stop + 1))
        done = max(done, stop)
    return out


def matches(glob: str, rel: str) -> bool:
    """True when project-relative ``rel`` matches ``glob`` (a directory glob also covers its contents)."""
    if _match(_tokens(glob), rel):
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
