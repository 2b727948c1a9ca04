#!/usr/bin/env python3
"""A custom loopx runner built on ``loopx.api`` (the same kernel functions the CLI uses).

Each turn: ask should-run; if it says run, start the turn, hand the packet to your agent command on
stdin, record what the agent did as evidence, finish the turn with the goal's verify command, and
charge the budget only when verification passed. Stops on any decision other than ``run``.

    python runner.py --project ~/src/app --agent my-bot --agent-cmd "my-agent --stdin" --max-turns 3

The agent may print a last line ``loopx-result: completion`` (or progress, no_progress, failed,
blocked); otherwise exit 0 means progress and anything else means failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from loopx import api
from loopx.errors import LoopxError

RESULTS = ("progress", "completion", "no_progress", "failed", "blocked")


def agent_result(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stdout or "").strip().splitlines()
    if lines and lines[-1].startswith("loopx-result:"):
        claimed = lines[-1].split(":", 1)[1].strip()
        if claimed in RESULTS:
            return claimed
    return "progress" if proc.returncode == 0 else "failed"


def one_turn(conn: api.Connection, agent_cmd: str, goal_id: str | None, timeout: float) -> bool:
    """Run at most one turn; True when a turn ran."""
    decision = api.should_run(conn, goal_id)
    if not decision.run:
        print(f"no turn: {decision.decision} ({decision.reason}) {decision.message}")
        return False
    turn = api.next_turn(conn, decision.goal_id)
    if not turn.started:
        print(f"no turn: {turn.decision.decision} ({turn.decision.reason})")
        return False
    env = dict(os.environ, LOOPX_AGENT=conn.agent or "", LOOPX_RUN_ID=turn.run_id or "", LOOPX_TODO_ID=turn.todo_id or "")
    try:
        proc = subprocess.run(agent_cmd, shell=True, input=turn.packet_text, text=True, capture_output=True,
                              cwd=conn.project, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc = subprocess.CompletedProcess(agent_cmd, 124, "", f"timed out after {timeout}s")
    result = agent_result(proc)
    ev = api.add_evidence(conn, turn.run_id, kind="command", summary=f"agent exited {proc.returncode} ({result})",
                          command=agent_cmd, exit_code=max(-255, min(255, proc.returncode)),
                          output=(proc.stdout or "")[-8000:] + (proc.stderr or "")[-8000:])
    try:
        done = api.finish_turn(conn, turn.run_id, result, evidence=[ev.evidence_id], verify=True)
    except LoopxError as exc:
        if exc.code != "no_verify_command":
            raise
        done = api.finish_turn(conn, turn.run_id, result, evidence=[ev.evidence_id])
    receipt = api.spend_slot(conn, turn.run_id) if done.verified else None
    spent = "1 slot spent" if receipt and receipt.spent else "nothing spent"
    print(f"turn {turn.run_id} on {turn.todo_id}: {done.result}, verified={done.verified}, {spent}")
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="a custom loopx runner")
    p.add_argument("--project", default=".")
    p.add_argument("--agent", default="custom-runner", help="the agent name turns are recorded under")
    p.add_argument("--agent-cmd", required=True, help="shell command that gets the turn packet on stdin")
    p.add_argument("--goal-id")
    p.add_argument("--max-turns", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per agent turn")
    args = p.parse_args(argv)
    try:
        conn = api.connect(args.project, agent=args.agent, create=False)
        turns = 0
        while turns < args.max_turns and one_turn(conn, args.agent_cmd, args.goal_id, args.timeout):
            turns += 1
    except LoopxError as exc:
        print(f"loopx: error: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return exc.exit_code
    print(f"{turns} turn(s) run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
