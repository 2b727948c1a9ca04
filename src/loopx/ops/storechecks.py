"""Doctor's checks of a project's ``.loopx/`` (each returns a doctor result dict; see ops.doctor).

They read the full scan from ``ops.storescan`` so they work when ``format.json`` is broken, the
files hold git conflict markers, or the format is newer than this loopx.
"""

from __future__ import annotations

import os

from loopx.kernel.storage import caches, chainwalk, fold, gitcli, layout, logfold
from loopx.kernel.storage.caches import unmarshal
from loopx.kernel.storage.codec import EDITED
from loopx.kernel.storage.fs import open_file
from loopx.kernel.storage.fs import stale_temporaries as find
from loopx.kernel.storage.layout import STREAMS
from loopx.kernel.storage.store import FORMAT
from loopx.ops import livecheck
from loopx.ops.anchorcheck import check_anchors, restore_hint
from loopx.ops.check import result

IGNORE_RULES = layout.LOCAL[:4]  # what a store made before parallel runs ignores (worktrees/ is added on use)


def check_format(t) -> dict:
    fmt = t.scan["format"]
    if not fmt["ok"] and fmt["error"] == "format.json is missing":
        return result("store.format", "error", ".loopx/format.json is missing (the store cannot be read without it)",
                      "`loopx connect` recreates it; the event files are untouched")
    if not fmt["ok"]:
        return result("store.format", "error", f".loopx/{fmt['error']}",
                      "restore it from git (`git checkout -- .loopx/format.json`); the event files are "
                      "untouched, and `loopx connect` recreates a missing one")
    if fmt["format"] > FORMAT:
        return result("store.format", "error",
                      f"format {fmt['format']} is newer than this loopx understands ({FORMAT}); the store "
                      "is read-only here", "upgrade loopx: `loopx update plan`")
    if fmt["format"] < FORMAT:
        return result("store.format", "warning",
                      f"format {fmt['format']} (not migrated yet): readable, and the next write migrates it in "
                      f"place to format {FORMAT} after a verified copy of the old files in "
                      ".loopx/backup/format-1/", "nothing to do; any write (e.g. `loopx todo add`) migrates it")
    return result("store.format", "ok", f"format {fmt['format']}")


def check_chain(t) -> dict:
    """Every node's hash chain (store format 2), and the chain heads the cache saw against the log."""
    fmt = t.scan["format"]
    if not fmt["ok"] or fmt["format"] > FORMAT:
        return result("store.chain", "skipped", "not checked: format.json is unusable")

    store = t.store()
    found = t.scan["chain"]
    if found["holds"]:  # the one pass found every node's chain whole (ops/segscan.py)
        found = dict(found, broken=None, breaks=[], duplicates=0)
    else:  # chainwalk.verify walks it node by node to name where each break starts (and tells a
        found = chainwalk.verify(store)  # line a merge copied twice from damage)
    if fmt["format"] < 2 and not found["chained"]:
        return result("store.chain", "skipped", "format 1 has no hash chain (the next write migrates the store)")
    b = found["broken"]
    if b is not None:
        names = _machine_names(store) if b["node"] is not None else {}
        where = f"{b['stream']} seq {b['seq']}" + (f" (node {b['node']}{names.get(b['node'], '')})" if b["node"] else "")
        more = [f"node {x['node']}{names.get(x['node'], '')} at {x['stream']} seq {x['seq']}"
                for x in found["breaks"][1:] if x["node"] is not None]
        also = f"; also broken: {', '.join(more)}" if more else ""
        return result("store.chain", "error",
                      f"hash chain broken at {where}: {b['reason']}{also}",
                      f"{restore_hint(t)}; that node's records from "
                      "that seq on cannot be trusted (other nodes' chains are checked on their own)")
    seen = _cached_heads(store)
    if seen:
        gap = chainwalk.check_heads(found["heads"], seen)
        if gap is not None:
            return result("store.chain", "error",
                          f"hash chain head mismatch at {gap['stream']} seq {gap['seq']}: {gap['reason']}",
                          f"records were cut off or rewritten after loopx last read them; {restore_hint(t)}")
    listing = ""
    names = _node_labels(store) if len(found["nodes"]) > 1 else {}
    if sum(1 for n in found["nodes"] if names.get(n) != "legacy") > 1:
        # several machines: which wrote how much (a node nobody knows stands out here)
        listing = "; " + ", ".join(f"{names.get(n) or n + ' (no machine name)'}: {k}"
                                   for n, k in sorted(found["nodes"].items(), key=lambda x: (-x[1], x[0])))
    return result("store.chain", "ok",
                  f"{found['chained']} records chained over {len(found['nodes'])} node(s), every link holds"
                  + (f" ({found['duplicates']} duplicate line(s) of a merge counted once)" if found.get("duplicates") else "")
                  + listing)


def _node_labels(store) -> dict:
    """{node: machine name or "legacy"} for the nodes that have one; {} when the state cannot be read."""
    try:
        nodes = store.load(view="live").get("nodes") or {}
    except Exception:  # noqa: BLE001 - a damaged store still gets its chain report
        return {}
    return {n: "legacy" if v.get("legacy") else v["host"] for n, v in nodes.items()
            if isinstance(v, dict) and (v.get("legacy") or v.get("host"))}


def _machine_names(store) -> dict:
    """{node: " on <machine>"} for the nodes that named their machine (``node.registered``); empty
    when the state cannot be read (doctor reports that elsewhere)."""
    try:
        nodes = store.load(view="live").get("nodes") or {}
    except Exception:  # noqa: BLE001 - a damaged store still gets its chain report
        return {}
    return {n: f" on {v['host']}" for n, v in nodes.items() if isinstance(v, dict) and v.get("host")}


def _cached_heads(store) -> dict:
    """The chain heads the caches recorded (whatever the log looks like now): the cached views' and
    those of the last write (``cache/heads.bin``)."""
    best: dict = {}
    for name in (layout.SNAPSHOT, layout.LIVE, layout.HEADS):
        try:
            if name == layout.HEADS:
                heads = caches.saved_heads(store)
            else:
                if name == layout.SNAPSHOT and too_large(store, store.path(name)):
                    continue  # hundreds of MB to unmarshal; every write saves its heads, as new or newer
                with open_file(store.path(name)) as fh:
                    snap = unmarshal(fh.read())
                heads = snap["state"]["meta"].get("chain") or {}
        except (OSError, ValueError, EOFError, TypeError, KeyError):
            continue
        for node, head in heads.items():
            if not _a_head(head):  # a hand-edited cache: no head
                continue
            if node not in best or head["hlc"] > best[node]["hlc"]:
                best[node] = head
    return best


def _a_head(head) -> bool:
    """Whether ``head`` has a head's shape (``chainwalk.check_heads`` compares these fields)."""
    hlc = head.get("hlc") if isinstance(head, dict) else None
    return (isinstance(hlc, list) and len(hlc) == 2 and all(type(x) is int for x in hlc)
            and type(head.get("seq")) is int and isinstance(head.get("hash"), str))


def check_lines(t) -> dict:
    streams = t.scan["streams"]
    total = sum(s["lines"] for s in streams.values())
    bad = {n: s for n, s in streams.items() if s["bad_count"]}
    unreadable = {n: s["unreadable"] for n, s in streams.items() if s.get("unreadable")}
    if unreadable:
        what = "; ".join(f"{n}.jsonl: {why}" for n, why in unreadable.items())
        return result("store.lines", "error", f"cannot read {what}",
                      "check the file's permissions and owner (`ls -l .loopx/`)")
    if any(s["conflict"] for s in streams.values()):
        names = ", ".join(layout.open_log(n) for n, s in streams.items() if s["conflict"])
        return result("store.lines", "error", f"{names}: git conflict markers; the store is read-only",
                      "resolve the merge by keeping one side (`git checkout --ours .loopx/events.jsonl` or "
                      "`--theirs`), then redo the other side's changes with loopx commands")
    if not bad:
        return result("store.lines", "ok", f"{total} lines, all readable")
    parts = []
    in_open = any(b.get("file") in (None, layout.open_log(n)) for n, s in bad.items() for b in s["bad"])
    for n, s in bad.items():
        first = s["bad"][0]
        where = f"line {first['line']}" if first.get("file") in (None, layout.open_log(n)) else \
            f"{first['file']} line {first['line']}"
        seq = f", seq {first['seq']}" if first.get("seq") is not None else ""
        parts.append(f"{n}.jsonl: {s['bad_count']} bad line(s), first at {where}{seq} ({first['reason']})")
    if not in_open:  # closed segments are history, never rewritten (not even by --fix)
        return result("store.lines", "error", "; ".join(parts) + "; they are skipped on every read",
                      "a closed segment is never rewritten: restore that file from git "
                      "(`git checkout -- .loopx/<stream>/<segment>.jsonl`) or another clone")
    edited = [(n, b) for n, s in bad.items() for b in s["bad"] if b["reason"] == EDITED]
    if not edited:
        return result("store.lines", "error", "; ".join(parts) + "; they are skipped on every read",
                      "loopx doctor --fix (moves them to .loopx/quarantine/ under the lock)", "quarantine_bad_lines")
    n, b = edited[0]
    where = f".loopx/{b.get('file') or layout.open_log(n)} line {b['line']}"
    hint = (f"undo the edit of {where} (loopx cannot rebuild the original line: "
            f"{restore_hint(t)}); `loopx doctor --fix` never moves an edited line; to give the record up "
            "instead, cut the line out yourself")
    others = sum(s["bad_count"] - s["edited"] for s in bad.values())
    if others:
        hint += f"; `loopx doctor --fix` moves the other {others} bad line(s) to .loopx/quarantine/"
    return result("store.lines", "error", "; ".join(parts) + "; they are skipped on every read "
                  "(so are the goals and todos they hold)", hint, "quarantine_bad_lines" if others else None)


def check_tail(t) -> dict:
    torn = {n: s["torn_bytes"] for n, s in t.scan["streams"].items() if s["torn_bytes"]}
    if not torn:
        return result("store.tail", "ok", "every file ends on a complete line")
    what = ", ".join(f"{n}.jsonl ({b} bytes)" for n, b in torn.items())
    return result("store.tail", "error", f"torn last line (an interrupted write): {what}",
                  "loopx doctor --fix (the store's own repair: quarantine and truncate, under the lock)",
                  "repair_torn_tail")


def check_types(t) -> dict:
    unknown: dict[str, int] = {}
    for s in t.scan["streams"].values():
        for k, v in s["unknown_types"].items():
            unknown[k] = unknown.get(k, 0) + v
    if not unknown:
        return result("store.types", "ok", "every event type is known")
    names = ", ".join(f"{k} ({v})" for k, v in sorted(unknown.items())[:8])
    return result("store.types", "warning", f"unknown event types, kept but ignored: {names}",
                  "they were probably written by a newer loopx: `loopx update plan`")


def check_merge(t) -> dict:
    dups = {n: (s["dup_ids"], s["dup_seqs"]) for n, s in t.scan["streams"].items() if s["dup_ids"] or s["dup_seqs"]}
    if not dups:
        return result("store.merge", "ok", "no duplicate event ids or sequence numbers")
    what = "; ".join(f"{n}.jsonl: {i} duplicate id(s), {q} repeated seq(s)" for n, (i, q) in dups.items())
    return result("store.merge", "ok", f"{what}: a union merge of several clones' logs; readers fold each record "
                                       "once, in (hlc, node, id) order, so every clone computes the same state")


def check_seq(t) -> dict:
    gaps = {n: s for n, s in t.scan["streams"].items() if s["missing_seqs"]}
    if not gaps:
        return result("store.seq", "ok", "sequence numbers are gap-free")
    what = "; ".join(f"{n}.jsonl: {s['missing_seqs']} missing (e.g. seq {s['missing_sample'][0]})"
                     for n, s in gaps.items())
    return result("store.seq", "warning", f"sequence gaps, lines were removed by hand or lost: {what}",
                  f"if events are missing: {restore_hint(t)}")


def check_encoding(t) -> dict:
    odd = []
    for n, s in t.scan["streams"].items():
        if s["bom"]:
            odd.append(f"{n}.jsonl starts with a BOM")
        if s["crlf"]:
            odd.append(f"{n}.jsonl has {s['crlf']} CRLF line end(s)")
    if not odd:
        return result("store.encoding", "ok", "UTF-8, LF line ends")
    return result("store.encoding", "warning", "; ".join(odd) + " (readable, but an editor or git changed it)",
                  "add `*.jsonl -text` to .loopx/.gitattributes and stop git's autocrlf for this repository")


COMPARE_BYTES = 24 << 20  # a full snapshot up to this size is compared with a fold of the whole log ...


def too_large(store, snapshot: str) -> bool:
    """... and only while the log has no closed segment (at most 8 MiB of events): past that, loading
    the full snapshot and folding the whole log next to it would make doctor's memory grow with
    the history (two full states: 142 MB at 100k events, 1.16 GB at a million)."""
    return os.path.getsize(snapshot) > COMPARE_BYTES or store.closed_segments("events") > 0


def check_snapshot(t) -> dict:
    snap = os.path.join(t.root, layout.SNAPSHOT)
    if not os.path.exists(snap):
        return result("store.snapshot", "ok", "no full snapshot yet (a read of the whole history writes one; writers keep only the live view)")
    if not t.scan["format"]["ok"] or t.scan["format"]["format"] > FORMAT:
        return result("store.snapshot", "skipped", "not compared: format.json is unusable")

    store = t.store()
    if too_large(store, snap):
        # Comparing it would hold two full states (about 1.2 GB at a million events) and fold the
        # whole log once more: doctor's time and memory stay flat instead (issue 26). What the hot
        # commands read, the live view, is compared with one rebuilt from the newest checkpoint.

        return livecheck.check(store, os.path.getsize(snap))
    cached, offsets = caches.load_snapshot(store)
    if not offsets:
        return result("store.snapshot", "ok", "the snapshot is stale; the next reads rebuild it")
    fresh = fold.empty()
    for name in STREAMS:
        logfold.fold_stream(store, cached, name, offsets.get(name, 0))
        logfold.fold_stream(store, fresh, name, 0)
    if any(m.get("unordered") for m in cached["meta"]["files"].values()):
        return result("store.snapshot", "ok", "the log was union-merged since the snapshot; the next reads rebuild it")
    if any(m.get("unordered") for m in fresh["meta"]["files"].values()):
        fresh = logfold.fold_merged(store)  # a union-merged log folds in order_key order, as every reader does
    keys = [k for k in fresh if k != "meta"]
    differ = [k for k in keys if cached.get(k) != fresh.get(k)]
    if differ:
        return result("store.snapshot", "error", f"the cached snapshot disagrees with the log ({', '.join(differ)})",
                      "loopx doctor --fix (rebuilds .loopx/cache/ from the log)", "rebuild_cache")
    return result("store.snapshot", "ok", "the cached snapshot matches the log")


def all_checks(t) -> list[dict]:
    out = [check_format(t), check_lines(t), check_tail(t), check_types(t), check_merge(t), check_seq(t),
           check_encoding(t), check_temporaries(t)]
    try:
        out.append(check_chain(t))
    except Exception as exc:  # noqa: BLE001 - a damaged store must never break doctor
        out.append(result("store.chain", "error", f"the hash chain cannot be checked: {exc}",
                          "run `loopx doctor --debug` and report this"))
    if not t.scan["format"]["ok"]:  # store.format reports it once
        out.append(result("store.anchors", "skipped", "not checked: format.json is unusable"))
    else:
        try:
            out.extend(check_anchors(t))
        except Exception as exc:  # noqa: BLE001 - a damaged store or git must never break doctor
            out.append(result("store.anchors", "error", f"the anchors cannot be checked: {exc}",
                              "run `loopx doctor --debug` and report this"))
    try:
        out.append(check_snapshot(t))
    except Exception as exc:  # a damaged cache must never break doctor
        out.append(result("store.snapshot", "error", f"the cached snapshot cannot be read: {exc}",
                          "loopx doctor --fix (rebuilds .loopx/cache/)", "rebuild_cache"))
    return out


def stale_temporaries(t) -> list[str]:
    """Temporary files (``*.tmp``) under ``.loopx/`` older than ``kernel.fs.STALE_AFTER``: left by a
    write that died (a full disk, a kill) between creating and renaming them."""
    return find(t.root) if t.root and os.path.isdir(t.root) else []


def check_temporaries(t) -> dict:
    stale = stale_temporaries(t)
    if not stale:
        return result("store.temporaries", "ok", "no stale temporary files")
    size = 0
    for p in stale:
        try:
            size += os.path.getsize(p)
        except OSError:
            pass
    where = ", ".join(sorted({os.path.relpath(os.path.dirname(p), t.root).split(os.sep)[0] for p in stale}))
    return result("store.temporaries", "warning",
                  f"{len(stale)} stale temporary file(s), {size} bytes, left by interrupted writes (in {where})",
                  "loopx doctor --fix (removes them; they were never part of the store)", "remove_temporaries")


# ------------------------------------------------------------------ .gitignore
def ignore_rules(text: str) -> set[str]:
    """Normalised ignore patterns: ``/cache/*`` and ``cache`` both count as ``cache/``."""
    out = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        line = line.lstrip("/")
        if line.endswith("/*") or line.endswith("/**"):
            line = line.rsplit("/", 1)[0] + "/"
        out.add(line)
        if not line.endswith("/"):
            out.add(line + "/")
    return out


def missing_ignore_rules(root: str) -> list[str]:
    try:
        with open_file(os.path.join(root, layout.GITIGNORE), "r", encoding="utf-8", errors="replace") as fh:
            have = ignore_rules(fh.read())
    except FileNotFoundError:
        have = set()
    return [r for r in IGNORE_RULES if r not in have]


def gitignore(t) -> dict:
    missing = missing_ignore_rules(t.root)
    if missing:
        return result("gitignore", "warning",
                      f".loopx/.gitignore lacks {', '.join(missing)} (machine-local files would be committed)",
                      "loopx doctor --fix (adds the rules to .loopx/.gitignore)", "add_ignore_rules")
    leaked = _git_not_ignored(t.project_dir)
    if leaked:
        return result("gitignore", "warning", f"git does not ignore {', '.join(leaked)} despite .loopx/.gitignore",
                      "check for a `!` rule in the repository's .gitignore and `git rm --cached` the file")
    return result("gitignore", "ok", ".loopx/lock and .loopx/cache/ are ignored by git")


def _git_not_ignored(project_dir: str) -> list[str]:
    """Paths git would not ignore (only when the project is a git work tree and git is installed)."""
    if gitcli.git_dir(project_dir) is None:
        return []
    paths = [f"{layout.DIRNAME}/{layout.LOCK}", f"{layout.DIRNAME}/{layout.SNAPSHOT}"]
    try:
        proc = gitcli.run(project_dir, "check-ignore", "--no-index", *paths, timeout=10, text=True)
    except gitcli.GitUnavailable:
        return []
    if proc.returncode not in (0, 1):
        return []
    ignored = {line.strip() for line in proc.stdout.splitlines()}
    return [p for p in paths if p not in ignored]

