"""Codex CLI (developers.openai.com/codex/hooks): the Claude Code shapes (``PreToolUse`` deny
through ``hookSpecificOutput``, ``Stop`` ``decision: block``), shell calls as ``Bash``/``shell``/
``exec_command`` and edits as ``apply_patch``. Config: ``.codex/hooks.json`` or
``$CODEX_HOME/hooks.json``; hooks run only after the user trusts them in ``/hooks``."""

from __future__ import annotations

import os

from loopx.hosts.adapters import base
from loopx.hosts.adapters.claude_code import allow, cont, context, deny, let_stop  # noqa: F401 (Codex speaks Claude Code's hook protocol: the same answers)

NAME = "codex"
KIND = base.kind("codex")
WINDOWS_SHELL = "pwsh"  # generic: not verified against Codex's Windows build
VERIFIED = "developers.openai.com/codex/hooks, openai/codex PR #20756 (apply_patch); Windows shell not verified"
SHAPE = base.shape("codex")  # the row of loopx.hostfacts


def config_path(scope: str, root: str) -> str:
    return base.hook_file(NAME, scope, root)  # the path is a fact of loopx.hostfacts


def wanted(cmd, cap_arg: str, cap: int = 8) -> dict:
    def handler(kind: str, timeout: int, extra: str = "") -> dict:
        return {"type": "command", "command": cmd(kind, extra), "timeout": timeout}

    # no matcher on PreToolUse: every tool is checked (shell, apply_patch, MCP tools naming a path)
    return {"SessionStart": [{"matcher": "startup|resume|clear", "hooks": [handler("session-start", 10)]}],
            "PreToolUse": [{"hooks": [handler("pre-tool", 10)]}],
            "Stop": [{"hooks": [handler("stop", 30, cap_arg)]}]}


def disabled(scope: str, root: str) -> str | None:
    """Why Codex would not run hooks, as far as its config.toml says: ``[features] hooks = false``
    in the project's ``.codex/config.toml`` or ``$CODEX_HOME/config.toml``; else None."""
    import tomllib

    paths = [os.path.join(os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex"),
                          "config.toml")]
    if scope == "project":
        paths.insert(0, os.path.join(root, ".codex", "config.toml"))
    for path in paths:
        try:
            with open(path, "rb") as fh:
                conf = tomllib.load(fh)
        except (OSError, ValueError):
            continue
        features = conf.get("features") if isinstance(conf, dict) else None
        if isinstance(features, dict) and features.get("hooks") is False:
            return f"{path} sets [features] hooks = false, so Codex runs no hooks"
    return None


# ------------------------------------------------------------------ hook trust (issue 23)
_EVENT_KEYS = {"PreToolUse": "pre_tool_use", "SessionStart": "session_start", "Stop": "stop",
               "PostToolUse": "post_tool_use", "UserPromptSubmit": "user_prompt_submit"}


def _codex_home() -> str:
    from loopx import hostfacts

    return hostfacts.host_home(NAME)


def trust(scope: str, root: str, codex: str | None = None, timeout: float = 30.0) -> dict:
    """Whether Codex will run loopx's installed hooks: ``{"state": "trusted"|"untrusted"|"unknown",
    "why", "how"}``. Codex runs a non-managed hook only once the user trusted it (its ``/hooks``
    writes ``[hooks.state."<key>"] trusted_hash`` into ``$CODEX_HOME/config.toml``), and project
    hooks only in a trusted project. Asked of Codex itself when its CLI is found (``codex
    app-server``: ``initialize``, then ``hooks/list``, which reports each hook's ``trustStatus``),
    else read from config.toml (a trusted hash there that no longer matches the hook is not
    detected then: ``how`` says so). Never raises."""
    import shutil

    exe = codex or shutil.which("codex")
    if exe:
        try:
            return _ask_app_server(exe, scope, root, timeout)
        except Exception as exc:  # noqa: BLE001 - fall back to reading the config
            fallback = f"codex app-server could not be asked ({type(exc).__name__}: {exc}); "
    else:
        fallback = "no codex on PATH to ask; "
    out = _from_config(scope, root)
    out["how"] = fallback + out["how"]
    return out


def _ours(cmd) -> bool:
    import re

    return isinstance(cmd, str) and re.search(r"loopx(?:\.exe)?['\"]?\s+hook\s", cmd) is not None


def _ask_app_server(exe: str, scope: str, root: str, timeout: float) -> dict:
    import json
    import subprocess

    cwd = root if scope == "project" else os.getcwd()
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"clientInfo": {"name": "loopx", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [cwd]}}]
    proc = subprocess.Popen([exe, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=cwd)
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None  # both are PIPEs
    try:
        stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode("utf-8"))
        stdin.flush()
        import selectors
        import time

        sel = selectors.DefaultSelector()
        sel.register(stdout, selectors.EVENT_READ)
        end = time.monotonic() + timeout
        result = None
        buf = b""
        while result is None:
            left = end - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise TimeoutError(f"no hooks/list answer within {timeout:.0f} s")
            chunk = os.read(stdout.fileno(), 1 << 16)  # raw reads: a buffered readline could hide a line
            if not chunk:
                raise RuntimeError("codex app-server closed its output")
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if isinstance(doc, dict) and doc.get("id") == 2:
                    if "error" in doc:
                        raise RuntimeError(str(doc["error"])[:200])
                    result = doc.get("result") or {}
    finally:
        try:
            stdin.close()
        except OSError:
            pass
        proc.kill()
        proc.wait()
    path = config_path(scope, root)
    hooks = [h for d in result.get("data") or [] for h in d.get("hooks") or []
             if _ours(h.get("command")) and os.path.realpath(str(h.get("sourcePath") or "")) == os.path.realpath(path)]
    if not hooks:
        if scope == "project" and not _project_trusted(root):
            return {"state": "untrusted", "how": "asked codex app-server",
                    "why": f"Codex loads no project hooks in {root}: the project is not trusted in "
                           f"{os.path.join(_codex_home(), 'config.toml')}"}
        return {"state": "untrusted", "how": "asked codex app-server",
                "why": f"Codex does not list loopx's hooks from {path}"}
    bad = [h.get("key") for h in hooks if h.get("trustStatus") not in ("trusted", "managed") or h.get("enabled") is False]
    if bad:
        return {"state": "untrusted", "how": "asked codex app-server", "hooks": bad,
                "why": f"{len(bad)} of loopx's {len(hooks)} Codex hooks are not trusted ({bad[0]}"
                       + (" and more)" if len(bad) > 1 else ")")}
    return {"state": "trusted", "how": "asked codex app-server", "why": f"{len(hooks)} hooks trusted"}


def _config() -> dict:
    import tomllib

    try:
        with open(os.path.join(_codex_home(), "config.toml"), "rb") as fh:
            conf = tomllib.load(fh)
    except (OSError, ValueError):
        return {}
    return conf if isinstance(conf, dict) else {}


def _project_trusted(root: str) -> bool:
    projects = _config().get("projects") or {}
    real = os.path.realpath(root)
    for p, v in projects.items() if isinstance(projects, dict) else ():
        if isinstance(v, dict) and v.get("trust_level") == "trusted" and os.path.realpath(p) == real:
            return True
    return False


def hook_keys(scope: str, root: str) -> list[str]:
    """Codex's keys of loopx's installed hooks (``<hooks.json>:<event>:<group>:<handler>``)."""
    import json

    path = config_path(scope, root)
    try:
        with open(path, encoding="utf-8") as fh:
            conf = json.load(fh)
    except (OSError, ValueError):
        return []
    out = []
    for event, groups in ((conf or {}).get("hooks") or {}).items():
        for gi, group in enumerate(groups or []):
            for hi, h in enumerate((group or {}).get("hooks") or []):
                if isinstance(h, dict) and _ours(h.get("command")):
                    out.append(f"{path}:{_EVENT_KEYS.get(event, event.lower())}:{gi}:{hi}")
    return out


def _from_config(scope: str, root: str) -> dict:
    how = "read from config.toml (a trusted hash of an older hook is not detected this way)"
    if scope == "project" and not _project_trusted(root):
        return {"state": "untrusted", "how": how, "why": f"the project {root} is not trusted in "
                f"{os.path.join(_codex_home(), 'config.toml')}, so Codex loads none of its hooks"}
    state = ((_config().get("hooks") or {}).get("state") or {})
    keys = hook_keys(scope, root)
    bad = [k for k in keys if not (isinstance(state.get(k), dict) and state[k].get("trusted_hash"))]
    if not keys:
        return {"state": "unknown", "how": how, "why": "no loopx hooks in the hooks file"}
    if bad:
        return {"state": "untrusted", "how": how, "hooks": bad,
                "why": f"{len(bad)} of loopx's {len(keys)} Codex hooks have no trusted hash ({bad[0]}"
                       + (" and more)" if len(bad) > 1 else ")")}
    return {"state": "trusted", "how": how, "why": f"{len(keys)} hooks have a trusted hash"}


TRUST_FIX = ("open `codex` in the project, run /hooks and trust loopx's hooks (Codex runs a hook only once you "
             "trust it; a project's hooks load only in a trusted project), then `loopx doctor`")
