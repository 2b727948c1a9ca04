"""The trial step of research experiments (issue 20): git, the measure command and the decision.

An experiment goal has its own worktree, ``.loopx/worktrees/exp-<goal>``: a private clone of the
project (``make_clone``: its own ``.git``, the project's objects read through alternates; the
user's checkout is never reset or touched) on branch ``loopx/exp/<goal>``. The project's branch of
that name is the frontier, and only loopx moves it. A trial is made in that clone (or, with
``loopx run --parallel``, in a private clone of its run detached at the frontier commit), so the
sandbox grants the agent nothing of the project's ``.git`` (issue 22); a linked worktree that
older loopx made is made a clone at the next trial (``own_worktree``). When the turn ends,
``settle`` (loopx, not the agent, outside the sandbox):

1. commits what the agent left (detached, so the branch does not move) and fetches the commit into
   the project's ``refs/loopx/trials/<trial-id>`` (``publish``: every trial stays reachable, never
   a branch);
2. when the frontier moved since the trial started, replays the change on top of the new frontier
   (``git cherry-pick``) and measures that, or records the trial ``stale`` when it no longer applies;
3. runs the measure command (and the guard command) through ``launch`` with the trial timeout, the
   whole process group killed on timeout; reads the metric (loopx.kernel.read.metrics);
4. decides ``keep`` (beats the frontier by more than ``min_delta`` and the guard passes: the branch
   moves to the commit), ``discard`` (the worktree returns to the frontier) or ``crash`` (the
   command failed, timed out or printed no metric: the tail of its output is kept), and records
   ``trial.recorded`` only if the frontier is still the one it was measured against (else step 2 again).

``launch`` is the one place that starts the measure, guard and holdout commands (so a sandbox can
wrap it). The holdout runs only in ``promote`` (a human asked); its result is written to the
user's data folder (``holdout_file``), never under ``.loopx/``, and enters the log only with the
promotion (``experiment.promoted``). Git errors raise TrialGitError (Conflict, exit 4).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

from loopx import config
from loopx.errors import Conflict, FieldError, StateError, UsageError
from loopx.guard import measuring
from loopx.kernel.policy import turn
from loopx.kernel.read import experiments, metrics, queries, worktrees
from loopx.kernel.storage import cjson, clock, fs, gitcli, ids, layout
from loopx.kernel.storage.fs import ensure_lines, locked
from loopx.kernel.storage.gitcli import GitError as TrialGitError  # one git error for loopx's own git calls
from loopx.kernel.storage.gitcli import git_dir
from loopx.kernel.write import evidence, gates, trials
from loopx.sandbox import core as sandbox
from loopx.sandbox.envscrub import scrub_env
from loopx.sandbox.verify import confine

TAIL_LINES = 30
TAIL_CHARS = 4000
KEEP_OUTPUT = 1 << 20
TRIAL_REF = "refs/loopx/trials/"
BRANCH_PREFIX = "loopx/exp/"
REPLAYS = 5


# ------------------------------------------------------------------ processes
def launch(command: str, cwd: str, timeout: float, env: dict | None = None, policy: dict | None = None,
           confined: bool = False) -> dict:
    """Run ``command`` with ``sh`` in ``cwd`` in a process group of its own; stdout and stderr
    together, the last ``KEEP_OUTPUT`` bytes kept. On timeout the whole group is killed (SIGKILL
    after SIGTERM). Where it runs: inside ``policy`` (a ``loopx.sandbox.profile`` policy) when one
    is given; with ``confined``, inside the sandbox of the turn this process serves when there is
    one (``loopx.sandbox.verify.confine``: ``loopx run``'s agent sandbox, or the policy a broker
    named), as the goal's verify commands do. Returns {exit_code (None when it could not start or
    timed out), timed_out, output, tail, duration (s)}; after a timeout the output ends with a line
    that says so. Never raises for the command's own failure; Ctrl-C or SIGTERM (KeyboardInterrupt)
    while it runs ends its whole group before it propagates."""
    started = time.monotonic()
    full_env = dict(os.environ if env is None else env)
    full_env["LOOPX_TRIAL"] = "1"
    argv: str | list[str] = command
    shell = True
    if policy is not None:  # the holdout's own profile

        full_env = scrub_env(full_env)
        full_env.update(TMPDIR=policy.get("tmpdir") or full_env.get("TMPDIR", "/tmp"), **{sandbox.INSIDE_ENV: "1"})
        argv, shell = sandbox.wrap(sandbox.shell_argv(command), policy), False
    elif confined:  # the measuring runs code the agent wrote: in the agent's sandbox

        argv, shell, full_env = confine(command, full_env)
    try:
        proc = subprocess.Popen(argv, shell=shell, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                                start_new_session=True)
    except OSError as exc:
        text = f"could not start: {exc}"
        return {"exit_code": None, "timed_out": False, "output": text, "tail": text, "duration": 0.0}
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        end_group(proc)
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            out = b""
    except BaseException:  # Ctrl-C or SIGTERM while it runs: the command and its group do not outlive loopx
        end_group(proc)
        raise
    text = (out or b"")[-KEEP_OUTPUT:].decode("utf-8", "replace")
    if timed_out:  # the command's own last words are a shell's "Terminated" at best: say why
        text = text + ("" if not text or text.endswith("\n") else "\n") + \
            f"loopx: timed out after {clock.format_duration(timeout)}; its process group was killed\n"
    return {"exit_code": None if timed_out else proc.returncode, "timed_out": timed_out, "output": text,
            "tail": tail(text), "duration": round(time.monotonic() - started, 3)}


def end_group(proc: subprocess.Popen) -> None:
    """End ``proc``'s process group (it leads one: ``start_new_session``): SIGTERM, SIGKILL after
    2 s, and SIGKILL once more for what the leader left behind in its group, even when a second
    Ctrl-C cuts the wait short."""
    if not hasattr(os, "killpg"):  # Windows: no process groups to signal
        proc.kill()
        return
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                proc.wait(timeout=2)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def tail(text: str) -> str:
    lines = (text or "").rstrip("\n").splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


# ------------------------------------------------------------------ git
def git(cwd: str, *args: str, check: bool = True, timeout: float = gitcli.TIMEOUT) -> gitcli.Result:
    """loopx's git in an experiment's folder, pinned to the folder's own git dirs (never an
    agent-planted one); text output. Raises TrialGitError (exit 4)."""
    return gitcli.git(cwd, *args, check=check, timeout=timeout,
                      hint="see `git status` in the experiment's worktree (`loopx experiment show`)")


def _identity(cwd: str) -> list[str]:
    return gitcli.identity_options(cwd)


def rev(cwd: str, what: str) -> str | None:
    p = git(cwd, "rev-parse", "-q", "--verify", what + "^{commit}", check=False)
    return p.stdout.strip() or None


def worktree_name(goal_id: str) -> str:
    return worktrees.EXPERIMENT_PREFIX + goal_id


def worktree_path(store, goal_id: str) -> str:
    return worktrees.path(store.root, worktree_name(goal_id))


def project_cwd(store, wt_path: str) -> str:
    """The project's copy inside a worktree (the worktree itself unless the project is a subfolder)."""
    pre = worktrees.prefix(store.project_dir)
    return os.path.join(wt_path, *pre.split("/")) if pre else wt_path


def check_repo(store) -> None:
    """UsageError unless the project is a git repository with a commit (what an experiment needs)."""
    if git_dir(store.project_dir) is None:
        raise UsageError(f"{store.project_dir} is not a git repository; experiments keep every trial as a commit",
                         "run `git init` and commit, then start the experiment", code="not_git")
    if rev(store.project_dir, "HEAD") is None:
        raise UsageError("the project has no commit yet; the baseline is measured on a commit",
                         "make a first commit, then start the experiment", code="no_commit")


def create_worktree(store, goal_id: str) -> dict:
    """The branch ``loopx/exp/<goal>`` at the project's current commit and the experiment's
    worktree, a private clone on it (``make_clone``).
    Returns {worktree (relative to the project), branch, base_branch, base_commit}. Raises
    UsageError when the project is not a git repository with a commit."""
    if git_dir(store.project_dir) is None:
        raise UsageError(f"{store.project_dir} is not a git repository; experiments keep every trial as a commit",
                         "run `git init` and commit, then start the experiment", code="not_git")
    base = git(store.project_dir, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip() or None
    head = rev(store.project_dir, "HEAD")
    if head is None:
        raise UsageError("the project has no commit yet; the baseline is measured on a commit",
                         "make a first commit, then start the experiment", code="no_commit")
    ensure_lines(store.path(layout.GITIGNORE), (worktrees.DIRNAME + "/",))
    path = worktree_path(store, goal_id)
    branch = BRANCH_PREFIX + goal_id
    if rev(store.project_dir, "refs/heads/" + branch):
        raise UsageError(f"branch {branch} already exists", f"delete it (`git branch -D {branch}`) or pick another goal_id",
                         code="branch_exists", details={"branch": branch, "field": "goal_id"})
    git(store.project_dir, "update-ref", "refs/heads/" + branch, head, "")  # created, never moved here
    try:
        make_clone(store, path, head, branch)
    except TrialGitError:
        git(store.project_dir, "update-ref", "-d", "refs/heads/" + branch, head, check=False)
        raise
    return {"worktree": os.path.relpath(path, store.project_dir), "branch": branch, "base_branch": base,
            "base_commit": head}


def is_clone(path: str) -> bool:
    """True for a private clone (its own ``.git`` folder); False for a linked worktree (an
    experiment started by loopx before trials ran in private clones)."""
    return os.path.isdir(os.path.join(path, ".git"))


def _source(store) -> str:
    return os.path.realpath(git_dir(store.project_dir) or store.project_dir)


def make_clone(store, path: str, commit: str, branch: str | None = None) -> None:
    """A private clone of the project at ``path`` (``gitcli.clone_shared``) checked out at
    ``commit``, on ``branch`` (the experiment's own) or detached (a parallel trial): the agent's
    commits and refs stay in its own ``.git``, and the project's objects are read through
    alternates. No remote (a push from it goes nowhere), the project's identity, and an empty
    ``.loopx/`` folder (read-only in the sandbox: nothing store-shaped is made there)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    gitcli.clone_shared(_source(store), path)
    for key in ("user.name", "user.email"):
        val = git(store.project_dir, "config", key, check=False).stdout.strip()
        if val:
            git(path, "config", key, val)
    if branch:
        git(path, "checkout", "-q", "-B", branch, commit)
    else:
        git(path, "checkout", "-q", "--detach", commit)
    for name in git(path, "for-each-ref", "--format=%(refname)", "refs/heads/").stdout.split():
        if name != "refs/heads/" + (branch or ""):
            git(path, "update-ref", "-d", name, check=False)
    git(path, "remote", "remove", "origin", check=False)
    os.makedirs(os.path.join(project_cwd(store, path), layout.DIRNAME), exist_ok=True)


def _alternates(store, path: str) -> None:
    """The clone reads the project's objects again (its ``objects/info/alternates`` is the
    agent's to write inside the sandbox: rewritten before each trial)."""
    info = os.path.join(path, ".git", "objects", "info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "alternates"), "w", encoding="utf-8") as fh:
        fh.write(os.path.join(_source(store), "objects") + "\n")


def own_worktree(store, e: dict, commit: str | None = None) -> str:
    """The experiment's own worktree, a private clone; made again when it is missing, and made
    from a linked worktree of an experiment that older loopx started (removed first: its trials
    are commits and refs of the project already; uncommitted files in it are dropped, as the next
    trial's reset would). ``commit``: where a new clone starts (default: the branch's commit)."""
    path = os.path.join(store.project_dir, e["worktree"])
    if is_clone(path):
        _alternates(store, path)
        _unlock(path)
        return path
    if os.path.lexists(path):
        git(store.project_dir, "worktree", "remove", "--force", path, check=False)
        shutil.rmtree(path, ignore_errors=True)
    git(store.project_dir, "worktree", "prune", check=False)
    start_at = commit or rev(store.project_dir, "refs/heads/" + e["branch"]) or (e.get("frontier") or {}).get("commit") \
        or e.get("base_commit")
    assert start_at is not None  # an experiment starts at a commit (create_worktree)
    make_clone(store, path, start_at, e["branch"])
    return path


def drop(store, path: str) -> None:
    """Remove a parallel trial's folder (a private clone; a linked worktree of older loopx)."""
    if is_clone(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        git(store.project_dir, "worktree", "remove", "--force", path, check=False)
    git(store.project_dir, "worktree", "prune", check=False)


def publish(store, path: str, tid: str, commit: str) -> None:
    """Point the project's ``refs/loopx/trials/<tid>`` at ``commit``, the ``HEAD`` of the trial's
    folder: from a private clone loopx fetches it (outside the sandbox, hooks off; the project's
    ``.git`` is in no grant of the agent's), then checks the ref is that commit."""
    ref = trial_ref(tid)
    if is_clone(path):
        git(store.project_dir, "fetch", "-q", "--no-tags", "--no-write-fetch-head", os.path.join(path, ".git"),
            f"+HEAD:{ref}")
        if rev(store.project_dir, ref) != commit:
            raise TrialGitError(f"the trial's commit {commit[:12]} did not reach the project's {ref}",
                                "look at the trial's folder under .loopx/worktrees/")
    else:
        _set_ref(store.project_dir, ref, commit)


def _unlock(path: str) -> None:
    """A private clone's ``.git`` is the agent's: a lock or a half-done operation it left there
    would fail loopx's commit of the trial, and a planted ``commondir`` would steer the fetch of
    the trial's commit (loopx's own calls there are pinned and never follow it)."""
    if not is_clone(path):
        return
    g = os.path.join(path, ".git")
    for name in ("index.lock", "HEAD.lock", "CHERRY_PICK_HEAD", "MERGE_HEAD", "REVERT_HEAD", "commondir"):
        try:
            os.remove(os.path.join(g, name))
        except OSError:
            pass
    for name in ("rebase-merge", "rebase-apply", "sequencer"):
        shutil.rmtree(os.path.join(g, name), ignore_errors=True)


def _commit_all(path: str, message: str) -> str | None:
    """Commit whatever is in ``path`` onto its (detached) HEAD; the new commit, or None when nothing changed."""
    git(path, "add", "-A", "--", ".", ":(exclude,glob)**/.loopx/**")
    if git(path, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return None
    git(path, *_identity(path), "commit", "-q", "--no-verify", "-m", message)
    return rev(path, "HEAD")


def _reset(path: str, commit: str, branch: str | None = None) -> None:
    """Make ``path``'s work tree exactly ``commit`` (untracked files removed, ignored ones kept)."""
    if branch:  # -B: the branch is made again where the agent deleted it in its clone
        git(path, "checkout", "-q", "-f", "-B", branch, commit)
    else:
        git(path, "checkout", "-q", "-f", "--detach", commit)
    git(path, "clean", "-q", "-f", "-d")


def _set_ref(cwd: str, ref: str, commit: str) -> None:
    git(cwd, "update-ref", ref, commit)


def trial_ref(trial_id: str) -> str:
    return TRIAL_REF + trial_id


# ------------------------------------------------------------------ measuring
def measure(e: dict, cwd: str) -> dict:
    """Run the measure (and, when it gave a metric, the guard) command in ``cwd``, inside the
    sandbox of the turn when there is one (``launch``'s ``confined``). Returns {outcome: ok|crash,
    metrics, value, reason, tail, duration, guard {exit_code, passed, timed_out} | None}."""
    timeout = float(e.get("trial_timeout") or 600)
    m = launch(e["measure"], cwd, timeout, confined=True)
    got = metrics.read(m["output"], e["metric"], e.get("metric_pattern"))
    out = {"metrics": got["metrics"], "value": got["value"], "duration": m["duration"], "tail": None, "guard": None,
           "outcome": "ok", "reason": None}
    if m["timed_out"]:
        out.update(outcome="crash", reason=f"the measure command timed out after {clock.format_duration(timeout)}",
                   tail=m["tail"])
    elif m["exit_code"] != 0:
        out.update(outcome="crash", reason=f"the measure command exited {m['exit_code']}", tail=m["tail"])
    elif got["value"] is None:
        out.update(outcome="crash", reason=f"the measure command printed no value for {e['metric']}", tail=m["tail"])
    if out["outcome"] == "ok" and e.get("guard"):
        g = launch(e["guard"], cwd, timeout, confined=True)
        out["guard"] = {"exit_code": g["exit_code"], "passed": g["exit_code"] == 0, "timed_out": g["timed_out"]}
        out["duration"] = round(out["duration"] + g["duration"], 3)
        if not out["guard"]["passed"]:
            out["tail"] = g["tail"]
    return out


def judge(e: dict, value, frontier_value, guard: dict | None) -> tuple[str, str]:
    """(keep|discard, why) for a measured trial against the frontier's value."""
    gain = experiments.improvement(e, value, frontier_value)
    need = e.get("min_delta") or 0.0
    if guard is not None and not guard["passed"]:
        return "discard", f"the guard command failed (exit {guard['exit_code']})"
    if frontier_value is None:
        return "keep", "no frontier yet"
    if gain is not None and gain > need:
        return "keep", f"{e['metric']} improved by {gain:.6g} (more than --min-delta {need:g})"
    return "discard", (f"{e['metric']} {'did not improve' if (gain or 0) <= 0 else 'improved by only ' + format(gain, '.6g')}"
                       f" (frontier {frontier_value:.6g}, --min-delta {need:g})")


# ------------------------------------------------------------------ the experiment's life
def start(store, actor: str, goal_id: str, cfg: dict, *, baseline: bool = True) -> dict:
    """Create the worktree and branch, record ``experiment.started`` and measure the baseline.
    Returns {goal_id, worktree, branch, baseline: trial dict | None}."""
    wt = create_worktree(store, goal_id)
    try:
        trials.start(store, actor, goal_id, dict(cfg, **wt))
    except BaseException:  # Ctrl-C / SIGTERM too: no branch or clone without its experiment.started
        shutil.rmtree(worktree_path(store, goal_id), ignore_errors=True)
        git(store.project_dir, "update-ref", "-d", "refs/heads/" + wt["branch"], check=False)
        raise
    out = dict(wt, goal_id=goal_id, baseline=None)
    if baseline:
        out["baseline"] = measure_baseline(store, actor, goal_id)
    return out


def _ours(store, path: str | None) -> bool:
    """A checkout under ``.loopx/worktrees/``: loopx's own (an older experiment's linked worktree,
    which loopx resets and turns into a clone), not the user's."""
    own = os.path.realpath(store.path(layout.WORKTREES)) + os.sep
    return bool(path) and os.path.realpath(str(path)).startswith(own)


def _move_branch(store, branch: str, commit: str) -> None:
    """Point the experiment's branch at ``commit`` in the project. The branch is nobody's checkout
    (the experiment works in its own clone), so git lets a user switch to it: moving it then would
    change that checkout's HEAD under its files and index (a later ``commit -a`` undoes the trial).
    Raises Conflict (``experiment_branch_checked_out``, exit 4) instead."""
    listing = git(store.project_dir, "worktree", "list", "--porcelain").stdout
    path = None
    for line in listing.splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line == f"branch refs/heads/{branch}" and not _ours(store, path):
            raise Conflict(f"the experiment's branch {branch} is checked out in {path}",
                           f"switch that checkout to another branch (`git switch -`); loopx moves {branch} itself",
                           code="experiment_branch_checked_out", details={"branch": branch, "path": path})
    git(store.project_dir, "update-ref", "refs/heads/" + branch, commit)


def measure_baseline(store, actor: str, goal_id: str) -> dict:
    """The first trial: the unchanged code at the branch's commit, measured; kept when it measured."""
    state = store.load()
    e = _known(state, goal_id)  # started by ``start`` or checked by ``experiment baseline``
    path = own_worktree(store, e)
    if e.get("frontier") is None and e["trials"]:  # measured again after a crash: the project's commit now
        head = rev(store.project_dir, "HEAD")       # (the human committed the fix there)
        if head:
            _move_branch(store, e["branch"], head)
            _reset(path, head, e["branch"])
    commit = rev(path, "HEAD")
    assert commit is not None  # the worktree was made at a commit (create_worktree) and is reset to one
    tid = _new_trial_id(state)
    _set_ref(store.project_dir, trial_ref(tid), commit)
    m = measure(e, project_cwd(store, path))
    decision = "keep" if m["outcome"] == "ok" else "crash"
    reason = "baseline" if decision == "keep" else m["reason"]
    if decision == "keep" and m["guard"] and not m["guard"]["passed"]:
        decision, reason = "crash", f"the guard command fails on the unchanged code (exit {m['guard']['exit_code']})"
    return trials.record(store, actor, goal_id, {
        "trial_id": tid, "run": None, "hypothesis": "baseline (the unchanged code)", "agent": "loopx:baseline",
        "commit": commit, "parent": None, "parent_value": None, "metrics": m["metrics"], "value": m["value"],
        "delta": None, "decision": decision, "reason": reason, "guard": m["guard"], "duration": m["duration"],
        "tail": m["tail"] if decision == "crash" else None, "baseline": True, "claims": {}})


def uncommitted_note(store, e: dict | None) -> str | None:
    """One line when files the measuring reads (``measuring.measure_files``) have uncommitted
    changes in the project: the baseline and every trial measure committed code, so such a fix is
    not what gets measured. None when they are clean, or git cannot tell."""
    files = measuring.measure_files(e, store.project_dir) if e else []
    if not files:
        return None
    try:
        res = git(store.project_dir, "status", "--porcelain", "--untracked-files=all", "--", *files, check=False)
    except (gitcli.GitError, gitcli.GitUnavailable):
        return None
    dirty = [line[3:].strip() for line in res.stdout.splitlines() if line.strip()]
    if not dirty:
        return None
    names = ", ".join(dirty[:5]) + (", ..." if len(dirty) > 5 else "")
    return (f"{names}: uncommitted changes are not measured (the baseline and the trials measure committed code); "
            f"commit them first: git commit {' '.join(dirty[:5])}")


def for_goal(state: dict, goal_id: str | None) -> dict | None:
    return experiments.get(state, goal_id)


def _new_trial_id(state: dict) -> str:
    """A trial id no recorded trial has. ``state`` may be a live view, which shows only the recent
    trials (trialfold.live_part); the experiments' counts say how many it leaves out, and the id is
    drawn long enough not to hit one of those (ids.new_id)."""
    shown = state.get("trials") or {}
    total = sum(e.get("trials", 0) for e in (state.get("experiments") or {}).values())
    return ids.new_id("trial", shown, hidden=max(0, total - len(shown)))


def _known(state: dict, goal_id: str) -> dict:
    """The experiment of ``goal_id`` where the caller knows there is one (it checked, or the goal
    has trials or runs of one): an experiment, once started, is never removed from the state."""
    e = experiments.get(state, goal_id)
    assert e is not None
    return e


def prepare(store, goal_id: str, run_id: str, *, parallel: bool) -> dict:
    """Where the turn's trial is made: {path, cwd, parallel, base (the frontier commit)}. In
    parallel mode a detached worktree of the run at the frontier; else the experiment's own,
    cleaned back to the frontier first (so a trial never starts on another one's leftovers)."""
    state = store.load(view="live")  # every experiment's summary is in the live view
    e = _known(state, goal_id)  # the callers prepare a trial turn of an experiment goal
    front = (e.get("frontier") or {}).get("commit")
    if front is None:
        raise StateError(f"experiment {goal_id} has no frontier (the baseline did not measure)",
                         "fix the measure command, then measure the baseline again", code="no_frontier",
                         details={"goal": goal_id})
    if parallel:
        path = worktrees.path(store.root, run_id)
        make_clone(store, path, front)
    else:
        _move_branch(store, e["branch"], front)  # the branch is the frontier
        path = own_worktree(store, e, front)
        _reset(path, front, e["branch"])
    return {"path": path, "cwd": project_cwd(store, path), "parallel": parallel, "base": front}


def settle(store, actor: str, run_id: str, where: dict | None = None, *, usage: dict | None = None,
           agent_failed: str | None = None) -> dict:
    """The trial of run ``run_id`` (see the module docstring). ``where``: ``prepare``'s dict (default:
    the experiment's own worktree, based on the frontier); ``usage``: the turn's tokens and cost;
    ``agent_failed``: why the agent's turn failed (recorded as a crash without measuring).
    Returns the recorded trial (trialfold's fields plus ``decision``, ``number``, ``replays``)."""
    state, run = turn.load_run(store, run_id)  # the live view, which holds the open run
    gid = run["goal"]
    e = experiments.get(state, gid)
    if e is None:
        raise UsageError(f"run {run_id} is not on an experiment goal", "look at the experiment goals",
                         code="not_an_experiment", details={"run": run_id, "action": "record"})
    if where is None:
        path = os.path.join(store.project_dir, e["worktree"])
        where = {"path": path, "cwd": project_cwd(store, path), "parallel": False,
                 "base": (e.get("frontier") or {}).get("commit")}
    path, base = where["path"], where["base"]
    said = e["pending"].get(run_id) or {}
    hypothesis = said.get("hypothesis") or "(no hypothesis stated)"
    tid = _new_trial_id(state)
    usage = usage or run.get("usage") or {}
    common = {"trial_id": tid, "run": run_id, "hypothesis": hypothesis, "agent": run.get("agent"),
              "claims": said.get("claims") or {}, "tokens": usage.get("total_tokens"),
              "cost_usd": usage.get("cost_usd"), "baseline": False}
    commit = _commit_trial(store, path, tid, hypothesis, base)
    replays = 0
    rec = None
    if agent_failed or commit is None:  # nothing to measure: decided against whatever the frontier is now
        while rec is None:
            front = _known(store.load(view="live"), gid).get("frontier") or {}
            rec = _record(store, actor, gid, dict(
                common, commit=commit or base, parent=front.get("commit"), parent_value=front.get("value"), metrics={},
                value=None, delta=None, decision="crash" if agent_failed else "discard", guard=None, duration=0.0,
                tail=None, reason=agent_failed or "the turn changed nothing"), front.get("commit"))
    else:
        measured, on = commit, base
        for _ in range(REPLAYS + 1):
            e = _known(store.load(view="live"), gid)
            front = e.get("frontier") or {}
            fcommit, fvalue = front.get("commit"), front.get("value")
            if fcommit != on:  # the frontier moved since this trial started: measure the change on top of it
                assert fcommit is not None  # a frontier, once set, only moves (a keep replaces it)
                replays += 1
                replayed = _replay(path, commit, fcommit)
                if replayed is None:
                    _set_ref(store.project_dir, trial_ref(tid), commit)  # the ref holds what the record names
                    rec = _record(store, actor, gid, dict(
                        common, commit=commit, parent=fcommit, parent_value=fvalue, metrics={}, value=None,
                        delta=None, decision="stale", guard=None, duration=0.0, tail=None, stale_of=base,
                        reason=f"the change no longer applies on the frontier {fcommit[:12]}"), ...)
                    break
                measured, on = replayed, fcommit
                publish(store, path, tid, measured)
            touched = touched_measuring(store, where["cwd"], on, measured)
            if touched:  # a trial that changed the measuring measures nothing: only a human changes it
                rec = _record(store, actor, gid, dict(
                    common, commit=measured, parent=fcommit, parent_value=fvalue, metrics={}, value=None,
                    delta=None, decision="crash", guard=None, duration=0.0, tail=None, remeasured=replays > 0,
                    reason="the trial changed what measures it (protected): " + ", ".join(touched[:5])), fcommit)
                if rec is not None:
                    break
                continue
            m = measure(e, where["cwd"])
            if m["outcome"] == "crash":
                decision, reason = "crash", m["reason"]
            else:
                decision, reason = judge(e, m["value"], fvalue, m["guard"])
            rec = _record(store, actor, gid, dict(
                common, commit=measured, parent=fcommit, parent_value=fvalue, metrics=m["metrics"], value=m["value"],
                delta=None if m["value"] is None or fvalue is None else round(m["value"] - fvalue, 12),
                decision=decision, reason=reason, guard=m["guard"], duration=m["duration"],
                tail=m["tail"] if decision == "crash" or (m["guard"] and not m["guard"]["passed"]) else None,
                remeasured=replays > 0), fcommit)
            if rec is not None:
                break
        if rec is None:
            _set_ref(store.project_dir, trial_ref(tid), commit)  # a replay may have moved it: back to the record's
            rec = _record(store, actor, gid, dict(
                common, commit=commit, parent=base, parent_value=None, metrics={}, value=None, delta=None,
                decision="stale", guard=None, duration=0.0, tail=None, stale_of=base,
                reason=f"the frontier moved {REPLAYS} times while this trial was measured"), ...)
    _after(store, e, rec, path, where)
    rec["replays"] = replays
    return rec


def _commit_trial(store, path: str, tid: str, hypothesis: str, base: str | None) -> str | None:
    """Commit the trial's work in ``path`` (what its folder holds after the turn, with any commits
    the agent made itself, as one commit on ``base``) beside the branch (only a keep moves it) and point
    ``refs/loopx/trials/<tid>`` at it; the commit, or None when the turn changed nothing (a trial
    too: its ref is then ``base``, the frontier it started on, the commit its record names)."""
    _unlock(path)
    git(path, "checkout", "-q", "--detach")
    if base is not None:  # commits the agent made itself become part of the one trial commit on base
        git(path, "reset", "-q", "--soft", base)
    commit = _commit_all(path, f"loopx trial {tid}: {hypothesis[:200]}")
    if commit is not None:
        publish(store, path, tid, commit)
    elif base is not None:
        _set_ref(store.project_dir, trial_ref(tid), base)
    return commit


def touched_measuring(store, cwd: str, before: str, after: str) -> list[str]:
    """The protected files of the measuring (``measuring.protected``: the measure, guard and
    holdout scripts, ``--protect-path`` files, the holdout data) that differ between the commits
    ``before`` and ``after``, as paths relative to the project. The guard denies such edits where
    it sees them; this catches every other way (an agent without hooks, an interpreter, a commit
    the agent made itself), so a trial is never measured by a measure command the agent changed."""
    table = measuring.protected(store.load(view="live"), store.project_dir)
    if not table:
        return []
    names = git(cwd, "diff", "--name-only", "--relative", "--no-renames", before, after, check=False).stdout.split("\n")
    out = []
    for n in (x.strip() for x in names):
        if n and any(n == p.rstrip("/") or n.startswith(p.rstrip("/") + "/") for p in table):
            out.append(n)
    return out


def _lock_path(store, gid: str) -> str:
    os.makedirs(store.path(layout.CACHE), exist_ok=True)
    return store.path(layout.experiment_lock(gid))


def _record(store, actor, gid, data, expect):
    """Record the trial if the frontier is still ``expect`` (``...``: whatever it is); None when it
    moved (measure again). A keep moves the branch under the same lock, so the branch and the log
    advance in one order."""
    with locked(_lock_path(store, gid), 600.0):
        try:
            rec = trials.record(store, actor, gid, data, expect_frontier=expect)
        except Conflict as exc:
            if getattr(exc, "code", "") == "frontier_moved":
                return None
            raise
        if rec["decision"] == "keep":
            e = experiments.get(store.load(view="live"), gid)
            try:
                _move_branch(store, e["branch"], rec["commit"])
            except Conflict:
                pass  # checked out by the user: the record is the frontier; the next trial's prepare says why it waits
    return rec


def _replay(path: str, commit: str, onto: str) -> str | None:
    """``commit``'s change (against its parent) on top of ``onto`` in ``path``; None when it conflicts."""
    git(path, "checkout", "-q", "-f", "--detach", onto)
    p = git(path, *_identity(path), "cherry-pick", "--allow-empty", commit, check=False)
    if p.returncode != 0:
        git(path, "cherry-pick", "--abort", check=False)
        _reset(path, onto)
        return None
    return rev(path, "HEAD")


def _after(store, e: dict, rec: dict, path: str, where: dict) -> None:
    """Leave the worktrees at the frontier: the experiment's own checks out its branch again."""
    if where.get("parallel"):
        drop(store, path)
        return  # the experiment's own worktree is brought to the frontier by the next `prepare`
    _to_frontier(store, path, e["branch"])


def _to_frontier(store, path: str, branch: str) -> None:
    """The experiment's own worktree on its branch at the project's frontier (the project's
    ``loopx/exp/<goal>``, which only loopx moves; a private clone's own branch follows it)."""
    front = rev(store.project_dir, "refs/heads/" + branch)
    if front is None or not os.path.isdir(path):
        return
    _reset(path, front, branch)


# ------------------------------------------------------------------ replay, promotion
def apply_trial(store, actor: str, trial_id: str, *, into: str | None = None) -> dict:
    """Bring trial ``trial_id``'s change (against its parent) back into the experiment's worktree
    (or the folder ``into``) as uncommitted changes. Returns {trial_id, into, files}. Raises
    UsageError (unknown trial, no change) and TrialGitError when it does not apply."""
    state = store.load()
    t = resolve_trial(state, trial_id)
    e = _known(state, t["goal"])  # a trial is recorded only on an experiment goal
    target = into or own_worktree(store, e)
    ref = trial_ref(t["id"])
    if t.get("baseline"):
        raise UsageError(f"trial {t['id']} is the baseline, the unchanged code: there is no change to apply",
                         "pick a trial the agent made", code="baseline_trial", details={"trial": t["id"]})
    if _own_commit(store, t["id"]) is None or rev(store.project_dir, ref + "^") is None:
        raise UsageError(f"trial {t['id']} has no commit of its own (it changed nothing)", "pick another trial",
                         code="no_trial_commit")
    diff = git(store.project_dir, "diff", "--binary", f"{ref}^", ref).stdout
    if not diff.strip():
        raise UsageError(f"trial {t['id']} changed nothing", "pick another trial", code="no_trial_change")
    p = gitcli.git(target, "apply", "--3way" if into is None else "--index", "-", data=diff, check=False, pinned=False)
    if p.returncode != 0:
        p = gitcli.git(target, "apply", "-", data=diff, check=False, pinned=False)
    if p.returncode != 0:
        why = "; ".join(line.strip() for line in p.stderr.strip().splitlines()[-3:] if line.strip())
        parent = (t.get("parent") or "")[:12]
        raise TrialGitError(f"trial {t['id']}'s change does not apply in {target}: {why[-200:]}",
                            f"apply it to a separate checkout of its parent commit {parent} (the worktree "
                            "here stays as it is)", code="trial_not_applicable",
                            details={"trial": t["id"], "parent": parent, "into": target})
    files = git(store.project_dir, "diff", "--name-only", f"{ref}^", ref).stdout.split()
    trials.applied(store, actor, t["goal"], t["id"], target)
    return {"trial_id": t["id"], "into": target, "files": files}


def resolve_trial(state: dict, given: str) -> dict:
    coll = state.get("trials") or {}
    return coll[ids.resolve("trial", given, coll)]


def diff(store, trial_id: str) -> str:
    state = store.load()
    t = resolve_trial(state, trial_id)
    ref = trial_ref(t["id"])
    if t.get("baseline") or _own_commit(store, t["id"]) is None:
        return ""  # the baseline, or a turn that changed nothing: its ref is the frontier it started on
    return git(store.project_dir, "diff", f"{ref}^", ref).stdout


def _own_commit(store, tid: str) -> str | None:
    """The commit loopx made for trial ``tid`` (its ``refs/loopx/trials/<tid>``, whose message
    loopx wrote: ``loopx trial <tid>: ...``, kept by a replay); None when the ref is missing or
    names the frontier the trial started on (a turn that changed nothing)."""
    p = git(store.project_dir, "log", "-1", "--format=%H %s", trial_ref(tid), "--", check=False)
    sha, _, subject = p.stdout.partition(" ")
    return sha if p.returncode == 0 and subject.startswith(f"loopx trial {tid}:") else None


def holdout_file(store, gate_id: str) -> str:
    """Where the holdout result of a promotion waits for the human: the user's data folder
    (outside the project, human-only for the guard), never ``.loopx/``."""
    pid = store.format_info().get("project_id") or "project"
    return os.path.join(config.data_home(), layout.holdout(pid, gate_id))


def run_holdout(store, e: dict, commit: str, confine=None) -> dict:
    """The holdout command on ``commit`` in a scratch worktree (removed after), inside the policy
    ``confine(code_dir, data_dirs, scratch)`` returns (``loopx.sandbox.holdout_policy``: the code and
    its data readable, no network, writes in the scratch folder only; None: unconfined). Returns
    {exit_code, timed_out, metrics, value, duration, tail}."""
    scratch = tempfile.mkdtemp(prefix="loopx-holdout-")
    wt = os.path.join(scratch, "wt")
    git(store.project_dir, "worktree", "add", "-q", "--detach", wt, commit)
    try:
        run_dir = project_cwd(store, wt)
        _copy_untracked(store.project_dir, run_dir, e.get("holdout_paths") or ())
        data = [os.path.join(run_dir, p) for p in e.get("holdout_paths") or ()]
        m = launch(e["holdout"], run_dir, float(e.get("trial_timeout") or 600),
                   policy=confine(wt, [os.path.dirname(p) or p for p in data], scratch) if confine else None)
        got = metrics.read(m["output"], e["metric"], e.get("metric_pattern"))
        return {"exit_code": m["exit_code"], "timed_out": m["timed_out"], "metrics": got["metrics"],
                "value": got["value"], "duration": m["duration"], "tail": m["tail"] if m["exit_code"] != 0 else None}
    finally:
        git(store.project_dir, "worktree", "remove", "--force", wt, check=False)
        git(store.project_dir, "worktree", "prune", check=False)
        try:
            os.rmdir(scratch)
        except OSError:
            pass


def _copy_untracked(project_dir: str, run_dir: str, rels) -> None:
    """Holdout data git does not track (kept out of the agent's reach entirely, docs/experiments.md)
    is copied from the project into the holdout's scratch checkout."""
    for rel in rels:
        src, dst = os.path.join(project_dir, rel), os.path.join(run_dir, rel)
        if os.path.lexists(dst) or not os.path.exists(src):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.isdir(src):
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst)


def tracked_holdout(store, rels, commits=("HEAD",)) -> list[str]:
    """The holdout paths git tracks in the project: in its index or in one of ``commits`` (a
    tracked file is in git's object store, which every trial reads through its clone's alternates:
    `git show HEAD:PATH`, no file view can hide it)."""
    out = []
    for rel in rels:
        if git(store.project_dir, "ls-files", "--error-unmatch", "--", rel, check=False).returncode == 0 or any(
                c and git(store.project_dir, "ls-tree", "-r", "--name-only", c, "--", rel, check=False).stdout.strip()
                for c in commits):
            out.append(rel)
    return out


def refuse_tracked_holdout(store, rels, commits=("HEAD",), when: str = "start the experiment") -> None:
    """StateError (exit 3, ``holdout_tracked``) when git tracks holdout data (``tracked_holdout``)."""
    tracked = tracked_holdout(store, rels, commits)
    if tracked:
        raise StateError(f"holdout data {', '.join(tracked[:3])} is tracked by git: the agent could read it from "
                         "git's object store",
                         f"untrack it (remove it from git's index, ignore it, commit), then {when}",
                         code="holdout_tracked", details={"paths": tracked, "then": when})


def read_holdout(store, gate_id: str) -> dict | None:
    try:
        return cjson.loads(fs.read_bytes(holdout_file(store, gate_id), most=fs.MOST_CACHE).decode("utf-8"))  # never waits on a FIFO
    except (OSError, ValueError):
        return None


def promote(store, actor: str, goal_id: str | None, *, as_branch: str | None = None, confine=None) -> dict:
    """Open the ``promote`` gate for the frontier: its question names the trial and the metric from
    baseline to frontier; the holdout (when the experiment has one) runs now and its result goes
    to ``holdout_file`` for the human (the gate says where to see it). Returns {gate_id, question,
    trial_id, holdout (the numbers; callers show them to a human only), holdout_file, as_branch}."""
    state = store.load()
    g = queries.resolve_goal(state, goal_id)
    e = experiments.get(state, g["id"])
    if e is None:
        raise UsageError(f"goal {g['id']} is not an experiment", "look at the goal", code="not_an_experiment",
                         details={"goal": g["id"], "action": "promote"})
    s = experiments.summary(state, g["id"])
    assert s is not None  # e, the experiment it summarises, is there (above)
    front = e.get("frontier")
    if not front or not s["kept"]:
        raise StateError(f"experiment {g['id']} has no kept improvement to promote",
                         "run trials first", code="nothing_to_promote", details={"goal": g["id"]})
    if as_branch and git(store.project_dir, "check-ref-format", "--branch", as_branch, check=False).returncode:
        raise FieldError("as_branch", f"{{field}}: {as_branch!r} is not a valid git branch name",
                         "pick a name without spaces, `..`, `~`, `^`, `:`, `?`, `*` or `[` (e.g. knn-best)",
                         code="bad_branch_name", details={"branch": as_branch})
    base_branch = e.get("base_branch")
    refuse_tracked_holdout(store, e.get("holdout_paths") or (),
                           ("HEAD", front["commit"], "refs/heads/" + base_branch if base_branch else None),
                           when="promote again")
    pending = [x for x in queries.pending_gates(state, g["id"]) if x["kind"] == "promote"]
    if pending:
        raise Conflict(f"gate {pending[0]['id']} already asks to promote {g['id']}", "a human decides it first",
                       code="promote_pending", details={"gate": pending[0]["id"], "goal": g["id"]})
    holdout = run_holdout(store, e, front["commit"], confine) if e.get("holdout") else None
    into = as_branch or e.get("base_branch") or "(the branch the experiment started from)"
    base = (e.get("baseline") or {}).get("value")
    question = (f"Promote trial {front['trial']} of experiment {g['id']} ({front['commit'][:12]}): {e['metric']} "
                f"{experiments.fmt_value(base)} (baseline) -> {experiments.fmt_value(front['value'])} (frontier), "
                f"{experiments.tally(s)}; into {'new branch ' if as_branch else ''}{into}? "
                + ("The holdout result is shown to you only (`loopx gate show` on this gate, or the dashboard)."
                   if holdout is not None else "(no holdout command)"))
    res = gates.open_gate(store, actor, g["id"], kind="promote", question=question[:1900],
                          context=cjson.dumps({"trial": front["trial"], "commit": front["commit"],
                                               "as_branch": as_branch, "into": into}))
    gid = res["gate_id"]
    path = None
    if holdout is not None:
        path = holdout_file(store, gid)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fs.atomic_write(path, cjson.dumps(dict(holdout, trial=front["trial"], commit=front["commit"])), mode=0o600)
    return {"gate_id": gid, "question": res.get("question", question), "trial_id": front["trial"], "holdout": holdout,
            "holdout_file": path, "as_branch": as_branch, "into": into, "goal_id": g["id"]}


def promote_approved(store, actor: str) -> list[dict]:
    """Merge every approved ``promote`` gate not promoted yet: the frontier commit into the branch
    the experiment started from (a fast-forward or a merge commit, never touching a checkout's
    uncommitted work), or a new branch. Records ``experiment.promoted`` with the holdout result."""
    state = store.load()
    done = []
    for gid, e in (state.get("experiments") or {}).items():
        for gate in state["gates"].values():
            if gate["goal"] != gid or gate["kind"] != "promote" or gate["status"] != "approved":
                continue
            if (e.get("promoted") or {}).get("gate") == gate["id"]:
                continue
            try:
                ctx = cjson.loads(gate.get("context") or "{}")
            except ValueError:
                continue
            done.append(_merge_promotion(store, actor, gid, e, gate, ctx))
            break
    return done


def _merge_promotion(store, actor, gid, e, gate, ctx) -> dict:
    proj = store.project_dir
    commit = ctx["commit"]
    if ctx.get("as_branch"):
        git(proj, "branch", ctx["as_branch"], commit)
        into, how = ctx["as_branch"], "branch"
    else:
        into = e.get("base_branch")
        if not into:
            raise StateError("the experiment started on a detached HEAD: nothing to merge into",
                             "promote to a new branch (as_branch)", code="no_base_branch", details={"field": "as_branch"})
        old = rev(proj, "refs/heads/" + into)
        if old is None:  # deleted since the experiment started (git would be called with no commit)
            raise StateError(f"the branch {into} the experiment started from is gone: nothing to merge into",
                             "promote to a new branch (as_branch)", code="no_base_branch", details={"field": "as_branch"})
        checked_out = git(proj, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip() == into
        if git(proj, "merge-base", "--is-ancestor", old, commit, check=False).returncode == 0:
            new, how = commit, "fast-forward"
        else:
            tree = git(proj, "merge-tree", "--write-tree", old, commit, check=False)
            if tree.returncode != 0:
                raise TrialGitError(f"the frontier conflicts with {into}", f"merge {e['branch']} by hand")
            new = git(proj, *_identity(proj), "commit-tree", tree.stdout.split()[0], "-p", old, "-p", commit,
                      "-m", f"Merge experiment {gid} (trial {ctx['trial']})").stdout.strip()
            how = "merge"
        if checked_out:
            git(proj, "merge", "-q", "--ff-only", new)
        else:
            git(proj, "update-ref", "refs/heads/" + into, new, old)
    holdout = read_holdout(store, gate["id"])
    data = {"trial_id": ctx["trial"], "gate_id": gate["id"], "commit": commit, "into": into, "how": how,
            "holdout": holdout}
    trials.promoted(store, actor, gid, data)
    return data


# ------------------------------------------------------------------ the turn around a trial
def finish_turn(store, actor: str, run_id: str, rec: dict | None, *, spend_slot, report: dict | None = None,
                note: str | None = None, result: str | None = None) -> dict:
    """Close run ``run_id`` after its trial ``rec``: a keep is verified progress (evidence: the
    measurement) and spends one slot through ``spend_slot(store, actor, run_id) -> receipt`` (the
    caller's: ``loopx.sync.shared.spend_slot``, which charges a shared goal through its remote; the
    policy layer does not talk to remotes); a discard or crash is ``no_progress`` and spends none
    (an agent that failed: ``failed``). Returns turn.finish's dict plus ``trial`` and ``spend``."""
    if rec is None:
        fin = turn.finish(store, actor, run_id, result or "failed", note=note, report=report)
        return dict(fin, trial=None, spend=None)
    keep = rec["decision"] == "keep"
    e = experiments.get(store.load(view="live"), rec["goal_id"]) or {}
    value = experiments.fmt_value(rec.get("value"))
    summary = f"trial {rec['trial_id']}: {e.get('metric')} {value} -> {rec['decision']} ({rec.get('reason') or ''})"
    ev = evidence.add(store, actor, rec["goal_id"], kind="test", summary=summary[:2000], run=run_id,
                      command=e.get("measure"), exit_code=0 if keep else 1, commit=rec.get("commit"),
                      output=(rec.get("tail") or "").encode())
    check = {"passed": keep, "evidence_id": ev["evidence_id"], "exit_code": 0 if keep else 1}
    res = result or ("progress" if keep else "no_progress")
    fin = turn.finish(store, actor, run_id, res, note=note or summary[:2000], verified_by=check, report=report)
    spend = None
    if fin.get("verified") and keep:
        spend = spend_slot(store, actor, run_id)
    return dict(fin, trial=rec, spend=spend)


def reset_worktree(store, goal_id: str, where: dict | None) -> None:
    """Put the trial's worktree back at the frontier without recording a trial (a host that could
    not work, a turn that ended blocked at a gate)."""
    e = experiments.get(store.load(view="live"), goal_id)
    if e is None:
        return
    if where and where.get("parallel"):
        drop(store, where["path"])
        return
    _to_frontier(store, os.path.join(store.project_dir, e["worktree"]), e["branch"])


def finish_by_agent(store, actor: str, run_id: str, result: str, note: str | None, *, spend_slot) -> dict | None:
    """``loopx turn finish`` on an experiment goal: the agent's ``--result`` does not decide; loopx
    measures the trial and closes the run (``blocked``: no trial, the worktree back at the
    frontier; ``spend_slot`` as in ``finish_turn``). None when the run is not an open run of an
    experiment goal."""
    state, run = turn.load_run(store, run_id)
    if run["finished"] is not None or experiments.get(state, run["goal"]) is None:
        return None
    if result == "blocked":
        reset_worktree(store, run["goal"], None)
        return finish_turn(store, actor, run_id, None, spend_slot=spend_slot, note=note, result="blocked")
    rec = settle(store, actor, run_id, None)
    out = finish_turn(store, actor, run_id, rec, spend_slot=spend_slot, note=note)
    if result != out["result"]:
        out.setdefault("warnings", []).append(
            f"--result {result} was not used: on an experiment goal loopx's own measurement decides "
            f"(trial {rec['trial_id']}: {rec['decision']})")
    return out
