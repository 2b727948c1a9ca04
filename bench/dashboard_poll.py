"""Benchmark issue 11's dashboard target: ``GET /api/status`` and ``/api/notices`` p95 with 50 open pages.

A realistic store (bench/storebuild.py, default 100k events) is registered in a temporary
LOOPX_HOME and served by a real ``loopx dashboard --foreground`` process. 50 clients, each a
thread in its own process, poll like a visible page does: every 3 s (first poll at a random
offset) the overview and the notices, each sending the ETag of its last answer in ``If-None-Match``
(an unchanged answer is 304), on a fresh connection each time; meanwhile a writer adds a todo every
second (``loopx todo add``). The project is a git repository (bench/gitrepo.py).

Usage: python bench/dashboard_poll.py [--events 100000] [--clients 50] [--seconds 30]
Prints one JSON line: {"case": "poll", "events", "clients", "requests", "not_modified", "p50_ms",
"p95_ms", "p99_ms", "max_ms", "writes", "server_cpu_s", "load", "status": {...}, "notices": {...}}
(the last two: requests, p50_ms, p95_ms, not_modified of that path).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "src"))


PATHS = ("/api/status", "/api/notices")  # what an open page polls every 3 s (app.js: refresh, pollNotices)


def client(port: int, cookie: str, seconds: float, seed: int) -> None:
    """One polling page: prints its [(ms, status, path), ...] as JSON when done."""
    rng = random.Random(seed)
    out, tags = [], {}
    end = time.monotonic() + seconds
    time.sleep(rng.uniform(0, 3))
    while time.monotonic() < end:
        start = time.perf_counter()
        for path in PATHS:
            t = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            headers = {"Cookie": cookie, "Host": f"127.0.0.1:{port}"}
            if tags.get(path):
                headers["If-None-Match"] = tags[path]
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read()
            tags[path] = resp.getheader("ETag") or tags.get(path)
            conn.close()
            out.append((round((time.perf_counter() - t) * 1000, 2), resp.status, path))
        time.sleep(max(0.0, 3.0 - (time.perf_counter() - start)))
    print(json.dumps(out))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process so far (Linux /proc; nan elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--client", nargs=4, metavar=("PORT", "COOKIE", "SECONDS", "SEED"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client:
        client(int(a.client[0]), a.client[1], float(a.client[2]), int(a.client[3]))
        return 0
    from dashboard import get, start_server
    from gitrepo import make_repo
    from storebuild import build

    from loopx.kernel.storage import registry

    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.join(tmp, "home")
        os.environ["LOOPX_HOME"] = home
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        project = make_repo(build(tmp, a.events))
        registry.add(project, "p-bench")
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "src"), LOOPX_HOME=home)
        subprocess.run([sys.executable, "-m", "loopx", "status"], cwd=project, env=env, stdout=subprocess.DEVNULL,
                       check=True)  # the first reader after a clone writes the cache
        proc, info = start_server(home)
        try:
            port = info["port"]
            from loopx.dashboard.server import launch_token

            _, _, _, resp = get(port, f"/launch?token={launch_token(info['token'])}")
            cookie = resp.getheader("Set-Cookie").split(";")[0]
            status, body, first, _ = get(port, "/api/status", cookie)
            assert status == 200, body[:200]
            clients = [subprocess.Popen([sys.executable, __file__, "--client", str(port), cookie, str(a.seconds), str(i)],
                                        env=env, stdout=subprocess.PIPE, text=True) for i in range(a.clients)]
            writes, end = 0, time.monotonic() + a.seconds
            while time.monotonic() < end:
                t = time.monotonic()
                subprocess.run([sys.executable, "-m", "loopx", "todo", "add", f"poll {writes}", "--goal-id", "goal-0",
                                "--quiet"], cwd=project, env=env, check=True)
                writes += 1
                time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
            samples = []
            for c in clients:
                out, _ = c.communicate(timeout=a.seconds + 120)
                samples += json.loads(out or "[]")
            server_cpu = _cpu_seconds(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    ms = [s[0] for s in samples]
    rec = {"case": "poll", "events": a.events, "clients": a.clients, "requests": len(ms),
           "not_modified": sum(1 for s in samples if s[1] == 304), "errors": sum(1 for s in samples if s[1] >= 400),
           "p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95), "p99_ms": pct(ms, 99), "max_ms": max(ms),
           "first_ms": round(first * 1000, 1), "writes": writes, "server_cpu_s": round(server_cpu, 2),
           "load": round(os.getloadavg()[0], 1)}
    for path in PATHS:
        sub = [s[0] for s in samples if s[2] == path]
        rec[path.rsplit("/", 1)[1]] = {"requests": len(sub), "p50_ms": pct(sub, 50), "p95_ms": pct(sub, 95),
                                       "not_modified": sum(1 for s in samples if s[2] == path and s[1] == 304)}
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
