"""Benchmark issue 11's dashboard target: ``GET /api/status`` p95 with 50 polling pages.

A realistic store (bench/storebuild.py, default 100k events) is registered in a temporary
LOOPX_HOME and served by a real ``loopx dashboard --foreground`` process. 50 clients, each a
thread in its own process, poll like the page does: every 3 s (first poll at a random offset),
sending the ETag of their last answer in ``If-None-Match`` (an unchanged overview answers 304), on
a fresh connection each time; meanwhile a writer adds a todo every second (``loopx todo add``).

Usage: python bench/dashboard_poll.py [--events 100000] [--clients 50] [--seconds 30]
Prints one JSON line: {"case": "poll", "events", "clients", "requests", "not_modified", "p50_ms",
"p95_ms", "p99_ms", "max_ms", "writes"}.
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


def client(port: int, cookie: str, seconds: float, seed: int) -> None:
    """One polling page: prints its [(ms, status), ...] as JSON when done."""
    rng = random.Random(seed)
    out, tag = [], None
    end = time.monotonic() + seconds
    time.sleep(rng.uniform(0, 3))
    while time.monotonic() < end:
        t = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Cookie": cookie, "Host": f"127.0.0.1:{port}"}
        if tag:
            headers["If-None-Match"] = tag
        conn.request("GET", "/api/status", headers=headers)
        resp = conn.getresponse()
        resp.read()
        tag = resp.getheader("ETag") or tag
        conn.close()
        out.append((round((time.perf_counter() - t) * 1000, 2), resp.status))
        time.sleep(max(0.0, 3.0 - (time.perf_counter() - t)))
    print(json.dumps(out))


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
    from storebuild import build

    from loopx.kernel.storage import registry

    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.join(tmp, "home")
        os.environ["LOOPX_HOME"] = home
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        project = build(tmp, a.events)
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
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    ms = [s[0] for s in samples]
    rec = {"case": "poll", "events": a.events, "clients": a.clients, "requests": len(ms),
           "not_modified": sum(1 for s in samples if s[1] == 304), "errors": sum(1 for s in samples if s[1] >= 400),
           "p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95), "p99_ms": pct(ms, 99), "max_ms": max(ms),
           "first_ms": round(first * 1000, 1), "writes": writes}
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
