"""One sandbox session of a ``loopx run`` (or ``loopx sandbox``): a private folder outside the
project (``TMPDIR`` and the broker's socket), the broker, and the policy for each working folder.

``Session(store, identity, host=None)``; ``confine(cmd, shell, env, cwd) ->
(argv, env)``: the agent's command line wrapped in the sandbox and its environment (credentials
removed, ``TMPDIR`` private, ``LOOPX_BROKER`` set). ``policy_for(cwd)`` builds (and
caches) the policy; verify commands this process runs use the last one (``loopx.sandbox.activate``).
``close()`` stops the broker and removes the private folder. Without an enforcing sandbox
(``loopx.sandbox.enforced()`` false) ``confine`` returns the command unchanged.

A process that is killed (SIGKILL, or SIGTERM/SIGHUP, which ``loopx run`` does not catch) never
reaches ``close()``: its folder (``broker.sock``, ``tmp/``, ``verify-policy.json``) stays in the
temporary folder. Each folder names its owner (``owner``: pid, the process's start time, its PID
namespace); ``reap_stale()``, run when a session starts, removes the folders of this user whose
owner is gone (Linux; a folder without an owner file, or of another PID namespace, is left alone).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from loopx import sandbox
from loopx.sandbox import gitpin, profile
from loopx.sandbox.broker import Broker
from loopx.sandbox.gitpin import main_dirs

PREFIX = "loopx-sbx-"
OWNER = "owner"


def _owner(pid: int) -> str | None:
    """``"pid starttime pidns"`` of a live process here, None when it is gone (or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            start = fh.read().rsplit(")", 1)[1].split()[19]  # field 22: the start time, so a reused pid differs
        ns = os.stat("/proc/self/ns/pid").st_ino
    except (OSError, IndexError):
        return None
    return f"{pid} {start} {ns}"


def reap_stale(where: str | None = None) -> list[str]:
    """Remove the session folders under ``where`` (default: the temporary folder) that belong to
    this user and whose owner process is gone; returns them. Never raises."""
    if not os.path.isdir("/proc/self"):
        return []
    where = where or tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(where) if n.startswith(PREFIX)]
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return []
    gone = []
    for n in names:
        path = os.path.join(where, n)
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue
            with open(os.path.join(path, OWNER), encoding="utf-8") as fh:
                pid, start, their_ns = fh.read().split()
        except (OSError, ValueError):
            continue
        if their_ns != ns or _owner(int(pid)) == f"{pid} {start} {ns}":
            continue  # another PID namespace (cannot tell), or the owner still runs
        shutil.rmtree(path, ignore_errors=True)
        gone.append(path)
    return gone


class Session:
    def __init__(self, store, identity, host: str | None = None) -> None:
        self.store, self.host = store, host
        self.on = sandbox.enforced()
        reap_stale()
        self.root = tempfile.mkdtemp(prefix=PREFIX)
        me = _owner(os.getpid())
        if me:
            with open(os.path.join(self.root, OWNER), "w", encoding="utf-8") as fh:
                fh.write(me)
        self.tmp = os.path.join(self.root, "tmp")
        os.mkdir(self.tmp, 0o700)
        self.verify_file = os.path.join(self.root, "verify-policy.json")
        self.broker = None
        self._git_saved = None
        if self.on and store is not None:
            self._git_saved = gitpin.pin_process(store.project_dir)

            self.broker = Broker(store, identity, self.root, self.verify_file, before=self.clean_git).start()
        self._policies: dict = {}
        self.workdir: str | None = None  # the agent's working folder (a turn's private workspace)

    def policy_for(self, cwd: str, exe: str | None = None, named=(), view: bool = False, shared=()) -> dict:
        key = (os.path.realpath(cwd), exe, tuple(named), view, tuple(shared))
        if key not in self._policies:
            files, dirs = profile.program_reads(exe)
            for f in named:  # a script the command line names, and the folder it imports from
                more_files, more_dirs = profile.program_reads(f)
                files, dirs = files + more_files, dirs + more_dirs
            self._policies[key] = profile.build(self.store, cwd, host=self.host, tmpdir=self.tmp,
                                                extra_read=dirs, extra_read_files=files,
                                                view=view, shared=shared)
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

    def confine(self, cmd, shell: bool, env: dict, cwd: str, view: bool = False, shared=()):
        """``view``: ``cwd`` is a turn's private clone, shown at the project's path, with the
        project's own ``shared`` paths (what git ignores) at their place (``profile.build``)."""
        if not self.on:
            return cmd, shell, env
        self.workdir = cwd
        self.clean_git()
        argv = sandbox.shell_argv(cmd) if shell else list(cmd)
        pol = self.policy_for(cwd, profile.first_word(cmd, shell, cwd), profile.named_files(cmd, shell, cwd),
                              view, shared)
        return sandbox.wrap(argv, pol), False, self.env(env)

    def clean_git(self) -> None:
        """Remove what an agent could plant in the main checkout's writable ``.git`` to steer git
        calls made outside the sandbox: a ``commondir`` file (a main repository never has one).
        loopx's own calls are pinned anyway (``gitpin``); this protects the user's own git."""
        if self.store is None:
            return
        for where in {self.store.project_dir, self.workdir or self.store.project_dir}:
            dirs = main_dirs(where)  # the project's .git, and a workspace's own (a private clone)
            planted = os.path.join(dirs[0], "commondir") if dirs else None
            if not planted or not os.path.lexists(planted):
                continue
            try:
                os.remove(planted)
            except OSError:
                continue
            if self.broker is not None:
                self.broker.refused.append({"argv": ["(file)", planted], "why": "a planted .git/commondir was removed"})

    def refused(self) -> list[dict]:
        return list(self.broker.refused) if self.broker is not None else []

    def close(self) -> None:
        self.clean_git()
        if self.broker is not None:
            self.broker.close()
        if self._git_saved is not None:
            gitpin.unpin(self._git_saved)
            self._git_saved = None
        sandbox.activate(None)
        shutil.rmtree(self.root, ignore_errors=True)
