"""``loopx run --parallel N``: N runner processes on one goal (docs/multi-agent.md).

``check(store, goal_id, n, name) -> (goal_id, base_branch)`` refuses before anything starts: N
above the goal's ``max_parallel`` (UsageError ``max_parallel``, exit 2; raising it is a human
decision), a runner name ``<name>-<N>`` that is not a valid agent name, a project that is not a
git repository or has no current branch.

``spawn(argv, n, env, cwd) -> dict`` starts ``n`` child ``loopx run`` processes with the same
options in JSON mode, waits for all of them (Ctrl-C reaches every child through the terminal's
process group; each closes its own run, and the parent still waits), and returns::

    {"parallel": n, "runners": [{"pid", "exit_code", "agent", "slot", "turns", "stopped_because",
                                 "error": {code, message, hint}|None, "merges"}],
     "turns": [every child's turns], "exit_code": int, "interrupted": bool}

Each child takes its own runner slot, acts as ``<name>-<slot>`` and works in one git worktree per
turn (``loopx.runner.loop``). ``exit_code`` is 130 when any child was interrupted, else the
largest child exit code.
"""

from __future__ import annotations

import json
import subprocess
import sys

from loopx.errors import UsageError
from loopx.kernel.policy import decide
from loopx.kernel.read import queries
from loopx.kernel.storage import clock
from loopx.kernel.storage.ids import check_agent_name
from loopx.kernel.write import goals
from loopx.runner import worktree


def check(store, goal_id: str | None, n: int, name: str = "shell") -> tuple[str, str]:
    state = store.load(view="live")
    if goal_id is None:
        gid = store.read(lambda st: decide.evaluate(st, clock.now()), state).get("goal_id")
        if gid is None:
            raise UsageError("no active goal to run in parallel", "start one: `loopx start-goal --goal-text ...`",
                             code="no_active_goal")
    else:
        gid = queries.resolve_goal(state, goal_id)["id"]
    limit = goals.max_parallel(state["goals"][gid])
    if n > limit:
        raise UsageError(f"goal {gid} allows {limit} runner(s) at once; --parallel {n} asks for more",
                         f"a human raises it: `loopx goal update {gid} --max-parallel {n}`", code="max_parallel")
    check_agent_name(f"{name}-{n}")  # the longest runner name
    return gid, worktree.base_branch(store.project_dir)


def spawn(argv: list[str], n: int, env: dict, cwd: str) -> dict:
    procs = []
    for _ in range(n):
        procs.append(subprocess.Popen([sys.executable, "-m", "loopx", *argv, "--format", "json"], cwd=cwd, env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE))
    interrupted = False
    outs = []
    for p in procs:
        while True:
            try:
                stdout, _ = p.communicate()
                break
            except KeyboardInterrupt:  # the children got the same signal: let them close their runs
                interrupted = True
        outs.append((p, stdout))
    runners: list[dict] = []
    turns: list[dict] = []
    for p, stdout in outs:
        doc = _parse(stdout)
        data = doc.get("data") or {}
        err = doc.get("error")
        runners.append({"pid": p.pid, "exit_code": p.returncode, "agent": data.get("agent"), "slot": data.get("slot"),
                        "turns": data.get("turns") or [], "stopped_because": data.get("stopped_because"),
                        "stop": data.get("stop"), "merges": data.get("merges") or [],
                        "error": {k: err.get(k) for k in ("code", "message", "hint")} if isinstance(err, dict) else None})
        turns.extend(data.get("turns") or [])
    codes: list[int] = [r["exit_code"] for r in runners]
    code = 130 if (interrupted or 130 in codes) else max(codes or [0])
    return {"parallel": n, "runners": runners, "turns": turns, "exit_code": code, "interrupted": interrupted}


def _parse(stdout: bytes) -> dict:
    for line in reversed((stdout or b"").decode("utf-8", "replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return {}
