"""The hot commands counted in instructions, not seconds: ``valgrind --tool=cachegrind`` gives the
same count to about 0.5% whatever else the machine runs, where a shared 2-core VM's CPU times move
by 0.2-0.4x of a bare start between runs (docs/performance.md). What it does not count: the
kernel's side of system calls (a ``stat`` is a few hundred instructions here and a microsecond or
two of system time) and git processes loopx starts (the count is of the ``loopx`` process alone).
So it shows what a change does to loopx's own work; ``bench/flat.py`` stays the measure of the
targets.

The store is ``bench/flat.py``'s (bench/storebuild.py, in a git repository of 300 files with one
source file changed, a user config and 1,500 Claude Code transcripts), put back as built and
copied to a scratch project; each command runs as its bench row runs it (``next`` on the claim
path, ``turn finish`` after a ``next``, the hooks with Claude Code payloads), ``--runs`` times.

Usage: python bench/instructions.py [--events 10000] [--runs 3] [--keep DIR]
Prints one JSON line per command: ``{"command", "events", "instructions_m" (median, millions),
"runs_m" (each run), "ratio" (to a bare ``python -c pass`` counted the same way)}``, then a table.
Needs valgrind (Debian: ``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import flat  # noqa: E402 - the bench's store, repository, user config and host folders
from gitrepo import make_repo  # noqa: E402
from storebuild import build  # noqa: E402

COUNT = re.compile(r"I\s+refs:\s+([\d,]+)")


def count(cmd: list[str], cwd: str, env: dict, stdin: str | None = None) -> tuple[float, str]:
    """(millions of instructions of ``cmd``'s own process, its stdout)."""
    p = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd],
                       cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=600)
    m = COUNT.search(p.stderr)
    if m is None:
        raise SystemExit(f"valgrind gave no count for {cmd}: {p.stderr[-300:]}")
    return int(m.group(1).replace(",", "")) / 1e6, p.stdout


class Bench:
    """The scratch project every count runs in: ``bench/flat.py``'s store of ``events`` events under
    ``root`` (built once, reused), copied to ``root/scratch`` with its caches removed, the user
    setup beside it, and each command warmed up once. ``lx``: the launcher (argv prefix), ``env``:
    the environment, ``agent``: the same with ``LOOPX_AGENT=bench``."""

    def __init__(self, root: str, events: int) -> None:
        os.makedirs(root, exist_ok=True)
        self.env = env = flat.bench_env(root)
        self.py = sys.executable
        self.lx, self.how = flat.launcher(self.py, env)
        if self.how != "console script":
            env["PYTHONPATH"] = os.path.join(flat.REPO, "src")
        flat.user_config(os.path.join(root, "home"))
        env.update(flat.host_folders(root))
        built = os.path.join(root, f"proj-{events}")
        if not os.path.isdir(built):
            build(root, events)
        make_repo(built)  # put back as built
        self.proj = proj = os.path.join(root, "scratch")
        shutil.rmtree(proj, ignore_errors=True)
        shutil.copytree(built, proj, symlinks=True)
        shutil.rmtree(os.path.join(proj, ".loopx", "cache"), ignore_errors=True)
        flat.work_in_progress(proj)
        self.agent = dict(env, LOOPX_AGENT="bench")
        for _ in range(2):  # the code file, the caches and git's stat cache written once
            self.plain(["status"])
            self.plain(["quota", "should-run"])
        time.sleep(2.5)  # git's racy rule: files changed just now are not trusted (kernel/read/gitstatus.py)

    def plain(self, extra: list[str], e: dict | None = None, stdin: str | None = None) -> str:
        """The stdout of ``loopx EXTRA`` in the scratch project, not counted."""
        return subprocess.run(self.lx + extra, cwd=self.proj, env=self.env if e is None else e, input=stdin,
                              capture_output=True, text=True).stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="build the store here and keep it (reused when present)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench/instructions.py needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    root = args.keep or tempfile.mkdtemp(prefix="loopx-bench-instr-")
    b = Bench(root, args.events)
    lx, env, proj, agent, plain, py, how = b.lx, b.env, b.proj, b.agent, b.plain, b.py, b.how
    got: dict[str, list[float]] = {}

    def note(name: str, cmd: list[str], e: dict = env, stdin: str | None = None) -> str:
        n, out = count(lx + cmd, proj, e, stdin)
        got.setdefault(name, []).append(n)
        return out

    for _ in range(args.runs):
        note("status", ["status"])
        note("should-run warm", ["quota", "should-run"])
        note("todo add", ["todo", "add", "x", "--goal-id", "goal-1", "--quiet"])
        note("should-run after write", ["quota", "should-run"])
    claim = ["next", "--goal-id", "goal-0", "--format", "json"]
    run_id = json.loads(plain(claim, agent))["data"]["run_id"]
    for _ in range(args.runs):
        note("turn finish", ["turn", "finish", "--run", run_id, "--result", "progress", "--quiet"], agent)
        plain(["todo", "add", "b", "--goal-id", "goal-0", "--quiet"])
        run_id = json.loads(note("next", claim, agent))["data"]["run_id"]
    base = {"session_id": "s", "transcript_path": "/t.jsonl", "cwd": proj, "permission_mode": "default"}
    hooks = [("hook pre-tool", "pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "Bash",
                                            "tool_input": {"command": "ls"}}),
             ("hook pre-tool denied", "pre-tool", {"hook_event_name": "PreToolUse", "tool_name": "Bash",
                                                   "tool_input": {"command": "npm publish"}}),
             # alternately a call that continues with a claimed turn and one that lets the agent stop
             ("hook stop", "stop", {"hook_event_name": "Stop", "stop_hook_active": False})]
    for name, event, payload in hooks:
        # twice uncounted first: a hook's first call writes its set into the code file (loopx.codecache)
        # and the stop hook's second, which takes the other of its two paths, cuts the set down to what
        # both load and writes it again: 100-170M instructions each that a user's later calls never pay
        for _ in range(2):
            plain(["hook", event, "--host", "claude-code"], stdin=json.dumps({**base, **payload}))
        for _ in range(args.runs):
            note(name, ["hook", event, "--host", "claude-code"], stdin=json.dumps({**base, **payload}))
    bare = statistics.median(count([py, "-c", "pass"], proj, env)[0] for _ in range(3))
    rows = []
    for name, values in got.items():
        med = statistics.median(values)
        rec = {"command": name, "events": args.events, "instructions_m": round(med, 1),
               "runs_m": [round(v, 1) for v in values], "ratio": round(med / bare, 2)}
        rows.append(rec)
        print(json.dumps(rec), flush=True)
    print(f"\nbare `python -c pass`: {bare:.1f}M instructions; launcher: {how}")
    print("| command | instructions (median) | ratio to a bare start |\n|---|---|---|")
    for r in rows:
        print(f"| `{r['command']}` | {r['instructions_m']}M | {r['ratio']}x |")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
