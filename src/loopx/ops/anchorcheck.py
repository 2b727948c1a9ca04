"""``doctor``'s anchor check: the log against the chain heads anchored in the data folder, on the git
ref ``refs/loopx/anchors`` and on each git remote's copy of that ref and of the per-node refs
``refs/loopx/node-anchors/<node>`` (``git ls-remote``, bounded by a timeout; ``doctor`` only, never a
hook). Every node's anchored heads are compared with the log; another machine's view of a node
whose newest records have not reached this clone yet is not a truncation. See
kernel/storage/anchors.py and docs/security.md."""

from __future__ import annotations

from loopx.kernel.storage import anchors, gitcli, layout, machines
from loopx.ops.check import result

REMOTE_TIMEOUT = 15.0
REMOTE_REF = "refs/loopx/remote-anchors/"
REMOTE_NODE_REFS = "refs/loopx/remote-node-anchors/"  # + <remote>/<node>: each node's pushed anchors


def _remotes(cwd: str) -> list[str]:
    try:
        return [r for r in anchors.git(cwd, "remote").split() if r]
    except Exception:  # noqa: BLE001
        return []


def fetch_remote(cwd: str, remote: str) -> str | None:
    """Fetch ``remote``'s anchor ref into ``refs/loopx/remote-anchors/<remote>`` (a ref of loopx's own;
    no branch, index or working tree is touched). Returns its commit, or None when the remote has
    none. Raises RuntimeError/OSError/TimeoutExpired when the remote cannot be read."""
    listed = anchors.git(cwd, "ls-remote", remote, anchors.REF, timeout=REMOTE_TIMEOUT)
    if not listed:
        return None
    anchors.git(cwd, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote,
                f"+{anchors.REF}:{REMOTE_REF}{remote}", timeout=REMOTE_TIMEOUT)
    return listed.split()[0]


def fetch_node_refs(cwd: str, remote: str) -> dict[str, str]:
    """Fetch ``remote``'s per-node anchor refs (``refs/loopx/node-anchors/*``, pushed when several
    machines write the store) into ``refs/loopx/remote-node-anchors/<remote>/*``. Returns
    {node: commit} ({} when there are none). Raises like ``fetch_remote``."""
    listed = anchors.git(cwd, "ls-remote", remote, anchors.NODE_REFS + "*", timeout=REMOTE_TIMEOUT)
    refs = {}
    for row in listed.splitlines():
        parts = row.split()
        if len(parts) == 2 and parts[1].startswith(anchors.NODE_REFS):
            refs[parts[1][len(anchors.NODE_REFS):]] = parts[0]
    if refs:
        anchors.git(cwd, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote,
                    f"+{anchors.NODE_REFS}*:{REMOTE_NODE_REFS}{remote}/*", timeout=REMOTE_TIMEOUT)
    return refs


def restore_hint(t) -> str:
    """Where a damaged ``.loopx/`` can be compared: git history only when git tracks the log."""
    tracked = getattr(t, "_log_tracked", None)
    if tracked is None:
        tracked = False
        if t.project_dir and gitcli.git_dir(t.project_dir) is not None:
            try:
                proc = gitcli.run(t.project_dir, "ls-files", "--", f"{layout.DIRNAME}/", timeout=10, text=True)
                tracked = proc.returncode == 0 and bool(proc.stdout.strip())
            except gitcli.GitUnavailable:
                pass
        t._log_tracked = tracked
    if tracked:
        return "compare .loopx/ with git (`git log -p .loopx/`) and the backups"
    return "compare .loopx/ with your backups (git does not track .loopx/ here, so it has no history of it)"


def check_anchors(t, *, remotes: bool = True) -> list[dict]:
    """One result per anchor source that exists: ``store.anchors.file``, ``store.anchors.git`` and
    ``store.anchors.remote.<name>`` (plus ``store.anchors.rewound.<name>`` when the local ref lacks
    what the remote holds); none when nothing was ever anchored."""
    store = t.store()
    if store.format_number() < 2:
        return []
    pid = store.format_info().get("project_id")
    if not pid:
        return []
    out: list[dict] = []
    here = store.node_id()

    def judge(cid: str, where: str, found: list[dict], fix: str, strict: bool = False) -> None:
        # strict only for this clone's own git ref; the data folder and remotes may hold anchors of
        # other machines, whose view of other nodes can be ahead of this clone (not synced yet)
        if not found:
            return
        bad = anchors.compare(store, found, strict=strict, here=here, facts=t.scan["anchors"])
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

    judge("store.anchors.file", anchors.data_path(pid), anchors.read_file(pid),
          f"{restore_hint(t)}; the records from that seq on cannot be trusted")
    cwd = anchors.git_dir_of(store.project_dir)
    if cwd is None:
        return out
    cwd = store.project_dir
    try:
        tip, found = anchors.read_ref(cwd, anchors.REF, pid)
    except Exception as exc:  # noqa: BLE001
        out.append(result("store.anchors.git", "warning", f"the git anchors cannot be read: {exc}", None))
        tip, found = None, []
    judge("store.anchors.git", anchors.REF, found, "compare .loopx/ with the anchored heads (`git log -p "
          f"{anchors.REF}`)", strict=True)
    if not remotes:
        return out
    for remote in _remotes(cwd):
        _check_remote(store, judge, out, cwd, remote, tip, pid, here)
    return out


def _check_remote(store, judge, out: list[dict], cwd: str, remote: str, tip: str | None, pid: str, here: str) -> None:
    """check_anchors' results for one remote: its anchor ref (and whether the local one was rewound)
    and the per-node anchors of the machines that push there."""
    cid = f"store.anchors.remote.{remote}"
    try:
        rtip = fetch_remote(cwd, remote)
    except Exception as exc:  # noqa: BLE001 - an unreachable remote is a warning, not a failure
        out.append(result(cid, "warning", f"the anchors on remote {remote} cannot be read: "
                                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                          None))
        return
    fix = "the pushed anchor is the one the agent cannot rewrite: treat the local log from that seq on as tampered"
    if rtip is not None:
        _t, rfound = anchors.read_ref(cwd, REMOTE_REF + remote, pid)
        judge(cid, f"{anchors.REF} on remote {remote}", rfound, fix)
        writer = rfound[-1].get("node") if rfound else None
        mine = writer == here if writer else not _several(store)  # another machine's anchors are not ours
        if mine:
            _rewound(out, cwd, remote, rtip, tip)
    try:
        nodes = fetch_node_refs(cwd, remote)
    except Exception as exc:  # noqa: BLE001
        out.append(result(f"store.anchors.nodes.{remote}", "warning", f"the per-node anchors on remote {remote} "
                          f"cannot be read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", None))
        return
    if not nodes:
        return
    found_all: list[dict] = []
    ours = set(store.load(view="live")["meta"].get("chain") or {})
    for node in sorted(nodes):
        found_all += _node_anchors(cwd, f"{REMOTE_NODE_REFS}{remote}/{node}", ours)
    judge(f"store.anchors.nodes.{remote}", f"{anchors.NODE_REFS}* ({len(nodes)} node(s)) on remote {remote}",
          sorted(found_all, key=lambda a: a.get("at") or ""), fix)
    if here in nodes:
        _rewound(out, cwd, remote, nodes[here], tip)


def _node_anchors(cwd: str, ref: str, ours: set) -> list[dict]:
    """The anchors on ``ref`` that speak of this store: each clone of a synced project has its own
    project id (the anchor's file name), so every project file at the ref's tip is read and the
    anchors naming at least one node whose records this store holds are kept."""
    out: list[dict] = []
    for name in anchors.git(cwd, "ls-tree", "--name-only", ref).splitlines():
        if name.endswith(".json"):
            _t, found = anchors.read_ref(cwd, ref, name[:-len(".json")])
            out += [a for a in found if set(a["heads"]) & ours]
    return out


def _several(store) -> bool:
    return machines.several(store.load(view="live"))


def _rewound(out: list, cwd: str, remote: str, rtip: str, tip: str | None) -> None:
    """An error when the local anchor ref does not contain ``rtip``, this clone's anchors on ``remote``."""
    if not tip or not anchors.is_ancestor(cwd, rtip, tip):
        out.append(result(f"store.anchors.rewound.{remote}", "error",
                          f"the local {anchors.REF} does not contain the anchors pushed to {remote} "
                          f"(commit {rtip[:12]}): the local anchors were rewound or replaced",
                          f"restore it: git update-ref {anchors.REF} {rtip}"))
