"""Configuration: the one reader of ``LOOPX_*`` environment variables and of the user's config file.

Environment variables are declared in ``VARS`` (name -> (default, meaning)); ``env(name)`` is the
only way code reads them, so docs/cli.md's environment table (generated from ``VARS``) cannot miss
one. Unknown names raise ``KeyError`` at the call site, which a test exercises for every module.
A number of seconds (``LOOPX_LOCK_TIMEOUT``, ``LOOPX_NOTIFY_BUDGET``, ``LOOPX_SYNC_EVERY``,
``LOOPX_SYNC_TIMEOUT``) is read through ``seconds(name, floor)``: unset or empty means the ``VARS``
default, a value below ``floor`` counts as ``floor``, and anything that is not a finite number is a
``UsageError`` (exit 2) naming the variable, never a silent default.

The user's config file is TOML (read with the standard library's ``tomllib``) at
``$LOOPX_HOME/config.toml`` when ``LOOPX_HOME`` is set, else the platform's config location:
``$XDG_CONFIG_HOME/loopx/config.toml`` (default ``~/.config``) on Linux,
``~/Library/Application Support/loopx/config.toml`` on macOS, ``%APPDATA%\\loopx\\config.toml`` on
Windows. It holds user-level settings that a project must not be able to redirect (notification
targets, host usage limits, signing). Only loopx's own commands write it, through
``set_user_value``; the writer emits a small TOML subset (tables of strings, numbers, booleans and
lists of those), which ``tomllib`` reads back. Hot commands read a parsed copy beside it
(``config.parsed``, ``load_user_config``) instead of importing ``tomllib``.
"""

from __future__ import annotations

import os
import sys

from loopx.kernel.storage import layout

# name -> (default or None, meaning). Keep sorted by name.
VARS: dict[str, tuple[str | None, str]] = {
    "LOOPX_AGENT": (None, "act as this agent (same as --agent); unset means a human"),
    "LOOPX_BROKER": (None, "set by `loopx run` and `loopx sandbox` inside the sandbox: the broker socket loopx commands go through"),
    "LOOPX_DASHBOARD_PORT": (None, "port of the dashboard server (default: a stable per-user port)"),
    "LOOPX_DASHBOARD_STARTED_BY": (None, "set by loopx for a dashboard spawned from an agent session: it records no decision"),
    "LOOPX_DEBUG": (None, "set to 1 to show tracebacks of internal errors (same as --debug)"),
    "LOOPX_DEMO_DEBUG": (None, "set to 1 to keep the demo's scratch folder and print its agent's output"),
    "LOOPX_FENCE": (None, "set by `loopx run` for the agent: the fence of the run's claim"),
    "LOOPX_FULL_EXIT": (None, "set to 1 to end every command through the interpreter's full shutdown "
                               "(slower by about 3 ms; a running profiler or tracer gets it anyway)"),
    "LOOPX_GOAL_ID": (None, "set by `loopx run` for the agent: the goal of the turn"),
    "LOOPX_HOME": (None, "user data folder (registry, hook manifest, dashboard state, config.toml)"),
    "LOOPX_HOST": (None, "this machine's name: in the shared ledgers (refs/loopx/claims, refs/loopx/ledger/*) and their conflicts, and in the log (`node.registered`, shown by history and the review packet when several machines write a store); default: the host name"),
    "LOOPX_ID_SEED": (None, "makes new todo, gate, evidence and run ids deterministic (documentation transcripts, tests)"),
    "LOOPX_INDEX_URL": (None, "package index that `loopx update` checks (no default: PyPI's loopx is another project)"),
    "LOOPX_LOCK_TIMEOUT": ("10", "seconds a writer waits for the store lock before exit 4 (store busy)"),
    "LOOPX_NOW": (None, "ISO-8601 UTC time that replaces the clock (tests, simulations)"),
    "LOOPX_NOTIFY_BUDGET": ("3", "seconds should-run and `loopx run` may spend sending notifications after a decision; what does not fit stays queued for the next one"),
    "LOOPX_TZ": (None, "your time zone for daily and weekly cadences (an IANA name such as Europe/Berlin); default: TZ, else the system's local time; a goal's own (`goal update --tz`) wins"),
    "LOOPX_NO_UPDATE_CHECK": (None, "set to 1 to skip update checks in doctor and update"),
    "LOOPX_PACKET_JSON": (None, "set by `loopx run` for the agent: path of the turn packet as JSON"),
    "LOOPX_PROJECT_DIR": (None, "set by `loopx run` for the agent: the project root"),
    "LOOPX_PROMPT_FILE": (None, "set by `loopx run` for the agent: path of the turn packet as text"),
    "LOOPX_RUN_ID": (None, "set by `loopx run` for the agent: the open run; loopx commands default to it"),
    "LOOPX_SANDBOX": (None, "off: run agents without the kernel sandbox (docs/security.md); unset: the sandbox where the system has one"),
    "LOOPX_SANDBOXED": (None, "set inside every sandbox loopx starts (an agent marker)"),
    "LOOPX_SANDBOX_NET": (None, "open: do not filter the sandbox's TCP connections (default: port 443 and LOOPX_SANDBOX_PORTS only)"),
    "LOOPX_SANDBOX_PORTS": (None, "more TCP ports a sandboxed agent may connect to (comma or space separated)"),
    "LOOPX_SANDBOX_READ": (None, "more folders a sandboxed agent may read (os.pathsep separated)"),
    "LOOPX_SANDBOX_WRITE": (None, "more folders a sandboxed agent may write (os.pathsep separated)"),
    "LOOPX_STOP_HOOK_CAP": ("8", "continuations the Stop hook grants per session before letting the agent stop"),
    "LOOPX_SYNC_EVERY": ("60", "seconds between the automatic syncs should-run and run do for shared goals"),
    "LOOPX_SYNC_REMOTE": (None, "the git remote `loopx sync` uses when --remote is not given (default origin)"),
    "LOOPX_SYNC_TIMEOUT": ("30", "seconds each git call of `loopx sync` may take before it reports the remote unreachable"),
    "LOOPX_TODO_ID": (None, "set by `loopx run` for the agent: the todo of the turn"),
    "LOOPX_VERIFY_POLICY": (None, "set by the broker: the sandbox policy file verify commands of a brokered call run under"),
}


def env(name: str) -> str | None:
    """The value of ``LOOPX_*`` variable ``name`` (empty counts as unset), else its default.

    Raises KeyError for a name not declared in ``VARS``.
    """
    default = VARS[name][0]
    value = os.environ.get(name)
    return value if value else default


def seconds(name: str, floor: float = 0.0) -> float:
    """``LOOPX_*`` variable ``name`` as a number of seconds: its ``VARS`` default when unset or
    empty, at least ``floor``. Raises UsageError (exit 2) naming the variable when the value is not
    a finite number ("10s", "inf", "nan"), so a typo is never silently replaced by the default."""
    raw = env(name)
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = _INF
    if not abs(value) < _INF:  # not a number, inf or nan
        from loopx.errors import UsageError

        raise UsageError(f"{name} must be a number of seconds, not {raw!r}",
                         f"set it to a number such as {name}={VARS[name][0]}, or unset it for the default",
                         code="bad_env", details={"variable": name})
    return max(floor, value)


_INF = float("inf")


def data_home() -> str:
    """The user-level data folder: ``LOOPX_HOME``, else the platform's data location + ``loopx``."""
    base = env("LOOPX_HOME")
    if base:
        return os.path.abspath(base)
    if sys.platform == "win32":
        root = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    elif sys.platform == "darwin":
        root = os.path.expanduser("~/Library/Application Support")
    else:
        root = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return os.path.join(root, "loopx")


def config_path() -> str:
    """Path of the user's ``config.toml`` (it may not exist)."""
    base = env("LOOPX_HOME")
    if base:
        return os.path.join(os.path.abspath(base), "config.toml")
    if sys.platform == "win32":
        root = os.environ.get("APPDATA") or os.path.expanduser("~\\AppData\\Roaming")
    elif sys.platform == "darwin":
        root = os.path.expanduser("~/Library/Application Support")
    else:
        root = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return os.path.join(root, "loopx", "config.toml")


PARSED = "config.parsed"  # beside config.toml: the parsed config (load_user_config)
_PARSED_MAGIC = b"LXCF"
_RACY_NS = 2_000_000_000  # a config changed this recently is parsed, not kept (git's racy-clean rule)
_memo: dict = {}  # this process's last parsed config: {"key": stat key, "data": marshal bytes}


def load_user_config() -> dict:
    """The user's config as a dict (``{}`` when the file is missing); a new dict on every call.

    Parsing TOML means importing ``tomllib``, which imports ``re`` and ``typing``: about twice what a
    bare interpreter's start costs, on every should-run, ``next`` and turn of a user who set
    anything (a notification channel, usage limits, signing). So the parsed config is kept beside
    the file (``config.parsed``: ``b"LXCF"``, the CRC-32 of the rest, then ``marshal`` of
    ``{"v": 1, "key": [mtime_ns, ctime_ns, size, inode, device], "config": dict}``) and used while
    the file's ``stat`` is the same; a config changed in the last 2 s is parsed every time (an edit
    in the same clock tick could keep its stamps), one with values ``marshal`` cannot hold (TOML
    dates) is never kept, and a damaged or foreign copy is no copy. The copy lies in the config's
    own folder, which the guard and the sandbox protect as they do the file (docs/security.md).

    Raises ``StateError`` (exit 3) when the file exists but cannot be read or is not valid TOML,
    naming the file.
    """
    import marshal
    import time

    path = config_path()
    now = time.time_ns()  # before the stat: a change after it is always within the racy window
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        _unreadable(path, exc)
    key = [st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev]
    if _memo.get("key") != key:
        _memo.clear()
        data = _read_parsed(path, key)
        if data is None:
            cfg = _parse(path)
            if now - st.st_mtime_ns < _RACY_NS or now - st.st_ctime_ns < _RACY_NS:
                return cfg  # changed too recently to trust its stamps: parsed again next time
            try:
                data = marshal.dumps(cfg)
            except ValueError:  # a TOML date or time: parsed on every call
                return cfg
            _keep_parsed(path, key, data)
        _memo.update(key=key, data=data)
    return marshal.loads(_memo["data"])


def _unreadable(path: str, exc: Exception):
    from loopx.errors import StateError

    raise StateError(f"the user config {path} cannot be read: {exc}",
                     "fix or remove the file; loopx's own commands rewrite it") from None


def _parse(path: str) -> dict:
    from loopx.kernel.storage.fs import MOST_SMALL, read_bytes

    try:
        raw = read_bytes(path, most=MOST_SMALL)  # a regular file only: a FIFO there is an error, never a wait
    except OSError as exc:
        _unreadable(path, exc)
    import tomllib  # imports re and typing: only when there is a file to parse and no parsed copy

    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        _unreadable(path, exc)
    raise AssertionError("unreachable")  # pragma: no cover - _unreadable raises


def _read_parsed(path: str, key: list) -> bytes | None:
    """The marshalled config of the parsed copy beside ``path`` when it was made from the file with
    this ``key``, else None (missing, damaged, foreign, stale)."""
    import marshal
    import zlib

    from loopx.kernel.storage.fs import read_bytes

    try:
        blob = read_bytes(os.path.join(os.path.dirname(path), PARSED), 1 << 20)
        if blob[:4] != _PARSED_MAGIC or int.from_bytes(blob[4:8], "little") != zlib.crc32(blob[8:]):
            return None
        entry = marshal.loads(blob[8:])
        if type(entry) is not dict or entry.get("v") != 1 or entry.get("key") != key \
                or type(entry.get("config")) is not dict:
            return None
        return marshal.dumps(entry["config"])
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _keep_parsed(path: str, key: list, data: bytes) -> None:
    """Write the parsed copy of ``data`` (the config, marshalled) beside ``path``: best effort,
    never through a symlink, readable by the owner only."""
    import marshal
    import zlib

    from loopx.kernel.storage.fs import atomic_write

    body = marshal.dumps({"v": 1, "key": key, "config": marshal.loads(data)})
    try:
        atomic_write(os.path.join(os.path.dirname(path), PARSED),
                     _PARSED_MAGIC + zlib.crc32(body).to_bytes(4, "little") + body,
                     mode=0o600, sync=False, follow=False)
    except OSError:
        pass


def user_config_problem() -> str | None:
    """Why the user's config cannot be read (one line), or None when it reads or is missing."""
    from loopx.errors import StateError

    try:
        load_user_config()
    except StateError as exc:
        return exc.message
    return None


def get_user_value(dotted: str, default=None):
    """``get_user_value("notify.webhook.url")`` -> the value, or ``default`` when absent."""
    node: object = load_user_config()
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def set_user_value(dotted: str, value) -> dict:
    """Set (or, with ``value is None``, remove) ``dotted`` in the user's config; returns the new config.

    ``dotted`` is ``table.key`` or ``table.sub.key`` (bare keys ``[A-Za-z0-9_-]``); values are str,
    int, float, bool or lists of those. Written atomically under a lock in the data folder.
    Raises ``UsageError`` for a malformed key or value type, ``StateError`` for an unreadable file.
    """
    from loopx.errors import UsageError

    parts = dotted.split(".")
    if len(parts) < 2 or not all(p and all(c.isalnum() or c in "_-" for c in p) for p in parts):
        raise UsageError(f"bad config key {dotted!r}", "use table.key, e.g. notify.desktop")
    if value is not None:
        _check_value(dotted, value)
    from loopx.kernel.storage.fs import atomic_write, locked

    os.makedirs(data_home(), exist_ok=True)
    with locked(os.path.join(data_home(), layout.DATA_LOCK), seconds("LOOPX_LOCK_TIMEOUT")):
        cfg = load_user_config()
        node = cfg
        for part in parts[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                if value is None:
                    return cfg
                nxt = node[part] = {}
            node = nxt
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
        path = config_path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, dumps_toml(cfg).encode("utf-8"))
        os.chmod(path, 0o600)
    return cfg


def _check_value(key: str, value) -> None:
    from loopx.errors import UsageError

    items = value if isinstance(value, list) else [value]
    for v in items:
        if not isinstance(v, (str, int, float, bool)):
            raise UsageError(f"config value for {key} must be text, a number or true/false",
                             "pass a plain value")


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    out = ['"']
    for ch in str(v):
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def dumps_toml(cfg: dict) -> str:
    """Serialise ``cfg`` (nested dicts of scalars and lists) as TOML that ``tomllib`` reads back."""
    lines = ["# loopx user config: written by loopx's own commands (loopx notify set, ...)."]

    def table(prefix: str, node: dict) -> None:
        scalars = [(k, v) for k, v in node.items() if not isinstance(v, dict)]
        subs = [(k, v) for k, v in node.items() if isinstance(v, dict)]
        if prefix and scalars:
            lines.append("")
            lines.append(f"[{prefix}]")
        for k, v in scalars:
            lines.append(f"{k} = {_scalar(v)}")
        for k, v in subs:
            table(f"{prefix}.{k}" if prefix else k, v)

    table("", cfg)
    return "\n".join(lines) + "\n"
