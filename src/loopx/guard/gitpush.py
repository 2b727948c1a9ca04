"""Where a ``git push`` (or ``send-pack``, ``subtree push``, a git alias) would write.

``git_kind(args, cwd, branches, git) -> (kind, unresolved)``: ``kind`` is ``merge`` (a protected
branch would change), ``release`` (a tag would be pushed) or None; ``unresolved`` is a sentence
saying what could not be known (then the caller fails closed for a protected ``merge``).

Resolution follows git's own rules: explicit refspecs (``+src:dst``, ``HEAD``/``@``, ``:`` =
matching, ``:dst`` = delete, wildcards, ``refs/heads/``/``refs/tags/``), and without a refspec
``remote.<name>.push``, then ``push.default`` (``simple``/``upstream``/``current``/``matching``/
``nothing``) with the branch's upstream (``branch.<b>.merge``) in the working tree the command
runs in (``cd X &&``, ``git -C X``, ``--git-dir``), so a worktree checked out on a protected branch
counts. ``Git`` runs the few read-only ``git`` subprocesses needed and caches them.
"""

from __future__ import annotations

import os

from loopx.guard.shell import UNKNOWN, _quote, _split_words, is_unknown
from loopx.kernel.storage import gitcli


def _fnmatchcase(name: str, pattern: str) -> bool:
    from fnmatch import fnmatchcase  # imports re: a command that pushes nothing never pays for it

    return fnmatchcase(name, pattern)

# Commands compiled into git (`git --list-cmds=builtins`, and builtins since before git 2.0): git
# runs them before it looks for an alias of that name (git.c, run_argv: a builtin, then git-<name>
# from the exec path, then the alias), so `git status` is never an alias and needs no `git config`
# process to say so. Not a command git ships as a script (bisect, submodule; rebase, stash, pull and
# am were scripts in older gits): emptying the exec path (`git --exec-path=/x bisect`) makes git
# fall through to an alias of that name. tests/test_hostile_guard.py checks the list against the
# installed git.
SHIPPED = frozenset({
    "add", "annotate", "apply", "archive", "blame", "branch", "bundle", "cat-file", "check-attr", "check-ignore",
    "checkout", "cherry", "cherry-pick", "clean", "clone", "commit", "config", "count-objects", "describe", "diff",
    "diff-files", "diff-index", "diff-tree", "fetch", "for-each-ref", "format-patch", "fsck", "gc", "grep",
    "hash-object", "help", "init", "log", "ls-files", "ls-remote", "ls-tree", "merge", "merge-base", "mv",
    "name-rev", "notes", "reflog", "remote", "reset", "rev-list", "rev-parse", "revert", "rm", "shortlog", "show",
    "show-ref", "status", "symbolic-ref", "tag", "update-index", "var", "version",
})
# Other commands git has (`git --list-cmds=builtins,main` of git 2.39: scripts, and builtins newer
# than 2.0): git never autocorrects them, but an alias of their name is looked up (see SHIPPED).
_OTHER_COMMANDS = frozenset({
    "am", "archimport", "bisect", "bugreport", "check-mailmap", "check-ref-format", "checkout-index",
    "column", "commit-graph", "commit-tree", "credential", "credential-cache", "credential-store",
    "cvsexportcommit", "cvsimport", "cvsserver", "daemon", "diagnose", "difftool", "fast-export",
    "fast-import", "fetch-pack", "filter-branch", "fmt-merge-msg", "for-each-repo", "fsck-objects",
    "fsmonitor--daemon", "get-tar-commit-id", "gitk", "gitweb", "hook", "http-backend", "imap-send",
    "index-pack", "init-db", "instaweb", "interpret-trailers", "mailinfo", "mailsplit", "maintenance",
    "merge-file", "merge-index", "merge-octopus", "merge-one-file", "merge-ours", "merge-recursive",
    "merge-resolve", "merge-subtree", "merge-tree", "mergetool", "mktag", "mktree", "multi-pack-index",
    "p4", "pack-objects", "pack-redundant", "pack-refs", "patch-id", "prune", "prune-packed", "pull",
    "quiltimport", "range-diff", "read-tree", "rebase", "receive-pack", "repack", "replace", "request-pull",
    "rerere", "restore", "scalar", "send-email", "send-pack", "sh-i18n", "sh-setup", "shell", "show-branch",
    "show-index", "sparse-checkout", "stage", "stash", "stripspace", "submodule", "subtree", "svn",
    "switch", "unpack-file", "unpack-objects", "update-ref", "update-server-info", "upload-archive",
    "upload-pack", "verify-commit", "verify-pack", "verify-tag", "web--browse", "whatchanged", "worktree",
    "write-tree",
})
# help.autocorrect values that do not run the guessed command (git's help.c)
_NO_AUTOCORRECT = {"0", "false", "off", "no", "never", "show"}


def _autocorrected(verb: str, loc, git: Git, overrides: dict) -> bool:
    """Whether git would look for another command in place of ``verb``: not one of its own, no
    ``git-<verb>`` on PATH, and help.autocorrect on (``git -c help.autocorrect=immediate psuh``
    pushes)."""
    verb = verb.split("\0", 1)[0]  # an argument ends at a NUL byte on its way to git
    if verb in SHIPPED or verb in _OTHER_COMMANDS:
        return False
    value = overrides.get("help.autocorrect") if "help.autocorrect" in overrides else git.get(loc, "help.autocorrect")
    if (value or "0").strip().lower() in _NO_AUTOCORRECT:
        return False
    return not any(os.access(os.path.join(d, "git-" + verb), os.X_OK)
                   for d in os.environ.get("PATH", "").split(os.pathsep) if d)


def _embedded(verb: str, rest: list[str]) -> list[str]:
    """Shell commands a git subcommand runs itself: ``rebase -x/--exec CMD``, ``bisect run CMD``,
    ``submodule foreach CMD``."""
    if verb == "rebase":
        out, i = [], 0
        while i < len(rest):
            w = rest[i]
            opt, eq, val = w.partition("=")
            long_exec = len(opt) >= 4 and "--exec".startswith(opt)  # git takes a unique prefix: --ex, --exe
            if (long_exec and not eq) or (w.startswith("-") and not w.startswith("--") and w.endswith("x")):
                out.append(rest[i + 1] if i + 1 < len(rest) else "")
                i += 1
            elif long_exec:
                out.append(val)
            elif w.startswith("-") and not w.startswith("--") and "x" in w:
                out.append(w[w.index("x") + 1:])  # -xCMD, bundled (-ixCMD)
            i += 1
        return out
    if verb == "bisect" and rest[:1] == ["run"]:
        return [" ".join(_quote(a) for a in rest[1:])]
    if verb == "submodule" and "foreach" in rest:
        after = rest[rest.index("foreach") + 1:]
        while after and after[0] in ("--recursive", "-q", "--quiet", "--"):
            after = after[1:]
        return [after[0] if len(after) == 1 else " ".join(_quote(a) for a in after)]
    return []


_GLOBAL_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env",
                 "--super-prefix", "--list-cmds", "--attr-source", "--shallow-file"}
_PUSH_VALUE = {"-o", "--push-option", "--repo", "--receive-pack", "--exec", "--signed"}


class Git:
    """Read-only git lookups for one guard call. ``branch_of``: an override used by tests and by
    callers that already know the branch (then config lookups answer nothing)."""

    def __init__(self, branch_of=None) -> None:
        self._branch_of = branch_of
        self._cfg: dict = {}
        self._branch: dict = {}

    def _run(self, loc, *args) -> tuple[int, str]:
        cwd, git_dir = loc
        try:
            p = gitcli.run(cwd or os.curdir, *(["--git-dir", git_dir] if git_dir else []), *args, timeout=10,
                           text=True, env={"GIT_OPTIONAL_LOCKS": "0"})
        except (gitcli.GitUnavailable, ValueError):
            return 128, ""
        return p.returncode, p.stdout

    def branch(self, loc) -> str | None:
        """The checked-out branch's short name, or None (detached, not a repository, unknown cwd)."""
        if loc[0] and str(loc[0]).startswith(UNKNOWN):
            return None
        if self._branch_of is not None:
            return self._branch_of(loc[0])
        if loc not in self._branch:
            code, out = self._run(loc, "symbolic-ref", "-q", "--short", "HEAD")
            self._branch[loc] = out.strip() if code == 0 and out.strip() else None
        return self._branch[loc]

    def config(self, loc) -> dict[str, list[str]]:
        """``{lower-cased key: [values]}`` of the repository's effective config (empty when none)."""
        if self._branch_of is not None or (loc[0] and str(loc[0]).startswith(UNKNOWN)):
            return {}
        if loc not in self._cfg:
            code, out = self._run(loc, "config", "--list", "-z")
            cfg: dict[str, list[str]] = {}
            if code == 0:
                for item in out.split("\0"):
                    if item:
                        k, _, v = item.partition("\n")
                        cfg.setdefault(_norm_key(k), []).append(v)
            self._cfg[loc] = cfg
        return self._cfg[loc]

    def get(self, loc, key: str, overrides: dict | None = None) -> str | None:
        key = _norm_key(key)
        if overrides and key in overrides:
            return overrides[key]
        vals = self.config(loc).get(key)
        return vals[-1] if vals else None

    def is_tag(self, loc, name: str) -> bool:
        if self._branch_of is not None:
            return False
        code, _ = self._run(loc, "show-ref", "--verify", "-q", f"refs/tags/{name}")
        return code == 0


def _norm_key(key: str) -> str:
    # section and variable names are case-insensitive; subsection names (the middle part) are not
    parts = key.split(".")
    if len(parts) >= 3:
        return f"{parts[0].lower()}.{'.'.join(parts[1:-1])}.{parts[-1].lower()}"
    return key.lower()


def protected(branch: str, branches) -> bool:
    return any(_fnmatchcase(branch, b) for b in branches)


def env_overrides(env: dict) -> dict:
    """Config given to git through the environment (``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/
    ``GIT_CONFIG_VALUE_n`` and ``GIT_CONFIG_PARAMETERS``) as ``{normalised key: value}``."""
    out: dict = {}
    try:
        count = int(env.get("GIT_CONFIG_COUNT") or 0)
    except ValueError:
        count = 0
    for n in range(min(count, 100)):
        k, v = env.get(f"GIT_CONFIG_KEY_{n}"), env.get(f"GIT_CONFIG_VALUE_{n}")
        if k:
            out[_norm_key(k)] = v or ""
    params = env.get("GIT_CONFIG_PARAMETERS") or ""
    for item in params.replace("'", "\n").split("\n"):
        k, eq, v = item.strip().partition("=")
        if eq and k:
            out[_norm_key(k)] = v
    return out


def git_kind(args: list[str], cwd, branches, git: Git, depth: int = 0, run_alias=None, env: dict | None = None):
    """``(kind, unresolved)`` for ``git ARGS`` run in ``cwd`` (see the module docstring).
    ``run_alias(script, cwd)``: judges a shell alias (``alias.x = !cmd``) and returns the same pair.
    ``env``: assignments in front of the command (config passed through ``GIT_CONFIG_*`` counts)."""
    i, loc, overrides, why = _global_options(args, cwd, env)
    if why or i >= len(args):
        return None, why
    verb, rest = args[i], args[i + 1:]
    if is_unknown(verb):
        if any(w in ("origin", "main", "master", "HEAD", "--all", "--tags") or ":" in w for w in rest) or not rest:
            return None, "the git subcommand comes from a value loopx cannot see"
        return None, None
    if verb in ("push", "send-pack"):
        return push_kind(rest, loc, branches, git, overrides, send_pack=verb == "send-pack")
    if verb == "subtree" and "push" in rest:
        pos = [w for w in rest if not w.startswith("-") and w != "push"]
        if "--prefix" in rest or "-P" in rest:
            pos = pos[1:]  # the prefix value
        if len(pos) >= 2:
            return push_kind([pos[0], f"HEAD:{pos[1]}"], loc, branches, git, overrides)
        return None, "`git subtree push` without a branch"
    if verb.endswith("--helper"):  # git's internal helpers (bisect--helper run, submodule--helper foreach)
        return None, f"`git {verb}` is one of git's internal helpers, which may run commands"
    scripts = _embedded(verb, rest)
    if scripts:
        return _judge_scripts(verb, scripts, loc, run_alias)
    if verb in SHIPPED:
        return None, None  # git runs its own command before it looks for an alias of that name
    alias = _alias(verb, loc, git, overrides)
    if alias is None and _autocorrected(verb, loc, git, overrides):
        return None, f"git may autocorrect `{verb}` into another command (help.autocorrect is on)"
    if alias is None or depth > 5:
        return None, None
    if alias.startswith("!"):
        if run_alias is None:
            return None, f"git alias `{verb}` runs a shell command"
        return run_alias(alias[1:] + " " + " ".join(_quote(a) for a in rest), loc[0])
    return git_kind(args[:i] + _split_words(alias) + rest, cwd, branches, git, depth + 1, run_alias, env)


def _alias(verb: str, loc, git: Git, overrides: dict) -> str | None:
    """The alias git runs for ``verb``: git compares alias names ignoring case, the middle part
    too (``git Status`` runs ``alias.status``, ``git x.y`` runs ``alias.X.y``); the command line's
    ``-c`` and ``GIT_CONFIG_*`` win over the files."""
    want = f"alias.{verb}".lower()
    for source in (overrides, git.config(loc)):
        hits = [v for k, v in source.items() if k.lower() == want]
        if hits:
            last = hits[-1]
            return last[-1] if isinstance(last, list) else last
    return None


def _judge_scripts(verb: str, scripts: list[str], loc, run_alias):
    """The worst verdict of the shell commands ``git VERB`` runs (``_embedded``)."""
    if run_alias is None:
        return None, f"`git {verb}` runs a shell command"
    if any(w in script for script in scripts for w in ("bisect", "submodule", "rebase")):
        return None, f"`git {verb}` runs a git command that runs commands in turn"  # bounded: no nesting read
    worst = (None, None)
    for script in scripts:
        kind, why = run_alias(script, loc[0])
        if kind and not why:
            return kind, None
        if kind or why:
            worst = (kind, why)
    return worst


def _global_options(args: list[str], cwd, env: dict | None) -> tuple[int, tuple, dict, str | None]:
    """git's options before the subcommand: ``(index of the subcommand, (cwd, git dir) the command
    works in, config overrides (``-c``, ``GIT_CONFIG_*``), unresolved)``; ``unresolved`` says why
    the directory cannot be known (``git -C $DIR``)."""
    loc_cwd, git_dir, overrides = cwd, None, env_overrides(env or {})
    if env and env.get("GIT_DIR"):
        git_dir = os.path.normpath(os.path.join(cwd or ".", env["GIT_DIR"]))
    i = 0
    while i < len(args) and args[i].startswith("-"):
        opt, eq, val = args[i].partition("=")
        if opt in _GLOBAL_VALUE:
            if not eq:
                val = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            if opt == "-C":
                if is_unknown(val):
                    return i, (loc_cwd, git_dir), overrides, \
                        f"`git -C {val.replace(UNKNOWN, '')}`: the directory cannot be known"
                loc_cwd = os.path.normpath(os.path.join(loc_cwd or ".", os.path.expanduser(val)))
            elif opt == "--git-dir":
                git_dir = os.path.normpath(os.path.join(loc_cwd or ".", val))
            elif opt == "-c":
                k, _, v = val.partition("=")
                overrides[_norm_key(k)] = v
            elif opt == "--config-env":  # a value from an environment variable loopx does not see here
                return i, (loc_cwd, git_dir), overrides, "`git --config-env` sets config from a value loopx cannot see"
        i += 1
    return i, (loc_cwd, git_dir), overrides, None


def _push_options(args: list[str]) -> tuple[list[str], str | None, bool, bool, bool]:
    """``git push ARGS`` read: ``(positional words, --repo, tags pushed, --delete, every branch
    pushed (--all, --mirror, --branches))``."""
    positional: list[str] = []
    repo, tags, delete, every = None, False, False, False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            positional.extend(args[i + 1:])
            break
        opt, eq, val = a.partition("=")
        if opt in ("--all", "--mirror", "--branches"):
            every = True
        elif opt in ("--tags", "--follow-tags"):
            tags = True
        elif opt in ("-d", "--delete"):
            delete = True
        elif opt == "--repo" or opt == "--remote":
            repo = val if eq else (args[i + 1] if i + 1 < len(args) else None)
            i += 0 if eq else 1
        elif opt in _PUSH_VALUE:
            i += 0 if eq else 1
        elif not a.startswith("-") or a == "-":
            positional.append(a)
        i += 1
    return positional, repo, tags, delete, every


def push_kind(args: list[str], loc, branches, git: Git, overrides: dict, send_pack: bool = False):
    """``(kind, unresolved)`` for ``git push ARGS`` (``send_pack``: ``git send-pack ARGS``) in
    ``loc`` = (cwd, git dir): the given refspecs, or without any what git's config pushes."""
    positional, repo, tags, delete, every = _push_options(args)
    if every:
        return "merge", None
    if repo is None and positional:
        repo, refspecs = positional[0], positional[1:]
    else:
        refspecs = positional
    if send_pack and not refspecs:
        return "merge", None  # send-pack without refs pushes every matching branch
    kind = "release" if tags else None
    cur: list[str | None] = []

    def current() -> str | None:
        if not cur:
            cur.append(git.branch(loc))
        return cur[0]

    if not refspecs:
        implicit = _implicit_push(loc, repo, delete, kind, branches, git, overrides, current)
        if isinstance(implicit, tuple):
            return implicit
        refspecs = implicit
    for spec in refspecs:
        hit, why = _refspec_kind(spec, loc, delete, branches, git, current)
        if why:
            return None, why
        if hit == "merge":
            return "merge", None
        if hit == "release":
            kind = kind or "release"
    return kind, None


def _implicit_push(loc, repo, delete: bool, kind, branches, git: Git, overrides: dict, current):
    """What ``git push`` without a refspec pushes: the configured ``remote.<r>.push`` refspecs (a
    list, read like given ones), or the ``(kind, unresolved)`` of ``push.default`` with the current
    branch and its upstream (``kind``: what the options already made it)."""
    if delete:
        return None, "`git push --delete` without a branch"
    b = current()
    if b is None:
        return None, "cannot tell the current branch (detached HEAD, unknown directory, or no repository)"
    remote = repo or git.get(loc, f"branch.{b}.pushRemote", overrides) or git.get(loc, "remote.pushDefault", overrides) \
        or git.get(loc, f"branch.{b}.remote", overrides) or "origin"
    if is_unknown(remote):
        return None, "the remote comes from a value loopx cannot see"
    key = _norm_key(f"remote.{remote}.push")
    configured = [overrides[key]] if key in overrides else git.config(loc).get(key)
    if configured:
        return list(configured)
    mode = (git.get(loc, "push.default", overrides) or "simple").lower()
    if mode == "nothing":
        return kind, None
    if mode == "matching":
        return "merge", None
    dests = [b]
    upstream = git.get(loc, f"branch.{b}.merge", overrides)
    if mode in ("simple", "upstream", "tracking") and upstream:
        dests.append(upstream)
    if any(protected(d.removeprefix("refs/heads/"), branches) for d in dests):
        return "merge", None
    return kind, None


def _refspec_kind(spec: str, loc, delete: bool, branches, git: Git, current) -> tuple[str | None, str | None]:
    """``(hit, unresolved)`` of one refspec: ``hit`` ``merge`` (a protected branch), ``release`` (a
    tag) or None; ``unresolved`` ends the verdict (the destination cannot be told)."""
    if is_unknown(spec):
        return None, f"the refspec `{spec.replace(UNKNOWN, '')}` comes from a value loopx cannot see"
    if spec.startswith("^"):
        return None, None
    s = spec.lstrip("+")
    if s == ":" or s == "":
        return "merge", None  # matching branches: main included
    src, colon, dst = s.partition(":")
    if not colon:
        if src in ("HEAD", "@"):
            dst = current()
            if dst is None:
                return None, f"`{spec}` names the current branch, which cannot be told"
        else:
            dst = src
            if not src.startswith("refs/") and not delete and git.is_tag(loc, src) and not protected(src, branches):
                return "release", None
    if dst in ("HEAD", "@"):
        dst = current() or "HEAD"
    hit = _dest_kind(dst, branches)
    if hit == "merge":
        return "merge", None
    if dst == "HEAD":
        return None, f"`{spec}`: the destination branch cannot be told"
    return hit, None


def _dest_kind(dst: str, branches) -> str | None:
    if "*" in dst:
        full = dst if dst.startswith("refs/") else f"refs/heads/{dst}"
        if any(_fnmatchcase(f"refs/heads/{b}", full) or _fnmatchcase(full, f"refs/heads/{b}")
               for b in branches) or full in ("refs/*", "refs/heads/*"):
            return "merge"
        if full.startswith("refs/tags/") or full == "refs/*":
            return "release"
        return "merge" if full.startswith("refs/heads/") and "*" in full.split("/", 2)[2][:1] else None
    if dst.startswith("refs/tags/"):
        return "release"
    if dst.startswith("refs/heads/"):
        dst = dst[len("refs/heads/"):]
    elif dst.startswith("refs/"):
        return None
    return "merge" if protected(dst, branches) else None
