"""``loopx schedule --cron|--systemd``: print a scheduler recipe for this project with the absolute
path of the installed ``loopx`` filled in (docs/scheduling.md).

Cron and systemd start jobs with a minimal PATH, so a recipe that says ``loopx`` fails with
``sh: loopx: not found``. The recipe printed here names loopx by its absolute path
(``resources.loopx_executable``) and sets a PATH that finds the agent's CLI and what the verify
commands need (your shell's PATH when you ran this, absolute folders only). Nothing is installed:
the text is for ``crontab -e`` or ``~/.config/systemd/user/``.
"""

from __future__ import annotations

import os
import shutil

from loopx.commands import add
from loopx.errors import UsageError
from loopx.kernel.read import queries
from loopx.kernel.storage import clock, layout
from loopx.resources import loopx_executable
from loopx.runner import presets
from loopx.runner.presets import quote


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=schedule, render=render,
            example="loopx --agent codex schedule --cron --goal-id my-goal >> my.crontab",
            description="Print a cron line or systemd units that run one governed turn every few minutes, "
                        "with the absolute path of this loopx and a PATH that finds the agent. The agent is "
                        "the global --agent preset (default claude-code) or --agent-cmd.")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--cron", dest="kind", action="store_const", const="cron", help="a crontab entry")
    kind.add_argument("--systemd", dest="kind", action="store_const", const="systemd",
                      help="a systemd user service and timer")
    p.add_argument("--goal-id", "--goal", dest="goal_id", metavar="ID", help="only this goal (default: the best eligible one)")
    p.add_argument("--every", default="15m", metavar="DUR",
                   help="how often to check: minutes dividing an hour (5m, 15m, 30m) or whole hours (1h, 2h); default 15m")
    p.add_argument("--agent-cmd", metavar="CMD", help="a custom agent command instead of a preset")
    p.add_argument("--timeout", default="30m", metavar="DUR", help="per-turn agent timeout (default 30m)")


def _every(text: str) -> tuple[int, str, str]:
    """(seconds, cron minute/hour fields, systemd OnCalendar) for ``--every``."""
    secs = int(clock.parse_duration(text))
    mins = secs // 60
    if secs % 60 == 0 and 1 <= mins < 60 and 60 % mins == 0:
        return secs, f"*/{mins} *", f"*:0/{mins}"
    if secs % 3600 == 0 and 1 <= secs // 3600 <= 24 and 24 % (secs // 3600) == 0:
        h = secs // 3600
        return secs, f"0 */{h}" if h > 1 else "0 *", f"0/{h}:00" if h > 1 else "hourly"
    raise UsageError(f"--every {text!r} does not fit a schedule",
                     "use minutes that divide an hour (5m, 10m, 15m, 20m, 30m) or hours that divide a day (1h, 2h, 6h)")


def _path_value(agent_cli: str | None, exe: str) -> str:
    """PATH for the job: loopx's folder, the agent CLI's folder, then this shell's absolute folders."""
    parts = []
    first = exe.split(" ", 1)[0].strip("'\"")
    for d in (os.path.dirname(first), os.path.dirname(shutil.which(agent_cli) or "") if agent_cli else "",
              *os.environ.get("PATH", "").split(os.pathsep), "/usr/local/bin", "/usr/bin", "/bin"):
        if d and os.path.isabs(d) and d not in parts and ":" not in d and "%" not in d and "\n" not in d:
            parts.append(d)
    return os.pathsep.join(parts)


def schedule(ctx, kind, goal_id=None, every="15m", agent_cmd=None, timeout="30m") -> dict:
    store = ctx.store()
    if goal_id:
        goal_id = queries.resolve_goal(store.load(), goal_id)["id"]
    clock.parse_duration(timeout)
    secs, cron_when, calendar = _every(every)
    agent = ctx.agent or ("shell" if agent_cmd else "claude-code")
    agent_cli = None
    if not agent_cmd:
        if not presets.known(agent):
            raise UsageError(f"--agent {agent!r} is not a preset", f"use one of {', '.join(presets.names())}, "
                             "or pass --agent-cmd 'CMD'")
        agent_cli = presets.spec(agent)["argv"][0]
    exe = loopx_executable()
    project = store.project_dir
    path = _path_value(agent_cli, exe)
    goal = f" --goal-id {goal_id}" if goal_id else ""
    how = f" --agent-cmd {quote(agent_cmd)}" if agent_cmd else ""
    run = f"{exe} --agent {agent} run --once --timeout {timeout}{goal}{how}"
    check = f"{exe} quota should-run --quiet{goal} --agent {agent}"
    lock = f"{layout.DIRNAME}/{layout.schedule_lock(kind)}"
    notes = []
    if agent_cli and not __import__("shutil").which(agent_cli):
        notes.append(f"{agent_cli} (the {agent} CLI) is not on your PATH now; install it or use --agent-cmd")
    if not agent_cmd:
        state = store.load()
        goals = [state["goals"][goal_id]] if goal_id else [g for g in state["goals"].values() if g["status"] == "active"]
        missing = [g["id"] for g in goals if not g.get("permission_mode")]
        if missing:
            notes.append(f"the {agent} preset needs a permission mode: a human runs `loopx goal update {missing[0]} "
                         "--permission-mode edit` (read-only, edit or full; docs/usage.md) before the first turn")
    if exe.endswith(" -m loopx"):
        notes.append("no `loopx` console script belongs to this Python; the recipe runs `python -m loopx`")
    out = {"kind": kind, "executable": exe, "project": project, "goal_id": goal_id, "agent": agent,
           "every_seconds": secs, "path": path, "notes": notes}
    if kind == "cron":
        line = f"{cron_when} * * * cd {quote(project)} && flock -n -E 0 {lock} {run}".replace("%", "\\%")  # % ends a cron command
        out["recipe"] = "\n".join([
            f"# loopx: one governed turn every {every} in {project} (from `loopx schedule --cron`)",
            "# cron's own PATH is minimal: this one finds loopx, the agent and your verify commands",
            f"PATH={path}", line, ""])
        out["install"] = ["crontab -e   # paste the lines above (PATH applies to the lines below it)"]
        return out
    unit = "loopx-" + (goal_id or os.path.basename(project.rstrip(os.sep)).lower() or "project")
    unit = "".join(c if c.isalnum() or c in "-_" else "-" for c in unit)[:60]
    pct = lambda s: s.replace("%", "%%")  # noqa: E731 - systemd reads % as a specifier
    cond = pct(f"{check}; rc=$$?; [ $$rc -eq 3 ] && exit 255; exit $$rc")
    service = "\n".join([
        f"# ~/.config/systemd/user/{unit}.service (from `loopx schedule --systemd`)",
        "[Unit]", f"Description=loopx governed agent turn in {project}", "",
        "[Service]", "Type=oneshot", f"WorkingDirectory={pct(project)}",
        f"Environment=\"PATH={pct(path)}\"",
        "# should-run first: exit 0 runs the turn, 1 (a clean no) skips it, 3 (broken store) fails the unit",
        f"ExecCondition=/bin/sh -c \"{cond}\"",
        f"ExecStart=/bin/sh -c \"exec flock -n -E 0 {lock} {pct(run)}\"",
        f"TimeoutStartSec={int(clock.parse_duration(timeout)) // 60 + 15}min",
        "KillSignal=SIGINT", ""])
    timer = "\n".join([
        f"# ~/.config/systemd/user/{unit}.timer",
        "[Unit]", f"Description=loopx governed agent turns in {project}", "",
        "[Timer]", f"OnCalendar={calendar}", "Persistent=true", "RandomizedDelaySec=60", "",
        "[Install]", "WantedBy=timers.target", ""])
    out.update(unit=unit, service=service, timer=timer, recipe=service + "\n" + timer,
               install=["systemctl --user daemon-reload", f"systemctl --user enable --now {unit}.timer"])
    return out


def render(d: dict) -> str:
    lines = [d["recipe"].rstrip("\n")]
    lines += [f"# then: {step}" for step in d["install"]]
    lines += [f"# note: {n}" for n in d["notes"]]
    return "\n".join(lines)
