"""The per-invocation context handed to every command handler (handlers never see argparse)."""

from __future__ import annotations

import os

from loopx.config import env
from loopx.errors import UsageError
from loopx.kernel.storage import actors

# Environment markers that agent hosts set inside their sessions and tool calls (one list).
AGENT_ENV_MARKERS = actors.AGENT_ENV_MARKERS


def agent_markers() -> list[str]:
    """Names of the agent-host environment markers set in this process."""
    return [m for m in AGENT_ENV_MARKERS if os.environ.get(m)]


class Context:
    """Global options and lazily opened resources.

    ``project``: the ``--project`` directory or None (discover upward from the cwd).
    ``fmt``: ``text`` | ``json`` | ``jsonl``. ``agent``: the calling agent's name or None (human).
    """

    def __init__(self, *, project: str | None = None, fmt: str = "text", agent: str | None = None,
                 quiet: bool = False, debug: bool = False, command: str = "") -> None:
        self.project = project
        self.fmt = fmt
        self.agent = agent if agent is not None else env("LOOPX_AGENT")
        if self.agent is not None:
            from loopx.kernel.storage.ids import check_agent_name

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
        return actors.of(self.agent)

    def root(self) -> str:
        """The ``.loopx`` directory this call works on, found without opening the store (the
        quick paths); the same one ``store()`` opens. Raises NotConnected (exit 3), UsageError."""
        if self._store is not None:
            return self._store.root
        from loopx.kernel.storage import fs

        if self.project is not None:
            if not os.path.isdir(self.project):
                return self.store().root  # its error
            root = os.path.join(os.path.abspath(self.project), fs.DIRNAME)
            return root if os.path.isdir(root) else self.store().root
        return fs.find_root(os.getcwd()) or self.store().root

    def store(self):
        """The project's Store (opened once). Raises NotConnected (exit 3)."""
        if self._store is None:
            from loopx.kernel.storage.store import Store

            if self.project is not None and not os.path.isdir(self.project):
                raise UsageError(f"--project {self.project!r} is not a directory",
                                 "pass the project's root directory")
            self._store = Store.open(self.project)
        return self._store
