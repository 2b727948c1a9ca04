"""Start, reuse, upgrade, stop and report the background dashboard server.

The running server is described by ``dashboard.json`` in the user data folder
(``loopx.kernel.storage.registry.home()``), written by the server itself after it has bound its port
(mode 0600, it holds the launch token): ``{pid, port, host, version, token, instance, started,
log}``. ``instance`` is a random id the server also reports at ``/api/health``; a server is only
ever signalled after that health check proved the pid belongs to it.

- ``ensure()``: reuse a healthy server of this version; replace one of another version
  (auto-upgrade); clean up a stale or unreadable file and start afresh (self-healing).
- ``serve()``: run a server in this process until SIGTERM/SIGINT (``--foreground`` and the child
  that ``ensure()`` spawns detached in its own session so it survives the terminal closing).
- ``stop()`` and ``status()``.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import webbrowser
from contextlib import nullcontext

import loopx
from loopx import __version__, config
from loopx.dashboard.server import build_id, launch_token, make_server
from loopx.errors import Conflict, LoopxError, StateError, UsageError
from loopx.kernel.humans import agent_evidence
from loopx.kernel.read import notices
from loopx.kernel.storage import clock, registry
from loopx.kernel.storage.fs import atomic_write
from loopx.kernel.storage.store import DIRNAME, Store
from loopx.notify import channels, outbox

STATE_NAME = "dashboard.json"
LOG_NAME = "dashboard.log"
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
LOG_KEEP = 1 << 20
_FIELDS = {"pid": int, "port": int, "version": str, "token": str, "instance": str}


def _stop_on_signals(server) -> threading.Event:
    """SIGTERM, SIGINT and SIGHUP shut ``server`` down (once, from another thread, as
    ``serve_forever`` requires); the event is set when one arrived."""
    stopping = threading.Event()

    def on_signal(signum, frame):
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), on_signal)
    return stopping


def _serve(server, open_browser: bool, on_close=None) -> dict:
    """Open the launch URL if asked, serve until a signal stops ``server``, then close it (and call
    ``on_close``). Returns ``{"stopped": True, "port"}``."""
    if open_browser:
        webbrowser.open(server.launch_url)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        if on_close is not None:
            on_close()
    return {"stopped": True, "port": server.port}


def home() -> str:
    return registry.home()


def state_path() -> str:
    return os.path.join(home(), STATE_NAME)


def log_path() -> str:
    return os.path.join(home(), LOG_NAME)


def default_port() -> int:
    """``LOOPX_DASHBOARD_PORT`` or a stable port per user (47000 + uid % 1000)."""
    env = config.env("LOOPX_DASHBOARD_PORT")
    if env:
        return check_port(env, "LOOPX_DASHBOARD_PORT")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return 47000 + uid % 1000


def check_port(value, what: str = "--port") -> int:
    text = str(value).strip()
    if not text.isdigit() or int(text) > 65535:
        raise UsageError(f"{what} must be a port number from 0 to 65535, not {value!r}",
                         "use e.g. --port 47000, or --port 0 for any free port")
    return int(text)


# ---------------------------------------------------------------------- the state file
def read_state() -> dict | None:
    """The state file as a dict, None when there is none, ``{"corrupt": reason}`` when unusable."""
    try:
        with open(state_path(), encoding="utf-8") as fh:
            info = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"corrupt": f"unreadable: {exc}"}
    if not isinstance(info, dict) or any(not isinstance(info.get(k), t) for k, t in _FIELDS.items()):
        return {"corrupt": "missing fields"}
    return info


def write_state(info: dict) -> None:
    os.makedirs(home(), exist_ok=True)

    atomic_write(state_path(), json.dumps(info, indent=2) + "\n", mode=0o600)


def remove_state(instance: str | None = None) -> None:
    """Delete the state file (only if it still names ``instance``, when given)."""
    if instance is not None:
        info = read_state()
        if not info or info.get("instance") != instance:
            return
    try:
        os.unlink(state_path())
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------------- probing processes
def connect_host(host: str | None) -> str:
    """The address a local client uses for a server bound to ``host``."""
    return "127.0.0.1" if not host or host in ("0.0.0.0", "localhost") else host


def probe(port: int, timeout: float = 2.0, host: str | None = None) -> dict | None:
    """``/api/health`` of a dashboard on ``host`` (default 127.0.0.1):``port``, or None when nothing
    sane answers."""
    addr = connect_host(host)
    conn = http.client.HTTPConnection(addr, port, timeout=timeout)
    try:
        conn.request("GET", "/api/health", headers={"Host": f"{addr}:{port}"})
        resp = conn.getresponse()
        if resp.status != 200:
            return None
        data = json.loads(resp.read(4096))
        return data if isinstance(data, dict) and data.get("app") == "loopx-dashboard" else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":
        return True  # the health probe decides on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _live(info: dict | None) -> dict | None:
    """The health answer when ``info`` describes the server that really answers on its port."""
    if not info or info.get("corrupt"):
        return None
    health = probe(info["port"], host=info.get("host"))
    if health and health.get("instance") == info["instance"] and health.get("pid") == info["pid"]:
        return health
    return None


def terminate(pid: int, port: int, timeout: float = STOP_TIMEOUT, host: str | None = None) -> None:
    """SIGTERM a verified dashboard process, SIGKILL it after ``timeout`` seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid) or (sys.platform == "win32" and probe(port, timeout=0.5, host=host) is None):
            return
        time.sleep(0.05)
    if hasattr(signal, "SIGKILL"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------------- public operations
def _public(info: dict, health: dict | None = None) -> dict:
    port = info["port"]
    return {"running": True, "pid": info["pid"], "port": port, "host": info.get("host", "127.0.0.1"),
            "url": f"http://{connect_host(info.get('host'))}:{port}/", "version": (health or {}).get("version", info["version"]),
            "started": info.get("started"), "state_file": state_path(), "log": info.get("log") or log_path()}


def status() -> dict:
    """``{running, pid, port, url, version, started, stale, state_file, log}``; when running also
    ``build`` and ``current`` (same version and build as this loopx: `loopx dashboard` would reuse it)."""
    info = read_state()
    health = _live(info)
    if health and info is not None:  # a live server implies its state file
        return dict(_public(info, health), stale=False, build=health.get("build"), current=current(health))
    out = {"running": False, "state_file": state_path(), "log": log_path(), "stale": info is not None}
    if info and not info.get("corrupt"):
        out.update(pid=info["pid"], port=info["port"], version=info["version"])
    return out


def stop() -> dict:
    """Stop the running server (verified through its health check) and remove the state file."""
    info = read_state()
    health = _live(info)
    if health and info is not None:
        terminate(info["pid"], info["port"], host=info.get("host"))
        remove_state()
        return {"stopped": True, "was_running": True, "pid": info["pid"], "port": info["port"],
                "version": health.get("version")}
    if info is not None:
        remove_state()
    return {"stopped": False, "was_running": False, "stale_file_removed": info is not None}


def _lock():
    d = os.path.join(home(), "dashboard")
    os.makedirs(d, exist_ok=True)
    return Store(d).lock(timeout=START_TIMEOUT + STOP_TIMEOUT + 5)


def ensure(port: int | None = None, unsafe_host: str | None = None) -> dict:
    """Reuse, upgrade, heal or start the background server. Returns the public info plus
    ``action`` (reused|started|upgraded|restarted), ``launch_url`` and ``warnings``."""
    with _lock():
        info = read_state()
        warnings: list[str] = []
        action = "started"
        health = _live(info)
        if info is not None and current(health):
            if port not in (None, 0) and port != info["port"]:
                warnings.append(f"the dashboard already runs on port {info['port']}; "
                                f"stop it with `loopx dashboard --stop` to move it to {port}")
            return dict(_public(info, health), action="reused", launch_url=_launch(info), warnings=warnings)
        if health and info is not None:
            terminate(info["pid"], info["port"], host=info.get("host"))
            remove_state()
            action = "upgraded"
            warnings.append(f"replaced the dashboard of loopx {health.get('version')} (build {health.get('build')}) "
                            f"with {__version__} (build {_build()})")
        elif info is not None:
            remove_state()
            action = "restarted"
            what = info.get("corrupt") or f"pid {info['pid']} on port {info['port']} is not a running dashboard"
            warnings.append(f"cleaned up a stale {STATE_NAME} ({what})")
        explicit = port is not None
        if port is None:
            port = info["port"] if info and not info.get("corrupt") else default_port()
        new = spawn(port, fallback=not explicit, unsafe_host=unsafe_host)
        return dict(_public(new), action=action, launch_url=_launch(new), warnings=warnings)


def _build() -> str:
    return build_id()


def current(health: dict | None) -> bool:
    """True when ``health`` is from a server of this loopx version and dashboard build."""
    return health is not None and bool(health) and health.get("version") == __version__ \
        and health.get("build") == _build()


def _launch(info: dict) -> str:
    return f"http://{connect_host(info.get('host'))}:{info['port']}/launch?token={launch_token(info['token'])}"


def _apart() -> dict:
    """How the server is started apart from the command that starts it (``subprocess.Popen``
    keywords). POSIX: its own process group, so a Ctrl-C in the terminal and the shell's hang-up of
    its jobs never reach it (it is none of them), but in the same session, so it keeps the terminal
    it was started from as its controlling one: while an agent session runs, a process with no
    terminal up to its session's leader records no human decision (``agentseen.detached``), and a
    server in a session of its own (``setsid``) could then decide nothing on the dashboard, the one
    channel a person has besides the terminal. Windows: a detached process in a group of its own."""
    if sys.platform == "win32":
        return {"creationflags": getattr(subprocess, "DETACHED_PROCESS", 0) | getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    return {"process_group": 0}


def spawn(port: int, *, fallback: bool, unsafe_host: str | None = None) -> dict:
    """Start ``loopx dashboard --foreground`` detached; wait until it has written its state."""
    os.makedirs(home(), exist_ok=True)
    _trim_log()
    args = [sys.executable, "-m", "loopx", "dashboard", "--foreground", "--no-open", "--port", str(port), "--child"]
    if fallback:
        args.append("--port-fallback")
    if unsafe_host:
        args += ["--unsafe-host", unsafe_host]
    env = dict(os.environ)

    who = agent_evidence(None)  # judged here: the detached server no longer has the agent among its parents
    if who:
        env["LOOPX_DASHBOARD_STARTED_BY"] = who
    else:
        env.pop("LOOPX_DASHBOARD_STARTED_BY", None)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(loopx.__file__)))
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    kw = _apart()
    with open(log_path(), "ab") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                cwd=home(), close_fds=True, **kw)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        info = read_state()
        if info and not info.get("corrupt") and info["pid"] == proc.pid and _live(info):
            return info
        if proc.poll() is not None:
            if proc.returncode == 4:  # the child could not take the port it was told to use
                raise Conflict(f"the dashboard could not start: {_log_tail().removeprefix('loopx: error: ')}",
                               "pick another port with --port N (or --port 0 for any free port)")
            raise StateError(f"the dashboard server exited at start: {_log_tail()}",
                             f"see {log_path()}; `loopx dashboard --foreground` shows the error directly")
        time.sleep(0.05)
    proc.kill()
    raise StateError("the dashboard server did not come up in time", f"see {log_path()}")


def _trim_log() -> None:
    try:
        if os.path.getsize(log_path()) > LOG_KEEP:
            os.replace(log_path(), log_path() + ".1")
    except OSError:
        pass


def _log_tail() -> str:
    try:
        with open(log_path(), "rb") as fh:
            fh.seek(max(0, os.path.getsize(log_path()) - 2000))
            lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("loopx: error: ")]
        return (errors or lines or ["no output"])[-1][:300]
    except OSError:
        return "no log"


# ---------------------------------------------------------------------- serving in this process
def bind(port: int, *, fallback: bool, unsafe_host: str | None = None):
    """Bind the server (falling back to any free port when allowed). Raises Conflict when taken."""
    host = unsafe_host or "127.0.0.1"
    extra: tuple[str, ...] = ()
    if unsafe_host and unsafe_host in ("0.0.0.0", "::"):
        extra = (socket.gethostname(), socket.getfqdn())
    try:
        return make_server(host, port, extra_hosts=extra, log=sys.stderr)
    except OSError as exc:
        if fallback and port != 0:
            return make_server(host, 0, extra_hosts=extra, log=sys.stderr)
        raise Conflict(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                       "pick another port with --port N (or --port 0 for any free port)") from None


def serve(port: int, *, fallback: bool, unsafe_host: str | None, announce, open_browser: bool,
          child: bool = False) -> dict:
    """Run the server in this process until SIGTERM/SIGINT. ``announce(server)`` is called once it
    listens (prints the launch URL). Refuses (Conflict) when a dashboard of this version runs.
    ``child``: spawned by ``ensure()``, which holds the service lock and has cleared the way."""
    with nullcontext() if child else _lock():
        info = read_state()
        health = _live(info)
        if info is not None and current(health):
            raise Conflict(f"a dashboard already runs (pid {info['pid']}, port {info['port']})",
                           "open it with `loopx dashboard`, or stop it with `loopx dashboard --stop`")
        if health and info is not None:
            terminate(info["pid"], info["port"], host=info.get("host"))
        server = bind(port, fallback=fallback, unsafe_host=unsafe_host)
        write_state({"pid": os.getpid(), "port": server.port, "host": unsafe_host or "127.0.0.1",
                     "version": __version__, "token": server.token, "instance": server.instance,
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "log": log_path()})
    stopping = _stop_on_signals(server)
    announce(server)
    threading.Thread(target=_notify_loop, args=(stopping,), name="loopx-notify", daemon=True).start()
    return _serve(server, open_browser, lambda: remove_state(server.instance))


NOTIFY_EVERY = 30.0  # seconds between the service's passes over the registered projects' outboxes


def _notify_loop(stopping: threading.Event) -> None:
    """Send queued notifications of every registered project (loopx.notify.outbox), so a person is
    told even when no cron job runs should-run. Errors are ignored; the next pass retries."""
    while not stopping.wait(NOTIFY_EVERY):
        try:
            flush_all()
        except Exception:  # noqa: BLE001 - the dashboard must keep serving
            pass


def flush_all() -> int:
    """One pass: flush each registered project that has pending notices; returns how many were sent."""
    cfg = outbox.user_cfg()
    if not channels.configured(cfg):
        return 0
    sent = 0
    for path in registry.load():
        root = os.path.join(path, DIRNAME)
        if not os.path.isdir(root):
            continue
        try:
            store = Store(root)
            # notices and deliveries are kept whole in the live view: no history is folded per pass
            if notices.maybe_pending(store.load(save_snapshot=False, view="live"), clock.now_iso()):
                sent += len(outbox.flush(store, cfg)["sent"])
        except (LoopxError, OSError):
            continue
    return sent


# ---------------------------------------------------------------------- a trace file, read-only
def serve_trace(trace, port: int, *, announce, open_browser: bool) -> dict:
    """Serve one trace archive (a ``TraceApi``) read-only on 127.0.0.1:``port`` in this process
    until SIGTERM/SIGINT. Independent of the background service: no state file, no lock, no
    notifications, no project. Raises Conflict when the port is taken."""
    try:
        server = make_server("127.0.0.1", port, log=sys.stderr, trace=trace)
    except OSError as exc:
        raise Conflict(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}",
                       "pick another port with --port N (or leave it out for any free port)") from None
    _stop_on_signals(server)
    announce(server)
    return _serve(server, open_browser)
