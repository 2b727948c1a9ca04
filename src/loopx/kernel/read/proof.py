"""When evidence proves a todo done (``loopx todo done``, ``loopx turn finish --result completion``).

Rules, in order:

1. cited evidence that failed (an exit code other than 0) is refused: a todo is never closed on
   failing evidence (``evidence_failing``);
2. a todo with its own verify command needs a passing run of exactly that command: cited, or
   recorded by the current run on the todo (``verify_required``); ``loopx todo done`` runs the
   command itself when neither exists;
3. otherwise at least one cited record must have passed (exit 0) or be of a kind without an exit
   code that shows work: ``commit``, ``diff``, ``artifact``, ``link``; a ``note`` alone, or a
   ``test``/``command`` record without an exit code, is refused (``evidence_unproven``).

``judge`` returns ``{"ok": bool, "reason": code|None, "message": str, "hint": str|None,
"passing": [evidence ids that prove it]}``. Only a human may override a refusal
(``--force-unverified``), and the completion then records ``forced: true``.
"""

from __future__ import annotations

from loopx.kernel.storage import fold

SHOWS_WORK = ("commit", "diff", "artifact", "link")


def _no(reason: str, message: str, hint: str) -> dict:
    return {"ok": False, "reason": reason, "message": message, "hint": hint, "passing": []}


def passing_verify(state: dict, todo: dict, cited: list[str], run_id: str | None) -> list[str]:
    """Ids of passing runs of the todo's own verify command among ``cited`` and ``run_id``'s evidence.
    Raises fold.NotInLiveView on a live view that finds none: it keeps only each goal's newest
    evidence, so the run's passing check may be one it left out (the full state answers)."""
    cmd = todo.get("verify")
    pool = [state["evidence"][e] for e in cited if e in state["evidence"]]
    if run_id:
        pool += [e for e in state["evidence"].values() if e.get("run") == run_id and e["id"] not in cited]
    ok = [e["id"] for e in pool if cmd and e.get("command") == cmd and e.get("exit_code") == 0]
    if not ok and run_id and cmd and fold.is_live(state):
        raise fold.NotInLiveView(run_id)
    return ok


def judge(state: dict, todo: dict, cited: list[str], run_id: str | None = None) -> dict:
    """Does ``cited`` (evidence ids of the todo's goal) prove ``todo`` done? See the module docstring."""
    evs = [state["evidence"][e] for e in cited if e in state["evidence"]]
    failing = [e for e in evs if e.get("exit_code") not in (None, 0)]
    if failing:
        e = failing[0]
        return _no("evidence_failing", f"evidence {e['id']} recorded exit {e['exit_code']} ({e['summary'][:80]}): "
                   f"{todo['id']} is not done on failing evidence",
                   "make it pass and record a passing run (exit code 0), then cite that")
    if todo.get("verify"):
        ok = passing_verify(state, todo, cited, run_id)
        if ok:
            return {"ok": True, "reason": None, "message": f"its verify command passed ({ok[0]})", "hint": None,
                    "passing": ok}
        return _no("verify_required", f"{todo['id']} has its own verify command `{todo['verify'][:200]}` and no "
                   "passing run of it is cited or recorded by the current run",
                   "closing the todo runs it for you, or finish the turn with its verify command run")
    passed = [e["id"] for e in evs if e.get("exit_code") == 0]
    work = [e["id"] for e in evs if e.get("exit_code") is None and e.get("kind") in SHOWS_WORK]
    if passed or work:
        return {"ok": True, "reason": None, "message": "cited evidence passed or shows the work", "hint": None,
                "passing": passed + work}
    if not evs:
        return _no("evidence_required", f"{todo['id']} cannot be done without evidence",
                   "record it first (a test or command with exit code 0), then cite its id")
    kinds = sorted({e.get("kind") or "?" for e in evs})
    return _no("evidence_unproven", f"the cited evidence ({', '.join(kinds)}) neither passed (exit 0) nor shows "
               "the work: a note, or a test without an exit code, does not close a todo",
               "cite a passing test or command (exit code 0), or a commit, diff, artifact or link")
