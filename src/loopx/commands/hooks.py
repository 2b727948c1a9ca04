"""``loopx hooks --install|--check|--remove|--rules``: opt-in host hooks and the guard's rules.
The entry points the hosts call are ``loopx hook`` (commands/hook.py)."""

from __future__ import annotations

from loopx import hostfacts, hosts
from loopx.commands import add, goal_opt, scope_root
from loopx.errors import Conflict, LoopxError
from loopx.guard import verdicts
from loopx.hosts import entry, hookconf
from loopx.kernel import humans
from loopx.kernel.read import queries, validate
from loopx.kernel.storage import clock
from loopx.kernel.storage.fs import project_dir
from loopx.ops import hosttrust
from loopx.output import Reply, safe, table


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=hooks_cmd, render=render_hooks,
            example="loopx hooks --install --host claude-code")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--install", dest="mode", action="store_const", const="install", help="add loopx's hooks to the host's config")
    mode.add_argument("--check", dest="mode", action="store_const", const="check", help="report missing, stale or current (default)")
    mode.add_argument("--remove", dest="mode", action="store_const", const="remove", help="remove loopx's hooks, keep everything else")
    mode.add_argument("--rules", dest="mode", action="store_const", const="rules",
                      help="show or change the goal's command -> gate-kind rules for the pre-tool guard")

    p.add_argument("--host", default="all", help=f"{', '.join(hostfacts.hook_hosts())} or all (default all)")
    p.add_argument("--scope", default="project", help="project (default) or user")
    p.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    p.add_argument("--force", action="store_true", help="replace or remove a plugin file you edited (a backup is kept)")
    p.add_argument("--max-continuations", dest="cap", metavar="N", help="continuation cap written into the stop hook (default 8)")

    goal_opt(p)
    p.add_argument("--add-rule", action="append", metavar="KIND=PATTERN",
                   help="--rules: map commands matching PATTERN (fnmatch) to KIND; KIND none exempts (repeatable)")
    p.add_argument("--add-path-rule", action="append", metavar="KIND=GLOB",
                   help="--rules: edits to paths matching GLOB need a KIND gate (repeatable)")
    p.add_argument("--protect-branch", action="append", metavar="NAME", help="--rules: protected branches (replaces main, master)")
    p.add_argument("--no-defaults", action="store_true", help="--rules: use only this goal's rules")
    p.add_argument("--reset-rules", action="store_true", help="--rules: back to the defaults")
    p.add_argument("--try", dest="try_command", metavar="COMMAND", help="--rules: show what the guard would do with COMMAND")


def hooks_cmd(ctx, mode=None, host="all", scope="project", dry_run=False, cap=None, goal_id=None,
              add_rule=None, add_path_rule=None, protect_branch=None, no_defaults=False, reset_rules=False,
              try_command=None, force=False) -> Reply | dict:
    mode = mode or "check"
    if mode == "rules":
        return hook_rules(ctx, goal_id, add_rule, add_path_rule, protect_branch, no_defaults, reset_rules, try_command)

    chosen = hosts.expand_hosts(host, hostfacts.hook_hosts())
    if mode == "remove" and not dry_run:
        humans.require_human(ctx, "hooks.remove")
    if cap is not None:
        cap = validate.count(cap, "--max-continuations", high=1000)
    root = scope_root(ctx, scope)
    stamp = clock.now_iso().replace(":", "").replace("-", "")
    if mode == "install":
        _refuse_second_scope(ctx, chosen, scope)
    rows = []
    for h in chosen:
        if mode == "check":
            rows.append(_check_row(h, scope, root, entry.parse_cap(cap)))
        elif mode == "install":
            rows.append(hookconf.install(h, scope, root, entry.parse_cap(cap), dry_run=dry_run, force=force, stamp=stamp))
        else:
            rows.append(hookconf.remove(h, scope, root, dry_run=dry_run, force=force, stamp=stamp))
    data = {"mode": mode, "scope": scope, "root": root, "dry_run": dry_run, "hooks": rows,
            "all_current": all(r["status"] == "current" and (r.get("trust") or {}).get("state") != "untrusted"
                               for r in rows)}
    warnings = _warnings(rows, chosen, installed=mode == "install" and not dry_run)
    if mode == "install" and scope == "project" and not ctx.project and project_dir() is None:
        warnings.append(f"no loopx project here: the hooks went into this folder ({root}); run `loopx connect` "
                        "in the project's root, or install with --scope user")
    return Reply(data, 1 if mode == "check" and not data["all_current"] else 0, warnings)


def _check_row(host: str, scope: str, root: str, cap) -> dict:
    """``hookconf.check``'s row for one host, with ``trust`` when the host has not trusted the
    installed hooks (it then runs none of them)."""
    row = hookconf.check(host, scope, root, cap)
    if row["status"] != "missing":
        trust = hosttrust.trust_of(host, scope, root)
        if trust:
            row["trust"] = trust
    return row


def _warnings(rows: list[dict], chosen: list[str], installed: bool) -> list[str]:
    """What the user must do besides: trust hooks a host will not run, files left alone."""
    warnings = []
    for r in rows:
        if (r.get("trust") or {}).get("state") == "untrusted":
            warnings.append(f"error: {r['host']} will not run loopx's hooks, so the guard is off: {r['trust']['why']}; "
                            + hosttrust.fix(r["host"]))
    if installed:
        for h in chosen:
            if hostfacts.HOSTS.get(h, {}).get("hook_trust"):
                warnings.append(f"{h} runs none of these hooks until you trust them: {hosttrust.fix(h)}")
        if "gemini" in chosen:
            warnings.append("gemini asks you to trust new or changed project hooks before it runs them")
    kept = [r["path"] for r in rows if (r.get("action") or "").startswith("kept")]
    if kept:
        warnings.append(f"{len(kept)} plugin file(s) you edited were left alone; --force replaces or removes them "
                        "(a backup is kept)")
    return warnings


def render_hooks(d: dict) -> str:
    if d["mode"] == "rules":
        return render_rules(d)
    rows = [[r["host"], r["status"], r["action"] or "", safe(r["path"])] for r in d["hooks"]]
    head = f"hooks {d['mode']}" + (" (dry run: nothing changed)" if d["dry_run"] else "") + f", {d['scope']} scope"
    return head + "\n" + table(rows, ["HOST", "STATUS", "ACTION", "CONFIG"])


def _refuse_second_scope(ctx, chosen: list[str], scope: str) -> None:
    """Raise Conflict (exit 4) when a chosen host already has loopx's hooks in the other scope:
    hosts run the hooks of both scopes (Codex runs them concurrently), so every tool call would be
    checked twice and two stop hooks would race on one continuation counter."""
    other = "user" if scope == "project" else "project"
    try:
        other_root = scope_root(ctx, other)
    except LoopxError:  # no project here: nothing installed in its project scope to collide with
        return
    both = []
    for h in chosen:
        try:
            row = hookconf.check(h, other, other_root)
        except LoopxError:
            continue
        if row["status"] != "missing":
            both.append(f"{h} ({row['path']})")
    if both:
        raise Conflict(f"loopx's hooks are already installed in {other} scope for {', '.join(both)}; hooks in both "
                       "scopes run twice and their stop hooks race", f"keep one scope: loopx hooks --remove --host HOST "
                       f"--scope {other}, then install again (or install for the other hosts only with --host)",
                       code="hooks_in_both_scopes")


def hook_rules(ctx, goal_id, add_rule, add_path_rule, protect_branch, no_defaults, reset_rules, try_command) -> dict:
    store = ctx.store()
    rules = [verdicts.parse_rule(r, "command") for r in add_rule or []] + \
        [verdicts.parse_rule(r, "path") for r in add_path_rule or []]
    changed = bool(rules or protect_branch or no_defaults or reset_rules)
    if changed:
        human = humans.require_human(ctx, "guard.rules")
        verdicts.set_config(store, human.actor, goal_id, rules=rules, branches=protect_branch,
                         defaults=False if no_defaults else None, reset=reset_rules, human=human)
    state = store.load()
    goal = queries.resolve_goal(state, goal_id)
    out = {"mode": "rules", "goal_id": goal["id"], "changed": changed, "guard": verdicts.config(goal),
           "protect": goal["scope"].get("protect") or [], "try": None}
    if try_command:
        out["try"] = {"command": try_command,
                      "matches": verdicts.command_kinds(try_command, out["guard"], cwd=store.project_dir),
                      "verdict": verdicts.evaluate(state, commands=[try_command], project_dir=store.project_dir,
                                                goal_id=goal["id"])}
    return out


def render_rules(d: dict) -> str:
    g = d["guard"]
    lines = [f"pre-tool guard for goal {d['goal_id']}" + (" (updated)" if d["changed"] else ""),
             f"  protected actions: {', '.join(d['protect']) or '(none: the guard only checks scope)'}",
             f"  protected branches: {', '.join(g['branches'])}",
             f"  default mapping: {'on' if g['defaults'] else 'off'} (see docs/hosts.md)"]
    for r in g["rules"]:
        what = f"command {r['command']}" if r.get("command") else f"path {r.get('path')}"
        lines.append(f"  rule: {safe(what)} -> {r['kind']}")
    t = d.get("try")
    if t:
        kinds = ", ".join(f"{m['kind']} ({safe(m['command'])})" for m in t["matches"]) or "no gate kind"
        verdict = "allowed" if t["verdict"]["allow"] else "denied"
        lines.append(f"try: {safe(t['command'])} -> {kinds}; {verdict}")
        if not t["verdict"]["allow"]:
            lines.append(f"  reason: {safe(t['verdict']['reason'])}")
    return "\n".join(lines)
