"""``loopx update check | plan | apply``: self-update through the channel loopx was installed by.

``check`` exits 0 (and says whether an update exists); ``plan`` prints the exact command, the
pinned target and the rollback; ``apply`` runs it, smoke-checks the new version and rolls back on
failure (exit 1). Errors: 2 usage (no index given, unknown version), 3 state (index unreachable,
a channel updated by hand)."""

from __future__ import annotations

import sys

from loopx.commands import actions, add
from loopx.config import env
from loopx.errors import UsageError
from loopx.ops import update
from loopx.output import Reply, safe


def _index_opts(p) -> None:
    p.add_argument("--index-url", metavar="URL", help="a PEP 503 simple index (file:// works); "
                   "default $LOOPX_INDEX_URL")
    p.add_argument("--find-links", metavar="DIR|URL", help="a folder or page of loopx wheels")
    p.add_argument("--pre", action="store_true", help="consider pre-releases")


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx update check && loopx update plan")
    acts = actions(p)
    c = add(acts, "check", "installed and newest version (no network with LOOPX_NO_UPDATE_CHECK=1)",
            handler=check, render=render_check, command="update check",
            example="loopx update check --index-url https://example.org/simple")
    _index_opts(c)
    for action, handler, render, text in (
            ("plan", plan, render_plan, "how loopx was installed and the exact pinned update and rollback commands"),
            ("apply", apply, render_apply, "run the plan, smoke-check the new version, roll back on failure")):
        a = add(acts, action, text, handler=handler, render=render, command=f"update {action}",
                example=f"loopx update {action} --to 0.2.0 --index-url file:///srv/wheels/simple")
        a.add_argument("--to", metavar="VERSION", help="the version to install (default: the newest)")
        _index_opts(a)
        if action == "apply":
            a.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


def check(ctx, index_url=None, find_links=None, pre=False) -> dict:
    return update.check(index_url, find_links, pre)


def plan(ctx, to=None, index_url=None, find_links=None, pre=False) -> dict:
    return update.plan(to, index_url, find_links, pre)


def apply(ctx, to=None, index_url=None, find_links=None, pre=False, yes=False) -> Reply:
    p = update.plan(to, index_url, find_links, pre)
    if not p["manual"] and not p["up_to_date"] and not yes:
        if ctx.json or not sys.stdin.isatty():
            raise UsageError("`update apply` needs --yes when it cannot ask on a terminal",
                             "review `loopx update plan`, then run `loopx update apply --yes`")
        sys.stderr.write(render_plan(p) + "\nproceed? [y/N] ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            return Reply({"result": "cancelled", "plan": p}, 1)
    out = update.apply(p)
    return Reply(out, 0 if out["result"] in ("updated", "up_to_date") else 1)


def render_check(d: dict) -> str:
    if d.get("steps"):
        lines = [f"loopx {d['installed']} installed; {safe(d['reason'])}:"]
        lines += [f"  {safe(s)}" for s in d["steps"]]
        if d.get("rollback_steps"):
            lines.append("to roll back:")
            lines += [f"  {safe(s)}" for s in d["rollback_steps"]]
        return "\n".join(lines)
    if not d["checked"]:
        return f"loopx {d['installed']} installed; not checked: {safe(d['reason'])}"
    if d["update_available"]:
        flag = f" --find-links {safe(d['find_links'])}" if d.get("find_links") else ""
        if d.get("index_url") and d["index_url"] != env("LOOPX_INDEX_URL"):
            flag += f" --index-url {safe(d['index_url'])}"
        return f"loopx {d['installed']} installed; {d['newest']} is available\nnext: loopx update plan{flag}"
    return f"loopx {d['installed']} installed; up to date (newest on the index: {d['newest'] or 'none'})"


def render_plan(d: dict) -> str:
    lines = [f"installed: loopx {d['installed']} ({safe(d['summary'])})", f"channel:   {d['channel']}"]
    if d["manual"]:
        lines.append("loopx does not update this installation itself; run:")
        lines += [f"  {safe(s)}" for s in d.get("steps") or []]
        if d.get("rollback_steps"):
            lines.append("to roll back:")
            lines += [f"  {safe(s)}" for s in d["rollback_steps"]]
        return "\n".join(lines)
    if d["up_to_date"]:
        lines.append(f"already at {d['target']}: nothing to do")
        return "\n".join(lines)
    lines.append(f"target:    loopx {d['target']}")
    lines.append(f"command:   {safe(d['steps'][0])}")
    how = {"backup": " (from a wheel of the installed loopx, made before the update)",
           None: " (apply refuses without a way back)"}.get(d.get("rollback_source"), "")
    lines.append(f"rollback:  {safe(d['rollback_steps'][0])}{how}")
    nxt = "next: loopx update apply --yes" + (f" --to {d['target']}" if d["target"] else "")
    if d.get("index_url") and d["index_url"] != env("LOOPX_INDEX_URL"):
        nxt += f" --index-url {d['index_url']}"
    if d.get("find_links"):
        nxt += f" --find-links {d['find_links']}"
    lines.append(safe(nxt))
    return "\n".join(lines)


def render_apply(d: dict) -> str:
    p = d["plan"]
    res = d["result"]
    if res == "up_to_date":
        return f"loopx {p['installed']} is already the target; nothing changed"
    if res == "cancelled":
        return "cancelled; nothing changed"
    if res == "updated":
        return f"updated loopx {p['installed']} -> {p['target']} ({p['channel']}); smoke check passed"
    why = (d.get("smoke") or {}).get("why") or (d.get("install") or {}).get("output", "")[-300:]
    lines = [f"update to {p['target']} failed: {safe(why, one_line=False)}"]
    if res in ("rolled_back", "install_failed"):
        lines.append(f"rolled back: loopx {p['installed']} runs again")
    else:
        lines.append(f"ROLLBACK FAILED; reinstall by hand: {safe(p['rollback_steps'][0])}")
    return "\n".join(lines)
