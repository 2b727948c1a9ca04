"""The JSON behind the dashboard pages, built from the same kernel queries as ``loopx status``.

Every function returns a plain JSON-able dict. Projects come from the user registry
(``loopx.kernel.storage.registry.load()``) and are named in URLs by an opaque ``key`` (a hash of the path)
so a browser never sends a file path. Folded states are cached per project and reused while the
store's files are unchanged (size and mtime), so polling costs a few ``stat`` calls.

Errors: ``ApiError(status, code, message, hint)`` for bad input; a project whose store cannot be
read shows up with an ``error`` field instead of failing the whole overview.
"""

from __future__ import annotations

import os
import re
import threading
import time

from loopx import __version__
from loopx.errors import Conflict, HumanRequired, LoopxError, NotFound, StateError
from loopx.kernel import humans, reasons
from loopx.kernel.policy import decide, review, tick, trialstep
from loopx.kernel.read import budget, experiments, fingerprint, notices, queries
from loopx.kernel.read import watching as watches
from loopx.kernel.read.status import summary
from loopx.kernel.storage import actors, clock, layout, machines, registry
from loopx.kernel.storage.clock import timedelta
from loopx.kernel.storage.fold import NotInLiveView
from loopx.kernel.storage.registry import project_key
from loopx.kernel.storage.store import DIRNAME, Store
from loopx.kernel.write.agents import shown_kind
from loopx.sync import shared

GOAL_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
GATE_RE = re.compile(r"^gate-[0-9a-f]{2,32}$")
KEY_RE = re.compile(r"^[0-9a-f]{16}$")
RUNS_SHOWN = 30
DONE_SHOWN = 30
CHART_BINS = 24
GROUPS = ("needs_you", "running", "ready", "waiting", "stopped")
GIT_REUSE = 30.0  # seconds the git part of a project's fingerprint is reused


class ApiError(Exception):
    """A request the API refuses: HTTP ``status``, stable ``code``, one-line ``message`` and ``hint``."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.hint = status, code, message, hint

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "hint": self.hint}


def _sig(root: str) -> tuple:
    out: list[tuple[int, int] | None] = []
    for name in (*map(layout.open_log, layout.STREAMS), layout.FORMAT):
        try:
            st = os.stat(os.path.join(root, name))
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


class Api:
    """Read and decide through the kernel. Thread-safe; cached states are never mutated."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[tuple, dict]] = {}
        self._lock = threading.Lock()
        self._status: tuple[tuple, dict] | None = None
        self._notices: tuple[tuple, dict] | None = None
        self._computing = {"status": threading.Lock(), "notices": threading.Lock()}
        self._git: dict[str, tuple[float, str]] = {}

    # ------------------------------------------------------------------ projects and states
    def projects(self) -> list[dict]:
        """``[{key, path, name}]`` for every registered project, sorted by name."""
        rows = [{"key": project_key(p), "path": p, "name": os.path.basename(p.rstrip("/\\")) or p}
                for p in registry.load()]
        return sorted(rows, key=lambda r: (r["name"].lower(), r["path"]))

    def project(self, key) -> dict:
        if not isinstance(key, str) or not KEY_RE.match(key):
            raise ApiError(400, "bad_project", "the project key is malformed", "open the project from the overview")
        for p in self.projects():
            if p["key"] == key:
                return p
        raise ApiError(404, "no_project", "no such project is registered", "run `loopx connect` in the project")

    def state(self, path: str, view: str = "full") -> dict:
        """The folded state of the project at ``path`` (cached while its files are unchanged);
        ``view="live"`` the live view (what the overview needs: no history is folded)."""
        root = os.path.join(path, DIRNAME)
        if not os.path.isdir(root):
            raise StateError(f"{path} is no longer connected (no .loopx/)",
                             f"run `loopx connect` there again, or forget it: `loopx disconnect {path}`")
        sig = _sig(root)
        with self._lock:
            hit = self._cache.get((root, view))
        if hit and hit[0] == sig:
            return hit[1]
        state = Store(root).load(view=view)
        with self._lock:
            self._cache[(root, view)] = (sig, state)
        return state

    def decision(self, state: dict, row: dict, project_dir: str, now_iso: str, hosts: dict | None = None) -> dict | None:
        """What ``loopx quota should-run --goal-id G`` would answer now (nothing is recorded).
        The git part of the fingerprint is reused for GIT_REUSE seconds per project."""
        if row["status"] != "active":
            return None

        try:  # the one input builder of every client (windows, watches, host errors): what should-run says
            return decide.for_client(Store(os.path.join(project_dir, DIRNAME)), state, row["id"],
                                     now=clock.parse_ts(now_iso), git=lambda: self._git_part(project_dir),
                                     hosts=hosts)
        except LoopxError:
            return None

    def _git_part(self, project_dir: str) -> str:
        now = time.monotonic()
        with self._lock:
            hit = self._git.get(project_dir)
        if hit and now - hit[0] < GIT_REUSE:
            return hit[1]
        part = fingerprint.git_part(project_dir)
        with self._lock:
            self._git[project_dir] = (now, part)
        return part

    # ------------------------------------------------------------------ overview
    def status(self, now_iso: str) -> dict:
        """All projects with their goals grouped as needs_you, running, ready, waiting, stopped.
        The answer is reused within the same clock second while no store file changed."""
        listed = self.projects()
        key = (now_iso[:19], tuple((p["path"], _sig(os.path.join(p["path"], DIRNAME))) for p in listed))
        return self._shared("status", key, lambda: self._status_of(listed, now_iso))

    def _shared(self, slot: str, key: tuple, compute):
        """The answer cached in ``self._<slot>`` for ``key``, else ``compute()`` stored there. One
        computation per slot at a time: concurrent requests for the same key wait for it and share
        its answer instead of each reading the stores again."""
        with self._lock:
            hit = getattr(self, "_" + slot)
        if hit and hit[0] == key:
            return hit[1]
        with self._computing[slot]:
            with self._lock:
                hit = getattr(self, "_" + slot)
            if hit and hit[0] == key:
                return hit[1]
            data = compute()
            with self._lock:
                setattr(self, "_" + slot, (key, data))
        return data

    def _overview(self, state: dict, p: dict, now_iso: str) -> tuple[dict, list]:
        """(status summary, the should-run answer per goal) of one project. Raises
        NotInLiveView on a live view that left out a record a rule looked up."""
        data = summary(state, now_iso, store_root=os.path.join(p["path"], layout.DIRNAME))
        hosts: dict = {}  # the hosts' usage windows, read once for every goal of the overview
        return data, [self.decision(state, g, p["path"], now_iso, hosts) for g in data["goals"]]

    def _status_of(self, listed: list[dict], now_iso: str) -> dict:
        projects = []
        counts = dict.fromkeys(GROUPS, 0)
        for p in listed:
            row = {"key": p["key"], "name": p["name"], "path": p["path"], "goals": [], "error": None,
                   "problems": [], "read_only": None}
            try:
                state = self.state(p["path"], view="live")
                try:
                    data, decisions = self._overview(state, p, now_iso)
                except NotInLiveView:  # a rule looked up a record the live view left out
                    state = self.state(p["path"])
                    data, decisions = self._overview(state, p, now_iso)
            except LoopxError as exc:
                row["error"] = {"code": exc.code, "message": exc.message, "hint": exc.hint}
                projects.append(row)
                continue
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:  # one broken store
                row["error"] = {"code": "unreadable", "message": f"{type(exc).__name__}: {exc}",  # must not hide the rest
                                "hint": "run `loopx doctor` in that project"}
                projects.append(row)
                continue
            row["problems"] = data["store"]["problems"]
            row["read_only"] = data["store"]["read_only"]
            for g, d in zip(data["goals"], decisions, strict=True):
                group, reason, next_check = classify(g, d)
                counts[group] += 1
                row["goals"].append(dict(g, group=group, reason=reason, next_check_at=next_check,
                                         decision=d.get("decision") if d else None,
                                         decision_reason=d.get("reason") if d else None))
            row["agents"] = len(data["agents"])
            projects.append(row)
        return {"generated_at": now_iso, "version": __version__, "projects": projects, "counts": counts}

    # ------------------------------------------------------------------ notifications
    def notices(self, now_iso: str, limit: int = 20) -> dict:
        """The newest notifiable events of the last day across projects (newest first):
        ``{"notices": [{id ("<project key>:<event id>"), project, goal, type, reason, title, body, ts}]}``.
        The page shows each one once as a system notification (the Notifications API). Read from
        each project's live view (which keeps the notices as they are); the answer is reused within
        the same clock second while no store file changed, computed once for concurrent requests."""
        listed = self.projects()
        key = (now_iso[:19], limit, tuple((p["path"], _sig(os.path.join(p["path"], DIRNAME))) for p in listed))
        return self._shared("notices", key, lambda: self._notices_of(listed, now_iso, limit))

    def _notices_of(self, listed: list[dict], now_iso: str, limit: int) -> dict:
        floor = clock.iso(clock.parse_ts(now_iso) - timedelta(seconds=notices.MAX_AGE))
        rows = []
        for p in listed:
            try:
                state = self.state(p["path"], view="live")
            except (LoopxError, OSError, ValueError, TypeError, KeyError, AttributeError):
                continue
            for n in state.get("notices") or ():
                if n["ts"] >= floor:
                    rows.append({"id": f"{p['key']}:{n['event_id']}", "project": p["name"], "goal": n.get("goal"),
                                 "type": n["type"], "reason": n.get("reason"), "title": n["title"],
                                 "body": n.get("body") or "", "ts": n["ts"]})
        rows.sort(key=lambda r: r["ts"], reverse=True)
        return {"generated_at": now_iso, "notices": rows[:limit]}

    # ------------------------------------------------------------------ goal page
    def goal(self, key, goal_id, now_iso: str) -> dict:
        """One goal: summary, todo board, gates, runs timeline, budget chart, recent evidence."""
        p = self.project(key)
        if not isinstance(goal_id, str) or not GOAL_RE.match(goal_id):
            raise ApiError(400, "bad_goal", "the goal id is malformed", "open the goal from the overview")
        state = self.state(p["path"])
        goal = state["goals"].get(goal_id)
        if goal is None:
            raise ApiError(404, "no_goal", f"no goal {goal_id} in {p['name']}", "open the goal from the overview")
        row = summary(state, now_iso, goal_id, store_root=os.path.join(p["path"], layout.DIRNAME))["goals"][0]
        decision = self.decision(state, row, p["path"], now_iso)
        group, reason, next_check = classify(row, decision)
        board = {}
        for st, todos in queries.by_status(state, goal_id, now_iso).items():
            shown = todos[-DONE_SHOWN:] if st in ("done", "archived") else todos
            board[st] = {"count": len(todos), "items": [_todo(t, state["goals"], state) for t in shown]}
        gates = sorted((g for g in state["gates"].values() if g["goal"] == goal_id),
                       key=lambda g: (g["status"] != "pending", g["created"]))

        names = machines.labels(state) if machines.several(state) else None  # several machines: say which
        watch_rows = []
        if state.get("watches"):
            book = tick.load_book(Store(os.path.join(p["path"], DIRNAME)))
            watch_rows = watches.describe(state, book, now_iso, goal_id)
        return {
            "generated_at": now_iso, "project": {k: p[k] for k in ("key", "name", "path")},
            "watches": watch_rows,
            "goal": {k: goal.get(k) for k in ("id", "objective", "done_when", "status", "priority", "verify",
                                             "scope", "quota", "created", "updated", "status_note")},
            "summary": dict(row, group=group, reason=reason, next_check_at=next_check, decision=decision),
            "board": board, "gates": [_gate(g, names) for g in gates[:50]], "machines": names,
            "runs": runs_timeline(state, goal_id, names=names), "chart": budget_chart(state, goal, now_iso),
            "evidence": [_evidence(e) for e in reversed(queries.recent_evidence(state, goal_id, 20))],
            **_experiment(state, goal_id, p["path"]),
        }

    def review(self, key, goal_id) -> dict:
        """The review packet as Markdown text (``available: False`` when this loopx has none)."""
        p = self.project(key)
        if not isinstance(goal_id, str) or not GOAL_RE.match(goal_id):
            raise ApiError(400, "bad_goal", "the goal id is malformed", "open the goal from the overview")

        d = review.build(Store(os.path.join(p["path"], DIRNAME)), goal_id=goal_id)
        return {"available": True, "markdown": review.render_markdown(d)}

    # ------------------------------------------------------------------ agents
    def agents(self, now_iso: str) -> dict:
        """Registered agents per project with last seen and held todos, and the handoff log."""
        rows = []
        for p in self.projects():
            try:
                state = self.state(p["path"])
            except (LoopxError, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                msg = exc.message if isinstance(exc, LoopxError) else f"{type(exc).__name__}: {exc}"
                rows.append({"key": p["key"], "name": p["name"], "error": msg, "agents": [], "handoffs": []})
                continue

            held = queries.holdings(state, now_iso, expired=True)
            agents = [dict(a, kind=shown_kind(a), holds=held.get(actors.agent(a["name"]), [])) for a in
                      sorted(state["agents"].values(), key=lambda a: a.get("last_seen") or "", reverse=True)]
            rows.append({"key": p["key"], "name": p["name"], "error": None, "agents": agents,
                         "handoffs": list(reversed(state["handoffs"][-50:]))})
        return {"generated_at": now_iso, "projects": rows}

    # ------------------------------------------------------------------ deciding a gate
    def decide(self, body: dict, *, user_agent: str | None) -> dict:
        """Approve or reject a gate as the human running this server. ``body``: ``{project, gate,
        decision: approve|reject, code, note}``. Maps kernel errors to ApiError (400/403/404/409)."""
        if not isinstance(body, dict):
            raise ApiError(400, "bad_body", "the request body must be a JSON object")
        p = self.project(body.get("project"))
        gate_id, decision, code, note = (body.get(k) for k in ("gate", "decision", "code", "note"))
        if not isinstance(gate_id, str) or not GATE_RE.match(gate_id):
            raise ApiError(400, "bad_gate", "the gate id is malformed", "use the full gate id")
        if decision not in ("approve", "reject"):
            raise ApiError(400, "bad_decision", "decision must be approve or reject")
        if not isinstance(code, str) or not code.strip() or len(code) > 64:
            raise ApiError(400, "code_required", "type the gate's short code to confirm")
        if note is not None and (not isinstance(note, str) or len(note) > 2000):
            raise ApiError(400, "bad_note", "the note must be text of at most 2000 characters")
        store = Store(os.path.join(p["path"], DIRNAME))
        if gate_id not in store.load()["gates"]:
            raise ApiError(404, "no_gate", f"no gate {gate_id} in {p['name']}", "reload the page")
        try:
            human = humans.dashboard_channel(user_agent)

            out = shared.decide_gate(store, human.actor, gate_id, approve=decision == "approve",
                                note=note or None, channel="dashboard", user_agent=user_agent, code=code, human=human)
            if decision == "approve" and out.get("kind") == "promote":  # research experiments: merge the frontier

                out["promoted"] = trialstep.promote_approved(store, human.actor)
            return out
        except NotFound as exc:
            raise ApiError(404, exc.code, exc.message, exc.hint) from None
        except HumanRequired as exc:
            raise ApiError(403, exc.code, exc.message, exc.hint) from None
        except (Conflict, StateError) as exc:
            raise ApiError(409, exc.code, exc.message, exc.hint) from None
        except LoopxError as exc:
            raise ApiError(400, exc.code, exc.message, exc.hint) from None


# ---------------------------------------------------------------------- shaping helpers
def classify(row: dict, decision: dict | None) -> tuple[str, str, str | None]:
    """(group, reason, next_check_at) for one goal summary row from ``status.summary`` and the
    goal's should-run ``decision`` (``decide.for_client``; None when it could not be evaluated).
    The group is the reason registry's (loopx.kernel.reasons); an open run only moves a ``ready``
    or ``waiting`` goal to ``running``. Never decided by a message's text."""
    if row["status"] in ("done", "stopped", "paused"):
        return "stopped", row["status"], None
    if decision is None:
        return "waiting", "the decision could not be evaluated (`loopx quota should-run --explain`)", None

    group, msg = reasons.group(decision), decision.get("message") or ""
    if group in ("ready", "waiting") and row["open_runs"]:  # detail: work is in flight while the answer stands
        return "running", f"{len(row['open_runs'])} open run(s); should-run: {decision['decision']} ({msg})", None
    return group, msg, decision.get("next_check_at") if group == "waiting" else None


def budget_chart(state: dict, goal: dict, now_iso: str, bins: int = CHART_BINS) -> dict:
    """Slots spent per time bin over the goal's rolling window (oldest bin first)."""
    b = budget.budget(state, goal, now_iso)
    start = clock.parse_ts(now_iso) - timedelta(seconds=b["window"])
    width = b["window"] / bins
    counts = [0] * bins
    for ts, n, _run in b["ledger"]:
        i = int((clock.parse_ts(ts) - start).total_seconds() // width) if width else 0
        counts[min(bins - 1, max(0, i))] += n
    return {"start": clock.iso(start), "end": now_iso, "window": b["window"], "bin_seconds": width,
            "bins": counts, "spent": b["spent"], "slots": b["slots"]}


def runs_timeline(state: dict, goal_id: str, limit: int = RUNS_SHOWN, names: dict | None = None) -> list[dict]:
    """The goal's newest runs, newest first, with their evidence; with ``names`` ({node: machine},
    given when the store has records of several machines) each run also names its ``machine``."""
    runs = sorted((r for r in state["runs"].values() if r["goal"] == goal_id), key=lambda r: (r["started"], r.get("seq", 0)),
                  reverse=True)[:limit]
    wanted = {r["id"] for r in runs}
    by_run: dict[str, list[dict]] = {}
    for e in state["evidence"].values():
        if e.get("run") in wanted:
            by_run.setdefault(e["run"], []).append(_evidence(e))
    decision = state["decisions"].get(goal_id)
    out = []
    for r in runs:
        todo = state["todos"].get(r.get("todo") or "")
        out.append({"id": r["id"], "agent": r.get("agent"), "todo": r.get("todo"),
                    "todo_title": todo["title"] if todo else None, "started": r["started"],
                    "finished": r["finished"], "result": r["result"], "verified": r["verified"],
                    "slots": r.get("slots", 0), "mode": r.get("mode"), "note": r.get("note"),
                    "usage": r.get("usage"), "changes": r.get("changes"), "host": r.get("host"),
                    "permission_mode": r.get("permission_mode"), "setup_error": r.get("setup_error"),
                    "out_of_scope": r.get("out_of_scope"), "evidence": by_run.get(r["id"], [])})
        if names is not None:
            out[-1]["machine"] = names.get(r.get("node") or "") or r.get("node")
    return _with_decision(out, decision)


def _with_decision(runs: list[dict], decision: dict | None) -> list[dict]:
    """The goal's last recorded should-run decision is shown on the newest run."""
    for r in runs:
        r["decision"] = None
    if runs and decision:
        runs[0]["decision"] = {k: decision.get(k) for k in ("decision", "reason", "message", "ts")}
    return runs


def _todo(t: dict, goals: dict | None = None, state: dict | None = None) -> dict:
    c = t.get("claim") or {}

    return {"id": t["id"], "title": t["title"], "status": t["status"], "priority": t.get("priority", 0),
            "holder": c.get("holder"), "machine": machines.at(state, c.get("node")) if state and c else None, "lease_until": c.get("lease_until"), "since": c.get("since"),
            "note": t.get("note"), "evidence": len(t.get("evidence") or []), "depends_on": t.get("depends_on") or [],
            "depends_on_goals": [{"id": g, "status": (goals or {}).get(g, {}).get("status")}
                                 for g in t.get("depends_on_goals") or []],
            "acceptance": t.get("acceptance")}


def _gate(g: dict, names: dict | None = None) -> dict:
    out = {k: g.get(k) for k in ("id", "kind", "question", "context", "blocks", "status", "requested_by",
                                 "decided_by", "channel", "note", "created", "decided", "standing", "used")}
    if names is not None and g.get("decided_node"):  # several machines: where the human decided it
        out["decided_on"] = names.get(g["decided_node"]) or g["decided_node"]
    out["approval"] = None
    if g["status"] == "approved":  # which approval a turn may use, and a used one as used
        out["approval"] = "standing" if g.get("standing") else ("used" if g.get("used") else "once")
    out["code"] = g["id"].split("-", 1)[-1] if g["status"] == "pending" else None
    return out


EXP_POINTS = 2000  # trials drawn in the chart and listed in the table (the newest)


def _experiment(state: dict, goal_id: str, project_dir: str) -> dict:
    """``{"experiment": {summary, trials, promote}}`` for a research experiment goal, else ``{}``.
    The holdout result of a pending or decided promote gate is included: the dashboard is the
    human's view (the agent has no session), and a promotion is the human's decision."""
    if not (state.get("experiments") or {}).get(goal_id):
        return {}

    rows = experiments.rows(state, goal_id)[-EXP_POINTS:]
    trials = [{k: t.get(k) for k in ("id", "number", "hypothesis", "agent", "value", "delta", "decision", "commit",
                                     "duration", "claims", "reason", "baseline")} for t in rows]
    store = Store(os.path.join(project_dir, DIRNAME))
    promote = [dict(_gate(g), holdout=trialstep.read_holdout(store, g["id"])) for g in state["gates"].values()
               if g["goal"] == goal_id and g["kind"] == "promote"]
    promote.sort(key=lambda g: g["created"])
    return {"experiment": {"summary": experiments.summary(state, goal_id), "trials": trials, "promote": promote[-5:]}}


def _evidence(e: dict) -> dict:
    return {k: e.get(k) for k in ("id", "kind", "summary", "exit_code", "todo", "run", "ts", "actor", "commit")}
