"""``loopx doctor [--fix]``: check the installation and the project's store; apply safe fixes.

Exit 0 when every check is ok (or skipped), 1 when one is a warning or an error. Works outside
any project (installation checks only) and on a broken store."""

from __future__ import annotations

from loopx.commands import add
from loopx.kernel.humans import require_human
from loopx.ops import doctor as ops
from loopx.output import Reply, safe, table

MARK = {"ok": "ok", "warning": "WARN", "error": "ERROR", "skipped": "skip"}


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=doctor, render=render, example="loopx doctor --fix",
            description=help_text + ". Exit 0 when all is well, 1 when it found problems.")
    p.add_argument("--fix", action="store_true",
                   help="apply the safe fixes (quarantine a torn tail or bad lines under the lock, add "
                        "ignore rules, refresh stale skills, rebuild the cache) and say what was done")


def doctor(ctx, fix: bool = False) -> Reply:
    if fix:  # listed as human-only (humans.AGENT_DENIED): repairs may drop records, e.g. a gate's use

        require_human(ctx, "doctor.fix")
    report = ops.run(ctx.project)
    report["fixed"] = []
    if fix and report["fixable"]:
        report["fixed"] = ops.apply_fixes(report, ctx.actor)
        fixed = report["fixed"]
        report = ops.run(ctx.project)
        report["fixed"] = fixed
    return Reply(report, 1 if report["problems"] else 0)


def render(d: dict) -> str:
    where = f"project {safe(d['project'])}" if d["project"] else "no project here: installation checks only"
    lines = [f"loopx doctor (loopx {d['version']}, {where})"]
    for f in d.get("fixed") or []:
        lines.append(f"  {'fixed' if f['done'] else 'NOT fixed'}: {f['fix']}: {safe(f['detail'])}")
    rows = []
    for c in d["checks"]:
        rows.append([MARK.get(c["status"], c["status"]), c["id"], safe(c["finding"])])
        if c["fix"] and c["status"] in ("warning", "error"):
            rows.append(["", "", "fix: " + safe(c["fix"])])
    lines.append(table(rows, indent="  "))
    s = d["summary"]
    if d["problems"]:
        tail = f"{d['problems']} problem(s): {s['error']} error(s), {s['warning']} warning(s)"
        if d["fixable"]:
            tail += f"; `loopx doctor --fix` can repair: {', '.join(d['fixable'])}"
    else:
        tail = f"all good ({s['ok']} ok" + (f", {s['skipped']} skipped)" if s["skipped"] else ")")
    lines.append(tail)
    return "\n".join(lines)
