"""One sandbox session of a ``loopx run`` (or ``loopx sandbox``): a private folder outside the
project (``TMPDIR`` and the broker's socket), the broker, and the policy for each working folder.

``Session(store, identity, host=None)``; ``confine(cmd, shell, env, cwd, branch=None) ->
(argv, env)``: the agent's command line wrapped in the sandbox and its environment (credentials
removed, ``TMPDIR`` private, ``LOOPX_BROKER`` set). ``policy_for(cwd, branch)`` builds (and
caches) the policy; verify commands this process runs use the last one (``loopx.sandbox.activate``).
``close()`` stops the broker and removes the private folder. Without an enforcing sandbox
(``loopx.sandbox.enforced()`` false) ``confine`` returns the command unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from loopx import sandbox
from loopx.sandbox import profile


class Session:
    def __init__(self, store, identity, host: str | None = None) -> None:
        self.store, self.host = store, host
        self.on = sandbox.enforced()
        self.root = tempfile.mkdtemp(prefix="loopx-sbx-")
        self.tmp = os.path.join(self.root, "tmp")
        os.mkdir(self.tmp, 0o700)
        self.verify_file = os.path.join(self.root, "verify-policy.json")
        self.broker = None
        if self.on and store is not None:
            from loopx.sandbox.broker import Broker

            self.broker = Broker(store, identity, self.root, self.verify_file).start()
        self._policies: dict = {}

    def policy_for(self, cwd: str, branch: str | None = None, exe: str | None = None) -> dict:
        key = (os.path.realpath(cwd), branch, exe)
        if key not in self._policies:
            files, dirs = profile.program_reads(exe)
            self._policies[key] = profile.build(self.store, cwd, host=self.host, tmpdir=self.tmp,
                                                worktree_branch=branch, extra_read=dirs, extra_read_files=files)
        pol = self._policies[key]
        with open(self.verify_file, "w", encoding="utf-8") as fh:
            json.dump(pol, fh)
        sandbox.activate(pol)
        return pol

    def env(self, env: dict) -> dict:
        out = profile.scrub_env(env)
        if self.on:
            out["TMPDIR"] = self.tmp
            out[sandbox.INSIDE_ENV] = "1"
            if self.broker is not None:
                out[sandbox.BROKER_ENV] = self.broker.path
        return out

    def confine(self, cmd, shell: bool, env: dict, cwd: str, branch: str | None = None):
        if not self.on:
            return cmd, shell, env
        argv = sandbox.shell_argv(cmd) if shell else list(cmd)
        return sandbox.wrap(argv, self.policy_for(cwd, branch, profile.first_word(cmd, shell, cwd))), False, \
            self.env(env)

    def refused(self) -> list[dict]:
        return list(self.broker.refused) if self.broker is not None else []

    def close(self) -> None:
        if self.broker is not None:
            self.broker.close()
        sandbox.activate(None)
        shutil.rmtree(self.root, ignore_errors=True)
