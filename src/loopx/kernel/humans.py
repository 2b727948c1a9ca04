"""Human-only changes of governance: the one list, the human channel, and ``require_human``.

Every change that loosens governance is made by a human. ``HUMAN_ONLY`` is the one list (other
commands add their entry here and call ``require_human``). Three layers enforce it:

1. The CLI: a human-only command calls ``require_human(ctx, what)``, which refuses (HumanRequired,
   exit 4, code ``human_required``) when the caller is an agent: ``--agent``/``LOOPX_AGENT``, an
   agent host's environment marker in this process, or in any ancestor process (so
   ``env -u CLAUDECODE loopx ...`` or ``env -i ...`` run from an agent's shell is still an agent).
   On success it returns a ``HumanChannel``.
2. The kernel: functions that make a human-only change take ``human=`` and refuse without a
   ``HumanChannel`` minted here (``check_channel``). Only ``require_human`` (the CLI's terminal
   path) and ``dashboard_channel`` (the dashboard's decision handler) mint one, so
   ``loopx.api`` callers and scripts that import the kernel cannot record a human decision.
3. The pre-tool guard: ``agent_command_violation(simple)`` denies an agent's tool call that runs a
   human-only loopx command, however wrapped, and any call that strips agent markers
   (``env -u``, ``env -i``, ``unset``) and then runs loopx.

A same-user process can still forge records by writing files or calling private functions; that
is detected (the log's chain, signed approvals), not prevented; see docs/security.md.
"""

from __future__ import annotations

import os

from loopx.errors import HumanRequired
from loopx.kernel.storage.actors import AGENT_ENV_MARKERS

# what -> the sentence used in refusals. Keys are stable; other commands add theirs here.
HUMAN_ONLY: dict[str, str] = {
    "gate.decide": "approving or rejecting a gate",
    "gate.standing": "a standing approval for a goal",
    "scope.widen": "widening a goal's scope or removing a protected action",
    "guard.rules": "editing the pre-tool guard's rules or protected branches",
    "goal.finish": "stopping or finishing a goal",
    "hooks.remove": "removing loopx's hooks",
    "quota.raise": "raising a goal's budget (slots, window, cooldown, stall limit, money, tokens, host reserve)",
    "connect.replace": "reconnecting a project whose store was removed, moved or replaced",
    "disconnect": "disconnecting a project",
    "watch.add": "adding a watch (its check runs a command from cron, outside any agent sandbox)",
    "watch.remove": "removing a watch",
    "notify.targets": "changing notification targets",
    "budget.money": "changing a money budget",
    "budget.tokens": "changing a token budget",
    "host.reserve": "changing a host's reserve",
    "permission.mode": "changing an agent's permission mode",
    "usage.limit": "changing usage limits",
    "goal.share": "sharing a goal with other machines",
    "goal.max_parallel": "changing max_parallel",
    "todo.reopen": "re-opening a todo",
    "force_unverified": "--force-unverified",
    "signing.config": "changing approval signing (allowed signers, signing on or off)",
    "run.handover": "handing a run over to another machine",
}

# loopx command lines an agent's tool call may never run: (words, flag that must be present or
# None, what). Matched after global options are removed; a flag match also matches `--flag=value`.
AGENT_DENIED: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (("gate", "approve"), None, "gate.decide"),
    (("gate", "reject"), None, "gate.decide"),
    (("scope", "set"), None, "scope.widen"),
    (("hooks",), "--remove", "hooks.remove"),
    (("hooks",), "--add-rule", "guard.rules"),
    (("hooks",), "--add-path-rule", "guard.rules"),
    (("hooks",), "--protect-branch", "guard.rules"),
    (("hooks",), "--no-defaults", "guard.rules"),
    (("hooks",), "--reset-rules", "guard.rules"),
    (("workflow-skills",), "--remove", "hooks.remove"),
    (("goal", "stop"), None, "goal.finish"),
    (("goal", "done"), None, "goal.finish"),
    (("quota", "set"), None, "quota.raise"),
    (("connect",), None, "connect.replace"),
    (("disconnect",), None, "disconnect"),
    (("forget",), None, "disconnect"),
    (("watch", "add"), None, "watch.add"),
    (("watch", "remove"), None, "watch.remove"),
    (("notify", "set"), None, "notify.targets"),
    (("budget", "set"), None, "budget.money"),
    (("host", "reserve"), None, "host.reserve"),
    (("goal", "share"), None, "goal.share"),
    (("todo", "update"), "--reopen", "todo.reopen"),
    (("todo", "reopen"), None, "todo.reopen"),
    ((), "--force-unverified", "force_unverified"),
    (("gate", "signing"), None, "signing.config"),
    (("goal", "update"), "--permission-mode", "permission.mode"),
    (("run",), "--permission-mode", "permission.mode"),
    (("start-goal",), "--permission-mode", "permission.mode"),
    (("usage", "set"), None, "usage.limit"),
    (("doctor",), "--fix", "doctor.fix"),
    (("experiment", "continue"), None, "experiment.continue"),  # research experiments (issue 20)
    (("experiment", "promote"), None, "experiment.promote"),
    (("experiment", "baseline"), None, "experiment.baseline"),
    (("start-goal",), None, "goal.start"),
    (("goal", "update"), "--verify", "goal.verify"),
    (("goal", "update"), "--measure", "experiment.measuring"),
    (("goal", "update"), "--metric-pattern", "experiment.measuring"),
    (("goal", "update"), "--trial-timeout", "experiment.measuring"),
    (("goal", "update"), "--guard", "experiment.measuring"),
    (("goal", "update"), "--min-delta", "experiment.measuring"),
    (("action", "perform"), None, "action.perform"),
)
HUMAN_ONLY.setdefault("goal.start", "starting a goal (its scope and verify command)")
HUMAN_ONLY.setdefault("goal.verify", "changing a goal's verify command")
HUMAN_ONLY.setdefault("goal.resume", "resuming a stopped goal")
HUMAN_ONLY.setdefault("action.perform", "performing an approved protected action")

HUMAN_ONLY.setdefault("doctor.fix", "repairing the store")
HUMAN_ONLY.setdefault("experiment.continue", "answering an experiment's plateau")
HUMAN_ONLY.setdefault("experiment.promote", "asking to promote an experiment (it runs the holdout)")
HUMAN_ONLY.setdefault("experiment.baseline", "measuring an experiment's baseline again")
HUMAN_ONLY.setdefault("experiment.measuring", "changing how an experiment measures (measure command, metric "
                      "pattern, trial timeout, guard, min delta)")

_GLOBALS_WITH_VALUE = {"--project", "--format", "--agent"}
_SEAL = object()


class HumanChannel:
    """Proof, inside this process, that a human asked: ``actor`` (``human:<login>``), ``via``
    (``terminal``, ``confirm-flag``, ``dashboard``). Minted only by this module."""

    __slots__ = ("actor", "via", "user_agent")

    def __init__(self, actor: str, via: str, user_agent: str | None = None, *, _seal=None) -> None:
        if _seal is not _SEAL:
            raise HumanRequired("a human channel is created only by the CLI's terminal path or the dashboard",
                                "ask a human to run the command in a terminal or decide on the dashboard",
                                code="human_required")
        self.actor, self.via, self.user_agent = actor, via, user_agent

    def __repr__(self) -> str:
        return f"HumanChannel({self.actor!r}, via={self.via!r})"


def ancestor_markers(max_depth: int = 40) -> list[str]:
    """Agent markers found in the environment of any ancestor process (Linux ``/proc``; elsewhere
    an empty list). ``env -u``/``env -i`` change only the child's environment, not its parents'."""
    found: list[str] = []
    if not os.path.isdir("/proc/self"):
        return found
    pid = os.getppid()
    for _ in range(max_depth):
        if pid <= 1:
            break
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            break
        for m in AGENT_ENV_MARKERS:
            if (b"\0" + m.encode() + b"=") in (b"\0" + env):
                value = (b"\0" + env).split(b"\0" + m.encode() + b"=", 1)[1].split(b"\0", 1)[0]
                if value and m not in found:
                    found.append(m)
        try:
            pid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (ValueError, IndexError):
            break
    return found


def agent_evidence(ctx=None) -> str | None:
    """Why this process counts as an agent, or None: ``--agent``, a marker here or in a parent."""
    if ctx is not None and getattr(ctx, "agent", None):
        return f"agent {ctx.agent}"
    here = [m for m in AGENT_ENV_MARKERS if os.environ.get(m)]
    if here:
        return "an agent session (" + ", ".join(here) + " set)"
    up = ancestor_markers()
    if up:
        return "a process started from an agent session (" + ", ".join(up) + " set in a parent process)"
    from loopx.kernel.storage import agentseen  # re-parented (setsid, double fork): the hooks saw the session

    seen = agentseen.live()
    if seen and agentseen.in_agent_session(seen):
        return "a process in the session of a running agent (recorded by its hooks)"
    if seen and agentseen.detached():
        return ("a process detached from every terminal (setsid or a double fork) while an agent session runs; "
                "run it from a terminal (a dashboard decides while the terminal it was started from is open)")
    return None


def require_human(ctx_or_channel, what: str, *, via: str = "terminal") -> HumanChannel:
    """Refuse unless a human is asking; returns the HumanChannel to pass to the kernel.

    ``ctx_or_channel``: a CLI Context (checked: no ``--agent``, no agent marker in this process or
    any parent), None (the markers only: ``loopx run --agent PRESET`` names a host, not the caller),
    or a HumanChannel already minted (returned as is). ``what``: a key of HUMAN_ONLY
    (or a free sentence). Raises HumanRequired (exit 4, code ``human_required``)."""
    if isinstance(ctx_or_channel, HumanChannel):
        return ctx_or_channel
    label = HUMAN_ONLY.get(what, what)
    who = agent_evidence(ctx_or_channel)
    if who:
        raise HumanRequired(f"{label} is for humans only; this looks like {who}",
                            "ask a human to run this command in their own terminal", code="human_required")
    from loopx.kernel.storage import actors

    return HumanChannel(actors.human(), via, _seal=_SEAL)


def channel_or_none(ctx) -> HumanChannel | None:
    """A HumanChannel when ``require_human(ctx, ...)`` would give one, else None: for commands where
    only some changes are human-only (the kernel decides and refuses those without a channel)."""
    try:
        return require_human(ctx, "")
    except HumanRequired:
        return None


def dashboard_channel(user_agent: str | None = None) -> HumanChannel:
    """The channel for the dashboard's decision handler (the server runs as the human, and the
    request carried the CSRF token and the gate's typed code). Raises HumanRequired when the
    server itself was started from an agent session (a marker here or in a parent process)."""
    from loopx.config import env
    from loopx.kernel.storage import actors

    who = env("LOOPX_DASHBOARD_STARTED_BY") or agent_evidence(None)
    if who:
        raise HumanRequired(f"this dashboard was started from {who}, so it cannot record a human's decision",
                            "start the dashboard from your own terminal", code="human_required",
                            details={"reason": "dashboard_from_agent"})

    return HumanChannel(actors.human(), "dashboard", user_agent, _seal=_SEAL)


def check_channel(human, what: str) -> HumanChannel:
    """The kernel's side: ``human`` must be a minted HumanChannel. Raises HumanRequired."""
    if type(human) is not HumanChannel:
        raise HumanRequired(f"{HUMAN_ONLY.get(what, what)} needs a human channel (the CLI in a terminal or the dashboard)",
                            "ask a human to run the command in their own terminal", code="human_required")
    return human


# ------------------------------------------------------------------ the guard's side
def loopx_args(words: list[str]) -> list[str] | None:
    """The loopx arguments (global options removed) when ``words`` runs loopx, else None."""
    if not words:
        return None
    prog = os.path.basename(words[0])
    if prog not in ("loopx", "loopx.exe", "__main__.py") and not (prog == "loopx" or prog.startswith("loopx-")):
        return None
    out: list[str] = []
    i = 1
    while i < len(words):
        a = words[i]
        name = a.split("=", 1)[0]
        if name in _GLOBALS_WITH_VALUE:
            i += 1 if "=" in a else 2
            continue
        if a in ("--json", "--quiet", "-q", "--debug"):
            i += 1
            continue
        out.append(a)
        i += 1
    return out


def agent_command_violation(words: list[str], stripped=()) -> str | None:
    """The sentence to deny an agent's simple command with, or None. ``stripped``: agent markers
    (``*`` = the whole environment) its wrappers or an earlier ``unset`` removed."""
    args = loopx_args(words)
    if args is None:
        return None
    markers = [m for m in stripped if m == "*" or m in AGENT_ENV_MARKERS]
    if markers:
        what = "the whole environment" if "*" in markers else ", ".join(markers)
        return (f"loopx: this command removes the agent markers ({what}) and then runs loopx. An agent must not "
                "hide that it is an agent; run loopx with your environment as it is.")
    positional = [a for a in args if not a.startswith("-")]
    for prefix, flag, what in AGENT_DENIED:
        if tuple(positional[:len(prefix)]) != prefix:
            continue
        if flag is not None and not any(a == flag or a.startswith(flag + "=") for a in args):
            continue
        return (f"loopx: `loopx {' '.join(args)[:120]}` is {HUMAN_ONLY.get(what, what)}, which only a human may do. "
                "Do not run it or any variant of it; if the goal needs it, say so in your turn summary "
                "(or open a gate) and stop.")
    return None
