"""Run one short program and read its output without importing ``subprocess``.

``import subprocess`` costs a hot command about as much as the rest of its start-up together
(``threading``, ``signal``, ``selectors``, ``contextlib`` and what they pull in: 8 ms against a
10 ms bare interpreter on the benchmark machine), and ``next``/``turn finish`` need exactly one
``git status``. This starts it with ``os.posix_spawnp`` and a pipe; elsewhere (Windows) ``output``
returns None and the caller uses ``subprocess`` as before.
"""

from __future__ import annotations

import os
import select
import time

KILL = 9  # SIGKILL on every platform that has posix_spawn


def output(argv: list[str], timeout: float, env: dict | None = None) -> tuple[int, bytes] | None:
    """``(exit code, stdout)`` of ``argv`` (found on PATH; stdin and stderr are ``/dev/null``), or
    None where ``os.posix_spawnp`` is not available. ``env``: the program's environment (default
    this process's). Raises OSError when the program cannot be
    started (FileNotFoundError: not installed) and TimeoutError (an OSError) after ``timeout``
    seconds, the program then killed."""
    spawn = getattr(os, "posix_spawnp", None)
    if spawn is None:
        return None

    rd, wr = os.pipe()
    try:
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, wr, 1),
                   (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0), (os.POSIX_SPAWN_CLOSE, rd),
                   (os.POSIX_SPAWN_CLOSE, wr)]
        pid = spawn(argv[0], argv, os.environ if env is None else env, file_actions=actions)
    except BaseException:
        os.close(rd)
        os.close(wr)
        raise
    os.close(wr)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([rd], [], [], left)[0]:
                os.kill(pid, KILL)
                os.waitpid(pid, 0)
                raise TimeoutError(f"{argv[0]} did not finish within {timeout} s")
            data = os.read(rd, 1 << 16)
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(rd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks)
