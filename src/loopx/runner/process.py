"""Run one agent process: packet on stdin, output captured (and echoed), a hard timeout, a tick
callback for lease renewal, and Ctrl-C handling that stops the agent's whole process group.

On POSIX the agent runs under ``runner.guard`` as the leader of a new process group, so it dies
with the runner even when the runner is killed with SIGKILL; ``on_start(pid)`` is called with the
group leader's pid once it started (the runner records it in the run).

``run_agent(...) -> {"exit_code", "timed_out", "interrupted", "duration", "output_tail", "output"}``:
``output_tail`` is the last 8,000 characters, ``output`` the last ``keep`` bytes (default 16,000;
the runner keeps 4 MB so a host's final JSON report is read whole).
``exit_code`` is 124 after a timeout (like ``timeout(1)``) and 130 after Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

TAIL = 8000
GRACE = 3.0


def _reader(pipe, sink: list, echo, keep: int = TAIL * 2) -> None:
    size = 0
    for chunk in iter(lambda: pipe.read1(65536) if hasattr(pipe, "read1") else pipe.read(65536), b""):
        sink.append(chunk)
        size += len(chunk)
        while size > keep and len(sink) > 1:
            size -= len(sink.pop(0))
        if echo is not None:
            try:
                echo.write(chunk.decode("utf-8", "replace"))
                echo.flush()
            except (OSError, ValueError):
                pass


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the agent's process group, then kill it after a grace period."""
    if proc.poll() is not None:
        return
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGTERM)
        else:  # pragma: no cover - Windows
            proc.terminate()
        proc.wait(GRACE)
    except (ProcessLookupError, PermissionError):
        pass
    except subprocess.TimeoutExpired:
        try:
            if os.name == "posix":
                os.killpg(proc.pid, signal.SIGKILL)
            else:  # pragma: no cover
                proc.kill()
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


def run_agent(command, *, shell: bool, stdin_text: str, env: dict, cwd: str, timeout: float | None,
              tick=None, tick_every: float = 60.0, echo=None, on_start=None, keep: int = TAIL * 2,
              stuck: tuple = ()) -> dict:
    """Run ``command`` (argv list, or a string when ``shell``) and wait for it. ``on_start(pid)``
    (optional) is called once the process group leader runs; its errors are ignored. ``stuck``:
    lowercase phrases a host prints when it only waits and retries (Codex: "waiting for network"):
    the host is stopped as soon as its output shows one (``gave_up`` True) instead of at the
    timeout."""
    with tempfile.TemporaryFile() as fin:
        fin.write(stdin_text.encode("utf-8"))
        fin.seek(0)
        if os.name == "posix":
            from loopx.runner.guard import wrap

            command, shell = wrap(command, shell=shell, grace=GRACE), False
            kwargs: dict = {"start_new_session": True}
        else:  # pragma: no cover - Windows
            kwargs = {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
        start = time.monotonic()
        proc = subprocess.Popen(command, shell=shell, cwd=cwd, env=env, stdin=fin, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, **kwargs)
        if on_start is not None:
            try:
                on_start(proc.pid)
            except Exception:  # noqa: BLE001 - recording is best effort; the agent runs regardless
                pass
        sink: list[bytes] = []
        reader = threading.Thread(target=_reader, args=(proc.stdout, sink, echo, max(keep, TAIL * 2)), daemon=True)
        reader.start()
        timed_out = interrupted = gave_up = False
        next_tick = start + tick_every
        try:
            while True:
                now = time.monotonic()
                if timeout is not None and now - start >= timeout:
                    timed_out = True
                    _stop(proc)
                    break
                wait = 0.5 if timeout is None else max(0.01, min(0.5, timeout - (now - start)))
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if stuck and sink and any(s.encode() in b"".join(sink[-8:]).lower() for s in stuck):
                    gave_up = True
                    _stop(proc)
                    break
                if tick is not None and time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + tick_every
                    tick()
        except KeyboardInterrupt:
            interrupted = True
            old = signal.signal(signal.SIGINT, signal.SIG_IGN) if threading.current_thread() is threading.main_thread() else None
            try:
                _stop(proc)
            finally:
                if old is not None:
                    signal.signal(signal.SIGINT, old)
        reader.join(GRACE)  # a grandchild still holding the pipe keeps the (daemon) reader alive
    code = 124 if timed_out else (130 if interrupted else proc.returncode)
    whole = b"".join(sink)
    return {"exit_code": code, "timed_out": timed_out, "interrupted": interrupted, "gave_up": gave_up,
            "duration": round(time.monotonic() - start, 3), "output_tail": whole[-TAIL:].decode("utf-8", "replace"),
            "output": whole[-keep:].decode("utf-8", "replace")}


def default_echo():
    """Where agent output is echoed in text mode: stderr (stdout stays for loopx's own report)."""
    return sys.stderr
