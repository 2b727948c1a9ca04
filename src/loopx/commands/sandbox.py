"""``loopx sandbox -- COMMAND [ARGS]``: run an interactive host session (claude, codex, gemini,
opencode, pi, cursor-agent) or any command inside the same sandbox and broker ``loopx run``
uses (docs/security.md, "The boundary"): the project is writable but for ``.loopx/``, its git
folder and the files loopx installed; secrets are unreadable; TCP connect only to allowed ports;
``loopx`` inside reaches the store through the broker as agent ``--as NAME`` (default: the
host's name, else ``sandbox``). Exit code: the command's own; 3 when no sandbox is available
here (``LOOPX_SANDBOX=off`` or a system without Landlock or sandbox-exec): nothing is run."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess

from loopx import sandbox
from loopx.commands import add
from loopx.config import env as config_env
from loopx.errors import StateError, UsageError
from loopx.kernel.storage import ids
from loopx.output import Reply
from loopx.sandbox import hostfiles
from loopx.sandbox.session import Session

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loopx.output import Reply


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=sandbox_run, render=render,
            example="loopx sandbox -- claude   # or: loopx sandbox --as me -- sh -c 'make test'")
    p.add_argument("--as", dest="as_agent", metavar="NAME", help="the agent name brokered loopx calls act as")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS]", help="what to run inside")


def sandbox_run(ctx, command=None, as_agent=None) -> Reply:
    argv = list(command or [])
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("no command to run inside the sandbox", "loopx sandbox -- claude")
    st = sandbox.status()
    if not sandbox.enforced():
        raise StateError(st["line"], "nothing was run; on Linux 5.13+ Landlock must be enabled "
                         "(see `loopx doctor`), or run the command without loopx sandbox", code="sandbox_unavailable")

    if shutil.which(argv[0]) is None:  # the launcher would exec it inside the sandbox: say so here, in one line
        raise UsageError(f"cannot run {argv[0]}: not found (or not executable)", "check the command and PATH",
                         code="command_not_found")
    store = ctx.store()
    host = hostfiles.host_of(argv[0])
    agent = as_agent or ctx.agent or host or "sandbox"
    ids.check_agent_name(agent)
    sess = Session(store, lambda: (agent, config_env("LOOPX_RUN_ID")), host=host)
    try:
        wrapped, _, env = sess.confine(argv, False, dict(os.environ, LOOPX_AGENT=agent), store.project_dir)
        try:
            code = subprocess.call(wrapped, env=env)
        except OSError as exc:
            raise UsageError(f"cannot run {argv[0]}: {exc.strerror or exc}", "check the command and PATH") from None
        refused = sess.refused()
    finally:
        sess.close()

    return Reply({"command": argv, "exit_code": code, "sandbox": st["mode"], "agent": agent, "refused": refused},
                 exit_code=code if 0 <= code < 256 else 1)


def render(data: dict) -> str:
    if not data.get("refused"):
        return ""
    return "\n".join(f"broker refused: loopx {' '.join(r['argv'])[:120]}" for r in data["refused"])
