"""Input checks shared by the kernel operations. Each raises UsageError (exit 2) with a hint."""

from __future__ import annotations

from loopx.errors import UsageError

TYPE_CHECKING = False  # typing is not imported at run time (hot commands validate their input)
if TYPE_CHECKING:
    from typing import Literal, overload

GATE_KINDS = ("merge", "release", "production-write", "sensitive-data", "route-change", "spend", "custom", "promote")
EVIDENCE_KINDS = ("test", "command", "diff", "commit", "note", "link", "artifact")
RESULTS = ("progress", "completion", "no_progress", "failed", "blocked")
MAX_TEXT = 20_000
MAX_TITLE = 500


if TYPE_CHECKING:  # what ``text`` returns: a str when required
    @overload
    def text(value, what: str, *, required: Literal[True] = ..., limit: int = ...) -> str: ...
    @overload
    def text(value, what: str, *, required: bool, limit: int = ...) -> str | None: ...


def text(value, what: str, *, required: bool = True, limit: int = MAX_TEXT) -> str | None:
    """``value`` stripped, as a string; None when it is missing or empty and not ``required``.
    Raises UsageError (exit 2) when it is required and missing or empty, or longer than ``limit``."""
    if value is None:
        if required:
            raise UsageError(f"{what} is required", f"pass {what}")
        return None
    s = str(value).strip()
    if not s:
        if required:
            raise UsageError(f"{what} is empty", f"pass a non-empty {what}")
        return None
    if len(s) > limit:
        raise UsageError(f"{what} is too long ({len(s)} characters, limit {limit})",
                         "shorten it; put long material in evidence or a file")
    return s


def choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise UsageError(f"unknown {what} {value!r}", f"use one of: {', '.join(allowed)}")
    return value


def count(value, what: str, *, low: int = 0, high: int = 1_000_000) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be a whole number, not {value!r}", f"pass {what} as e.g. 3") from None
    if not low <= n <= high:
        raise UsageError(f"{what} must be between {low} and {high}", f"pass {what} in range")
    return n


def globs(values, what: str) -> list[str]:
    out = []
    for v in values or []:
        s = str(v).strip()
        if not s or "\x00" in s or len(s) > 1000:
            raise UsageError(f"bad {what} pattern {v!r}", "use a path glob such as 'src/**' or 'docs/*.md'")
        out.append(s)
    return out


def command(value, what: str) -> str | None:
    """A command line loopx will run later (``--verify``). Refused when it holds a secret: the log
    would store it redacted, and the redacted command would no longer run."""
    cmd = text(value, what, required=False, limit=4000)
    if cmd:
        from loopx.kernel.storage.redact import redact_text

        if redact_text(cmd) != cmd:
            raise UsageError(f"{what} contains what looks like a secret; loopx never stores secrets",
                             "read it from the environment instead, e.g. --verify 'pytest -q' with "
                             "DB_PASSWORD exported before loopx runs it")
    return cmd
