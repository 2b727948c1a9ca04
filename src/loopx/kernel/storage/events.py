"""Every event type loopx writes, declared once.

``EVENTS`` maps an event type (``noun.past_tense``) to ``(note, fields)``; each field is
``(name, types, flags, note)``:

- ``types``: the types the value may have, as letters (``S`` str, ``N`` int or float, ``L`` list,
  ``D`` dict, ``B`` bool, ``+ OPT`` also null), or ``ANY`` (not checked). A record whose field breaks its
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
The table is plain constants (strings, ints, tuples) so that importing it, and deriving the
checks and the digest from it, costs next to nothing on the hot path (should-run folds with it):
the checks and copies are derived on first use.
"""

from __future__ import annotations

S, N, L, D, B = "s", "n", "l", "d", "b"
OPT = "?"
ANY = ""
_PYTYPES = {"s": (str,), "n": (int, float), "l": (list,), "d": (dict,), "b": (bool,), "?": (type(None),)}
REQ, COPY, STRS = 1, 2, 4
EVIDENCE_STREAM = ("evidence.added",)  # written to evidence.jsonl; every other type to events.jsonl
NOTICE_TYPES = ("gate.opened", "goal.completed", "decision.recorded")  # what a person may hear about

_NOTE = (("note", "", 0, "why, in a human's words"),)
_TODO = ("todo_id", "s", REQ, "")
_GATE = ("gate_id", "s", REQ, "")
_RUN = ("run_id", "s", REQ, "")
_WATCH = ("watch_id", "s", REQ, "")
_TODO_CLOSE = (_TODO, ("note", "", 0, ""), ("reason", "", 0, "used when note is absent"),
               ("gate_id", "", 0, "the rejected gate, when a gate rejection blocked it"),
               ("gate_note", "", 0, ""), ("gate_kind", "", 0, ""))
_WATCH_RESULT = (_WATCH, ("outcome", "s", COPY, "`pass`/`fail`/`error`"), ("matched", "", COPY, ""),
                 ("hash", "", COPY, ""), ("exit_code", "", COPY, ""), ("excerpt", "", COPY, ""),
                 ("failing", "", 0, ""), ("error", "", 0, "when the check could not run"))
_REPORT = (("usage", "d?", COPY, "tokens, cost_usd, …"), ("changes", "d?", COPY, "files the turn changed"),
           ("host", "", COPY, ""), ("permission_mode", "", COPY, ""), ("wall_time", "", COPY, "seconds"),
           ("setup_error", "d?", COPY, "{reason, message, …}: a host that could not work (docs/usage.md) or "
            "`verify_broken` {command, exit_code, timed_out, path, resolved, interpreter, cwd}"),
           ("guard", "", COPY, "what the pre-tool guard refused"),
           ("unjudged", "b?", COPY, "true: the turn was cut short before it could be judged (interrupted: Ctrl-C, "
            "SIGTERM; or its agent command could not start: exit 126/127); the value rule's `no_change` "
            "never skips on it"))

EVENTS: dict[str, tuple[str, tuple]] = {
    # ------------------------------------------------------------------ goals
    "goal.started": ("", (
        ("objective", "s", 0, ""), ("done_when", "", 0, ""), ("verify", "", 0, "the goal's check command"),
        ("priority", "n?", 0, ""), ("scope", "d?", 0, "{allow, deny, protect}"),
        ("quota", "d?", 0, "{slots, window, cooldown (seconds), stall_after}"))),
    "goal.updated": ("any of its fields", (
        ("objective", "s", COPY, ""), ("done_when", "", COPY, ""), ("verify", "", COPY, ""),
        ("priority", "n?", COPY, ""), ("host", "", COPY, ""), ("permission_mode", "", COPY, ""),
        ("max_parallel", "n?", COPY, ""), ("shared", "", COPY, "a bool: `goal update --shared`"),
        ("tz", "", COPY, "the goal's time zone"))),
    "goal.paused": ("", _NOTE),
    "goal.resumed": ("", _NOTE),
    "goal.completed": ("", _NOTE),
    "goal.stopped": ("", _NOTE),
    "scope.set": ("any of the three lists", (
        ("allow", "l", COPY | STRS, ""), ("deny", "l", COPY | STRS, ""), ("protect", "l", COPY | STRS, ""))),
    "quota.set": ("any of its fields", (
        ("slots", "n", COPY, ""), ("window", "n", COPY, "seconds"), ("cooldown", "n", COPY, "seconds"),
        ("stall_after", "n", COPY, ""), ("max_usd", "", COPY, ""), ("max_tokens", "", COPY, ""),
        ("host_reserve", "", COPY, ""), ("use_leftover", "", COPY, ""),
        ("turns", "", COPY, "turns per window; null: twice the slots"))),
    "guard.set": ("the pre-tool guard's configuration", (
        ("rules", "", 0, ""), ("branches", "", 0, "protected branches"), ("defaults", "", 0, "the built-in rules on/off"))),
    # ------------------------------------------------------------------ todos
    "todo.added": ("", (
        _TODO, ("title", "s", 0, ""), ("priority", "n?", 0, ""), ("detail", "", 0, ""),
        ("depends_on", "l?", STRS, "todo ids"),
        ("depends_on_goals", "l?", STRS, "goal ids that must be done first"),
        ("acceptance", "", 0, ""), ("verify", "", 0, ""), ("every", "n?", 0, "seconds: recurring"),
        ("watch", "s?", 0, "the watch that opened it"))),
    "todo.updated": ("the changed fields", (
        _TODO, ("title", "s", COPY, ""), ("detail", "", COPY, ""), ("priority", "n?", COPY, ""),
        ("depends_on", "l?", COPY | STRS, ""), ("depends_on_goals", "l?", COPY | STRS, ""),
        ("acceptance", "", COPY, ""), ("verify", "", COPY, ""))),
    "todo.claimed": ("", (_TODO, ("holder", "s", 0, ""), ("lease_until", "s", 0, ""))),
    "todo.renewed": ("", (_TODO, ("lease_until", "s", 0, ""))),
    "todo.released": ("", _TODO_CLOSE),
    "todo.blocked": ("", _TODO_CLOSE),
    "todo.reopened": ("", _TODO_CLOSE),
    "todo.archived": ("", _TODO_CLOSE),
    "todo.completed": ("", (
        _TODO, ("evidence", "l?", STRS, "evidence ids"), ("note", "", 0, ""),
        ("forced", "", 0, "a human's `--force-unverified`"), ("unverified", "", 0, "why, with forced"))),
    # ------------------------------------------------------------------ gates
    "gate.opened": ("", (
        _GATE, ("kind", "s", 0, ""), ("question", "s", 0, ""),
        ("blocks", "l?", STRS, "todo ids; empty = the whole goal"), ("context", "", 0, ""), ("run", "", 0, ""))),
    "gate.approved": ("", (
        _GATE, ("note", "", 0, ""), ("channel", "", 0, "`terminal`, `confirm-flag`, `dashboard`"),
        ("user_agent", "", 0, ""), ("standing", "", 0, "true: covers every later action of its kind"),
        ("signature", "", 0, "{principal, sig, fingerprint}: an `ssh-keygen -Y sign` signature, "
                              "namespace `loopx-gate`"))),
    "gate.rejected": ("", (_GATE, ("note", "", 0, ""), ("channel", "", 0, ""), ("user_agent", "", 0, ""))),
    "gate.reserved": ("in a shared goal, this single-use approval is reserved (through the remote) for that run on "
                      "that clone; only that clone's guard counts it, while the run is open", (
        _GATE, ("run_id", "s", REQ, ""), ("node", "s", 0, ""), ("host", "", 0, ""))),
    "gate.used": ("the guard let one protected action through on this approval (a single-use approval then stops "
                  "covering)", (_GATE, ("command", "", 0, ""), ("standing", "", 0, ""))),
    # ------------------------------------------------------------------ evidence, agents, machines
    "evidence.added": ("", (
        ("evidence_id", "s", REQ, ""), ("kind", "s?", 0, ""), ("summary", "s?", 0, "the first 300 characters are kept"),
        ("todo", "", 0, ""), ("run", "", 0, ""), ("command", "", 0, ""), ("exit_code", "", 0, ""),
        ("excerpt", "", 0, ""), ("sha256", "", 0, ""), ("bytes", "", 0, ""), ("blob", "", 0, ""),
        ("commit", "", 0, ""), ("files", "", 0, ""),
        ("after_run", "", 0, "a goal-level verify: the goal's last run then"))),
    "agent.registered": ("", (("name", "s", REQ, ""), ("kind", "s", 0, ""))),
    "node.registered": ("see \"Machine names\" below", (
        ("host", "s", 0, "the machine name of the node that wrote it: `LOOPX_HOST`, else the host name"),)),
    "handoff.recorded": ("", (("from", "s?", 0, ""), ("to", "s?", 0, ""), ("todo", "", 0, ""),
                              ("note", "", 0, ""))),
    # ------------------------------------------------------------------ runs and quota (docs/loop.md)
    "run.started": ("", (
        _RUN, ("agent", "s?", 0, ""), ("lease_until", "s?", 0, ""), ("todo_id", "s?", REQ, "null: a planning turn"),
        ("fence", "", 0, ""), ("fingerprint", "", 0, ""), ("mode", "", 0, ""),
        ("scope_start", "", 0, "{head, dirty}"))),
    "run.renewed": ("", (_RUN, ("lease_until", "s?", 0, ""))),
    "run.attached": ("the process group `loopx run` started for the agent", (
        _RUN, ("pid", "n", COPY, ""), ("pgid", "n?", COPY, ""), ("host", "s?", COPY, ""),
        ("boot_id", "", COPY, ""), ("start", "", COPY, ""))),
    "run.handed_over": ("a human moved the open run, and its todo's claim, to this node (`loopx turn handover`); only "
                        "there is it resumed and finished from then on", (_RUN, ("node", "s", 0, ""))),
    "run.finished": ("", (
        _RUN, ("result", "s?", 0, ""), ("verified", "", 0, ""), ("evidence", "l?", STRS, ""),
        ("fingerprint", "", 0, ""), ("note", "", 0, ""),
        ("out_of_scope", "", 0, "[paths]: files the turn changed outside the goal's scope"),
        ("reaped", "", 0, "closed by the reaper: its lease ended"), *_REPORT)),
    "run.reported": ("what a run cost and changed, reported after it finished", (_RUN, *_REPORT)),
    "quota.spent": ("", (("run_id", "s?", REQ, "null: not a run's"), ("slots", "n", 0, ""))),
    "decision.recorded": ("the should-run decision with all its fields, written only when it changes", (
        ("decision", "", 0, "run, wait, stop, …"), ("reason", "", 0, "docs/loop.md's reason table"),
        ("message", "", 0, ""))),
    # ------------------------------------------------------------------ the store
    "store.repaired": ("", (("file", "", 0, ""), ("bytes", "", 0, ""), ("offset", "", 0, ""),
                            ("quarantine", "", 0, ""))),
    "store.migrated": ("written once, by the write that migrated the store", (
        ("from", "", 0, ""), ("to", "", 0, ""), ("records", "", 0, ""), ("legacy_node", "", 0, ""),
        ("backup", "", 0, ""))),
    "project.noted": ("a note on the project; changes no state", ()),
    # ------------------------------------------------------------------ watches
    "watch.added": ("", (
        _WATCH, ("name", "s", REQ, ""), ("every", "n", 0, "seconds"), ("check", "s", 0, ""),
        ("on", "s", 0, "`change`/`fail`/`pass`/`match`"), ("match", "s?", 0, ""), ("todo", "s?", 0, ""),
        ("timeout", "n?", 0, "seconds"))),
    "watch.paused": ("", (_WATCH,)),
    "watch.resumed": ("", (_WATCH,)),
    "watch.removed": ("", (_WATCH,)),
    "watch.checked": ("written only when the recorded result changes", _WATCH_RESULT),
    "watch.fired": ("written with the `todo.added` it opened", (
        *_WATCH_RESULT, ("todo_id", "", 0, ""), ("trigger", "", 0, ""))),
    # ------------------------------------------------------------------ notifications
    "notify.delivered": ("", (
        ("event_id", "s", REQ, "the notified event"), ("channel", "s", REQ, "`webhook`/`desktop`"),
        ("attempt", "", 0, ""), ("detail", "", 0, ""))),
    "notify.failed": ("", (
        ("event_id", "s", REQ, "the notified event"), ("channel", "s", REQ, "`webhook`/`desktop`"),
        ("attempt", "", 0, ""), ("detail", "", 0, ""), ("error", "", 0, ""), ("retry_at", "", 0, ""))),
    # ------------------------------------------------------------------ experiments (docs/experiments.md)
    "experiment.started": ("", (
        ("metric", "s", 0, ""), ("direction", "s", 0, "`max`/`min`"), ("measure", "s", 0, ""), ("guard", "", 0, ""),
        ("holdout", "", 0, ""), ("metric_pattern", "", 0, ""), ("min_delta", "", 0, ""), ("plateau", "", 0, ""),
        ("trial_timeout", "", 0, "seconds"), ("protect", "", 0, "[paths]"), ("holdout_paths", "", 0, "[paths]"),
        ("worktree", "s", 0, ""), ("branch", "s", 0, "`loopx/exp/<goal>`"), ("base_branch", "", 0, ""),
        ("base_commit", "", 0, ""))),
    "trial.hypothesized": ("what the agent says; decides nothing", (
        ("run_id", "s?", 0, ""), ("hypothesis", "s", 0, ""), ("claims", "", 0, "{metric: number}"))),
    "trial.recorded": ("", (
        ("trial_id", "s", REQ, ""), ("run", "", COPY, ""), ("hypothesis", "", COPY, ""), ("agent", "", COPY, ""),
        ("commit", "", COPY, "also `refs/loopx/trials/<trial_id>`"),
        ("parent", "", COPY, "the frontier commit it was decided against"), ("parent_value", "", COPY, ""),
        ("metrics", "d?", 0, "{name: number}"), ("value", "", COPY, ""), ("delta", "", COPY, ""),
        ("decision", "s", 0, "`keep`/`discard`/`crash`/`stale`"), ("reason", "", COPY, ""),
        ("guard", "", COPY, "{exit_code, passed, timed_out}"), ("duration", "", COPY, "seconds"),
        ("tokens", "", COPY, ""), ("cost_usd", "", COPY, ""), ("claims", "", 0, ""),
        ("tail", "", COPY, "the output's last lines of a crash"), ("stale_of", "", COPY, ""),
        ("baseline", "", 0, ""), ("remeasured", "", 0, "replayed on a newer frontier"))),
    "trial.applied": ("", (("trial_id", "s", REQ, ""), ("onto", "", 0, "the folder `loopx trial apply` applied it in"))),
    "experiment.continued": ("a human answered the plateau", (("note", "s?", 0, ""),)),
    "experiment.updated": ("a human changed the measuring (`goal update --measure ...`); only the fields given", (
        ("measure", "s", 0, "only before a baseline was measured"), ("metric_pattern", "s?", 0, "null: the default readers"),
        ("trial_timeout", "n", 0, "seconds"), ("guard", "s?", 0, "null: no guard"), ("min_delta", "n", 0, ""))),
    "experiment.promoted": ("", (
        ("trial_id", "s", REQ, ""), ("gate_id", "s", REQ, ""), ("commit", "", 0, ""), ("into", "", 0, "branch"),
        ("how", "", 0, "`fast-forward`/`merge`/`branch`"),
        ("holdout", "", 0, "{exit_code, timed_out, metrics, value, duration}"))),
}


_COPIED: dict[str, tuple[str, ...]] = {}  # copied() of the table, type by type as the reducers ask


def copied(event_type: str) -> tuple[str, ...]:
    """The fields of ``event_type`` its reducer copies as they are (flag ``COPY``), in table order.
    Raises KeyError for a type the table does not declare."""
    hit = _COPIED.get(event_type)
    if hit is None:
        hit = _COPIED[event_type] = tuple(f[0] for f in EVENTS[event_type][1] if f[2] & COPY)
    return hit


def pytypes(types: str) -> tuple[type, ...]:
    """The Python types of a field's ``types`` letters (``"s?"`` -> ``(str, NoneType)``)."""
    return tuple(t for letter in types for t in _PYTYPES[letter])


def plan(event_type: str, table: dict | None = None) -> tuple:
    """``((name, types, required, strs), ...)``: the fields of ``event_type`` that ``fold.check_data``
    looks at (typed, required or lists of strings); ``()`` for a type ``table`` (default ``EVENTS``)
    does not declare or one without such fields. ``fold`` builds it once per type a process checks
    (a command checks a few types; building all of them cost a hot command about 1% of its start)."""
    row = (EVENTS if table is None else table).get(event_type)
    if row is None:
        return ()
    return tuple((name, pytypes(types), bool(flags & REQ), bool(flags & STRS))
                 for name, types, flags, _ in row[1] if types or flags & (REQ | STRS))


def plans(table: dict | None = None) -> dict[str, tuple]:
    """{type: ``plan(type)``} of every type that has a non-empty plan (``ops.segscan`` checks
    whole segments of every type)."""
    out = {}
    for etype in EVENTS if table is None else table:
        got = plan(etype, table)
        if got:
            out[etype] = got
    return out


def digest(table: dict | None = None) -> str:
    """8 hex digits that change whenever ``table`` (default ``EVENTS``) does: a type, field, field
    type or flag (what the reducers depend on), and also a row moved or a note reworded (a rebuild
    of the caches costs little, and one C-level pass over the constants costs far less than leaving
    the notes out). Stable across processes and Python versions: marshal format 2 has no
    references, only the values."""
    import marshal

    return crc(marshal.dumps(EVENTS if table is None else table, 2))


def crc(data: bytes) -> str:
    """The CRC-32 of ``data`` as 8 hex digits."""
    import zlib

    return f"{zlib.crc32(data):08x}"


def _kind(types: str) -> str:
    names = {"s": "string", "n": "number", "l": "list", "d": "object", "b": "bool", "?": "null"}
    return " or ".join(names[letter] for letter in types)


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
