# ruff: noqa: S603, S607
"""Benchmark issue 16 ("several machines through git"): N machines, each a process with its own
clone, against one bare remote on disk. Each machine loops ``loopx next --sync`` then
``loopx turn finish --result progress`` for ``--seconds``; afterwards every machine syncs in rounds
until all state hashes agree.

Prints one JSON line: ``{"machines", "seconds", "todos", "claims", "claims_per_min", "no_claim",
"push_retries", "errors", "converge_s", "converge_rounds", "same_hash"}``. ``push_retries`` counts
claim pushes the remote refused (compare-and-swap lost) that were then retried.

Usage: python bench/sync.py [--machines 5] [--seconds 60] [--todos 300] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def env(extra: dict | None = None) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "CODEX", "LOOPX_AGENT"))}
    e["PYTHONPATH"] = str(SRC)
    e.update({"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
              "GIT_COMMITTER_EMAIL": "b@b", "LOOPX_HOME": os.environ.get("BENCH_LOOPX_HOME", "")})
    e.update(extra or {})
    return e


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env())


def lx(clone, *args, extra=None) -> dict:
    p = subprocess.run([sys.executable, "-m", "loopx", "--project", str(clone), "--format", "json", *args],
                       capture_output=True, text=True, env=env(extra), timeout=600)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"exit_code": p.returncode, "error": {"message": p.stderr[-300:]}}


def worker(clone: str, name: str, until: float) -> None:
    """One machine: claim, finish, repeat until ``until``; prints its tallies as one JSON line."""
    t = {"claims": 0, "no_claim": 0, "push_retries": 0, "errors": 0, "resumed": 0}
    while time.time() < until:
        r = lx(clone, "--agent", name, "next", "--sync", "--goal-id", "g1", extra={"LOOPX_HOST": name})
        if r.get("exit_code") == 0 and r["data"].get("resumed"):
            t["resumed"] += 1  # the last finish did not go through: finish it now
            lx(clone, "--agent", name, "turn", "finish", "--run", r["data"]["run_id"], "--result", "progress")
        elif r.get("exit_code") == 0 and r["data"].get("started"):
            t["claims"] += 1
            t["push_retries"] += max(0, r["data"]["sync"]["claim_tries"] - 1)
            lx(clone, "--agent", name, "turn", "finish", "--run", r["data"]["run_id"], "--result", "progress")
        elif r.get("exit_code") == 1:
            t["no_claim"] += 1
        else:
            t["errors"] += 1
            code = (r.get("error") or {}).get("code", "?")
            t.setdefault("error_codes", {})[code] = t.get("error_codes", {}).get(code, 0) + 1
    print(json.dumps(t))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--machines", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--todos", type=int, default=300)
    ap.add_argument("--keep", metavar="DIR")
    ap.add_argument("--worker", nargs=3, metavar=("CLONE", "NAME", "UNTIL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], float(a.worker[2]))
        return
    root = Path(a.keep or tempfile.mkdtemp(prefix="loopx-bench-sync-"))
    os.environ["BENCH_LOOPX_HOME"] = str(root / "home")
    sys.path.insert(0, str(SRC))
    os.environ["LOOPX_HOME"] = str(root / "home")
    from loopx.cli import main as loopx_main

    remote = root / "remote.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(remote))
    clones = []
    for i in range(a.machines):
        c = root / f"m{i}"
        git(root, "clone", "-q", str(remote), str(c))
        if i == 0:
            (c / "README").write_text("bench\n")
            git(c, "add", "README")
            git(c, "commit", "-q", "-m", "init")
            git(c, "push", "-q", "origin", "main")
        clones.append(c)
    first = clones[0]
    q = ["--project", str(first), "--quiet"]
    loopx_main([*q, "connect"])
    loopx_main([*q, "start-goal", "--goal-text", "bench", "--goal-id", "g1", "--slots", "100000"])
    for i in range(a.todos):
        loopx_main([*q, "todo", "add", f"task {i}", "--goal-id", "g1"])
    lx(first, "sync")
    for c in clones[1:]:
        subprocess.run([sys.executable, "-m", "loopx", "--project", str(c), "--quiet", "connect"], env=env(), check=True)
        lx(c, "sync")
    until = time.time() + a.seconds
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(c), f"host-{i}", str(until)],
                              stdout=subprocess.PIPE, text=True, env=env()) for i, c in enumerate(clones)]
    tallies = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    elapsed = max(a.seconds, time.time() - (until - a.seconds))
    t0 = time.time()
    rounds = 0
    while True:
        rounds += 1
        hashes = {lx(c, "sync")["data"]["state_hash"] for c in clones}
        if len(hashes) == 1 or rounds >= 5:
            break
    converge = time.time() - t0
    total = {k: sum(t[k] for t in tallies) for k in ("claims", "no_claim", "push_retries", "errors", "resumed")}
    codes: dict = {}
    for t in tallies:
        for k, v in t.get("error_codes", {}).items():
            codes[k] = codes.get(k, 0) + v
    total["error_codes"] = codes
    print(json.dumps({"machines": a.machines, "seconds": round(elapsed, 1), "todos": a.todos, **total,
                      "claims_per_min": round(total["claims"] * 60 / elapsed, 1),
                      "converge_s": round(converge, 2), "converge_rounds": rounds, "same_hash": len(hashes) == 1}))
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
