"""``loopx doctor``: checks of the installation and of a project's ``.loopx/``, and safe fixes.

Every check is one function returning a dict (or a list of them)::

    {"id": "store.tail", "status": "ok" | "warning" | "error" | "skipped",
     "finding": one line, "fix": the exact fix (a command or an action) or None,
     "fixable": the name of a safe automatic fix (see FIXES) or None}

``run(project_dir)`` runs them all: installation checks always, project checks when
``project_dir`` holds a ``.loopx/`` (it never needs a readable store). ``apply_fixes(report,
actor)`` runs the safe fixes the report offers and returns what it did. A report with any
``warning`` or ``error`` is a problem (``loopx doctor`` exits 1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from loopx import __version__, config, resources, sandbox
from loopx.config import env
from loopx.dashboard import service
from loopx.errors import LoopxError
from loopx.kernel.read import hosts, worktrees
from loopx.kernel.read.verify import open_error
from loopx.kernel.storage import caches, clock, fold, gitcli, machines
from loopx.kernel.storage.clock import UTC, datetime
from loopx.kernel.storage.fs import project_dir
from loopx.kernel.storage.layout import DIRNAME
from loopx.kernel.storage.store import Store
from loopx.kernel.write import signing, signsetup
from loopx.ops import channel, fixes, hostcheck, pathcheck, storechecks
from loopx.ops.check import result
from loopx.ops.storescan import scan
from loopx.sync import skew

PROBLEM = ("warning", "error")
MIN_PYTHON = (3, 11)
CLOCK_SLACK_S = 300


class Target:
    """What the checks look at: the project (or None) and its lazily computed store scan."""

    def __init__(self, project_dir: str | None) -> None:
        self.project_dir = project_dir
        self.root = os.path.join(project_dir, DIRNAME) if project_dir else None
        self._scan: dict | None = None
        self._log_tracked: bool | None = None  # whether git tracks .loopx/ (storechecks.restore_hint)

    @property
    def scan(self) -> dict:
        """The one pass over every line (``ops.storescan.scan``), made once and shared by the checks."""
        if self._scan is None:
            self._scan = scan(self.root or "")
        return self._scan

    def store(self):
        """The project's store as doctor reads it (``_DoctorStore``: one live view, no cache written)."""
        if getattr(self, "_store", None) is None:
            self._store = _doctor_store(self)
        return self._store

    def light_state(self) -> dict:
        """A state folded from the few records the one pass picked out (gates, machines) with each
        node's chain head: what the signing, chain and anchor checks read, without the history.
        While signing is off it holds only the gates that were ever signed (all the signing check
        reads); its other counters (``meta.events``, agents) are not the store's."""
        if getattr(self, "_light", None) is None:
            state = fold.empty()
            gates = self.scan["gates"]
            # signing off: the signing check reads only the gates that end up signed, so only gates a
            # record of which carries a signature are folded (each gate's state is its own records')
            keep = gates.signed() if hasattr(gates, "signed") and not signing.enabled() else None
            for rec in gates:
                if keep is not None and rec["type"].startswith("gate.") and rec["data"]["gate_id"] not in keep:
                    continue
                fold.apply(state, rec)
            state["meta"]["chain"] = {n: dict(h) for n, h in self.scan["chain"]["heads"].items()}
            self._light = state
        return self._light


def _doctor_store(t: Target):
    """A Store whose ``load(view="live")`` is read once and writes no cache; when no live view can
    be had without folding the history (no usable cache, a checkpoint of an older loopx), it is
    ``t.light_state()``, which holds what doctor's checks read from it (chain heads, machines,
    gates). A full load (``view="full"``) is the store's own, without saving a snapshot."""
    class _DoctorStore(Store):
        _live = None

        def load(self, *, save_snapshot: bool | str = True, view: str = "full") -> dict:
            if view != "live":
                return super().load(save_snapshot=False, view=view)
            if self._live is None:
                self.format_number()
                live = caches.load_live(self)
                self._live = live if live is not None else t.light_state()
            return self._live

    assert t.root is not None, "doctor reads a store only where a project was found"
    return _DoctorStore(t.root)


# ------------------------------------------------------------------ installation
def check_python(t: Target) -> dict:
    v = sys.version_info
    found = f"Python {v.major}.{v.minor}.{v.micro} at {sys.executable}"
    if v[:2] < MIN_PYTHON:
        return result("python", "error", f"{found}; loopx needs {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+",
                      "install Python 3.11 or newer and reinstall loopx with it")
    return result("python", "ok", found)


def check_path(t: Target) -> dict:
    return pathcheck.check()


def check_install(t: Target) -> dict:
    try:
        info = channel.detect()
    except Exception as exc:  # detection reads foreign metadata; never let it break doctor
        return result("install", "warning", f"could not tell how loopx was installed: {exc}",
                      "reinstall loopx with pip, pipx or uv tool")
    finding = f"{info['summary']} (loopx {__version__})"
    meta_v = info.get("dist_version")
    if meta_v and meta_v != __version__:
        return result("install", "warning",
                      f"{info['summary']}: the installed metadata says {meta_v} but the code is {__version__}",
                      info.get("reinstall") or "reinstall loopx through the same channel")
    if info["channel"] == "unknown":
        return result("install", "warning", finding, "reinstall loopx with pip, pipx or uv tool")
    return result("install", "ok", finding)


def check_package(t: Target) -> dict:
    """The files the code needs beside it: bundled skills, examples, the dashboard's static shell."""
    wanted = {"skills": resources.data_path("skills", "loopx", "SKILL.md"),
              "examples": resources.data_path("examples", "demo-project"),
              "dashboard shell": Path(__file__).resolve().parent.parent / "dashboard" / "static" / "index.html"}
    missing = [name for name, p in wanted.items() if not p.exists()]
    if missing:
        return result("package", "error", f"this installation lacks its bundled {', '.join(missing)}",
                      "reinstall loopx through the same channel (`loopx update plan` shows the command)")
    return result("package", "ok", "bundled skills, examples and dashboard files are present")


def check_dashboard(t: Target) -> dict:
    try:
        st = service.status()
    except Exception as exc:
        return result("dashboard", "warning", f"could not read the dashboard's status: {exc}",
                      "loopx dashboard --stop, then loopx dashboard")
    if not isinstance(st, dict) or not st.get("running"):
        return result("dashboard", "ok", "not running (start it with `loopx dashboard`)")
    ver = st.get("version")
    where = st.get("url") or f"pid {st.get('pid')}"
    if ver and ver != __version__:
        return result("dashboard", "warning", f"running {where} is loopx {ver}; this is {__version__}",
                      "loopx dashboard (replaces the old server)")
    return result("dashboard", "ok", f"running at {where} (loopx {ver or __version__})")


def check_sandbox(t: Target) -> dict:
    """Whether ``loopx run`` and ``loopx sandbox`` can confine agents here (loopx.sandbox)."""
    st = sandbox.status()
    if sandbox.enforced():
        return result("sandbox", "ok", st["line"].removeprefix("sandbox: "))
    hint = ("unset LOOPX_SANDBOX" if st["mode"] == "off" else
            "Linux 5.13+ with Landlock enabled (lsm=landlock), or macOS sandbox-exec; see docs/security.md")
    return result("sandbox", "warning", st["line"].removeprefix("sandbox: "), hint)


def check_clock(t: Target) -> dict:
    fixed = env("LOOPX_NOW")
    if fixed:
        return result("clock", "warning", f"LOOPX_NOW={fixed} freezes loopx's clock (meant for tests)",
                      "unset LOOPX_NOW")
    if t.root is None:
        return result("clock", "ok", "system clock in use")
    now = datetime.now(UTC)
    # several machines' clocks are compared through the store, which format.json must make readable
    # (store.format reports it); the newest record against this clock needs only the scan
    skewed = _clock_of_machines(t, now) if t.scan["format"]["ok"] else None
    if skewed is not None:
        return skewed
    newest = max((s["newest_ts"] for s in t.scan["streams"].values() if s["newest_ts"]), default=None)
    if newest:
        try:
            ahead = (clock.parse_ts(newest) - now).total_seconds()
        except Exception:
            ahead = 0
        if ahead > CLOCK_SLACK_S:
            return result("clock", "warning",
                          f"the system clock ({clock.iso(now)}) is behind the newest event ({newest})",
                          "set the system clock right (e.g. enable NTP: `timedatectl set-ntp true`)")
    return result("clock", "ok", f"system clock {clock.iso(now.replace(microsecond=0))}")


def _clock_of_machines(t: Target, now) -> dict | None:
    """With records of several machines: the clock result naming the machine whose clock is off
    (``loopx.sync.skew.offsets``: records stamped in this clock's future), or this machine when
    most others are ahead of it; ``ok`` when the clocks agree. None for a single machine's store
    (then only this clock against the newest record)."""
    store = t.store()
    state = store.load(view="live")
    if not machines.several(state):
        return None
    state = {**state, "meta": {**state["meta"], "self_node": store.node_id()}}
    off = skew.offsets(store, state, now)
    if off["self_behind"] is not None:
        return result("clock", "warning",
                      f"this machine's clock ({clock.iso(now.replace(microsecond=0))}) is about "
                      f"{clock.format_duration(off['self_behind'])} behind most of the other machines of this store "
                      "(they stamp records in its future)",
                      "set this machine's clock right (e.g. enable NTP: `timedatectl set-ntp true`)") \
            | {"details": {"self_behind_s": off["self_behind"], "ahead": off["ahead"]}}
    if off["ahead"]:
        names = ", ".join(f"{a['host']} (node {a['node']}) by at least {clock.format_duration(a['seconds'])}"
                          for a in off["ahead"])
        return result("clock", "warning",
                      f"the clock of {names} is ahead of this machine's and the others' (records stamped "
                      f"in the future); this machine's clock {clock.iso(now.replace(microsecond=0))} agrees with the rest",
                      f"set the clock right on {off['ahead'][0]['host']} (e.g. NTP); until then loopx judges its "
                      "leases by how long they last, never by its clock") \
            | {"details": {"ahead": off["ahead"], "self_behind_s": None}}
    return result("clock", "ok", f"system clock {clock.iso(now.replace(microsecond=0))}; no other machine's records are "
                                 "stamped in its future (a clock ahead is named by the machines it is ahead of)")


# ------------------------------------------------------------------ project
def check_store(t: Target) -> list[dict]:
    return storechecks.all_checks(t)


def check_gitignore(t: Target) -> dict:
    return storechecks.gitignore(t)


def check_worktrees(t: Target) -> dict:
    """Run workspaces left under ``.loopx/worktrees/``: a turn killed with its runner (the next
    ``loopx run`` brings its work back), a sequential turn's workspace kept because its work could
    not all be brought back, a failed parallel run's (kept for a look; a finished run's is
    removed). Each is a private clone (``rm -rf``), or a linked worktree made by an older loopx."""
    kept = worktrees.listing(t.root or "")
    if not kept:
        branches = _run_branches(t.project_dir)
        if branches:
            return result("worktrees", "ok", f"no worktree of a parallel run is left behind; {len(branches)} run "
                                             f"branch(es) keep unmerged work ({', '.join(branches[:5])}"
                                             f"{' ...' if len(branches) > 5 else ''})")
        return result("worktrees", "ok", "no worktree of a parallel run is left behind")
    for w in kept:
        rec = worktrees.record(t.root or "", w["run_id"]) or {}
        w["killed"] = bool(rec) and not rec.get("kept")
        w["why"] = "killed mid-turn" if w["killed"] else (f"kept: {rec['kept']}" if rec.get("kept") else
                                                          "a failed run's, kept for a look")
    killed = [w for w in kept if w["killed"]]
    names = "; ".join(f"{w['run_id']} ({w['why']})" for w in kept[:10]) + (" ..." if len(kept) > 10 else "")
    finding = f"{len(kept)} run workspace(s) left in .loopx/worktrees/: {names}"
    if killed:
        return result("worktrees", "warning", finding,
                      f"run `loopx run` again (as cron does): before its first turn it closes {killed[0]['run_id']} "
                      f"and brings its work back into your checkout (its commits, its uncommitted files; a "
                      f"--parallel run's clone is kept for a look); or look in {killed[0]['path']}")
    return result("worktrees", "warning", finding, _remove_hint(t.project_dir, kept[0]))


def _remove_hint(project_dir: str | None, w: dict) -> str:
    """How to look at a kept workspace and remove it: a private clone is a folder (``rm -rf``), a
    linked worktree of an older loopx is git's (``git worktree remove``)."""
    path, branch = w["path"], w["branch"]
    drop = f" && git branch -D {branch}" if branch in _run_branches(project_dir) else ""
    if os.path.isdir(os.path.join(path, ".git")):
        return (f"look in {path} (`git -C {path} log --oneline -5`, `git -C {path} status`); "
                f"when done: rm -rf {path}{drop}")
    return f"look in {path}; when done: git worktree remove --force {path}{drop}"


def _run_branches(project_dir: str | None) -> list[str]:
    """``loopx/*`` branches (runs whose work waits at a gate, conflicted, or was not verified)."""
    if not project_dir or gitcli.git_dir(project_dir) is None:
        return []
    try:
        proc = gitcli.run(project_dir, "for-each-ref", "--format=%(refname:short)", "refs/heads/loopx/",
                          timeout=10, text=True)
    except gitcli.GitUnavailable:
        return []
    return proc.stdout.split() if proc.returncode == 0 else []


def check_location(t: Target) -> dict:
    return pathcheck.location(t.root or "")


def check_setup(t: Target) -> list[dict]:
    """Setup errors the runs recorded (``verify_broken``): the verify command could not run under
    the scheduler's environment, which doctor cannot see otherwise, so it reads the run's record."""
    if t.root and t.scan["format"]["ok"]:
        facts = t.scan["setup"]
        if not any(rid in facts["runs_with_error"] for rid in facts["last_runs"].values()):
            # no goal's last run recorded a setup error: what open_error answers for every goal,
            # known from the one pass without folding anything
            return [result("setup", "ok", "no run recorded a setup error")]
    try:
        # the live view holds every active goal's last run (what ``open_error`` reads), so no
        # history is folded and no snapshot is written
        store = t.store()
        store.format_number()
        state = caches.load_live(store) or store.load(save_snapshot=False)  # a standing error: worded exactly
    except LoopxError as exc:
        return [result("setup", "skipped", f"the store cannot be read: {exc.message}")]
    out = []
    for g in sorted(state["goals"].values(), key=lambda g: g["id"]):
        err = open_error(state, g) if g["status"] == "active" else None
        if not err:
            continue
        if str(err.get("reason") or "").startswith("host_"):  # the agent's host, not the verify command
            out.append(result(f"setup.{g['id']}", "error",
                              f"goal {g['id']}: {err.get('reason')}: run {err['run']}: {err.get('message')}"
                              f" (exit {err.get('exit_code')}; tried again at {hosts.retry_at(dict(err, ts=err.get('ts') or err['finished']))})",
                              f"fix the agent's host, then `loopx goal resume {g['id']}` to try at once"))
            continue
        where = ", ".join(f"{w} -> {p or 'not found'}" for w, p in (err.get("resolved") or {}).items())
        path = err.get("path")
        out.append(result(f"setup.{g['id']}", "error",
                          f"goal {g['id']}: {err.get('reason')}: run {err['run']} could not run its verify command "
                          f"`{err.get('command')}` (exit {err.get('exit_code')}"
                          + (", timed out" if err.get("timed_out") else "")
                          + f") under PATH={path if path is not None else '(unset)'}"
                          + (f"; resolved: {where}" if where else ""),
                          f"{err.get('message')}; then `loopx goal resume {g['id']}`"))
    return out or [result("setup", "ok", "no run recorded a setup error")]


def check_hosts(t: Target) -> list[dict]:
    return hostcheck.check(t.project_dir)


def check_config(t: Target) -> dict:
    """The user's config file parses (usage limits, notification targets and signing live there;
    a broken file is otherwise noticed only by the commands that write it)."""
    problem = config.user_config_problem()
    if problem:
        return result("config", "error", problem + "; the usage limits and notification targets in it are not "
                      "applied (signed approvals stay on if they were ever turned on)",
                      "fix the TOML by hand, or remove the file and set them again")
    where = config.config_path()
    return result("config", "ok", f"user config {where}" if os.path.exists(where) else "no user config (defaults)")


def check_signing(t: Target) -> list[dict]:
    """Signed approvals: the signing log chain, the allowed signers file, signer fingerprints, and
    (in a project) approvals whose signature does not verify or signatures while signing is off."""
    s = signsetup.check()
    out = []
    if not s["enabled"] and not s["entries"] and not s["problems"]:
        out.append(result("signing", "ok", "signed approvals: off (opt in with `loopx gate signing --enable --key ...`)"))
    elif s["problems"]:
        out += [result("signing", "error", p, "a human checks the signers and re-runs `loopx gate signing --enable`")
                for p in s["problems"]]
    else:
        fps = ", ".join(f"{x['principal']} {x['fingerprint']}" for x in s["signers"]) or "none"
        out.append(result("signing", "ok", f"signed approvals: {'on' if s['enabled'] else 'off'}; signers: {fps}"))
    if t.project_dir:
        state = t.light_state()  # the gates, folded from the gate records the one pass picked out
        bad = signing.unverified_approvals(state)
        if bad:
            out.append(result("signing.approvals", "error", f"approvals that do not verify: {', '.join(bad[:10])}",
                              "those gates stay closed; a human decides them again"))
        signed = [g["id"] for g in state["gates"].values() if g.get("signature")]
        if signed and not s["enabled"]:
            out.append(result("signing.off", "warning", f"signing is off, but {len(signed)} approval(s) here were signed "
                              "(was it switched off outside `loopx gate signing --disable`?)",
                              "a human checks the user config and signing-log.jsonl"))
    return out


INSTALL_CHECKS = (check_python, check_path, check_install, check_package, check_dashboard, check_sandbox, check_config,
                  check_signing)
PROJECT_CHECKS = (check_store, check_gitignore, check_worktrees, check_location, check_setup)


def find_project(project: str | None) -> tuple[str | None, dict | None]:
    """(project dir with a .loopx/, or None; a check result when ``project`` is given but unusable)."""
    if project:
        p = os.path.abspath(project)
        if os.path.isdir(os.path.join(p, DIRNAME)):
            return p, None
        return None, result("project", "warning", f"{p} is not connected to loopx",
                            f"loopx connect --project {p}")
    return project_dir(), None


def run(project: str | None = None) -> dict:
    """Run every check. Returns ``{version, project, checks, summary, problems, fixable}``."""
    project_dir, bad = find_project(project)
    t = Target(project_dir)
    checks: list[dict] = [bad] if bad else []
    if project_dir:
        try:  # the one pass first: its processes fork from a small process (the checks import much)
            t.scan  # noqa: B018
        except Exception:  # the check that reads it reports it, as it would have
            t._scan = None
    fns: tuple = (*INSTALL_CHECKS, check_clock, *(PROJECT_CHECKS if project_dir else ()), check_hosts)
    for fn in fns:
        checks.extend(_safely(fn, t))
    summary = {s: sum(1 for c in checks if c["status"] == s) for s in ("ok", "warning", "error", "skipped")}
    return {"version": __version__, "project": project_dir, "checks": checks, "summary": summary,
            "problems": summary["warning"] + summary["error"],
            "fixable": sorted({c["fixable"] for c in checks if c["fixable"] and c["status"] in PROBLEM})}


def _safely(fn, t: Target) -> list[dict]:
    """Run one check; a bug in a check becomes its own error finding, never a doctor crash."""
    try:
        r = fn(t)
    except LoopxError as exc:  # a problem of the store the check met (an unreadable node id): its own words
        return [result(fn.__name__.removeprefix("check_"), "error", exc.message, exc.hint)]
    except Exception as exc:
        name = fn.__name__.removeprefix("check_")
        return [result(name, "error", f"the check itself failed: {type(exc).__name__}: {exc}",
                       "rerun with `loopx doctor --debug` and report it")]
    return r if isinstance(r, list) else [r]


# ------------------------------------------------------------------ fixes
def apply_fixes(report: dict, actor: str) -> list[dict]:
    """Run the safe fixes ``report`` offers. Returns ``[{fix, done (bool), detail}]``."""
    t = Target(report["project"])
    done: list[dict] = []
    ran = set()
    for name in fixes.ORDER:
        fn = fixes.FIXES[name]
        if name in report["fixable"] and fn not in ran:
            ran.add(fn)
            label = "+".join(n for n in fixes.ORDER if fixes.FIXES[n] is fn and n in report["fixable"])
            try:
                detail = fn(t, actor)
                done.append({"fix": label, "done": True, "detail": detail})
            except Exception as exc:  # a fix that cannot run is reported, never a traceback
                msg = getattr(exc, "message", None) or str(exc)
                done.append({"fix": label, "done": False, "detail": f"not applied: {msg}"})
    return done

