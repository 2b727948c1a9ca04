"""Evidence records (``evidence.added`` in ``evidence.jsonl``).

Output (bytes, str, or a binary stream such as stdin or an open file) is read in CHUNK pieces, so
memory stays bounded whatever its size: only the first and last MAX_BLOB/2 bytes (5 MiB each) are
held, plus the decoded and redacted copies of those at most MAX_BLOB bytes: about 60 MB peak for
any input size (tracemalloc on a 128 MiB stream; tests/test_robustness.py). ``sha256`` and
``bytes`` describe the whole stream as read (they match ``sha256sum`` of the file). What is kept is redacted: an excerpt (head and
tail, at most EXCERPT characters) inline and, when longer than the excerpt, the body in ``blobs/``
(content addressed; above MAX_BLOB bytes the middle is cut at line boundaries with a marker).
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
CHUNK = 1 << 20       # bytes read at a time


def excerpt(text: str) -> str:
    if len(text) <= EXCERPT:
        return text
    return text[:HEAD] + f"\n… [{len(text) - EXCERPT} characters cut] …\n" + text[-(EXCERPT - HEAD):]


def _chunks(source):
    if isinstance(source, str):
        source = source.encode("utf-8", "replace")
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source)
        for i in range(0, len(view), CHUNK):
            yield bytes(view[i:i + CHUNK])
        return
    while True:
        chunk = source.read(CHUNK)
        if not chunk:
            return
        yield chunk.encode("utf-8", "replace") if isinstance(chunk, str) else chunk


def ingest(source, *, keep: int = MAX_BLOB) -> tuple[str, str, int]:
    """Read ``source`` (bytes, str or a binary file object) to its end in CHUNK pieces.

    Returns ``(kept, sha256 hex, size in bytes)``: sha256 and size of the whole stream; ``kept`` the
    redacted text of all of it when it is at most ``keep`` bytes, else of its first and last
    ``keep/2`` bytes (cut at line boundaries when there are any) joined by a
    ``… [N bytes cut] …`` line. Holds at most ``keep`` + CHUNK bytes of input at a time.
    Raises OSError from the source."""
    import hashlib
    from collections import deque

    half = keep // 2
    sha = hashlib.sha256()
    size = 0
    head = bytearray()
    tail: deque[bytes] = deque()
    tail_len = 0
    for chunk in _chunks(source):
        sha.update(chunk)
        size += len(chunk)
        if tail or len(head) + len(chunk) > keep:
            if not tail:  # the input outgrew ``keep``: from now on keep only its first half in head
                chunk = bytes(head[half:]) + chunk
                del head[half:]
            tail.append(chunk)
            tail_len += len(chunk)
            while tail_len - len(tail[0]) >= half:
                tail_len -= len(tail.popleft())
        else:
            head += chunk
    digest = sha.hexdigest()
    if not tail:
        text = head.decode("utf-8", "replace")
        del head
        return redact_text(text), digest, size
    # free each buffer as soon as it is decoded: the peak stays near ``keep`` plus one redacted half
    last = b"".join(tail)
    tail.clear()
    last = last[-half:]
    nl = head.rfind(b"\n")
    if nl >= 0:
        del head[nl + 1:]
    nl = last.find(b"\n")
    if 0 <= nl < len(last) - 1:
        last = last[nl + 1:]
    cut = size - len(head) - len(last)
    first_text = head.decode("utf-8", "ignore").rstrip("\n")
    del head
    first_text = redact_text(first_text)
    last_text = last.decode("utf-8", "ignore")
    del last
    return first_text + f"\n… [{cut} bytes cut] …\n" + redact_text(last_text), digest, size


def add(store: Store, actor: str, goal_id: str | None, *, kind: str, summary: str, todo=None, run=None,
        command=None, exit_code=None, output=None, commit=None, files=None,
        after_run: str | None = None) -> dict:
    """Record evidence. ``output``: bytes, str or a binary stream read to its end (see ``ingest``).
    ``after_run`` marks a goal-level check (no run of its own) made after that run of the goal.
    Returns {evidence_id, goal_id, todo, run, sha256, bytes, blob}. Raises UsageError (bad kind,
    unknown ids), OSError (reading the output, or writing its blob; no temporary file is left)."""
    validate.choice(kind, validate.EVIDENCE_KINDS, "evidence kind")
    summary = validate.text(summary, "summary", limit=2000)
    command = validate.text(command, "command", required=False, limit=4000)
    if exit_code is not None:
        exit_code = validate.count(exit_code, "exit_code", low=-255, high=255)
    if commit is not None:
        commit = validate.text(commit, "commit", limit=100)
    body = digest = size = None
    if output is not None:
        body, digest, size = ingest(output)
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
                     ("commit", commit), ("files", list(files) if files else None), ("after_run", after_run)):
            if v is not None:
                data[k] = v
        if body is not None:
            data.update(excerpt=excerpt(body), sha256=digest, bytes=size)
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
