"""docs/architecture.md is a map of this repository: its tables are generated from the code, every
file it names exists, and it points at nothing outside the repository."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO

DOC = REPO / "docs" / "architecture.md"


def test_the_generated_tables_are_current():
    """The layer table (tests/test_layers.py and the package docstrings) and the error table
    (loopx.errors) as docs/gen_arch.py writes them."""
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "gen_arch.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_layer_table_lists_every_layer_entry():
    from test_layers import LAYERS

    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("<!-- layers:"):text.index("<!-- /layers -->")]
    for mod, layer in LAYERS.items():
        assert f"| {layer} | `{mod}` |" in table, mod


def _named_paths(text: str) -> set[str]:
    """Paths the doc names in backticks: ``kernel/storage/fold.py``, ``hosts/adapters/``,
    ``tests/test_layers.py`` (a bare ``fold.py`` is a module name, not checked)."""
    out = set()
    for tok in re.findall(r"`([^`\s]+)`", text):
        tok = tok.split("(")[0].rstrip(".,:;")
        if "/" in tok and not tok.startswith("-") and (tok.endswith((".py", ".md", "/")) or "." not in tok.rsplit("/", 1)[-1]):
            out.add(tok)
    return out


def _exists(path: str) -> bool:
    clean = path.strip("/")
    if clean.startswith((".loopx", "refs/", "~")) or "<" in clean or "*" in clean:
        return True  # a path in a project or a git ref, not in this repository
    return any((base / clean).exists() for base in (REPO, REPO / "src", REPO / "src" / "loopx"))


def test_every_file_the_doc_names_exists():
    text = DOC.read_text(encoding="utf-8")
    named = _named_paths(text)
    assert len(named) > 30, named  # the check would prove nothing
    missing = sorted(p for p in named if not _exists(p))
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_doc_points_at_nothing_outside_the_repository():
    text = DOC.read_text(encoding="utf-8")
    assert "DESIGN.md" not in text and "../" not in text
    assert not re.search(r"\bissues? \d+|#\d+\b", text, re.I), re.findall(r".{30}\bissues? \d+.{10}", text, re.I)
    for link in re.findall(r"\]\(([^)]+)\)", text):
        assert not link.startswith(("http:", "https:", "/")), link
        assert (DOC.parent / link.split("#")[0]).exists(), link
