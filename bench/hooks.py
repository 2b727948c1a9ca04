"""Benchmark: how long the host hooks take as fresh processes (issue 5; a figure, not a test).

Builds a project with one goal (merge protected, scope src/**), N todos and a pending merge gate,
then times ``loopx hook pre-tool`` (an ordinary command, a denied push, an in-scope edit),
``loopx hook stop`` (should-run says wait_human, so the agent is let stop) and ``loopx hook
session-start`` for Claude Code payloads, next to a bare ``python -c pass``.

Usage: python bench/hooks.py [--todos 500] [--runs 15]
Ends with one JSON line per case: {"case", "todos", "median_s", "baseline_s", "ratio"}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Time what users get: modules byte-compiled once and cached. Under PYTHONDONTWRITEBYTECODE=1
# every start would recompile every loopx module and inflate each figure several times over.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from loopx import api  # noqa: E402
from loopx.kernel.write import gates, goals, todos  # noqa: E402


def timed(cmd, stdin: str, env: dict, runs: int) -> float:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, input=stdin, text=True, capture_output=True, env=env)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--todos", type=int, default=500)
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="loopx-bench-hooks-")
    env = dict(os.environ, LOOPX_HOME=os.path.join(tmp, "home"), PYTHONPATH=os.path.join(REPO, "src"))
    os.environ["LOOPX_HOME"] = env["LOOPX_HOME"]
    proj = os.path.join(tmp, "proj")
    os.makedirs(proj)
    conn = api.connect(proj, agent="bench")
    goals.start_goal(conn.store, "human:bench", objective="bench", goal_id="g1", allow=["src/**"], protect=["merge"])
    for i in range(a.todos):
        todos.add(conn.store, "human:bench", "g1", f"todo {i}")
    gates.open_gate(conn.store, "agent:bench", "g1", kind="merge", question="Merge?")
    base = {"session_id": "s", "transcript_path": "/t.jsonl", "cwd": proj, "permission_mode": "default"}
    bash = lambda c: dict(base, hook_event_name="PreToolUse", tool_name="Bash", tool_input={"command": c})  # noqa: E731
    cases = {
        "pre-tool ordinary command": ("pre-tool", bash("pytest -q")),
        "pre-tool denied push": ("pre-tool", bash("git push origin main")),
        "pre-tool in-scope edit": ("pre-tool", dict(base, hook_event_name="PreToolUse", tool_name="Edit",
                                                    tool_input={"file_path": f"{proj}/src/a.py"})),
        "stop (wait_human)": ("stop", dict(base, hook_event_name="Stop", stop_hook_active=False)),
        "session-start": ("session-start", dict(base, hook_event_name="SessionStart", source="startup")),
    }
    baseline = timed([sys.executable, "-c", "pass"], "", env, a.runs)
    for name, (event, payload) in cases.items():
        cmd = [sys.executable, "-m", "loopx", "hook", event, "--host", "claude-code"]
        timed(cmd, json.dumps(payload), env, 1)  # warm the snapshot
        med = timed(cmd, json.dumps(payload), env, a.runs)
        print(json.dumps({"case": name, "todos": a.todos, "median_s": round(med, 4), "baseline_s": round(baseline, 4),
                          "ratio": round(med / baseline, 1)}))


if __name__ == "__main__":
    main()
