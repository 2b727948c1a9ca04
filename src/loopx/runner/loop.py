"""The governed loop: should-run -> next -> agent -> verify -> evidence -> finish -> spend.

``drive(store, agent, ...)`` returns::

    {"agent": "agent:<name>", "turns": [turn...], "stop": <decision dict>|None,
     "stopped_because": "decision"|"max_turns"|"once"|"agent_failed"|"dry_run",
     "exit_code": 0|1, "dry_run_packet": str|None,
     "goal_verify": {"goal_id", "passed", "completed", "evidence_id", "exit_code", "setup_error"}
                    (only when all todos were done and the goal's verify command ran)}

When should-run says every todo is done, the goal's own verify command decides the goal: it
runs once (not while a gate of the goal is pending or a run is open, in ``--parallel`` mode too;
a passing check with no run since is never run again); passing marks the goal done, or for a goal
that protects actions leaves one stable ``wait_human`` (``close_goal``) for a human; failing makes
should-run ask for a planning turn.

and each turn is ``{"run_id", "goal_id", "todo_id", "mode", "result", "verified", "slots",
"agent_exit", "timed_out", "duration" (s, the whole turn: the agent and loopx's verify or measure
commands after it), "agent_duration" (s, the agent's part), "verify": {...}|None, "spend": receipt|None, "note",
"usage": loopx.runner.report usage|None (None: usage unknown), "changes": loopx.runner.changes
dict|None, "host": str|None, "permission_mode": str|None, "setup_error": dict|None,
"out_of_scope": [path] (only when the turn changed files outside the goal's scope: never verified)}``.
A host that could not work (not logged in, offline, rate limited, crashed, timed out, idle:
loopx.runner.outcome) ends the turn as ``failed`` with ``setup_error`` recorded on the run.

When the goal allows several runners (``max_parallel`` > 1) the runner takes a free slot ``i``,
acts as agent ``<name>-<i>``, and runs each turn in its own git worktree on branch
``loopx/<run-id>`` (docs/multi-agent.md); such turns add ``"worktree": {"path", "branch", "kept",
"branch_kept"}`` and ``"merge"`` (``loopx.runner.merge.integrate``'s dict or None), and the result
gains ``"slot"`` and ``"merges"`` (approved merge gates merged by this runner).
Exit code 0 when every turn worked or the loop stopped on a clean decision, 1 when an agent
failed or timed out, 3 (raised StateError) for an unreadable store, 4 (Conflict ``runner_busy``)
when another runner holds the goal, 130 (Interrupted) on Ctrl-C after closing the run.
"""

from __future__ import annotations

import json
import os
import time

from loopx import sandbox
from loopx.errors import HumanRequired, Interrupted, LoopxError, StateError, UsageError
from loopx.kernel.policy import decide, packet, turn
from loopx.kernel.read import fingerprint, queries, worktrees
from loopx.kernel.storage import actors, agentproc, clock, layout
from loopx.kernel.storage.ids import check_agent_name
from loopx.kernel.write import goals
from loopx.notify.outbox import after_decision, budget
from loopx.runner import changes, hostenv, merge, outcome, presets, process, recover, report, worktree
from loopx.runner import trial as trials  # research experiments: a turn is a trial (issue 20)
from loopx.runner.lease import RunnerLock
from loopx.sandbox import status as sandbox_status
from loopx.sandbox.actions import perform_approved
from loopx.sandbox.session import Session
from loopx.sync import shared
from loopx.sync import transport as gs
from loopx.usage.text import usage_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loopx.sandbox.session import Session

KEEP_OUTPUT = 4 * 1024 * 1024   # bytes of a reporting host's output kept to read its final report
NOT_STARTED = (126, 127)  # the exit of a shell whose command is not executable / not found


class Driver:
    def __init__(self, store, agent: str, *, preset: str | None, agent_cmd: str | None, timeout: float | None,
                 lease: float, echo=None, log=None, permission_mode: str | None = None) -> None:
        self.store, self.agent, self.actor = store, agent, actors.agent(agent)
        self.preset, self.agent_cmd = preset, agent_cmd
        self.permission_mode = permission_mode
        self.spec = presets.spec(preset) if preset and not agent_cmd else None
        self.timeout, self.lease, self.echo = timeout, lease, echo
        self.log = log or (lambda msg: None)
        self.locks: dict[str, RunnerLock] = {}
        self.isolate = False      # parallel mode: one git worktree per turn
        self.workdir: str | None = None  # the turn's working directory (its worktree in parallel mode)
        self.base: str | None = None
        self.sandbox: Session | None = None  # made at the first turn
        self.run_id: str | None = None

    def rename(self, agent: str) -> None:
        self.agent, self.actor = agent, actors.agent(agent)

    def lock(self, goal_id: str) -> None:
        if goal_id not in self.locks:
            lk = RunnerLock(self.store, goal_id)
            lk.acquire()
            self.locks[goal_id] = lk

    def release(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
        for lk in self.locks.values():
            lk.release()
        self.locks.clear()

    # ------------------------------------------------------------------ one turn
    def command(self, started: dict, prompt_file: str, json_file: str) -> tuple[object, bool]:
        if self.agent_cmd:
            vals = {"prompt_file": prompt_file, "packet_json": json_file, "run_id": started["run_id"],
                    "goal_id": started["goal_id"], "todo_id": started["todo_id"] or ""}
            return presets.fill(self.agent_cmd, vals), True
        assert self.preset is not None  # a Driver runs a preset or an agent command
        return presets.argv_for(self.preset, started["packet_text"], prompt_file, self.turn_mode,
                                verify=(started.get("packet") or {}).get("verify")), False

    def env(self, started: dict, prompt_file: str, json_file: str, cwd: str | None = None) -> dict:
        env = dict(os.environ)
        if cwd:  # the host works where the turn runs: PWD and its own project variable (issue 23)

            env.update(hostenv.env_for(self.spec["kind"] if self.spec else None, cwd))
        env.update(LOOPX_AGENT=self.agent, LOOPX_RUN_ID=started["run_id"], LOOPX_GOAL_ID=started["goal_id"],
                   LOOPX_TODO_ID=started["todo_id"] or "", LOOPX_PROMPT_FILE=prompt_file,
                   LOOPX_PACKET_JSON=json_file, LOOPX_PROJECT_DIR=self.store.project_dir,
                   LOOPX_FENCE=str(started.get("fence") or ""))
        return env

    def confine(self, cmd, shell: bool, env: dict, cwd: str, started: dict):
        """The agent's command and environment inside the sandbox (loopx.sandbox.session)."""
        if self.sandbox is None:
            self.sandbox = Session(self.store, lambda: (self.agent, self.run_id),
                                   host=self.spec["kind"] if self.spec else None)
        self.run_id = started["run_id"]
        wt = started.get("worktree") or {}
        return self.sandbox.confine(cmd, shell, env, cwd, view=bool(wt.get("sequential")),
                                    shared=wt.get("shared") or ())

    def workspace(self, started: dict) -> str:
        """Make the turn's workspace (``loopx.runner.worktree``); returns where the agent works."""
        rid = started["run_id"]
        recover.refuse_leftover(self.store, rid)  # a resumed run whose killed turn's workspace is still there
        lk = self.locks.get(started["goal_id"])
        ids = {"run_id": rid, "goal_id": started["goal_id"], "todo_id": started.get("todo_id"),
               "mode": started.get("mode"), "slot": lk.slot if lk else 1}
        try:
            assert self.base is not None  # isolate is switched on together with the base branch
            # a runner killed from here on leaves what the next one needs (loopx.runner.recover)
            worktree.save_record(self.store, rid, dict(ids, sequential=not self.isolate, creating=True))
            started["worktree"] = dict(worktree.create(self.store, rid, self.base, view=not self.isolate),
                                       sequential=not self.isolate)
        except LoopxError as exc:
            turn.close(self.store, self.actor, rid, "failed", f"could not create the run's worktree: {exc.message}")
            raise
        cwd = started["worktree"]["cwd"]
        # installed hook files are untracked: without them the host would run unguarded there
        hooks = hostenv.copy_hooks(self.store.project_dir, cwd, self.spec["kind"] if self.spec else None)
        if started["worktree"]["sequential"]:  # the agent sees the checkout as the user left it
            started["worktree"]["carried"] = worktree.carry(self.store.project_dir, cwd, hooks)
            started["worktree"]["shared"] = worktree.ignored(self.store.project_dir, cwd)
        worktree.save_record(self.store, rid, dict(started["worktree"], **ids))
        return cwd

    def private_workspace(self) -> bool:
        """A sequential turn works in a private clone (``loopx.runner.worktree``) where the kernel
        sandbox applies and the project is a git repository on a branch with a commit, so the
        project's ``.git`` stays outside every write grant; its work is brought back after the
        turn (``land``). Elsewhere it works in the project, as without a sandbox."""
        if not sandbox.enforced():
            return False
        try:
            self.base = worktree.base_branch(self.store.project_dir)
        except LoopxError:
            return False
        return True

    def mode_for(self, goal_id: str) -> str | None:
        """The permission mode of a turn on ``goal_id``: ``--permission-mode``, else the goal's."""
        if self.permission_mode or not self.spec:
            return self.permission_mode
        g = self.store.load(view="live")["goals"].get(goal_id) or {}  # every goal is in the live view
        return g.get("permission_mode")

    def turn(self, started: dict) -> dict:
        rid = started["run_id"]
        self.run_id = rid
        began = time.monotonic()
        mode = self.mode_for(started["goal_id"])
        if mode and started.get("packet"):
            started["packet"]["permission_mode"] = mode
            started["packet_text"] = packet.render(started["packet"])
        self.turn_mode = mode
        cache = self.store.path(layout.CACHE)
        os.makedirs(cache, exist_ok=True)
        prompt_file = os.path.join(cache, f"{rid}.packet.txt")
        json_file = os.path.join(cache, f"{rid}.packet.json")
        with open(prompt_file, "w", encoding="utf-8") as fh:
            fh.write(started["packet_text"])
        with open(json_file, "w", encoding="utf-8") as fh:
            json.dump(started["packet"], fh)
        # the goal's todos before the turn, from the live view: the ids it holds plus how many closed
        # ones it left out (todos are never removed, so a planning turn's new todos are the rest)
        live = self.store.load(view="live")
        self.todos_before = {k for k, t in live["todos"].items() if t["goal"] == started["goal_id"]}
        self.todos_left_out = sum((live.get("closed") or {}).get(started["goal_id"], {}).values())
        cwd = self.store.project_dir

        where = trials.prepare(self, started)
        if where is not None:
            started["trial_where"] = where
            cwd = where["cwd"]
        elif self.isolate or self.private_workspace():
            cwd = self.workspace(started)
        self.workdir = cwd  # where the scope of the turn's changes is checked (turn.finish)

        before = changes.head(cwd)
        try:
            cmd, shell = self.command(started, prompt_file, json_file)

            def tick():
                try:
                    shared.renew(self.store, self.actor, rid, lease=self.lease)
                except Exception:  # noqa: BLE001 - renewal is best effort; the reaper handles the rest
                    pass

            def attached(pid):
                turn.attach(self.store, self.actor, rid, agentproc.describe(pid))

            stdin = started["packet_text"] if shell or presets.packet_on_stdin(self.preset) else ""
            # a sequential turn's clone is shown at the project's own path: the host works "there"
            seen = self.store.project_dir if (started.get("worktree") or {}).get("sequential") else cwd
            cmd, shell, env = self.confine(cmd, shell, self.env(started, prompt_file, json_file, seen), cwd,
                                         started)
            res = process.run_agent(cmd, shell=shell, stdin_text=stdin, env=env, cwd=cwd,
                                    timeout=self.timeout, tick=tick, tick_every=max(1.0, self.lease / 3),
                                    echo=self.echo, on_start=attached,
                                    keep=KEEP_OUTPUT if self.spec else process.TAIL * 2,
                                    retrying=presets.retrying(self.preset) if self.spec else ())
        finally:
            for p in (prompt_file, json_file):
                try:
                    os.remove(p)
                except OSError:
                    pass
        out = self.settle(started, res, self.measure(res, before, cwd))
        out["duration"] = round(time.monotonic() - began, 3)  # what the turn took, verify or measure included
        return out

    def measure(self, res: dict, before: str | None, cwd: str | None = None) -> dict:
        """What the turn cost and changed (in ``cwd``, the run's worktree in parallel mode), and
        whether the host could work at all."""
        rep = report.parse(self.spec["report"] if self.spec else None, res.get("output", res["output_tail"]))
        diff = changes.measure(cwd or self.store.project_dir, before)
        changed = None if diff is None else bool(diff["files"] or diff["commit_count"] or diff["untracked"])
        setup = None if res["interrupted"] else outcome.classify(
            res["exit_code"], res["timed_out"], res.get("output", res["output_tail"]), rep,
            preset=self.preset if self.spec else None, now=clock.now(), changed=changed,
            retry_lines=res.get("retry_lines") if res.get("gave_up") else None)

        host = self.spec["kind"] if self.spec else None
        calls, denied = hostenv.guard_calls(self.store.project_dir, getattr(self, "run_id", None) or "")
        # calls 0: the host's hook never ran; denied: the guard's refusals during the turn
        guard = {"calls": calls, "denied": denied, "unguarded": calls == 0} if host else None
        return {"usage": rep["usage"], "changes": diff,
                "host": host, "permission_mode": getattr(self, "turn_mode", None),
                "wall_time": res["duration"], "setup_error": setup, "report_malformed": rep["malformed"],
                "guard": guard}

    def settle(self, started: dict, res: dict, meas: dict | None = None) -> dict:
        rid = started["run_id"]
        meas = meas or {}
        report = {k: meas.get(k) for k in ("usage", "changes", "host", "permission_mode", "wall_time", "guard")}
        out = {"run_id": rid, "goal_id": started["goal_id"], "todo_id": started["todo_id"], "mode": started["mode"],
               "agent_exit": res["exit_code"], "timed_out": res["timed_out"], "duration": res["duration"],
               "agent_duration": res["duration"],
               "verify": None, "spend": None, "note": None, "setup_error": meas.get("setup_error"), **report}
        if started.get("worktree"):
            out["worktree"] = {"path": started["worktree"]["path"], "branch": started["worktree"]["branch"],
                               "kept": True, "branch_kept": True}
            out["merge"] = None
        if res["interrupted"]:
            turn.close(self.store, self.actor, rid, "failed", "interrupted (Ctrl-C); the run was closed by the runner",
                       report=dict(report, unjudged=True))
            raise Interrupted("interrupted: the agent was stopped and its run closed as failed",
                              "run `loopx run` again to continue")
        if started.get("trial_where"):
            return trials.settle(self, started, res, meas, out, report)
        setup = meas.get("setup_error")
        if setup:
            why = f"{setup['reason'].replace('_', ' ')}: {setup['message']}"
            fin = turn.close(self.store, self.actor, rid, "failed", why, report=dict(report, setup_error=setup))
            out.update(result=fin["result"], verified=fin["verified"], slots=0, note=why)
            return self.land_failed(started, out)
        if res["timed_out"] or res["exit_code"] != 0:
            why = (f"timed out after {clock.format_duration(self.timeout or 0)}" if res["timed_out"]
                   else f"agent exited {res['exit_code']}")
            # 126/127: the agent command could not start (not executable, not found): no attempt at the work
            never_started = not res["timed_out"] and res["exit_code"] in NOT_STARTED
            fin = turn.close(self.store, self.actor, rid, "failed", why,
                             report=dict(report, unjudged=True) if never_started else report)
            out.update(result=fin["result"], verified=fin["verified"], slots=0, note=why)
            return self.land_failed(started, out)
        changed = None
        if started.get("worktree"):
            changed = self.commit_worktree(started, out)
        # the live view when it holds the run and its todo (always, unless a human archived it meanwhile)
        state, run = turn.load_run(self.store, rid)
        if run["finished"] is None:
            fin = self.finish_for_agent(state, run, out, report, changed)
        else:
            turn.report(self.store, self.actor, rid, report)
            fin = {"result": run["result"], "verified": run["verified"]}
            out["note"] = "finished by the agent"
        out.update(result=fin["result"], verified=fin["verified"], slots=0)
        if fin.get("out_of_scope"):
            out["out_of_scope"] = fin["out_of_scope"]
            out["note"] = ((out.get("note") or "") + f"; changed outside the scope: {', '.join(fin['out_of_scope'][:5])}"
                           ).lstrip("; ")
        if fin["verified"] and fin["result"] in ("progress", "completion"):
            receipt = shared.spend_slot(self.store, self.actor, rid)
            out["spend"] = receipt
            out["slots"] = receipt["slots"] if receipt["spent"] else 0
        if started.get("worktree"):
            self.land(started, out)
        return out

    def complete_goal(self, goal_id: str) -> dict | None:
        """All todos are done: run the goal's verify command (the goal's command decides the goal)
        and mark the goal done when it passes. None when the goal has no verify command."""
        state = self.store.load(view="live")  # goals, pending gates and open runs are all in the live view
        g = state["goals"].get(goal_id or "")
        if not g or not g.get("verify") or queries.pending_gates(state, g["id"]) or queries.open_runs(state, g["id"]):
            return None
        stands = decide.goal_verify_passed(state, g)  # a passing check with no run since: never run it twice
        check = {"passed": True, "evidence_id": stands["id"], "exit_code": 0} if stands else \
            turn.run_verify(self.store, self.actor, {"goal": g["id"], "id": None, "todo": None,
                                                     "after_run": g.get("last_run")}, g["verify"], self.timeout)
        out = {"goal_id": g["id"], "passed": check["passed"], "evidence_id": check["evidence_id"],
               "exit_code": check["exit_code"], "setup_error": check.get("setup_error"), "completed": False}
        if check["passed"] and g["scope"].get("protect"):  # finishing protected work is a human's call
            out["human_closes"] = f"loopx goal done {g['id']}"
        elif check["passed"]:
            try:
                goals.set_status(self.store, self.actor, g["id"], "done",
                                 note=f"all todos done and the goal's verify command passed ({check['evidence_id']})")
                out["completed"] = True
            except HumanRequired:
                out["human_closes"] = f"loopx goal done {g['id']}"
        self.log(f"goal {g['id']}: verify {'passed: the goal is done' if check['passed'] else 'failed'}")
        return out

    # ------------------------------------------------------------------ parallel runs
    def commit_worktree(self, started: dict, out: dict) -> bool | None:
        """Commit what the agent left in its worktree; True when its branch is ahead of the base."""
        info = started["worktree"]
        try:
            if info.get("sequential"):  # its uncommitted work stays uncommitted (bring_back)
                info["pending"] = worktree.uncommitted(info["cwd"], info.get("carried") or {})
                # a sequential turn lands the branch the user has checked out (the agent may have switched)
                info["head"] = worktree.fetch_back(self.store, started["run_id"], info["base"])
                return worktree.ahead(info["path"], info["base_sha"]) > 0 or bool(info["pending"])
            self.commit_all(started)
            info["head"] = worktree.fetch_back(self.store, started["run_id"])
            return worktree.ahead(info["path"], info["base_sha"]) > 0
        except LoopxError as exc:
            out["note"] = f"could not commit the worktree: {exc.message}"
            info["broken"] = exc.message  # its work is not in the project: the workspace is kept
            return None

    def commit_all(self, started: dict) -> None:
        """loopx's own commit of what the agent left uncommitted in its workspace."""
        info = started["worktree"]
        title = started.get("todo_id") or "planning"
        worktree.commit_all(info["path"], f"loopx: {started['run_id']} ({title})", info.get("carried"))

    def land(self, started: dict, out: dict) -> None:
        """Merge a verified run's branch back (or gate it), then remove the worktree. A failed run
        keeps its worktree for a human (``loopx doctor`` lists it); a branch with unmerged work is
        kept when the merge waits at a gate, conflicts, or the run was not verified."""
        info = started["worktree"]
        rid = started["run_id"]
        if info.get("sequential"):
            self.bring_back(started, out)
            return
        if out["result"] == "failed":
            return self.kept(started, {"note": "the run failed"})
        res = None
        try:
            if out["verified"] and out["result"] in ("progress", "completion"):
                run = self.store.read(lambda st: queries.resolve_run(st, rid))
                assert self.base is not None  # a run has a worktree only in parallel mode, which has a base
                res = merge.integrate(self.store, self.actor, run, self.base)
            ahead = worktree.ahead(info["path"], info["base_sha"]) > 0
            keep_branch = (res["action"] in ("gated", "deferred", "conflict")) if res else ahead
            worktree.remove(self.store, rid, delete_branch=not keep_branch)
        except LoopxError as exc:
            out["merge"] = res
            out["note"] = ((out.get("note") or "") + f"; worktree kept: {exc.message}").lstrip("; ")
            return self.kept(started, out)
        out["merge"] = res
        out["worktree"].update(kept=False, branch_kept=keep_branch)
        if res:
            self.log(f"  {res['message']}")

    def land_failed(self, started: dict, out: dict) -> dict:
        """A failed turn in a private workspace still brings its work back (as if it had worked in
        the project); a parallel run's worktree is kept for a human."""
        if (started.get("worktree") or {}).get("sequential"):
            self.commit_worktree(started, out)
            self.bring_back(started, out)
        elif started.get("worktree"):
            self.kept(started, {"note": "the run failed"})
        return out

    def bring_back(self, started: dict, out: dict) -> None:
        """Bring a sequential turn's workspace into the branch the user has checked out, whatever
        the turn's result (``loopx.runner.merge.land_turn``: fast-forward, else a merge commit,
        else a conflict todo or a gate), then remove the workspace. What cannot be brought back
        stays on the run's branch, and the workspace is kept, for a human (``loopx doctor``)."""
        info, rid = started["worktree"], started["run_id"]
        if info.get("broken"):
            out["note"] = ((out.get("note") or "") + f"; workspace kept: {info['broken']}").lstrip("; ")
            return self.kept(started, out)
        try:
            pending = self.pending_work(started)
            run = self.store.read(lambda st: queries.resolve_run(st, rid))
            res = merge.land_turn(self.store, self.actor, run, info["base"], info["base_sha"])
            others = worktree.moved_branches(self.store, rid, info.get("branches") or {}, info["base"])
            if others:
                res["branches"] = merge.land_branches(self.store, self.actor, run, info.get("branches") or {}, others)
            if pending and not self.copy_back(started, res, pending, out):
                return self.kept(started, out)  # the workspace is kept with what could not be brought back
            worktree.remove(self.store, rid, delete_branch=res["action"] in ("merged", "nothing"))
        except LoopxError as exc:
            out["note"] = ((out.get("note") or "") + f"; workspace kept: {exc.message}").lstrip("; ")
            return self.kept(started, out)
        out["merge"] = res
        out["worktree"].update(kept=False, branch_kept=res["action"] not in ("merged", "nothing"))
        if res["action"] != "nothing":
            self.log(f"  {res['message']}")

    def kept(self, started: dict, out: dict) -> None:
        """Mark a workspace kept for a human in its record (``loopx doctor`` names it with why; the
        next runner does not take it for a killed turn's)."""
        rec = worktrees.record(self.store.root, started["run_id"])
        try:
            worktree.save_record(self.store, started["run_id"], dict(rec or {}, kept=out.get("note") or "kept"))
        except OSError:
            pass

    def pending_work(self, started: dict) -> list[str]:
        """The agent's uncommitted work that goes into the checkout as uncommitted work (as if it had
        worked there). When the checkout changed under the turn at one of those paths (or its branch
        moved), loopx commits that work in the workspace instead, and it lands as a branch (merge
        commit, conflict todo or gate) like the agent's own commits: nothing the user wrote during the
        turn is overwritten. Returns the paths to copy after landing."""
        info = started["worktree"]
        pending = info.get("pending") or []
        if pending and not worktree.can_copy_back(self.store.project_dir, info["cwd"], pending,
                                                  info.get("carried") or {}, info["base"], info["base_sha"]):
            self.commit_all(started)
            info["head"] = worktree.fetch_back(self.store, started["run_id"], info["base"])
            return []
        return pending

    def copy_back(self, started: dict, res: dict, pending: list[str], out: dict) -> bool:
        """Write the agent's uncommitted work into the checkout once its commits (if any) landed as a
        fast-forward; False (the workspace kept, a note on the turn) when that is not so or a path
        could not be written."""
        info, P = started["worktree"], self.store.project_dir
        now = worktree.git(P, "rev-parse", "-q", "--verify", f"refs/heads/{info['base']}", check=False).stdout.strip()
        landed = now == (info.get("head") or info["base_sha"])
        failed = worktree.copy_back(P, info["cwd"], pending) if landed else pending
        if failed:
            out["merge"] = res
            out["note"] = ((out.get("note") or "") + f"; workspace kept: {len(failed)} uncommitted file(s) not "
                           f"brought back ({', '.join(failed[:3])})").lstrip("; ")
            return False
        return True

    def finish_for_agent(self, state: dict, run: dict, out: dict, report: dict | None = None,
                         changed: bool | None = None) -> dict:
        """The agent exited 0 without finishing: verify, judge the change, finish."""
        asked = [g for g in queries.pending_gates(state, run["goal"]) if g["created"] >= run["started"]
                 and (not g["blocks"] or run.get("todo") in g["blocks"])]
        if asked:
            out["note"] = f"waiting for gate {asked[0]['id']}"
            return turn.finish(self.store, self.actor, run["id"], "blocked", workdir=self.workdir, note=out["note"], report=report)
        if run.get("mode") == "plan":
            # todos are never removed: what the goal has now (held, plus the closed ones a live view left
            # out) less what it had before the turn is what the turn added
            known: set[str] = getattr(self, "todos_before", set())
            todos = [t for t in state["todos"].values() if t["goal"] == run["goal"]]
            left_out = sum((state.get("closed") or {}).get(run["goal"], {}).values())
            added = len(todos) + left_out - len(known) - getattr(self, "todos_left_out", 0)
            result = "progress" if added else "no_progress"
            out["note"] = f"planned {added} todo(s)" if added else "the planning turn added no todo"
            g = state["goals"][run["goal"]]
            if not added and (todos or left_out) and g.get("verify") and \
                    all(t["status"] in ("done", "archived") for t in todos):
                # every todo is done but the goal's command failed: a turn that fixed it directly is progress
                check = turn.run_verify(self.store, self.actor, run, g["verify"], self.timeout)
                out["verify"] = check
                if check.get("setup_error"):
                    result, out["note"] = "blocked", "setup error: " + check["setup_error"]["message"]
                elif check["passed"]:
                    result, out["note"] = "progress", "the goal's verify command passes now"
                else:
                    out["note"] = "the planning turn added no todo and the goal's verify command still fails"
                return turn.finish(self.store, self.actor, run["id"], result, workdir=self.workdir, note=out["note"], verified_by=check,
                                   report=report)
            return turn.finish(self.store, self.actor, run["id"], result, workdir=self.workdir, note=out["note"], report=report)
        if changed is None:  # in a worktree, ``changed`` is "the run's branch is ahead of the base"
            changed = (not fingerprint.in_git(self.store.project_dir)  # without git, file changes are invisible
                       or fingerprint.compute(state, run["goal"], self.store.project_dir) != run.get("fp_before"))
        cmd = turn.verify_command(state, run)
        verdict = turn.run_verify(self.store, self.actor, run, cmd, self.timeout) if cmd else None
        out["verify"] = verdict
        t = state["todos"].get(run.get("todo") or "")
        if verdict is not None and verdict.get("setup_error"):  # the setup's fault, not the agent's
            result, note = "blocked", "setup error: " + verdict["setup_error"]["message"]
        elif verdict is not None and not verdict["passed"]:
            result, note = "no_progress", f"verify failed (exit {verdict['exit_code']})"
        elif not changed:
            result, note = "no_progress", ("nothing changed (the verify command passes)" if verdict
                                           else "nothing changed")
        elif verdict is None:
            result, note = "progress", "changed, but the goal has no verify command"
        elif t and t["status"] not in ("done", "archived"):
            result, note = "completion", "verify passed"
        else:
            result, note = ("completion" if t else "progress"), "verify passed"
        out["note"] = note
        return turn.finish(self.store, self.actor, run["id"], result, workdir=self.workdir, note=note, verified_by=verdict, report=report)


def drive(store, agent: str, *, goal_id: str | None = None, preset: str | None = None, agent_cmd: str | None = None,
          once: bool = False, max_turns: int | None = None, timeout: float | None = None, dry_run: bool = False,
          lease: float = 1800.0, echo=None, log=None, first_turn: int = 1,
          permission_mode: str | None = None) -> dict:
    """Drive turns until should-run says anything but ``run`` (see the module docstring). Turns are
    numbered from ``first_turn`` (``number`` in each turn dict and in the log lines).
    ``permission_mode`` (read-only|edit|full) is mapped to the preset's own flags."""
    if preset and not agent_cmd:
        presets.check(preset, permission_mode)
        if permission_mode is None:
            _require_goal_modes(store, goal_id, preset)
    drv = Driver(store, agent, preset=preset, agent_cmd=agent_cmd, timeout=timeout, lease=lease, echo=echo, log=log,
                 permission_mode=permission_mode)
    out: dict = {"agent": drv.actor, "turns": [], "stop": None, "stopped_because": None, "exit_code": 0,
           "dry_run_packet": None}
    limit = 1 if once else max_turns
    checked_goal = False
    if not dry_run:
        out["sandbox"] = sandbox_status()
        drv.log(out["sandbox"]["line"])
    goal_id = _parallel_setup(store, drv, goal_id, out, dry_run)
    try:
        _recover(store, drv, out, dry_run)
        while True:
            if not dry_run:
                _approved_work(store, drv, out)
            if limit is not None and len(out["turns"]) >= limit:
                out["stopped_because"] = "once" if once else "max_turns"
                break
            d = _decide(store, drv, goal_id, dry_run)
            if (d["decision"] == "stop" and d["reason"] == "complete" and not dry_run
                    and not checked_goal):  # parallel runners too: merges waiting at a gate hold it back
                checked_goal = True
                done = drv.complete_goal(d["goal_id"])
                if done is not None:
                    out["goal_verify"] = done
                    if not done.get("setup_error"):
                        continue  # should-run now says done, close_goal (a human closes it) or plan
            if d["decision"] != "run":
                out.update(stop=d, stopped_because="decision")
                break
            drv.lock(d["goal_id"])
            if dry_run:
                t = turn.next_turn(store, drv.actor, goal_id=d["goal_id"], lease=lease, dry_run=True, driven=True)
                out.update(dry_run_packet=t["packet_text"], stop=d, stopped_because="dry_run")
                break
            started = _start_turn(store, drv, d["goal_id"], lease)
            if not started["started"]:
                out.update(stop=started["decision"], stopped_because="decision")
                break
            t = _take_turn(store, drv, started, first_turn + len(out["turns"]))
            out["turns"].append(t)
            drv.log(_turn_line(t))
            if t["result"] == "failed" and (t["timed_out"] or t["agent_exit"] != 0 or t.get("setup_error")):
                out.update(stopped_because="agent_failed", exit_code=1)
                break
    finally:
        if drv.sandbox is not None and "sandbox" in out:
            out["sandbox"]["refused"] = drv.sandbox.refused()
        drv.release()
    return out


def _recover(store, drv: Driver, out: dict, dry_run: bool) -> None:
    """Bring back the workspaces of turns whose runner died mid-turn (``loopx.runner.recover``)."""
    got = [] if dry_run else recover.recover(store, drv)
    if got:
        out["recovered"] = got
    for r in got:
        what = f"kept ({r['note']})" if r["kept"] else "brought back"
        drv.log(f"run {r['run_id']}, killed mid-turn: {'closed as failed; ' if r['closed'] else ''}its workspace {what}")


def _approved_work(store, drv: Driver, out: dict) -> None:
    """What humans approved since: merge gates of earlier parallel runs (also after max_parallel
    went down) and pushes, which loopx makes itself, once. Appends to out's merges and actions."""
    for m in merge.merge_approved(store, drv.actor):
        out.setdefault("merges", []).append(m)
        drv.log(f"approved merge: {m['message']}")
    for a in perform_approved(store, drv.actor):
        out.setdefault("actions", []).append(a)
        drv.log(f"approved action {a['gate_id']}: {'performed' if a.get('performed') else 'failed'}")


def _decide(store, drv: Driver, goal_id: str | None, dry_run: bool) -> dict:
    """should-run's decision for the next turn; a shared goal syncs first (bounded, see
    loopx.sync.shared.shared_tick). Raises StateError (exit 3) when the store cannot answer."""
    if not dry_run:
        budget()  # a malformed LOOPX_NOTIFY_BUDGET is exit 2 here (sending after the decision never fails it)
        note = shared.shared_tick(store, goal_id)
        if note:
            drv.log(note)
    d = decide.should_run(store, goal_id=goal_id, agent=drv.agent, actor=drv.actor, record=not dry_run,
                          tick=not dry_run, on_decided=None if dry_run else _notify)
    if d["decision"] == "error":
        raise StateError(d["message"], "see `loopx doctor`", code=d["reason"])
    return d


def _take_turn(store, drv: Driver, started: dict, number: int) -> dict:
    """Run the started turn ``number``; its turn dict. Raises Interrupted on Ctrl-C outside the
    agent wait (verify, finish), after closing the run as failed."""
    drv.log(f"turn {number}: {started['run_id']} on {started['todo_id'] or ('a trial' if started.get('mode') == 'trial' else 'planning')}")
    try:
        t = drv.turn(started)
    except KeyboardInterrupt:
        turn.close(store, drv.actor, started["run_id"], "failed", "interrupted (Ctrl-C)", report={"unjudged": True})
        raise Interrupted("interrupted: the run was closed as failed", "run `loopx run` again to continue") from None
    t["number"] = number
    return t


def _parallel_setup(store, drv: Driver, goal_id: str | None, out: dict, dry_run: bool) -> str | None:
    """When the goal allows several runners: take a slot, rename the agent ``<name>-<slot>`` and
    switch to one worktree per turn. Returns the goal to drive (fixed in parallel mode)."""
    state = store.load(view="live")
    if goal_id is None:
        d = store.read(lambda st: decide.evaluate(st, clock.now()), state)
        gid = d.get("goal_id")
    else:
        gid = queries.resolve_goal(state, goal_id)["id"]
    goal = state["goals"].get(gid or "")
    n = goals.max_parallel(goal) if goal else 1
    if n <= 1:
        return goal_id

    base = worktree.base_branch(store.project_dir)  # UsageError before any slot or claim is taken
    check_agent_name(f"{drv.agent}-{n}")  # the longest runner name must be a valid agent name
    lk = RunnerLock(store, goal["id"], n)  # n > 1: the goal exists
    slot = lk.acquire()
    drv.locks[goal["id"]] = lk
    drv.rename(f"{drv.agent}-{slot}")
    drv.isolate = not dry_run
    drv.base = base
    out.update(agent=drv.actor, slot=slot, base=base)
    return gid


def _require_goal_modes(store, goal_id: str | None, preset: str) -> None:
    """A preset needs a permission mode: ``--permission-mode`` or the goal's default. Raises
    UsageError (``permission_mode_required``) naming the goals without one."""
    state = store.load(view="live")  # every goal is in the live view
    goals = [queries.resolve_goal(state, goal_id)] if goal_id else \
        [g for g in state["goals"].values() if g["status"] == "active"]
    missing = [g["id"] for g in goals if not g.get("permission_mode")]
    for g in goals:
        if g.get("permission_mode"):
            presets.mode_flags(preset, g["permission_mode"])
    if missing:
        raise UsageError(f"no permission mode for {preset} on goal {', '.join(missing[:3])}: without one a headless "
                         "host cannot edit files and the turn silently does nothing",
                         f"pass --permission-mode {'|'.join(presets.MODES)}, or have a human set the goal's default: "
                         f"loopx goal update {missing[0]} --permission-mode edit", code="permission_mode_required")


def _turn_line(t: dict) -> str:
    spent = f", {t['slots']} slot spent" if t.get("slots") else ""
    ver = ""  # "verified" qualifies progress only: never "no_progress, verified"
    if t.get("result") in ("progress", "completion"):
        ver = ", verified" if t.get("verified") else ", not verified"
    note = f" ({t['note']})" if t.get("note") else ""
    return (f"  -> {t['result']}{ver}{spent} in {clock.format_duration(t['duration'])}, "
            f"{usage_line(t.get('usage'))}{note}")


def _notify(store, state, d) -> None:
    """Send queued notifications after a decision (loopx.notify.outbox)."""
    after_decision(store, state, d)


def _start_turn(store, drv, goal_id: str, lease) -> dict:
    """``turn.next_turn``, or for a shared goal the claim through the git remote
    (``loopx.sync.shared.next_turn_synced``); an unreachable remote is a ``wait`` (shared claims wait)."""
    if not gs.shared_goals(store.load(view="live"), goal_id):
        return turn.next_turn(store, drv.actor, goal_id=goal_id, lease=lease, driven=True)
    try:
        return shared.next_turn_synced(store, drv.actor, goal_id=goal_id, lease=lease,
                                   remote=(gs.read_status(store) or {}).get("remote"), driven=True)
    except gs.RemoteUnreachable as exc:
        return {"started": False, "decision": {"decision": "wait", "reason": "remote_unreachable", "goal_id": goal_id,
                                               "message": f"{exc.message}; shared claims wait for the remote",
                                               "todo_id": None}}
