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
MAX_SKEW = 3600.0  # seconds two machines' clocks may disagree; past it a lease is over (loopx.sync.skew)


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


# ------------------------------------------------------------------ identity (agent + machine)
# An agent is its actor string *and* the node (clone) it runs on: `--agent claude-code` on two
# clones is two holders. Records carry the node that wrote them; the fold copies it into claims
# (``claim["node"]``) and runs (``run["node"]``); the store puts this clone's node id in
# ``state["meta"]["self_node"]`` when it hands out a state. A record without a node (store format 1)
# or of the legacy node (the records a migration carried over from format 1) is this clone's.


def local(state: dict, node: str | None) -> bool:
    """True when ``node`` (the writer of a claim or run) is this clone: None, the legacy node, or
    ``state["meta"]["self_node"]``. A state without ``self_node`` (a clone that never wrote) owns
    only records without a node."""
    if node is None:
        return True
    if node == state["meta"].get("self_node"):
        return True
    return bool(((state.get("nodes") or {}).get(node) or {}).get("legacy"))


def holds(state: dict, claim: dict | None, actor: str) -> bool:
    """True when ``claim`` (a todo's ``claim``) is ``actor``'s on this machine."""
    return bool(claim and claim.get("holder") == actor and not claim.get("remote")
                and local(state, claim.get("node")))


def runs_here(state: dict, run: dict, actor: str) -> bool:
    """True when ``run`` was started by ``actor`` on this machine (only there can it be resumed,
    renewed by the agent or finished by it)."""
    return run.get("agent") == actor and local(state, run.get("node"))


def same_holder(claim: dict | None, run: dict) -> bool:
    """True when ``claim`` was made by the agent and machine of ``run`` (a claim or run without a
    node, store format 1, matches by the agent alone)."""
    if not claim or claim.get("holder") != run.get("agent"):
        return False
    a, b = claim.get("node"), run.get("node")
    return a is None or b is None or a == b


def at(state: dict, node: str | None) -> str | None:
    """The machine to show next to an agent (``claude-code@<this>``): its label when records of more
    than one machine are in the store, else None (a single-machine store shows what it always did)."""
    if node is None or not several(state):
        return None
    return label(labels(state), node)


def who(state: dict, actor: str | None, node: str | None) -> str | None:
    """``actor`` as people read it: ``agent:claude-code@laptop`` when records of more than one
    machine are in the store (``several``), else ``actor`` unchanged."""
    if not actor or node is None or not several(state):
        return actor
    return f"{actor}@{label(labels(state), node)}"
