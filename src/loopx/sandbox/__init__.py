"""The kernel-enforced boundary around agents (docs/security.md, "The boundary").

``loopx run`` and ``loopx sandbox`` start every agent, and every command loopx runs on code an
agent wrote (verify commands), inside a sandbox the kernel enforces and children inherit; the
agent's one channel to the store is the broker (``loopx.sandbox.broker``).

- ``mode() -> "landlock"|"seatbelt"|"off"|"unavailable"``: what this machine gives.
  ``LOOPX_SANDBOX=off`` turns it off (a human's choice; tests simulate a machine without one).
- ``status() -> {"mode", "abi", "line"}``: the one line ``loopx run`` prints and ``doctor`` reports.
- ``wrap(argv, policy) -> argv``: the argv that runs ``argv`` under ``policy`` (Linux: the
  launcher ``python -m loopx.sandbox.exec``; macOS: ``sandbox-exec -p PROFILE``).
- ``run_sandboxed(argv, cwd, profile=None, *, store=None, timeout=None, env=None) ->
  subprocess.CompletedProcess`` (bytes output): run one command in the sandbox and wait; for
  callers such as an experiment's measure command. ``profile`` is a policy dict
  (``loopx.sandbox.profile.build``); None builds the default one for ``cwd`` (``store`` given:
  its ``.loopx/`` and git folder are protected). Without a sandbox (``mode()`` off or
  unavailable) the command runs unconfined. Raises OSError when the command cannot start,
  subprocess.TimeoutExpired on ``timeout`` (seconds).
"""

from __future__ import annotations

import os
import subprocess
import tempfile

from loopx.sandbox import profile as prof
from loopx.sandbox.core import (  # noqa: F401
    BROKER_ENV,
    INSIDE_ENV,
    VERIFY_ENV,
    activate,
    enforced,
    mode,
    shell_argv,
    status,
    verify_policy,
    wrap,
)
from loopx.sandbox.envscrub import scrub_env


def run_sandboxed(argv, cwd: str, profile: dict | None = None, *, store=None, timeout: float | None = None,
                  env: dict | None = None):
    env = scrub_env(dict(os.environ if env is None else env))
    if not enforced():
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="loopx-sbx-") as tmp:
        pol = profile or prof.build(store, cwd, tmpdir=tmp)
        env.update(TMPDIR=pol.get("tmpdir") or tmp, **{INSIDE_ENV: "1"})
        return subprocess.run(wrap(list(argv), pol), cwd=cwd, env=env, capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


def holdout_policy(code_dir: str, data_dirs, scratch: str) -> dict | None:
    """The policy an experiment's holdout runs under (``profile.holdout``: its code and data
    readable, no network, writes in ``scratch`` only) where the kernel enforces a sandbox, else
    None. ``loopx experiment promote`` passes it to ``trialstep.promote``."""
    if not enforced():
        return None

    return prof.holdout(code_dir, data_dirs, scratch)
