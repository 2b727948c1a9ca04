"""``loopx evidence add|list|show``."""

from __future__ import annotations

import sys

from loopx.commands import actions, add, goal_opt
from loopx.output import safe, table


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx evidence list")
    acts = actions(p)
    a = add(acts, "add", "record evidence (output is redacted and stored as an excerpt plus sha256)",
            handler=evidence_add, render=render_add, command="evidence add",
            example="pytest -q > test.log 2>&1; loopx evidence add --kind test --summary 'pytest' --exit-code $? "
                    "--output-file test.log")
    goal_opt(a)
    a.add_argument("--kind", required=True, help="test, command, diff, commit, note, link, artifact")
    a.add_argument("--summary", required=True, metavar="TEXT")
    a.add_argument("--todo", metavar="TODO")
    a.add_argument("--run", metavar="RUN")
    a.add_argument("--command", dest="cmd", metavar="CMD", help="the command that produced it")
    a.add_argument("--exit-code", metavar="N")
    src = a.add_mutually_exclusive_group()
    src.add_argument("--output-file", metavar="FILE", help="read the output from FILE")
    src.add_argument("--output", metavar="-", help="'-' reads the output from stdin")
    a.add_argument("--commit", metavar="SHA")
    a.add_argument("--file", dest="files", action="append", metavar="PATH", help="a file changed (repeatable)")

    lst = add(acts, "list", "list evidence", handler=evidence_list, render=render_list, command="evidence list",
              example="loopx evidence list --todo t-3f9a")
    goal_opt(lst)
    lst.add_argument("--todo", metavar="TODO")
    lst.add_argument("--run", metavar="RUN")
    lst.add_argument("--limit", default=50, metavar="N", help="newest N records (default 50, 0 = all)")

    s = add(acts, "show", "show one evidence record with its output excerpt", handler=evidence_show, render=render_show,
            command="evidence show", example="loopx evidence show ev-1a2b")
    s.add_argument("evidence")


def _open_output(output, output_file):
    """The binary stream to read the output from (stdin or the file), or None. The kernel reads it
    in chunks (bounded memory, see ``kernel.evidence.ingest``)."""
    from loopx.errors import UsageError

    if output is not None:
        if output != "-":
            raise UsageError("--output takes '-' (stdin)", "use --output - or --output-file FILE")
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("--output - needs the output piped on stdin", "e.g. pytest 2>&1 | loopx evidence add ... --output -")
        return getattr(sys.stdin, "buffer", sys.stdin)
    if output_file is not None:
        try:
            return open(output_file, "rb")  # noqa: SIM115 - closed by evidence_add
        except OSError as exc:
            raise UsageError(f"cannot read --output-file {output_file!r}: {exc.strerror}", "pass a readable file") from None
    return None


def evidence_add(ctx, kind, summary, goal_id=None, todo=None, run=None, cmd=None, exit_code=None, output=None,
                 output_file=None, commit=None, files=None) -> dict:
    from loopx.kernel.write import evidence

    stream = _open_output(output, output_file)
    try:
        return evidence.add(ctx.store(), ctx.actor, goal_id, kind=kind, summary=summary, todo=todo, run=run,
                            command=cmd, exit_code=exit_code, output=stream, commit=commit, files=files)
    finally:
        if output_file is not None and stream is not None:
            stream.close()


def render_add(d: dict) -> str:
    extra = f" ({d['bytes']} bytes, sha256 {d['sha256'][:12]})" if d.get("sha256") else ""
    return (f"recorded {d['evidence_id']} on {d['goal_id']}{extra}\n"
            f"cite it: loopx todo done {d.get('todo') or '<todo>'} --evidence {d['evidence_id']}")


def evidence_list(ctx, goal_id=None, todo=None, run=None, limit=50) -> dict:
    from loopx.kernel.read import queries

    state = ctx.store().load()
    gid = queries.resolve_goal(state, goal_id)["id"] if goal_id or state["goals"] else None
    tid = queries.resolve_todo(state, todo)["id"] if todo else None
    rid = queries.resolve_run(state, run)["id"] if run else None
    rows = [e for e in sorted(state["evidence"].values(), key=lambda e: e.get("seq", 0))
            if (gid is None or e["goal"] == gid) and (tid is None or e["todo"] == tid) and (rid is None or e["run"] == rid)]
    from loopx.kernel.read import validate

    n = validate.count(limit, "--limit", low=0, high=10_000_000)
    return {"evidence": rows[-n:] if n else rows, "count": len(rows)}


def render_list(d: dict) -> str:
    if not d["evidence"]:
        return "no evidence yet"
    return table([[e["id"], e["kind"] or "", "" if e["exit_code"] is None else f"exit {e['exit_code']}",
                   e["todo"] or "", safe(e["summary"], limit=70)] for e in d["evidence"]],
                 ["EVIDENCE", "KIND", "EXIT", "TODO", "SUMMARY"])


def evidence_show(ctx, evidence) -> dict:
    from loopx.kernel.read import queries
    from loopx.kernel.write import evidence as ev

    store = ctx.store()
    e = queries.resolve_evidence(store.load(), evidence)
    rec = ev.full_record(store, e["id"]) or {"data": {}}
    return {"evidence": dict(rec["data"], id=e["id"], goal=e["goal"], ts=e["ts"], actor=e["actor"])}


def render_show(d: dict) -> str:
    e = d["evidence"]
    lines = [f"evidence {e['id']}  ({e.get('kind')})  goal {e['goal']}  by {safe(e['actor'])} at {e['ts']}",
             f"  summary:  {safe(e.get('summary'))}"]
    for k in ("todo", "run", "command", "exit_code", "commit", "sha256", "blob"):
        if e.get(k) is not None:
            lines.append(f"  {k + ':':<9} {safe(e[k])}")
    if e.get("files"):
        lines.append(f"  files:    {', '.join(map(safe, e['files']))}")
    if e.get("excerpt"):
        lines.append("  output:")
        lines.extend("    " + safe(line) for line in e["excerpt"].splitlines()[-60:])
    return "\n".join(lines)
