"""``doctor``'s anchor check: the log against the chain heads anchored in the data folder, on the git
ref ``refs/loopx/anchors`` and on each git remote's copy of that ref (``git ls-remote``, bounded by a
timeout; ``doctor`` only, never a hook). See kernel/storage/anchors.py and docs/security.md."""

from __future__ import annotations

from loopx.ops.check import result

REMOTE_TIMEOUT = 15.0
REMOTE_REF = "refs/loopx/remote-anchors/"


def _remotes(cwd: str) -> list[str]:
    from loopx.kernel.storage import anchors

    try:
        return [r for r in anchors.git(cwd, "remote").split() if r]
    except Exception:  # noqa: BLE001
        return []


def fetch_remote(cwd: str, remote: str) -> str | None:
    """Fetch ``remote``'s anchor ref into ``refs/loopx/remote-anchors/<remote>`` (a ref of loopx's own;
    no branch, index or working tree is touched). Returns its commit, or None when the remote has
    none. Raises RuntimeError/OSError/TimeoutExpired when the remote cannot be read."""
    from loopx.kernel.storage import anchors

    listed = anchors.git(cwd, "ls-remote", remote, anchors.REF, timeout=REMOTE_TIMEOUT)
    if not listed:
        return None
    anchors.git(cwd, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote,
                f"+{anchors.REF}:{REMOTE_REF}{remote}", timeout=REMOTE_TIMEOUT)
    return listed.split()[0]


def gather(t, *, remotes: bool = True) -> dict:
    """Every anchor source of the project, read before the log is scanned (so the one pass over
    the log can pick out the anchored records' hashes): ``{"sources": [(check id, where, anchors,
    fix)], "extra": [results to report as they are], "error": str | None}``. Never raises."""
    from loopx.kernel.storage import anchors

    out: dict = {"sources": [], "extra": [], "error": None}
    try:
        store = t.store()
        if store.format_number() < 2:
            return out
        pid = store.format_info().get("project_id")
        if not pid:
            return out
        out["sources"].append(("store.anchors.file", anchors.data_path(pid), anchors.read_file(pid),
                               "compare .loopx/ with git (`git log -p .loopx/`) and the backups; the records "
                               "from that seq on cannot be trusted"))
        if anchors.git_dir_of(store.project_dir) is None:
            return out
        cwd = store.project_dir
        try:
            tip, found = anchors.read_ref(cwd, anchors.REF, pid)
        except Exception as exc:  # noqa: BLE001
            out["extra"].append(result("store.anchors.git", "warning", f"the git anchors cannot be read: {exc}", None))
            tip, found = None, []
        out["sources"].append(("store.anchors.git", anchors.REF, found, "compare .loopx/ with the anchored heads "
                               f"(`git log -p {anchors.REF}`)"))
        if not remotes:
            return out
        for remote in _remotes(cwd):
            cid = f"store.anchors.remote.{remote}"
            try:
                rtip = fetch_remote(cwd, remote)
            except Exception as exc:  # noqa: BLE001 - an unreachable remote is a warning, not a failure
                out["extra"].append(result(cid, "warning", f"the anchors on remote {remote} cannot be read: "
                                                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                                           None))
                continue
            if rtip is None:
                continue
            _t, rfound = anchors.read_ref(cwd, REMOTE_REF + remote, pid)
            out["sources"].append((cid, f"{anchors.REF} on remote {remote}", rfound,
                                   "the pushed anchor is the one the agent cannot rewrite: treat the local log from "
                                   "that seq on as tampered"))
            if not tip or not anchors.is_ancestor(cwd, rtip, tip):
                out["extra"].append(result(f"store.anchors.rewound.{remote}", "error",
                                           f"the local {anchors.REF} does not contain the anchors pushed to {remote} "
                                           f"(commit {rtip[:12]}): the local anchors were rewound or replaced",
                                           f"restore it: git update-ref {anchors.REF} {rtip}"))
    except Exception as exc:  # noqa: BLE001 - a damaged store or git must never break doctor
        out["error"] = f"{exc}"
    return out


def wanted(gathered: dict) -> dict:
    """``{stream: {(node, seq), ...}}``: the records the gathered anchors name."""
    out: dict = {}
    for _cid, _where, found, _fix in gathered["sources"]:
        for a in found:
            for node, h in (a.get("heads") or {}).items():
                if isinstance(h, dict) and isinstance(h.get("seq"), int):
                    out.setdefault(h.get("stream"), set()).add((node, h["seq"]))
    return out


def check_anchors(t, *, remotes: bool = True) -> list[dict]:
    """One result per anchor source that exists: ``store.anchors.file``, ``store.anchors.git`` and
    ``store.anchors.remote.<name>`` (plus ``store.anchors.rewound.<name>`` when the local ref lacks
    what the remote holds); none when nothing was ever anchored. ``t`` is doctor's Target: the
    sources come from ``t.anchor_sources`` and the log's side from ``t.scan["anchors"]`` (one pass)."""
    from loopx.kernel.storage import anchors

    gathered = t.anchor_sources(remotes=remotes)
    if gathered["error"]:
        raise RuntimeError(gathered["error"])
    if not any(found for _c, _w, found, _f in gathered["sources"]):
        return list(gathered["extra"])
    store = t.store()
    facts = t.scan["anchors"]
    out: list[dict] = []
    extra = list(gathered["extra"])
    for cid, where, found, fix in gathered["sources"]:
        out.extend(r for r in extra if r["id"] == cid)
        if not found:
            continue
        bad = anchors.compare(store, found, facts=facts)
        if bad is None:
            out.append(result(cid, "ok", f"{len(found)} anchor(s) in {where} match the log"))
        elif bad["kind"] == "repaired":
            # a human's repair, named by a store.repaired record; shown, but not a failure (a forged
            # store.repaired record would show here too: docs/security.md)
            out.append(result(cid, "ok", f"{len(found)} anchor(s) in {where} match the log, except {bad['stream']} "
                                         f"seq {bad['seq']}: {bad['reason']}", None))
        else:
            out.append(result(cid, "error", f"{bad['kind']} at {bad['stream']} seq {bad['seq']} (against {where}): "
                                            f"{bad['reason']}", fix))
    shown = {r["id"] for r in out}
    out.extend(r for r in extra if r["id"] not in shown)
    return out
