"""The launcher between fork and exec: ``python -m loopx.sandbox.exec POLICY -- ARGV...``.

``POLICY`` is a JSON object (``loopx.sandbox.policy``) or ``@FILE`` holding one. The launcher
applies it to itself (Landlock and ``no_new_privs`` on Linux) and then replaces itself with
``ARGV`` (``os.execvpe``), so the command and everything it starts run restricted. It never runs
the command unrestricted: when the policy cannot be applied it prints one line and exits 126
(``LOOPX_SANDBOX=off`` is how a human chooses to run without one, see ``loopx.sandbox.mode``).
"""

from __future__ import annotations

import json
import os
import sys

from loopx.sandbox import landlock, mounts


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m loopx.sandbox.exec POLICY_JSON -- COMMAND [ARGS]\n")
        return 2
    raw = argv[0]
    try:
        if raw.startswith("@"):
            with open(raw[1:], encoding="utf-8") as fh:
                raw = fh.read()
        policy = json.loads(raw)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"loopx sandbox: unreadable policy: {exc}\n")
        return 126

    m = policy.get("mount") or {}
    view = None if m.get("off") else policy.get("view")
    here = os.path.realpath(os.getcwd())  # a turn's clone: seen at the project's place below
    if m.get("off") or not mounts.setup(m.get("roots", []), m.get("ro", []), m.get("rw", []), m.get("hide", ()),
                                        view):
        view = None  # the command works in the clone at its own path
        policy.update(policy.get("fallback") or {"write": policy.get("write", []), "write_files": []})
        if not m.get("off"):
            sys.stderr.write("loopx sandbox: no private mount namespace here; protected paths are left out of the "
                             "grants instead (no new file directly beside them), other processes stay visible\n")
    else:
        left = mounts.own_pids()  # the mount namespace is ours: give the command its own /proc too
        if left is not None and left >= 0:
            return left  # the parent: the command ran (or was refused) in the child
    try:
        landlock.apply(policy)
    except OSError as exc:
        sys.stderr.write(f"loopx sandbox: could not restrict the command ({exc.strerror or exc}); it was not run\n")
        return 126
    env = os.environ.copy()
    if policy.get("tmpdir"):
        env["TMPDIR"] = policy["tmpdir"]
    if view:
        rel = os.path.relpath(here, view["tree"])
        shown = os.path.normpath(os.path.join(view["at"], rel)) if not rel.startswith("..") else here
        os.chdir(shown)
        env["PWD"] = shown
    try:
        os.execvpe(argv[2], argv[2:], env)
    except OSError as exc:
        sys.stderr.write(f"loopx sandbox: cannot run {argv[2]}: {exc.strerror or exc}\n")
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
