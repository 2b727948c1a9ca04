"""Which host a turn would run on, and the host setup errors that hold an agent back (issue 14).

Pure questions about a folded state (``state["host_errors"]``: agent actor -> {reason, message,
exit_code, reset_at, run, goal, host, ts}, folded from ``run.finished`` data ``setup_error``).
"""

from __future__ import annotations

from loopx import hostfacts
from loopx.kernel.storage import actors, clock
from loopx.kernel.storage.clock import timedelta

HOST_KINDS = tuple(hostfacts.agent_hosts())     # the host table's rows (loopx.hostfacts)
WINDOW_HOSTS = tuple(hostfacts.window_hosts())  # hosts whose usage windows loopx can read
DEFAULT_RESERVE = 10
# seconds after a host setup error before the agent is tried again (the host's state can have changed)
RETRY = {"host_not_logged_in": 6 * 3600, "host_offline": 600, "host_rate_limited": 3600, "host_overloaded": 300,
         "host_crashed": 1800, "host_timed_out": 1800, "host_idle": 3600}
# a wait (not a human's problem) until the retry time: the host's reset time, or a short while
# for a provider that is overloaded
WAITS = ("host_rate_limited", "host_overloaded")


def error_for(state: dict, goal: dict, agent: str | None) -> dict | None:
    """The host setup error that applies to ``agent``'s next turn on ``goal`` (the agent's own last
    run ended on one), or, without an agent, one of the goal's default host; else None."""
    errs = state.get("host_errors") or {}
    if agent:
        return errs.get(actors.agent(agent))
    host = goal.get("host")
    if not host:
        return None
    hits = [e for e in errs.values() if e.get("goal") == goal["id"] and e.get("host") == host]
    return max(hits, key=lambda e: e.get("ts") or "") if hits else None


def is_wait(err: dict) -> bool:
    """True when ``err`` only needs time (an overloaded provider, a rate limit with a known reset),
    not a person: should-run answers ``wait`` rather than ``wait_human``."""
    return err.get("reason") == "host_overloaded" or (err.get("reason") == "host_rate_limited"
                                                      and bool(err.get("reset_at")))


def retry_at(err: dict) -> str:
    """When a host that failed with ``err`` is tried again (ISO): the reset time of a rate limit
    or an overload, else the error's time plus ``RETRY``. Raises KeyError/LoopxError for a record without ``ts``."""
    if err.get("reason") in WAITS and err.get("reset_at"):
        return err["reset_at"]
    wait = RETRY.get(str(err.get("reason")), 1800)
    return clock.iso(clock.parse_ts(err["ts"]) + timedelta(seconds=wait))


def kinds(state: dict, goal: dict, agent: str | None) -> list[str]:
    """The host(s) that would run the turn: the registered kind of ``agent`` (or its name when it is
    a host's name), else the goal's default host, else every host whose windows loopx reads."""
    if agent:
        a = (state.get("agents") or {}).get(agent) or {}
        hosts = hostfacts.agent_hosts()
        if a.get("kind") in hosts:
            return [a["kind"]]
        if agent in hosts:
            return [agent]
    if goal.get("host"):
        return [goal["host"]]
    return list(WINDOW_HOSTS)
