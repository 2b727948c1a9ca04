"""``loopx dashboard``: start (or reuse) the local browser dashboard, report on it or stop it;
``--trace FILE`` serves one trace archive read-only in the foreground instead."""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser

from loopx.commands import add
from loopx.dashboard import service
from loopx.dashboard.traceapi import TraceApi
from loopx.errors import StateError, UsageError
from loopx.kernel.read import tracefile
from loopx.output import Reply, safe

UNSAFE_WARNING = ("listening on {host}: anyone who can reach this address and obtain the launch link can "
                  "decide gates; use only on a network you trust")


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=dashboard, render=render, example="loopx dashboard --no-open",
            description="Start (or reuse) the dashboard server on 127.0.0.1 in the background and open the "
                        "browser with a single-use sign-in link. With --trace FILE, browse a trace archive "
                        "read-only in this terminal instead. See docs/dashboard.md.")
    p.add_argument("--port", metavar="N", help="port (default: $LOOPX_DASHBOARD_PORT or a stable port per user; "
                                                "0 = any free port)")
    p.add_argument("--no-open", action="store_true", help="do not open a browser; print the launch link")
    p.add_argument("--foreground", action="store_true", help="serve in this terminal until Ctrl-C")
    p.add_argument("--status", action="store_true", help="whether the server runs, where, which version and pid")
    p.add_argument("--stop", action="store_true", help="stop the background server")
    p.add_argument("--unsafe-host", metavar="ADDR",
                   help="UNSAFE: listen on ADDR instead of 127.0.0.1 (reachable by other machines)")
    p.add_argument("--trace", metavar="FILE",
                   help="browse a trace archive (`loopx trace export`) read-only, in this terminal until Ctrl-C; "
                        "it is verified first (exit 3 when it does not verify)")
    p.add_argument("--no-verify", action="store_true",
                   help="with --trace: show the archive without verifying it (the page says \"not verified\")")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port-fallback", action="store_true", help=argparse.SUPPRESS)


def dashboard(ctx, port=None, no_open=False, foreground=False, status=False, stop=False, unsafe_host=None,
              child=False, port_fallback=False, trace=None, no_verify=False):
    if trace is not None or no_verify:
        if trace is None:
            raise UsageError("--no-verify goes with --trace FILE", "e.g. loopx dashboard --trace g1.tar.gz --no-verify")
        if status or stop or unsafe_host is not None:
            raise UsageError("--trace cannot be combined with --status, --stop or --unsafe-host",
                             "loopx dashboard --trace FILE serves the archive on 127.0.0.1 until Ctrl-C")
        return browse_trace(ctx, trace, port=port, no_open=no_open, no_verify=no_verify)
    if sum(map(bool, (status, stop, foreground))) > 1:
        raise UsageError("--status, --stop and --foreground exclude each other", "pass one of them")
    if status:
        d = service.status()
        return Reply(dict(d, mode="status"), exit_code=0 if d["running"] else 1)
    if stop:
        return dict(service.stop(), mode="stop")
    port_n = service.check_port(port) if port is not None else None
    unsafe_host, warnings = _listen_address(unsafe_host, foreground)
    if foreground:
        def announce(server):
            if not child:
                sys.stdout.write(f"loopx dashboard {server.base_url}/ (Ctrl-C stops it)\n"
                                 f"open: {server.launch_url}\n")
                sys.stdout.flush()

        fallback = port_fallback or port_n is None
        d = service.serve(service.default_port() if port_n is None else port_n, fallback=fallback,
                          unsafe_host=unsafe_host, announce=announce,
                          open_browser=not no_open and not child and graphical(),
                          child=child)
        return Reply(dict(d, mode="foreground"), warnings=warnings)
    d = service.ensure(port_n, unsafe_host=unsafe_host)
    d["mode"] = "background"
    d["opened"] = False
    if not no_open and graphical():
        try:
            d["opened"] = bool(webbrowser.open(d["launch_url"]))
        except Exception:  # a missing or broken browser is not an error: the link is printed
            d["opened"] = False
    return Reply(d, warnings=warnings + d.pop("warnings", []))


def _listen_address(unsafe_host: str | None, foreground: bool) -> tuple[str | None, list[str]]:
    """(address to listen on, None for 127.0.0.1; warnings) for ``--unsafe-host``. Raises
    UsageError (exit 2) for something that is not an address."""
    if unsafe_host is None:
        return None, []
    unsafe_host = unsafe_host.strip()
    if not unsafe_host or any(c.isspace() or c in "/?#@" for c in unsafe_host):
        raise UsageError(f"--unsafe-host {unsafe_host!r} is not an address", "use e.g. --unsafe-host 0.0.0.0")
    if unsafe_host in ("127.0.0.1", "localhost"):
        return None, []
    warning = UNSAFE_WARNING.format(host=unsafe_host)
    if foreground:  # serving blocks: say it now, not when the server stops
        sys.stderr.write(f"loopx: warning: {safe(warning)}\n")
    return unsafe_host, [warning]


def browse_trace(ctx, path: str, *, port, no_open: bool, no_verify: bool) -> Reply:
    """Verify (unless ``no_verify``) and serve one trace archive read-only until Ctrl-C.
    Raises UsageError (bad_trace, exit 2) for a file that is not a trace and StateError
    (trace_not_verified, exit 3) for one that does not verify."""
    archive = tracefile.load(path)
    verification = None
    if not no_verify:
        verification = tracefile.verify(archive)
        if not verification["ok"]:
            probs = verification["problems"]
            raise StateError(f"{path!r} does not verify: {probs[0]}" + (f" (and {len(probs) - 1} more)" if len(probs) > 1
                                                                       else ""),
                             f"see every problem with `loopx trace verify {path}`; browse it anyway with --no-verify",
                             code="trace_not_verified")
    port_n = service.check_port(port) if port is not None else 0
    out = sys.stderr if ctx.json else sys.stdout

    def announce(server):
        state = "verified" if verification else "NOT verified"
        out.write(f"loopx dashboard: read-only trace of {archive['manifest'].get('goal_id')} ({state}) at "
                  f"{server.base_url}/ (Ctrl-C stops it)\nopen: {server.launch_url}\n")
        out.flush()

    d = service.serve_trace(TraceApi(archive, verification, path), port_n, announce=announce,
                            open_browser=not no_open and graphical())
    return Reply(dict(d, mode="trace", verified=verification is not None, goal_id=archive["manifest"].get("goal_id")))


def graphical() -> bool:
    """Whether a browser window can open here. Without a display (ssh, containers) Python's
    webbrowser would start a text browser in this terminal, so the link is only printed."""
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def render(d: dict) -> str:
    mode = d.get("mode")
    if mode == "status":
        if d["running"]:
            return (f"dashboard running at {d['url']}  (loopx {d['version']}, pid {d['pid']}, since {d.get('started')})\n"
                    f"log: {safe(d['log'])}")
        extra = f" (removed on next start: stale {safe(d['state_file'])})" if d.get("stale") else ""
        return f"dashboard not running{extra}\nstart it: loopx dashboard"
    if mode == "stop":
        if d["was_running"]:
            return f"stopped the dashboard (pid {d['pid']}, port {d['port']})"
        return "dashboard was not running" + (" (removed a stale state file)" if d.get("stale_file_removed") else "")
    if mode in ("foreground", "trace"):
        return "dashboard stopped"
    verb = {"reused": "already running", "started": "started", "upgraded": "upgraded and restarted",
            "restarted": "restarted (cleaned up a stale server)"}.get(str(d.get("action")), d.get("action"))
    lines = [f"dashboard {verb} at {d['url']}  (loopx {d['version']}, pid {d['pid']})"]
    lines.append(("opened in your browser; link: " if d.get("opened") else "open this link in your browser: ")
                 + d["launch_url"])
    lines.append("stop it: loopx dashboard --stop")
    return "\n".join(lines)
