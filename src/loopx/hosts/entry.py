"""Hook entry points: a host's JSON payload in, the host's documented response out.

Each function returns ``(response, info)``: ``response`` is the JSON object to print on stdout, or
None to print nothing (the host's neutral answer); ``info`` says what was decided and why (shown
only with ``--format json``, for debugging). The exit code is always 0: Claude Code treats exit 2
as "block" and other codes as errors shown to the user, so loopx answers only through JSON.

- ``stop``: continue (Claude Code/Codex ``{"decision": "block", "reason": packet}``, Cursor
  ``{"followup_message": packet}``) only when should-run says ``run`` for this agent and the turn
  started; otherwise let the agent stop. Fails open: any error lets the agent stop.
- ``pre_tool``: deny (Claude Code/Codex ``hookSpecificOutput.permissionDecision = "deny"``, Cursor
  ``{"permission": "deny"}``) a protected action without an approved gate, an edit outside scope,
  or an edit inside ``.loopx/``. A store that cannot be read denies only commands the default
  mapping calls protected; a crash in the guard itself allows (fails open) and is logged.
- ``session_start``: a short state summary as ``additionalContext`` (Claude Code, Codex).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

DEFAULT_CAP = 8
MAX_PAYLOAD = 8 << 20
SHELL_TOOLS = {"Bash", "bash", "shell", "local_shell", "exec_command", "container.exec", "unified_exec", "Shell"}
EDIT_TOOLS = {"Write", "Edit", "MultiEdit", "NotebookEdit", "write_file", "replace", "edit"}
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M)


class Uncheckable(ValueError):
    """A payload loopx cannot inspect although it may be well-formed: larger than MAX_PAYLOAD bytes
    or nested too deeply to decode. The agent controls both, so the guard denies such a call."""


def read_payload(stream) -> dict:
    """The JSON object on ``stream`` (``{}`` when empty or a terminal). Raises Uncheckable when it
    is too large or too deep to decode, ValueError when it is not a JSON object."""
    if getattr(stream, "isatty", lambda: False)():
        return {}
    limit = MAX_PAYLOAD + 1
    raw = stream.buffer.read(limit) if hasattr(stream, "buffer") else stream.read(limit)
    if len(raw) > MAX_PAYLOAD:
        raise Uncheckable(f"the hook payload is larger than {MAX_PAYLOAD >> 20} MiB")
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except RecursionError:
        raise Uncheckable("the hook payload is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise ValueError("the hook payload is not a JSON object")
    return data


def payload_dir(payload: dict, project: str | None) -> str:
    """Where to look for ``.loopx/``: ``--project``, the payload's ``cwd``, Cursor's first
    ``workspace_roots`` entry, else the process's working directory."""
    if project:
        return project
    cwd = payload.get("cwd")
    if isinstance(cwd, str) and cwd:
        return cwd
    roots = payload.get("workspace_roots")
    if isinstance(roots, list) and roots and isinstance(roots[0], str):
        return roots[0]
    return os.getcwd()


def open_store(where: str):
    """The Store governing ``where`` or None when no ``.loopx/`` is at or above it."""
    from loopx.kernel.storage.fs import find_root
    from loopx.kernel.storage.store import Store

    root = find_root(where)
    return Store(root) if root else None


def log_error(store, where: str, exc: BaseException) -> None:
    """Best effort: keep the last hook error in ``.loopx/cache/hooks/last-error.txt``."""
    try:
        d = store.path("cache", "hooks") if store else None
        if d:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "last-error.txt"), "w", encoding="utf-8") as fh:
                fh.write(f"{where}: {type(exc).__name__}: {exc}\n")
    except OSError:
        pass


# ------------------------------------------------------------------ stop
def _counter_path(store, host: str, session: str) -> str:
    key = hashlib.sha256(session.encode("utf-8", "replace")).hexdigest()[:16]
    return store.path("cache", "hooks", f"stop-{host}-{key}.json")


def _read_count(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            return int(json.load(fh).get("count", 0))
    except (OSError, ValueError, AttributeError, TypeError):
        return 0


def _write_count(path: str, n: int) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        from loopx.kernel.storage.fs import atomic_write

        atomic_write(path, json.dumps({"count": n}), sync=False)
    except OSError:
        pass


def let_stop(host: str, info: dict) -> tuple[dict | None, dict]:
    return ({} if host == "cursor" else None), dict(info, action="stop")


def stop(payload: dict, host: str, *, project: str | None = None, agent: str | None = None,
         goal_id: str | None = None, cap: int = DEFAULT_CAP) -> tuple[dict | None, dict]:
    """The Stop hook (see the module docstring). Never raises."""
    store = None
    try:
        store = open_store(payload_dir(payload, project))
        if store is None:
            return let_stop(host, {"reason": "not_connected"})
        session = str(payload.get("session_id") or payload.get("conversation_id") or "default")
        counter = _counter_path(store, host, session)
        if host == "cursor":
            if payload.get("status", "completed") != "completed":
                return let_stop(host, {"reason": f"cursor_status_{payload.get('status')}"})
            count = int(payload.get("loop_count") or 0)
        else:
            count = _read_count(counter) if payload.get("stop_hook_active") else 0
        if count >= cap:
            _write_count(counter, 0)
            return let_stop(host, {"reason": "continuation_cap", "count": count, "cap": cap})
        return _continue_if_run(store, host, agent or host, goal_id, count, cap, counter)
    except Exception as exc:  # fail open: the agent may always stop
        log_error(store, "hook stop", exc)
        return let_stop(host, {"reason": "internal_error", "error": f"{type(exc).__name__}: {exc}"})


def _continue_if_run(store, host, agent, goal_id, count, cap, counter):
    from loopx.kernel.policy import turn
    from loopx.kernel.storage import actors

    t = turn.next_turn(store, actors.agent(agent), goal_id=goal_id)
    d = t.get("decision") or {}
    if not t.get("started") or not t.get("packet_text"):
        _write_count(counter, 0)
        return let_stop(host, {"reason": d.get("reason"), "decision": d.get("decision"), "message": d.get("message")})
    _write_count(counter, count + 1)
    text = (f"loopx: should-run says run, so continue with the next governed turn ({count + 1} of at most {cap} "
            f"in a row). Follow the loopx skill: do this one turn, record evidence, finish it with "
            f"`loopx turn finish --run {t['run_id']}`, then stop.\n\n{t['packet_text']}")
    info = {"reason": "run", "decision": "run", "run_id": t["run_id"], "todo_id": t.get("todo_id"),
            "goal_id": t.get("goal_id"), "count": count + 1, "cap": cap}
    if host == "cursor":
        return {"followup_message": text}, dict(info, action="continue")
    return {"decision": "block", "reason": text}, dict(info, action="continue")


# ------------------------------------------------------------------ pre-tool
def tool_call(payload: dict, host: str) -> tuple[list[str], list[str]]:
    """``(commands, paths)`` a tool call would run or write, from the host's payload."""
    if host == "cursor":
        cmd = payload.get("command")
        if isinstance(cmd, str):
            return [cmd], []
    name = str(payload.get("tool_name") or "")
    ti = payload.get("tool_input")
    if isinstance(ti, str):
        try:
            ti = json.loads(ti)
        except ValueError:
            ti = {"command": ti} if name in SHELL_TOOLS or name == "apply_patch" else {}
    ti = ti if isinstance(ti, dict) else {}
    if name == "apply_patch" or (name not in SHELL_TOOLS and "*** Begin Patch" in str(ti.get("command", ""))):
        text = "\n".join(str(ti.get(k) or "") for k in ("command", "input", "patch"))
        return [], [a or b for a, b in _PATCH_FILE.findall(text)]
    commands, paths = [], []
    cmd = ti.get("command", ti.get("cmd"))
    if isinstance(cmd, list):
        import shlex

        cmd = shlex.join(str(c) for c in cmd)
    if isinstance(cmd, str) and (name in SHELL_TOOLS or not name):
        commands.append(cmd)
    if name in EDIT_TOOLS:
        for key in ("file_path", "notebook_path", "path"):
            if isinstance(ti.get(key), str):
                paths.append(ti[key])
                break
    return commands, paths


def deny(host: str, reason: str) -> dict:
    if host == "cursor":
        return {"permission": "deny", "user_message": reason.split(". ")[0] + ".", "agent_message": reason}
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def pre_tool(payload: dict, host: str, *, project: str | None = None,
             goal_id: str | None = None) -> tuple[dict | None, dict]:
    """The pre-tool guard (see the module docstring). Never raises."""
    from loopx.kernel.policy import guard

    neutral = {} if host == "cursor" else None
    store = None
    commands: list[str] = []
    try:
        commands, paths = tool_call(payload, host)
        if not commands and not paths:
            return neutral, {"allow": True, "reason": "not a shell command or file edit"}
        where = payload_dir(payload, project)
        store = open_store(where)
        if store is None:
            return neutral, {"allow": True, "reason": "no .loopx/ here: not governed"}
        cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else where
        try:
            state = store.load(view="live")  # what the guard reads is in the live view (fold.live_view)
        except Exception as exc:  # corrupt or unreadable store: deliberate partial fail-closed
            verdict = guard.evaluate_unreadable(commands, cwd=cwd, problem=str(exc)[:200])
        else:
            verdict = guard.evaluate(state, commands=commands, paths=paths, project_dir=store.project_dir,
                                     cwd=cwd, goal_id=goal_id)
    except Exception as exc:  # a bug in the guard must not wedge the agent: allow, and log it
        log_error(store, "hook pre-tool", exc)
        return neutral, {"allow": True, "reason": "internal_error", "error": f"{type(exc).__name__}: {exc}"}
    if verdict.get("allow"):
        return neutral, verdict
    return deny(host, verdict["reason"]), verdict


# ------------------------------------------------------------------ session start
def session_summary(state: dict, goal_id: str | None = None) -> str | None:
    """A few lines: each active goal, its next todo and pending gates; None without goals."""
    from loopx.kernel.read import status
    from loopx.kernel.storage import clock

    goals = [g for g in status.summary(state, clock.now_iso(), goal_id)["goals"] if g["status"] == "active"]
    if not goals:
        return None
    lines = ["loopx governs work in this project (.loopx/). Use the loopx skill; never edit .loopx/ directly."]
    for g in goals[:3]:
        lines.append(f"- goal {g['id']}: {g['objective'][:200]}")
        if g.get("ready"):
            lines.append(f"  next todo: {g['ready'][0]['id']} {g['ready'][0]['title'][:120]}")
        for gate in g.get("needs_human", [])[:3]:
            lines.append(f"  waiting for a human: gate {gate['gate_id']} ({gate['kind']}): {gate['question'][:160]}")
        protect = ", ".join(g["scope"].get("protect") or [])
        if protect:
            lines.append(f"  protected actions (need an approved gate): {protect}")
        lines.append(f"  budget: {g['budget']['left']} of {g['budget']['slots']} slots left; next: {g['next']}")
    return "\n".join(lines)


def session_start(payload: dict, host: str, *, project: str | None = None,
                  goal_id: str | None = None) -> tuple[dict | None, dict]:
    """SessionStart: add the state summary as context where the host supports it. Never raises."""
    store = None
    try:
        if host == "cursor":
            return {}, {"reason": "cursor: no session context support in loopx's hooks"}
        store = open_store(payload_dir(payload, project))
        if store is None:
            return None, {"reason": "not_connected"}
        text = session_summary(store.load(view="live"), goal_id)
        if not text:
            return None, {"reason": "no_active_goal"}
        return ({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}},
                {"reason": "summary", "chars": len(text)})
    except Exception as exc:
        log_error(store, "hook session-start", exc)
        return None, {"reason": "internal_error", "error": f"{type(exc).__name__}: {exc}"}
