"""The one brokered channel from a sandboxed agent to the store.

The parent (``loopx run`` or ``loopx sandbox``) holds a unix socket (``Broker``); its path is
in ``LOOPX_BROKER``. Inside the sandbox ``loopx`` sends its whole command line there
(``forward``) instead of opening ``.loopx/`` (which it cannot write there anyway); the parent
checks it against ``AGENT_COMMANDS``, runs it as the turn's agent (``--agent NAME``,
``LOOPX_AGENT``, ``LOOPX_RUN_ID`` of the current run) outside the sandbox, and sends back its
output and exit code. Everything else (every human-only operation, sync with the remote, a new
run or sandbox, the dashboard) is refused with exit 4 (``broker_refused``) and recorded as a
``note`` evidence on the run. Verify commands run by a brokered call run in the turn's sandbox
again (``LOOPX_VERIFY_POLICY``).

Wire format: one JSON line each way. Request ``{"argv": [str], "stdin": str|null}``; reply
``{"exit_code": int, "stdout": str, "stderr": str}``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

from loopx.kernel.read import queries
from loopx.kernel.storage import actors
from loopx.kernel.write import evidence

MAX_REQUEST = 8 * 1024 * 1024

# (words, flags that make it refused) an agent may run through the broker; anything else is refused
AGENT_COMMANDS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("status",), ()), (("next",), ()), (("history",), ()), (("heartbeat-prompt",), ()),
    # options that name a file the parent would read or write outside the sandbox are refused:
    # evidence's output comes on stdin (--output -), the review packet on stdout
    (("evidence",), ("--output-file",)), (("hook",), ()), (("inbox",), ()), (("review-packet",), ("--output",)),
    (("todo", "add"), ()), (("todo", "done"), ("--force-unverified",)), (("todo", "claim"), ()),
    (("todo", "renew"), ()), (("todo", "release"), ()), (("todo", "block"), ()), (("todo", "list"), ()),
    (("todo", "show"), ()), (("todo", "finish"), ("--force-unverified",)),
    (("gate", "open"), ()), (("gate", "list"), ()), (("gate", "show"), ()), (("gate", "check"), ()),
    (("turn",), ("--force-unverified",)), (("quota", "should-run"), ()), (("quota", "show"), ()),
    (("goal", "list"), ()), (("goal", "show"), ()), (("scope", "show"), ()), (("scope", "check"), ()),
    (("agent", "list"), ()), (("agent", "register"), ()), (("handoff",), ()), (("usage",), ("set",)),
    (("action", "push"), ()), (("action", "list"), ()), (("doctor",), ("--fix",)),
    # research experiments: the agent states its hypothesis and reads the trials (apply, baseline,
    # continue and promote stay a human's)
    (("trial", "hypothesis"), ()), (("trial", "list"), ()), (("trial", "show"), ()), (("experiment", "show"), ()),
)
_VALUE_GLOBALS = ("--format",)


def _positional(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in _VALUE_GLOBALS:
            skip = True
            continue
        if a == "--":
            break
        if not a.startswith("-"):
            out.append(a)
    return out


def refusal(argv: list[str]) -> str | None:
    """Why the broker refuses ``argv`` (loopx's arguments), or None when an agent may run it."""
    for a in argv:
        name = a.split("=", 1)[0]
        if name in ("--agent", "--project"):
            return f"{name} is set by the broker (the turn's agent and project)"
    words = _positional(argv)
    for prefix, bad in AGENT_COMMANDS:
        if tuple(words[:len(prefix)]) == prefix:
            hit = [b for b in bad if b in argv or any(x.startswith(b + "=") for x in argv) or b in words]
            if hit:
                return f"`loopx {' '.join(words[:3])} {hit[0]}` is for humans only"
            return None
    what = " ".join(words[:2]) or "(no command)"
    return (f"`loopx {what}` is not an agent operation (human decisions, governance changes, sync, "
            "runs and the dashboard are for a human outside the sandbox)")


class Broker:
    """``Broker(store, identity, run_dir, verify_policy_file)``; ``identity()`` gives
    ``(agent_name, run_id or None)`` at call time. ``start()`` listens on ``run_dir/broker.sock``
    (``path``); ``close()`` stops. ``refused``: the refused command lines, in order."""

    def __init__(self, store, identity, run_dir: str, verify_policy_file: str | None = None, before=None) -> None:
        self.store, self.identity = store, identity
        self.before = before  # called before each brokered call (the session's .git check)
        self.path = os.path.join(run_dir, "broker.sock")
        self.verify_file = verify_policy_file
        self.refused: list[dict] = []
        self.calls = 0
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> Broker:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(self.path)
        os.chmod(self.path, 0o600)
        s.listen(16)
        self._sock = s
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        s, self._sock = self._sock, None
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def _serve(self) -> None:
        while self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                req = _read_line(conn)
                reply = self.perform(req)
            except (OSError, ValueError) as exc:
                reply = {"exit_code": 2, "stdout": "", "stderr": f"loopx broker: bad request ({exc})\n"}
            except Exception as exc:  # noqa: BLE001 - the agent gets an answer, never a hung socket
                reply = {"exit_code": 70, "stdout": "", "stderr": f"loopx broker: internal error ({exc})\n"}
            try:
                conn.sendall(json.dumps(reply).encode("utf-8") + b"\n")
            except OSError:
                pass

    def perform(self, req: dict) -> dict:
        """Check and run one request (see the module docstring); the reply dict."""
        argv = req.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a list of strings")
        stdin = req.get("stdin") if isinstance(req.get("stdin"), str) else None
        agent, run_id = self.identity()
        why = refusal(argv)
        if why:
            self._record_refusal(argv, why, agent, run_id)
            return {"exit_code": 4, "stdout": "",
                    "stderr": f"error: loopx broker refused: {why}\n  hint: ask a human to run it in their own "
                              "terminal (outside any sandbox)\n"}
        with self._lock:
            self.calls += 1
            if self.before is not None:
                self.before()
        env = {k: v for k, v in os.environ.items() if k not in ("LOOPX_BROKER", "LOOPX_RUN_ID")}
        env["LOOPX_AGENT"] = agent
        if run_id:
            env["LOOPX_RUN_ID"] = run_id
            # the variables loopx gives the agent of a turn: the guard counts its calls per run (issue 23)
            env["LOOPX_PROJECT_DIR"] = self.store.project_dir
        if self.verify_file:
            env["LOOPX_VERIFY_POLICY"] = self.verify_file
        cmd = [sys.executable, "-m", "loopx", "--project", self.store.project_dir, "--agent", agent, *argv]
        proc = subprocess.run(cmd, cwd=self.store.project_dir, env=env, capture_output=True,
                              input=(stdin or "").encode("utf-8"))
        return {"exit_code": proc.returncode, "stdout": proc.stdout.decode("utf-8", "replace"),
                "stderr": proc.stderr.decode("utf-8", "replace")}

    def _record_refusal(self, argv, why, agent, run_id) -> None:
        with self._lock:
            self.refused.append({"argv": argv, "why": why})
        try:
            state = self.store.load()
            run = queries.resolve_run(state, run_id) if run_id else None
            goal = run["goal"] if run else None
            evidence.add(self.store, actors.agent(agent), goal, kind="note", run=run_id if run else None,
                         summary=f"sandbox broker refused `loopx {' '.join(argv)[:160]}`: {why}"[:300])
        except Exception:  # noqa: BLE001 - the refusal stands even when it cannot be recorded
            pass


def _read_line(conn: socket.socket) -> dict:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_REQUEST:
            raise ValueError("request too large")
    return json.loads(buf.decode("utf-8"))


def forward(path: str, argv: list[str]) -> int:
    """The client side (``loopx`` inside a sandbox): send ``argv`` to the broker at ``path``,
    print its output, return its exit code (3 when the broker does not answer)."""
    stdin = None
    reads = "hook" in _positional(argv)[:1] or any(a == "--output" and b == "-" for a, b in zip(argv, argv[1:], strict=False))
    if reads and not sys.stdin.isatty():
        try:
            stdin = sys.stdin.read()
        except (OSError, ValueError):
            stdin = None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            s.sendall(json.dumps({"argv": argv, "stdin": stdin}).encode("utf-8") + b"\n")
            reply = _read_line(s)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: the loopx broker at {path} does not answer ({exc})\n"
                         "  hint: loopx commands inside a sandbox go through the `loopx run` or `loopx sandbox` "
                         "that started it; run them while it runs\n")
        return 3
    sys.stdout.write(reply.get("stdout", ""))
    sys.stderr.write(reply.get("stderr", ""))
    sys.stdout.flush()
    return int(reply.get("exit_code", 70))
