"""Doctor's check of the skills, rules and instruction blocks installed for agent hosts, asked of
the host installer (``loopx.hosts.plan`` / ``loopx.hosts.files``), per scope (project, user).

Per item the installer says ``current``, ``stale`` (loopx's older text), ``modified`` (edited by
someone) or ``missing``. A missing item is only a problem when loopx installed it before (it is in
the installer's manifest): hosts nobody set up are not reported. When this loopx has no host
installer, the check is ``skipped``, never ``ok``.
"""

from __future__ import annotations

import os

from loopx import hostfacts
from loopx.hosts import adapters, files, hookconf, plan
from loopx.kernel.storage import clock
from loopx.ops import hosttrust
from loopx.ops.check import result


def _installer():
    return tuple(hostfacts.names()), files, plan


def scan_scope(scope: str, root: str) -> list[tuple]:
    """``[(item, status)]`` for every item loopx could install in ``scope`` under ``root`` that is
    present or recorded in the manifest."""
    hosts_all, files, plan = _installer()
    manifest = files.load_manifest()
    out = []
    for item in plan.items(list(hosts_all), scope, root):
        st = files.status(item, manifest)
        if st == "missing" and item.path not in manifest["files"]:
            continue
        out.append((item, st))
    return out


def _scopes(project_dir: str | None) -> list[tuple[str, str]]:
    scopes = [("project", project_dir)] if project_dir else []
    return scopes + [("user", os.path.expanduser("~"))]


def _covered(scope: str, root: str, rows: list[tuple]) -> list[str]:
    """The hosts every one of whose files is present (shared files count for each host)."""
    hosts_all, _, plan = _installer()
    present = {i.path for i, st in rows if st != "missing"}
    return [h for h in hosts_all if all(i.path in present for i in plan.items([h], scope, root))]


def _summarise(scope: str, rows: list[tuple], covered: list[str] | None = None) -> dict:
    cid = f"hosts.{scope}"
    if not rows:
        return result(cid, "ok", f"no loopx skills installed in {scope} scope (optional: "
                                 f"`loopx workflow-skills --install --scope {scope}`)")
    bad = [(i, s) for i, s in rows if s != "current"]
    hosts = covered or sorted({i.host for i, _ in rows})
    if not bad:
        return result(cid, "ok", f"{len(rows)} file(s) current for {', '.join(hosts)}")
    counts: dict[str, int] = {}
    for _, s in bad:
        counts[s] = counts.get(s, 0) + 1
    first = bad[0][0].path
    finding = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" ({first}" + (
        f" and {len(bad) - 1} more)" if len(bad) > 1 else ")")
    if set(counts) == {"modified"}:
        return result(cid, "warning", finding + "; edited files are never overwritten",
                      f"keep the edit, or `loopx workflow-skills --install --scope {scope} --force` (keeps a backup)")
    return result(cid, "warning", finding,
                  "loopx doctor --fix (refreshes stale and missing loopx files; edited files are kept)",
                  "refresh_skills")


def hooks(scope: str, root: str) -> list[dict]:
    """One result per hook host whose configuration holds loopx entries (hooks are opt-in): an
    error when an installed hook cannot start (the host would run nothing and treat that as
    "allow"), a warning when the entries are stale (another loopx path, an older loopx)."""
    out = []
    for host in hostfacts.hook_hosts():
        cid = f"hooks.{scope}.{host}"
        fix = f"loopx hooks --install --host {host} --scope {scope}"
        try:
            row = hookconf.check(host, scope, root)
            starts = hookconf.startable(host, scope, root)
        except Exception as exc:  # an unparseable host config is a finding, not a crash
            out.append(result(cid, "warning", getattr(exc, "message", str(exc)), "fix the file by hand, then " + fix))
            continue
        st, path = row["status"], row["path"]
        if st == "missing":
            continue
        broken = [s for s in starts if not s["ok"]]
        off = _disabled(host, scope, root)
        if off and not broken:
            out.append(result(cid, "warning", f"loopx's {host} hooks in {path} are installed but will not run: {off}",
                              f"turn {host}'s hooks back on in its settings"))
            continue
        if broken:
            b = broken[0]
            out.append(result(cid, "error",
                              f"the {host} hook in {path} cannot start: {b['program'] or '(empty command)'} is not an "
                              "executable file (checked with this shell's PATH; the host may have less). A hook that "
                              "cannot start is treated by the host as allowing everything.",
                              fix + " (writes the absolute path of this loopx)", "rewrite_hooks"))
        elif st == "stale":
            out.append(result(cid, "warning",
                              f"loopx's hook entries in {path} differ from what this loopx installs "
                              "(an older loopx, another path to loopx, or a custom --max-continuations)",
                              fix + " (keep your --max-continuations), or loopx workflow-skills --install",
                              "rewrite_hooks"))
        elif st == "modified":
            out.append(result(cid, "warning", f"loopx's plugin {path} was edited; it is never overwritten",
                              fix + " --force (keeps a backup)"))
        else:
            trust = hosttrust.trust_of(host, scope, root)
            if trust and trust["state"] == "untrusted":
                out.append(result(cid, "error", f"loopx's {host} hooks in {path} are installed but {host} will not run "
                                                f"them, so the guard is off: {trust['why']} ({trust['how']})",
                                  hosttrust.fix(host)))
                continue
            note = f"; {trust['why']} ({trust['how']})" if trust else ""
            out.append(result(cid, "ok", f"hooks current in {path}; they start {starts[0]['where'] if starts else 'loopx'}"
                                         + note))
    return out


def _disabled(host: str, scope: str, root: str) -> str | None:
    fn = getattr(adapters.get(host), "disabled", None)
    try:
        return fn(scope, root) if fn else None
    except Exception:  # a host config loopx cannot read is reported elsewhere
        return None


def rewrite_hooks(project_dir: str | None) -> str:
    """Re-write stale loopx hook entries (both scopes) so they start this loopx."""
    done = []
    for scope, root in _scopes(project_dir):
        rows = hookconf.refresh_installed(scope, root)
        if rows:
            done.append(f"rewrote {len(rows)} {scope} hook config(s)")
    return "; ".join(done) or "no hooks to rewrite"


def check(project_dir: str | None) -> list[dict]:
    out = []
    for scope, root in _scopes(project_dir):
        try:
            rows = scan_scope(scope, root)
            out.append(_summarise(scope, rows, _covered(scope, root, rows)))
        except Exception as exc:  # a host module problem must never break doctor
            out.append(result(f"hosts.{scope}", "warning", f"could not check skills: {exc}",
                              "loopx workflow-skills --check"))
        out.extend(hooks(scope, root))
    return out


def refresh(project_dir: str | None) -> str:
    """Reinstall stale and missing (previously installed) items; never touch edited ones."""
    _, files, _ = _installer()
    stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
    done = []
    for scope, root in _scopes(project_dir):
        rows = [(i, s) for i, s in scan_scope(scope, root) if s in ("stale", "missing")]
        if not rows:
            continue
        manifest = files.load_manifest()
        for item, _ in rows:
            files.install(item, manifest, force=False, dry_run=False, stamp=stamp)
        files.save_manifest(manifest)
        done.append(f"refreshed {len(rows)} {scope} file(s)")
    return "; ".join(done) or "nothing to refresh"
