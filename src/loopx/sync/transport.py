"""``loopx sync``: the store exchanged through a git remote's refs (docs/multi-agent.md, "Several
machines through git"; docs/architecture.md, "Sync through git").

Layout on the remote (plain git objects; nothing in the working tree or on a branch):

- ``refs/loopx/nodes/<node>``: one commit per sync by that node, whose tree holds ``events.jsonl``
  and ``evidence.jsonl`` with every record that node wrote, byte for byte (the lines carry their
  own CRC, ``hlc`` and ``prev`` chain). Only its node pushes it and each push is a fast-forward:
  never contended.
- ``refs/loopx/claims``: one shared commit chain whose tree holds ``claims.json``
  (``{todo_id: {"node", "host", "agent", "at", "until"}}``). A claim counts across machines only
  once the push that carries it succeeded; the push names the commit it was built on
  (``--force-with-lease``), so the remote's atomic ref update is the compare-and-swap.

Other nodes' records are fetched into ``refs/loopx/fetched/*`` and appended verbatim to the local
streams (ids already present are skipped); the store then folds the union in ``(hlc, node, id)``
order (``codec.order_key``), so every clone holding the same records computes the same state.
Every git call is bounded by ``LOOPX_SYNC_TIMEOUT`` seconds (default 30); the hooks never call this.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from json import loads

from loopx.config import env, seconds
from loopx.errors import Conflict, StateError
from loopx.kernel.read import queries
from loopx.kernel.storage import clock, gitcli, layout, machines
from loopx.kernel.storage.fs import MOST_CACHE, append_fd, atomic_write, locked, open_file
from loopx.kernel.storage.store import decode
from loopx.sync import streams
from loopx.sync.skew import ClaimClock

NODES = "refs/loopx/nodes/"
FETCHED = "refs/loopx/fetched/"
NO_ASKPASS = {"GIT_ASKPASS": "true"}  # a remote that wants a password fails at once
CLAIMS = "refs/loopx/claims"
GATES = "refs/loopx/ledger/gates"
SPENDS = "refs/loopx/ledger/spends"
RESERVATIONS = "refs/loopx/ledger/reservations"
LEDGERS = {CLAIMS: "claims.json", GATES: "gates.json", SPENDS: "spends.json", RESERVATIONS: "reservations.json"}
STREAMS = ("events", "evidence")
CAS_TRIES = 30
# every ledger in one fetch (globs never fail on a remote that lacks them yet)
LEDGER_SPECS = ("+refs/loopx/claim*:refs/loopx/claim*", "+refs/loopx/ledger/*:refs/loopx/ledger/*")


class RemoteUnreachable(StateError):
    """The remote could not be reached in time (exit 3); local work goes on."""

    code = "remote_unreachable"


def timeout() -> float:
    """Seconds each git call may take (``LOOPX_SYNC_TIMEOUT``, default 30, at least 1; UsageError
    when malformed)."""
    return seconds("LOOPX_SYNC_TIMEOUT", 1.0)


class Git:
    """``git`` run in the project with a bounded time and loopx's own commit identity."""

    def __init__(self, cwd: str, remote: str):
        self.cwd, self.remote = cwd, remote
        # the other nodes' refs as this remote has them: `origin`'s where they always were, any
        # other remote's in a namespace of its own (a backup remote never shows origin's heads)
        self.fetched = FETCHED if remote == "origin" else \
            "refs/loopx/remotes/" + "".join(c if c.isalnum() or c in "._-" else "_" for c in remote) + "/fetched/"
    def run(self, *args: str, data: bytes | None = None, check: bool = True) -> gitcli.Result:
        """``git ARGS`` as loopx (its own commit identity, no prompt, no askpass; a Result). Raises
        StateError (exit 3) when git fails with ``check``, RemoteUnreachable when it takes longer
        than ``timeout()``."""
        try:
            p = gitcli.run(self.cwd, *args, data=data, timeout=timeout(), identity=True, env=NO_ASKPASS)
        except gitcli.GitUnavailable as exc:
            if exc.timed_out:
                raise RemoteUnreachable(f"git {args[0]} took longer than {timeout():g} s",
                                        "the loop goes on locally; shared claims wait until a sync reaches the "
                                        "remote (LOOPX_SYNC_TIMEOUT sets the limit)",
                                        details={"reason": "sync_timeout"}) from exc
            raise StateError("git is not installed", "install git; sync uses your own git",
                             details={"reason": "sync_needs_git"}) from exc
        if check and p.returncode != 0:
            raise StateError(f"git {args[0]} failed: {_whole(p.stderr) or p.returncode}",
                             "see `git` output; loopx changed nothing in your working tree or branches")
        return p

    def out(self, *args: str) -> str:
        return self.run(*args).stdout.decode().strip()

    def ref(self, name: str) -> str | None:
        p = self.run("rev-parse", "-q", "--verify", name + "^{commit}", check=False)
        return p.stdout.decode().strip() or None if p.returncode == 0 else None

    def blob(self, ref: str, path: str) -> bytes:
        p = self.run("cat-file", "blob", f"{ref}:{path}", check=False)
        return p.stdout if p.returncode == 0 else b""

    def commit(self, files: dict[str, bytes], parent: str | None, message: str) -> str:
        entries = []
        for name, body in sorted(files.items()):
            sha = self.run("hash-object", "-w", "--stdin", data=body).stdout.decode().strip()
            entries.append(f"100644 blob {sha}\t{name}\n")
        tree = self.run("mktree", data="".join(entries).encode()).stdout.decode().strip()
        args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
        return self.out(*args)

    def commit_ref(self, ref: str, files: dict[str, bytes], parent: str | None, message: str) -> str:
        """Write a commit whose tree is exactly ``files`` on top of ``parent`` and point the local
        ``ref`` at it, in one ``git fast-import`` (instead of hash-object, mktree, commit-tree and
        update-ref). Returns the commit."""
        msg = message.encode()
        parts = [f"commit {ref}\nmark :1\ncommitter loopx <loopx@localhost> {int(time.time())} +0000\n".encode(),
                 b"data %d\n" % len(msg), msg, b"\n"]
        if parent:
            parts.append(f"from {parent}\n".encode())
        parts.append(b"deleteall\n")
        for name, body in sorted(files.items()):
            parts += [f"M 100644 inline {name}\n".encode(), b"data %d\n" % len(body), body, b"\n"]
        parts.append(b"\nget-mark :1\n")
        out = self.run("fast-import", "--quiet", "--force", data=b"".join(parts)).stdout.decode().split()
        return out[-1] if out else self.out("rev-parse", ref)

    def fetch(self, *specs: str) -> bool:
        """``git fetch REMOTE SPECS``. False when a named (non-glob) ref is not on the remote.
        Raises RemoteUnreachable."""
        p = self.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", self.remote, *specs, check=False)
        if p.returncode != 0:
            err = p.stderr.decode("utf-8", "replace").strip()
            if "couldn't find remote ref" in err:
                return False
            raise RemoteUnreachable(f"cannot fetch from remote {self.remote!r}: {_whole(err) or p.returncode}",
                                    "the loop goes on locally; shared claims wait until the remote answers")
        return True

    def push(self, src: str, dst: str, expect: str | None) -> bool:
        """Push ``src`` to ``dst`` if the remote still has ``expect`` there (None: no such ref).
        True on success, False when the remote moved on (the compare-and-swap failed)."""
        lease = f"--force-with-lease={dst}:{expect or ''}"
        p = self.run("push", "--quiet", "--porcelain", lease, self.remote, f"{src}:{dst}", check=False)
        if p.returncode == 0:
            return True
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        if "stale info" in text or "rejected" in text or "non-fast-forward" in text or "fetch first" in text:
            return False
        raise RemoteUnreachable(f"cannot push to remote {self.remote!r}: {_whole(text) or p.returncode}",
                                "the loop goes on locally; shared claims wait until the remote answers")


def _whole(text) -> str:
    """All of git's message on one line (its lines joined with " / "): the cause is often not the
    last line ("fatal: '/x' does not appear to be a git repository / fatal: Could not read from
    remote repository. / Please make sure you have the correct access rights and the repository
    exists.")."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [" ".join(x.split()) for x in str(text or "").splitlines()]
    return " / ".join(x for x in lines if x)[:2000]


def remote_cache(cache: dict, remote: str) -> dict:
    """The part of the sync cache (``streams.read_heads``) that belongs to ``remote``: push position,
    imported heads. ``origin``'s is the cache itself (as before); any other remote keeps its own
    under ``remotes``, so syncing to a second remote pushes what that remote lacks."""
    if remote == "origin":
        return cache
    mine = cache.setdefault("remotes", {})
    if not isinstance(mine, dict):
        mine = cache["remotes"] = {}
    part = mine.setdefault(remote, {})
    if not isinstance(part, dict):
        part = mine[remote] = {}
    return part


def project_git(store, remote: str | None) -> Git:
    """A Git for the store's project. Raises StateError when it is not a git checkout or has no
    such remote."""
    cwd = store.project_dir
    if gitcli.checkout(cwd) is None:
        raise StateError("the project is not a git repository", "sync exchanges the store through git: "
                         "`git init` and add a remote", details={"reason": "no_git_repo"})
    remote = remote or env("LOOPX_SYNC_REMOTE") or "origin"
    g = Git(cwd, remote)
    if g.run("remote", "get-url", remote, check=False).returncode != 0:
        raise StateError(f"the project has no git remote {remote!r}", "add one (`git remote add origin URL`) "
                         "or name another remote", details={"reason": "no_remote", "field": "remote", "remote": remote})
    return g


# ------------------------------------------------------------------ records
def known_ids(store) -> set:
    """Every record id in the local store (both streams)."""
    seen = set()
    for stream in STREAMS:
        for rec in store.iter_records(stream):
            if rec.get("id"):
                seen.add(rec["id"])
    return seen


def import_lines(store, blobs: list[dict[str, bytes]], carriers: list[str] | None = None) -> tuple[int, bool]:
    """Append each good line of ``blobs`` whose id the store lacks, verbatim, to the open stream
    files (under the store lock). ``carriers``: the node whose chain each blob came from; when
    given, a line of that node is known to be new (it arrives once, through its own chain) and the
    store's ids are read only if some line belongs to another node; without it they are always
    read (before the lock, which is safe because only this clone's own new records can appear
    meanwhile and the caller holds the sync lock). Returns (lines appended, complete: False when a
    stream was left for the next sync because its tail is torn)."""
    added, complete = 0, True
    if any(_torn(store, stream) for stream in STREAMS):
        store.transact(lambda state, now: [], actor="loopx:sync")  # the writer repairs a torn tail first
    decoded = []
    foreign = carriers is None
    for i, files in enumerate(blobs):
        group = {}
        for stream in STREAMS:
            recs = []
            for line in files.get(stream, b"").split(b"\n"):
                if not line:
                    continue
                try:
                    rec = decode(line, loads)
                except ValueError:
                    continue  # a damaged line on the remote: never imported
                if carriers is not None and rec.get("node") != carriers[i]:
                    foreign = True
                recs.append((rec.get("id"), line))
            group[stream] = recs
        decoded.append(group)
    seen = known_ids(store) if foreign else set()
    with store.lock():
        for stream in STREAMS:
            if _torn(store, stream):
                complete = False
                continue  # torn again since (a writer killed just now): the next sync imports it
            new = []
            for group in decoded:
                for rid, line in group[stream]:
                    if rid in seen:
                        continue
                    seen.add(rid)
                    new.append(line + b"\n")
            if not new:
                continue
            blob = b"".join(new)
            fd = append_fd(store.path(layout.open_log(stream)))
            try:
                written = os.write(fd, blob)
                while written < len(blob):
                    written += os.write(fd, blob[written:])
                os.fsync(fd)
            finally:
                os.close(fd)
            added += len(new)
    return added, complete


def _torn(store, stream: str) -> bool:
    """True when the open ``stream`` file does not end on a complete line."""
    try:
        with open_file(store.path(layout.open_log(stream))) as fh:
            if fh.seek(0, os.SEEK_END) == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def ensure_node(store) -> str:
    """This clone's node id, after naming its machine in the store once (``node.registered``, which
    the push then carries; see kernel/storage/machines.py). The transaction that writes it also
    creates the id and migrates a format-1 store."""
    return machines.register(store)


# ------------------------------------------------------------------ exchange
def exchange(store, git: Git) -> dict:
    """Push this node's new records to ``refs/loopx/nodes/<node>``, fetch every node's ref and the
    shared ledgers, and import the records this clone lacks: only what changed since the last sync
    is read (``loopx.sync.streams``). Returns {"node", "pushed", "imported", "nodes"}.
    Raises RemoteUnreachable (exit 3) when the remote does not answer in time."""
    node = ensure_node(store)
    fetched = git.fetched
    git.fetch(f"+{NODES}*:{fetched}*", *LEDGER_SPECS)
    refs = _refs(git, node)
    others = {r: h for r, h in refs.items() if r.startswith(fetched) and r != fetched + node}
    pushed, cache, full = _push(store, git, node, others, refs)
    view = remote_cache(cache, git.remote)
    heads = {} if full else dict(view.get("heads") or {})
    after = {ref[len(fetched):]: head for ref, head in others.items()}
    # the store's ids are checked when a node is seen for the first time (its records may have come
    # another way) and after an import that stopped between appending and remembering its heads
    check = full or view.get("importing") or any(heads.get(n) is None for n in after)
    blobs, carriers = streams.chains(git, after, heads)
    if blobs:
        view["importing"] = True
        streams.write_heads(store, cache)
    imported, complete = import_lines(store, blobs, None if check else carriers) if blobs else (0, True)
    if complete:
        view["heads"] = {**heads, **after}
        view.pop("importing", None)
        streams.write_heads(store, cache)
    return {"node": node, "pushed": pushed, "imported": imported, "nodes": 1 + len(others)}


def _refs(git: Git, node: str) -> dict[str, str]:
    """{ref: commit} of every fetched node ref and this node's own ref (one git call)."""
    listing = git.out("for-each-ref", "--format=%(refname) %(objectname)", git.fetched, NODES + node)
    return dict(line.split(" ", 1) for line in listing.splitlines() if " " in line)


def push_own(store, git: Git, node: str) -> int:
    """Push the records written here since the last push (``exchange`` does this first; ``next
    --sync`` again after its claim). Returns how many lines the new commit holds (0: nothing new).
    Raises Conflict when the remote's ref moved (another clone with the same node id)."""
    refs = _refs(git, node)
    others = {r: h for r, h in refs.items() if r.startswith(git.fetched) and r != git.fetched + node}
    return _push(store, git, node, others, refs)[0]


def _push(store, git: Git, node: str, others: dict, refs: dict) -> tuple[int, dict, bool]:
    """(lines pushed, the sync cache, whether the positions had to be rebuilt by a full pass)."""
    cache = streams.read_heads(store)
    if cache.get("node") != node:
        cache = {"node": node}
    view = remote_cache(cache, git.remote)  # what this remote has been sent (each remote its own)
    names = {r[len(git.fetched):] for r in others}
    got = streams.new_lines(store, view.get("push"))
    full = got is None
    lines, pos = streams.all_lines(store) if got is None else got
    mine = NODES + node
    remote_head = refs.get(git.fetched + node)
    skip: set = set()
    if full and remote_head:  # leave out what the node's chain on the remote already carries (a local
        for files in streams.chain_blobs(git, remote_head):  # commit whose push failed does not count)
            for part in files.values():
                skip.update(rid for _, rid in _ids(part))
    picked = streams.pick(lines, names, skip)
    pushed = sum(len(v) for v in picked.values())
    if pushed or remote_head is None:  # a first sync announces the node
        files = {layout.open_log(s): b"".join(line + b"\n" for _, _, line in picked.get(s, [])) for s in STREAMS}
        new = git.commit_ref(mine, files, remote_head, f"loopx records of node {node}")
        if not git.push(mine, mine, remote_head):
            raise Conflict(f"the remote's refs/loopx/nodes/{node} moved under this push",
                           "another clone uses this node id (a copied .loopx/node?): delete .loopx/node in one "
                           "of them and sync again")
        git.run("update-ref", git.fetched + node, new)
    view["push"] = pos
    streams.write_heads(store, cache)
    return pushed, cache, full


def _ids(blob: bytes):
    """(line, id) of each good line of ``blob``."""
    for line in blob.split(b"\n"):
        if line:
            try:
                yield line, decode(line, loads).get("id")
            except ValueError:
                continue


def state_hash(store) -> str:
    """SHA-256 of the folded state (everything but ``meta``, canonical JSON): the same on every
    clone that holds the same records."""
    state = store.load(save_snapshot=True)
    body = {k: v for k, v in state.items() if k != "meta"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


# ------------------------------------------------------------------ claims
def read_ledger(git: Git, ref: str) -> tuple[str | None, dict]:
    """(commit, document) of the local copy of the shared ledger ``ref`` ((None, {}) when absent).
    Raises StateError (exit 3, ``ledger_damaged``) when its file is not a JSON object."""
    raw = git.run("cat-file", "--batch", data=f"{ref}^{{commit}}\n{ref}:{LEDGERS[ref]}\n".encode()).stdout
    got = []
    i = 0
    for _ in range(2):  # "<sha> <type> <size>\n<content>\n", or "<name> missing\n"
        nl = raw.find(b"\n", i)
        if nl < 0:
            break
        head = raw[i:nl].split()
        i = nl + 1
        if len(head) == 3 and head[2].isdigit():
            size = int(head[2])
            got.append((head[0].decode(), raw[i:i + size]))
            i += size + 1
        else:
            got.append((None, b""))
    if not got or got[0][0] is None:
        return None, {}
    try:
        data = json.loads((got[1][1] if len(got) > 1 else b"") or b"{}")
    except ValueError:
        data = None
    if not isinstance(data, dict):  # never overwritten silently: what it held may still count
        raise StateError(f"the shared ledger {ref} is damaged ({LEDGERS[ref]} at {got[0][0][:12]} is not a JSON object)",
                         f"look at it (`git show {ref}:{LEDGERS[ref]}`); to start it afresh, delete it on the remote "
                         f"(`git push {git.remote} :{ref}`): each clone drops its copy at its next update",
                         code="ledger_damaged")
    return got[0][0], data


def read_claims(git: Git) -> tuple[str | None, dict]:
    """(commit, {todo_id: entry}) of the local copy of ``refs/loopx/claims``, for views (status,
    sync): a damaged copy reads as empty here; the next claim reports it (``read_ledger``)."""
    try:
        return read_ledger(git, CLAIMS)
    except StateError:
        return None, {}


def live_claims(claims: dict, now_iso: str, node: str | None = None) -> dict:
    """The entries whose lease has not ended (and, with ``node``, that another node holds)."""
    return {t: c for t, c in claims.items()
            if isinstance(c, dict) and str(c.get("until", "")) > now_iso and (node is None or c.get("node") != node)}


def host_name() -> str:
    """This machine's name (``loopx.kernel.storage.machines.host_name``: the one definition)."""
    return machines.host_name()


def cas(git: Git, ref: str, step, message: str) -> dict:
    """One compare-and-swap update of the shared ledger ``ref`` (one of ``LEDGERS``): fetch it,
    call ``step(doc, attempt) -> (new_doc | None, result)`` on its JSON document, and push
    ``new_doc`` as a commit on top of the commit fetched with ``--force-with-lease`` on that commit,
    so of two pushes built on one commit exactly one wins. A refused push fetches, calls ``step``
    again on the newer document (at most CAS_TRIES, with a random pause that grows with each try);
    ``new_doc`` None pushes nothing. Returns {"result": the last step's result, "tries": int,
    "pushed": bool}. Raises RemoteUnreachable (exit 3), Conflict when the ref kept moving."""
    for attempt in range(1, CAS_TRIES + 1):
        if not git.fetch(f"+{ref}:{ref}"):  # the remote has none (yet, or deleted): neither has this copy
            git.run("update-ref", "-d", ref, check=False)
        head, doc = read_ledger(git, ref)
        new, result = step(doc, attempt)
        if new is None:
            return {"result": result, "tries": attempt, "pushed": False}
        body = json.dumps(new, sort_keys=True, indent=0).encode()
        commit = git.commit({LEDGERS[ref]: body}, head, message)
        if git.push(commit, ref, head):
            git.run("update-ref", ref, commit)
            return {"result": result, "tries": attempt, "pushed": True}
        time.sleep(random.uniform(0, min(2.0, 0.05 * attempt)))  # jitter: many machines refused at once spread out
    raise Conflict(f"{ref} kept moving: nothing pushed after {CAS_TRIES} tries",
                   "many machines are updating it at once; try again")


def claim(store, git: Git, pick, agent: str, until: str, keep=None) -> dict:
    """Linearise one claim through ``refs/loopx/claims`` (``cas``). ``pick(taken)`` returns the
    todo id to claim given {todo_id: entry} held elsewhere, or None when nothing is left; a refused
    push picks again on the newer copy. ``keep``: when given, the todos this clone still holds a
    live claim on; this node's other entries (runs finished or released here) are dropped by the
    same push, so the remote frees them before their lease ends. Returns {"todo_id": str|None, "tries": int, "lost":
    [{"todo_id", "host", "node", "seconds"}]}. Raises RemoteUnreachable, Conflict."""
    node = ensure_node(store)
    lost: list[dict] = []
    wanted: list = [None]
    seen = ClaimClock(store)  # leases judged so that a clock ahead cannot end them early (sync.skew)

    def step(claims, attempt):
        now = clock.now()
        held = seen.live(claims, now, node)
        if wanted[0] is not None and wanted[0] in held:
            c = held[wanted[0]]
            lost.append({"todo_id": wanted[0], "host": c.get("host"), "node": c.get("node"),
                         "seconds": _seconds_between(c.get("at"), now)})
        tid = pick(held)
        if tid is None:
            return None, None
        wanted[0] = tid
        new = {t: c for t, c in seen.live(claims, now).items()
               if keep is None or c.get("node") != node or t in keep}
        new[tid] = {"node": node, "host": host_name(), "agent": agent, "at": clock.iso(now), "until": until}
        return new, tid

    got = cas(git, CLAIMS, step, f"loopx claim by {agent} on {host_name()}")
    seen.save()
    return {"todo_id": got["result"], "tries": got["tries"], "lost": lost}


def _seconds_between(at, now) -> int | None:
    try:
        return max(0, int((now - clock.parse_ts(at)).total_seconds()))
    except Exception:  # noqa: BLE001 - a malformed entry only loses the figure
        return None


def sync_lock(store):
    """The per-clone lock around a sync (two agents on one machine take turns at git)."""
    os.makedirs(store.path(layout.CACHE), exist_ok=True)
    return locked(store.path(layout.SYNC_LOCK), max(timeout() * 2, 30.0))


def write_status(store, data: dict) -> None:
    """Keep the last sync's outcome in ``cache/sync.json`` (read by ``status``; machine-local)."""
    try:
        atomic_write(store.path(layout.SYNC), json.dumps(data, sort_keys=True).encode(), sync=False, follow=False)
    except OSError:
        pass


def local_view(store, state: dict) -> dict:
    """What ``status`` shows about sync without touching git: the last sync and the tentative
    claims (live in ``state`` but absent from the copy of refs/loopx/claims the last sync saw)."""
    last = read_status(store) or {}
    held = last.get("claims") or {}
    now = clock.now_iso()
    tentative = [{"todo_id": t["id"], "holder": t["claim"]["holder"], "goal_id": t.get("goal")}
                 for t in state["todos"].values()
                 if queries.claim_live(t, now) and str(held.get(t["id"], "")) <= now]
    return {"last_sync": last.get("at"), "remote": last.get("remote"), "error": last.get("error"),
            "tentative": sorted(tentative, key=lambda x: x["todo_id"])}


def note_synced(store, remote: str, error: str | None = None, git: Git | None = None) -> dict:
    """Record a sync attempt in ``cache/sync.json``: when, which remote, whether a goal is shared
    (so should-run knows without loading the state) and the error when the remote did not answer."""
    data = read_status(store) or {}
    data.update(attempt=clock.now_iso(), remote=remote, error=error, node=store.node_id())
    if error is None:
        data["at"] = data["attempt"]
    data["shared"] = bool(shared_goals(store.load(view="live")))
    if git is not None:
        _, claims = read_claims(git)
        data["claims"] = {t: c.get("until") for t, c in claims.items() if isinstance(c, dict)}
    write_status(store, data)
    return data


def shared_goals(state: dict, goal_id: str | None = None) -> list[str]:
    """Ids of the active goals marked shared (``loopx goal update --shared``)."""
    return [g["id"] for g in state["goals"].values()
            if g.get("shared") and g.get("status") == "active" and (goal_id is None or g["id"] == goal_id)]


def every() -> float:
    """Seconds between automatic syncs of shared goals (``LOOPX_SYNC_EVERY``, default 60; UsageError
    when malformed)."""
    return seconds("LOOPX_SYNC_EVERY")


def read_status(store) -> dict | None:
    try:
        with open_file(store.path(layout.SYNC), most=MOST_CACHE) as fh:
            data = json.loads(fh.read())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
