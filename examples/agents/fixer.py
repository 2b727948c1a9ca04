#!/usr/bin/env python3
"""A deterministic example agent for `loopx demo` (and a template for your own).

`loopx run --agent-cmd "python fixer.py"` starts it once per turn with the turn packet on stdin;
the same packet is in the JSON file named by $LOOPX_PACKET_JSON. It does what a real agent would
do, without a model: it reads its todo, edits the code to fix that one failing test and commits
the change. For the protected `merge` step it first asks a human through a gate, finishes the
turn as `blocked`, and only merges in a later turn once the gate is approved.

It talks to loopx only through the CLI, exactly as the packet's write-back commands say.
The runner verifies each turn itself (the todo's verify command) and spends budget only when
that verification passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# todo keyword -> (file, broken code, fixed code, commit message)
RECIPES = {
    "subtotal": ("shopcart/cart.py", "sum(item.price for item in items)",
                 "sum(item.price * item.quantity for item in items)", "fix: subtotal counts quantities"),
    "apply_discount": ("shopcart/cart.py", "round(amount - amount * percent)",
                       "round(amount - amount * percent / 100)", "fix: discount is a percentage"),
    "format_price": ("shopcart/cart.py", 'f"${cents / 100}"', 'f"${cents // 100}.{cents % 100:02d}"',
                     "fix: prices always show two decimals"),
}
BRANCH = "loopx/fixes"


def sh(*args: str, check: bool = True) -> str:
    proc = subprocess.run(args, capture_output=True, text=True)
    if check and proc.returncode != 0:
        sys.stderr.write(f"fixer: {' '.join(args)} failed: {proc.stderr.strip()}\n")
        raise SystemExit(proc.returncode or 1)
    return proc.stdout.strip()


def loopx(*args: str) -> dict:
    """Run a loopx command as this agent and return its JSON data."""
    out = sh(sys.executable, "-m", "loopx", "--format", "json", *args)
    return json.loads(out)["data"]


def fix(todo: dict, key: str) -> int:
    path, broken, fixed, message = RECIPES[key]
    code = Path(path).read_text(encoding="utf-8")
    if broken not in code:
        print(f"fixer: {path} does not contain the broken code any more; nothing to do")
        return 0
    Path(path).write_text(code.replace(broken, fixed, 1), encoding="utf-8")
    sh("git", "commit", "-q", "-am", message)
    print(f"fixer: {message} ({todo['id']}), committed {sh('git', 'rev-parse', '--short', 'HEAD')}")
    return 0


def merge(packet: dict) -> int:
    todo, run, goal = packet["todo"], packet["run_id"], packet["goal_id"]
    state = next((p for p in packet["protected"] if p["action"] == "merge"), {"gate": "approved"})
    if state["gate"] != "approved":
        if state["gate"] == "none":
            fixes = sh("git", "log", "--oneline", f"main..{BRANCH}").splitlines()
            gate = loopx("gate", "open", "--goal-id", goal, "--kind", "merge", "--blocks", todo["id"],
                         "--question", f"All tests pass on branch {BRANCH} ({len(fixes)} commits). "
                                       "Merge it into main?",
                         "--context", "; ".join(fixes))
            print(f"fixer: merging needs a human; opened gate {gate['gate_id']}")
        loopx("turn", "finish", "--run", run, "--result", "blocked", "--note", "waiting for the merge gate")
        return 0
    sh("git", "checkout", "-q", "main")
    sh("git", "merge", "-q", "--no-ff", BRANCH, "-m", f"Merge {BRANCH} (approved in loopx)")
    head = sh("git", "rev-parse", "HEAD")
    ev = loopx("evidence", "add", "--goal-id", goal, "--run", run, "--todo", todo["id"], "--kind", "commit",
               "--commit", head, "--summary", f"merged {BRANCH} into main")
    loopx("todo", "done", todo["id"], "--evidence", ev["evidence_id"])
    print(f"fixer: merged {BRANCH} into main at {head[:10]}")
    return 0


def main() -> int:
    packet_file = os.environ.get("LOOPX_PACKET_JSON")
    if not packet_file:
        sys.stderr.write("fixer: run me through `loopx run --agent-cmd ...` (LOOPX_PACKET_JSON is not set)\n")
        return 2
    packet = json.loads(Path(packet_file).read_text(encoding="utf-8"))
    todo = packet.get("todo")
    if not todo:
        print("fixer: no todo in this turn; this agent does not plan")
        return 0
    title = todo["title"].lower()
    if "merge" in title:
        return merge(packet)
    for key in RECIPES:
        if key in title:
            return fix(todo, key)
    print(f"fixer: no recipe for {todo['title']!r}; leaving it for a smarter agent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
