"""Bring a finished, verified parallel run's branch back into the goal's base branch
(docs/multi-agent.md#merging-back).

``integrate(store, actor, run, base) -> dict``::

    {"action": "merged"|"gated"|"conflict"|"deferred"|"nothing", "branch", "base",
     "commit": merge commit sha|None, "gate_id": str|None, "todo_id": str|None (the conflict todo),
     "files": [conflicting paths], "diff_stat": str, "message": one line}

- ``nothing``: the branch has no commit the base lacks.
- ``gated``: the goal protects merges (``merge`` in its protect list): a ``merge`` gate names the
  branch and its diff stat; after a human approves it, ``merge_approved`` merges it.
- ``conflict``: the merge would conflict: nothing is written to the base; a todo asks the next
  turn to merge the branch by hand (the branch is kept).
- ``deferred``: the merge is clean but the base's checkout has local changes in the way: a
  ``merge`` gate asks a human to merge it (``git merge loopx/<run-id>``) or approve after cleaning.
- ``refused``: the branch changes a path inside a ``.loopx/`` folder (a store, at any depth):
  nothing is written to the base and the branch is kept for a human; loopx's store is written by
  loopx alone, never brought in from an agent's commits.
- ``merged``: the merge commit is made with ``git merge-tree --write-tree`` + ``commit-tree``
  (no checkout is touched while computing it), then the base moves to it: ``git merge --ff-only``
  in the checkout that has the base checked out, or a compare-and-swap ``update-ref`` when none
  does. The base is never left half-merged. Merges are serialised by ``cache/merge.lock``.
"""

from __future__ import annotations

import re
import time

from loopx.kernel.read import worktrees
from loopx.kernel.storage import fold, fs, ids, layout
from loopx.kernel.write import evidence, gates, todos
from loopx.runner import worktree as wt

MERGE_LOCK_TIMEOUT = 600.0
_QUESTION = "Merge {branch} into {base}?"
_QUESTION_RE = re.compile(r"^Merge (loopx/[A-Za-z0-9._-]+) into (\S+)\?$")


def _out(action: str, branch: str, base: str, message: str, **kw) -> dict:
    out: dict = {"action": action, "branch": branch, "base": base, "commit": None, "gate_id": None, "todo_id": None,
           "files": [], "diff_stat": "", "message": message}
    out.update(kw)
    return out


def protects_merges(goal: dict) -> bool:
    return "merge" in (goal.get("scope") or {}).get("protect", [])


def integrate(store, actor: str, run: dict, base: str) -> dict:
    """See the module docstring. ``run`` is the folded run (id, goal, todo)."""
    branch = worktrees.branch(run["id"])
    with fs.locked(store.path(layout.MERGE_LOCK), MERGE_LOCK_TIMEOUT):
        if _merged_already(store.project_dir, base, branch):
            return _out("nothing", branch, base, f"{branch} has nothing that {base} lacks")
        stat = wt.diff_stat(store.project_dir, base, branch)
        refused = _refuse_store(store, actor, run, branch, base, stat)
        if refused:
            return refused
        goal = store.load(view="live")["goals"][run["goal"]]  # every goal is in the live view
        if protects_merges(goal):
            return _gate(store, actor, run, branch, base, stat, "goal protects merges")
        return _merge(store, actor, run, branch, base, stat)


def land_turn(store, actor: str, run: dict, base: str, base_sha: str) -> dict:
    """Bring a sequential turn's branch (fetched from its private workspace) into ``base``, the
    branch the user has checked out, whether or not the turn was verified: what the agent did
    lands where it would have without the workspace. A fast-forward when ``base`` still points at
    ``base_sha`` (so the user's branch gets the agent's own commits); otherwise ``_merge``'s
    merge commit, conflict todo or gate. Returns an ``integrate``-shaped dict."""
    branch = worktrees.branch(run["id"])
    P = store.project_dir
    with fs.locked(store.path(layout.MERGE_LOCK), MERGE_LOCK_TIMEOUT):
        if wt.git(P, "rev-parse", "-q", "--verify", "refs/heads/" + branch, check=False).returncode \
                or _merged_already(P, base, branch):
            wt.git(P, "branch", "-D", branch, check=False)
            return _out("nothing", branch, base, f"{branch} has nothing that {base} lacks")
        stat = wt.diff_stat(P, base, branch)
        refused = _refuse_store(store, actor, run, branch, base, stat)
        if refused:
            return refused
        head = wt.git(P, "rev-parse", "--verify", branch + "^{commit}").stdout.strip()
        now = wt.git(P, "rev-parse", "--verify", base + "^{commit}").stdout.strip()
        if now == base_sha:
            where = _checkout_of(P, base)
            moved = (wt.git(P, "update-ref", "-m", f"loopx: {run['id']}", f"refs/heads/{base}", head, base_sha,
                            check=False) if where is None else wt.git(where, "merge", "--ff-only", "-q", head,
                                                                          check=False))
            if moved.returncode == 0:
                wt.git(P, "branch", "-D", branch, check=False)
                return _out("merged", branch, base, f"brought {branch} into {base} ({head[:12]})", commit=head,
                            diff_stat=stat)
        return _merge(store, actor, run, branch, base, stat)


def land_branches(store, actor: str, run: dict, start: dict, moved: dict) -> list[dict]:
    """The other branches a sequential turn moved in its workspace (``worktree.moved_branches``),
    brought into the project as if it had worked there: a branch that is still where the turn
    started moves to the agent's commit when that is a fast-forward (``git merge
    --ff-only`` where it is checked out, else a compare-and-swap ``update-ref``); otherwise it is
    left alone (and a branch the agent made is not made) and the agent's commit stays under
    ``refs/loopx/landing/<run>/<name>`` with a note on the run. A change of a ``.loopx/`` path is never brought in. Returns one dict per branch:
    ``{"branch", "action": "moved"|"kept", "commit", "message"}``."""
    P = store.project_dir
    out = []
    with fs.locked(store.path(layout.MERGE_LOCK), MERGE_LOCK_TIMEOUT):
        for name, sha in sorted(moved.items()):
            ref = f"refs/loopx/landing/{run['id']}/{name}"
            cur = wt.git(P, "rev-parse", "-q", "--verify", f"refs/heads/{name}", check=False).stdout.strip()
            was = start.get(name) or ""
            ok = bool(was) and cur == was and wt.git(P, "merge-base", "--is-ancestor", was, sha,
                                                     check=False).returncode == 0
            names = wt.git(P, "diff", "--name-only", "-z", f"{was}..{sha}", check=False).stdout if ok else ""
            ok = ok and not any(layout.DIRNAME in n.split("/") for n in names.split("\0") if n)
            where = _checkout_of(P, name) if ok else None
            if ok:
                ok = (wt.git(where, "merge", "--ff-only", "-q", sha, check=False) if where else
                      wt.git(P, "update-ref", "-m", f"loopx: {run['id']}", f"refs/heads/{name}", sha, cur,
                             check=False)).returncode == 0
            if ok:
                wt.git(P, "update-ref", "-d", ref, check=False)
                out.append({"branch": name, "action": "moved", "commit": sha,
                            "message": f"brought {name} to {sha[:12]}"})
                continue
            why = "made in the turn" if not was else "it moved, or this is not a fast-forward"
            msg = f"branch {name} was not brought in ({why}): see {ref}"
            evidence.add(store, actor, run["goal"], kind="note", summary=msg[:300], todo=run.get("todo"), run=run["id"])
            out.append({"branch": name, "action": "kept", "commit": sha, "message": msg})
    return out


def _refuse_store(store, actor, run, branch: str, base: str, stat: str) -> dict | None:
    """A ``refused`` dict (and a note on the run) when ``branch`` changes a ``.loopx/`` path."""
    names = wt.git(store.project_dir, "diff", "--name-only", "-z", f"{base}...{branch}").stdout.split("\0")
    bad = [n for n in names if n and layout.DIRNAME in n.split("/")]
    if not bad:
        return None
    msg = f"{branch} was not brought into {base}: it changes loopx's store ({', '.join(bad[:3])})"
    evidence.add(store, actor, run["goal"], kind="note", summary=msg[:300], todo=run.get("todo"), run=run["id"])
    return _out("refused", branch, base, msg, files=bad, diff_stat=stat)


def _merged_already(project_dir: str, base: str, branch: str) -> bool:
    return wt.git(project_dir, "merge-base", "--is-ancestor", branch, base, check=False).returncode == 0


def _gate(store, actor, run, branch, base, stat, why) -> dict:
    question = _QUESTION.format(branch=branch, base=base)
    kind = "gated" if why == "goal protects merges" else "deferred"
    for g in store.load(view="live")["gates"].values():  # every pending gate is in the live view
        if g["kind"] == "merge" and g["status"] == "pending" and g["question"] == question:
            return _out(kind, branch, base, f"merge gate {g['id']} already waits for a human: merge {branch} into {base}",
                        gate_id=g["id"], diff_stat=stat)
    context = (f"{why}. Branch {branch} (run {run['id']}"
               f"{', todo ' + run['todo'] if run.get('todo') else ''}):\n{stat or '(no file changes)'}")
    g = gates.open_gate(store, actor, run["goal"], kind="merge", question=question,
                        context=context[:9000], blocks=[run["todo"]] if run.get("todo") else None, run=run["id"])
    return _out(kind, branch, base,
                f"merge gate {g['gate_id']} waits for a human: merge {branch} into {base}",
                gate_id=g["gate_id"], diff_stat=stat)


def _conflict_todo(store, actor, run, branch, base, files) -> str:
    title = f"Resolve the merge conflict of {branch} into {base}"
    state = store.load(view="live")  # every todo that is not done or archived is in the live view
    for t in state["todos"].values():
        if t["goal"] == run["goal"] and t["title"] == title and t["status"] not in ("done", "archived"):
            return t["id"]
    detail = (f"Run {run['id']} was verified, but merging {branch} into {base} conflicts in: "
              f"{', '.join(files[:50]) or '(see git)'}. Merge it in this turn's worktree "
              f"(`git merge {branch}`), resolve the conflicts, and let verification pass; "
              f"then `git branch -D {branch}`.")
    return todos.add(store, actor, run["goal"], title, detail=detail[:4000], priority=10)["todo_id"]


def _checkout_of(project_dir: str, base: str) -> str | None:
    """The worktree that has ``base`` checked out, or None."""
    listing = wt.git(project_dir, "worktree", "list", "--porcelain").stdout
    path = None
    for line in listing.splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line == f"branch refs/heads/{base}":
            return path
    return None


def _merge(store, actor, run, branch, base, stat) -> dict:
    P = store.project_dir
    for _attempt in range(3):
        base_sha = wt.git(P, "rev-parse", "--verify", base + "^{commit}").stdout.strip()
        head_sha = wt.git(P, "rev-parse", "--verify", branch + "^{commit}").stdout.strip()
        mt = wt.git(P, "merge-tree", "--write-tree", "--name-only", "--no-messages", base_sha, head_sha, check=False)
        lines = mt.stdout.splitlines()
        if mt.returncode == 1:
            files = [x for x in lines[1:] if x]
            tid = _conflict_todo(store, actor, run, branch, base, files)
            return _out("conflict", branch, base, f"merging {branch} into {base} conflicts; todo {tid} resolves it",
                        todo_id=tid, files=files, diff_stat=stat)
        if mt.returncode != 0 or not lines:
            raise wt.GitError(f"git merge-tree failed: {(mt.stderr or '').strip()[:200]}",
                              "git 2.38 or newer is needed for merging parallel runs back")
        tree = lines[0].strip()
        msg = f"loopx: merge {branch} ({run.get('todo') or 'planning'})"
        commit = wt.git(P, *wt.identity(P), "commit-tree", tree, "-p", base_sha, "-p", head_sha, "-m", msg).stdout.strip()
        where = _checkout_of(P, base)
        if where is None:
            moved = wt.git(P, "update-ref", "-m", msg, f"refs/heads/{base}", commit, base_sha, check=False)
        else:
            moved = wt.git(where, "merge", "--ff-only", "-q", commit, check=False)
        for _wait in range(50):  # another git process (a user's `git status`) holds the index lock
            if where is None or moved.returncode == 0 or "index.lock" not in (moved.stderr or ""):
                break
            time.sleep(0.2)
            moved = wt.git(where, "merge", "--ff-only", "-q", commit, check=False)
        if moved.returncode == 0:
            wt.git(P, "branch", "-D", branch, check=False)
            evidence.add(store, actor, run["goal"], kind="commit", summary=f"merged {branch} into {base} as {commit[:12]}",
                         todo=run.get("todo"), run=run["id"], command=f"git merge {branch}", exit_code=0,
                         output=stat.encode("utf-8"))
            return _out("merged", branch, base, f"merged {branch} into {base} ({commit[:12]})", commit=commit,
                        diff_stat=stat)
        now_sha = wt.git(P, "rev-parse", "--verify", base + "^{commit}").stdout.strip()
        if now_sha == base_sha:  # the base did not move: local changes are in the way
            return _gate(store, actor, run, branch, base, stat,
                         f"the checkout of {base} has local changes in the way of the merge "
                         f"({(moved.stderr or '').strip().splitlines()[-1:] or ['git refused']})"[:500])
    return _gate(store, actor, run, branch, base, stat, f"{base} kept moving during the merge")


def _approved_merges(state: dict) -> list[tuple[dict, str, str]]:
    """(run, branch, base) of each approved ``merge`` gate a parallel run opened, oldest
    first. On a live view that counted approved merges it left out, or left out such a gate's run,
    raises ``fold.NotInLiveView`` (``Store.read`` then asks the full state)."""
    if fold.is_live(state) and (not state.get("approvals")
                                or any(n.get("merge") for n in (state.get("approvals_left") or {}).values())):
        raise fold.NotInLiveView("approved merge gates")
    out = []
    for g in sorted(state["gates"].values(), key=lambda x: x.get("seq", 0)):
        if g["kind"] != "merge" or g["status"] != "approved" or not g.get("run"):
            continue
        m = _QUESTION_RE.match(g.get("question") or "")
        if not m or m.group(1) != worktrees.branch(g["run"]):
            continue
        run = state["runs"].get(g["run"])  # a view that left the run out raises
        if run is not None:
            out.append((run, m.group(1), m.group(2)))
    return out


def merge_approved(store, actor: str) -> list[dict]:
    """Merge the branches of approved ``merge`` gates opened by parallel runs that are not merged
    yet (the human approved after the run ended). Returns one ``integrate``-shaped dict each."""
    # Such a gate names a run's branch that still exists: without any (the usual case, and always
    # outside parallel mode) there is nothing to merge, and no reason to fold the history per turn.
    # (Outside a git repository every branch check below fails too.)
    # Only a run's branch (loopx/run-...), not an experiment's (loopx/exp/<goal>, every trial turn).
    heads = wt.git(store.project_dir, "for-each-ref", "--count=1", "--format=%(refname)",
                   "refs/heads/" + worktrees.branch(ids.PREFIX["run"]) + "*", check=False)
    if heads.returncode != 0 or not heads.stdout.strip():
        return []
    done: list[dict] = []
    for run, branch, base in store.read(_approved_merges):  # the live view, or the full state when it cannot say
        if wt.git(store.project_dir, "rev-parse", "-q", "--verify", "refs/heads/" + branch, check=False).returncode:
            continue  # merged (and deleted) already, or deleted by a human
        with fs.locked(store.path(layout.MERGE_LOCK), MERGE_LOCK_TIMEOUT):
            if _merged_already(store.project_dir, base, branch):
                wt.git(store.project_dir, "branch", "-D", branch, check=False)
                continue
            done.append(_merge(store, actor, run, branch, base, wt.diff_stat(store.project_dir, base, branch)))
    return done
