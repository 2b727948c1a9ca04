"""Evidence records (``evidence.added`` in ``evidence.jsonl``).

Output is redacted, then kept as a bounded excerpt (head and tail, at most EXCERPT characters) plus
the sha256 and size in bytes of the whole redacted output; bodies larger than the excerpt go to
``blobs/`` (content addressed; above MAX_BLOB bytes the middle is cut with a marker, keeping the
first and last MAX_BLOB/2 bytes).
"""

from __future__ import annotations

from loopx.errors import UsageError
from loopx.kernel.read import queries, validate
from loopx.kernel.storage import ids
from loopx.kernel.storage.redact import redact_text
from loopx.kernel.storage.store import Draft, Store

EXCERPT = 4000        # characters kept inline
HEAD = 1000
MAX_BLOB = 10 << 20   # bytes


def excerpt(text: str) -> str:
    if len(text) <= EXCERPT:
        return text
    return text[:HEAD] + f"\n… [{len(text) - EXCERPT} characters cut] …\n" + text[-(EXCERPT - HEAD):]


def add(store: Store, actor: str, goal_id: str | None, *, kind: str, summary: str, todo=None, run=None,
        command=None, exit_code=None, output: bytes | str | None = None, commit=None, files=None) -> dict:
    """Record evidence. Returns {evidence_id, goal_id, sha256, bytes, excerpt_chars, blob}."""
    validate.choice(kind, validate.EVIDENCE_KINDS, "evidence kind")
    summary = validate.text(summary, "--summary", limit=2000)
    command = validate.text(command, "--command", required=False, limit=4000)
    if exit_code is not None:
        exit_code = validate.count(exit_code, "--exit-code", low=-255, high=255)
    if commit is not None:
        commit = validate.text(commit, "--commit", limit=100)
    body = raw = digest = None
    if output is not None:
        import hashlib

        text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
        body = redact_text(text)
        raw = body.encode("utf-8", "replace")
        digest = hashlib.sha256(raw).hexdigest()  # of the whole (redacted) output
        if len(raw) > MAX_BLOB:  # keep the head and, above all, the tail (where test summaries are)
            half = MAX_BLOB // 2
            body = (raw[:half].decode("utf-8", "ignore") + f"\n… [{len(raw) - 2 * half} bytes cut] …\n"
                    + raw[-half:].decode("utf-8", "ignore"))
    out: dict = {}
    blob_sha = None
    if body is not None and len(body) > EXCERPT:
        blob_sha = store.write_blob(body.encode("utf-8", "replace"))

    def plan(state, now):
        g = queries.resolve_goal(state, goal_id)
        t = queries.resolve_todo(state, todo)["id"] if todo else None
        r = queries.resolve_run(state, run)["id"] if run else None
        if t and state["todos"][t]["goal"] != g["id"]:
            raise UsageError(f"{t} belongs to goal {state['todos'][t]['goal']}", "pass the todo's own goal")
        eid = ids.new_id("evidence", state["evidence"], nbytes=4)
        data = {"evidence_id": eid, "kind": kind, "summary": summary}
        for k, v in (("todo", t), ("run", r), ("command", command), ("exit_code", exit_code),
                     ("commit", commit), ("files", list(files) if files else None)):
            if v is not None:
                data[k] = v
        if body is not None:
            data.update(excerpt=excerpt(body), sha256=digest, bytes=len(raw))
            if blob_sha:
                data["blob"] = f"blobs/{blob_sha[:2]}/{blob_sha}"
        out.update(evidence_id=eid, goal_id=g["id"], todo=t, run=r, sha256=data.get("sha256"),
                   bytes=data.get("bytes"), blob=data.get("blob"))
        return [Draft("evidence.added", g["id"], data, stream="evidence")]

    store.transact(plan, actor=actor)
    return out


def full_record(store: Store, evidence_id: str) -> dict | None:
    """The whole evidence record (with excerpt) read from ``evidence.jsonl``."""
    for rec in store.iter_records("evidence"):
        if rec["type"] == "evidence.added" and rec["data"].get("evidence_id") == evidence_id:
            return rec
    return None
