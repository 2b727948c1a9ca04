"""Hook entry points: a host's JSON payload in, the host's documented response out.

Each function returns ``(response, info)``: ``response`` is the JSON object to print on stdout, or
None to print nothing (the host's neutral answer); ``info`` says what was decided and why (shown
only with ``--format json``, for debugging). The payload shapes and answers of each host live in
its adapter module (``loopx.hosts.adapters``). The pre-tool answer also names the exit code and
stderr the host expects (``info["exit_code"]``, ``info["stderr"]``): 0 with a JSON refusal for
Claude Code, Codex and Cursor (for Claude Code exit 2 is a block and other codes are errors shown
to the user), 2 with the reason on stderr for Gemini CLI, the plugins and the generic host.

- ``stop``: continue (Claude Code/Codex ``{"decision": "block", "reason": packet}``, Cursor
  ``{"followup_message": packet}``, Gemini ``{"decision": "deny", "reason": packet}``) only when
  should-run says ``run`` for this agent and the turn started; otherwise let the agent stop.
  Fails open: any error lets the agent stop.
- ``pre_tool``: deny a protected action without an approved gate, an edit outside scope, or an
  edit inside ``.loopx/``. A store that cannot be read denies only commands the default
  mapping calls protected; a crash in the guard itself allows (fails open) and is logged.
- ``after_edit``: Cursor's after-the-fact edit check (records, opens a gate, reports).
- ``session_start``: a short state summary as ``additionalContext`` (Claude Code, Codex, Gemini).
"""

from __future__ import annotations

import os

# cjson: json's C codec without importing json and re (every tool call)
from loopx.kernel.storage import cjson, layout
from loopx.kernel.storage.fs import MOST_SMALL, atomic_write, open_append, open_file, read_bytes

DEFAULT_CAP = 8
MAX_PAYLOAD = 8 << 20


def _protocol(host: str) -> str | None:
    """The host's hook protocol (the host table's ``hooks.protocol``: claude, cursor, gemini, ...)."""
    from loopx import hostfacts

    return ((hostfacts.HOSTS.get(host) or {}).get("hooks") or {}).get("protocol")


def adapter(host: str):
    """The host's adapter module (``loopx.hosts.adapters``); the generic one for unknown names."""
    from loopx.hosts import adapters

    return adapters.get(host if adapters.known(host) else "generic")


def _answer(host: str, fn: str, *args):
    """Call the adapter's answer function ``fn``, falling back to the generic host's."""
    mod = adapter(host)
    f = getattr(mod, fn, None) or getattr(adapter("generic"), fn)
    return f(*args)


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
        data = cjson.loads(raw)
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
        d = store.path(layout.HOOKS) if store else None
        if d:
            os.makedirs(d, exist_ok=True)
            atomic_write(os.path.join(d, "last-error.txt"), f"{where}: {type(exc).__name__}: {exc}\n",
                         sync=False, follow=False)  # replaces whatever is there: a FIFO would block a plain open
    except OSError:
        pass


# ------------------------------------------------------------------ stop
def _counter_path(store, host: str, session: str) -> str:
    from loopx.kernel.storage.chain import sha256

    key = sha256(session.encode("utf-8", "replace")).hexdigest()[:16]
    return store.path(layout.stop_marker(host, key))


def _read_counter(path: str) -> dict:
    try:
        data = cjson.loads(read_bytes(path, most=MOST_SMALL).decode("utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _read_count(path: str) -> int:
    try:
        return int(_read_counter(path).get("count", 0))
    except (ValueError, TypeError):
        return 0


def _write_count(path: str, n: int, run: str | None = None) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, cjson.dumps({"count": n, "run": run} if run else {"count": n}), sync=False, follow=False)
    except OSError:
        pass


def _left_open(store, counter: str, agent: str) -> str | None:
    """Close the run the previous continuation started when the agent stopped without finishing
    it (a hook must never leave an open run behind); its id, or None when there was none or it
    was finished."""
    rid = _read_counter(counter).get("run")
    if not isinstance(rid, str) or not rid:
        return None
    from loopx.kernel.policy import turn
    from loopx.kernel.storage import actors, fold

    # the live view keeps every open run: one it left out is finished (or unknown), nothing to close
    view = store.load(view="live")
    run = fold.held(view.get("runs") or {}, rid)
    if not run or run.get("finished") is not None:
        return None
    turn.close(store, actors.agent(agent), rid, "no_progress",
               "the agent stopped without finishing the turn loopx's stop hook started; closed by the hook", seen=view)
    return rid


def let_stop(host: str, info: dict) -> tuple[dict | None, dict]:
    return _answer(host, "let_stop"), dict(info, action="stop")


def stop(payload: dict, host: str, *, project: str | None = None, agent: str | None = None,
         goal_id: str | None = None, cap: int = DEFAULT_CAP) -> tuple[dict | None, dict]:
    """The Stop hook (see the module docstring). Never raises."""
    store = None
    try:
        store = open_store(payload_dir(payload, project))
        if store is None:
            return let_stop(host, {"reason": "not_connected"})
        from loopx import config

        owned_run = config.env("LOOPX_RUN_ID")
        if owned_run:
            # under `loopx run` the runner owns the turn: it verifies and finishes it, so the
            # host's own stop hook must not resume it (each resumption costs model requests)
            return let_stop(host, {"reason": "runner_owns_run", "run_id": owned_run})
        session = str(payload.get("session_id") or payload.get("conversation_id") or "default")
        counter = _counter_path(store, host, session)
        abandoned = _left_open(store, counter, agent or host)
        if abandoned:
            # the agent ignored the continuation: sending another would only loop
            _write_count(counter, 0)
            return let_stop(host, {"reason": "continuation_not_finished", "run_id": abandoned})
        if _protocol(host) == "cursor":
            if payload.get("status", "completed") != "completed":
                return let_stop(host, {"reason": f"cursor_status_{payload.get('status')}"})
            count = int(payload.get("loop_count") or 0)
        else:
            count = _read_count(counter) if payload.get("stop_hook_active") else 0
        if count >= cap:
            _write_count(counter, 0)
            return let_stop(host, {"reason": "continuation_cap", "count": count, "cap": cap})
        report = take_report(store) if _protocol(host) == "cursor" else None
        if report:
            return _answer(host, "cont", report), {"reason": "after_edit_report", "action": "continue"}
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
    _write_count(counter, count + 1, t["run_id"])
    text = (f"loopx: should-run says run, so continue with the next governed turn ({count + 1} of at most {cap} "
            f"in a row). Follow the loopx skill: do this one turn, record evidence, finish it with "
            f"`loopx turn finish --run {t['run_id']}`, then stop.\n\n{t['packet_text']}")
    info = {"reason": "run", "decision": "run", "run_id": t["run_id"], "todo_id": t.get("todo_id"),
            "goal_id": t.get("goal_id"), "count": count + 1, "cap": cap}
    return _answer(host, "cont", text), dict(info, action="continue")


# ------------------------------------------------------------------ pre-tool
def tool_call(payload: dict, host: str) -> tuple[list[str], list[str]]:
    """``(commands, paths)`` a tool call would run or write, read from the host's payload by its
    adapter (``loopx.hosts.adapters``: one payload table row per host). Raises Uncheckable when a
    tool input sent as a JSON string is nested too deeply to decode."""
    from loopx.hosts.adapters import base

    mod = adapter(host)
    try:
        if hasattr(mod, "tool_call"):
            return mod.tool_call(payload)
        return base.tool_call(payload, mod.SHAPE)
    except RecursionError:  # json's scanner on absurd nesting, inside a string the host would decode
        raise Uncheckable("the tool input is nested too deeply to read") from None


def _read_paths(payload: dict, host: str) -> list[str]:
    """The paths a read-only file tool (Read, Grep, Glob...) names: checked only against an
    experiment's holdout data (loopx.guard.measuring), never against scope."""
    from loopx.hosts.adapters import base

    ti = payload.get(getattr(adapter(host), "SHAPE", {}).get("input", "tool_input"))
    return base.named_paths(ti) if isinstance(ti, dict) else []


def _count_guard_call(project_dir: str | None, run_id: str | None, mark: bytes = b".") -> None:
    # runner/hostenv.py reads the count; the file format is one byte per call ("."), and one more
    # ("x") per refusal
    if not project_dir or not run_id or "/" in run_id or "\\" in run_id:
        return
    path = layout.project_path(project_dir, layout.guard_calls(run_id))
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open_append(path) as fh:
            fh.write(mark)
    except OSError:
        pass


def _tool_input(payload: dict, host: str) -> dict:
    mod = adapter(host)
    ti = payload.get(getattr(mod, "SHAPE", {}).get("input", "tool_input"))
    if isinstance(ti, str):
        try:
            ti = cjson.loads(ti)
        except ValueError:
            return {}
    return ti if isinstance(ti, dict) else {}


def tool_dir(payload: dict, host: str, cwd: str | None) -> str | None:
    """The folder the tool call runs in when the host's tool takes a working-directory argument
    (the host table's ``tools.dirs``: Gemini CLI ``dir_path``, OpenCode ``workdir``, Codex
    ``workdir``), resolved against ``cwd``; None when the call names none. Raises RecursionError
    on absurd nesting (read_payload's caller maps it to Uncheckable)."""
    from loopx import hostfacts

    keys = hostfacts.dir_args(host)
    if not keys:
        return None
    ti = _tool_input(payload, host)
    for k in keys:
        v = ti.get(k)
        if isinstance(v, str) and v.strip():
            return os.path.normpath(os.path.join(cwd or os.getcwd(), os.path.expanduser(v)))
    return None


def edit_texts(payload: dict, host: str) -> dict | None:
    """What the call's edit tool removes and writes (``adapters.base.edit_texts``), or None."""
    from loopx.hosts.adapters import base

    mod = adapter(host)
    shape = getattr(mod, "SHAPE", None)
    return base.edit_texts(payload, shape) if shape else None


def deny(host: str, reason: str) -> tuple[dict | None, dict]:
    """The host's refusal: ``(stdout object, {"exit_code", "stderr"})``."""
    response, code, err = _answer(host, "deny", reason)
    return response, {"exit_code": code, "stderr": err}


def _allow(host: str, verdict: dict) -> tuple[dict | None, dict]:
    response, code, err = _answer(host, "allow")
    return response, dict(verdict, exit_code=code, stderr=err)


def _internal_error_verdict(exc: Exception, commands: list, paths: list, cwd, project_dir, texts) -> dict:
    """The verdict when the guard itself failed (logged): what an unreadable store gets
    (``verdicts.evaluate_unreadable``: protected-looking commands and edits of the store denied, the
    rest allowed, so a bug does not wedge the agent's ordinary work); a call whose commands and
    paths were not even read, or one that fails that as well, is denied."""
    from loopx.guard import verdicts

    problem = f"loopx's guard failed on this call ({type(exc).__name__}); ask a human to run `loopx doctor`"
    error = f"{type(exc).__name__}: {exc}"
    if commands or paths:
        try:
            v = verdicts.evaluate_unreadable(commands, cwd=cwd, problem=problem, paths=paths, project_dir=project_dir,
                                             texts=texts)
            return dict(v, reason="internal_error", error=error) if v.get("allow") else dict(v, error=error)
        except Exception:  # noqa: BLE001 - the fallback failed too: deny below
            pass
    return {"allow": False, "kind": "unresolved", "error": error,
            "reason": f"loopx could not check this tool call ({problem}), so it is denied."}


def _uncheckable_reason(why: str) -> str:
    return (f"loopx could not check this tool call ({why}), so it is denied: "
            "a protected action must not slip through unchecked. Split it into smaller calls.")


def pre_tool(payload: dict, host: str, *, project: str | None = None,
             goal_id: str | None = None) -> tuple[dict | None, dict]:
    """The pre-tool guard (see the module docstring). Never raises. ``info`` carries the
    ``exit_code`` and ``stderr`` the host expects with the response."""
    from loopx.guard import verdicts

    store = None
    commands: list[str] = []
    paths: list = []
    cwd = where = texts = None
    from loopx import config

    run_id = config.env("LOOPX_RUN_ID")
    if run_id:  # under `loopx run`: the turn's record shows the guard was called (issue 23)
        _count_guard_call(config.env("LOOPX_PROJECT_DIR"), run_id)
    try:
        if _protocol(host) == "cursor" and payload.get("hook_event_name") in adapter(host).REPORT_EVENTS:
            report = take_report(open_store(payload_dir(payload, project)))
            if report:
                response, extra = deny(host, report)
                return response, dict(extra, allow=False, reason="after_edit_report")
        commands, paths = tool_call(payload, host)
        reads = _read_paths(payload, host) if not commands and not paths else []
        if not commands and not paths and not reads:
            return _allow(host, {"allow": True, "reason": "not a shell command or file edit"})
        where = payload_dir(payload, project)
        store = open_store(where)
        cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else where
        cwd = tool_dir(payload, host, cwd) or cwd  # the host's own working-directory argument (workdir, dir_path)
        texts = edit_texts(payload, host) if paths else None
        from loopx.kernel.storage import registry

        vanished = registry.store_problem(where, store)
        if store is None and vanished is None:
            return _allow(host, {"allow": True, "reason": "no .loopx/ here: not governed"})
        try:
            if vanished:
                raise RuntimeError(vanished)
            state = store.load(view="live")  # what the guard reads is in the live view (fold.live_view)
        except Exception as exc:  # corrupt or unreadable store: deliberate partial fail-closed
            verdict = verdicts.evaluate_unreadable(commands, cwd=cwd, problem=str(exc)[:300], paths=paths,
                                                project_dir=store.project_dir if store else where, texts=texts)
        else:
            verdict = store.read(lambda st: verdicts.evaluate(st, commands=commands, paths=paths,  # noqa: B023
                                                           project_dir=store.project_dir, cwd=cwd, goal_id=goal_id,
                                                           reads=reads, texts=texts),
                                 state, as_saved=False)
            if not verdict.get("allow") and _approvals_left_out(state, verdict):
                # The view keeps the approvals the guard reads and counts the usable ones it left out
                # (fold.live_view); only when it left out one of this kind (or was pruned by an older
                # loopx, which did not count) may an older approval still cover the action: ask the
                # full state before denying.
                verdict = verdicts.evaluate(store.load(), commands=commands, paths=paths,
                                         project_dir=store.project_dir, cwd=cwd, goal_id=goal_id, reads=reads,
                                         texts=texts)
    except Uncheckable as exc:  # the agent controls the input: what cannot be read is denied
        response, extra = deny(host, _uncheckable_reason(str(exc)))
        return response, dict(extra, allow=False, reason="uncheckable_payload", error=str(exc))
    except Exception as exc:  # a bug in the guard: an input that crashes it must not be a way past it
        log_error(store, "hook pre-tool", exc)
        verdict = _internal_error_verdict(exc, commands, paths, cwd, store.project_dir if store else where, texts)
    if verdict.get("allow") and verdict.get("uses"):
        verdict = _use_approvals(store, host, verdict)
    if verdict.get("allow"):
        return _allow(host, verdict)
    if run_id:  # the run's record counts the guard's refusals too
        _count_guard_call(config.env("LOOPX_PROJECT_DIR"), run_id, b"x")
    response, extra = deny(host, verdict["reason"])
    return response, dict(verdict, **extra)


def _approvals_left_out(state: dict, verdict: dict) -> bool:
    """Whether ``state`` is a live view that may have left out an approval covering the denied
    ``verdict``'s kind (so the full state could allow it)."""
    if "closed" not in state:
        return False
    if not state.get("approvals"):
        return True
    return bool((state.get("approvals_left") or {}).get(verdict.get("goal_id"), {}).get(verdict.get("kind")))


# ------------------------------------------------------------------ after an edit (Cursor)
def _report_path(store) -> str:
    return store.path(layout.EDIT_REPORT)


def take_report(store) -> str | None:
    """The after-edit report waiting for the agent, removed as it is handed over (or None)."""
    if store is None:
        return None
    path = _report_path(store)
    try:
        with open_file(path, "r", encoding="utf-8") as fh:
            items = cjson.loads(fh.read())
        os.remove(path)
    except (OSError, ValueError):
        return None
    msgs = [str(m) for m in items if isinstance(m, str)] if isinstance(items, list) else []
    return "\n".join(msgs) or None


def _add_report(store, message: str) -> None:
    path = _report_path(store)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open_file(path, "r", encoding="utf-8") as fh:
                items = cjson.loads(fh.read())
            items = items if isinstance(items, list) else []
        except (OSError, ValueError):
            items = []
        items.append(message)
        from loopx.kernel.storage.fs import atomic_write  # a rare path: an edit that needs a report

        atomic_write(path, cjson.dumps(items[-20:]), sync=False, follow=False)
    except OSError:
        pass


def after_edit(payload: dict, host: str, *, project: str | None = None, agent: str | None = None,
               goal_id: str | None = None) -> tuple[dict | None, dict]:
    """An edit that already happened (Cursor's ``afterFileEdit``): when the guard would have
    refused it, record evidence (kind ``diff``), open a ``custom`` gate that blocks the goal, and
    leave a report the next Cursor hook hands to the agent. Never raises."""
    from loopx.guard import verdicts
    from loopx.kernel.storage import actors
    from loopx.kernel.write import evidence, gates

    store = None
    try:
        path = payload.get("file_path")
        if not isinstance(path, str) or not path:
            return {}, {"reason": "no file_path"}
        where = payload_dir(payload, project)
        store = open_store(where)
        if store is None:
            return {}, {"reason": "not_connected"}
        state = store.load(view="live")  # what the guard reads is in the live view (fold.live_view)
        verdict = store.read(lambda st: verdicts.evaluate(st, paths=[path], project_dir=store.project_dir, cwd=where,
                                                       goal_id=goal_id), state, as_saved=False)
        if not verdict.get("allow") and _approvals_left_out(state, verdict):
            state = store.load()  # an approval the view left out may cover it
            verdict = verdicts.evaluate(state, paths=[path], project_dir=store.project_dir, cwd=where, goal_id=goal_id)
        if verdict.get("allow"):
            return {}, {"reason": "in scope", "allow": True}
        goals = verdicts.governing_goals(state, goal_id)
        gid = verdict.get("goal_id") or (goals[0]["id"] if goals else None)
        rel = verdict.get("path") or path
        actor = actors.agent(agent or host)
        info = {"allow": False, "reason": verdict["reason"], "path": rel, "goal_id": gid, "detected": "after_edit"}
        if gid is None:
            _add_report(store, f"loopx: {rel} was edited but {verdict['reason']}")
            return {}, info
        ev = evidence.add(store, actor, gid, kind="diff", files=[rel],
                          summary=f"{host} edited {rel}, which the guard would have refused (detected after the edit)")
        info["evidence_id"] = ev["evidence_id"]
        marker = f"after-edit:{rel}"
        pending = [g for g in state["gates"].values() if g["goal"] == gid and g["status"] == "pending"
                   and marker in (g.get("context") or "")]
        if pending:
            info["gate_id"] = pending[0]["id"]
        else:
            gate = gates.open_gate(store, actor, gid, kind="custom",
                                   question=f"{host} edited {rel} outside what goal {gid} allows. Keep the edit "
                                            f"(and widen the scope if it belongs), or reject and have it reverted?",
                                   context=f"{marker}; evidence {ev['evidence_id']}; {verdict['reason'][:500]}")
            info["gate_id"] = gate["gate_id"]
        msg = (f"loopx: your edit of {rel} is not allowed ({verdict['reason']}) Cursor cannot stop edits "
               f"beforehand, so loopx recorded it (evidence {ev['evidence_id']}) and opened gate {info['gate_id']} "
               f"for a human. Do not edit {rel} again; revert your change if you can, finish the turn with "
               f"`loopx turn finish --result blocked`, and stop.")
        _add_report(store, msg)
        return {"additional_context": msg}, info
    except Exception as exc:
        log_error(store, "hook after-edit", exc)
        return {}, {"reason": "internal_error", "error": f"{type(exc).__name__}: {exc}"}


def _use_approvals(store, host: str, verdict: dict) -> dict:
    """Record each approval the allowed call uses (``gates.use``); a single-use approval used up by
    another call meanwhile turns the verdict into a deny."""
    from loopx.kernel.write import gates

    try:
        for u in verdict["uses"]:
            if not gates.use(store, f"guard:{host}", u["gate_id"], u["command"]):
                return {"allow": False, "kind": u["kind"], "gate_id": u["gate_id"], "reason": (
                    f"loopx: gate {u['gate_id']} approved `{u['command'][:120]}` once and that approval was just "
                    "used by another call. Open a new gate and stop.")}
    except Exception as exc:  # cannot record the use: do not let the approval be reused silently
        log_error(store, "hook pre-tool (recording an approval's use)", exc)
        return {"allow": False, "kind": verdict["uses"][0]["kind"], "reason": (
            f"loopx: could not record the use of approval {verdict['uses'][0]['gate_id']} "
            f"({type(exc).__name__}); ask a human to run `loopx doctor`.")}
    return verdict


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
        if _protocol(host) == "cursor":
            return {}, {"reason": f"{host}: no session context support in loopx's hooks"}
        store = open_store(payload_dir(payload, project))
        if store is None:
            return None, {"reason": "not_connected"}
        text = store.read(lambda st: session_summary(st, goal_id))
        if not text:
            return None, {"reason": "no_active_goal"}
        return _answer(host, "context", text), {"reason": "summary", "chars": len(text)}
    except Exception as exc:
        log_error(store, "hook session-start", exc)
        return None, {"reason": "internal_error", "error": f"{type(exc).__name__}: {exc}"}


# ------------------------------------------------------------------ the protocol: one entry per event
EVENTS = ("stop", "pre-tool", "session-start", "after-edit")


def parse_cap(value) -> int:
    """The continuation cap: ``value``, else ``$LOOPX_STOP_HOOK_CAP``, else 8 (bad values -> 8)."""
    from loopx.config import env

    raw = value if value is not None else env("LOOPX_STOP_HOOK_CAP")
    try:
        return max(0, int(raw)) if raw is not None else DEFAULT_CAP
    except (TypeError, ValueError):
        return DEFAULT_CAP


def dispatch(event: str, host: str, stream, *, project: str | None = None, agent: str | None = None,
             goal_id: str | None = None, cap: int = DEFAULT_CAP) -> tuple[dict | None, dict]:
    """Answer one hook call: read the payload from ``stream`` and return ``(response, info)``.

    The host protocol's failure rules live here: a payload too large or too deep to inspect is
    denied at ``pre-tool`` (fail closed: the agent controls both); any other unreadable payload lets
    the agent stop at ``stop`` (fail open: without ``stop_hook_active`` the cap cannot work) and is
    allowed elsewhere; an unknown host or event answers nothing. ``info`` may carry the
    ``exit_code`` and ``stderr`` the host expects with the response."""
    from loopx.hosts import adapters

    uncheckable = bad = None
    try:
        payload = read_payload(stream)
    except Uncheckable as exc:
        payload, bad, uncheckable = {}, str(exc), str(exc)
    except (ValueError, OSError) as exc:
        payload, bad = {}, str(exc)
    if not adapters.known(host) or event not in EVENTS:
        return None, {"reason": "unknown_host_or_event", "host": host, "event": event}
    if uncheckable is not None and event == "pre-tool":
        response, extra = deny(host, _uncheckable_reason(uncheckable))
        return response, dict(extra, reason="uncheckable_payload", error=uncheckable)
    if bad is not None and event == "stop":
        return let_stop(host, {"reason": "bad_payload", "error": bad})
    if bad is not None:
        return _answer(host, "allow")[0], {"reason": "bad_payload", "error": bad}
    if event == "stop":
        return stop(payload, host, project=project, agent=agent, goal_id=goal_id, cap=cap)
    if event == "pre-tool":
        return pre_tool(payload, host, project=project, goal_id=goal_id)
    if event == "after-edit":
        return after_edit(payload, host, project=project, agent=agent, goal_id=goal_id)
    return session_start(payload, host, project=project, goal_id=goal_id)
