"""The pre-tool guard: which shell commands and file edits are protected actions of a goal.

A command is split into simple commands (on ``&&``, ``||``, ``;``, ``|``, ``&``, newlines and
``bash -c`` strings); wrappers (``sudo``, ``env``, ``VAR=x``, ``time``, ``nohup``, ``npx`` ...) are
stripped; each simple command is then mapped to a gate kind (``validate.GATE_KINDS``) by the goal's
own rules first, then by the defaults below. A goal's rules live in its ``guard`` config
(``guard.set`` event): ``{"rules": [{"kind", "command"|"path"}], "branches": [...], "defaults": bool}``
where ``command`` is an fnmatch pattern over the normalised command (``git push * release/*``),
``path`` a scope glob over project-relative edit paths, and kind ``none`` exempts a match.

Defaults (``DEFAULT_BRANCHES`` are the protected branches):

- merge: ``git push`` to a protected branch (explicit refspec, or the current branch when none is
  given, ``--all``/``--mirror``), ``gh pr merge``
- release: ``npm|pnpm|yarn|bun publish``, ``twine upload``, ``cargo publish``, ``poetry|uv|flit|hatch
  publish``, ``gem push``, ``docker push``, ``mvn deploy``, ``gh release create``, pushing tags
- production-write: ``kubectl apply|create|delete|replace|patch|edit|scale|rollout|set``, ``helm
  install|upgrade|uninstall|rollback``, ``terraform|tofu|terragrunt apply|destroy|import``,
  ``pulumi up|destroy``, ``fly|flyctl deploy``, ``vercel --prod``, ``netlify deploy --prod``,
  ``firebase deploy``, ``gcloud ... deploy``, ``aws cloudformation deploy``, ``serverless|sls|cdk|kamal deploy``

Everything here is pure except ``current_branch`` (one ``git`` subprocess) and ``set_rules``.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import subprocess

from loopx.errors import UsageError
from loopx.kernel.read import queries, scope, validate, worktrees
from loopx.kernel.storage.store import Draft, Store
from loopx.kernel.write import gates

DEFAULT_BRANCHES = ("main", "master")
RULE_KINDS = (*validate.GATE_KINDS, "none")
_SPLIT = {"&&", "||", ";", "|", "&", "(", ")", "|&", ";;"}
_WRAPPERS = {"sudo", "env", "time", "nohup", "command", "exec", "nice", "npx", "bunx", "stdbuf", "timeout", "xargs"}
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh"}
_PUBLISH = {"npm", "pnpm", "yarn", "bun", "poetry", "uv", "flit", "hatch"}
_KUBE = {"apply", "create", "delete", "replace", "patch", "edit", "scale", "rollout", "set", "label", "annotate", "drain"}
_HELM = {"install", "upgrade", "uninstall", "delete", "rollback"}
_TF = {"apply", "destroy", "import"}


# ------------------------------------------------------------------ parsing commands
def simple_commands(command: str, depth: int = 0) -> list[list[str]]:
    """``command`` as a list of simple commands (token lists), wrappers stripped, ``sh -c`` expanded."""
    text = command.replace("\r", " ").replace("\n", " ; ")
    try:
        lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:  # unbalanced quotes: fall back to plain words
        tokens = text.replace(";", " ; ").replace("&&", " && ").replace("|", " | ").split()
    out: list[list[str]] = []
    cur: list[str] = []
    skip_next = False
    for tok in tokens + [";"]:
        if skip_next:
            skip_next = False
            continue
        if tok in _SPLIT:
            if cur:
                out.extend(_unwrap(cur, depth))
            cur = []
        elif tok and set(tok) <= set("<>&0123456789") and any(c in tok for c in "<>"):
            skip_next = not tok.endswith("&")  # a redirection: drop its target
        else:
            cur.append(tok)
    return out


def _unwrap(words: list[str], depth: int) -> list[list[str]]:
    i = 0
    while i < len(words):
        w = words[i]
        base = os.path.basename(w)
        if "=" in w and not w.startswith("-") and w.split("=", 1)[0].isidentifier():
            i += 1
        elif base in _WRAPPERS:
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 1 + (words[i] in ("-u", "-g", "-n", "-s"))
            if base == "timeout" and i < len(words):
                i += 1  # the duration
        else:
            break
    words = words[i:]
    if not words:
        return []
    prog = os.path.basename(words[0])
    if prog in _SHELLS and depth < 3:
        for j, w in enumerate(words[1:], 1):
            if w.startswith("-") and "c" in w[1:] and not w.startswith("--") and j + 1 < len(words):
                return simple_commands(words[j + 1], depth + 1)
    if prog == "eval" and depth < 3:
        return simple_commands(" ".join(words[1:]), depth + 1)
    return [[prog, *words[1:]]]


def current_branch(cwd: str | None) -> str | None:
    """The checked-out branch in ``cwd`` (``git rev-parse --abbrev-ref HEAD``), or None."""
    try:
        proc = subprocess.run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=cwd or None, capture_output=True,
                              text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    name = proc.stdout.strip()
    return name if proc.returncode == 0 and name and name != "HEAD" else None


# ------------------------------------------------------------------ default mapping
def _git_push_kind(args: list[str], branches, cwd, branch_of) -> str | None:
    positional, kind = [], None
    takes_value = {"-o", "--push-option", "--repo", "--receive-pack", "--exec"}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--all", "--mirror", "--branches"):
            return "merge"
        if a in ("--tags", "--follow-tags"):
            kind = "release"
        elif a in takes_value:
            i += 1
        elif not a.startswith("-"):
            positional.append(a)
        i += 1
    refspecs = positional[1:]
    if not refspecs:
        current = branch_of(cwd)
        if current is None or _protected(current, branches):
            return "merge"
        return kind
    for spec in refspecs:
        dst = spec.lstrip("+").split(":")[-1] or spec.lstrip("+").split(":")[0]
        if dst.startswith("refs/tags/"):
            kind = kind or "release"
            continue
        dst = dst.removeprefix("refs/heads/")
        if dst == "HEAD":
            dst = branch_of(cwd) or "HEAD"
        if _protected(dst, branches) or dst == "HEAD":
            return "merge"
    return kind


def _protected(branch: str, branches) -> bool:
    return any(fnmatch.fnmatchcase(branch, b) for b in branches)


def _git_kind(args: list[str], branches, cwd, branch_of) -> str | None:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace"):
            if args[i] == "-C" and i + 1 < len(args):
                cwd = os.path.join(cwd or ".", args[i + 1])
            i += 1
        i += 1
    if i < len(args) and args[i] == "push":
        return _git_push_kind(args[i + 1:], branches, cwd, branch_of)
    return None


def default_kind(words: list[str], *, branches=DEFAULT_BRANCHES, cwd: str | None = None,
                 branch_of=current_branch) -> str | None:
    """The gate kind the default mapping gives one simple command, or None."""
    prog, args = words[0], words[1:]
    sub = [a for a in args if not a.startswith("-")]
    first = sub[0] if sub else ""
    if prog == "git":
        return _git_kind(args, branches, cwd, branch_of)
    if prog == "gh":
        if sub[:2] == ["pr", "merge"]:
            return "merge"
        if sub[:2] == ["release", "create"]:
            return "release"
        return None
    if (prog in _PUBLISH and "publish" in sub[:2]) or (prog == "twine" and first == "upload") \
            or (prog == "cargo" and first == "publish") or (prog == "gem" and first == "push") \
            or (prog in ("docker", "podman") and first == "push") or (prog in ("mvn", "./mvnw") and "deploy" in sub):
        return "release"
    return _deploy_kind(prog, args, sub, first)


def _deploy_kind(prog: str, args: list[str], sub: list[str], first: str) -> str | None:
    if (prog in ("kubectl", "oc") and first in _KUBE) or (prog == "helm" and first in _HELM) \
            or (prog in ("terraform", "tofu", "terragrunt") and first in _TF) \
            or (prog == "pulumi" and first in ("up", "destroy", "update")) \
            or (prog in ("fly", "flyctl") and first == "deploy") \
            or (prog == "vercel" and ("--prod" in args or "--production" in args)) \
            or (prog == "netlify" and first == "deploy" and "--prod" in args) \
            or (prog in ("firebase", "serverless", "sls", "cdk", "kamal") and first == "deploy") \
            or (prog == "gcloud" and "deploy" in sub) \
            or (prog == "aws" and sub[:2] == ["cloudformation", "deploy"]):
        return "production-write"
    return None


# ------------------------------------------------------------------ per-goal evaluation
def config(goal: dict | None) -> dict:
    """The goal's effective guard config (defaults filled in)."""
    g = (goal or {}).get("guard") or {}
    return {"rules": list(g.get("rules") or []), "branches": list(g.get("branches") or DEFAULT_BRANCHES),
            "defaults": g.get("defaults", True) is not False}


def command_kinds(command: str, cfg: dict, *, cwd: str | None = None, branch_of=current_branch) -> list[dict]:
    """``[{"kind", "command", "rule"}]`` for every simple command of ``command`` that maps to a kind."""
    hits = []
    for words in simple_commands(command):
        line = " ".join(words)
        kind, rule = None, None
        for r in cfg["rules"]:
            if r.get("command") and fnmatch.fnmatchcase(line, r["command"]):
                kind, rule = r["kind"], r["command"]
                break
        if rule is None and cfg["defaults"]:
            kind, rule = default_kind(words, branches=cfg["branches"], cwd=cwd, branch_of=branch_of), "default"
        if kind and kind != "none":
            hits.append({"kind": kind, "command": line, "rule": rule})
    return hits


def gate_state(state: dict, goal_id: str, kind: str) -> tuple[str, dict | None]:
    """``("approved"|"pending"|"none", gate)``: an approved gate covers ``kind`` unless a newer gate
    of the same kind (pending or rejected) was opened after that approval."""
    approved = gates.covering_gate(state, goal_id, kind)
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


def _deny(kind: str, what: str, goal: dict, state: dict, rule: str) -> dict:
    status, gate = gate_state(state, goal["id"], kind)
    if status == "approved":
        return {}
    gid = goal["id"]
    if status == "pending":
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


def evaluate(state: dict, *, commands=(), paths=(), project_dir: str, cwd: str | None = None,
             goal_id: str | None = None, branch_of=current_branch) -> dict:
    """The verdict for one tool call: ``{"allow": bool, "reason", "kind", "goal_id", "gate_id", ...}``.

    ``commands``: shell command strings; ``paths``: files the call writes (absolute or relative to
    ``cwd``). Denied: a command or path mapping to a kind the goal protects without an approved
    gate; an edit inside ``.loopx/``, in a denied path, or outside every allowed glob."""
    cwd = cwd or project_dir
    goals = governing_goals(state, goal_id)
    for goal in goals:
        cfg = config(goal)
        protect = set(goal["scope"].get("protect") or [])
        for command in commands:
            for hit in command_kinds(command, cfg, cwd=cwd, branch_of=branch_of):
                if hit["kind"] in protect:
                    verdict = _deny(hit["kind"], hit["command"], goal, state, hit["rule"])
                    if verdict:
                        return verdict
    for path in paths:
        rel = scope.project_relative(project_dir, path, cwd)
        if rel.startswith(".loopx/" + worktrees.DIRNAME + "/"):  # a parallel run's worktree: its copy of the project
            rel = worktrees.strip(rel, worktrees.prefix(project_dir))
        verdict = _path_verdict(state, goals, rel, branch_of)
        if verdict:
            return verdict
    return {"allow": True, "reason": "no protected action", "goals": [g["id"] for g in goals]}


def _path_verdict(state: dict, goals: list[dict], rel: str, branch_of) -> dict:
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
                    verdict = _deny(r["kind"], f"edit {rel}", g, state, r["path"])
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


def evaluate_unreadable(commands=(), *, cwd: str | None = None, problem: str, branch_of=current_branch) -> dict:
    """Verdict when the store cannot be read: protected-looking commands (default mapping, every
    kind assumed protected) are denied, everything else is allowed so the agent can still work."""
    cfg = {"rules": [], "branches": list(DEFAULT_BRANCHES), "defaults": True}
    for command in commands:
        for hit in command_kinds(command, cfg, cwd=cwd, branch_of=branch_of):
            return {"allow": False, "kind": hit["kind"], "reason": (
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
               defaults: bool | None = None, reset: bool = False) -> dict:
    """Change a goal's guard config (``guard.set``): ``rules`` are appended (first match wins),
    ``branches`` replace the protected branches, ``reset`` starts from the defaults."""
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
