"""Which machine wrote a record: the human-readable name of each node (store format 2).

A node (one clone, ``.loopx/node``) names its machine once with a ``node.registered`` record
``{"host": name}`` (``LOOPX_HOST``, else the host name). It is an ordinary record of that node, so it
travels wherever the node's records go: ``loopx sync`` carries it in the node's ref, a union merge
of a committed ``.loopx/`` carries it in the log, and it is part of the node's hash chain. The fold
keeps ``state["nodes"] = {node: {"host", "registered"}}`` (the newest registration wins).

It is written only where more than one machine is in play, so single-machine stores, their
``seq`` numbers and their output do not change: by ``loopx sync`` (``register``, before the node's
records are pushed) and by any write to a store that holds records of another node
(``registration``, which the store's transaction calls).

``labels(state)`` maps every node that wrote a record to what is shown: its machine name, ``legacy``
for the records a format-1 store had before its migration, or the node id when the node never
named its machine (a clone that has not written since it met another node). ``several(state)`` is
True when records of more than one machine are in the store (the legacy node not counted): only
then do history, the review packet and the dashboard show the machine.
"""

from __future__ import annotations

LEGACY = "legacy"


def host_name() -> str:
    """This machine's name: ``LOOPX_HOST``, else ``socket.gethostname()`` (``unknown`` if empty)."""
    from loopx.config import env

    name = env("LOOPX_HOST")
    if not name:
        import socket

        name = socket.gethostname()
    return (name or "unknown").strip()[:200] or "unknown"


def _others(state: dict, node: str | None, legacy: str | None = None) -> bool:
    """True when the store holds records of a node other than ``node`` and the legacy node(s)."""
    chain = state["meta"].get("chain") or {}
    if not chain or (len(chain) == 1 and node in chain):
        return False
    nodes = state.get("nodes") or {}
    return any(n != node and n != legacy and not (nodes.get(n) or {}).get("legacy") for n in chain)


def registration(state: dict, node: str | None, legacy: str | None = None):
    """The data of the ``node.registered`` record a write must add for ``node`` (this clone; None when it has no
    id yet), or None. ``legacy``: the legacy node of a migration this write made (its
    ``store.migrated`` record is not folded yet). Cheap when nothing is due: a few dict lookups."""
    if node is not None and (state.get("nodes") or {}).get(node, {}).get("host"):
        return None
    if not _others(state, node, legacy):
        return None
    return {"host": host_name()}


def register(store) -> str:
    """Name this clone's machine in the store unless it already carries that name (one transaction
    when it does not: it also creates the node id and migrates a format-1 store). Returns the node
    id. Raises what ``Store.transact`` raises."""
    Draft = store.Draft  # the store's own class (this module is imported by the store)
    host = host_name()
    node = store.node_id()
    if node is not None and ((store.load(view="live").get("nodes") or {}).get(node) or {}).get("host") == host:
        return node

    def plan(state, now):
        mine = store.node_id(create=True)
        if ((state.get("nodes") or {}).get(mine) or {}).get("host") == host:
            return []
        return [Draft("node.registered", None, {"host": host})]

    store.transact(plan, actor="loopx:sync")
    return store.node_id(create=True)


def several(state: dict) -> bool:
    """True when records of more than one machine are in the store (the legacy node not counted)."""
    chain = state["meta"].get("chain") or {}
    if len(chain) < 2:
        return False
    nodes = state.get("nodes") or {}
    return sum(1 for n in chain if not (nodes.get(n) or {}).get("legacy")) > 1


def labels(state: dict) -> dict:
    """{node: what to show}: the machine name, ``legacy``, or the node id when unnamed."""
    nodes = state.get("nodes") or {}
    out = {}
    for n in set(state["meta"].get("chain") or {}) | set(nodes):
        info = nodes.get(n) or {}
        out[n] = LEGACY if info.get("legacy") else (info.get("host") or n)
    return out


def label(labels_: dict, node: str | None) -> str | None:
    """The label of ``node`` (None for a record without one: format 1, before the migration)."""
    if node is None:
        return None
    return labels_.get(node) or node
