"""The JSON behind ``loopx dashboard --trace FILE``: one trace archive, read-only, no project.

``TraceApi(archive, verification, path)`` is built once from an archive loaded by
``loopx.kernel.read.tracefile.load`` (and, unless ``--no-verify``, the result of its ``verify``);
the server answers ``/api/session`` (with ``trace``: the banner's facts), ``/api/trace`` and
``/api/review`` from it and refuses every other API path and every write (docs/dashboard.md).
Nothing here touches a store or the file system.
"""

from __future__ import annotations

import os

from loopx.kernel.read import tracefile

ENTRIES_SHOWN = 20000  # a 200-hour run has a few thousand records; the page renders what it gets


class TraceApi:
    """A loaded trace. ``verification``: ``tracefile.verify``'s answer, or None when it was skipped
    (``--no-verify``); the banner then says "not verified"."""

    read_only = True

    def __init__(self, archive: dict, verification: dict | None, path: str) -> None:
        self.files = archive["files"]
        m = archive["manifest"]
        self.timeline = tracefile.timeline(archive)
        more = m.get("redact_more")
        self._info = {
            "file": os.path.basename(path), "goal_id": m.get("goal_id"),
            "objective": self.timeline["goal"]["objective"], "exported_at": m.get("exported_at"),
            "verified": bool(verification and verification["ok"]), "checked": verification is not None,
            "problems": (verification or {}).get("problems") or [],
            "redact_more": None if more is None else {"rules": more.get("rules"), "records": more.get("records")},
            "records": (verification or {}).get("records"), "stubs": (verification or {}).get("stubs"),
            "anchors": len(m.get("anchors") or []),
        }

    def info(self) -> dict:
        """The banner's facts: ``{file, goal_id, objective, exported_at, verified, checked, problems,
        redact_more: None | {rules, records}, records, stubs, anchors}``."""
        return self._info

    def page(self) -> dict:
        """``{"trace": info(), "goal", "gates", "counts", "entries" (oldest first), "shown", "total"}``."""
        entries = self.timeline["entries"]
        return {"trace": self._info, "goal": self.timeline["goal"], "gates": self.timeline["gates"],
                "counts": self.timeline["counts"], "entries": entries[:ENTRIES_SHOWN],
                "shown": min(len(entries), ENTRIES_SHOWN), "total": len(entries)}

    def review(self) -> dict:
        """The archive's review packet: ``{"available": bool, "markdown": str}``."""
        raw = self.files.get("review.md")
        return {"available": raw is not None, "markdown": (raw or b"").decode("utf-8", "replace"),
                "message": None if raw is not None else "this trace has no review packet"}
