"""``loopx sync``: exchange the store with the project's git remote through ``refs/loopx/*``."""

from __future__ import annotations

from loopx.commands import add
from loopx.kernel.read import queries
from loopx.kernel.storage import clock
from loopx.sync import shared
from loopx.sync import transport as gs


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=sync_run, render=render, command="sync",
            example="loopx sync --remote origin",
            description="Push the records this clone wrote since its last sync to refs/loopx/nodes/<node> on the "
                        "remote, fetch the other nodes' new records and the shared ledgers, fold the union, and "
                        "push the spends and lease renewals of shared goals made while the remote did not answer. "
                        "Never touches the working tree or a branch. --status reports the state hash and what is "
                        "only tentative (claims, spends, renewals) without using the network.")
    p.add_argument("--remote", metavar="NAME", help="the git remote (default origin, or $LOOPX_SYNC_REMOTE)")
    p.add_argument("--status", action="store_true",
                   help="local report only: node, state hash, tentative claims, spends and renewals")


def sync_run(ctx, remote=None, status=False):
    store = ctx.store()
    if status:
        return sync_status(store, remote)
    git = gs.project_git(store, remote)
    ex = shared.sync_all(store, git)
    out = {**ex, "remote": git.remote, "state_hash": gs.state_hash(store), "synced_at": clock.now_iso()}
    out["tentative"] = tentative(store, git, ex["node"])
    return out


def tentative(store, git, node: str) -> list[dict]:
    """Live claims in this clone's state that the local copy of refs/loopx/claims does not hold:
    made offline or without ``--sync``; they count only locally until claimed through the remote."""
    _, claims = gs.read_claims(git)
    state = store.load(view="live")
    now = clock.now_iso()
    out = []
    for t in state["todos"].values():
        if not queries.claim_live(t, now):
            continue
        c = claims.get(t["id"])
        if not (isinstance(c, dict) and str(c.get("until", "")) > now):
            out.append({"todo_id": t["id"], "holder": t["claim"]["holder"], "goal_id": t.get("goal")})
    return out


def sync_status(store, remote=None) -> dict:
    git = gs.project_git(store, remote)
    node = store.node_id()
    last = gs.read_status(store) or {}
    listing = git.out("for-each-ref", "--format=%(refname)", git.fetched)

    pending = shared.tentative_view(store)
    return {"node": node, "remote": git.remote, "state_hash": gs.state_hash(store),
            "last_sync": last.get("at"), "nodes_known": len([r for r in listing.splitlines() if r]),
            "tentative": tentative(store, git, node) if node else [],
            "tentative_spends": pending["spends"], "tentative_renewals": pending["renewals"]}


def render(d: dict) -> str:
    lines = []
    if "pushed" in d:
        lines.append(f"synced with {d['remote']}: pushed {d['pushed']} records of node {d['node']}, "
                     f"imported {d['imported']} from {d['nodes'] - 1} other node(s)")
        f = d.get("flushed") or {}
        if f.get("spends") or f.get("renewals"):
            lines.append(f"pushed what was done offline: {f['spends']} spend(s), {f['renewals']} lease renewal(s)")
        for tid in f.get("lost") or []:
            lines.append(f"lost: the lease on {tid} was taken on another machine while this one was offline")
    else:
        lines.append(f"node {d['node']} (remote {d['remote']}), last sync {d.get('last_sync') or 'never'}, "
                     f"{d['nodes_known']} node ref(s) known")
    lines.append(f"state hash {d['state_hash']}")
    for t in d.get("tentative") or []:
        lines.append(f"tentative: {t['todo_id']} claimed by {t['holder']} here only (not pushed: "
                     "`loopx next --sync` claims through the remote)")
    for rid in d.get("tentative_spends") or []:
        lines.append(f"tentative: the slot spent on {rid} is charged here only (pushed at the next sync)")
    for tid in d.get("tentative_renewals") or []:
        lines.append(f"tentative: the lease on {tid} was renewed here only (pushed at the next sync)")
    return "\n".join(lines)
