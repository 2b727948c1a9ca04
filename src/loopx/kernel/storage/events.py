"""Every event type loopx writes, declared once.

``EVENTS`` maps an event type (``noun.past_tense``) to ``(note, fields)``; each field is
``(name, types, flags, note)``:

- ``types``: the Python types the value may have (``S`` str, ``N`` int or float, ``L`` list, ``D``
  dict, ``B`` bool, ``+ OPT`` also null), or ``ANY`` (not checked). A record whose field breaks its
  types is a bad line on read (counted, reported by doctor, quarantined by ``doctor --fix``) and a
  write that would break them is refused before a byte is written (``check``), so the reducers
  never meet it.
- ``flags``: ``REQ`` (the reducer looks the record up by it: it must be there), ``COPY`` (the
  reducer copies the value as it is, ``copied``), ``STRS`` (a list of strings).
- ``note``: what docs/file-format.md says about it (the event table is generated from here by
  docs/gen_events.py, and a test checks the doc is current).

``fold.FOLD_VERSION`` is derived from this table (``digest``), so a new field, type or flag makes
every cached snapshot and checkpoint stale and rebuilt, with nobody having to remember a bump.

Adding a field to an event is one row here, plus the reducer logic when it is more than a copy.
Everything here is constants: importing the module costs next to nothing (should-run reads it).
"""

from __future__ import annotations

S, N, L, D, B = (str,), (int, float), (list,), (dict,), (bool,)
OPT = (type(None),)
ANY: tuple = ()
REQ, COPY, STRS = 1, 2, 4
EVIDENCE_STREAM = ("evidence.added",)  # written to evidence.jsonl; every other type to events.jsonl
NOTICE_TYPES = ("gate.opened", "goal.completed", "decision.recorded")  # what a person may hear about

_NOTE = (("note", ANY, 0, "why, in a human's words"),)
_TODO = ("todo_id", S, REQ, "")
_GATE = ("gate_id", S, REQ, "")
_RUN = ("run_id", S, REQ, "")
_WATCH = ("watch_id", S, REQ, "")
_TODO_CLOSE = (_TODO, ("note", ANY, 0, ""), ("reason", ANY, 0, "used when note is absent"),
               ("gate_id", ANY, 0, "the rejected gate, when a gate rejection blocked it"),
               ("gate_note", ANY, 0, ""), ("gate_kind", ANY, 0, ""))
_WATCH_RESULT = (_WATCH, ("outcome", S, COPY, "`pass`/`fail`/`error`"), ("matched", ANY, COPY, ""),
                 ("hash", ANY, COPY, ""), ("exit_code", ANY, COPY, ""), ("excerpt", ANY, COPY, ""),
                 ("failing", ANY, 0, ""), ("error", ANY, 0, "when the check could not run"))
_REPORT = (("usage", D + OPT, COPY, "tokens, cost_usd, …"), ("changes", D + OPT, COPY, "files the turn changed"),
           ("host", ANY, COPY, ""), ("permission_mode", ANY, COPY, ""), ("wall_time", ANY, COPY, "seconds"),
           ("setup_error", D + OPT, COPY, "{reason, message, …}: a host that could not work (docs/usage.md) or "
            "`verify_broken` {command, exit_code, timed_out, path, resolved, interpreter, cwd}"),
           ("guard", ANY, COPY, "what the pre-tool guard refused"))

EVENTS: dict[str, tuple[str, tuple]] = {
    # ------------------------------------------------------------------ goals
    "goal.started": ("", (
        ("objective", S, 0, ""), ("done_when", ANY, 0, ""), ("verify", ANY, 0, "the goal's check command"),
        ("priority", N + OPT, 0, ""), ("scope", D + OPT, 0, "{allow, deny, protect}"),
        ("quota", D + OPT, 0, "{slots, window, cooldown (seconds), stall_after}"))),
    "goal.updated": ("any of its fields", (
        ("objective", S, COPY, ""), ("done_when", ANY, COPY, ""), ("verify", ANY, COPY, ""),
        ("priority", N + OPT, COPY, ""), ("host", ANY, COPY, ""), ("permission_mode", ANY, COPY, ""),
        ("max_parallel", N + OPT, COPY, ""), ("shared", ANY, COPY, "a bool: `goal update --shared`"),
        ("tz", ANY, COPY, "the goal's time zone"))),
    "goal.paused": ("", _NOTE),
    "goal.resumed": ("", _NOTE),
    "goal.completed": ("", _NOTE),
    "goal.stopped": ("", _NOTE),
    "scope.set": ("any of the three lists", (
        ("allow", L, COPY | STRS, ""), ("deny", L, COPY | STRS, ""), ("protect", L, COPY | STRS, ""))),
    "quota.set": ("any of its fields", (
        ("slots", N, COPY, ""), ("window", N, COPY, "seconds"), ("cooldown", N, COPY, "seconds"),
        ("stall_after", N, COPY, ""), ("max_usd", ANY, COPY, ""), ("max_tokens", ANY, COPY, ""),
        ("host_reserve", ANY, COPY, ""), ("use_leftover", ANY, COPY, ""),
        ("turns", ANY, COPY, "turns per window; null: twice the slots"))),
    "guard.set": ("the pre-tool guard's configuration", (
        ("rules", ANY, 0, ""), ("branches", ANY, 0, "protected branches"), ("defaults", ANY, 0, "the built-in rules on/off"))),
    # ------------------------------------------------------------------ todos
    "todo.added": ("", (
        _TODO, ("title", S, 0, ""), ("priority", N + OPT, 0, ""), ("detail", ANY, 0, ""),
        ("depends_on", L + OPT, STRS, "todo ids"),
        ("depends_on_goals", L + OPT, STRS, "goal ids that must be done first"),
        ("acceptance", ANY, 0, ""), ("verify", ANY, 0, ""), ("every", N + OPT, 0, "seconds: recurring"),
        ("watch", S + OPT, 0, "the watch that opened it"))),
    "todo.updated": ("the changed fields", (
        _TODO, ("title", S, COPY, ""), ("detail", ANY, COPY, ""), ("priority", N + OPT, COPY, ""),
        ("depends_on", L + OPT, COPY | STRS, ""), ("depends_on_goals", L + OPT, COPY | STRS, ""),
        ("acceptance", ANY, COPY, ""), ("verify", ANY, COPY, ""))),
    "todo.claimed": ("", (_TODO, ("holder", S, 0, ""), ("lease_until", S, 0, ""))),
    "todo.renewed": ("", (_TODO, ("lease_until", S, 0, ""))),
    "todo.released": ("", _TODO_CLOSE),
    "todo.blocked": ("", _TODO_CLOSE),
    "todo.reopened": ("", _TODO_CLOSE),
    "todo.archived": ("", _TODO_CLOSE),
    "todo.completed": ("", (
        _TODO, ("evidence", L + OPT, STRS, "evidence ids"), ("note", ANY, 0, ""),
        ("forced", ANY, 0, "a human's `--force-unverified`"), ("unverified", ANY, 0, "why, with forced"))),
    # ------------------------------------------------------------------ gates
    "gate.opened": ("", (
        _GATE, ("kind", S, 0, ""), ("question", S, 0, ""),
        ("blocks", L + OPT, STRS, "todo ids; empty = the whole goal"), ("context", ANY, 0, ""), ("run", ANY, 0, ""))),
    "gate.approved": ("", (
        _GATE, ("note", ANY, 0, ""), ("channel", ANY, 0, "`terminal`, `confirm-flag`, `dashboard`"),
        ("user_agent", ANY, 0, ""), ("standing", ANY, 0, "true: covers every later action of its kind"),
        ("signature", ANY, 0, "{principal, sig, fingerprint}: an `ssh-keygen -Y sign` signature, "
                              "namespace `loopx-gate`"))),
    "gate.rejected": ("", (_GATE, ("note", ANY, 0, ""), ("channel", ANY, 0, ""), ("user_agent", ANY, 0, ""))),
    "gate.reserved": ("in a shared goal, this single-use approval is reserved (through the remote) for that run on "
                      "that clone; only that clone's guard counts it, while the run is open", (
        _GATE, ("run_id", S, REQ, ""), ("node", S, 0, ""), ("host", ANY, 0, ""))),
    "gate.used": ("the guard let one protected action through on this approval (a single-use approval then stops "
                  "covering)", (_GATE, ("command", ANY, 0, ""), ("standing", ANY, 0, ""))),
    # ------------------------------------------------------------------ evidence, agents, machines
    "evidence.added": ("", (
        ("evidence_id", S, REQ, ""), ("kind", S + OPT, 0, ""), ("summary", S + OPT, 0, "the first 300 characters are kept"),
        ("todo", ANY, 0, ""), ("run", ANY, 0, ""), ("command", ANY, 0, ""), ("exit_code", ANY, 0, ""),
        ("excerpt", ANY, 0, ""), ("sha256", ANY, 0, ""), ("bytes", ANY, 0, ""), ("blob", ANY, 0, ""),
        ("commit", ANY, 0, ""), ("files", ANY, 0, ""),
        ("after_run", ANY, 0, "a goal-level verify: the goal's last run then"))),
    "agent.registered": ("", (("name", S, REQ, ""), ("kind", S, 0, ""))),
    "node.registered": ("see \"Machine names\" below", (
        ("host", S, 0, "the machine name of the node that wrote it: `LOOPX_HOST`, else the host name"),)),
    "handoff.recorded": ("", (("from", S + OPT, 0, ""), ("to", S + OPT, 0, ""), ("todo", ANY, 0, ""),
                              ("note", ANY, 0, ""))),
    # ------------------------------------------------------------------ runs and quota (docs/loop.md)
    "run.started": ("", (
        _RUN, ("agent", S + OPT, 0, ""), ("lease_until", S + OPT, 0, ""), ("todo_id", S + OPT, REQ, "null: a planning turn"),
        ("fence", ANY, 0, ""), ("fingerprint", ANY, 0, ""), ("mode", ANY, 0, ""),
        ("scope_start", ANY, 0, "{head, dirty}"))),
    "run.renewed": ("", (_RUN, ("lease_until", S + OPT, 0, ""))),
    "run.attached": ("the process group `loopx run` started for the agent", (
        _RUN, ("pid", N, COPY, ""), ("pgid", N + OPT, COPY, ""), ("host", S + OPT, COPY, ""),
        ("boot_id", ANY, COPY, ""), ("start", ANY, COPY, ""))),
    "run.handed_over": ("a human moved the open run, and its todo's claim, to this node (`loopx turn handover`); only "
                        "there is it resumed and finished from then on", (_RUN, ("node", S, 0, ""))),
    "run.finished": ("", (
        _RUN, ("result", S + OPT, 0, ""), ("verified", ANY, 0, ""), ("evidence", L + OPT, STRS, ""),
        ("fingerprint", ANY, 0, ""), ("note", ANY, 0, ""),
        ("out_of_scope", ANY, 0, "[paths]: files the turn changed outside the goal's scope"),
        ("reaped", ANY, 0, "closed by the reaper: its lease ended"), *_REPORT)),
    "run.reported": ("what a run cost and changed, reported after it finished", (_RUN, *_REPORT)),
    "quota.spent": ("", (("run_id", S + OPT, REQ, "null: not a run's"), ("slots", N, 0, ""))),
    "decision.recorded": ("the should-run decision, written only when it changes", ()),
    # ------------------------------------------------------------------ the store
    "store.repaired": ("", (("file", ANY, 0, ""), ("bytes", ANY, 0, ""), ("offset", ANY, 0, ""),
                            ("quarantine", ANY, 0, ""))),
    "store.migrated": ("written once, by the write that migrated the store", (
        ("from", ANY, 0, ""), ("to", ANY, 0, ""), ("records", ANY, 0, ""), ("legacy_node", ANY, 0, ""),
        ("backup", ANY, 0, ""))),
    "project.noted": ("a note on the project; changes no state", ()),
    # ------------------------------------------------------------------ watches
    "watch.added": ("", (
        _WATCH, ("name", S, REQ, ""), ("every", N, 0, "seconds"), ("check", S, 0, ""),
        ("on", S, 0, "`change`/`fail`/`pass`/`match`"), ("match", S + OPT, 0, ""), ("todo", S + OPT, 0, ""),
        ("timeout", N + OPT, 0, "seconds"))),
    "watch.paused": ("", (_WATCH,)),
    "watch.resumed": ("", (_WATCH,)),
    "watch.removed": ("", (_WATCH,)),
    "watch.checked": ("written only when the recorded result changes", _WATCH_RESULT),
    "watch.fired": ("written with the `todo.added` it opened", (
        *_WATCH_RESULT, ("todo_id", ANY, 0, ""), ("trigger", ANY, 0, ""))),
    # ------------------------------------------------------------------ notifications
    "notify.delivered": ("", (
        ("event_id", S, REQ, "the notified event"), ("channel", S, REQ, "`webhook`/`desktop`"),
        ("attempt", ANY, 0, ""), ("detail", ANY, 0, ""))),
    "notify.failed": ("", (
        ("event_id", S, REQ, "the notified event"), ("channel", S, REQ, "`webhook`/`desktop`"),
        ("attempt", ANY, 0, ""), ("detail", ANY, 0, ""), ("error", ANY, 0, ""), ("retry_at", ANY, 0, ""))),
    # ------------------------------------------------------------------ experiments (docs/experiments.md)
    "experiment.started": ("", (
        ("metric", S, 0, ""), ("direction", S, 0, "`max`/`min`"), ("measure", S, 0, ""), ("guard", ANY, 0, ""),
        ("holdout", ANY, 0, ""), ("metric_pattern", ANY, 0, ""), ("min_delta", ANY, 0, ""), ("plateau", ANY, 0, ""),
        ("trial_timeout", ANY, 0, "seconds"), ("protect", ANY, 0, "[paths]"), ("holdout_paths", ANY, 0, "[paths]"),
        ("worktree", S, 0, ""), ("branch", S, 0, "`loopx/exp/<goal>`"), ("base_branch", ANY, 0, ""),
        ("base_commit", ANY, 0, ""))),
    "trial.hypothesized": ("what the agent says; decides nothing", (
        ("run_id", S + OPT, 0, ""), ("hypothesis", S, 0, ""), ("claims", ANY, 0, "{metric: number}"))),
    "trial.recorded": ("", (
        ("trial_id", S, REQ, ""), ("run", ANY, COPY, ""), ("hypothesis", ANY, COPY, ""), ("agent", ANY, COPY, ""),
        ("commit", ANY, COPY, "also `refs/loopx/trials/<trial_id>`"),
        ("parent", ANY, COPY, "the frontier commit it was decided against"), ("parent_value", ANY, COPY, ""),
        ("metrics", D + OPT, 0, "{name: number}"), ("value", ANY, COPY, ""), ("delta", ANY, COPY, ""),
        ("decision", S, 0, "`keep`/`discard`/`crash`/`stale`"), ("reason", ANY, COPY, ""),
        ("guard", ANY, COPY, "{exit_code, passed, timed_out}"), ("duration", ANY, COPY, "seconds"),
        ("tokens", ANY, COPY, ""), ("cost_usd", ANY, COPY, ""), ("claims", ANY, 0, ""),
        ("tail", ANY, COPY, "the output's last lines of a crash"), ("stale_of", ANY, COPY, ""),
        ("baseline", ANY, 0, ""), ("remeasured", ANY, 0, "replayed on a newer frontier"))),
    "trial.applied": ("", (("trial_id", S, REQ, ""), ("onto", ANY, 0, "the folder `loopx trial apply` applied it in"))),
    "experiment.continued": ("a human answered the plateau", (("note", S + OPT, 0, ""),)),
    "experiment.promoted": ("", (
        ("trial_id", S, REQ, ""), ("gate_id", S, REQ, ""), ("commit", ANY, 0, ""), ("into", ANY, 0, "branch"),
        ("how", ANY, 0, "`fast-forward`/`merge`/`branch`"),
        ("holdout", ANY, 0, "{exit_code, timed_out, metrics, value, duration}"))),
}


def copied(event_type: str) -> tuple[str, ...]:
    """The fields of ``event_type`` its reducer copies as they are (flag ``COPY``), in table order.
    Raises KeyError for a type the table does not declare."""
    return tuple(f[0] for f in EVENTS[event_type][1] if f[2] & COPY)


def plans(table: dict | None = None) -> dict[str, tuple]:
    """{type: ((name, types, required, strs), ...)} of the fields ``check`` looks at (typed or
    required), built once by fold at import: checking runs on every line read."""
    out = {}
    for etype, (_, fields) in (EVENTS if table is None else table).items():
        plan = tuple((name, types, bool(flags & REQ), bool(flags & STRS))
                     for name, types, flags, _ in fields if types or flags & (REQ | STRS))
        if plan:
            out[etype] = plan
    return out


def digest(table: dict | None = None) -> str:
    """8 hex digits that change whenever a type, field, field type or flag of ``table`` (default
    ``EVENTS``) does: what the reducers depend on, without the notes (a reworded note rebuilds
    nothing). Stable across processes and Python versions."""
    table = EVENTS if table is None else table
    parts = []
    for etype in sorted(table):
        parts.append(etype + ":" + ",".join(f"{n}/{'|'.join(t.__name__ for t in types)}/{flags}"
                                            for n, types, flags, _ in table[etype][1]))
    return crc(";".join(parts))


def crc(text: str) -> str:
    """The CRC-32 of ``text`` (UTF-8) as 8 hex digits."""
    import zlib

    return f"{zlib.crc32(text.encode()):08x}"


def _kind(types: tuple) -> str:
    names = {str: "string", int: "number", list: "list", dict: "object", bool: "bool", type(None): "null"}
    return " or ".join(dict.fromkeys(names[t] for t in types if t is not float))


def markdown(table: dict | None = None) -> str:
    """The event table of docs/file-format.md: per type, its fields (`` `name` type, required — note``)
    and then the type's note."""
    rows = ["| type | data |", "|---|---|"]
    for etype, (note, fields) in (EVENTS if table is None else table).items():
        cells = []
        for name, types, flags, fnote in fields:
            kind = ", ".join(b for b in (_kind(types) + (" (strings)" if flags & STRS else "") if types else "",
                                         "required" if flags & REQ else "") if b)
            cells.append(" ".join(b for b in (f"`{name}`", kind, f"— {fnote}" if fnote else "") if b))
        where = " (evidence.jsonl)" if etype in EVIDENCE_STREAM else ""
        text = "; ".join(cells)
        if note:
            text = f"{text}. {note[0].upper()}{note[1:]}" if cells else note[0].upper() + note[1:]
        rows.append(f"| `{etype}`{where} | {text or '—'} |")
    return "\n".join(rows)
