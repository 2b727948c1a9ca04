"""The LoopxError hierarchy: every failure a user can cause has a stable code, an exit code and a hint.

Exit codes (docs/architecture.md#the-cli): 0 ok, 1 clean "no", 2 usage, 3 state, 4 conflict, 70 internal,
130 interrupted. The kernel raises these; only ``loopx.cli`` turns them into output and exits.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_NO = 1
EXIT_USAGE = 2
EXIT_STATE = 3
EXIT_CONFLICT = 4
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def either(names) -> str:
    """``"a, b or c"``: the choices of a hint, in order."""
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


class LoopxError(Exception):
    """Base error. ``code`` is a stable snake_case string, ``hint`` one actionable line, ``details``
    the structured fields a caller can act on (``{"todo": "t-1a2b", "goal": "g1"}``).

    Raised by the kernel, the message and hint name no CLI flag or command, so a ``loopx.api``
    caller gets plain advice; ``loopx.commands.phrases`` rewords them for the CLI from ``code``
    and ``details`` (the flag that sets a field, the command that helps)."""

    exit_code = EXIT_INTERNAL
    code = "internal"

    def __init__(self, message: str, hint: str | None = None, *, code: str | None = None,
                 details: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code:
            self.code = code
        self.details = details or {}

    def as_dict(self) -> dict:
        out: dict = {"code": self.code, "message": self.message, "hint": self.hint}
        if self.details:
            out["details"] = self.details
        return out


class UsageError(LoopxError):
    """Bad arguments or values (exit 2)."""

    exit_code = EXIT_USAGE
    code = "usage"


class FieldError(UsageError):
    """A bad value of one input (exit 2, code ``usage`` unless given). ``field`` is the name a kernel
    or ``loopx.api`` caller passes the input under (``"verify"``, ``"lease"``), also
    ``details["field"]``. ``message`` and ``hint`` are templates in which ``{field}`` stands for the
    input: ``self.message``/``self.hint`` name the field itself ("lease must be between 1s and 7d");
    the CLI calls ``phrased("--lease")`` to name the flag that sets it (loopx.commands.phrases)."""

    def __init__(self, field: str, message: str, hint: str | None = None, *, code: str | None = None,
                 details: dict | None = None) -> None:
        self.field = field
        self.template = (message, hint)
        message, hint = self.phrased(field)
        super().__init__(message, hint, code=code, details={"field": field, **(details or {})})

    def phrased(self, name: str) -> tuple[str, str | None]:
        """(message, hint) with the input called ``name``."""
        message, hint = self.template
        return message.replace("{field}", name), hint.replace("{field}", name) if hint is not None else None


class NotFound(UsageError):
    """An id or prefix that matches nothing (exit 2)."""

    code = "not_found"


class Ambiguous(UsageError):
    """An id prefix that matches more than one record (exit 2)."""

    code = "ambiguous"


class StateError(LoopxError):
    """The store cannot be used as asked: not connected, unreadable, newer format (exit 3)."""

    exit_code = EXIT_STATE
    code = "state"


class NotConnected(StateError):
    """No ``.loopx/`` in this folder or above it (exit 3)."""

    code = "not_connected"


class ReadOnlyStore(StateError):
    """The store can be read but must not be written (newer format, merge conflict markers)."""

    code = "read_only"


class Conflict(LoopxError):
    """The write lost a race or breaks a rule of the current state (exit 4)."""

    exit_code = EXIT_CONFLICT
    code = "conflict"


class StoreBusy(Conflict):
    """The store's lock stayed held by one writer for the whole wait (exit 4)."""

    code = "store_busy"


class HumanRequired(Conflict):
    """An agent tried to do what only a human may do (approve or reject a gate)."""

    code = "human_required"


class Interrupted(LoopxError):
    """Ctrl-C stopped the command; what it had recorded stays (exit 130)."""

    exit_code = EXIT_INTERRUPTED
    code = "interrupted"
