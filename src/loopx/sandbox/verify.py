"""Verify commands in the turn's sandbox: ``confine(command, env) -> (argv|str, shell, env)``.

A verify command runs code the agent wrote, so when a sandbox is in force for this process
(``loopx run``: ``loopx.sandbox.activate``) or for the brokered call that asks
(``LOOPX_VERIFY_POLICY``), it runs under the same policy; otherwise it runs through the shell as
before. Kept apart from ``loopx.sandbox`` so the import stays small.
"""

from __future__ import annotations

from loopx.sandbox import core as sandbox
from loopx.sandbox.envscrub import scrub_env


def confine(command: str, env: dict):
    pol = sandbox.verify_policy()
    if pol is None:
        return command, True, env

    run_env = scrub_env(env)
    run_env.pop(sandbox.VERIFY_ENV, None)
    if pol.get("tmpdir"):
        run_env["TMPDIR"] = pol["tmpdir"]
    run_env[sandbox.INSIDE_ENV] = "1"
    return sandbox.wrap(sandbox.shell_argv(command), pol), False, run_env
