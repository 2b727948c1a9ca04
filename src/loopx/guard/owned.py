"""What loopx installed for the agent hosts, as governance paths of the guard (issue 23).

Read from the host table (``loopx.hostfacts``), never a copy of it:

- whole files loopx owns outright in either scope (hook settings, plugins, extensions, the Cursor
  rule, the Gemini command) and host settings that can switch loopx's hooks off: any write,
  deletion or move is governance (human-only);
- loopx's own skill folders (``<skills>/loopx``, ``<skills>/loopx-*``): the same; the user's other
  skills stay the agent's to edit;
- instruction files with loopx's marked block (AGENTS.md, CLAUDE.md, GEMINI.md, ...): the text
  around the block stays editable; a change that removes or alters the block is denied. An edit
  tool's own text says what it removes (``old_string``, a patch's ``-`` lines, a whole new
  ``content``); a shell command that writes such a file cannot say, so it is denied while the
  file holds a block.
"""

from __future__ import annotations

import os

from loopx import hostfacts

BEGIN = "<!-- loopx:begin"
END = "<!-- loopx:end -->"
_cache: dict = {}
_names_cache: dict = {}


def _roots(project_dir: str) -> tuple[str, str]:
    return os.path.realpath(project_dir), os.path.realpath(os.path.expanduser("~"))


def targets(project_dir: str) -> dict:
    """``{"files": set, "skills": [dir], "blocks": set}`` of absolute real paths for the project
    and the user's home (both scopes), from the host table. Cached per process and environment."""
    proj, home = _roots(project_dir)
    key = (proj, home, *(os.environ.get(v) or "" for v in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR",
                                                            "XDG_CONFIG_HOME")), tuple(hostfacts.HOSTS))
    hit = _cache.get(key)
    if hit is not None:
        return hit
    files: set[str] = set()
    skills: list[str] = []
    blocks: set[str] = set()
    for scope, root in (("project", proj), ("user", home)):
        files.update(_real(p) for p in hostfacts.owned_files(scope, root, all_homes=True))
        skills.extend(_real(p) for p in hostfacts.skill_dirs(scope, root, all_homes=True))
        blocks.update(_real(p) for p in hostfacts.block_files(scope, root, all_homes=True))
    out = {"files": files, "skills": sorted(set(skills)), "blocks": blocks}
    _cache.clear()
    _cache[key] = out
    return out


def _real(path: str) -> str:
    # the folder may not exist yet (a host not installed): resolve the part that does
    return os.path.realpath(path)


def _is_loopx_skill(name: str) -> bool:
    return name == hostfacts.SKILL_PREFIX or name.startswith(hostfacts.SKILL_PREFIX + "-")


def owned(full: str, t: dict) -> str | None:
    """What ``full`` (a real absolute path) is when it is, or holds, a file loopx owns outright;
    else None."""
    prefix = full.rstrip(os.sep) + os.sep
    for f in t["files"]:
        if f == full or f.startswith(prefix):
            return "an agent host's hook configuration or loopx's installed hook file (removing or changing " \
                   "loopx's hooks is human-only)"
    for d in t["skills"]:
        if full.startswith(d + os.sep):
            first = full[len(d) + 1:].split(os.sep, 1)[0]
            if _is_loopx_skill(first):
                return "a skill loopx installed (loopx's own skills are human-only; your other skills are yours)"
        elif d == full or d.startswith(prefix):
            try:
                names = os.listdir(d)
            except OSError:
                continue
            if any(_is_loopx_skill(n) for n in names):
                return "a folder holding the skills loopx installed (loopx's own skills are human-only)"
    return None


def block_region(path: str) -> str | None:
    """loopx's marked block in ``path`` (begin marker through end marker), None when it has none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return None
    i = text.find(BEGIN)
    if i < 0:
        return None
    j = text.find(END, i)
    return text[i:j + len(END)] if j >= 0 else text[i:]


def block_change(full: str, t: dict, how: str, texts: dict | None) -> str | None:
    """Why writing ``full`` changes loopx's marked block, or None (not a block file, no block in
    it, or an edit that leaves the block alone). ``how``: ``edit`` for an edit tool (judged by
    ``texts``: ``{"removed": [str], "content": [str], "deleted": bool}``), anything else a shell
    write (denied while the file holds a block)."""
    if full not in t["blocks"]:
        return None
    region = block_region(full)
    if region is None:
        return None
    if how != "edit":
        return (f"loopx keeps a marked block in {full}; a shell command that writes the file could change it. "
                "Use your edit tool, and leave the lines between the loopx markers alone")
    texts = texts or {}
    if texts.get("deleted"):
        return f"deleting {full} removes loopx's marked block"
    lines = {ln.strip() for ln in region.splitlines() if ln.strip()}
    for old in texts.get("removed") or []:
        if BEGIN in old or END in old or any(ln.strip() in lines for ln in old.splitlines() if ln.strip()):
            return f"this edit changes lines of loopx's marked block in {full}"
    contents = texts.get("content") or []
    if contents and not all(region in c for c in contents):
        return f"writing {full} whole without loopx's marked block (unchanged) removes it"
    if not contents and not texts.get("removed"):
        return f"loopx cannot see what this edit of {full} changes, and the file holds loopx's marked block"
    return None


def names() -> frozenset:
    """Every path component of the files and folders above (project-relative table paths and the
    instruction files' names): a shell word with one of them may name an owned path, so the
    guard resolves it."""
    key = ("names", tuple(hostfacts.HOSTS))
    hit = _names_cache.get(key)
    if hit is not None:
        return hit

    out = {"loopx", hostfacts.SKILL_PREFIX}
    for r in hostfacts.HOSTS.values():
        for t in [r["hooks"]["project"], r["hooks"]["user"], r["skills"]["project"], r["skills"]["user"],
                  r["doc"]["project"], r["doc"]["user"], *r["config"]["project"], *r["config"]["user"],
                  *(p for _, paths in r["extra"] for p in paths.values())]:
            if t:
                out.update(c for c in t.split("/") if c and not c.startswith("{") and c != "~")
    res = frozenset(out)
    _names_cache.clear()
    _names_cache[key] = res
    return res


def may_name(word: str) -> bool:
    """True when shell word ``word`` may name an owned path (see ``names``)."""
    parts = [p for p in word.replace("\\", "/").split("/") if p]
    ns = names()
    return any(p in ns or "loopx" in p for p in parts)


def patch_texts(body: str) -> dict:
    """``{"removed", "content", "deleted"}`` of an ``apply_patch`` body: its ``-`` lines (every file
    of the patch: a removed line equal to a block line is enough to refuse), ``deleted`` when it
    deletes a file."""
    body = body.replace("\\n", "\n")
    removed = [ln[1:] for ln in body.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    return {"removed": ["\n".join(removed)] if removed else [], "content": [],
            "deleted": "*** Delete File:" in body, "patch": True}
