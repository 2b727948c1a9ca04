"""The CLI's wording of kernel errors: the flag that sets a field, the command that helps.

The kernel raises errors whose message and hint name no flag and no command (a ``loopx.api``
caller has neither); they carry a stable ``code`` and structured ``details``. ``for_cli(exc,
command)`` rewords such an error in place for ``loopx <command>``: a ``FieldError`` names the flag
instead of the field (``FLAGS``, ``COMMAND_FLAGS``), and a code in ``HINTS`` or ``MESSAGES`` gets
its CLI sentence built from ``details``. What the CLI prints stays one line with a hint.
"""

from __future__ import annotations

from loopx.errors import FieldError, LoopxError, either

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from collections.abc import Callable

    Phrase = Callable[[dict], str | None]

# kernel field -> the flag that sets it, where the flag is "--" + the field with dashes
_SAME = ("acceptance", "allow", "as_branch", "check", "claim", "command", "commit", "context", "cooldown", "deny",
         "depends_on", "depends_on_goal", "detail", "direction", "done_when", "every", "evidence", "exit_code",
         "goal_id", "guard", "holdout", "host", "host_reserve", "key", "lease", "limit", "match",
         "max_parallel", "max_tokens", "max_usd", "measure", "metric", "metric_pattern", "min_delta", "name",
         "next", "note", "on", "permission_mode", "plateau", "priority", "protect", "protect_path", "question",
         "reason", "reopen", "result", "shared", "since", "slots", "stall_after", "summary", "timeout",
         "title", "todo", "todo_verify", "trial_timeout", "turns", "tz", "use_leftover", "verify", "window")
FLAGS: dict[str, str] = {f: "--" + f.replace("_", "-") for f in _SAME} | {"objective": "--goal-text",
                                                                           "force": "--force-unverified"}
# where one command sets a field another way (``loopx todo add TITLE`` takes the title as its argument)
COMMAND_FLAGS: dict[str, dict[str, str]] = {
    "todo add": {"title": "title"},
    "start-goal": {"allow": "--scope"},
}

_OVERRIDE = "; only a human can override: --force-unverified"


def _claimed(d: dict) -> str | None:
    if not d.get("live"):
        return f"claim it first with `loopx todo claim {d['todo']}`"
    if d.get("action") == "claim":
        return "pick another todo (`loopx todo list --ready`) or wait for the lease to expire"
    if d.get("action") == "finish":
        return "the todo went to another agent; start a new turn with `loopx next`"
    return None  # "pick another todo, or ask the holder for a handoff" names no command


_LISTING = {"run": "loopx history --rounds"}  # where to see the ids of a kind without a `list` action


def _not_experiment(d: dict) -> str | None:
    if "action" not in d:
        return None
    return {"hypothesize": "start one with `loopx start-goal --experiment ...`",
            "record": "see `loopx experiment show`",
            "update": "use --verify for a goal's check command"}.get(d.get("action") or "", "see `loopx goal show`")


# code, or details["reason"] where the code is a broader one kept for callers -> the CLI's hint,
# from the error's details (with "flag" for details["field"] and "flags" for details["fields"]);
# None keeps the kernel's hint
HINTS: dict[str, Phrase] = {
    "secret_in_command": lambda d: ("read it from the environment instead, e.g. --verify 'pytest -q' with "
                                    "DB_PASSWORD exported before loopx runs it"),
    "nothing_to_update": lambda d: "pass " + either(d["flags"]),
    "nothing_to_set": lambda d: "pass " + either(d["flags"]) + (" (repeatable; --clear-* empties a list)"
                                                                  if d.get("lists") else ""),
    "stale_fence": lambda d: ("nobody holds it: claim it with `loopx next`" if d.get("unclaimed") else
                              "your lease was taken over; run `loopx next` for new work" if d.get("taken_over")
                              else None),
    "claimed_by_other": _claimed,
    "not_claimed": lambda d: f"claim it: `loopx todo claim {d['todo']}`",
    "todo_blocked": lambda d: f"reopen it with `loopx todo update {d['todo']} --reopen`",
    "gate_pending": lambda d: f"a human must decide it: `loopx gate show {d['gate']}`",
    "goal_closed": lambda d: f"resume it first: `loopx goal resume {d['goal']}`",
    "goal_not_active": lambda d: "resume it first: `loopx goal resume`",
    "goal_exists": lambda d: f"see it with `loopx goal show {d['goal']}` or pick another --goal-id",
    "no_such_goal": lambda d: "list goals with `loopx goal list`",
    "no_such_id": lambda d: f"list them with `{_LISTING.get(d['kind'], 'loopx ' + d['kind'] + ' list')}`",
    "no_goal": lambda d: 'start one: loopx start-goal --goal-text "..."',
    "goal_unreadable": lambda d: "run `loopx doctor` (it names the unreadable line), or pick another --goal-id",
    "depends_on_own_goal": lambda d: "use --depends-on TODO for an order inside the goal",
    "depends_on_stopped_goal": lambda d: f"resume it first (`loopx goal resume {d['goal']}`) or drop --depends-on-goal",
    "human_required": lambda d: ("make its verify pass, or ask a human to run `loopx todo done ... --force-unverified`"
                                 if d.get("field") == "force" else None),
    "gate_decide": lambda d: "ask a human to run `loopx gate approve` in a terminal",
    "dashboard_from_agent": lambda d: "start `loopx dashboard` from your own terminal",
    "verify_broken": lambda d: f"fix the setup, then run `loopx todo done {d['todo']}` again" if "todo" in d else None,
    "evidence_failing": lambda d: (f"fix it and run `loopx todo done {d['todo']}` again{_OVERRIDE}" if d.get("verify")
                                   else "make it pass and record a passing run (`loopx evidence add ... --exit-code 0`), "
                                        "then cite that" + _OVERRIDE),
    "verify_required": lambda d: (f"`loopx todo done {d['todo']}` runs it for you, or finish the turn with "
                                  "`loopx turn finish --run RUN --result completion --verify`" + _OVERRIDE),
    "evidence_unproven": lambda d: ("cite a passing test or command (--exit-code 0), or a commit, diff, artifact or link"
                                    + _OVERRIDE),
    "evidence_required": lambda d: "record it first: `loopx evidence add --kind test --summary ...`, then pass --evidence ID",
    "no_metric": lambda d: "e.g. --metric val_acc --direction max",
    "no_measure": lambda d: "e.g. --measure 'python eval.py'",
    "no_open_trial": lambda d: "start one with `loopx next` (or pass --goal-id for the next trial)",
    "not_an_experiment": _not_experiment,
    "signing_key_missing": lambda d: "set it with `loopx gate signing --enable --key ~/.ssh/id_ed25519`",
    "signer_unknown": lambda d: "add your key with `loopx gate signing --enable --key PATH`",
    "signing_key_required": lambda d: "pass --key ~/.ssh/id_ed25519 (or the .pub of an ssh-agent key)",
    "watch_exists": lambda d: "pick another --name or remove the old watch",
    "already_an_experiment": lambda d: f"see `loopx experiment show {d['goal']}`",
    "no_verify_command": lambda d: f"set one: `loopx goal update {d['goal']} --verify CMD`, or finish without --verify",
    "run_over": lambda d: "start a new turn with `loopx next`",
    "run_not_yours": lambda d: ("finish your own run (see `loopx history`); a run is finished on the machine that "
                                "started it, or a human hands it over (`loopx handoff`)"),
    "branch_exists": lambda d: f"delete it (`git branch -D {d['branch']}`) or pick another --goal-id",
    "measure_frozen": lambda d: (f"start a new experiment goal with the new command (`loopx goal stop {d['goal']}`, "
                                 "then `loopx start-goal --experiment ...`)"),
    "no_frontier": lambda d: f"fix the measure command, then `loopx experiment baseline {d['goal']}`",
    "baseline_trial": lambda d: "pick a trial the agent made (`loopx trial list`)",
    "trial_not_applicable": lambda d: (f"apply it to a separate checkout of its parent (your checkout stays as it "
                                       f"is): `git worktree add ../trial-{d['trial']} {d['parent']}`, then "
                                       f"`loopx trial apply {d['trial']} --into ../trial-{d['trial']}`"),
    "nothing_to_promote": lambda d: "run trials first (`loopx run`)",
    "holdout_tracked": lambda d: (f"untrack it: `git rm --cached {' '.join(d['paths'][:3])}`, list it in .gitignore "
                                  f"and commit, then {d.get('then') or 'try again'}"),
    "promote_pending": lambda d: f"decide it: loopx gate show {d['gate']}",
    "no_base_branch": lambda d: "promote with --as-branch NAME",
    "bad_trace": lambda d: "pass a file from `loopx trace export`",
    "no_remote": lambda d: "add one (`git remote add origin URL`) or pass --remote NAME",
    "nothing_recorded": lambda d: ("nothing was recorded; the loop goes on locally and this waits until the remote "
                                   "answers (`loopx sync` tells you)"),
    "decided_elsewhere": lambda d: ("run `loopx sync` to fold that decision in; open a new gate if the question needs "
                                    "another decision"),
    "lease_lost": lambda d: ("finish this turn (`loopx turn finish --result failed`) and start a new one with "
                             "`loopx next --sync`"),
    "format_missing": lambda d: "run `loopx connect` to recreate it (events are kept)",
    "format_unreadable": lambda d: "restore it from git or run `loopx doctor`",
    "sync_needs_git": lambda d: "install git; loopx sync uses your own git",
    "sync_timeout": lambda d: ("the loop goes on locally; shared claims wait until `loopx sync` reaches the remote "
                               "(LOOPX_SYNC_TIMEOUT sets the limit)"),
    "no_git_repo": lambda d: "loopx sync exchanges the store through git: `git init` and add a remote",
    "connect_project": lambda d: f"run `loopx connect --project {d['project']}`",
    "connect_here": lambda d: "run `loopx connect` in the project's root",
    "store_read_only": lambda d: "nothing was written; see `loopx doctor`",
    "migration_lost_records": lambda d: (f"the store stays in format 1 (a copy is in {d['backup']}); "
                                         "run `loopx doctor` and report this"),
}
# the same, for the few messages that name a flag themselves
MESSAGES: dict[str, Phrase] = {
    "no_metric": lambda d: "--experiment needs --metric NAME",
    "not_an_experiment": lambda d: (f"goal {d['goal']} is not an experiment: {'/'.join(d['flags'])} belong to an "
                                    "experiment goal" if d.get("action") == "update" and d.get("flags") else None),
    "no_measure": lambda d: "--experiment needs --measure CMD",
    "match_required": lambda d: "--on match needs --match REGEX",
}


def flag(field: str, command: str | None = None) -> str:
    """The CLI's name of kernel field ``field`` in ``loopx <command>``; the field itself when no
    flag sets it (a label such as ``"gate kind"``)."""
    return COMMAND_FLAGS.get(command or "", {}).get(field) or FLAGS.get(field, field)


def for_cli(exc: LoopxError, command: str | None = None) -> LoopxError:
    """``exc`` with its message and hint worded for ``loopx <command>`` (changed in place)."""
    if isinstance(exc, FieldError):
        exc.message, exc.hint = exc.phrased(flag(exc.field, command))
    d = dict(exc.details)
    if "field" in d:
        d["flag"] = flag(d["field"], command)
    if "fields" in d:
        d["flags"] = [flag(f, command) for f in d["fields"]]
    if not d:
        return exc  # no fields: its raiser worded it (the commands raise errors of the same codes)
    key = d.get("reason") if d.get("reason") in HINTS or d.get("reason") in MESSAGES else exc.code
    if key in MESSAGES:
        exc.message = MESSAGES[key](d) or exc.message
    if key in HINTS:
        exc.hint = HINTS[key](d) or exc.hint
    return exc
