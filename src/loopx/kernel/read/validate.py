"""Input checks shared by the kernel operations. Each raises FieldError (exit 2) with a hint.

``field`` is the name the caller passed the value under (``"verify"``, ``"priority"``); messages
name it as it is, and the CLI names the flag that sets it instead (loopx.commands.phrases). A
label that is no input's name (``"gate kind"``) reads the same everywhere."""

from __future__ import annotations

from loopx.errors import FieldError

TYPE_CHECKING = False  # typing is not imported at run time (hot commands validate their input)
if TYPE_CHECKING:
    from typing import Literal, overload

GATE_KINDS = ("merge", "release", "production-write", "sensitive-data", "route-change", "spend", "custom", "promote")
EVIDENCE_KINDS = ("test", "command", "diff", "commit", "note", "link", "artifact")
RESULTS = ("progress", "completion", "no_progress", "failed", "blocked")
MAX_TEXT = 20_000
MAX_TITLE = 500
DEFAULT_LEASE = 1800.0  # seconds a claim or a run's lease lasts unless renewed
MAX_LEASE = 7 * 86400.0


if TYPE_CHECKING:  # what ``text`` returns: a str when required
    @overload
    def text(value, field: str, *, required: Literal[True] = ..., limit: int = ...) -> str: ...
    @overload
    def text(value, field: str, *, required: bool, limit: int = ...) -> str | None: ...


def text(value, field: str, *, required: bool = True, limit: int = MAX_TEXT) -> str | None:
    """``value`` stripped, as a string; None when it is missing or empty and not ``required``.
    Raises FieldError (exit 2) when it is required and missing or empty, or longer than ``limit``."""
    if value is None:
        if required:
            raise FieldError(field, "{field} is required", "pass {field}")
        return None
    s = str(value).strip()
    if not s:
        if required:
            raise FieldError(field, "{field} is empty", "pass a non-empty {field}")
        return None
    if len(s) > limit:
        raise FieldError(field, f"{{field}} is too long ({len(s)} characters, limit {limit})",
                         "shorten it; put long material in evidence or a file")
    return s


def choice(value: str, allowed: tuple[str, ...], field: str) -> str:
    """``value`` when it is one of ``allowed``, else FieldError (exit 2) listing them."""
    if value not in allowed:
        raise FieldError(field, "unknown {field} " + repr(value), f"use one of: {', '.join(allowed)}")
    return value


def count(value, field: str, *, low: int = 0, high: int = 1_000_000) -> int:
    """``value`` as an int in ``low..high``, else FieldError (exit 2)."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise FieldError(field, "{field} must be a whole number, not " + repr(value), "pass {field} as e.g. 3") from None
    if not low <= n <= high:
        raise FieldError(field, f"{{field}} must be between {low} and {high}", "pass {field} in range")
    return n


def globs(values, field: str) -> list[str]:
    """The path globs ``values`` stripped; FieldError (exit 2) for an empty, NUL-holding or too long one."""
    out = []
    for v in values or []:
        s = str(v).strip()
        if not s or "\x00" in s or len(s) > 1000:
            raise FieldError(field, "bad {field} pattern " + repr(v), "use a path glob such as 'src/**' or 'docs/*.md'")
        out.append(s)
    return out


def command(value, field: str) -> str | None:
    """A command line loopx will run later (a todo's ``verify``). Refused (FieldError, exit 2, code
    ``secret_in_command``) when it holds a secret: the log would store it redacted, and the
    redacted command would no longer run."""
    cmd = text(value, field, required=False, limit=4000)
    if cmd:
        from loopx.kernel.storage.redact import redact_text

        if redact_text(cmd) != cmd:
            raise FieldError(field, "{field} contains what looks like a secret; loopx never stores secrets",
                             "read it from the environment instead, e.g. run 'pytest -q' with "
                             "DB_PASSWORD exported before loopx runs it", code="secret_in_command")
    return cmd


def lease_seconds(value) -> float:
    """A lease (``30m``, ``2h``, seconds; None: ``DEFAULT_LEASE``) in seconds, between 1s and 7d."""
    from loopx.errors import UsageError
    from loopx.kernel.storage import clock

    try:
        secs = DEFAULT_LEASE if value is None else clock.parse_duration(value)
    except UsageError as exc:
        raise FieldError("lease", "{field}: " + exc.message, "use e.g. {field} 30m (at most 7d)") from None
    if not 1 <= secs <= MAX_LEASE:
        raise FieldError("lease", "{field} must be between 1s and 7d", "use e.g. {field} 30m")
    return secs
