"""One adapter module per agent host: what its hook payloads look like and how it wants answers.

The facts of each host (names, files, tool names, presets) are its row of ``loopx.hostfacts``;
the adapter ``loopx.hosts.adapters.<name with - as _>`` keeps behaviour only. Each adapter module defines

- ``NAME``, ``KIND`` (``settings``: loopx merges entries into the host's JSON hook config;
  ``plugin``: loopx installs a whole plugin/extension file; ``none``: nothing to install),
  ``WINDOWS_SHELL`` (the shell the host runs hook commands with on Windows: ``cmd``, ``pwsh``
  or ``posix`` for Git Bash), ``VERIFIED`` (where the facts below were checked);
- ``SHAPE``: the payload table row, ``{"tool": key of the tool name, "input": key of the tool
  input, "shell": shell tool names, "edit": edit tool names, "builtin": other built-in tools that
  never write, "paths": input keys that name a path}``;
- ``deny(reason)``, ``allow()``: the pre-tool answer ``(stdout object or None, exit code, stderr)``;
- ``cont(text)``, ``let_stop()``, ``context(text)``: the stop and session-start answers;
- for ``settings`` hosts ``config_path(scope, root)`` and ``wanted(cmd, cap)``; for ``plugin``
  hosts ``plugin_path(scope, root)`` and ``plugin_text(argv)``.

A new host is one module here plus one row in ``loopx.hostfacts.HOSTS`` (and in docs/hosts.md).
"""

from __future__ import annotations

import sys

TABLE = {h: h.replace("-", "_") for h in __import__("loopx.hostfacts", fromlist=["HOSTS"]).HOSTS}  # host -> module (kept for callers)


def module_name(host: str) -> str:
    """The adapter module of ``host``: its table name with ``-`` as ``_`` (``claude-code`` ->
    ``claude_code``)."""
    return host.replace("-", "_")


def get(host: str):
    """The adapter module for ``host``. Raises KeyError for a host not in ``loopx.hostfacts``."""
    from loopx import hostfacts

    if host not in hostfacts.HOSTS:
        raise KeyError(host)
    name = f"loopx.hosts.adapters.{module_name(host)}"
    if name not in sys.modules:
        __import__(name)  # not importlib.import_module: the importlib package costs hooks start-up time
    return sys.modules[name]


def known(host: str) -> bool:
    from loopx import hostfacts

    return host in hostfacts.HOSTS
