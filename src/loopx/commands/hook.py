"""``loopx hook EVENT --host H``: the entry points agent hosts call (stop, pre-tool, session-start,
after-edit); the protocol itself is in loopx.hosts.entry.

They print exactly the host's documented response (or nothing) and exit 0 (or the host's block
code); with ``--format json`` they print the usual envelope instead, with the response and the
reasoning in ``data`` (to debug a hook by hand:
``echo '{...}' | loopx hook pre-tool --host claude-code --json``)."""

from __future__ import annotations

import sys

from loopx.commands import add
from loopx.output import Reply


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=hook_entry, render=render_entry,
            example="echo '{\"stop_hook_active\": false}' | loopx hook stop --host claude-code")
    p.add_argument("event", metavar="EVENT", help="stop, pre-tool, session-start or after-edit (Cursor)")
    p.add_argument("--host", default="claude-code",
                   help="claude-code, codex, cursor, gemini, opencode, pi or generic (default claude-code)")
    p.add_argument("--goal-id", "--goal", dest="goal_id", metavar="ID", help="only this goal (default: all active)")
    p.add_argument("--max-continuations", dest="cap", metavar="N",
                   help="stop hook: consecutive continuations allowed (default $LOOPX_STOP_HOOK_CAP or 8; 0 never continues)")




def render_entry(d) -> str:
    return ""


def hook_entry(ctx, event, host="claude-code", goal_id=None, cap=None) -> Reply:
    """Run one hook. Always exit 0; the answer is the printed JSON (or nothing)."""
    try:
        return _hook(ctx, event, host, goal_id, cap)
    except Exception:  # a hook must never fail the host's tool call or stop with a traceback
        from loopx import hostfacts

        if (hostfacts.HOSTS.get(host) or {}).get("hooks", {}).get("protocol") in ("cursor", "gemini"):
            try:
                sys.stdout.write("{}\n")  # Cursor's neutral answer
                sys.stdout.flush()
            except Exception:  # noqa: BLE001 - stdout itself is gone; nothing left to say
                pass
        return Reply({})


def _hook(ctx, event, host, goal_id, cap):
    from loopx.context import agent_markers
    from loopx.hosts import entry

    markers = agent_markers()
    if markers:  # remember the agent's session: a command it re-parents later is still the agent's
        from loopx.kernel.storage import agentseen

        try:
            agentseen.note(markers)
        except Exception:  # noqa: BLE001 - the hook's answer matters more than the record
            pass

    response, info = entry.dispatch(event, host, sys.stdin, project=ctx.project, agent=ctx.agent,
                                    goal_id=goal_id, cap=entry.parse_cap(cap))
    code = int(info.get("exit_code") or 0) if isinstance(info, dict) else 0
    if ctx.json:
        return Reply({"event": event, "host": host, "response": response, "info": info})
    if response is not None:
        from loopx.kernel.storage.cjson import dumps

        sys.stdout.write(dumps(response, ascii=True, separators=(", ", ": ")) + "\n")
        sys.stdout.flush()
    err = info.get("stderr") if isinstance(info, dict) else None
    if err:
        sys.stderr.write(err + "\n")
        sys.stderr.flush()
    return Reply({}, code)

