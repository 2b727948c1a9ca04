"""Doctor's check of the skills, rules and instruction blocks installed for agent hosts, asked of
the host installer (``loopx.hosts.plan`` / ``loopx.hosts.files``), per scope (project, user).

Per item the installer says ``current``, ``stale`` (loopx's older text), ``modified`` (edited by
someone) or ``missing``. A missing item is only a problem when loopx installed it before (it is in
the installer's manifest): hosts nobody set up are not reported. When this loopx has no host
installer, the check is ``skipped``, never ``ok``.
"""

from __future__ import annotations

import os

from loopx.ops.check import result


def _installer():
    try:
        from loopx.hosts import HOSTS, files, plan
    except ImportError:
        return None
    return HOSTS, files, plan


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


def _summarise(scope: str, rows: list[tuple]) -> dict:
    cid = f"hosts.{scope}"
    if not rows:
        return result(cid, "ok", f"no loopx skills installed in {scope} scope (optional: "
                                 f"`loopx workflow-skills --install --scope {scope}`)")
    bad = [(i, s) for i, s in rows if s != "current"]
    hosts = sorted({i.host for i, _ in rows})
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
    """One result per hook host whose configuration holds loopx entries (hooks are opt-in)."""
    try:
        from loopx.hosts import HOOK_HOSTS, hookconf
    except ImportError:
        return [result(f"hooks.{scope}", "skipped", "this loopx has no hook installer to ask")]
    out = []
    prefix = hookconf.command_prefix()
    for host in HOOK_HOSTS:
        path = hookconf.config_path(host, scope, root)
        fix = f"loopx hooks --install --host {host} --scope {scope}"
        try:
            st = hookconf.status(host, path, hookconf.wanted(host, prefix, 8))
        except Exception as exc:  # an unparseable host config is a finding, not a crash
            out.append(result(f"hooks.{scope}.{host}", "warning", getattr(exc, "message", str(exc)),
                              "fix the file by hand, then " + fix))
            continue
        if st == "missing":
            continue
        if st == "stale":
            out.append(result(f"hooks.{scope}.{host}", "warning",
                              f"loopx's hook entries in {path} differ from what this loopx installs "
                              "(an older loopx, another path to loopx, or a custom --max-continuations)",
                              fix + " (keep your --max-continuations)"))
        else:
            out.append(result(f"hooks.{scope}.{host}", "ok", f"hooks current in {path}"))
    return out


def check(project_dir: str | None) -> list[dict]:
    if _installer() is None:
        return [result("hosts", "skipped", "this loopx has no host installer to ask about skills and hooks")]
    out = []
    for scope, root in _scopes(project_dir):
        try:
            out.append(_summarise(scope, scan_scope(scope, root)))
        except Exception as exc:  # a host module problem must never break doctor
            out.append(result(f"hosts.{scope}", "warning", f"could not check skills: {exc}",
                              "loopx workflow-skills --check"))
        out.extend(hooks(scope, root))
    return out


def refresh(project_dir: str | None) -> str:
    """Reinstall stale and missing (previously installed) items; never touch edited ones."""
    from loopx.kernel.storage import clock

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
