"""What the docs generators (gen_arch, gen_events, gen_reasons) share: a generated section of a
Markdown file sits between two HTML-comment markers, and each generator either rewrites it or,
with ``--check``, exits 1 when the file differs from what the code would write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def splice(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with what stands between ``begin`` and ``end`` replaced by ``body`` (one newline on
    each side). Raises ValueError when a marker is missing."""
    a, b = text.index(begin) + len(begin), text.index(end)
    return text[:a] + "\n" + body + "\n" + text[b:]


def write_or_check(doc: Path, render: Callable[[str], str], argv: list[str], stale: str) -> int:
    """Rewrite ``doc`` with ``render(its text)``; with ``--check`` in ``argv`` write nothing, print
    ``stale`` and return 1 when it is out of date. Returns the exit code."""
    text = doc.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in argv:
        if new != text:
            print(stale)
            return 1
        return 0
    doc.write_text(new, encoding="utf-8")
    return 0
