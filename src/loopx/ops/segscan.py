"""One pass over every line of a store for ``doctor``: the line checks, the hash chain's links and
the anchored hashes, in parallel over the closed segments.

The log is cut into *units* (pieces of at most ``UNIT_BYTES`` of a file, ending on a line end);
``scan_unit`` reads one unit, ``CHUNK`` bytes at a time (each block of whole lines decoded once, each
line's JSON read in place; the cyclic GC paused, as records have no cycles), and checks each line once (CRC, JSON, the
record's shape and chain fields; ``codec.decode`` decides every line the fast path does not accept
outright, so the verdict is the same as a reader's) and returns a small summary:

- counts, the first bad lines, BOM, CRLF, torn bytes, unknown types, the newest ``ts``;
- ``seq`` as sorted runs ``[[first, last], ...]`` (so gaps and repeats are found across units
  without a set of every ``seq``), and each ``id`` as its 8-byte ``hash()``, sorted (for repeated
  ids; the processes are forked, so they share this process's hash seed; the merge writes them to
  a temporary file and counts repeats one range of values at a time, a set per range);
- the hash chain as *runs*: per node, the stretches of records where each line's ``prev`` is the
  hash of the node's previous line in the same unit (with a larger ``hlc``); only a run's first
  record (its ``prev``) and last record (its hash) leave the unit;
- each node's last ``seq`` per stream and each unit's ``seq`` range (the anchor check then reads
  only the units holding the records the anchors name), the ``seq`` of lines ``store.repaired``
  records account for, the gate records' lines, compressed (``GateRecords`` decodes them for the
  signing check), and each
  goal's last run and the runs that recorded a setup error (for the setup check).

``merge`` joins the summaries. A node's chain holds exactly when, over all its runs, exactly one
starts with ``prev: null``, every other run's ``prev`` is the hash of another run's last record of
the same node with a smaller ``hlc`` and no two runs name the same one, and in each stream the node's
``hlc`` grows in file order: the links then form one path in ``hlc`` order (docs/architecture.md,
"doctor"). When that does not hold, ``chainwalk.verify`` walks the log in order to name the first broken
link exactly, as before; a healthy store never takes that path.

Units run in forked processes (``os.fork``, Linux only; ``_results``) when the store is large enough
to gain from it; elsewhere, and for small stores, they run one after the other in this process.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import json
import marshal
import os
import re
import sys
import tempfile
import threading
import zlib
from array import array

from loopx.kernel.storage import chain, chainwalk, events, fold, layout
from loopx.kernel.storage.codec import CONFLICT, EDITED, decode, order_key
from loopx.kernel.storage.fs import open_file
from loopx.kernel.storage.layout import STREAMS
from loopx.kernel.storage.logfold import BAD_SAMPLES
from loopx.kernel.storage.store import Store

TYPE_CHECKING = False  # typing is not imported at run time (this module runs in forked scanners too)
if TYPE_CHECKING:
    from typing import BinaryIO

UNIT_BYTES = 2 << 20          # at most this much of one file per unit (a closed segment, 8 MiB, is
                              # four): a unit of one stream then spans the time of few of the other's,
                              # so the chain ends the merge holds waiting for the other stream stay few
PARALLEL_BYTES = 24 << 20     # below this, scan in this process (a pool costs ~50 ms to start)
_FORKED = False               # True in a process ``_results`` forked
_SEQ = None


def _seq_pattern():
    global _SEQ
    if _SEQ is None:
        _SEQ = re.compile(rb'"seq":(\d+)')
    return _SEQ


def units(root: str, stream: str) -> tuple[list[tuple], dict]:
    """The units of ``stream`` in file order: ``(path, fname, closed, start, end, last)`` tuples, and
    ``{"exists", "size", "unreadable"}`` about its files (never raises)."""
    store = Store(root)
    paths = [(p, True) for p in store.stream_paths(stream)[:-1]] + [(os.path.join(root, layout.open_log(stream)), False)]
    out: list[tuple] = []
    info: dict = {"exists": False, "size": 0, "unreadable": None}
    for path, closed in paths:
        fname = f"{stream}/{os.path.basename(path)}" if closed else os.path.basename(path)
        try:
            with open_file(path) as fh:
                size = os.fstat(fh.fileno()).st_size
                info["exists"] = True
                info["size"] += size
                start = 0
                while True:
                    end = min(size, start + UNIT_BYTES)
                    if end < size:  # cut at the next line end after ``end``
                        fh.seek(end)
                        while True:
                            block = fh.read(1 << 16)
                            if not block:
                                end = size
                                break
                            nl = block.find(b"\n")
                            if nl >= 0:
                                end += nl + 1
                                break
                            end += len(block)
                    out.append((path, fname, closed, start, end, end >= size))
                    if end >= size:
                        break
                    start = end
        except FileNotFoundError:
            continue
        except OSError as exc:  # permissions, a folder in the file's place, an I/O error
            info["exists"] = True
            info["unreadable"] = f"{exc.strerror or exc}"
    return out, info


def _seq_runs(seqs: list[int]) -> list[list[int]]:
    seqs.sort()
    runs: list[list[int]] = []
    for s in seqs:
        if runs and s <= runs[-1][1] + 1:
            if s > runs[-1][1]:
                runs[-1][1] = s
        else:
            runs.append([s, s])
    return runs


def scan_unit(unit: tuple, stream: str) -> dict:
    """Check every line of one unit (see the module docstring); never raises on damaged content."""
    path, fname, _closed, start, end, last = unit
    res = _empty()
    try:
        fh = open_file(path)  # closed below, once its open error is told apart
    except OSError as exc:
        res["unreadable"] = f"{exc.strerror or exc}"
        return res
    gc_was = gc.isenabled()
    gc.disable()  # the records are freed as they go (no cycles): the collector would only walk them
    try:
        with fh:
            _check_lines(fh, fname, start, end, last, res)
    except OSError as exc:  # a read failed half way: nothing of the unit counts, as when it cannot be opened
        return dict(_empty(), unreadable=f"{exc.strerror or exc}")
    finally:
        if gc_was:
            gc.enable()
    return res


def _empty() -> dict:
    return {"lines": 0, "good": 0, "bad_count": 0, "edited": 0, "bad": [], "conflict": False, "crlf": 0, "bom": False,
            "torn": 0, "unknown_types": {}, "newest_ts": None, "seq_runs": [], "seq_count": 0, "last_seq": 0,
            "ids": b"", "explained": {}, "gates": b"", "runs": {}, "disorder": None, "unchained": 0,
            "first_unchained": None, "node_last_seq": {}, "unreadable": None,
            "last_runs": {}, "setup_runs": []}


CHUNK = 1 << 18  # a unit is read this much at a time (its lines are never all held at once)


def _read_lines(fh, start: int, end: int, last: bool, res: dict):
    """Yield the complete lines of ``[start, end)`` of ``fh`` (without their newline), a block of
    ``_read_blocks`` at a time; the bytes after the last line end count as ``torn`` when ``last``."""
    for _off, block in _read_blocks(fh, start, end, last, res):
        lines = block.split(b"\n")
        lines.pop()  # each block ends with a newline: the empty piece after it
        yield from lines


def _read_blocks(fh, start: int, end: int, last: bool, res: dict):
    """Yield ``(offset, block)``: the complete lines of ``[start, end)`` of ``fh``, several at a
    time (each block ends with a newline; ``offset`` is where it starts in the file), reading
    ``CHUNK`` bytes at a time; the bytes after the last line end count as ``torn`` when ``last``."""
    fh.seek(start)
    left = end - start
    tail = b""
    at = start  # the file offset of ``tail``'s first byte
    first = True
    while left > 0:
        block = fh.read(min(CHUNK, left))
        if not block:
            break
        left -= len(block)
        if first:
            first = False
            if start == 0 and block.startswith(b"\xef\xbb\xbf"):
                res["bom"] = True
        if tail:
            block = tail + block
        cut = block.rfind(b"\n") + 1
        if cut:
            tail = block[cut:]
            yield at, block[:cut] if cut < len(block) else block
            at += cut
        else:
            tail = block
        del block
    if last:
        res["torn"] = len(tail)


def _check_lines(fh, fname: str, start: int, end: int, last: bool, res: dict) -> None:  # noqa: C901, PLR0912, PLR0915 - the scan loop: one pass over every line of the store, its checks inline because a call per line is what this loop cannot afford
    crc32 = zlib.crc32
    if _FORKED:  # OpenSSL's SHA-256 is several times faster (CPU instructions); its ~4 MB of RSS stay
        from hashlib import sha256 as sha  # in the forked process
    else:  # the main process: the built-in implementation, no OpenSSL
        chain.sha256()
        assert chain._SHA256 is not None  # set by the call above
        sha = chain._SHA256
    scan_once = json.decoder.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__; typeshed omits it
    check_shape = fold.check_shape
    shapes = _shapes()
    absent = _ABSENT
    check_fields = chain.check_fields
    canonical = chain.canonical
    reducers = fold.REDUCERS
    seqs: list[int] = []
    ids: list[int] = []
    unknown = res["unknown_types"]
    bad = res["bad"]
    runs: dict = res["runs"]        # node -> its runs, each [entry hlc, entry prev, entry seq, exit hlc,
                                    # exit hash, exit seq, records, largest seq] (plain data: ``marshal``)
    node_last: dict = {}            # node -> its current run (the last of runs[node])
    node_seq = res["node_last_seq"]
    newest = ""
    last_runs: dict = {}  # goal -> (order_key, run id) of its last run.started here
    # the few records doctor folds without the history: gates (the signing check), the machines
    # (node.registered, store.migrated: the chain and anchor checks' names)
    gate_types = frozenset([t for t in fold.REDUCERS if t.startswith("gate.")] + ["node.registered", "store.migrated"])
    special = gate_types | {"run.started", "run.finished", "run.reported", "store.repaired"}
    gate_lines: list[bytes] = []
    good = 0
    n = 0
    valid_nodes: set = set()
    for off, block in _read_blocks(fh, start, end, last, res):
        # the block decoded once: each line's JSON is read in place (``scan_once`` at its start must
        # end exactly at its end, which is the verdict of reading the line alone)
        try:
            text = block.decode()
        except UnicodeDecodeError:  # a line that is not UTF-8: every line of the block the slow way
            text = None
        same = text is not None and len(text) == len(block)  # ASCII: a line's offsets are the same in both
        b0 = s0 = 0
        blen = len(block)
        while b0 < blen:
            b1 = block.index(b"\n", b0)
            s1 = b1 if same else (text.index("\n", s0) if text is not None else 0)
            n += 1
            body = block[b0:b1]
            line_start = off + b0
            b0 = b1 + 1
            sb = s0
            s0 = s1 + 1
            rec = None
            head = None  # (seq, node, hlc, prev) as chainwalk.verify reads them
            fast = False
            # the fast path accepts only lines codec.decode accepts (a line as loopx writes it, its chain
            # fields checked as chain.check_fields does); codec.decode decides every other line
            if text is not None and body[-18:-10] == b',"crc":"' and body[-2:] == b'"}':
                try:
                    if crc32(body[:-18]) == int(body[-10:-2], 16):
                        obj, stop = scan_once(text, sb)
                        # a record as loopx writes it has every key (one without, or not an object,
                        # raises here and goes the slow way); fold.check_shape's checks with exact
                        # types (what JSON gives), any doubt (such as bool for int) to check_shape itself
                        rtype, seq, ts, goal, data = obj["type"], obj["seq"], obj["ts"], obj["goal"], obj["data"]
                        if stop == s1 and type(rtype) is str and type(seq) is int and type(ts) is str \
                                and type(obj["actor"]) is str and (goal is None or type(goal) is str) \
                                and type(data) is dict:
                            for key, exact, required, strs in shapes.get(rtype, ()):
                                v = data.get(key, absent)
                                if v is absent:
                                    if required:
                                        check_shape(obj)
                                        break
                                elif (exact is not None and type(v) not in exact) or \
                                        (strs and type(v) is list and not all(type(x) is str for x in v)):
                                    check_shape(obj)
                                    break
                            if "node" in obj:
                                node, hlc, prev = obj["node"], obj["hlc"], obj["prev"]
                                if node not in valid_nodes:
                                    check_fields(obj)
                                    valid_nodes.add(node)
                                if type(hlc) is not list or len(hlc) != 2 or type(hlc[0]) is not int \
                                        or type(hlc[1]) is not int or hlc[0] < 0 or hlc[1] < 0 \
                                        or not (prev is None or (type(prev) is str and len(prev) == 64)):
                                    check_fields(obj)  # raises: the same message as codec.decode
                                if body.count(b'"seq":') == 1 and body.count(b'"node":') == 1 \
                                        and body.count(b'"hlc":') == 1 and body.count(b'"prev":') == 1:
                                    head = (seq, node, hlc, prev)  # what the header says too
                                else:  # a repeated key: the chain reads the line's header, as chainwalk.verify does
                                    h5 = chainwalk.header(body)
                                    head = (h5[0], h5[2], h5[3], h5[4]) if h5 is not None else None
                            rec = obj
                            fast = True
                except (KeyError, ValueError, StopIteration, UnicodeDecodeError, TypeError, RecursionError):
                    rec, head = None, None
            if rec is None:
                if body[-1:] == b"\r":
                    res["crlf"] += 1
                if not body.strip():
                    continue
                try:
                    rec = decode(body)  # the readers' own verdict
                except ValueError as exc:
                    conflict = body.startswith(CONFLICT)
                    res["conflict"] = res["conflict"] or conflict
                    res["bad_count"] += 1
                    res["edited"] += str(exc) == EDITED
                    if len(bad) < BAD_SAMPLES:
                        m = _seq_pattern().search(body)
                        bad.append({"line": n, "offset": line_start, "reason": str(exc), "conflict": conflict,
                                    "text": body[:80].decode("utf-8", "replace"), "file": fname,
                                    "seq": int(m[1]) if m and len(m[1]) < 19 else None})
                    rec = None
                h5 = chainwalk.header(body)
                if h5 is not None:
                    head = (h5[0], h5[2], h5[3], h5[4])
            if rec is not None:
                good += 1
                if not fast:
                    seq, rtype, ts = rec["seq"], rec["type"], rec.get("ts")
                seqs.append(seq)
                rid = rec.get("id")
                if rid:
                    # the id's hash: the pool's processes are forked, so they share this process's hash
                    # seed and their hashes compare (a collision among a million ids: ~1e-8)
                    ids.append(hash(rid) if type(rid) is str else hash(repr(rid)))
                if rtype not in reducers:
                    unknown[rtype] = unknown.get(rtype, 0) + 1
                if type(ts) is str and ts > newest:
                    newest = ts
                if rtype in special:
                    if rtype in gate_types:
                        gate_lines.append(body)  # the main process decodes them again when it folds them
                    else:
                        _special(rec, rtype, last_runs, res)
                if head is None and "node" in rec:
                    head = (seq, rec.get("node") or "", rec.get("hlc"), rec.get("prev"))
            if head is None:
                if rec is not None:
                    res["unchained"] += 1
                    if res["first_unchained"] is None:
                        res["first_unchained"] = rec["seq"]
                continue
            seq, node, hlc, prev = head
            h = sha(body).hexdigest() if fast else sha(canonical(body)).hexdigest()
            run = node_last.get(node)  # the node's current run: its last record's hlc [3] and hash [4]
            if run is not None and prev == run[4] and hlc > run[3]:
                run[3] = hlc
                run[4] = h
                run[5] = seq
                run[6] += 1
                if seq > run[7]:
                    run[7] = seq
            else:
                if run is not None and not hlc > run[3] and res["disorder"] is None:
                    res["disorder"] = {"node": node, "seq": seq}
                run = node_last[node] = [hlc, prev, seq, hlc, h, seq, 1, seq]
                if node in runs:
                    runs[node].append(run)
                else:
                    runs[node] = [run]
    node_seq.update({node: max(r[7] for r in rs) for node, rs in runs.items()})
    res["lines"] = n
    res["good"] = good
    res["newest_ts"] = newest or None
    res["last_runs"] = last_runs
    res["seq_count"] = len(seqs)
    res["last_seq"] = max(seqs) if seqs else 0
    res["seq_runs"] = _seq_runs(seqs)
    if ids:
        ids.sort()
        res["ids"] = array("q", ids).tobytes()
    if gate_lines:
        res["gates"] = zlib.compress(b"\n".join(gate_lines), 1)


_ABSENT = object()
_SHAPES: dict | None = None


def _shapes() -> dict:
    """{type: ((field, its exact types or None for any, required, strs), ...)}: ``fold.check_data``'s
    plans (``events.plans``) with the exact types a JSON value of each field may have."""
    global _SHAPES
    if _SHAPES is None:
        _SHAPES = {t: tuple((k, frozenset(types) if types else None, required, strs) for k, types, required, strs in plan)
                   for t, plan in events.plans().items()}
    return _SHAPES


def _special(rec: dict, rtype: str, last_runs: dict, res: dict) -> None:
    """What the setup and seq checks keep of a run or repair record (rare lines, out of the loop)."""
    if rtype == "run.started":  # each goal's last run (fold order), for the setup check
        key = order_key(rec)
        seen = last_runs.get(rec["goal"])
        if seen is None or key > seen[0]:
            last_runs[rec["goal"]] = (key, rec["data"].get("run_id"))
    elif rtype in ("run.finished", "run.reported"):
        if isinstance(rec["data"].get("setup_error"), dict):
            res["setup_runs"].append(rec["data"].get("run_id"))
    elif rtype == "store.repaired" and isinstance(rec.get("data"), dict):
        d = rec["data"]
        ex = res["explained"].setdefault(str(d.get("file", "")), [])
        ex.extend(q for q in d.get("seqs") or [] if isinstance(q, int))


_ID_PARTS = 64  # the id digests are counted for repeats one range of values at a time (at 1M records,
                # 16k digests each: a small set, whatever the size of the store up to ~100M records)
_ID_CUTS = [-(1 << 63) + (i << 64) // _ID_PARTS for i in range(_ID_PARTS)]  # where each range starts


def _results(fn, jobs: list[tuple], total_bytes: int, used: dict):
    """Yield ``fn(*job)`` for each job, in order: over forked processes when that pays off, else
    here. ``used["processes"]`` says which (0: here).

    Process ``w`` of ``n`` runs jobs ``w, w + n, ...`` and sends each result (``marshal``: plain
    data) through its own pipe (widened to 1 MiB: a result or so waits there, never more); a job a
    process could not run (an exception, the process gone) runs here. Plain ``os.fork`` and pipes,
    not ``multiprocessing``: no import of it, no threads, and each child starts as small as this
    process."""
    workers = _workers()
    done = 0
    used["processes"] = 0
    if workers >= 2 and total_bytes >= PARALLEL_BYTES and len(jobs) >= 2:
        n = min(workers, len(jobs))
        pipes: list = [None] * n  # a process that could not be started: its jobs run here
        pids: list[int] = []
        for w in range(n):
            try:
                r, wfd = os.pipe()
            except OSError:
                break
            try:
                pid = os.fork()
            except OSError:
                os.close(r)
                os.close(wfd)
                break
            if pid == 0:  # pragma: no cover - the child (coverage does not follow a fork)
                _child(fn, jobs[w::n], wfd, [f for f in pipes if f is not None] + [r])
            os.close(wfd)
            _widen(r)
            pipes[w] = os.fdopen(r, "rb")
            pids.append(pid)
        if pids:
            used["processes"] = len(pids)
            try:
                for k in range(len(jobs)):
                    f = pipes[k % n]
                    ok, res = _receive(f) if f is not None else (False, None)
                    if f is not None and ok is None:  # the process is gone: its jobs run here
                        f.close()
                        pipes[k % n] = None
                    done += 1
                    yield res if ok else fn(*jobs[k])
            finally:
                for f in pipes:
                    if f is not None:
                        f.close()  # a child still writing gets EPIPE and ends
                for pid in pids:
                    try:
                        os.waitpid(pid, 0)
                    except ChildProcessError:
                        pass
            return
    for job in jobs[done:]:
        yield fn(*job)


def _widen(fd: int) -> None:
    """Let the pipe hold a whole result (up to 1 MiB), so a process goes on with its next unit
    while this one merges the results before it."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


def _child(fn, jobs: list[tuple], wfd: int, others: list) -> None:  # pragma: no cover - runs forked
    """Run ``jobs`` in a forked process, sending each ``(ok, result)`` to ``wfd``; never returns."""
    global _FORKED
    _FORKED = True
    try:
        for f in others:
            os.close(f if isinstance(f, int) else f.fileno())
        with os.fdopen(wfd, "wb") as out:
            for job in jobs:
                try:
                    data = marshal.dumps((True, fn(*job)))
                except Exception:  # the parent runs the job again and sees what it does
                    data = marshal.dumps((False, None))
                out.write(len(data).to_bytes(8, "little"))
                out.write(data)
                out.flush()
    finally:
        os._exit(0)


def _receive(f) -> tuple:
    """One ``(ok, result)`` from a child's pipe; ``(None, None)`` when the child is gone."""
    head = f.read(8)
    if len(head) < 8:
        return None, None
    size = int.from_bytes(head, "little")
    data = f.read(size)
    if len(data) < size:
        return None, None
    try:
        return marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return False, None


MAX_WORKERS = 8  # each holds one unit (up to UNIT_BYTES and its lines) while it checks it


def _workers() -> int:
    """How many processes to scan with: the cores this process may use (at most MAX_WORKERS); 1 off
    Linux (only there is ``fork`` safe) and in a process that runs other threads (a fork copies
    their locks in whatever state they are)."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return 1
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_WORKERS))


def scan_store(root: str) -> dict:
    """Scan both streams of the store at ``root``. Returns ``{"streams": {name: StreamScan}, "chain": the
    chain summary (``Merge.chain``), "anchors": ``AnchorFacts``, "gates": [the gate records, in the order a
    reader folds them], "processes": how many processes scanned (0: this one)}``."""
    jobs: list[tuple] = []
    merger = Merge()
    total = 0
    for name in STREAMS:
        us, info = units(root, name)
        merger.stream(name, info)
        for u in us:
            jobs.append((u, name))
            total += u[4] - u[3]
    jobs = _by_time(jobs)
    used: dict = {}
    try:
        for (u, name), res in zip(jobs, _results(scan_unit, jobs, total, used), strict=True):
            merger.add(name, u, res)
        return dict(merger.finish(), processes=used.get("processes", 0))
    finally:
        merger.close()


def _by_time(jobs: list[tuple]) -> list[tuple]:
    """``jobs`` ordered by the clock of each unit's first line, so the two streams' units that cover
    the same time are merged together and the chain ends waiting for their other half stay few;
    each stream's units keep their file order (if the clock says otherwise, nothing is reordered)."""
    match = chainwalk.header_match()
    keyed = []
    for job in jobs:
        path, _f, _c, start, _e, _l = job[0]
        try:
            with open_file(path) as fh:
                fh.seek(start)
                m = match(fh.readline(1 << 16))
        except OSError:
            m = None
        if m is None:
            return jobs
        keyed.append(((int(m[4]), int(m[5])), job))
    ordered = [job for _k, job in sorted(keyed, key=lambda kj: kj[0])]
    for name in {job[1] for job in jobs}:
        if [j for j in ordered if j[1] == name] != [j for j in jobs if j[1] == name]:
            return jobs
    return ordered


class Merge:
    """Joins ``scan_unit`` results as they come (each stream's units in file order) and keeps only
    what the whole store needs: counts, the ``seq`` runs, the id digests, the open chain ends."""

    def __init__(self) -> None:
        self.streams: dict = {}
        self.explained: dict[str, set] = {}
        self.units: dict = {}  # stream -> [(unit, smallest seq, largest seq)] in file order
        self.last_seq: dict = {}
        self.gates: dict = {}   # stream -> [(the order units were added in, compressed gate lines)]
        self._ids: BinaryIO | None = None  # a temporary file holding every unit's sorted id digests
        self._ids_end = 0
        self._added = 0
        self.last_runs: dict = {}
        self.setup_runs: set = set()
        self._seq: dict = {}
        # the chain
        self.chain: dict = {"records": 0, "chained": 0, "nodes": {}, "unchained": 0, "holds": True, "why": None}
        self._exits: dict = {}    # (node, hash) -> exit hlc, not named by any run's prev yet
        self._waiting: dict = {}  # (node, prev) -> entry hlc, whose record is not seen yet
        self._roots: dict = {}
        self._heads: dict = {}
        self._last_hlc: dict = {}  # (stream, node) -> hlc of its last record so far (file order)

    def stream(self, name: str, info: dict) -> None:
        s = {"exists": info["exists"], "size": info["size"], "lines": 0, "good": 0, "bad_count": 0, "edited": 0,
             "bad": [],
             "conflict": False, "torn_bytes": 0, "bom": False, "crlf": 0, "last_seq": 0, "missing_seqs": 0,
             "missing_sample": [], "dup_seqs": 0, "dup_ids": 0, "unknown_types": {}, "newest_ts": None}
        if info["unreadable"]:
            s["unreadable"] = info["unreadable"]
        self.streams[name] = s
        self._seq[name] = {"runs": [], "count": 0, "ids": [], "file_lines": {}}

    def add(self, name: str, unit: tuple, r: dict) -> None:
        s, acc = self.streams[name], self._seq[name]
        self._add_counts(s, acc, unit, r)
        acc["runs"].extend(r["seq_runs"])
        acc["count"] += r["seq_count"]
        s["last_seq"] = max(s["last_seq"], r["last_seq"])
        if r["ids"]:
            if self._ids is None:
                self._ids = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            self._ids.write(r["ids"])
            digests = array("q", r["ids"])  # sorted: where each range of values (``_ID_PARTS``) starts
            acc["ids"].append((self._ids_end, [8 * bisect.bisect_left(digests, b) for b in _ID_CUTS] + [len(r["ids"])]))
            self._ids_end += len(r["ids"])
        for f, q in r["explained"].items():
            self.explained.setdefault(f, set()).update(q)
        if r["seq_runs"]:
            self.units.setdefault(name, []).append((unit, r["seq_runs"][0][0], r["last_seq"]))
        for node, q in r["node_last_seq"].items():
            if q > self.last_seq.get((node, name), 0):
                self.last_seq[(node, name)] = q
        if r["gates"]:
            self._added += 1
            self.gates.setdefault(name, []).append((self._added, r["gates"]))
        for goal, last in r["last_runs"].items():
            if goal not in self.last_runs or last[0] > self.last_runs[goal][0]:
                self.last_runs[goal] = last
        self.setup_runs.update(x for x in r["setup_runs"] if isinstance(x, str))
        self._add_chain(name, r)

    @staticmethod
    def _add_counts(s: dict, acc: dict, unit: tuple, r: dict) -> None:
        """Add one unit's line counts, bad-line samples (numbered within their file), torn tail and
        record types to its stream's summary ``s``."""
        path, fname, closed, _start, _end, last = unit
        if r["unreadable"]:
            s["unreadable"] = r["unreadable"]
        base = acc["file_lines"].get(fname, 0)
        for b in r["bad"]:
            if len(s["bad"]) < BAD_SAMPLES:
                s["bad"].append(dict(b, line=b["line"] + base))
        acc["file_lines"][fname] = base + r["lines"]
        for k in ("lines", "good", "bad_count", "edited", "crlf"):
            s[k] += r[k]
        s["conflict"] = s["conflict"] or r["conflict"]
        s["bom"] = s["bom"] or r["bom"]
        if last and r["torn"]:
            if closed:
                s.setdefault("segment_torn", []).append(os.path.basename(path))
            else:
                s["torn_bytes"] = r["torn"]
        for k, v in r["unknown_types"].items():
            s["unknown_types"][k] = s["unknown_types"].get(k, 0) + v
        if r["newest_ts"] and (s["newest_ts"] is None or r["newest_ts"] > s["newest_ts"]):
            s["newest_ts"] = r["newest_ts"]

    def close(self) -> None:
        """Remove the temporary file of id digests (also when the scan stops half way)."""
        if self._ids is not None:
            self._ids.close()
            self._ids = None

    def _fail(self, why: str) -> None:
        if self.chain["holds"]:
            self.chain["holds"], self.chain["why"] = False, why

    def _add_chain(self, name: str, r: dict) -> None:  # noqa: C901, PLR0912 - a loop over every run of the store (250k at 1M records): its links inline, a call per run is what it cannot afford
        out = self.chain
        out["unchained"] += r["unchained"]
        if r["disorder"] is not None:
            self._fail(f"{name} seq {r['disorder']['seq']}: the clock goes back")
        exits, waiting, roots, heads, last_hlc = self._exits, self._waiting, self._roots, self._heads, self._last_hlc
        fail = self._fail
        for node, unit_runs in r["runs"].items():
            first = True
            count = 0
            head = heads.get(node)
            top = head[0] if head is not None else None
            x_hlc = None
            for e_hlc, e_prev, e_seq, x_hlc, x_hash, x_seq, n, _top in unit_runs:
                if first:
                    lh = last_hlc.get((name, node))
                    if lh is not None and not e_hlc > lh:
                        fail(f"{name} seq {e_seq}: the clock goes back")
                    first = False
                count += n
                if e_prev is None:
                    roots[node] = roots.get(node, 0) + 1
                else:  # the run's first record: the exit its prev names (seen before, or waited for)
                    key = (node, e_prev)
                    x = exits.pop(key, None)
                    if x is not None:
                        if not x < e_hlc:
                            fail(f"{name} seq {e_seq}: its prev names a later record")
                    elif key in waiting:
                        fail(f"{name} seq {e_seq}: two records name the same prev")
                    else:
                        waiting[key] = e_hlc
                key = (node, x_hash)
                e = waiting.pop(key, None)
                if e is not None:
                    if not x_hlc < e:
                        fail(f"{name} seq {x_seq}: a prev names a later record")
                elif key in exits:
                    fail(f"{name} seq {x_seq}: two records with the same bytes")
                else:
                    exits[key] = x_hlc
                if top is None or x_hlc > top:
                    top, head = x_hlc, (x_hlc, x_hash, name, x_seq)
            if head is not None:
                heads[node] = head
            if x_hlc is not None:
                last_hlc[(name, node)] = x_hlc
            out["chained"] += count
            out["nodes"][node] = out["nodes"].get(node, 0) + count

    def finish(self) -> dict:
        for name, s in self.streams.items():
            acc = self._seq[name]
            # seq: repeats are the records beyond the distinct values; gaps are what no run covers
            runs = sorted(acc["runs"])
            distinct, top = 0, 0
            gaps: list[tuple[int, int]] = []
            for a, b in runs:
                if a > top + 1:
                    gaps.append((top + 1, a - 1))
                if b > top:
                    distinct += b - max(a, top + 1) + 1
                    top = b
            s["dup_seqs"] = acc["count"] - distinct
            ok = self.explained.get(layout.open_log(name), set())
            missing = 0
            sample: list[int] = []
            for a, b in gaps:
                missing += b - a + 1 - (sum(1 for q in ok if a <= q <= b) if ok else 0)
                q = a
                while q <= b and len(sample) < 10:
                    if q not in ok:
                        sample.append(q)
                    q += 1
            s["missing_seqs"], s["missing_sample"] = missing, sample
            if acc["ids"] and self._ids is not None:  # the file exists once a unit had ids
                self._ids.flush()
                fd = self._ids.fileno()
                # each unit's digests are sorted and cut into ranges of values: one range of every
                # unit at a time is read back from the file, and its repeats counted by a set
                dups = 0
                for p in range(_ID_PARTS):
                    part = array("q")
                    for at, cuts in acc["ids"]:
                        if cuts[p + 1] > cuts[p]:
                            part.frombytes(os.pread(fd, cuts[p + 1] - cuts[p], at + cuts[p]))
                    dups += len(part) - len(set(part))
                acc["ids"] = None
                s["dup_ids"] = dups
        self.close()
        out = self.chain
        if self._waiting:
            self._fail("a prev names no record of its node")
        if any(v != 1 for v in self._roots.values()) or set(self._roots) != set(out["nodes"]):
            self._fail("a node's first record is missing or repeated")
        if out["chained"] and out["unchained"]:
            self._fail("records without chain fields")
        out["records"] = out["chained"] + out["unchained"]
        out["heads"] = {node: {"hash": h, "stream": st, "seq": seq, "hlc": list(hlc)}
                        for node, (hlc, h, st, seq) in self._heads.items()}
        repaired = {(f.split(".")[0], q) for f, qs in self.explained.items() for q in qs}
        return {"streams": self.streams, "chain": out, "gates": GateRecords(self.gates),
                "setup": {"last_runs": {g: rid for g, (_k, rid) in self.last_runs.items()},
                          "runs_with_error": self.setup_runs},
                "anchors": AnchorFacts(self.units, self.last_seq, repaired,
                                       {n: list(h[0]) for n, h in self._heads.items()})}


class AnchorFacts:
    """The log's side of ``anchors.compare`` from the one pass: ``last_seq`` {(node, stream): seq},
    ``newest`` {node: hlc}, ``repaired`` {(stream, seq)}; ``hashes(keys)`` reads only the units whose
    ``seq`` range holds an anchored record (anchors name recent heads: usually the newest units)."""

    def __init__(self, units: dict, last_seq: dict, repaired: set, newest: dict) -> None:
        self.units, self.last_seq, self.repaired, self.newest = units, last_seq, repaired, newest
        self._known: dict = {}

    def hashes(self, keys: set) -> dict:
        """{(node, stream, seq): hex} for the ``keys`` the log holds (the line's hash as
        ``chainwalk.records`` reads the line: its header, else the decoded record; the last such line
        in file order when several match)."""

        todo = {k for k in keys if k not in self._known}
        for stream in sorted({k[1] for k in todo if isinstance(k[1], str)}):
            seqs = {k[2] for k in todo if k[1] == stream}
            found: dict = {}
            for unit, low, high in self.units.get(stream, []):
                if not any(low <= q <= high for q in seqs):
                    continue
                path, _f, _c, start, end, _l = unit
                try:
                    with open_file(path) as fh:
                        for body in _read_lines(fh, start, end, False, {}):  # a chunk at a time
                            self._hash_line(body, stream, seqs, todo, found)
                except OSError:
                    continue
            self._known.update(found)
        for k in todo:
            self._known.setdefault(k, "")
        return {k: self._known[k] for k in keys}

    @staticmethod
    def _hash_line(body: bytes, stream: str, seqs: set, todo: set, found: dict) -> None:
        head = chainwalk.header(body)
        if head is not None:
            seq, node = head[0], head[2]
        else:
            try:
                rec = decode(body)
            except ValueError:
                return
            if "node" not in rec:
                return
            seq, node = rec["seq"], rec.get("node")
        if seq in seqs and (node, stream, seq) in todo:
            found[(node, stream, seq)] = chain.line_hash(body)


class GateRecords:
    """The gate records (and the machines': ``node.registered``, ``store.migrated``) the pass picked
    out, kept as each unit's compressed lines; iterating decodes them one at a time, in the order a
    reader folds them (``_reader_order``), without holding them all when each stream is already in
    that order (a log never merged)."""

    def __init__(self, blobs: dict) -> None:
        self.blobs = blobs  # stream -> [(added, compressed lines)], in file order

    def _records(self, stream: str):
        for added, blob in self.blobs.get(stream, []):
            for i, body in enumerate(zlib.decompress(blob).split(b"\n")):
                rec = decode(body)
                yield (order_key(rec), added, i), rec

    def signed(self) -> set:
        """The ids of the gates some record of which carries a ``signature`` (only lines that could
        name one are decoded): no other gate can end up signed."""
        out: set = set()
        for stream_blobs in self.blobs.values():
            for _added, blob in stream_blobs:
                for body in zlib.decompress(blob).split(b"\n"):
                    if b'"signature"' in body or b"\\u" in body:  # the key, or escaped characters
                        rec = decode(body)
                        d = rec.get("data")
                        if rec["type"].startswith("gate.") and isinstance(d, dict) and "signature" in d:
                            out.add(d.get("gate_id"))
        return out

    def __iter__(self):
        keys = []
        for stream in self.blobs:
            prev = None
            for key, _rec in self._records(stream):
                if prev is not None and key < prev:
                    # out of order (a merged log): sort them all, as before
                    every = sorted((k[1:], rec) for s in self.blobs for k, rec in self._records(s))
                    yield from _reader_order([rec for _k, rec in every])
                    return
                prev = key
            keys.append(self._records(stream))
        yield from _each_once(rec for _key, rec in heapq.merge(*keys, key=lambda kr: kr[0]))


def _each_once(recs):
    """``recs`` without a record whose id came before (a record merged in twice is folded once)."""
    seen: set = set()
    for rec in recs:
        rid = rec.get("id") or (rec["seq"], rec.get("crc"))
        if not isinstance(rid, (str, tuple)):
            rid = repr(rid)
        if rid not in seen:
            seen.add(rid)
            yield rec


def _reader_order(recs: list[dict]) -> list[dict]:
    """``recs`` in the order a reader folds them: ``order_key`` order, each id once (which is file
    order for a log that was never merged)."""
    return list(_each_once(sorted(recs, key=order_key)))
