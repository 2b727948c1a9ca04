"""Running a verify command and recording it as evidence (a write: ``evidence.added``).

``run_verify(store, actor, run, command, timeout, cwd=None)`` runs ``command`` through the shell
in ``cwd``, by default the run's git worktree when it has one (parallel runs) else the project
directory, with this process's environment (minus ``LOOPX_RUN_ID``), records the output
as ``test`` evidence tied to ``run`` (``run["id"]`` may be None for a goal-level check, which then
carries ``after_run``), and tells a command that failed from one that could not run at all
(loopx.kernel.read.verify). Returns ``{evidence_id, exit_code, passed, command, timed_out,
setup_error, cwd}``; ``timeout`` is in seconds (exit 124 and ``timed_out`` when it is reached).
"""

from __future__ import annotations

import os

from loopx.kernel.read import worktrees
from loopx.kernel.read.verify import diagnose
from loopx.kernel.storage import bounded
from loopx.kernel.write import evidence
from loopx.sandbox.verify import confine  # the agent's code runs in the turn's sandbox, when there is one


def run_verify(store, actor: str, run: dict, command: str, timeout: float, cwd: str | None = None) -> dict:
    timed_out = False
    cwd = cwd or worktrees.project_in(store.root, run.get("id"), store.project_dir) or store.project_dir
    env = {k: v for k, v in os.environ.items() if k not in ("LOOPX_RUN_ID",)}

    argv, shell, run_env = confine(command, env)
    try:  # the limit covers the command's process group; a background child cannot hold the turn
        res = bounded.run(argv, cwd=cwd, timeout=timeout, env=run_env, shell=shell)
        body = res["stdout"] + res["stderr"]
        code, timed_out = (124, True) if res["timed_out"] else (res["code"], False)
    except OSError as exc:
        code, body = 127, str(exc).encode()
    code = max(-255, min(255, code))
    broken = diagnose(command, code, timed_out=timed_out, env=env, cwd=cwd, timeout=timeout,
                      output=body)
    verdict = "passed" if code == 0 else ("timed out" if timed_out else f"failed (exit {code})")
    if broken:
        verdict = "could not run" + (" (timed out)" if timed_out else f" (exit {code})")
    ev = evidence.add(store, actor, run["goal"], kind="test", summary=f"verify {verdict}: {command[:200]}",
                      todo=run.get("todo"), run=run.get("id"), command=command, exit_code=code, output=body,
                      after_run=run.get("after_run"))
    return {"evidence_id": ev["evidence_id"], "exit_code": code, "passed": code == 0, "command": command,
            "timed_out": timed_out, "setup_error": broken, "cwd": cwd}
