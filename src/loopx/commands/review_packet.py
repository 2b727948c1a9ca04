"""``loopx review-packet``: a Markdown handoff and retrospective report of one goal."""

from __future__ import annotations

import os

from loopx.commands import add, goal_opt
from loopx.errors import UsageError
from loopx.kernel.policy import review
from loopx.kernel.storage import clock
from loopx.kernel.storage.fs import atomic_write
from loopx.output import safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=review_packet, render=render, command="review-packet",
            example="loopx review-packet --goal-id g1 --since 7d --output review.md")
    goal_opt(p)
    p.add_argument("--since", metavar="DUR|TIME", help="only this period (e.g. 7d or 2026-01-31T09:00:00Z)")
    p.add_argument("--output", metavar="FILE", help="also write the Markdown to FILE")


def review_packet(ctx, goal_id=None, since=None, output=None):
    start = clock.since_arg(since, clock.now()) if since else None
    d = review.build(ctx.store(), goal_id=goal_id, since=start)
    md = review.render_markdown(d)
    d["markdown"] = md
    if output:
        path = os.path.abspath(output)
        inside = os.path.realpath(path)
        root = os.path.realpath(ctx.store().root)
        if inside == root or inside.startswith(root + os.sep):
            raise UsageError(f"--output {output!r} is inside loopx's store", "write the report outside .loopx/, e.g. --output review.md")
        if os.path.isdir(path):
            raise UsageError(f"--output {output!r} is a directory", "name a file, e.g. --output review.md")
        try:
            atomic_write(path, md)
        except OSError as exc:
            raise UsageError(f"cannot write {output!r}: {exc.strerror}", "pick a writable path") from None
        d["output"] = path
    return d


def render(d: dict) -> str:
    text = safe(d["markdown"], one_line=False)
    if d.get("output"):
        text += f"\n(written to {safe(d['output'])})"
    return text
