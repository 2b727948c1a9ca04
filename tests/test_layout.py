"""Every path under ``.loopx/`` and the data folder is named once, in ``kernel/storage/layout.py``:
docs/file-format.md's layout blocks are generated from it, no other module spells a file name of
the layout, and a store that ``connect`` makes has the files the layout names."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from loopx.kernel.storage import layout
from loopx.kernel.storage.store import Store

SRC = Path(__file__).resolve().parents[1] / "src" / "loopx"
DOC = Path(__file__).resolve().parents[1] / "docs" / "file-format.md"


def _blocks(text: str) -> list[str]:
    return re.findall(r"```\n(.*?)```", text, re.S)


def test_the_docs_layout_blocks_are_the_layout_table():
    blocks = _blocks(DOC.read_text(encoding="utf-8"))
    project = [b for b in blocks if b.startswith(layout.DIRNAME + "/\n")]
    data = [b for b in blocks if b.startswith("<data folder>/\n")]
    assert project == [layout.project_block()], (
        "docs/file-format.md's .loopx/ block differs from layout.PROJECT; paste layout.project_block()")
    assert data == [layout.data_block()], (
        "docs/file-format.md's data folder block differs from layout.DATA; paste layout.data_block()")


def test_every_cache_file_of_the_layout_has_a_row():
    named = {v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str) and v.startswith("cache/")}
    rows = {p.rstrip("/") for p, _ in layout.PROJECT + layout.DATA}
    missing = [n for n in named if n not in rows and not n.endswith(".lock") and not n.startswith(layout.HOOKS + "/")]
    assert not missing, f"cache files named in layout.py without a row in layout.PROJECT: {missing}"


def _layout_names() -> set[str]:
    """The file names the layout gives (the last part of each named path)."""
    out = set()
    for k, v in vars(layout).items():
        if k.isupper() and isinstance(v, str) and "." in v.rsplit("/", 1)[-1]:
            out.add(v.rsplit("/", 1)[-1])
    # config.toml is config.config_path's, outside .loopx/; ".gitignore" also names the project's own
    return out - {layout.CONFIG, layout.GITIGNORE}


# names the guard's rules match wherever they lie (a basename, a path part of a shell command), not
# paths loopx opens; left to the guard's own tables (loopx/guard/)
ALLOWED = {"projects.json": "guard/", layout.DIRNAME: "guard/"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            ids.add(id(node.value))
    return ids


def test_no_module_but_layout_spells_a_path_of_the_layout():
    names = _layout_names()
    found = []
    for f in SRC.rglob("*.py"):
        if f.name == "layout.py" and f.parent.name == "storage":
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if node.value in ALLOWED and ALLOWED[node.value] in str(f.relative_to(SRC)):
                    continue
                if node.value in names or node.value.startswith(".loopx/cache"):
                    found.append(f"{f.relative_to(SRC)}:{node.lineno}: {node.value!r}")
            elif isinstance(node, ast.Call) and node.args:
                # store.path("cache", ...) / os.path.join(x, "cache", ...): a cache path built by hand
                if any(isinstance(a, ast.Constant) and a.value in (layout.CACHE, layout.BLOBS, layout.QUARANTINE)
                       for a in node.args) and getattr(node.func, "attr", "") in ("path", "join"):
                    found.append(f"{f.relative_to(SRC)}:{node.lineno}: a {layout.CACHE}/{layout.BLOBS} path by hand")
            elif isinstance(node, ast.JoinedStr):
                tails = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
                if tails and tails[-1] in (".jsonl", ".lock", ".calls") and not any("/" in t or " " in t for t in tails):
                    found.append(f"{f.relative_to(SRC)}:{node.lineno}: a {tails[-1]} file name by hand")
    assert not found, "name these paths in kernel/storage/layout.py:\n" + "\n".join(found)


def test_a_new_store_has_the_files_the_layout_names(tmp_path):
    store, created = Store.create(str(tmp_path))
    assert created and store.root == os.path.join(str(tmp_path), layout.DIRNAME)
    for name in (layout.FORMAT, layout.LOCK, layout.GITIGNORE, *map(layout.open_log, layout.STREAMS)):
        assert os.path.isfile(store.path(name)), name
    for name in (layout.BLOBS, layout.CACHE, layout.QUARANTINE):
        assert os.path.isdir(store.path(name)), name
    ignored = (tmp_path / layout.DIRNAME / layout.GITIGNORE).read_text().splitlines()
    assert set(layout.LOCAL) <= set(ignored)
    assert store.segment_path("events", 3) == store.path(layout.segment("events", 3))
    assert layout.is_segment_name(os.path.basename(layout.segment("evidence", 12)))
