"""The pre-tool guard: which shell commands and file edits are protected actions of a goal.

A command is read into simple commands by ``guard/shell.py`` (a POSIX shell reader: compound
commands, substitutions, variables, here-documents, script files, wrappers such as ``sudo``,
``env``, ``setsid``, ``flock``, ``script``, ``watch``, ``strace``, ``python -m``); each simple
command is then mapped to a gate kind (``validate.GATE_KINDS``) by the goal's own rules first,
then by the default table ``guard/rules.py``. A goal's rules live in its ``guard`` config
(``guard.set`` event): ``{"rules": [{"kind", "command"|"path"}], "branches": [...], "defaults": bool}``
where ``command`` is an fnmatch pattern over the normalised command (``git push * release/*``),
``path`` a scope glob over project-relative edit paths, and kind ``none`` exempts a match.

Beyond gate kinds, ``evaluate`` denies (kind ``governance``) human-only loopx commands, stripping
agent markers before loopx, and writes to hook configs or loopx's user files, whatever the goal;
and it fails closed (``unresolved``) on what it cannot read when the goal protects it.

Everything here is pure except the read-only ``git`` lookups (``gitpush.Git``), reading script
files a command runs, and ``set_config``.
"""

from __future__ import annotations

import os

from loopx.errors import UsageError
from loopx.guard.rules import DEFAULT_BRANCHES, LazyGit, judge
from loopx.kernel.read import approvals, queries, scope, validate, worktrees
from loopx.kernel.storage.fs import open_file
from loopx.kernel.storage.store import Draft, Store

RULE_KINDS = (*validate.GATE_KINDS, "none")


# ------------------------------------------------------------------ per-goal evaluation
def config(goal: dict | None) -> dict:
    """The goal's effective guard config (defaults filled in)."""
    g = (goal or {}).get("guard") or {}
    return {"rules": list(g.get("rules") or []), "branches": list(g.get("branches") or DEFAULT_BRANCHES),
            "defaults": g.get("defaults", True) is not False}


_READ_ONLY = {"cat", "ls", "grep", "rg", "head", "tail", "less", "more", "wc", "jq", "stat", "file", "du", "diff",
              "sha256sum", "md5sum", "echo", "printf", "test", "[", "realpath", "readlink", "tree", "bat", "git", "loopx"}
_LINKERS = {"ln", "link", "cp", "rsync"}
_GOVERNANCE_NAMES = {"settings.json", "settings.local.json", "hooks.json", "config.toml", "config.parsed",
                     "allowed_signers", "signing-log.jsonl", "projects.json", ".claude", ".codex", ".cursor"}


def command_kinds(command: str, cfg: dict, *, cwd: str | None = None, branch_of=None, git=None) -> list[dict]:
    """``[{"kind", "command", "rule", "unresolved"}]`` for every simple command of ``command`` that
    maps to a kind (``unresolved``: why the mapping is a guess; ``kind`` ``*`` = any protected
    kind, for a script loopx cannot read)."""
    from loopx.guard import shell

    git = git or LazyGit(branch_of)
    hits = []
    for s in shell.commands(command, cwd=cwd):
        line = s.text
        if s.opaque:
            hits.append({"kind": "*", "command": line, "rule": "default", "unresolved": s.opaque})
            continue
        if shell.is_unknown(s.words[0]) and all(shell.is_unknown(a) for a in s.words[1:]):
            hits.append({"kind": "*", "command": line, "rule": "default",
                         "unresolved": "the whole command comes from values loopx cannot see"})
            continue
        kind, rule, why = None, None, None
        for r in cfg["rules"]:
            if r.get("command") and _fnmatchcase(line, r["command"]):
                kind, rule = r["kind"], r["command"]
                break
        if rule is None and cfg["defaults"]:
            kind, why = judge(s.words, branches=cfg["branches"], cwd=s.cwd, git=git, env=s.env)
            rule = "default"
        if kind and kind != "none":
            hits.append({"kind": kind, "command": line, "rule": rule, "unresolved": why})
        elif why and kind != "none":
            hits.append({"kind": "merge", "command": line, "rule": rule, "unresolved": why})
    return hits


def _fnmatchcase(name: str, pattern: str) -> bool:
    from fnmatch import fnmatchcase  # imports re: only a project with command rules pays for it

    return fnmatchcase(name, pattern)


def _governance(command: str, cwd: str | None) -> dict:
    """Deny an agent command that runs a human-only loopx command or strips agent markers."""
    from loopx.guard import shell
    from loopx.kernel import humans

    for s in shell.commands(command, cwd=cwd):
        words = s.words
        as_loopx = humans.agent_command_violation(["loopx", *words[1:]], ()) if shell.is_unknown(words[0]) else None
        if as_loopx:
            return {"allow": False, "kind": "governance", "command": s.text, "reason": as_loopx.replace(
                "loopx: ", "loopx: the program name cannot be known and as loopx ", 1)}
        why = humans.agent_command_violation(words, s.stripped)
        if why is None and "loopx" in command.lower():
            # markers stripped for a program that is not loopx itself but whose text names it
            # (`env -i python -c "from loopx.cli import main; ..."`)
            why = humans.agent_command_violation(["loopx"], s.stripped)
        if why:
            return {"allow": False, "kind": "governance", "command": s.text, "reason": why}
    return {}


def _shell_writes(command: str, cwd: str | None) -> list[tuple[str, str]]:
    """``[(path, how)]`` files a shell command writes that the guard checks like edits: files named
    in an ``apply_patch`` body (Codex sends it through its shell tool), output redirections,
    arguments of programs that are not read-only when they name ``.loopx``, and the sources of hard
    links and copies-as-links (``ln``, ``link``, ``cp -l``)."""
    from loopx.guard import shell

    out = _patch_files(command, cwd)
    for s in shell.commands(command, cwd=cwd):
        base = s.cwd if s.cwd and not str(s.cwd).startswith(shell.UNKNOWN) else cwd
        for w in s.writes:
            if not shell.is_unknown(w):
                for p in _matches(w, base):
                    out.append((os.path.join(base or ".", os.path.expanduser(p)), "redirect"))
        prog, args = s.words[0], s.words[1:]
        if prog not in _READ_ONLY:
            out.extend(_named_writes(prog, args, base))
        if prog in _LINKERS:
            out.extend(_link_sources(prog, args, base))
    return out


def _patch_files(command: str, cwd: str | None) -> list[tuple[str, str]]:
    """The files an ``apply_patch`` body in ``command`` adds, updates, deletes or moves to."""
    if "*** Begin Patch" not in command and "*** Update File:" not in command and "*** Add File:" not in command:
        return []
    import re

    return [(os.path.join(cwd or ".", (a or b).strip("'\"")), "apply_patch")
            for a, b in re.findall(r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$",
                                   command.replace("\\n", "\n"), re.M)]


def _named_writes(prog: str, args: list[str], base: str | None) -> list[tuple[str, str]]:
    """What the arguments of a program that may write name: the store (``how`` = the program) and
    hook configs or files loopx installed (``governance-only``)."""
    out = []
    for word in args:
        if word.startswith("-"):
            continue
        for a in _matches(word, base):
            if _names_store(a):
                out.append((os.path.join(base or ".", a), prog))
            elif os.path.basename(a.rstrip("/")) in _GOVERNANCE_NAMES or _may_name_owned(a):
                out.append((os.path.join(base or ".", os.path.expanduser(a)), "governance-only"))
    return out


def _link_sources(prog: str, args: list[str], base: str | None) -> list[tuple[str, str]]:
    """The sources of a hard link (``ln``, ``link``, ``cp -l``/``--link``, ``rsync`` likewise)."""
    from loopx.guard import shell

    if prog not in ("ln", "link") and not any(a in ("-l", "--link") or (a.startswith("-") and not a.startswith("--")
                                                                       and "l" in a) for a in args):
        return []
    pos = [a for a in args if not a.startswith("-")]
    return [(os.path.join(base or ".", src), f"{prog} (link source)")
            for src in (pos[:-1] if len(pos) > 1 else pos) if not shell.is_unknown(src)]


def _may_name_owned(word: str) -> bool:
    from loopx.guard import owned

    return owned.may_name(word)


def _matches(word: str, base: str | None) -> list[str]:
    """The paths a word of a shell command may name: nothing for a value loopx cannot see
    (``$X``); else, when its text is a pattern sh expands (``.lo?px/*.jsonl``, also as a
    redirection target), the files it matches in ``base`` now (at most 100), then the text itself."""
    from loopx.guard import shell

    if shell.is_unknown(word) and not shell.is_pattern(word):
        return []
    text = word.replace(shell.UNKNOWN, "")
    out = []
    if any(c in text for c in "*?["):
        import glob

        for i, p in enumerate(glob.iglob(os.path.join(base or ".", os.path.expanduser(text)))):
            if i >= 100:
                break
            out.append(p)
    return out + [text]  # what it matches first: that is what the command would touch


def _names_store(word: str) -> bool:
    parts = word.replace("\\", "/").split("/")
    return ".loopx" in parts or any(p.startswith(".loopx") and p != ".loopx" and "*" in p for p in parts) or \
        word.rstrip("/").endswith(".loopx*") or word in (".lo*", ".l*", ".*")


def gate_state(state: dict, goal_id: str, kind: str, node: str | None = None) -> tuple[str, dict | None]:
    """``("approved"|"pending"|"none", gate)``: a usable approved gate (standing, or single-use and
    not used yet; in a shared goal reserved for an open run of clone ``node``; see
    ``approvals.covering_gate``) covers ``kind`` unless a newer gate of the same kind (pending or
    rejected) was opened after that approval."""
    approved = approvals.covering_gate(state, goal_id, kind, verify=verify_gate, node=node)
    same = [g for g in state["gates"].values() if g["goal"] == goal_id and g["kind"] == kind]
    if approved is not None:
        newer = [g for g in same if g["status"] != "approved" and g.get("seq", 0) > (approved.get("decided_seq") or 0)]
        if not newer:
            return "approved", approved
    pending = [g for g in same if g["status"] == "pending"]
    if pending:
        return "pending", max(pending, key=lambda g: g.get("seq", 0))
    return "none", None


def governing_goals(state: dict, goal_id: str | None = None) -> list[dict]:
    """The goals whose protections apply: ``goal_id`` when given, else every active or paused goal."""
    if goal_id:
        try:
            return [queries.resolve_goal(state, goal_id)]
        except UsageError:
            pass
    return [g for g in state["goals"].values() if g["status"] in ("active", "paused")]


def _deny(kind: str, what: str, goal: dict, state: dict, rule: str, node: str = "") -> dict:
    status, gate = gate_state(state, goal["id"], kind, node)
    if status == "approved":
        return {}
    gid = goal["id"]
    used = approvals.last_used(state, gid, kind) if status == "none" else None
    elsewhere = _unreserved(state, gid, kind, node) if status == "none" and goal.get("shared") else None
    if elsewhere is not None:
        res = elsewhere.get("reserved") or {}
        where = (f"reserved for run {res.get('run')} on {res.get('host') or res.get('node')}" if res.get("run")
                 else "not reserved for a run on this machine yet")
        reason = (f"loopx: `{what}` is a protected action ({kind}) of shared goal {gid}. Gate {elsewhere['id']} approved "
                  f"it once and that approval is {where}: in a shared goal a single-use approval is reserved "
                  f"through the remote for one run when the run starts (`loopx next --sync`, `loopx run`). "
                  f"Finish this turn with `loopx turn finish --result blocked`; the next turn started through "
                  f"the remote may use it. Never approve a gate yourself.")
    elif used is not None:
        reason = (f"loopx: `{what}` is a protected action ({kind}) of goal {gid}. Gate {used['id']} approved it once "
                  f"and that approval was used at {(used.get('used') or {}).get('ts')}. Ask again: open a new gate "
                  f"(loopx gate open --goal-id {gid} --kind {kind} --question \"...\") and stop; never approve it yourself.")
    elif status == "pending" and gate is not None:
        reason = (f"loopx: `{what}` is a protected action ({kind}) of goal {gid}; gate {gate['id']} is waiting for a "
                  f"human. Do not retry it in another form: finish the turn with `loopx turn finish --result blocked` "
                  f"and stop until a human approves {gate['id']}.")
    else:
        reason = (f"loopx: `{what}` is a protected action ({kind}) of goal {gid} and no human has approved it. "
                  f"Open a gate and stop: loopx gate open --goal-id {gid} --kind {kind} --question \"<one concrete "
                  f"yes/no question, e.g. May I run: {what[:80]}?>\" -- then finish the turn with --result blocked. "
                  f"Never approve a gate yourself.")
    return {"allow": False, "kind": kind, "goal_id": gid, "gate_id": gate["id"] if gate else None,
            "gate_status": status, "reason": reason, "rule": rule}


def _another_approval(state: dict, goal_id: str, kind: str, node: str, taken: set) -> dict | None:
    """A usable approval of ``kind`` for the goal other than the ``taken`` ones, or None."""
    hits = [g for g in state["gates"].values() if g["goal"] == goal_id and g["kind"] == kind and g["id"] not in taken
            and approvals.usable(g, state, node or None) and verify_gate(g)]
    return min(hits, key=lambda g: g.get("decided_seq") or 0) if hits else None


def _unreserved(state: dict, goal_id: str, kind: str, node: str) -> dict | None:
    """The newest single-use approval of ``kind`` that is approved and unused but not reserved for
    an open run of this clone (so the guard does not count it), or None."""
    hits = [g for g in state["gates"].values() if g["goal"] == goal_id and g["kind"] == kind
            and approvals.usable(g) and not approvals.usable(g, state, node) and (verify_gate(g))]
    return max(hits, key=lambda g: g.get("decided_seq") or 0) if hits else None


def local_node(project_dir: str) -> str:
    """This clone's node id (``.loopx/node``), "" when it has none (no reservation then matches)."""
    try:
        with open_file(os.path.join(project_dir, ".loopx", "node")) as fh:
            return fh.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


def evaluate(state: dict, *, commands=(), paths=(), project_dir: str, cwd: str | None = None,
             goal_id: str | None = None, branch_of=None, git=None, node: str | None = None,
             texts: dict | None = None, reads=()) -> dict:
    """The verdict for one tool call: ``{"allow": bool, "reason", "kind", "goal_id", "gate_id", ...}``.

    ``commands``: shell command strings; ``paths``: files the call writes (absolute or relative to
    ``cwd``). Allowed thanks to approvals: ``uses`` lists ``{gate_id, kind, command, standing}``;
    the caller records each with ``gates.use`` (a single-use approval authorises once). Denied: a human-only loopx command or one run with agent markers stripped (kind
    ``governance``, whatever the goal); a command or path mapping to a kind the goal protects
    without an approved gate (a mapping that cannot be resolved is denied too: fail closed); an
    edit inside ``.loopx/``, in a denied path, outside every allowed glob, or of a file with more
    than one hard link, or a change of a file loopx installed for a host (``governance_path``;
    ``texts``: what an edit tool removes and writes, ``owned.block_change``). ``node``: this clone's id (default: read from ``.loopx/node``); in a shared
    goal only approvals reserved for an open run of this clone count."""
    if node is None and any(g.get("shared") for g in state["goals"].values()):
        node = local_node(project_dir)
    node = node or ""
    cwd = cwd or project_dir
    git = git or LazyGit(branch_of)
    for command in commands:
        verdict = _governance(command, cwd)
        if verdict:
            return verdict
    goals = governing_goals(state, goal_id)
    uses: list[dict] = []
    for goal in goals:
        verdict = _goal_actions(state, goal, commands, cwd, git, node, uses)
        if verdict:
            return verdict
    written = [(p, "edit") for p in paths] + [w for c in commands for w in _shell_writes(c, cwd)]
    if state.get("experiments"):  # research experiments: the measuring is governance (``reads``: file tools' reads)
        from loopx.guard import measuring

        verdict = measuring.check(state, written, reads, commands, cwd, project_dir, read_only=_READ_ONLY,
                                  matches=_matches)
        if verdict:
            return verdict
    for path, how in written:
        verdict = _write_verdict(state, goals, path, how, commands, cwd, project_dir, texts, branch_of, node)
        if verdict:
            return verdict
    if uses:
        return {"allow": True, "reason": "approved: " + ", ".join(u["gate_id"] for u in uses), "uses": uses,
                "goals": [g["id"] for g in goals]}
    return {"allow": True, "reason": "no protected action", "goals": [g["id"] for g in goals]}


def _goal_actions(state: dict, goal: dict, commands, cwd: str, git, node: str, uses: list[dict]) -> dict:
    """The deny for the first protected action of ``commands`` that ``goal`` has no usable approval
    for, or {}; each approval that allows one is appended to ``uses`` (``{gate_id, kind, command,
    standing}``)."""
    cfg = config(goal)
    protect = set(goal["scope"].get("protect") or [])
    for command in commands:
        for hit in command_kinds(command, cfg, cwd=cwd, git=git):
            if hit["kind"] == "*" and protect:
                return _unresolved(hit, goal, sorted(protect)[0])
            if hit["kind"] in protect:
                verdict = _use_approval(state, goal, hit, node, uses)
                if verdict:
                    return verdict
    return {}


def _use_approval(state: dict, goal: dict, hit: dict, node: str, uses: list[dict]) -> dict:
    """The approval for one protected action ``hit`` of ``goal``, appended to ``uses``; or the deny
    (no approved gate, a guess the goal protects, one approval used twice in one call)."""
    status, gate = gate_state(state, goal["id"], hit["kind"], node)
    if hit.get("unresolved") and status != "approved":
        return _unresolved(hit, goal, hit["kind"])
    verdict = _deny(hit["kind"], hit["command"], goal, state, hit["rule"], node)
    if verdict:
        return verdict
    assert gate is not None  # _deny allowed it: gate_state said approved, with the gate
    used = {u["gate_id"] for u in uses}
    if gate["id"] in used and not gate.get("standing"):
        # one approval authorises one action: the same call doing it again needs another
        gate = _another_approval(state, goal["id"], hit["kind"], node, used)
        if gate is None:
            return {"allow": False, "kind": hit["kind"], "goal_id": goal["id"], "gate_id": None,
                    "gate_status": "used", "rule": hit["rule"],
                    "reason": (f"loopx: this call runs the protected action ({hit['kind']}) "
                               f"`{hit['command']}` more than once; one approval authorises one "
                               "action. Run it once per call, or open a gate for each and stop.")}
    if gate["id"] not in used:
        uses.append({"gate_id": gate["id"], "kind": hit["kind"], "command": hit["command"],
                     "standing": bool(gate.get("standing"))})
    return {}


def _write_verdict(state: dict, goals: list[dict], path: str, how: str, commands, cwd: str, project_dir: str,
                   texts: dict | None, branch_of, node: str) -> dict:
    """The deny for one file the call writes (``how``: ``edit``, ``redirect``, a program, ...): a
    file of loopx's or a host's governance, then the goals' scopes and protected paths, or {}."""
    if how == "apply_patch":  # a patch sent through the shell tool says what it removes
        from loopx.guard import owned

        verdict = governance_path(path, cwd, project_dir, "edit",
                                  owned.patch_texts("\n".join(c for c in commands if "*** " in c)))
    else:
        verdict = governance_path(path, cwd, project_dir, how, texts)
    if verdict or how == "governance-only":
        return verdict
    rel = scope.project_relative(project_dir, path, cwd)
    if rel.startswith(".loopx/" + worktrees.DIRNAME + "/"):  # a parallel run's worktree: its copy of the project
        rel = worktrees.strip(rel, worktrees.prefix(project_dir))
    verdict = _path_verdict(state, goals, rel, branch_of, node)
    if not verdict and how == "edit":
        verdict = _link_verdict(path, cwd, rel)
    if verdict and how != "edit":
        verdict["reason"] = verdict["reason"].replace(f"writing {rel}", f"writing {rel} (through {how})")
    return verdict


def verify_gate(gate: dict) -> bool:
    """True when ``gate``'s approval counts: always, unless approval signing is on for this user
    (then its signature must verify; see ``loopx.kernel.write.signing``)."""
    from loopx.kernel.write import signing

    return signing.approval_counts(gate)


def governance_path(path: str, cwd: str | None, project_dir: str, how: str = "edit", texts: dict | None = None) -> dict:
    """A deny verdict when writing ``path`` would change the hooks that call the guard: a file loopx
    owns outright for any host in either scope (hook settings, plugins, extensions, loopx's skills:
    the host table, ``loopx.hostfacts``, via ``guard.owned``), loopx's marked block in an instruction
    file (``how``/``texts``: see ``owned.block_change``), or loopx's user config and data folder
    (registry, signing, allowed signers); else {}."""
    from loopx import config
    from loopx.guard import owned

    full = os.path.realpath(os.path.join(cwd or project_dir, os.path.expanduser(path)))
    t = owned.targets(project_dir)
    what = owned.owned(full, t)
    rel = scope.project_relative(project_dir, full, project_dir)
    if what is None and rel.startswith(".loopx/" + worktrees.DIRNAME + "/"):
        # a parallel run's worktree carries copies of the hook files: they guard that run
        inside = worktrees.strip(rel, worktrees.prefix(project_dir))
        what = owned.owned(os.path.realpath(os.path.join(project_dir, inside)), t)
    if what is None:
        dirs = {os.path.realpath(config.data_home()), os.path.realpath(os.path.dirname(config.config_path()))}
        if any(full == d or full.startswith(d + os.sep) for d in dirs):
            what = "loopx's user configuration or data folder (signing, registry, settings are human-only)"
    if what is None:
        why = owned.block_change(full, t, how, texts)
        if why:
            return {"allow": False, "kind": "governance", "path": full, "reason": (
                f"loopx: {why}. The block between the loopx markers is human-only; the rest of the file is yours.")}
        return {}
    return {"allow": False, "kind": "governance", "path": full, "reason": (
        f"loopx: writing {full} changes {what}. Do not edit it; if the hooks or settings need a change, say "
        "so in your turn summary and stop.")}


def _unresolved(hit: dict, goal: dict, kind: str) -> dict:
    return {"allow": False, "kind": kind, "goal_id": goal["id"], "gate_id": None, "gate_status": "unresolved",
            "rule": hit["rule"], "reason": (
                f"loopx: cannot tell whether `{hit['command'][:160]}` is a protected action ({kind}) of goal "
                f"{goal['id']}: {hit['unresolved']}. loopx denies what it cannot check. Write the command out "
                "plainly (literal program name, branch and directory), or open a gate and stop.")}


def _link_verdict(path: str, cwd: str | None, rel: str) -> dict:
    full = os.path.join(cwd or ".", path)
    try:
        st = os.lstat(full)
    except OSError:
        return {}
    import stat as _stat

    if _stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        return {"allow": False, "kind": "scope", "path": rel, "reason": (
            f"loopx: {rel} has {st.st_nlink} hard links, so writing it also changes files elsewhere that loopx "
            "cannot see. Write a fresh copy instead (remove the link first), or ask a human.")}
    return {}


def _path_verdict(state: dict, goals: list[dict], rel: str, branch_of, node: str = "") -> dict:
    if rel == ".loopx" or rel.startswith(".loopx/"):
        return {"allow": False, "kind": "scope", "path": rel, "reason": (
            f"loopx: {rel} is loopx's own store; never edit it directly. Use loopx commands "
            "(evidence add, todo done, turn finish, gate open) to record state.")}
    if not goals:
        return {}
    outside = rel == ".." or rel.startswith("../")
    if outside and all(not g["scope"].get("allow") for g in goals):
        return {}  # no goal restricts paths: files outside the project are not loopx's business
    checks = [(g, scope.check(g["scope"], rel)) for g in goals]
    for g, c in checks:
        if c["reason"].startswith("denied by"):
            return _scope_deny(g, rel, c["reason"])
    if any(c["inside"] for _, c in checks):
        for g in goals:
            for r in config(g)["rules"]:
                if r.get("path") and r["kind"] in (g["scope"].get("protect") or []) and scope.matches(r["path"], rel):
                    verdict = _deny(r["kind"], f"edit {rel}", g, state, r["path"], node)
                    if verdict:
                        return verdict
        return {}
    return _scope_deny(checks[0][0], rel, checks[0][1]["reason"])


def _scope_deny(goal: dict, rel: str, why: str) -> dict:
    allow = ", ".join(goal["scope"].get("allow") or []) or "(whole project)"
    return {"allow": False, "kind": "scope", "goal_id": goal["id"], "path": rel, "reason": (
        f"loopx: writing {rel} is outside the scope of goal {goal['id']} ({why}; allowed: {allow}). Stay inside "
        f"scope; if the goal really needs this path, say so in your turn summary and ask a human to widen it "
        f"with `loopx scope set`.")}


def evaluate_unreadable(commands=(), *, cwd: str | None = None, problem: str, branch_of=None, paths=(),
                        project_dir: str | None = None, texts: dict | None = None) -> dict:
    """Verdict when the store cannot be read (or is gone, moved or replaced): human-only loopx
    commands and protected-looking commands (default mapping, every kind assumed protected, an
    unresolvable one included) are denied, and so are edits of the store; everything else is
    allowed so the agent can still work."""
    cfg = {"rules": [], "branches": list(DEFAULT_BRANCHES), "defaults": True}
    for command in commands:
        verdict = _governance(command, cwd)
        if verdict:
            return verdict
    if project_dir:
        for path, how in [(p, "edit") for p in paths] + [w for c in commands for w in _shell_writes(c, cwd)]:
            verdict = governance_path(path, cwd, project_dir, how, texts)
            if verdict:
                return verdict
            rel = scope.project_relative(project_dir, path, cwd or project_dir)
            if rel.startswith(".loopx/" + worktrees.DIRNAME + "/"):
                rel = worktrees.strip(rel, worktrees.prefix(project_dir))
            if rel == ".loopx" or rel.startswith(".loopx/"):
                return {"allow": False, "kind": "scope", "path": rel, "reason": (
                    f"loopx: {rel} is loopx's own store ({problem}); never edit it directly. Ask a human to run "
                    "`loopx doctor` or `loopx connect`.")}
    for command in commands:
        for hit in command_kinds(command, cfg, cwd=cwd, branch_of=branch_of):
            return {"allow": False, "kind": hit["kind"] if hit["kind"] != "*" else "unresolved", "reason": (
                f"loopx: the store cannot be read ({problem}), so loopx cannot confirm an approved {hit['kind']} "
                f"gate for `{hit['command']}`. Do not run it; ask a human to run `loopx doctor`.")}
    return {"allow": True, "reason": f"store unreadable ({problem}); not a protected command"}


# ------------------------------------------------------------------ configuring
def parse_rule(text: str, field: str) -> dict:
    """``KIND=PATTERN`` -> ``{"kind", field: pattern}``. Raises UsageError (exit 2)."""
    kind, eq, pattern = str(text).partition("=")
    kind, pattern = kind.strip(), pattern.strip()
    if not eq or not pattern:
        raise UsageError(f"bad rule {text!r}", "write KIND=PATTERN, e.g. release='make release*'")
    validate.choice(kind, RULE_KINDS, "rule kind")
    validate.text(pattern, "rule pattern", limit=500)
    return {"kind": kind, field: pattern}


def set_config(store: Store, actor: str, goal_id: str | None, *, rules=None, branches=None,
               defaults: bool | None = None, reset: bool = False, human=None) -> dict:
    """Change a goal's guard config (``guard.set``): ``rules`` are appended (first match wins),
    ``branches`` replace the protected branches, ``reset`` starts from the defaults. Needs
    ``human`` (a ``humans.HumanChannel``); raises HumanRequired without one."""
    from loopx.kernel import humans

    humans.check_channel(human, "guard.rules")
    branches = [validate.text(b, "--protect-branch", limit=200) for b in branches or []]
    out: dict = {}

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        cur = {"rules": [], "branches": list(DEFAULT_BRANCHES), "defaults": True} if reset else config(g)
        new = {"rules": cur["rules"] + list(rules or []), "branches": branches or cur["branches"],
               "defaults": cur["defaults"] if defaults is None else bool(defaults)}
        out.update(goal_id=g["id"], guard=new)
        return [Draft("guard.set", g["id"], new)]

    store.transact(plan, actor=actor)
    return out
