"""A sequential turn's workspace left behind by a runner that died mid-turn (``kill -9``, a
crash, a reboot): the next ``loopx run`` brings it back before its first turn (docs/loop.md).

Each sequential turn's clone has a record beside it (``loopx.kernel.read.worktrees.record``).
A clone with a record that no runner kept for a human, whose agent no longer runs here and whose
runner slot no live runner holds (the goal's slot lock is free, or held by this runner: its
previous self), is a killed turn's: its run is closed as ``failed`` (when still open: nothing is
verified or spent for it). A ``--parallel`` run's clone is then kept for a look, as a failed
parallel run's is. A sequential turn's work is brought back exactly as the end of a turn would (``Driver.commit_worktree`` and ``Driver.bring_back``: the
agent's commits into the user's branch, its uncommitted work into the checkout; what cannot be
brought back stays in the workspace, kept and named by ``loopx doctor``). A record left while
loopx was still making the clone (``creating``) means no agent ran: that clone is removed.

- ``recover(store, drv) -> [{"run_id", "closed", "kept", "note", "merge"}]``: one entry per
  workspace brought back (or kept).
- ``refuse_leftover(store, run_id)``: raise Conflict (``workspace_left``, exit 4) when a run's
  workspace is still there as a turn starts (its agent still runs): never a git error.
"""

from __future__ import annotations

import os
import shutil

from loopx.errors import Conflict, LoopxError
from loopx.kernel.policy import turn
from loopx.kernel.read import worktrees
from loopx.kernel.storage import agentproc, fold, layout
from loopx.runner import worktree
from loopx.runner.lease import RunnerLock

NOTE = "the runner died mid-turn; the next `loopx run` brought its workspace back"


def leftovers(store) -> list[tuple[str, dict]]:
    """``[(run_id, record)]``: run workspaces with a record that no runner kept."""
    out = []
    for w in worktrees.listing(store.root):
        rec = worktrees.record(store.root, w["run_id"])
        if rec and not rec.get("kept"):
            out.append((w["run_id"], rec))
    return out


def _free(store, drv, goal_id: str, slot: int) -> RunnerLock | bool:
    """True when ``drv`` holds the goal's slot ``slot`` itself (its runner before it died ran
    there); the slot's lock when no runner holds it (release it after); False when another live
    runner holds it (that one owns the workspace)."""
    mine = drv.locks.get(goal_id)
    if mine is not None and mine.slot == slot:
        return True
    lk = RunnerLock(store, goal_id, slot)
    return lk if lk.take(slot) else False


def recover(store, drv) -> list[dict]:
    found = leftovers(store)
    if not found:
        return []  # the common case: no fold at all (a turn reads the live view only)
    state = store.load(view="live")
    if not all(fold.holds(state["runs"], rid) for rid, _ in found):
        state = store.load()  # a finished run the live view left out: only then the whole history
    out = []
    for rid, rec in found:
        run = state["runs"].get(rid)
        if run is None or agentproc.alive(run.get("process")):
            continue  # not this store's run, or its agent still runs: `loopx doctor` names it
        lk = _free(store, drv, run["goal"], int(rec.get("slot") or 1))
        if lk is False:
            continue  # a live runner is on its slot: that one owns it
        try:
            out.append(_bring_back(store, drv, run, rec))
        finally:
            if isinstance(lk, RunnerLock):
                lk.release()
    return out


def _bring_back(store, drv, run: dict, rec: dict) -> dict:
    rid = run["id"]
    closed = run.get("finished") is None
    if closed:
        # no attempt at the work was judged: the no_change rule must not skip the next turn for it
        turn.close(store, drv.actor, rid, "failed", NOTE, report={"unjudged": True})
    for ext in (".packet.txt", ".packet.json"):  # the killed runner's packet files
        try:
            os.remove(store.path(layout.CACHE, rid + ext))
        except OSError:
            pass
    if rec.get("creating"):  # loopx was still making the clone: no agent ran in it
        shutil.rmtree(worktrees.path(store.root, rid), ignore_errors=True)
        worktree.drop_record(store, rid)
        return {"run_id": rid, "closed": closed, "kept": False, "note": "an unfinished workspace removed",
                "merge": None}
    if not rec.get("sequential"):  # a parallel run: failed, its workspace kept for a look (as when it fails)
        note = "workspace kept: a --parallel run whose runner died mid-turn (its work is in the clone)"
        drv.kept({"run_id": rid}, {"note": note})
        return {"run_id": rid, "closed": closed, "kept": True, "note": note, "merge": None}
    if not worktree.is_clone(str(rec.get("path") or worktrees.path(store.root, rid))):
        # no git folder of its own (half removed, or not a clone): any git call there would walk up
        # to the project's repository and act on the user's checkout. Kept, named, never touched.
        note = "workspace kept: it is not a whole clone (its .git is missing); look at it, then remove it"
        drv.kept({"run_id": rid}, {"note": note})
        return {"run_id": rid, "closed": closed, "kept": True, "note": note, "merge": None}
    info = {k: v for k, v in rec.items() if k not in ("run_id", "goal_id", "todo_id", "mode", "kept", "slot")}
    started = {"run_id": rid, "goal_id": run["goal"], "todo_id": run.get("todo"), "mode": run.get("mode"),
               "worktree": info}
    res: dict = {"run_id": rid, "merge": None, "note": None,
                 "worktree": {"path": info.get("path"), "branch": info.get("branch"), "kept": True,
                              "branch_kept": True}}
    try:
        drv.commit_worktree(started, res)
        drv.bring_back(started, res)
    except (LoopxError, OSError, KeyError, TypeError, AttributeError, ValueError) as exc:  # a record this loopx cannot use: keep it, named
        res["note"] = f"workspace kept: {getattr(exc, 'message', None) or exc}"
        drv.kept(started, res)
    return {"run_id": rid, "closed": closed, "kept": res["worktree"]["kept"], "note": res["note"],
            "merge": res["merge"]}


def refuse_leftover(store, run_id: str) -> None:
    path = worktrees.path(store.root, run_id)
    if not os.path.lexists(path):
        return
    if worktrees.record(store.root, run_id):  # recover() left it: its agent still runs, or a runner holds its goal
        raise Conflict(f"the workspace of run {run_id} is still there ({path}): its agent still runs",
                       "wait for it to end (or stop it: `loopx doctor` names the workspace), then run `loopx run` "
                       "again: it brings that turn's work back first", code="workspace_left")
    raise Conflict(f"the workspace of run {run_id} is still there ({path}) and loopx has no record of it "
                   "(an older loopx made it)", f"look in it (`git -C {path} log`, `git -C {path} status`) and "
                   f"bring back what you need; then rm -rf {path} and run again", code="workspace_left")
