"""The guard's default mapping from a simple command to a gate kind, as a table.

``RULES`` maps a program's base name to its rule, ``rule(call) -> (kind, unresolved)``: ``kind`` a
gate kind (``merge``, ``release``, ``production-write``) or None, ``unresolved`` a sentence saying
what could not be known when the command may be protected (the caller then fails closed). A
program that is not in the table is never protected by the defaults. ``judge(words, ...)`` reads
one simple command through the table; a goal's own rules come first (``verdicts.command_kinds``).

What the table protects (``DEFAULT_BRANCHES`` are the protected branches):

- merge: ``git push``/``send-pack``/``subtree push``/a git alias to a protected branch, resolved by
  ``guard/gitpush.py`` as git would; ``gh pr merge``, ``gh api`` writes to ``.../merge``,
  ``glab mr merge``, a GitHub API write through ``curl``; an unknown ``gh`` subcommand (an alias)
- release: ``npm|pnpm|yarn|bun|poetry|uv|flit|hatch|pdm publish``, ``twine upload``, ``cargo
  publish``, ``gem push``, ``docker|podman push``, ``mvn deploy``, ``gradle publish*``, ``gh|glab
  release create``, pushing tags
- production-write: ``kubectl|oc apply|create|delete|...``, ``helm install|upgrade|...``,
  ``terraform|tofu|terragrunt apply|destroy|import``, ``pulumi up|destroy|update``, ``fly|flyctl
  deploy``, ``vercel --prod``, ``netlify deploy --prod``, ``firebase|serverless|sls|cdk|kamal
  deploy``, ``gcloud ... deploy``, ``aws cloudformation deploy``

Pure except the read-only ``git`` lookups of ``gitpush.Git``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (every pre-tool hook reads this table)
if TYPE_CHECKING:
    from collections.abc import Callable

    from loopx.guard.gitpush import Git

    Verdict = tuple[str | None, str | None]
    Rule = Callable[["Call"], Verdict]

DEFAULT_BRANCHES = ("main", "master")
MERGE, RELEASE, PROD = "merge", "release", "production-write"
# options whose next word is a value, per program (so `kubectl -n prod apply` finds `apply`)
_VALUE_OPTS: dict[str, set[str]] = {
    "kubectl": {"-n", "--namespace", "--context", "--cluster", "--user", "-s", "--server", "--kubeconfig", "--token",
                "--as", "--as-group", "--as-uid", "--request-timeout", "--certificate-authority", "--client-key",
                "--client-certificate", "--tls-server-name", "-v", "--v", "--profile", "--cache-dir", "-o", "--output"},
    "helm": {"-n", "--namespace", "--kube-context", "--kubeconfig", "--kube-apiserver", "--kube-token", "--kube-as-user",
             "--kube-as-group", "--kube-ca-file", "--registry-config", "--repository-config", "--repository-cache",
             "--burst-limit"},
    "docker": {"-H", "--host", "-c", "--context", "--config", "-l", "--log-level", "--tlscacert", "--tlscert",
               "--tlskey"},
    "cargo": {"-Z", "--config", "-C", "--color", "--manifest-path", "--registry", "--index", "--token", "-p",
              "--package", "--target", "--target-dir", "-j", "--jobs", "--features", "-F"},
    "npm": {"--prefix", "-w", "--workspace", "--registry", "--tag", "--access", "--otp", "-C", "--userconfig"},
    "pnpm": {"-C", "--dir", "--filter", "-F", "-w", "--workspace-dir", "--registry", "--tag", "--access", "--otp"},
    "yarn": {"--cwd", "--registry", "--tag", "--access", "--otp"},
    "bun": {"--cwd", "--registry", "--tag", "--access", "--otp", "-c", "--config"},
    "gh": {"-R", "--repo", "--hostname", "-X", "--method", "-H", "--header", "-f", "-F", "--field", "--raw-field",
           "--input", "-q", "--jq", "-t", "--template", "-p", "--preview", "--cache"},
    "glab": {"-R", "--repo"},
    "aws": {"--profile", "--region", "--output", "--endpoint-url", "--query", "--cli-read-timeout",
            "--cli-connect-timeout", "--ca-bundle", "--color"},
    "gcloud": {"--project", "--account", "--configuration", "--region", "--zone", "--format", "--verbosity",
               "--impersonate-service-account", "--billing-project"},
    "terraform": {"-chdir"}, "tofu": {"-chdir"}, "terragrunt": {"--terragrunt-working-dir", "--working-dir"},
    "pulumi": {"-s", "--stack", "-C", "--cwd"},
    "twine": {"-r", "--repository", "--repository-url", "-u", "--username", "-p", "--password"},
    "fly": {"-a", "--app", "-c", "--config", "-t", "--access-token"},
    "vercel": {"--scope", "--token", "-t", "--cwd", "-A", "--local-config", "-S"},
    "podman": {"--url", "--connection", "-c", "--root", "--runroot"},
    "gem": {"--host", "-k", "--key", "--otp"},
    "mvn": {"-f", "--file", "-s", "--settings", "-P", "--activate-profiles", "-pl", "--projects", "-D"},
}
_VALUE_OPTS.update({"oc": _VALUE_OPTS["kubectl"], "flyctl": _VALUE_OPTS["fly"], "./mvnw": _VALUE_OPTS["mvn"],
                    "mvnw": _VALUE_OPTS["mvn"]})
_GH_COMMANDS = {"pr", "issue", "repo", "release", "api", "auth", "browse", "codespace", "gist", "org", "project", "run",
                "workflow", "search", "secret", "variable", "ssh-key", "gpg-key", "label", "config", "extension",
                "extensions", "alias", "cache", "ruleset", "attestation", "completion", "status", "help", "co",
                "version", "copilot", "agent-task", "preview", "accessibility"}
# programs tried when a command's name cannot be known (`$TOOL push origin main`)
CANDIDATES = ("git", "gh", "npm", "cargo", "twine", "docker", "kubectl", "helm", "terraform", "loopx")


def verbs(prog: str, args: list[str]) -> list[str]:
    """The positional words of ``prog ARGS``: options and their values skipped (``--x=v`` too)."""
    takes = _VALUE_OPTS.get(prog, set())
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out.extend(args[i + 1:])
            break
        if a.startswith("+") and prog == "cargo" and not out:
            i += 1  # cargo +nightly
            continue
        if a.startswith("-") and len(a) > 1:
            opt, eq, _ = a.partition("=")
            if opt in takes and not eq:
                i += 1
        else:
            out.append(a)
        i += 1
    return out


class LazyGit:
    """A ``gitpush.Git`` made on first use (``branch_of`` as for ``Git``): a guard call whose
    commands never reach a git rule (``ls``, most tool calls) never imports ``gitpush``."""

    __slots__ = ("_branch_of", "_git")

    def __init__(self, branch_of=None) -> None:
        self._branch_of = branch_of
        self._git: Git | None = None

    def __getattr__(self, name: str):
        if self._git is None:
            from loopx.guard import gitpush

            self._git = gitpush.Git(self._branch_of)
        return getattr(self._git, name)


class Call:
    """One simple command under judgement: ``prog`` (the program's base name), ``args`` (the
    words after it), ``sub`` (its positional words, ``verbs``), ``first`` (``sub[0]`` or ""), and
    what the git rules need: ``branches`` (protected), ``cwd``, ``git`` (a ``gitpush.Git``),
    ``env`` (assignments in front of the command, or None)."""

    __slots__ = ("prog", "args", "sub", "first", "branches", "cwd", "git", "env")

    def __init__(self, prog: str, args: list[str], *, branches, cwd: str | None, git, env: dict | None) -> None:
        self.prog, self.args, self.branches, self.cwd, self.git, self.env = prog, args, branches, cwd, git, env
        self.sub = verbs(prog, args)
        self.first = self.sub[0] if self.sub else ""


# ------------------------------------------------------------------ rule makers (plain data rules)
def _first(kind: str, *names: str) -> Rule:
    """``kind`` when the first positional word is one of ``names``."""
    names_ = frozenset(names)
    return lambda c: (kind if c.first in names_ else None, None)


def _within(kind: str, word: str, n: int | None = None) -> Rule:
    """``kind`` when ``word`` is among the first ``n`` positional words (every one when None)."""
    return lambda c: (kind if word in c.sub[:n] else None, None)


def _starting(kind: str, *seq: str) -> Rule:
    """``kind`` when the positional words start with ``seq`` (``aws cloudformation deploy``)."""
    want = list(seq)
    return lambda c: (kind if c.sub[:len(want)] == want else None, None)


def _prefixed(kind: str, prefix: str) -> Rule:
    """``kind`` when a positional word starts with ``prefix`` (``gradle publishToMavenCentral``)."""
    return lambda c: (kind if any(s.startswith(prefix) for s in c.sub) else None, None)


def _flagged(kind: str, *flags: str, first: str | None = None) -> Rule:
    """``kind`` when one of ``flags`` is given (and the first positional word is ``first``)."""
    return lambda c: (kind if any(f in c.args for f in flags) and (first is None or c.first == first) else None, None)


def _either(*rules: Rule) -> Rule:
    """The first of ``rules`` that finds a kind."""
    def rule(c: Call) -> Verdict:
        for r in rules:
            kind, why = r(c)
            if kind or why:
                return kind, why
        return None, None
    return rule


# ------------------------------------------------------------------ rules that read more
def _git(c: Call) -> Verdict:
    from loopx.guard import gitpush

    return gitpush.git_kind(c.args, c.cwd, c.branches, c.git, run_alias=_alias_judge(c.branches, c.git), env=c.env)


def _git_command(c: Call) -> Verdict:
    """``git-push``/``git-send-pack`` run by their own names (no aliases, no environment)."""
    from loopx.guard import gitpush

    return gitpush.git_kind([c.prog[4:], *c.args], c.cwd, c.branches, c.git)


def _alias_judge(branches, git):
    def run(script: str, cwd):
        from loopx.guard import shell

        worst: Verdict = (None, None)
        for s in shell.commands(script, cwd=cwd):
            kind, why = judge(s.words, branches=branches, cwd=s.cwd, git=git, env=s.env)
            if kind == MERGE and not why:
                return kind, None
            if kind or why:
                worst = (kind, why)
        return worst
    return run


def _gh(c: Call) -> Verdict:
    if c.first and c.first not in _GH_COMMANDS:
        return MERGE, f"`gh {c.first}` is not a gh command loopx knows; it may be a gh alias for a merge"
    sub = c.sub
    if sub[:2] == ["pr", "merge"]:
        return MERGE, None
    if sub[:2] == ["release", "create"] or sub[:2] == ["release", "upload"]:
        return RELEASE, None
    if sub[:1] == ["api"] and len(sub) > 1:
        return _api_kind(c.args, sub[1]), None
    return None, None


def _curl(c: Call) -> Verdict:
    urls = [a for a in c.args if "api.github.com" in a]
    return (_api_kind(c.args, urls[0]), None) if urls else (None, None)


def _api_method(args: list[str]) -> str:
    method = None
    for i, a in enumerate(args):
        if a in ("-X", "--method", "--request") and i + 1 < len(args):
            method = args[i + 1]
        elif a.startswith("--method=") or a.startswith("--request="):
            method = a.split("=", 1)[1]
        elif a.startswith("-X") and len(a) > 2:
            method = a[2:]
    fields = any(a in ("-f", "-F", "--field", "--raw-field", "--input", "-d", "--data") for a in args)
    return (method or ("POST" if fields else "GET")).upper()


def _api_kind(args: list[str], path: str) -> str | None:
    """The kind of a GitHub API call (``gh api PATH``, ``curl https://api.github.com/...``)."""
    method = _api_method(args)
    body = " ".join(args)
    if "mergePullRequest" in body or "enablePullRequestAutoMerge" in body:
        return MERGE
    if method == "GET":
        return None
    p = path.split("?", 1)[0].rstrip("/")
    if p.endswith("/merge") or p.endswith("/merges") or "/git/refs/heads/" in p or p.endswith("/git/refs"):
        return MERGE
    if p.endswith("/releases") or "/git/refs/tags" in p:
        return RELEASE
    return None


def _container(c: Call) -> Verdict:
    """``docker``/``podman``: a push of an image, or a build that pushes (``--push``, a registry output)."""
    sub = c.sub
    if c.first == "push" or sub[:2] in (["image", "push"], ["manifest", "push"], ["compose", "push"],
                                         ["trust", "sign"]):
        return RELEASE, None
    if ("buildx" in sub[:1] or c.first in ("build", "bake")) and any(
            a in ("--push", "--output=type=registry") or a.startswith("--push=") or "type=registry" in a
            for a in c.args):
        return RELEASE, None
    return None, None


_KUBE = ("apply", "create", "delete", "replace", "patch", "edit", "scale", "rollout", "set", "label", "annotate",
         "drain", "run", "expose", "autoscale", "cordon", "taint")

RULES: dict[str, Rule] = {
    "git": _git,
    "git-push": _git_command, "git-send-pack": _git_command,
    "gh": _gh,
    "glab": _either(_starting(MERGE, "mr", "merge"), _starting(RELEASE, "release", "create")),
    "curl": _curl,
    "docker": _container, "podman": _container,
    # publishing a package
    **dict.fromkeys(("npm", "pnpm", "yarn", "bun", "poetry", "uv", "flit", "hatch", "pdm"), _within(RELEASE, "publish", 2)),
    "twine": _first(RELEASE, "upload"),
    "cargo": _first(RELEASE, "publish", "release"),
    "gem": _first(RELEASE, "push"),
    **dict.fromkeys(("mvn", "./mvnw", "mvnw"), _within(RELEASE, "deploy")),
    **dict.fromkeys(("gradle", "./gradlew", "gradlew"), _prefixed(RELEASE, "publish")),
    # writing to production
    **dict.fromkeys(("kubectl", "oc"), _first(PROD, *_KUBE)),
    "helm": _first(PROD, "install", "upgrade", "uninstall", "delete", "rollback"),
    **dict.fromkeys(("terraform", "tofu", "terragrunt"), _first(PROD, "apply", "destroy", "import")),
    "pulumi": _first(PROD, "up", "destroy", "update"),
    **dict.fromkeys(("fly", "flyctl"), _first(PROD, "deploy")),
    "vercel": _flagged(PROD, "--prod", "--production"),
    "netlify": _flagged(PROD, "--prod", first="deploy"),
    **dict.fromkeys(("firebase", "serverless", "sls", "cdk", "kamal"), _first(PROD, "deploy")),
    "gcloud": _within(PROD, "deploy"),
    "aws": _starting(PROD, "cloudformation", "deploy"),
}


# ------------------------------------------------------------------ one simple command
def judge(words: list[str], *, branches=DEFAULT_BRANCHES, cwd: str | None = None, git=None,
          branch_of=None, env: dict | None = None) -> Verdict:
    """``(kind, unresolved)`` for one simple command (``words``: program base name first) under the
    default mapping: ``kind`` a gate kind or None; ``unresolved`` says what could not be known when
    the command may be protected (the caller then fails closed for a protected kind, ``kind``
    being the kind it may be). ``git``: a ``gitpush.Git`` (one is made from ``branch_of``)."""
    from loopx.guard import shell

    if git is None:
        git = LazyGit(branch_of)
    if not words:
        return None, None
    prog, args = words[0], words[1:]
    if shell.is_unknown(prog):
        for cand in CANDIDATES:
            kind, _ = judge([cand, *args], branches=branches, cwd=cwd, git=git)
            if kind:
                return kind, f"the program name comes from a value loopx cannot see; as `{cand}` it would be a {kind} action"
        return None, None
    if cwd and str(cwd).startswith(shell.UNKNOWN) and prog == "git":
        from loopx.guard import gitpush

        kind, why = gitpush.git_kind(args, None, branches, git, run_alias=_alias_judge(branches, git))
        if kind or why or "push" in args:
            return kind or MERGE, "the directory it runs in (after `cd`) cannot be known"
        return None, None
    rule = RULES.get(prog)
    if rule is None:
        return None, None
    return rule(Call(prog, args, branches=branches, cwd=cwd, git=git, env=env))
