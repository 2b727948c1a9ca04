"""The shape of one doctor check result, shared by doctor and its check modules."""

from __future__ import annotations


def result(cid: str, status: str, finding: str, fix: str | None = None, fixable: str | None = None) -> dict:
    """``{id, status: ok|warning|error|skipped, finding, fix (a command or None), fixable (what
    ``doctor --fix`` would do, or None)}``."""
    return {"id": cid, "status": status, "finding": finding, "fix": fix, "fixable": fixable}
