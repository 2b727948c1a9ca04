"""Id generation and prefix resolution.

Record ids are a kind prefix plus random hex (``t-3f9a1c``, ``gate-8b20d4``, ``ev-…``,
``run-…``). Any unique prefix is accepted on the command line, as git does with hashes, with or
without the kind prefix. Goal ids are slugs restricted to ``[a-z0-9][a-z0-9-]{0,63}``; ids are
never used as file paths.
"""

from __future__ import annotations

import os

from loopx.errors import Ambiguous, NotFound, UsageError

TYPE_CHECKING = False  # `typing` and `collections.abc` cost start-up time; annotations are strings
if TYPE_CHECKING:
    from collections.abc import Iterable

PREFIX = {"todo": "t-", "gate": "gate-", "evidence": "ev-", "run": "run-", "event": "e-", "watch": "w-", "trial": "tr-"}
GOAL_ID = r"[a-z0-9][a-z0-9-]{0,63}\Z"        # patterns compiled on first use (start-up speed)
AGENT_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"


HIDDEN = 0  # ids the caller's state does not show (a live view left them out); set by Store.transact


def new_id(kind: str, taken: Iterable[str] | None = None, nbytes: int = 3, hidden: int | None = None) -> str:
    """A fresh id of ``kind`` (see PREFIX) not in ``taken``; grows when the space is crowded.
    When ``hidden`` ids exist that ``taken`` cannot show (default ``HIDDEN``, what the transaction's
    live view left out), the id is drawn long enough that hitting one of them has a chance under
    1e-9 (``t-`` + 10 hex digits up to ~1,000 hidden ids, 12 up to ~250,000, 14 beyond)."""
    prefix = PREFIX[kind]
    # a dict's keys view answers ``in`` from the dict itself, never through a live view's raising
    # ``__contains__`` (fold.Partial): a fresh id missing from the view is the expected answer here
    taken_set = taken.keys() if isinstance(taken, dict) else taken if taken is not None else ()
    from loopx.config import env

    seed = env("LOOPX_ID_SEED")
    if seed:  # deterministic ids for documentation transcripts: the first free one of a fixed sequence
        import hashlib

        for k in range(1_000_000):
            text = f"{seed}:{kind}:{k}".encode("utf-8", "surrogateescape")  # the variable's own bytes
            candidate = prefix + hashlib.sha256(text).hexdigest()[:2 * nbytes]
            if candidate not in taken_set:
                return candidate
    hidden = HIDDEN if hidden is None else hidden
    if hidden:
        while 256 ** nbytes < hidden * 10 ** 9:
            nbytes += 1
    for attempt in range(64):
        n = nbytes + attempt // 8
        candidate = prefix + os.urandom(n).hex()
        if candidate not in taken_set:
            return candidate
    raise RuntimeError("could not generate a unique id")  # pragma: no cover


def event_id() -> str:
    return PREFIX["event"] + os.urandom(8).hex()


def check_goal_id(goal_id: str) -> str:
    """Return ``goal_id`` when it is a valid slug, else raise UsageError."""
    import re

    if not isinstance(goal_id, str) or not re.match(GOAL_ID, goal_id):
        raise UsageError(f"invalid goal id {goal_id!r}",
                         "goal ids are 1-64 chars of a-z, 0-9 and '-', starting with a letter or digit")
    return goal_id


_NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_NAME_REST = _NAME_FIRST | frozenset("._-")


def check_agent_name(name: str) -> str:
    """``name`` when it matches AGENT_NAME (checked by hand: every agent's call and hook checks a
    name, and `re` is not imported at start-up), else raise UsageError."""
    if not (isinstance(name, str) and 1 <= len(name) <= 64 and name[0] in _NAME_FIRST
            and all(c in _NAME_REST for c in name)):
        raise UsageError(f"invalid agent name {name!r}",
                         "agent names are 1-64 chars of letters, digits, '.', '_' and '-'")
    return name


def slugify(text: str, limit: int = 40) -> str:
    """A goal id derived from free text: ``"Fix the flaky CI!"`` -> ``fix-the-flaky-ci``."""
    import re
    import unicodedata

    norm = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    slug = re.sub(r"[^a-z0-9]+", "-", norm).strip("-")[:limit].strip("-")
    return slug or "goal"


def resolve(kind: str, given: str, ids: Iterable[str]) -> str:
    """The one id in ``ids`` that ``given`` names: exact, or a unique prefix with or without the
    kind prefix. Raises NotFound or Ambiguous (exit 2) naming the candidates; UsageError for an
    empty ``given``. Their details name the ``kind`` (and the ``id`` given)."""
    if not isinstance(given, str) or not given.strip():
        raise UsageError(f"empty {kind} id", f"list the {kind} ids", details={"reason": "no_such_id", "kind": kind})
    given = given.strip()
    pool = ids if isinstance(ids, (dict, set, frozenset)) else set(ids)
    if given in pool:
        return given
    prefix = PREFIX.get(kind, "")
    keys = (given, prefix + given) if prefix and not given.startswith(prefix) else (given,)
    hits = sorted({i for i in pool for k in keys if i.startswith(k)})
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise NotFound(f"no {kind} matches {given!r}", f"list the {kind} ids",
                       details={"reason": "no_such_id", "kind": kind, "id": given})
    shown = ", ".join(hits[:5]) + (" …" if len(hits) > 5 else "")
    raise Ambiguous(f"{kind} id {given!r} is ambiguous: {shown}", "type more characters of the id")
