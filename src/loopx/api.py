"""A small, typed Python API for custom runners: the same kernel functions the CLI calls.

Typical loop (see ``examples/custom-runner/``)::

    from loopx import api

    conn = api.connect("path/to/project", agent="my-runner")
    decision = api.should_run(conn)
    if decision.run:
        turn = api.next_turn(conn)
        ...  # give turn.packet_text to your agent, let it work
        ev = api.add_evidence(conn, turn.run_id, kind="test", summary="pytest: 12 passed", exit_code=0)
        done = api.finish_turn(conn, turn.run_id, "progress", evidence=[ev.evidence_id], verify=True)
        if done.verified:
            api.spend_slot(conn, turn.run_id)

Every function raises ``loopx.errors.LoopxError`` subclasses on bad input or state (``UsageError``
for bad values and unknown ids, ``Conflict`` for lost races, ``StateError`` for an unusable store)
with the exit code and ``code`` the CLI reports and structured ``details`` (``{"field": "lease"}``,
``{"todo": "t-1a2b", "holder": "agent:a", ...}``); their message and hint name the argument, not
the CLI's flag, and suggest no ``loopx`` command. Results are frozen dataclasses; ``raw`` keeps the
kernel's dict.
Importing this module imports nothing from the kernel until a function is called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Connection", "Decision", "Turn", "Evidence", "TurnResult", "Receipt", "Gate", "Status", "connect",
           "should_run", "next_turn", "add_evidence", "finish_turn", "spend_slot", "open_gate", "status"]


@dataclass(frozen=True)
class Connection:
    """A connected project: ``project`` (its directory), ``agent`` (name or None for a human),
    ``actor`` (``agent:<name>`` or ``human:<login>``), ``created`` (connect made ``.loopx/``)."""

    project: str
    agent: str | None
    actor: str
    created: bool = False
    store: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Decision:
    """should-run's answer. ``run`` is True only for ``decision == "run"``."""

    decision: str
    reason: str
    message: str
    goal_id: str | None
    todo_id: str | None
    mode: str | None
    next_check_at: str | None
    scheduler_hint: int | None
    gate_id: str | None
    question: str | None
    budget: dict | None
    raw: dict = field(repr=False, compare=False)

    @property
    def run(self) -> bool:
        return self.decision == "run"


@dataclass(frozen=True)
class Turn:
    """A started turn (``started`` False when should-run said no: see ``decision``)."""

    started: bool
    decision: Decision
    goal_id: str | None
    todo_id: str | None
    run_id: str | None
    lease_until: str | None
    fence: int | None
    mode: str | None
    packet: dict | None = field(repr=False)
    packet_text: str | None = field(repr=False)


@dataclass(frozen=True)
class Evidence:
    evidence_id: str
    goal_id: str
    sha256: str | None
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class TurnResult:
    run_id: str
    goal_id: str
    todo_id: str | None
    result: str
    verified: bool
    evidence: tuple[str, ...]
    todo_status: str | None
    repeat: bool
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Receipt:
    """A spend-slot answer: ``spent`` False with ``reason`` (run_open, not_verified,
    budget_exhausted) when nothing was charged; ``repeat`` True for a second call on one run."""

    spent: bool
    repeat: bool
    run_id: str
    goal_id: str
    slots: int
    reason: str | None
    message: str | None
    next_check_at: str | None
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Gate:
    gate_id: str
    goal_id: str
    kind: str
    code: str
    question: str
    blocks: tuple[str, ...]


@dataclass(frozen=True)
class Status:
    """``goals``: one summary dict per goal (see ``loopx.kernel.read.status``); ``next``: the next step."""

    goals: tuple[dict, ...]
    next: str
    raw: dict = field(repr=False, compare=False)


def connect(project: str | None = None, *, agent: str | None = None, create: bool = True) -> Connection:
    """Open (``create``: create or attach, like ``loopx connect``) the project's ``.loopx/``.
    ``project`` defaults to the nearest connected directory above the current one (or the
    current directory when creating). Raises NotConnected when ``create`` is False and none exists."""
    import os

    from loopx.kernel.storage import ids, registry
    from loopx.kernel.storage.store import Store

    if agent is not None:
        ids.check_agent_name(agent)
    created = False
    if create:
        store, created = Store.create(project or os.getcwd())
        registry.add(store.project_dir, store.format_info().get("project_id", ""))
    else:
        store = Store.open(project)
    from loopx.kernel.storage import actors

    actor = actors.of(agent)
    return Connection(store.project_dir, agent, actor, created, store)


def _decision(d: dict) -> Decision:
    return Decision(d.get("decision", "error"), d.get("reason", ""), d.get("message", ""), d.get("goal_id"),
                    d.get("todo_id"), d.get("mode"), d.get("next_check_at"), d.get("scheduler_hint"),
                    d.get("gate_id"), d.get("question"), d.get("budget"), d)


def should_run(conn: Connection, goal_id: str | None = None, *, record: bool = True) -> Decision:
    """Whether the next turn is worth running for this agent (docs/architecture.md#the-governed-loop)."""
    from loopx.kernel.policy import decide

    return _decision(decide.should_run(conn.store, goal_id=goal_id, agent=conn.agent, record=record, actor=conn.actor))


def next_turn(conn: Connection, goal_id: str | None = None, *, lease: str | None = None) -> Turn:
    """Claim the next todo, open a run and build the packet (nothing is claimed unless should-run says run)."""
    from loopx.kernel.policy import turn

    t = turn.next_turn(conn.store, conn.actor, goal_id=goal_id, lease=lease)
    return Turn(t["started"], _decision(t["decision"]), t.get("goal_id"), t.get("todo_id"), t.get("run_id"),
                t.get("lease_until"), t.get("fence"), t.get("mode"), t.get("packet"), t.get("packet_text"))


def add_evidence(conn: Connection, run_id: str | None, *, kind: str, summary: str, goal_id: str | None = None,
                 todo: str | None = None, command: str | None = None, exit_code: int | None = None,
                 output: str | bytes | None = None, commit: str | None = None) -> Evidence:
    """Record evidence for a run (its goal is the run's goal unless ``goal_id`` is given)."""
    from loopx.kernel.policy import turn
    from loopx.kernel.write import evidence

    if run_id and goal_id is None:
        run = turn.load_run(conn.store, run_id)[1]  # the live view holds an open run
        goal_id, todo = run["goal"], todo or run.get("todo")
    e = evidence.add(conn.store, conn.actor, goal_id, kind=kind, summary=summary, todo=todo, run=run_id,
                     command=command, exit_code=exit_code, output=output, commit=commit)
    return Evidence(e["evidence_id"], e["goal_id"], e.get("sha256"), e)  # add() resolves the goal


def finish_turn(conn: Connection, run_id: str, result: str, *, evidence=(), verify: bool = False,
                note: str | None = None) -> TurnResult:
    """Close a run with ``result`` (progress, completion, no_progress, failed, blocked); ``verify``
    runs the goal's verify command first and records it."""
    from loopx.kernel.policy import turn

    r = turn.finish(conn.store, conn.actor, run_id, result, evidence=tuple(evidence), verify=verify, note=note)
    return TurnResult(r["run_id"], r["goal_id"], r.get("todo_id"), r["result"], bool(r.get("verified")),
                      tuple(r.get("evidence") or ()), r.get("todo_status"), bool(r.get("repeat")), r)


def spend_slot(conn: Connection, run_id: str, slots: int = 1) -> Receipt:
    """Charge the budget for a finished, verified run; once per run."""
    from loopx.sync import shared

    r = shared.spend_slot(conn.store, conn.actor, run_id, slots)
    return Receipt(bool(r["spent"]), bool(r["repeat"]), r["run_id"], r["goal_id"], r["slots"], r.get("reason"),
                   r.get("message"), r.get("next_check_at"), r)


def open_gate(conn: Connection, kind: str, question: str, *, goal_id: str | None = None, blocks=(),
              context: str | None = None, run: str | None = None) -> Gate:
    """Ask a human (``kind``: merge, release, production-write, sensitive-data, route-change, spend,
    custom). Only a human can approve it, through the terminal or the dashboard."""
    from loopx.kernel.policy import turn
    from loopx.kernel.write import gates

    if run and goal_id is None:
        goal_id = turn.load_run(conn.store, run)[1]["goal"]
    g = gates.open_gate(conn.store, conn.actor, goal_id, kind=kind, question=question, blocks=list(blocks),
                        context=context, run=run)
    return Gate(g["gate_id"], g["goal_id"], g["kind"], g["code"], g["question"], tuple(g["blocks"]))


def status(conn: Connection, goal_id: str | None = None) -> Status:
    """The one-screen summary behind ``loopx status`` as data."""
    from loopx.kernel.read import status as st
    from loopx.kernel.storage import clock

    s = conn.store.read(lambda state: st.summary(state, clock.now_iso(), goal_id))
    return Status(tuple(s["goals"]), s["next"], s)
