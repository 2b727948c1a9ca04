"""Run one agent process: packet on stdin, output captured (and echoed), a hard timeout, a tick
callback for lease renewal, and Ctrl-C handling that stops the agent's whole process group.

On POSIX the agent runs under ``runner.guard`` as the leader of a new process group, so it dies
with the runner even when the runner is killed with SIGKILL; ``on_start(pid)`` is called with the
group leader's pid once it started (the runner records it in the run).

``run_agent(...) -> {"exit_code", "timed_out", "interrupted", "gave_up", "retry_lines", "duration",
"output_tail", "output"}``: ``output_tail`` is the last 8,000 characters, ``output`` the last
``keep`` bytes (default 16,000; the runner keeps 4 MB so a host's final JSON report is read whole).
``exit_code`` is 124 after a timeout (like ``timeout(1)``) and 130 after Ctrl-C. ``gave_up``: the
host was stopped because its output showed it only retried (``retrying``); ``retry_lines`` are
those lines of the host's own output (the last few), which say why.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

TAIL = 8000
GRACE = 3.0


class RetryWatch:
    """Reads a host's output line by line for the lines it prints when a model request failed and
    it only waits and tries again (the host table's ``preset.retrying``: ``[(pattern, after)]``,
    case-insensitive regular expressions). ``hit`` turns True once a pattern has matched ``after``
    times in a row: a pattern with a group counts by the number the host prints (Gemini CLI's
    "Attempt 3 failed"), one without counts its lines, and any JSON event line between them (the
    host got an answer and moved on) starts the count again. ``lines`` keeps the last matches."""

    def __init__(self, rules) -> None:
        self.rules = [(re.compile(p, re.I), max(1, int(n))) for p, n in rules or ()]
        self.counts = [0] * len(self.rules)
        self.lines: list[str] = []
        self.hit = False
        self._rest = b""

    def feed(self, chunk: bytes) -> None:
        if not self.rules or self.hit:
            return
        data = self._rest + chunk
        *whole, self._rest = data.split(b"\n")
        if len(self._rest) > 65536:  # a line without an end in sight: look at what there is
            whole.append(self._rest)
            self._rest = b""
        for raw in whole:
            self._line(raw.decode("utf-8", "replace").strip())

    def _line(self, line: str) -> None:
        if line.startswith("{"):
            self.counts = [0] * len(self.rules)  # a JSON event: the host is working again
        for i, (rx, after) in enumerate(self.rules):
            m = rx.search(line)
            if not m:
                continue
            n = int(m.group(1)) if rx.groups and (m.group(1) or "").isdigit() else self.counts[i] + 1
            self.counts[i] = n
            self.lines = (self.lines + [line[:2000]])[-5:]
            if n >= after:
                self.hit = True
                return


def _reader(pipe, sink: list, echo, keep: int = TAIL * 2, watch: RetryWatch | None = None) -> None:
    size = 0
    for chunk in iter(lambda: pipe.read1(65536) if hasattr(pipe, "read1") else pipe.read(65536), b""):
        if watch is not None:
            watch.feed(chunk)
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
              retrying=()) -> dict:
    """Run ``command`` (argv list, or a string when ``shell``) and wait for it. ``on_start(pid)``
    (optional) is called once the process group leader runs; its errors are ignored.
    ``retrying``: ``[(pattern, after)]``, the lines a host prints when it only waits and retries
    (see ``RetryWatch``; Codex: "waiting for network" once, Gemini CLI: its third "Attempt N
    failed ... Retrying with backoff"): the host is stopped as soon as its output shows that
    (``gave_up`` True) instead of at the timeout."""
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
        watch = RetryWatch(retrying)
        reader = threading.Thread(target=_reader, args=(proc.stdout, sink, echo, max(keep, TAIL * 2), watch),
                                  daemon=True)
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
                if watch.hit:
                    gave_up = True
                    _stop(proc)
                    break
                if tick is not None and time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + tick_every
                    tick()
        except KeyboardInterrupt:
            interrupted = True
            # a second Ctrl-C, SIGTERM or SIGHUP (all raise KeyboardInterrupt in a runner) must not cut
            # the stop short before its SIGKILL step: ignored while the agent's group is stopped
            mask = (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None))
            main = threading.current_thread() is threading.main_thread()
            old = {s: signal.signal(s, signal.SIG_IGN) for s in mask if s is not None} if main else {}
            try:
                _stop(proc)
            finally:
                for s, h in old.items():
                    signal.signal(s, h)
        reader.join(GRACE)  # a grandchild still holding the pipe keeps the (daemon) reader alive
    code = 124 if timed_out else (130 if interrupted else proc.returncode)
    whole = b"".join(sink)
    return {"exit_code": code, "timed_out": timed_out, "interrupted": interrupted, "gave_up": gave_up,
            "retry_lines": list(watch.lines) if gave_up else [],
            "duration": round(time.monotonic() - start, 3), "output_tail": whole[-TAIL:].decode("utf-8", "replace"),
            "output": whole[-keep:].decode("utf-8", "replace")}


def default_echo():
    """Where agent output is echoed in text mode: stderr (stdout stays for loopx's own report)."""
    return sys.stderr
