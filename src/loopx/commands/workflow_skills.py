"""``loopx workflow-skills --install|--check|--remove`` and ``loopx heartbeat-prompt``."""

from __future__ import annotations

import os

from loopx import hostfacts, hosts
from loopx.commands import add, scope_root
from loopx.hosts import files, hookconf, plan
from loopx.kernel.storage import clock
from loopx.kernel.storage.fs import project_dir
from loopx.output import Reply, safe, table


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=workflow_skills, render=render_skills,
            example="loopx workflow-skills --install --host claude-code --dry-run")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--install", dest="mode", action="store_const", const="install", help="write skills and host files")
    mode.add_argument("--check", dest="mode", action="store_const", const="check",
                      help="report missing, stale, modified and current files (default); exit 1 unless all current")
    mode.add_argument("--remove", dest="mode", action="store_const", const="remove", help="remove what loopx installed")

    p.add_argument("--host", default="all", metavar="HOST",
                   help=f"{', '.join(hostfacts.names())} or all (default all)")
    p.add_argument("--scope", default=None, metavar="SCOPE",
                   help="project or user (your home folder); default: project inside a loopx project "
                        "(a .loopx/ here or above), user anywhere else")
    p.add_argument("--dry-run", action="store_true", help="print every path it would write or remove; change nothing")
    p.add_argument("--force", action="store_true", help="replace or remove files you edited (a backup is kept)")


def choose_scope(ctx, scope: str | None) -> tuple[str, str]:
    """``(scope, why)``: the given scope, else ``project`` when the command runs inside a loopx
    project (``--project`` or a ``.loopx/`` here or above) and ``user`` anywhere else, so a first
    install right after ``pip install`` never drops host files into whatever folder the shell is in."""
    if scope is not None:
        return scope, "as asked (--scope)"
    if ctx.project:
        return "project", "--project names a project; --scope user installs for your home folder instead"

    found = project_dir()
    if found:
        return "project", (f"inside the loopx project {found}; "
                           "--scope user installs for your home folder instead")
    return "user", ("no loopx project here (no .loopx/ in this folder or above); "
                    "in a project, run `loopx connect` there or pass --scope project")


DONE = {"create": "created", "update": "updated", "replace": "replaced", "remove": "removed",
        "remove block": "removed block", "unchanged": "unchanged", "nothing to remove": "absent"}


def outcome(action: str) -> str:
    """One word for what happened to a file: created, updated, replaced, removed, unchanged, kept,
    would create, ..."""
    if action.startswith("would "):
        return action
    if action.startswith("kept"):
        return "kept"
    return DONE.get(action, action)


def workflow_skills(ctx, mode=None, host="all", scope=None, dry_run=False, force=False) -> Reply:
    mode = mode or "check"
    chosen = hosts.expand_hosts(host)

    scope, why = choose_scope(ctx, scope)
    root = scope_root(ctx, scope)
    items = plan.items(chosen, scope, root)
    manifest = files.load_manifest()
    stamp = clock.now_iso().replace(":", "").replace("-", "")
    rows: list[dict] = []
    if mode == "remove":
        items += _leftovers(items, manifest, chosen, root)
    for item in items:
        if mode == "check":
            rows.append({"path": item.path, "host": item.host, "what": item.what,
                         "status": files.status(item, manifest), "action": None, "backup": None})
        elif mode == "install":
            rows.append(files.install(item, manifest, force=force, dry_run=dry_run, stamp=stamp))
        else:
            rows.append(files.remove(item, manifest, force=force, dry_run=dry_run, stamp=stamp))
            if not dry_run and rows[-1]["action"] == "remove":
                inside = item.path.startswith(root + os.sep)
                files.prune_dirs(item.path, root if inside else plan.pi_agent_dir(root))
    if mode != "check" and not dry_run:
        files.save_manifest(manifest)
    hook_rows = []
    if mode == "install" and not dry_run:  # installed hooks follow this loopx (upgrade or move)

        hook_rows = hookconf.refresh_installed(scope, root)
    counts: dict[str, int] = {}
    done: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        if r["action"]:
            r["outcome"] = outcome(r["action"])
            done[r["outcome"]] = done.get(r["outcome"], 0) + 1
    kept = [r["path"] for r in rows if (r["action"] or "").startswith("kept")]
    verb = "remove" if mode == "remove" else "replace"
    warnings = [f"{len(kept)} file(s) you edited were left alone; rerun with --force to {verb} them (a backup is kept)"] if kept else []
    other = "project" if scope == "user" else "user"
    data = {"mode": mode, "scope": scope, "scope_reason": why, "other_scope": f"--scope {other}", "root": root,
            "hosts": chosen, "dry_run": dry_run, "files": rows, "counts": counts, "outcomes": done,
            "all_current": counts.get("current", 0) == len(rows), "hooks_rewritten": hook_rows}
    if mode == "install":
        data["sandbox_default"] = sandbox_functions(chosen)
    code = 1 if mode == "check" and not data["all_current"] else 0
    return Reply(data, code, warnings)


def sandbox_functions(hosts: list[str]) -> list[str]:
    """Shell functions (bash, zsh) that start each host's own command inside ``loopx sandbox``,
    for the user to add to their shell profile; loopx never writes them itself. ``loopx sandbox``
    runs the program found on ``PATH``, not the function, so the function does not call itself;
    ``command NAME`` still starts the host without the sandbox."""
    out = []
    for h in hosts:
        argv = ((hostfacts.HOSTS.get(h) or {}).get("preset") or {}).get("argv") or []
        name = argv[0] if argv else None
        if name and name.replace("-", "_").isidentifier():
            line = f'{name}() {{ loopx sandbox -- {name} "$@"; }}'
            if line not in out:
                out.append(line)
    return out


def _leftovers(items, manifest, chosen, root):
    """Files a previous loopx installed under this root's loopx skill folders that the current
    bundle no longer has (so --remove leaves nothing of loopx behind)."""
    known = {i.path for i in items}
    scope = "user" if root == os.path.expanduser("~") else "project"
    bases = {plan.skill_base(h, scope, root) + os.sep: h for h in chosen}
    extra = []
    for path, rec in manifest["files"].items():
        if path in known or rec.get("kind") != "file":
            continue
        for base, host in bases.items():
            if path.startswith(base) and os.path.relpath(path, base).split(os.sep)[0].startswith("loopx"):
                text = files.read_text(path)
                # present and unedited: "current"; edited: "modified" (kept unless --force)
                extra.append(files.Item(path, "file", text if text is not None and files.sha(text) == rec.get("sha256") else "",
                                        host, "old skill file"))
    return extra


def render_skills(d: dict) -> str:
    root = d["root"]

    def rel(p):
        r = os.path.relpath(p, root)
        return p if r.startswith("..") else r

    head = {"check": "checked", "install": "installed", "remove": "removed"}[d["mode"]]
    if d["dry_run"]:
        head = f"dry run ({d['mode']}): nothing changed"
    lines = [f"{head}: {', '.join(d['hosts'])} ({d['scope']} scope, {safe(root)})"]
    if d.get("scope_reason") and not d["scope_reason"].startswith("as asked"):
        lines.append(f"scope: {d['scope']}, {safe(d['scope_reason'])}")
    if d["mode"] == "check":
        counts = ", ".join(f"{v} {k}" for k, v in sorted(d["counts"].items()))
        lines += [table([[r["status"], safe(rel(r["path"]))] for r in d["files"]], ["STATUS", "PATH"]),
                  counts or "nothing to check"]
    else:  # say what was done to each file, not what it looked like before
        lines += [table([[r.get("outcome") or "", safe(rel(r["path"]))] for r in d["files"]], ["RESULT", "PATH"]),
                  ", ".join(f"{v} {k}" for k, v in sorted(d["outcomes"].items())) or "nothing to do"]
    for h in d.get("hooks_rewritten") or []:
        lines.append(f"hooks {h['action']}: {h['host']} ({safe(rel(h['path']))}) now start this loopx")
    backups = [r["backup"] for r in d["files"] if r.get("backup")]
    for b in backups:
        lines.append(f"backup kept: {safe(b)}")
    if d.get("sandbox_default"):
        lines.append("to start these hosts inside loopx's sandbox by default, add to your shell profile "
                     "(~/.bashrc, ~/.zshrc; loopx does not write it; `command NAME` skips the sandbox):")
        lines += ["  " + f for f in d["sandbox_default"]]
    if d["mode"] == "check" and not d["all_current"]:
        lines.append(f"next: loopx workflow-skills --install --scope {d['scope']}")
    return "\n".join(lines)


