"""Run a shell command with a hard time limit that covers its whole process group.

Used wherever loopx runs a command on its own behalf inside a decision or a turn (watch checks,
verify commands): such a command must never hold loopx longer than its limit, whatever it leaves
behind. ``run`` therefore

- starts the command in a new session (POSIX ``start_new_session``: its own process group);
- sends its output to unnamed temporary files, not pipes: a background child that keeps the
  output open (``sleep 30 & true``, even ``setsid sleep 40 &``, which leaves the group) cannot
  make loopx wait for an end of file;
- waits for the shell itself at most ``timeout`` seconds, then kills the group (SIGKILL);
- kills what is left of the group (background children) once the shell has exited, so nothing
  the command started outlives it in its group.

A child that left the group on purpose (``setsid``) is not killed (it is no longer the command's),
but it holds nothing of loopx's either. On Windows the process itself is killed at the limit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile

OUTPUT_CAP = 4 * 1024 * 1024  # bytes of each stream kept (the end of it)


def _kill_group(pid: int, proc) -> None:
    try:
        if os.name == "posix":
            os.killpg(pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows
            proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _tail(fh, cap: int) -> bytes:
    size = fh.seek(0, os.SEEK_END)
    fh.seek(max(0, size - cap))
    return fh.read()


def run(command: str | list[str], *, cwd: str, timeout: float, env: dict | None = None, merge: bool = False,
        cap: int = OUTPUT_CAP, shell: bool = True) -> dict:
    """Run ``command`` through the shell (``shell`` False: ``command`` is an argv, e.g. a sandbox
    launcher's) in ``cwd`` (stdin closed) for at most ``timeout`` seconds.
    Returns ``{"code": int | None (None when killed at the limit), "timed_out": bool, "stdout": bytes,
    "stderr": bytes}`` (with ``merge`` both streams go to ``stdout`` in the order written; each is
    the last ``cap`` bytes). Raises OSError when the shell cannot be started."""
    with tempfile.TemporaryFile() as out, (tempfile.TemporaryFile() if not merge else _Same(out)) as err:
        proc = subprocess.Popen(command, shell=shell, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT if merge else err,
                                start_new_session=(os.name == "posix"))
        timed_out = False
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid, proc)
            proc.wait()
            code = None
        except BaseException:  # Ctrl-C while waiting: the command does not outlive loopx
            _kill_group(proc.pid, proc)
            proc.wait()
            raise
        _kill_group(proc.pid, proc)  # background children left in the group end with the command
        stdout = _tail(out, cap)
        stderr = b"" if merge else _tail(err, cap)
    return {"code": code, "timed_out": timed_out, "stdout": stdout, "stderr": stderr}


class _Same:
    """A context manager standing in for the second file when both streams share one."""

    def __init__(self, fh) -> None:
        self.fh = fh

    def __enter__(self):
        return self.fh

    def __exit__(self, *exc) -> None:
        return None
