"""The per-invocation context handed to every command handler (handlers never see argparse)."""

from __future__ import annotations

import os

from loopx.errors import UsageError

# Environment markers that agent hosts set inside their sessions and tool calls.
AGENT_ENV_MARKERS = ("LOOPX_AGENT", "CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CODEX_SANDBOX",
                     "CODEX_SANDBOX_NETWORK_DISABLED", "CODEX_THREAD_ID", "CURSOR_AGENT",
                     "CURSOR_TRACE_ID", "GEMINI_CLI", "OPENCODE")


def agent_markers() -> list[str]:
    """Names of the agent-host environment markers set in this process."""
    return [m for m in AGENT_ENV_MARKERS if os.environ.get(m)]


def human_name() -> str:
    """The login name of the OS account running loopx: the password entry of the real uid on POSIX
    (``pwd.getpwuid(os.getuid())``), ``GetUserNameW`` on Windows; cleaned to ``[A-Za-z0-9._-]``, at
    most 64 characters. An account without a name is ``uid<N>``. Never read from ``USER``,
    ``LOGNAME`` or ``USERNAME``: an agent sets those as easily as it runs a command."""
    name = ""
    if os.name == "nt":  # pragma: no cover - exercised on the Windows CI leg
        try:
            name = os.getlogin()  # GetUserNameW: the account of the process token, not %USERNAME%
        except OSError:
            name = ""
        fallback = "windows-user"
    else:
        import pwd

        uid = os.getuid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:  # a uid without an entry (containers): the uid is still the account
            name = ""
        fallback = f"uid{uid}"
    return "".join(c for c in name if c.isalnum() or c in "._-")[:64] or fallback


class Context:
    """Global options and lazily opened resources.

    ``project``: the ``--project`` directory or None (discover upward from the cwd).
    ``fmt``: ``text`` | ``json`` | ``jsonl``. ``agent``: the calling agent's name or None (human).
    """

    def __init__(self, *, project: str | None = None, fmt: str = "text", agent: str | None = None,
                 quiet: bool = False, debug: bool = False, command: str = "") -> None:
        self.project = project
        self.fmt = fmt
        self.agent = agent if agent is not None else (os.environ.get("LOOPX_AGENT") or None)
        if self.agent is not None:
            from loopx.kernel.ids import check_agent_name

            check_agent_name(self.agent)
        self.quiet = quiet
        self.debug = debug
        self.command = command
        self._store = None

    @property
    def json(self) -> bool:
        return self.fmt != "text"

    @property
    def actor(self) -> str:
        """``agent:<name>`` for an agent, else ``human:<login>``."""
        return f"agent:{self.agent}" if self.agent else f"human:{human_name()}"

    def store(self):
        """The project's Store (opened once). Raises NotConnected (exit 3)."""
        if self._store is None:
            from loopx.kernel.store import Store

            if self.project is not None and not os.path.isdir(self.project):
                raise UsageError(f"--project {self.project!r} is not a directory",
                                 "pass the project's root directory")
            self._store = Store.open(self.project)
        return self._store
