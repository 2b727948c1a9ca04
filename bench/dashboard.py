"""Benchmark: latency of the dashboard's ``GET /api/status`` (issue 4; a figure, not a test).

Builds a project whose ``events.jsonl`` + ``evidence.jsonl`` hold N events (default 100k: five goals,
each round a todo added, claimed, a run started and finished with evidence, the todo done and a
slot spent, plus pending gates), registers it in a temporary LOOPX_HOME, starts a real dashboard
server process (``loopx dashboard --foreground --port 0``), signs in through the launch link and
times ``GET /api/status``: first request (fold from the snapshot), one client in sequence, and C
concurrent clients (default 50), each request on a fresh connection.

Usage: python bench/dashboard.py [--events 100000] [--requests 300] [--clients 50]
Ends with one JSON line per case: {"case", "events", "requests", "median_ms", "p99_ms", ...}
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# Time what users get: modules byte-compiled once and cached. Under PYTHONDONTWRITEBYTECODE=1
# every start would recompile every loopx module and inflate each figure several times over.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from loopx.kernel.storage import registry  # noqa: E402
from loopx.kernel.storage.codec import encode  # noqa: E402
from loopx.kernel.storage.store import Store  # noqa: E402

GOALS = 5


def build(project: str, n_events: int) -> int:
    """Write a store with about ``n_events`` records; returns the exact count."""
    store, _ = Store.create(project)
    t0 = time.time() - 30 * 86400
    seq = {"events": 0, "evidence": 0}
    out = {"events": [], "evidence": []}

    def rec(stream, typ, goal, data, ts, actor="agent:bench"):
        seq[stream] += 1
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + "Z"
        out[stream].append(encode({"v": 1, "seq": seq[stream], "id": f"e{stream[:2]}{seq[stream]}", "ts": stamp,
                                   "actor": actor, "type": typ, "goal": goal, "data": data}))

    for g in range(GOALS):
        rec("events", "goal.started", f"goal-{g}", {"objective": f"bench goal {g}", "done_when": "never",
                                                   "quota": {"slots": 100000, "window": 86400}}, t0)
    i = 0
    per_round = 7
    rounds = max(1, (n_events - GOALS - 2 * GOALS) // per_round)
    step = 30 * 86400 / rounds
    while i < rounds:
        g = f"goal-{i % GOALS}"
        ts = t0 + i * step
        tid, rid, eid = f"t-{i:06x}", f"run-{i:06x}", f"ev-{i:08x}"
        rec("events", "todo.added", g, {"todo_id": tid, "title": f"todo {i}"}, ts)
        rec("events", "todo.claimed", g, {"todo_id": tid, "holder": "agent:bench", "lease_until": "2000-01-01T00:00:00Z"}, ts)
        rec("events", "run.started", g, {"run_id": rid, "todo_id": tid, "agent": "agent:bench", "mode": "work"}, ts)
        rec("evidence", "evidence.added", g, {"evidence_id": eid, "kind": "test", "summary": f"tests pass {i}",
                                              "run": rid, "todo": tid, "exit_code": 0}, ts)
        rec("events", "run.finished", g, {"run_id": rid, "result": "progress", "verified": True, "evidence": [eid]}, ts)
        rec("events", "todo.completed", g, {"todo_id": tid, "evidence": [eid]}, ts)
        rec("events", "quota.spent", g, {"run_id": rid, "slots": 1}, ts)
        i += 1
    for g in range(GOALS):
        rec("events", "todo.added", f"goal-{g}", {"todo_id": f"t-open{g}", "title": "still open"}, time.time())
        rec("events", "gate.opened", f"goal-{g}", {"gate_id": f"gate-{g:06x}", "kind": "merge",
                                                   "question": "merge?", "blocks": []}, time.time())
    for stream in ("events", "evidence"):
        with open(store.path(f"{stream}.jsonl"), "wb") as fh:
            fh.write(b"".join(out[stream]))
    store.load()  # writes the snapshot, as any first reader would
    return seq["events"] + seq["evidence"]


def start_server(home: str) -> tuple[subprocess.Popen, dict]:
    env = dict(os.environ, LOOPX_HOME=home, PYTHONPATH=os.path.join(REPO, "src"))
    proc = subprocess.Popen([sys.executable, "-m", "loopx", "dashboard", "--foreground", "--no-open", "--port", "0"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = os.path.join(home, "dashboard.json")
    for _ in range(400):
        try:
            with open(path) as fh:
                info = json.load(fh)
            if info.get("pid") == proc.pid:
                return proc, info
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the dashboard server did not start")


def get(port: int, path: str, cookie: str | None = None) -> tuple[int, bytes, float, http.client.HTTPResponse]:
    t = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body, time.perf_counter() - t, resp


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--per-client", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.join(tmp, "home")
        os.environ["LOOPX_HOME"] = home
        project = os.path.join(tmp, "proj")
        os.makedirs(project)
        t = time.perf_counter()
        n = build(project, args.events)
        print(f"built {n} events in {time.perf_counter() - t:.1f}s "
              f"({os.path.getsize(os.path.join(project, '.loopx', 'events.jsonl')) >> 20} MiB events.jsonl)")
        registry.add(project, "p-bench")
        proc, info = start_server(home)
        try:
            port = info["port"]
            from loopx.dashboard.server import launch_token

            status, _, _, resp = get(port, f"/launch?token={launch_token(info['token'])}")
            cookie = resp.getheader("Set-Cookie").split(";")[0]
            status, body, first, _ = get(port, "/api/status", cookie)
            assert status == 200, body[:200]
            goals = json.loads(body)["data"]["projects"][0]["goals"]
            print(f"first /api/status (fold from snapshot): {first * 1000:.1f} ms, {len(goals)} goals, {len(body)} bytes")
            seq_times = [get(port, "/api/status", cookie)[2] for _ in range(args.requests)]
            results = [{"case": "sequential", "events": n, "requests": len(seq_times),
                        "median_ms": round(statistics.median(seq_times) * 1000, 2),
                        "p99_ms": round(pct(seq_times, 99) * 1000, 2), "first_ms": round(first * 1000, 1)}]
            from loopx.dashboard.api import Api
            from loopx.kernel.storage import clock

            api = Api()
            listed = api.projects()
            api._status_of(listed, clock.now_iso())  # warm the folded-state cache
            raw = []
            for _ in range(30):
                t = time.perf_counter()
                api._status_of(listed, clock.now_iso())
                raw.append(time.perf_counter() - t)
            results.append({"case": "status computed afresh (in process, no per-second reuse)", "events": n,
                            "requests": len(raw), "median_ms": round(statistics.median(raw) * 1000, 2),
                            "p99_ms": round(pct(raw, 99) * 1000, 2)})
            times: list[float] = []
            lock = threading.Lock()

            def client():
                mine = [get(port, "/api/status", cookie)[2] for _ in range(args.per_client)]
                with lock:
                    times.extend(mine)

            threads = [threading.Thread(target=client) for _ in range(args.clients)]
            t = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            wall = time.perf_counter() - t
            results.append({"case": f"{args.clients} concurrent clients", "events": n, "requests": len(times),
                            "median_ms": round(statistics.median(times) * 1000, 2),
                            "p99_ms": round(pct(times, 99) * 1000, 2),
                            "throughput_rps": round(len(times) / wall, 1)})
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        for r in results:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
