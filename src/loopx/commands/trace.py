"""``loopx trace export|verify``: a goal's records, evidence blobs, chain heads, anchors and review
packet in one archive that can be checked on another machine (src/loopx/ops/trace.py)."""

from __future__ import annotations

from loopx.commands import actions, add, goal_opt
from loopx.kernel.read import queries
from loopx.ops import trace
from loopx.output import Reply, safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx trace export --goal-id g1 -o g1-trace.tar.gz")
    acts = actions(p)
    e = add(acts, "export", "write one goal's trace archive (.tar.gz)", handler=trace_export, render=render_export,
            command="trace export", example="loopx trace export --goal-id g1 -o g1-trace.tar.gz")
    goal_opt(e)
    e.add_argument("-o", "--output", required=True, metavar="FILE", help="the archive to write")
    e.add_argument("--redact-more", action="store_true",
                   help="for publishing: also replace home paths, user and host names, e-mail and IP addresses and "
                        "private or credentialed URLs with stable placeholders (docs/security.md)")
    v = add(acts, "verify", "check a trace archive end to end (exit 1 when anything does not hold)",
            handler=trace_verify, render=render_verify, command="trace verify",
            example="loopx trace verify g1-trace.tar.gz")
    v.add_argument("file")


def trace_export(ctx, output, goal_id=None, redact_more=False) -> dict:
    store = ctx.store()
    gid = queries.resolve_goal(store.load(), goal_id)["id"]
    return trace.export(store, gid, output, redact_more=redact_more)


def render_export(d: dict) -> str:
    out = (f"wrote {safe(d['output'])}: {d['records']} record(s) of {d['goal_id']}, {d['stubs']} other record(s) "
           f"as hashes only, {d['blobs']} blob(s), {d['anchors']} anchor(s)\n")
    more = d.get("redact_more")
    if more:
        kinds = ", ".join(f"{n} {k}(s)" for k, n in more["placeholders"].items()) or "nothing private found"
        out += (f"redacted more ({', '.join(more['rules'])}): {kinds}; {more['records']} record(s) and "
                f"{len(more['blobs'])} blob(s) changed, kept verifiable by their original hashes\n")
        if not more["verified_before_redaction"]["ok"]:
            out += "warning: the store did not verify before redaction; `trace verify` will say so\n"
    return out + f"check it anywhere with `loopx trace verify {safe(d['output'])}`"


def trace_verify(ctx, file) -> Reply:
    d = trace.verify(file)
    return Reply(d, exit_code=0 if d["ok"] else 1)


def render_verify(d: dict) -> str:
    head = (f"{d['records']} record(s) of {d['goal_id']}, {d['stubs']} hash-only, {d['blobs']} blob(s), "
            f"{d['anchors']} anchor(s)")
    if d.get("redact_more"):
        head += (f"; redacted more: {d['redacted']} record(s) and {d['redacted_blobs']} blob(s) checked by their "
                 "original hashes only")
    if d["ok"]:
        return f"verified: {head}; every hash, link and anchor holds"
    return "NOT verified: " + head + "\n" + "\n".join(f"  - {safe(p)}" for p in d["problems"])
