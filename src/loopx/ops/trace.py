"""Publishable traces (issue 12 item 9): one goal's records, its evidence blobs, the chain heads,
the anchors and the review packet in one ``.tar.gz``, verifiable on another machine.

Archive members:

- ``manifest.json``: ``{"v": 1, "project_id", "goal_id", "exported_at", "heads": {node: head},
  "anchors": [anchor], "files": {member: sha256}}`` (every other member's SHA-256);
- ``records.jsonl``: every record of the store in chain order (``hlc``, node, id), one JSON object a
  line: ``{"stream", "line"}`` with the record's line verbatim when it belongs to the goal, else
  ``{"stream", "stub": {"seq", "node", "hlc", "prev", "hash"}}`` (its chain fields and hash only:
  other goals' content is not published);
- ``blobs/<sha256>``: the evidence bodies the goal's evidence records reference;
- ``review.md``: the review packet of the goal.

With ``--redact-more`` (``redact_more=True``) the archive is first checked as it would be written
unredacted; then what is private but not secret (home paths, user and host names, e-mail and IP
addresses, URLs with credentials or private hosts: src/loopx/kernel/storage/privacy.py) is replaced
by stable placeholders. A record that changed is written ``{"stream", "line", "hash"}``: its
redacted line (with a fresh CRC) and the SHA-256 of its original line, over which the chain is
verified. ``manifest["redact_more"]`` = ``{"rules", "replaced": {rule: n}, "placeholders":
{kind: n}, "records": n changed, "blobs": [sha256 of changed blobs], "verified_before_redaction":
{"ok", "problems", "records", "stubs"}}``.

``verify`` recomputes what it can: member hashes, each full line's CRC and SHA-256, every node's
chain (each record's ``prev`` equals the hash of the node's record before it), the heads, every
anchor against the records, and each blob's SHA-256. A stub's hash and fields are as exported: a
changed stub shows only where a full record or an anchor points at it (docs/security.md).
"""

from __future__ import annotations

import io
import json
import os
import tarfile

from loopx.errors import UsageError
from loopx.kernel.policy import review
from loopx.kernel.read import queries, tracefile
from loopx.kernel.storage import anchors, chain, clock, layout, privacy
from loopx.kernel.storage.codec import decode, encode
from loopx.kernel.storage.fs import atomic_write, open_file


def _lines(store, stream: str):
    return store.iter_lines(stream)


CHAIN_KEYS = ("v", "seq", "id", "ts", "node", "hlc", "prev", "type", "goal", "crc")


def export(store, goal_id: str, output: str, *, redact_more: bool = False) -> dict:
    """Write the archive of ``goal_id`` to ``output``. Returns ``{"output", "goal_id", "records",
    "stubs", "blobs", "anchors", "redact_more": None | {"rules", "replaced", "placeholders",
    "records", "blobs", "verified_before_redaction"}}``. ``redact_more``: also replace what is
    private but not secret (src/loopx/kernel/storage/privacy.py), after checking the unredacted
    archive. Raises NotFound (unknown goal), UsageError (output inside the store or unwritable)."""
    state = store.load()
    gid = queries.resolve_goal(state, goal_id)["id"]
    path = os.path.abspath(output)
    root = os.path.realpath(store.root)
    if os.path.realpath(path) == root or os.path.realpath(path).startswith(root + os.sep):
        raise UsageError(f"-o {output!r} is inside loopx's store", "write the trace outside .loopx/")
    rows, blobs, full, stubs = [], set(), 0, 0
    seen: set = set()  # a line a union merge copied twice is exported once
    for stream in ("events", "evidence"):
        for line in _lines(store, stream):
            try:
                rec = store.decode(line)
            except ValueError:
                continue
            digest = chain.line_hash(line)
            if digest in seen:
                continue
            seen.add(digest)
            key = (rec.get("hlc") or [0, 0], rec.get("node") or "", rec.get("id") or "")
            if rec.get("goal") == gid:
                full += 1
                rows.append((key, {"stream": stream, "line": line.decode("utf-8")}))
                blob = (rec.get("data") or {}).get("blob")
                if isinstance(blob, str) and blob.startswith("blobs/"):
                    blobs.add(blob.rsplit("/", 1)[-1])
            else:
                stubs += 1
                rows.append((key, {"stream": stream, "stub": {
                    "seq": rec.get("seq"), "node": rec.get("node"), "hlc": rec.get("hlc"), "prev": rec.get("prev"),
                    "hash": digest}}))
    rows.sort(key=lambda r: r[0])
    records = [r for _k, r in rows]
    members: dict[str, bytes] = {
        "review.md": review.render_markdown(review.build(store, goal_id=gid, since=None)).encode("utf-8"),
    }
    for sha in sorted(blobs):
        try:
            with open_file(store.path(layout.blob(sha))) as fh:
                members[f"blobs/{sha}"] = fh.read()
        except OSError:
            continue  # verify reports the missing blob
    pid = store.format_info().get("project_id") or "unknown"
    found = anchors.read_file(pid)
    if anchors.git_dir_of(store.project_dir):
        try:
            found += anchors.read_ref(store.project_dir, anchors.REF, pid)[1]
        except Exception:  # noqa: BLE001 - anchors are best effort in a trace
            pass
    manifest = {"v": 1, "project_id": pid, "goal_id": gid, "exported_at": clock.now_iso(),
                "heads": chain.chain_heads(store), "anchors": found}
    more = None
    if redact_more:
        records, members, manifest, more = _redact_more(records, members, manifest)
    members["records.jsonl"] = _jsonl(records)
    manifest["files"] = {n: chain.sha256(b).hexdigest() for n, b in sorted(members.items())}
    _write(path, output, {"manifest.json": json.dumps(manifest, indent=1, sort_keys=True).encode(), **members})
    return {"output": path, "goal_id": gid, "records": full, "stubs": stubs, "blobs": len(blobs),
            "anchors": len(found), "redact_more": more}


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records).encode()


def _redact_more(records: list[dict], members: dict, manifest: dict):
    """Check the unredacted archive, then replace private values in records, blobs, the review
    packet and the anchors' reasons. A changed record keeps the SHA-256 of its original line as
    ``hash`` (the chain is verified over it); a changed blob keeps its original name and is listed
    in ``manifest["redact_more"]["blobs"]``. Returns (records, members, manifest, summary)."""
    plain = dict(members, **{"records.jsonl": _jsonl(records)})
    check = tracefile.verify({"files": plain, "manifest": dict(manifest, files={
        n: chain.sha256(b).hexdigest() for n, b in plain.items()})})
    before = {"ok": check["ok"], "problems": check["problems"][:20], "records": check["records"],
              "stubs": check["stubs"]}
    red = privacy.Redactor(*privacy.local_names())
    decoded = [decode(r["line"].encode("utf-8")) if "line" in r else None for r in records]
    for rec in decoded:
        if rec is not None:
            red.learn(rec)
    out, changed = [], 0
    for row, rec in zip(records, decoded, strict=True):
        if rec is None:
            out.append(row)
            continue
        body = {k: v for k, v in rec.items() if k != "crc"}
        new = red.value(body, skip=CHAIN_KEYS)
        if new == body:
            out.append(row)
            continue
        changed += 1
        out.append({"stream": row["stream"], "line": encode(new).decode("utf-8").rstrip("\n"),
                    "hash": chain.line_hash(row["line"].encode("utf-8"))})
    members = dict(members)
    redacted_blobs = []
    for name in sorted(n for n in members if n.startswith("blobs/")):
        text = members[name].decode("utf-8", "surrogateescape")
        new_text = red.text(text)
        if new_text != text:
            members[name] = new_text.encode("utf-8", "surrogateescape")
            redacted_blobs.append(name.split("/", 1)[1])
    members["review.md"] = red.text(members["review.md"].decode("utf-8")).encode("utf-8")
    manifest = dict(manifest, anchors=[dict(a, reason=red.text(a["reason"])) if isinstance(a.get("reason"), str) else a
                                       for a in manifest["anchors"]])
    summary = dict(red.summary(), records=changed, blobs=redacted_blobs, verified_before_redaction=before)
    manifest["redact_more"] = summary
    return out, members, manifest, summary


def _write(path: str, output: str, members: dict[str, bytes]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    try:
        atomic_write(path, buf.getvalue())
    except OSError as exc:
        raise UsageError(f"cannot write {output!r}: {exc.strerror}", "pick a writable path") from None


def verify(path: str) -> dict:
    """Check an archive end to end (``loopx.kernel.read.tracefile.verify``). Returns ``{"ok": bool,
    "goal_id", "records", "stubs", "redacted", "blobs", "redacted_blobs", "anchors", "redact_more",
    "problems": [str]}``. Raises UsageError when the file is not a readable trace."""
    return tracefile.verify(tracefile.load(path))
