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

``verify`` recomputes what it can: member hashes, each full line's CRC and SHA-256, every node's
chain (each record's ``prev`` equals the hash of the node's record before it), the heads, every
anchor against the records, and each blob's SHA-256. A stub's hash and fields are as exported: a
changed stub shows only where a full record or an anchor points at it (docs/security.md).
"""

from __future__ import annotations

import io
import json
import os

from loopx.errors import UsageError


def _lines(store, stream: str):
    return store.iter_lines(stream)


def export(store, goal_id: str, output: str) -> dict:
    """Write the archive of ``goal_id`` to ``output``. Returns ``{"output", "goal_id", "records",
    "stubs", "blobs", "anchors"}``. Raises NotFound (unknown goal), UsageError (output inside the
    store or unwritable)."""
    import tarfile

    from loopx.kernel.policy import review
    from loopx.kernel.read import queries
    from loopx.kernel.storage import anchors, chain, clock

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
    members: dict[str, bytes] = {
        "records.jsonl": "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for _k, r in rows).encode(),
        "review.md": review.render_markdown(review.build(store, goal_id=gid, since=None)).encode("utf-8"),
    }
    for sha in sorted(blobs):
        try:
            with open(store.path("blobs", sha[:2], sha), "rb") as fh:
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
    from loopx.kernel.storage.chain import sha256

    manifest = {"v": 1, "project_id": pid, "goal_id": gid, "exported_at": clock.now_iso(),
                "heads": chain.chain_heads(store), "anchors": found,
                "files": {n: sha256(b).hexdigest() for n, b in members.items()}}
    members = {"manifest.json": json.dumps(manifest, indent=1, sort_keys=True).encode(), **members}
    try:
        tmp = path + f".tmp{os.getpid()}"
        with tarfile.open(tmp, "w:gz") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {output!r}: {exc.strerror}", "pick a writable path") from None
    return {"output": path, "goal_id": gid, "records": full, "stubs": stubs, "blobs": len(blobs),
            "anchors": len(found)}


def verify(path: str) -> dict:
    """Check an archive end to end. Returns ``{"ok": bool, "goal_id", "records", "stubs", "blobs",
    "anchors", "problems": [str]}``. Raises UsageError when the file is not a readable trace."""
    import tarfile

    from loopx.kernel.storage import chain
    from loopx.kernel.storage.store import decode

    try:
        with tarfile.open(path, "r:gz") as tar:
            files = {}
            for m in tar.getmembers():
                if m.isfile() and m.size < (1 << 30):
                    files[m.name] = tar.extractfile(m).read()
        manifest = json.loads(files["manifest.json"])
    except (OSError, tarfile.TarError, KeyError, ValueError, EOFError) as exc:
        raise UsageError(f"{path!r} is not a readable loopx trace: {exc}", "pass a file from `loopx trace export`",
                         code="bad_trace") from None
    problems: list[str] = []
    for name, digest in (manifest.get("files") or {}).items():
        if name not in files:
            problems.append(f"{name} is missing from the archive")
        elif chain.sha256(files[name]).hexdigest() != digest:
            problems.append(f"{name} does not match its SHA-256 in manifest.json")
    extra = set(files) - set(manifest.get("files") or {}) - {"manifest.json"}
    problems += [f"{name} is in the archive but not in manifest.json" for name in sorted(extra)]
    gid = manifest.get("goal_id")
    last: dict[str, tuple] = {}
    at: dict[tuple, str] = {}
    full = stubs = 0
    blobs_needed = set()
    for n, row in enumerate(files.get("records.jsonl", b"").decode("utf-8", "replace").splitlines(), 1):
        try:
            row = json.loads(row)
            stream = row["stream"]
            if "line" in row:
                line = row["line"].encode("utf-8")
                rec = decode(line)  # checks the CRC
                h = chain.line_hash(line)
                node, hlc, prev, seq = rec.get("node"), rec.get("hlc"), rec.get("prev"), rec.get("seq")
                full += 1
                if rec.get("goal") != gid:
                    problems.append(f"record {n} ({stream} seq {seq}) is not of goal {gid}")
                blob = (rec.get("data") or {}).get("blob")
                if isinstance(blob, str) and blob.startswith("blobs/"):
                    blobs_needed.add(blob.rsplit("/", 1)[-1])
            else:
                s = row["stub"]
                node, hlc, prev, seq, h = s["node"], s["hlc"], s["prev"], s["seq"], s["hash"]
                stubs += 1
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"record {n} of records.jsonl is unreadable: {exc}")
            continue
        if node is None:
            continue
        before = last.get(node)
        if (before[0] if before else None) != prev:
            problems.append(f"the chain of node {node} breaks at {stream} seq {seq} (record {n}): its prev does not "
                            "match the record before it")
        if before and not (hlc > before[1]):
            problems.append(f"the clock of node {node} does not move forward at {stream} seq {seq}")
        last[node] = (h, hlc)
        at[(node, stream, seq)] = h
    for node, head in (manifest.get("heads") or {}).items():
        if at.get((node, head.get("stream"), head.get("seq"))) != head.get("hash") or last.get(node, ("",))[0] != head.get("hash"):
            problems.append(f"the chain head of node {node} ({head.get('stream')} seq {head.get('seq')}) does not "
                            "match the records")
    for a in manifest.get("anchors") or []:
        for node, head in (a.get("heads") or {}).items():
            if at.get((node, head.get("stream"), head.get("seq"))) != head.get("hash"):
                problems.append(f"the anchor of {a.get('at')} names {head.get('stream')} seq {head.get('seq')} of "
                                f"node {node}, which the records do not hold with that hash")
    for sha in sorted(blobs_needed):
        data = files.get(f"blobs/{sha}")
        if data is None:
            problems.append(f"evidence blob {sha} is missing")
        elif chain.sha256(data).hexdigest() != sha:
            problems.append(f"evidence blob {sha} does not match its SHA-256")
    return {"ok": not problems, "goal_id": gid, "records": full, "stubs": stubs, "blobs": len(blobs_needed),
            "anchors": len(manifest.get("anchors") or []), "problems": problems}
