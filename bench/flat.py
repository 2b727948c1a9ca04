# ruff: noqa: B023, E731
"""Benchmark issue 11 ("flat cost at any history size"): every hot command on stores of 1k to 1M
events, as a ratio to the same interpreter's bare ``python -c pass`` and with its peak RSS.

For each size it builds a realistic store (bench/storebuild.py: format 2, ends at the current
time) inside a git repository with 300 tracked files and the store committed (bench/gitrepo.py: the
fingerprint's git facts cost what they cost users) and one source file in the goals' scope changed
(an agent mid-goal), then measures, each as a fresh process of what cron, systemd and the hooks run (the ``loopx``
console script next to the interpreter when it runs this checkout, else ``python -m loopx``;
bytecode caching on, no agent markers), paired with a bare ``python -c pass`` run right before it so
load from other processes hits both alike:

- ``cold``: the first command (``status``) on a store with no cache at all (a fresh clone);
- ``status``; ``should-run warm`` (an unchanged store); ``should-run after write`` (a ``todo add``
  just before each timed call, untimed); ``todo add``; ``next`` on the claim path (the previous
  run finished with ``turn finish`` before each timed call, untimed, so every call claims);
  ``turn finish`` (``next`` before it, untimed); ``evidence add``; ``gate open``;
- ``evidence add (test)`` (a passing test, as a turn's packet asks) and ``todo done`` (a todo closed
  citing it; both added untimed before each call);
- the hooks ``pre-tool`` (an ``ls`` payload), ``pre-tool git status``, ``pre-tool denied`` (``npm
  publish``, a protected action no human approved), ``stop``, ``session-start`` (Claude Code payloads);
- ``todo list`` (no filter: the live view's todos, the older done ones counted);
- ``history --limit 20``; ``connect (fresh clone)`` (``loopx connect`` in a ``git clone`` of the
  project, its cache removed before each call); ``doctor`` and ``doctor (with snapshot)`` (after a
  full read wrote ``cache/snapshot.bin``; three runs each: not a hot path, but one run on a shared
  machine says little);
- ``next (3000 packed tags)``: the claim path in the same repository with 3,000 release tags
  packed (a mature project's clone), removed after the row;
- last, ``next (1000 open todos)``: the claim path again once a thousand more todos are open (a
  backlog that grew; a store as built has about 30);
- once, the floors (``--only floor``): a bare interpreter that imports only what a launcher adds
  (``python -m``, the console script of pip < 25) or what loopx keeps off its hot paths.

The data folder has a user config (``config.toml`` with usage limits, as ``loopx usage set``
writes): a user who set anything pays for reading it on every should-run, ``next`` and turn. And
``CLAUDE_CONFIG_DIR`` holds 1,500 Claude Code transcripts (``host_folders``), which every decision
looks at for the usage windows (``CODEX_HOME`` an empty folder: never the machine's own).

Prints one JSON line per command and size:
``{"command", "events", "median_s", "baseline_s", "ratio", "cpu_ratio", "rss_mb", "runs", "cpu_s", "load", "launcher"}``
(``cpu_ratio``: the same ratio of user + system CPU seconds, which a loaded machine disturbs less
than wall time; ``cpu_s``: the median CPU seconds of the command and its child processes, such as
doctor's pool; ``load``: the 1-minute load average after it; floors have ``events`` 0).

Usage: python bench/flat.py [--sizes 1000,10000,100000,1000000] [--runs 11] [--keep DIR] [--only CMD,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from gitrepo import clone, make_repo  # noqa: E402
from storebuild import build  # noqa: E402


def run_rss(cmd: list[str], cwd: str, env: dict, stdin: bytes | None = None) -> tuple[float, float, bytes]:
    """Like ``run`` but with this child's own peak RSS (``os.wait4``)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if stdin is not None:
        proc.stdin.write(stdin)
        proc.stdin.close()
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.decode()[-800:]}")
    CPU[0] = usage.ru_utime + usage.ru_stime
    return elapsed, usage.ru_maxrss / 1024, out


CPU = [0.0]  # CPU seconds (user + system) of the last child run_rss waited for


def peak_rss(cmd: list[str], cwd: str, env: dict, stdin: bytes | None = None) -> float:
    """Peak RSS (MB) of one more run, measured by GNU time (a forked child's own ``ru_maxrss``
    would count the benchmark's pages it inherited before ``exec``)."""
    if not os.path.exists("/usr/bin/time"):
        return float("nan")
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], cwd=cwd, env=env, input=stdin,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        return int(proc.stderr.decode().strip().splitlines()[-1]) / 1024
    except (ValueError, IndexError):
        return float("nan")


def measure(name: str, size: int, cmd_fn, proj: str, env: dict, runs: int, py: str, before=None,
            after=None) -> dict:
    """``after(stdout)``: called with each timed call's output (``next`` notes the run it started)."""
    times, base, cpu, cpu_base, rss = [], [], [], [], 0.0
    for _ in range(runs):
        if before is not None:
            before()
        base.append(run_rss([py, "-c", "pass"], proj, env)[0])
        cpu_base.append(CPU[0])
        cmd, stdin = cmd_fn()
        t, r, o = run_rss(cmd, proj, env, stdin)
        if after is not None:
            after(o)
        times.append(t)
        cpu.append(CPU[0])
    if before is not None:
        before()
    cmd, stdin = cmd_fn()  # after `before`: a call may name what it made (the run to finish, the todo to close)
    rss = peak_rss(cmd, proj, env, stdin)
    med, b = statistics.median(times), statistics.median(base)
    c, cb = statistics.median(cpu), statistics.median(cpu_base)
    return {"command": name, "events": size, "median_s": round(med, 4), "baseline_s": round(b, 4),
            "ratio": round(med / b, 2), "cpu_ratio": round(c / cb, 2) if cb else None,
            "rss_mb": round(rss, 1), "runs": runs, "cpu_s": round(c, 3), "load": round(os.getloadavg()[0], 1),
            "launcher": LAUNCHER[0]}


LAUNCHER = ["console script"]  # set by main()

# What a launcher adds before loopx's own code runs, as the same ratio (`python -m` imports runpy;
# the console script that pip < 25 writes imports re; pip >= 25 writes one that imports only sys),
# and what the standard modules loopx keeps off its hot paths would cost.
FLOORS = [
    ("floor: python -m (runpy)", "import runpy"),
    ("floor: console script of pip < 25 (re)", "import re"),
    ("floor: json, re, datetime (what loopx keeps off its hot paths)", "import json, re, datetime"),
]


def checkpoint_version(proj: str) -> str | None:
    """The fold version the newest checkpoint of ``proj``'s store was written under (None: none)."""
    folder = os.path.join(proj, ".loopx", "events")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".live.json")) if os.path.isdir(folder) else []
    if not names:
        return None
    with open(os.path.join(folder, names[-1]), encoding="utf-8") as fh:
        return str(json.load(fh).get("fold"))  # an int before fold versions carried digests


BACKLOG = 1000
BACKLOG_ROW = f"next ({BACKLOG} open todos)"  # no comma: --only splits on commas
TAGS = 3000
TAGS_ROW = f"next ({TAGS} packed tags)"


def packed_tags(proj: str, n: int, add: bool) -> None:
    """``n`` release tags on HEAD, packed (as a mature project's clone has them: ``packed-refs`` of
    about 180 KB), or removed again (``add`` False) so the repository is back as built."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=proj, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    lines = "".join(f"create refs/tags/v{i // 100}.{i % 100}.0 {head}\n" if add else f"delete refs/tags/v{i // 100}.{i % 100}.0\n"
                    for i in range(n))
    subprocess.run(["git", "update-ref", "--stdin"], cwd=proj, env=env, input=lines, text=True, check=True)
    subprocess.run(["git", "pack-refs", "--all"], cwd=proj, env=env, check=True)


def next_claims(name: str, size: int, lx: list[str], proj: str, env: dict, runs: int, py: str) -> dict:
    """``next`` on the claim path, as an agent's turns go: before each timed call the run of the one
    before is finished (its claim released, untimed) and a todo added, so the backlog never runs dry."""
    agent_env = dict(env, LOOPX_AGENT="bench")
    claimed: list[str] = []

    def call():
        return lx + ["next", "--goal-id", "goal-0", "--format", "json"], None

    def finish_last():
        run_rss(lx + ["todo", "add", "b", "--goal-id", "goal-0", "--quiet"], proj, env)
        if not claimed:
            _, _, o = run_rss(call()[0], proj, agent_env)
            claimed.append(json.loads(o)["data"]["run_id"])
        run_rss(lx + ["turn", "finish", "--run", claimed.pop(), "--result", "progress", "--quiet"], proj, agent_env)

    return measure(name, size, call, proj, agent_env, runs, py, before=finish_last,
                   after=lambda o: claimed.append(json.loads(o)["data"]["run_id"]))


def add_backlog(py: str, proj: str, env: dict, n: int) -> None:
    """``n`` more open todos in goal-0 (one write, through the library: a thousand ``todo add``
    processes would take half a minute), as in a project whose backlog grew: the live view, the
    queue and the fingerprint then hold them all. The store as built has about 30."""
    code = ("import sys\n"
            "from loopx.kernel.storage.store import Store\n"
            "from loopx.kernel.write import todos\n"
            "n = int(sys.argv[2])\n"
            "def plan(state, now):\n"
            "    drafts = []\n"
            "    todos.added_drafts(state, 'goal-0', [f'Backlog item {i}: one more part of the system to fix'\n"
            "                                         for i in range(n)], drafts)\n"
            "    return drafts\n"
            "Store.open(sys.argv[1]).transact(plan, actor='human:bench')\n")
    subprocess.run([py, "-c", code, proj, str(n)], env=env, check=True, capture_output=True)


def drop_if_other_fold(root: str, size: int, fold_version: str) -> None:
    """The cold rows time a store written by the loopx measured: a kept one whose checkpoints
    another fold version wrote is the upgrade path (every line folded once), so it is removed (with
    its clone) to be built anew."""
    proj = os.path.join(root, f"proj-{size}")
    if os.path.isdir(proj) and checkpoint_version(proj) not in (None, fold_version):
        print(f"# proj-{size}: checkpoints of another fold version, built anew", file=sys.stderr)
        shutil.rmtree(proj)
        shutil.rmtree(os.path.join(root, f"clone-{size}"), ignore_errors=True)


def work_in_progress(proj: str) -> None:
    """One tracked source file inside the goals' scope (``src/**``) changed and not committed, as in
    a project whose agent is mid-goal: `git status` lists it and `next`/`turn finish` check it
    against the scope (kernel/read/turnscope.py). Idempotent."""
    path = os.path.join(proj, "src", "pkg1", "mod1.py")
    with open(path, encoding="utf-8") as fh:
        if "# work in progress" in fh.read():
            return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("# work in progress\n")


def user_config(home: str) -> None:
    """A user config as most users have one (``loopx usage set``: limits for a host's windows):
    every should-run, ``next`` and turn reads it (loopx/config.py). Idempotent."""
    os.makedirs(home, exist_ok=True)
    path = os.path.join(home, "config.toml")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write('[usage.claude-code]\nblock_tokens = 5000000\nweek_tokens = 60000000\n')


TRANSCRIPTS = 1500  # a Claude Code user's transcripts after a few months (sessions and subagents)


def host_folders(root: str) -> dict:
    """The hosts' folders of a user who works with Claude Code (kept under ``root``, never the
    machine's own ``~/.claude`` or ``~/.codex``): ``TRANSCRIPTS`` small transcripts in 30 project
    folders, last changed over the past 90 days but for ten sessions of the last hours, which
    loopx reads for the usage windows on every decision; an empty Codex home. The environment
    variables that point loopx there. Idempotent."""
    import random

    claude = os.path.join(root, "claude")
    projects = os.path.join(claude, "projects")
    if not os.path.isdir(projects):
        rng = random.Random(5)
        now = time.time()
        for i in range(TRANSCRIPTS):
            folder = os.path.join(projects, f"-home-user-project{i % 30}")
            os.makedirs(folder, exist_ok=True)
            age = 3600 * (1 + i % 5) if i % 150 == 0 else rng.uniform(2 * 86400, 90 * 86400)
            ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - age))
            path = os.path.join(folder, f"session-{i:05d}.jsonl")
            with open(path, "w", encoding="utf-8") as fh:
                for m in range(3):
                    fh.write(json.dumps({"type": "assistant", "timestamp": ts, "requestId": f"req_{i}_{m}",
                                         "message": {"id": f"msg_{i}_{m}", "model": "claude-sonnet-4-5",
                                                     "usage": {"input_tokens": 1200, "output_tokens": 300,
                                                               "cache_creation_input_tokens": 0,
                                                               "cache_read_input_tokens": 9000}}}) + "\n")
            os.utime(path, (now - age, now - age))
        for d in [projects, *(os.path.join(projects, f) for f in os.listdir(projects))]:
            os.utime(d, (now - 3 * 86400, now - 3 * 86400))
    os.makedirs(os.path.join(root, "codex"), exist_ok=True)
    return {"CLAUDE_CONFIG_DIR": claude, "CODEX_HOME": os.path.join(root, "codex")}


def bench_env(root: str) -> dict:
    """The environment every measured command runs in: the data folder under ``root``, no colour,
    no update check, and none of the markers that make loopx act as an agent or a host's child
    (an agent name, a host's session variables, a frozen clock), bytecode caching on."""
    env = dict(os.environ, LOOPX_HOME=os.path.join(root, "home"), NO_COLOR="1", LOOPX_NO_UPDATE_CHECK="1")
    for var in ("LOOPX_AGENT", "CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CODEX_SANDBOX", "CODEX_THREAD_ID",
                "CURSOR_AGENT", "LOOPX_NOW", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH"):
        env.pop(var, None)
    return env


def launcher(py: str, env: dict) -> tuple[list[str], str]:
    """What cron, systemd and the hooks run (``loopx.resources.loopx_executable``): the ``loopx``
    console script next to ``py`` when it runs this checkout, else ``py -m loopx`` with ``src`` on
    PYTHONPATH. Returns (argv prefix, a name for the report)."""
    script = os.path.join(os.path.dirname(py), "loopx")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        where = subprocess.run([py, "-c", "import loopx; print(loopx.__file__)"], env=env,
                               capture_output=True, text=True).stdout.strip()
        if where and os.path.realpath(where).startswith(os.path.realpath(os.path.join(REPO, "src")) + os.sep):
            with open(script, encoding="utf-8", errors="replace") as fh:
                old_pip = "import re" in fh.read()  # pip < 25 wrote a template that imports re
            return [script], "console script" + (" (pip < 25: imports re)" if old_pip else "")
    return [py, "-m", "loopx"], "python -m (no console script of this checkout next to the interpreter)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--keep", metavar="DIR", help="build the stores here and keep them (reused when present)")
    ap.add_argument("--only", help="comma-separated command names to measure")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    only = set(args.only.split(",")) if args.only else None
    root = args.keep or tempfile.mkdtemp(prefix="loopx-bench-flat-")
    os.makedirs(root, exist_ok=True)
    env = bench_env(root)
    py = sys.executable
    lx, how = launcher(py, env)
    if how != "console script":
        env["PYTHONPATH"] = os.path.join(REPO, "src")
    LAUNCHER[0] = how
    print(f"# launcher: {how} ({' '.join(lx)})", file=sys.stderr)
    run_rss(lx + ["--help"], root, env)  # compile and cache the bytecode once
    user_config(os.path.join(root, "home"))
    env.update(host_folders(root))
    want = (lambda n: only is None or n in only)
    try:
        if want("floor"):
            for name, code in FLOORS:
                print(json.dumps(measure(name, 0, lambda c=code: ([py, "-c", c], None), root, env, args.runs * 3, py)),
                      flush=True)
        fold_version = subprocess.run([py, "-c", "from loopx.kernel.storage import fold; print(fold.FOLD_VERSION)"],
                                      env=env, capture_output=True, text=True, check=True).stdout.strip()
        for size in sizes:
            proj = os.path.join(root, f"proj-{size}")
            if want("cold") or want("connect (fresh clone)"):
                drop_if_other_fold(root, size, fold_version)
            if not os.path.isdir(proj):
                t = time.perf_counter()
                build(root, size)
                print(f"# built {size} events in {time.perf_counter() - t:.1f}s", file=sys.stderr)
            t = time.perf_counter()
            fresh_repo = not os.path.isdir(os.path.join(proj, ".git"))
            # as users run it: a repository with tracked files (an existing one: its store put back as
            # built, its index refreshed; the anchors of the history the last run wrote go with it)
            make_repo(proj)
            shutil.rmtree(os.path.join(root, "home", "anchors"), ignore_errors=True)
            work_in_progress(proj)
            # git's racy-clean rule: an index or file changed in the last 2 s may not be what it
            # seems, so loopx keeps no `git status` answer taken then (kernel/read/gitstatus.py); the
            # refresh and put-back above just changed them, and the first rows paid one git process
            # per call (should-run warm read 1.9x where it reads 1.3x two seconds later)
            time.sleep(2.5)
            if fresh_repo:
                print(f"# committed the {size}-event project to git in {time.perf_counter() - t:.1f}s", file=sys.stderr)
            shutil.rmtree(os.path.join(proj, ".loopx", "cache"), ignore_errors=True)
            os.makedirs(os.path.join(proj, ".loopx", "cache"), exist_ok=True)
            out = []
            if want("cold"):
                t, _, _ = run_rss(lx + ["status"], proj, env)
                # RSS by GNU time on a second cold call: a forked child's ru_maxrss counts the pages it
                # inherited from this process, which holds the store it just built
                shutil.rmtree(os.path.join(proj, ".loopx", "cache"), ignore_errors=True)
                os.makedirs(os.path.join(proj, ".loopx", "cache"), exist_ok=True)
                r = peak_rss(lx + ["status"], proj, env)
                b = statistics.median(run_rss([py, "-c", "pass"], proj, env)[0] for _ in range(5))
                out.append({"command": "cold first status", "events": size, "median_s": round(t, 3),
                            "baseline_s": round(b, 4), "ratio": round(t / b, 1), "rss_mb": round(r, 1), "runs": 1})
            else:
                run_rss(lx + ["status"], proj, env)
            add = lambda: run_rss(lx + ["todo", "add", "bench todo", "--goal-id", "goal-0", "--quiet"], proj, env)  # noqa: E731
            cases = [
                ("status", lambda: (lx + ["status"], None), None),
                ("should-run warm", lambda: (lx + ["quota", "should-run", "--goal-id", "goal-0"], None), None),
                ("should-run after write", lambda: (lx + ["quota", "should-run", "--goal-id", "goal-0"], None), add),
                ("todo add", lambda: (lx + ["todo", "add", "bench todo", "--goal-id", "goal-0", "--quiet"], None), None),
                ("evidence add", lambda: (lx + ["evidence", "add", "--goal-id", "goal-0", "--kind", "note",
                                                "--summary", "bench note", "--quiet"], None), None),
                # what a turn's packet asks an agent to record (kernel/policy/packet.py): a test that passed
                ("evidence add (test)", lambda: (lx + ["evidence", "add", "--goal-id", "goal-0", "--kind", "test",
                                                       "--summary", "pytest -q: 12 passed", "--command", "pytest -q",
                                                       "--exit-code", "0", "--quiet"], None), None),
                # plain `todo list`: the live view's todos and a count of the older done ones (issue 26)
                ("todo list", lambda: (lx + ["todo", "list"], None), None),
            ]
            for name, fn, before in cases:
                if want(name):
                    if name.startswith("should-run warm"):
                        run_rss(fn()[0], proj, env)
                    out.append(measure(name, size, fn, proj, env, args.runs, py, before))
            if want("next") or want("turn finish"):
                agent_env = dict(env, LOOPX_AGENT="bench")
                runs_open: list[str] = []

                def finish_prep():
                    _, _, o = run_rss(lx + ["next", "--goal-id", "goal-0", "--format", "json"], proj, agent_env)
                    runs_open.append(json.loads(o)["data"]["run_id"])

                def fin():
                    return lx + ["turn", "finish", "--run", runs_open[-1], "--result", "progress", "--quiet"], None

                if want("next"):
                    out.append(next_claims("next", size, lx, proj, env, args.runs, py))
                if want("turn finish"):
                    out.append(measure("turn finish", size, fin, proj, agent_env, args.runs, py, before=finish_prep))
            if want("todo done"):
                # the packet's last write-back: a todo closed citing the passing test (both added untimed)
                ids: list[str] = []

                def done_prep():
                    _, _, o = run_rss(lx + ["todo", "add", "bench done", "--goal-id", "goal-1", "--format", "json"],
                                      proj, env)
                    todo = json.loads(o)["data"]["todo_id"]
                    _, _, o = run_rss(lx + ["evidence", "add", "--goal-id", "goal-1", "--todo", todo, "--kind", "test",
                                            "--summary", "ok", "--command", "true", "--exit-code", "0", "--format",
                                            "json"], proj, env)
                    ids[:] = [todo, json.loads(o)["data"]["evidence_id"]]

                out.append(measure("todo done", size, lambda: (lx + ["todo", "done", ids[0], "--evidence", ids[1],
                                                                     "--quiet"], None),
                                   proj, env, args.runs, py, before=done_prep))
            base = {"session_id": "s", "transcript_path": "/t.jsonl", "cwd": proj, "permission_mode": "default"}
            hooks = [
                ("hook pre-tool", "pre-tool", dict(base, hook_event_name="PreToolUse", tool_name="Bash",
                                                   tool_input={"command": "ls"})),
                # an agent's most common command (git's own: no alias to look up)
                ("hook pre-tool git status", "pre-tool", dict(base, hook_event_name="PreToolUse", tool_name="Bash",
                                                              tool_input={"command": "git status"})),
                # a protected action (release) no human approved: denied on the gate state
                ("hook pre-tool denied", "pre-tool", dict(base, hook_event_name="PreToolUse", tool_name="Bash",
                                                          tool_input={"command": "npm publish"})),
                ("hook stop", "stop", dict(base, hook_event_name="Stop", stop_hook_active=False)),
                ("hook session-start", "session-start", dict(base, hook_event_name="SessionStart", source="startup")),
            ]
            for name, event, payload in hooks:
                if want(name):
                    data = json.dumps(payload).encode()
                    out.append(measure(name, size, lambda e=event, d=data: (lx + ["hook", e, "--host", "claude-code"], d),
                                       proj, env, args.runs, py))
            if want("history --limit 20"):
                out.append(measure("history --limit 20", size, lambda: (lx + ["history", "--limit", "20"], None),
                                   proj, env, max(3, args.runs // 2), py))
            if want("gate open"):
                out.append(measure("gate open", size, lambda: (lx + ["gate", "open", "--goal-id", "goal-1", "--kind",
                                                                      "custom", "--question", "ok?", "--quiet"], None),
                                   proj, env, args.runs, py))
            if want("connect (fresh clone)"):
                # the documented first command of a fresh clone of a shared goal: the store without a cache
                fresh = os.path.join(root, f"clone-{size}")
                if not os.path.isdir(fresh):
                    clone(proj, fresh)
                wipe = lambda: shutil.rmtree(os.path.join(fresh, ".loopx", "cache"), ignore_errors=True)  # noqa: E731
                out.append(measure("connect (fresh clone)", size, lambda: (lx + ["connect"], None), fresh, env,
                                   max(3, args.runs // 2), py, before=wipe))
            if want("doctor"):
                out.append(measure("doctor", size, lambda: (lx + ["doctor", "--project", proj], None), proj, env,
                                   3, py))
            if want("doctor (with snapshot)"):
                # a full read (`todo list --status done` lists every done todo) writes cache/snapshot.bin once
                if not os.path.exists(os.path.join(proj, ".loopx", "cache", "snapshot.bin")):
                    t = time.perf_counter()
                    run_rss(lx + ["todo", "list", "--status", "done", "--format", "json"], proj, env)
                    print(f"# wrote the full snapshot at {size} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
                out.append(measure("doctor (with snapshot)", size, lambda: (lx + ["doctor", "--project", proj], None),
                                   proj, env, 3, py))
            if want(TAGS_ROW):
                # a mature project's repository: thousands of packed tags (the fingerprint lists git's
                # refs); removed again after the row
                packed_tags(proj, TAGS, True)
                time.sleep(2.5)  # git's racy rule: packed-refs just changed (kernel/read/gitmemo.py)
                try:
                    out.append(next_claims(TAGS_ROW, size, lx, proj, env, args.runs, py))
                finally:
                    packed_tags(proj, TAGS, False)
            if want(BACKLOG_ROW):
                # last: the thousand todos stay until the next run puts the store back as built
                add_backlog(py, proj, env, BACKLOG)
                out.append(next_claims(BACKLOG_ROW, size, lx, proj, env, args.runs, py))
            for rec in out:
                print(json.dumps(rec), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
