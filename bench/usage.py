"""Benchmark: ``loopx usage --host claude-code`` on a large Claude Code transcripts folder (issue 14;
a figure, not a test).

Builds ``--mb`` megabytes of realistic transcript lines (assistant messages with usage, user lines,
tool results with long text) spread over ``--files`` session files, then times fresh processes:
the first call (a full scan), the second (nothing new: no transcript byte read), a call after one
session grew by a few KB (only the new bytes), and ``loopx quota should-run`` polling with the
folder present (its host-window check stats the files, reads none).

Usage: python bench/usage.py [--mb 200] [--files 400] [--runs 5] [--keep DIR]
Ends with one JSON line: {"command": "usage", "mb": ..., "first_s": ..., "second_s": ..., ...}
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _line(i: int, ts: str, pad: str) -> str:
    if i % 3 == 0:
        return json.dumps({"type": "user", "timestamp": ts, "uuid": f"u{i}",
                           "message": {"role": "user", "content": [{"type": "tool_result", "content": pad}]}})
    return json.dumps({"type": "assistant", "timestamp": ts, "requestId": f"req_{i}", "uuid": f"a{i}",
                       "message": {"id": f"msg_{i}", "model": "claude-sonnet-4-5", "role": "assistant",
                                   "content": [{"type": "text", "text": pad[:400]}],
                                   "usage": {"input_tokens": 12, "output_tokens": 300,
                                             "cache_creation_input_tokens": 900, "cache_read_input_tokens": 40000}}})


def build(root: str, mb: int, files: int) -> int:
    from datetime import UTC, datetime, timedelta

    base = datetime.now(UTC) - timedelta(days=30)
    per_file = mb * 1024 * 1024 // files
    pad = "x" * 1500
    step = 30 * 86400 / max(1, mb * 1024 * 1024 // 1200)  # about 30 days of messages, oldest first
    n = total = 0
    for f in range(files):
        d = os.path.join(root, "projects", f"-home-user-project{f % 20}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"session-{f:04d}.jsonl"), "w", encoding="utf-8") as fh:
            size = 0
            while size < per_file:
                ts = (base + timedelta(seconds=n * step)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
                line = _line(n, ts, pad) + "\n"
                fh.write(line)
                size += len(line)
                n += 1
            total += size
    return total


def timed(cmd: list[str], env: dict) -> tuple[float, dict]:
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t
    try:
        data = json.loads(p.stdout)["data"]
    except (ValueError, KeyError):
        data = {"error": p.stderr[-300:]}
    return dt, data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", metavar="DIR")
    args = ap.parse_args(argv)
    root = args.keep or tempfile.mkdtemp(prefix="loopx-bench-usage-")
    claude = os.path.join(root, "claude")
    home = os.path.join(root, "home")
    proj = os.path.join(root, "proj")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "src"), LOOPX_HOME=home, CLAUDE_CONFIG_DIR=claude,
               CODEX_HOME=os.path.join(root, "codex"), NO_COLOR="1", LOOPX_NO_UPDATE_CHECK="1")
    for var in ("LOOPX_AGENT", "CLAUDECODE", "CODEX_SANDBOX", "LOOPX_NOW", "PYTHONDONTWRITEBYTECODE"):
        env.pop(var, None)  # bytecode caching on, as in an installed wheel
    py = sys.executable
    usage = [py, "-m", "loopx", "usage", "--host", "claude-code", "--format", "json"]
    try:
        t = time.perf_counter()
        size = build(claude, args.mb, args.files)
        print(f"built {size / 1e6:.0f} MB in {args.files} files in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        first, d1 = timed(usage, env)
        seconds = []
        for _ in range(args.runs):
            dt, d2 = timed(usage, env)
            seconds.append(dt)
        grown = os.path.join(claude, "projects", "-home-user-project0", "session-0000.jsonl")
        with open(grown, "a", encoding="utf-8") as fh:
            for i in range(5):
                fh.write(_line(10**9 + i, time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), "y" * 1500) + "\n")
        third, d3 = timed(usage, env)
        os.makedirs(proj, exist_ok=True)
        subprocess.run([py, "-m", "loopx", "connect", "--quiet"], cwd=proj, env=env, check=True)
        subprocess.run([py, "-m", "loopx", "start-goal", "--goal-text", "bench", "--goal-id", "g", "--todo", "a"],
                       cwd=proj, env=env, check=True, capture_output=True)
        sr = [py, "-m", "loopx", "quota", "should-run", "--goal-id", "g", "--format", "json", "--skip-exit", "0"]
        subprocess.run(sr, cwd=proj, env=env, capture_output=True)
        polls = []
        for _ in range(args.runs):
            t = time.perf_counter()
            subprocess.run(sr, cwd=proj, env=env, capture_output=True)
            polls.append(time.perf_counter() - t)
        bare = []
        for _ in range(args.runs):
            t = time.perf_counter()
            subprocess.run([py, "-c", "pass"])
            bare.append(time.perf_counter() - t)
        out = {"command": "usage", "mb": round(size / 1e6), "files": args.files,
               "first_s": round(first, 3), "first_bytes_read": d1["hosts"][0]["bytes_read"] if "hosts" in d1 else d1,
               "second_s": round(statistics.median(seconds), 3),
               "second_bytes_read": d2["hosts"][0]["bytes_read"] if "hosts" in d2 else d2,
               "after_growth_s": round(third, 3),
               "after_growth_bytes_read": d3["hosts"][0]["bytes_read"] if "hosts" in d3 else d3,
               "should_run_poll_s": round(statistics.median(polls), 3), "bare_python_s": round(statistics.median(bare), 4)}
        print(json.dumps(out))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
