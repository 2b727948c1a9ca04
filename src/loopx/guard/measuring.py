"""What the pre-tool guard protects for research experiments (issue 20): the measuring.

``protected(state, project_dir) -> {relative path: why}``: for every experiment goal, the files
its measure, guard and holdout commands run (the script paths named in the commands that exist
in the project), the ``--protect-path`` files and the ``--holdout-path`` data. They are governance
paths: an agent's edit or shell write to them is denied whatever the goal's scope, in the main
checkout and in every worktree under ``.loopx/worktrees/`` (where the trials are made).
``check(state, written, reads, commands, cwd, project_dir) -> deny verdict | {}``: the guard's one
call; ``written`` are ``(path, how)`` pairs, ``reads`` paths a file tool reads. Holdout data is
also denied to reads: a file tool that reads it, and a shell command that names it.
"""

from __future__ import annotations

import os
import shlex

from loopx import config
from loopx.guard import shell
from loopx.kernel.read import scope, worktrees
from loopx.kernel.storage import layout


def _script_paths(command: str | None, project_dir: str) -> list[str]:
    if not command:
        return []

    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out = []
    for w in words:
        if w.startswith("-"):
            continue
        p = os.path.normpath(w)
        if p.startswith("..") or os.path.isabs(p):
            continue
        if os.path.isfile(os.path.join(project_dir, p)):
            out.append(p.replace(os.sep, "/"))
    return out


def measure_files(e: dict, project_dir: str) -> list[str]:
    """The files one experiment's measuring reads that the project holds: the measure and guard
    commands' scripts and the ``--protect-path`` files (the holdout is run only at promotion)."""
    out = [p for key in ("measure", "guard") for p in _script_paths(e.get(key), project_dir)]
    return list(dict.fromkeys(out + list(e.get("protect") or ())))


def protected(state: dict, project_dir: str) -> dict:
    out: dict[str, str] = {}
    for gid, e in (state.get("experiments") or {}).items():
        if (state["goals"].get(gid) or {}).get("status") in ("done", "stopped"):
            continue
        for key in ("measure", "guard", "holdout"):
            for p in _script_paths(e.get(key), project_dir):
                out.setdefault(p, f"the {key} command of experiment {gid}")
        for p in e.get("protect") or ():
            out.setdefault(p, f"a file experiment {gid} measures with (--protect-path)")
        for p in e.get("holdout_paths") or ():
            out[p] = f"the holdout data of experiment {gid}"
    return out


def holdout(state: dict) -> dict:
    return {p: gid for gid, e in (state.get("experiments") or {}).items()
            if (state["goals"].get(gid) or {}).get("status") not in ("done", "stopped")
            for p in e.get("holdout_paths") or ()}


def _rel(path: str, cwd: str | None, project_dir: str) -> str:
    rel = scope.project_relative(project_dir, path, cwd or project_dir)
    if rel.startswith(".loopx/" + worktrees.DIRNAME + "/"):
        rel = worktrees.strip(rel, worktrees.prefix(project_dir))
    return rel


def _hit(rel: str, table: dict, *, containing: bool = False) -> str | None:
    for p in table:
        if rel == p or rel.startswith(p + "/") or (containing and (rel in (".", "") or p.startswith(rel.rstrip("/") + "/"))):
            return p
    return None


def check(state: dict, written, reads, commands, cwd: str | None, project_dir: str, *, read_only=frozenset(),
          matches=lambda word, base: [word]) -> dict:
    """``read_only``: programs that write nothing they name; ``matches(word, base)``: the paths a
    shell word names (the guard's own, passed in so this module does not import the guard)."""
    if not state.get("experiments"):
        return {}
    table = protected(state, project_dir)
    if not table:
        return {}
    denied = _check_writes(written, cwd, project_dir, table)
    if denied:
        return denied
    hold = holdout(state)
    results = _results_dir() if any(e.get("holdout") for e in state["experiments"].values()) else None
    return (_check_reads(reads or (), cwd, project_dir, hold, results)
            or (_check_commands(state, commands, cwd, project_dir, table, hold, results, read_only, matches)
                if commands else {}))


def _check_writes(written, cwd: str | None, project_dir: str, table: dict) -> dict:
    for path, how in written:
        rel = _rel(path, cwd, project_dir)
        p = _hit(rel, table)
        if p:
            return {"allow": False, "kind": "governance", "path": rel, "reason": (
                f"loopx: {rel} is {table[p]}; an agent may not change how trials are measured "
                f"({'through ' + how if how != 'edit' else 'edit'} denied). Change the code under test instead.")}
    return {}


def _check_reads(reads, cwd: str | None, project_dir: str, hold: dict, results: str | None) -> dict:
    for path in reads:
        if results and _under(path, cwd, results):
            return _read_deny(path, "a promotion's holdout result", "(any)")
        rel = _rel(path, cwd, project_dir)
        p = _hit(rel, hold, containing=True)
        if p:
            return _read_deny(rel, p, hold[p])
    return {}


def _check_commands(state: dict, commands, cwd: str | None, project_dir: str, table: dict, hold: dict,
                    results: str | None, read_only, matches) -> dict:
    hold = dict(hold)  # running the holdout command's script shows its numbers: named in a command, it is denied
    for gid, e in (state.get("experiments") or {}).items():
        for p in _script_paths(e.get("holdout"), project_dir):
            hold.setdefault(p, gid)
    for command in commands:
        for s in shell.commands(command, cwd=cwd):
            base = s.cwd if s.cwd and not str(s.cwd).startswith(shell.UNKNOWN) else cwd
            writer = s.words[0] not in read_only  # a program that may write what it names
            for w in s.words[1:]:
                if w.startswith("-") or (shell.is_unknown(w) and not shell.is_pattern(w)):
                    continue
                if results and _under(w.replace(shell.UNKNOWN, ""), base, results):
                    return _read_deny(w, "a promotion's holdout result", "(any)")
                hit = _named(s.words[0], matches(w, base), base, project_dir, table if writer else {}, hold)
                if hit:
                    return hit
    return {}


def _named(prog: str, paths, base: str | None, project_dir: str, table: dict, hold: dict) -> dict:
    """The deny for a shell word naming ``paths``: holdout data (any program), or a protected file
    of the measuring (``table``: empty for a program that writes nothing it names)."""
    for m in paths:
        rel = _rel(m, base, project_dir)
        p = _hit(rel, hold)
        if p:
            return _read_deny(rel, p, hold[p])
        p = _hit(rel, table)
        if p:
            return {"allow": False, "kind": "governance", "path": rel, "reason": (
                f"loopx: `{prog}` names {rel}, {table[p]}; an agent may not change how trials "
                "are measured. Change the code under test instead.")}
    return {}


def _results_dir() -> str:
    """Where promotions keep the holdout's result for the human (trialstep.holdout_file)."""
    return os.path.realpath(os.path.join(config.data_home(), layout.HOLDOUT))


def _under(path: str, cwd: str | None, folder: str) -> bool:
    full = os.path.realpath(os.path.join(cwd or ".", os.path.expanduser(path)))
    return full == folder or full.startswith(folder + os.sep) or folder.startswith(full.rstrip(os.sep) + os.sep + "holdout")


def _read_deny(rel: str, p: str, gid: str) -> dict:
    return {"allow": False, "kind": "governance", "path": rel, "reason": (
        f"loopx: {p} belongs to the holdout of experiment {gid}; the agent never reads or runs it (only loopx "
        "runs the holdout command, at promotion, for a human). Work with the dev data.")}
