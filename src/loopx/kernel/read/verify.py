"""Verify commands that cannot run: an error of the setup, not of the agent (reason ``verify_broken``).

A verify command "could not run" when the shell says so (exit 126: found but not executable,
exit 127: not found, which is also what ``env`` prints for a missing interpreter in a script's
``#!`` line), when it timed out, or when the shell itself could not be started. Then the run
records ``setup_error`` (see docs/loop.md, "Needs you: the reason codes")::

    {"reason": "verify_broken", "message": one line naming the fix, "command": str,
     "exit_code": int, "timed_out": bool, "path": the PATH it ran with (None = unset),
     "resolved": {word: absolute path | None} for the first word of each simple command,
     "interpreter": {script: its #! line} for resolved scripts, "cwd": str}

``open_error(state, goal)`` is the setup error still standing for a goal: the last run's, unless
a human changed the goal since (``loopx goal resume``, ``loopx goal update``) or the verify
command is no longer the one that failed. ``changed_since(err, path)`` tells whether the
environment differs from the recorded one (another PATH, or a word that now resolves
differently under the recorded PATH): then should-run retries once.
"""

from __future__ import annotations

import os

from loopx.kernel.storage.fs import open_file

REASON = "verify_broken"
BROKEN_EXIT = (126, 127)
_BUILTINS = frozenset({"cd", "export", "set", "unset", "source", ".", "exec", "eval", "true", "false", "test",
                       "[", "echo", "printf", "exit", "return", "shift", "trap", "umask", "wait", "command",
                       "type", "alias", "read", "local"})
_OPS = ("&&", "||", ";", "|", "&", "(", ")", "!", "{", "}", "then", "do", "else", "if", "while", "until")


def command_words(command: str) -> list[str]:
    """The first word of each simple command in ``command`` (assignments like ``A=1`` skipped),
    as far as a plain split can tell; an unparsable command yields its first token."""
    import shlex

    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:
        tokens = command.split()[:1]
    words, expect = [], True
    for tok in tokens:
        if tok in _OPS or set(tok) <= set("&|;()"):
            expect = True
            continue
        if expect:
            if "=" in tok and not tok.startswith("=") and tok.split("=", 1)[0].isidentifier():
                continue
            if tok not in words and tok not in _BUILTINS:
                words.append(tok)
            expect = False
    return words[:8]


def resolve(command: str, path: str | None) -> tuple[dict, dict]:
    """({word: absolute path or None}, {script: #! line}) for ``command`` under ``path``."""
    import shutil

    resolved, interp = {}, {}
    for w in command_words(command):
        if "/" in w:
            hit = w if os.path.exists(w) else None
        else:
            hit = shutil.which(w, path=path if path is not None else os.defpath)
        resolved[w] = hit
        if hit:
            try:
                # a regular file only, opened without waiting: the project's own script may be a FIFO
                # an agent put there (exec refuses it: 126), which a plain open() would wait on forever
                with open_file(hit) as fh:
                    head = fh.read(128)
                if head.startswith(b"#!"):
                    interp[w] = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
            except OSError:
                pass
    return resolved, interp


def diagnose(command: str, exit_code: int, *, timed_out: bool, env: dict, cwd: str,
             timeout: float | None = None, output: bytes = b"") -> dict | None:
    """The ``setup_error`` for a verify run, or None when the command ran (pass or fail)."""
    if not timed_out and exit_code not in BROKEN_EXIT:
        return None
    path = env.get("PATH")
    resolved, interp = resolve(command, path)
    shown = path if path is not None else f"(unset; the shell's default {os.defpath})"
    missing = [w for w, p in resolved.items() if p is None]
    if timed_out:
        from loopx.kernel.storage import clock

        why = f"timed out after {clock.format_duration(timeout or 0)}"
        fix = "make it faster or raise the runner's --timeout"
    elif missing:
        why = f"exit {exit_code}: {', '.join(f'`{w}`' for w in missing[:3])} not found on PATH={shown}"
        fix = "put its folder on the PATH of the scheduler (cron, systemd) or use an absolute path"
    elif exit_code == 126:
        why = "exit 126: the command was found but could not be executed (permissions or format)"
        fix = "make it executable (chmod +x) or call it through its interpreter"
    else:
        tail = output.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        why = f"exit 127 under PATH={shown}" + (f": {tail[0][:160]}" if tail[0] else "")
        fix = "check the interpreter named in its #! line and the PATH of the scheduler"
    return {"reason": REASON, "message": f"the verify command `{command[:200]}` could not run ({why}); {fix}",
            "command": command, "exit_code": exit_code, "timed_out": timed_out, "path": path,
            "resolved": resolved, "interpreter": interp, "cwd": cwd}


def open_error(state: dict, goal: dict) -> dict | None:
    """The setup error of the goal's last run that still stands (with ``run`` and ``finished``).
    Raises fold.NotInLiveView on a live view that left the run's (closed) todo out."""
    last = state["runs"].get(goal.get("last_run") or "")
    if not last or not last.get("finished") or not isinstance(last.get("setup_error"), dict):
        return None
    if (goal.get("updated_seq") or 0) > (last.get("finished_seq") or 0):
        return None  # a human changed the goal since (resume, update): try again
    err = last["setup_error"]
    # the last run's todo may be done and left out of a live view: NotInLiveView, the caller
    # (decide.should_run, Store.read, Store.transact) asks the full state
    todo = state["todos"].get(last.get("todo") or "")
    current = (todo or {}).get("verify") or (state["goals"].get(last["goal"]) or {}).get("verify")
    if err.get("command") and current != err["command"]:
        return None  # the command was changed since
    return dict(err, run=last["id"], finished=last["finished"])


def changed_since(err: dict, path) -> str | None:
    """Why the environment now differs from the one recorded in ``err`` (None when it does not).
    ``path`` is the caller's PATH (None = unset) or ``...`` to skip comparing it."""
    if path is not ... and path != err.get("path"):
        return "this caller's PATH differs from the one the verify command failed under"
    if err.get("timed_out"):
        return None
    resolved = err.get("resolved")
    if isinstance(resolved, dict) and resolved:
        now, _ = resolve(err.get("command") or "", err.get("path"))
        if now != resolved:
            return "the command resolves differently now under the recorded PATH"
    return None
