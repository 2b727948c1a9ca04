"""Reading a trace archive (``loopx trace export``): load it, verify it, and lay out its timeline.

Used by ``loopx trace verify`` (src/loopx/ops/trace.py) and ``loopx dashboard --trace`` (which
browses an archive without any project). Nothing here writes anything.

Rows of ``records.jsonl`` (src/loopx/ops/trace.py has the archive's layout):

- ``{"stream", "line"}``: a record of the goal, verbatim; its CRC and SHA-256 are recomputed;
- ``{"stream", "line", "hash"}`` (only in a ``--redact-more`` archive): a record of the goal whose
  private values were replaced after export; ``hash`` is the SHA-256 of the original line, and the
  chain is followed over that hash, since the redacted text can no longer be hashed to it;
- ``{"stream", "stub": {"seq", "node", "hlc", "prev", "hash"}}``: another goal's record as its chain
  fields and hash only.
"""

from __future__ import annotations

import json
import tarfile

from loopx.errors import UsageError
from loopx.kernel.storage import chain
from loopx.kernel.storage.codec import decode

MAX_MEMBER = 1 << 30


def load(path: str) -> dict:
    """``{"path", "files": {member: bytes}, "manifest": dict}``. Raises UsageError (code
    ``bad_trace``) when ``path`` is not a readable trace archive."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            files = {}
            for m in tar.getmembers():
                member = tar.extractfile(m) if m.isfile() and m.size < MAX_MEMBER else None
                if member is not None:  # a regular file (extractfile gives None for anything else)
                    files[m.name] = member.read()
        manifest = json.loads(files["manifest.json"])
        if not isinstance(manifest, dict):
            raise ValueError("manifest.json is not an object")
    except (OSError, tarfile.TarError, KeyError, ValueError, EOFError) as exc:
        raise UsageError(f"{path!r} is not a readable loopx trace: {exc}", "pass a file a trace export wrote",
                         code="bad_trace", details={"path": path}) from None
    return {"path": path, "files": files, "manifest": manifest}


def rows(archive: dict):
    """Yield ``(n, row, rec | None, problem | None)`` for each line of records.jsonl: ``rec`` is the
    decoded record of a full or redacted row (None for a stub), ``problem`` says why a row is unusable."""
    text = archive["files"].get("records.jsonl", b"").decode("utf-8", "replace")
    for n, raw in enumerate(text.splitlines(), 1):
        try:
            row = json.loads(raw)
            if not isinstance(row, dict) or not isinstance(row.get("stream"), str):
                raise ValueError("not a row")
            rec = decode(row["line"].encode("utf-8")) if "line" in row else None  # checks the CRC
            if rec is None and not isinstance(row.get("stub"), dict):
                raise ValueError("neither a line nor a stub")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            yield n, None, None, f"record {n} of records.jsonl is unreadable: {exc}"
            continue
        yield n, row, rec, None


def verify(archive: dict) -> dict:
    """Check an archive end to end. Returns ``{"ok": bool, "goal_id", "records", "stubs",
    "redacted", "blobs", "redacted_blobs", "anchors", "redact_more": bool, "problems": [str]}``.

    Recomputed: member hashes against the manifest, each full line's CRC and SHA-256, every node's
    chain (each record's ``prev`` equals the hash of the node's record before it, clocks move
    forward), the heads, every anchor against the records, each blob's SHA-256. In a redacted row
    only the chain over the original hash is checked, not the text (docs/security.md)."""
    files, manifest = archive["files"], archive["manifest"]
    problems = _check_members(files, manifest)
    more = manifest.get("redact_more")
    if more is not None:
        before = more.get("verified_before_redaction") or {}
        if before.get("ok") is not True:
            problems.append("the exporter's check before redaction did not hold: "
                            + "; ".join(map(str, before.get("problems") or ["no check recorded"]))[:500])
    gid = manifest.get("goal_id")
    walk = _ChainWalk(gid, more is not None, problems)
    for n, row, rec, problem in rows(archive):
        if problem:
            problems.append(problem)
        else:
            walk.add(n, row, rec)
    _check_heads(manifest, walk, problems)
    redacted_blobs = set((more or {}).get("blobs") or [])
    _check_blobs(files, walk.blobs, redacted_blobs, problems)
    return {"ok": not problems, "goal_id": gid, "records": walk.full, "stubs": walk.stubs,
            "redacted": walk.redacted, "blobs": len(walk.blobs),
            "redacted_blobs": len(redacted_blobs & walk.blobs),
            "anchors": len(manifest.get("anchors") or []), "redact_more": more is not None, "problems": problems}


def _check_members(files: dict, manifest: dict) -> list[str]:
    """Problems with the archive's members against ``manifest.json``'s SHA-256 list."""
    problems: list[str] = []
    for name, digest in (manifest.get("files") or {}).items():
        if name not in files:
            problems.append(f"{name} is missing from the archive")
        elif chain.sha256(files[name]).hexdigest() != digest:
            problems.append(f"{name} does not match its SHA-256 in manifest.json")
    extra = set(files) - set(manifest.get("files") or {}) - {"manifest.json"}
    problems += [f"{name} is in the archive but not in manifest.json" for name in sorted(extra)]
    return problems


class _ChainWalk:
    """``verify``'s pass over records.jsonl: each node's chain and clock, counts, blobs cited."""

    def __init__(self, gid, redacted_ok: bool, problems: list[str]) -> None:
        self.gid, self.redacted_ok, self.problems = gid, redacted_ok, problems
        self.last: dict[str, tuple] = {}   # node -> (hash, hlc) of its record before
        self.at: dict[tuple, str] = {}     # (node, stream, seq) -> hash
        self.full = self.stubs = self.redacted = 0
        self.blobs: set[str] = set()

    def _fields(self, n: int, row: dict, rec: dict | None, stream: str) -> tuple:
        """(node, hlc, prev, seq, hash) of one row, counting it. Raises KeyError, TypeError."""
        if rec is None:
            s = row["stub"]
            fields = s["node"], s["hlc"], s["prev"], s["seq"], s["hash"]
            self.stubs += 1
            return fields
        seq = rec.get("seq")
        if "hash" in row:
            if not self.redacted_ok:
                self.problems.append(f"record {n} ({stream} seq {seq}) carries a hash instead of its "
                                     "text, but the archive does not say it was redacted")
            h = str(row["hash"])
            self.redacted += 1
        else:
            h = chain.line_hash(row["line"].encode("utf-8"))
        self.full += 1
        if rec.get("goal") != self.gid:
            self.problems.append(f"record {n} ({stream} seq {seq}) is not of goal {self.gid}")
        blob = (rec.get("data") or {}).get("blob")
        if isinstance(blob, str) and blob.startswith("blobs/"):
            self.blobs.add(blob.rsplit("/", 1)[-1])
        return rec.get("node"), rec.get("hlc"), rec.get("prev"), seq, h

    def add(self, n: int, row: dict, rec: dict | None) -> None:
        stream = row["stream"]
        try:
            node, hlc, prev, seq, h = self._fields(n, row, rec, stream)
        except (KeyError, TypeError) as exc:
            self.problems.append(f"record {n} of records.jsonl is unreadable: {exc}")
            return
        if node is None:
            return
        before = self.last.get(node)
        if (before[0] if before else None) != prev:
            self.problems.append(f"the chain of node {node} breaks at {stream} seq {seq} (record {n}): its prev "
                                 "does not match the record before it")
        try:
            forward = not before or hlc > before[1]
        except TypeError:
            forward = False
        if not forward:
            self.problems.append(f"the clock of node {node} does not move forward at {stream} seq {seq}")
        self.last[node] = (h, hlc)
        self.at[(node, stream, seq)] = h


def _check_heads(manifest: dict, walk: _ChainWalk, problems: list[str]) -> None:
    """The manifest's chain heads and every anchor's heads against the records walked."""
    at, last = walk.at, walk.last
    for node, head in (manifest.get("heads") or {}).items():
        if at.get((node, head.get("stream"), head.get("seq"))) != head.get("hash") or last.get(node, ("",))[0] != head.get("hash"):
            problems.append(f"the chain head of node {node} ({head.get('stream')} seq {head.get('seq')}) does not "
                            "match the records")
    for a in manifest.get("anchors") or []:
        for node, head in (a.get("heads") or {}).items():
            if at.get((node, head.get("stream"), head.get("seq"))) != head.get("hash"):
                problems.append(f"the anchor of {a.get('at')} names {head.get('stream')} seq {head.get('seq')} of "
                                f"node {node}, which the records do not hold with that hash")


def _check_blobs(files: dict, needed: set[str], redacted: set[str], problems: list[str]) -> None:
    """Each evidence blob the records cite is present and (unless redacted) matches its SHA-256."""
    for sha in sorted(needed):
        data = files.get(f"blobs/{sha}")
        if data is None:
            problems.append(f"evidence blob {sha} is missing")
        elif sha not in redacted and chain.sha256(data).hexdigest() != sha:
            problems.append(f"evidence blob {sha} does not match its SHA-256")


# ---------------------------------------------------------------------- the timeline
KINDS = {"goal": "goal", "todo": "todo", "run": "turn", "evidence": "evidence", "gate": "gate", "decision": "decision"}


def timeline(archive: dict) -> dict:
    """The goal's records in chain order as a timeline: ``{"goal": {id, objective, done_when,
    status}, "entries": [{n, ts, type, kind (goal|todo|turn|evidence|gate|decision|other), actor, text,
    redacted: bool, ...ids}], "gates": [{id, kind, question, status, decided_by, channel, note,
    used}], "counts": {kind: n}}``. Unreadable rows are skipped (``verify`` reports them)."""
    gid = archive["manifest"].get("goal_id")
    goal = {"id": gid, "objective": None, "done_when": None, "status": None}
    titles: dict[str, str] = {}
    gates: dict[str, dict] = {}
    entries: list[dict] = []
    counts: dict[str, int] = {}
    for n, row, rec, _problem in rows(archive):
        if rec is None or rec.get("goal") != gid:
            continue
        typ = str(rec.get("type") or "")
        data = rec.get("data") if isinstance(rec.get("data"), dict) else {}
        kind = KINDS.get(typ.split(".", 1)[0], "other")
        text, extra = _describe(typ, data, titles, gates, goal)
        entries.append({"n": n, "ts": rec.get("ts"), "type": typ, "kind": kind, "actor": rec.get("actor"),
                        "text": text, "redacted": "hash" in row, **extra})
        counts[kind] = counts.get(kind, 0) + 1
        if typ == "gate.opened" and data.get("gate_id"):
            gates[data["gate_id"]] = {"id": data["gate_id"], "kind": data.get("kind"), "question": data.get("question"),
                                      "status": "pending", "decided_by": None, "channel": None, "note": None,
                                      "used": 0, "opened": rec.get("ts"), "decided": None}
        elif typ in ("gate.approved", "gate.rejected") and data.get("gate_id") in gates:
            gates[data["gate_id"]].update(status=typ.split(".")[1], decided_by=rec.get("actor"),
                                          channel=data.get("channel"), note=data.get("note"), decided=rec.get("ts"))
        elif typ == "gate.used" and data.get("gate_id") in gates:
            gates[data["gate_id"]]["used"] += 1
        elif typ.startswith("goal.") and typ != "goal.updated":
            goal["status"] = {"started": "active", "completed": "done", "stopped": "stopped", "paused": "paused",
                              "resumed": "active"}.get(typ.split(".", 1)[1], goal["status"])
    return {"goal": goal, "entries": entries, "gates": list(gates.values()), "counts": counts}


def _describe(typ: str, data: dict, titles: dict, gates: dict, goal: dict) -> tuple[str, dict]:
    """One line for a timeline entry, and the ids it concerns."""
    def s(key):
        v = data.get(key)
        return "" if v is None else str(v)

    tid = data.get("todo_id")
    if typ == "goal.started":
        goal.update(objective=data.get("objective"), done_when=data.get("done_when"))
        return f"goal started: {s('objective')} (done when: {s('done_when')})", {}
    if typ == "todo.added" and tid:
        titles[tid] = s("title")
        return f"todo added: {s('title')}", {"todo": tid}
    if typ.startswith("todo.") and tid:
        return f"todo {typ.split('.', 1)[1]}: {titles.get(tid, tid)}" + (f" ({s('note')})" if data.get("note") else ""), \
            {"todo": tid}
    if typ == "run.started":
        on = f" on {titles.get(tid, tid)}" if tid else " (planning)"
        return f"turn {s('run_id')} started by {s('agent') or '?'}{on}", {"run": data.get("run_id")}
    if typ == "run.finished":
        verified = "" if data.get("verified") is None else (", verified" if data.get("verified") else ", not verified")
        return (f"turn {s('run_id')} finished: {s('result') or '?'}{verified}" + (f": {s('note')}" if data.get("note") else ""),
                {"run": data.get("run_id")})
    if typ == "evidence.added":
        code = f" (exit {data['exit_code']})" if data.get("exit_code") is not None else ""
        return f"{s('kind') or 'evidence'}: {s('summary')}{code}", {"evidence": data.get("evidence_id"),
                                                                    "run": data.get("run")}
    if typ == "gate.opened":
        return f"gate {s('gate_id')} opened ({s('kind')}): {s('question')}", {"gate": data.get("gate_id")}
    if typ in ("gate.approved", "gate.rejected"):
        g = gates.get(data.get("gate_id"), {})
        note = f": {s('note')}" if data.get("note") else ""
        return (f"gate {s('gate_id')} {typ.split('.')[1]} via {s('channel') or '?'}"
                f" ({g.get('question') or g.get('kind') or ''}){note}", {"gate": data.get("gate_id")})
    if typ == "gate.used":
        return f"gate {s('gate_id')} used by: {s('command')}", {"gate": data.get("gate_id")}
    if typ == "decision.recorded":
        return (f"should-run decided {s('decision') or '?'}" + (f" ({s('reason')})" if data.get("reason") else "")
                + (f": {s('message')}" if data.get("message") else "")), {}
    if typ.startswith("goal."):
        return f"goal {typ.split('.', 1)[1]}" + (f": {s('note') or s('reason')}" if data.get("note") or data.get("reason")
                                                  else ""), {}
    return typ, {}
