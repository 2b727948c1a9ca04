"""The digest of the reducers' code, which ``fold.REDUCER_DIGEST`` records (issue 25).

``fold.FOLD_VERSION`` stamps every cache of folded state (snapshot, live view, checkpoints). The
event table reaches it by itself (``events.digest``), but a reducer's *logic* cannot be read at
run time without reading source files on the hot path. So the digest of that code is recorded in
``fold.REDUCER_DIGEST``, which ``FOLD_VERSION`` carries, and ``tests/test_events.py`` fails when
the code and the record disagree: a changed reducer cannot ship without a new version, so no
stale cache is ever served.

    python tests/tools/reducer_digest.py            # print the digest of the code as it is
    python tests/tools/reducer_digest.py --write    # record it in fold.py

The digest is of the code, not of its text: the syntax tree without docstrings (comments and
layout are not in it), written out the same way on every Python from 3.11 (empty fields are left
out, since newer versions add empty ones such as ``type_params``). In ``events.py`` the table
(``EVENTS`` and the pieces it is built from) is left out, because ``events.digest`` covers it at
run time and a new field must stay one row; ``fold.REDUCER_DIGEST`` itself is left out.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STORAGE = REPO / "src" / "loopx" / "kernel" / "storage"

# Everything that decides what a run of records folds into. Not here: codec.py (the bytes of a line:
# changing how a line decodes is a store format change) and kernel/reasons.py (only the notifying
# reasons reach the fold, and FOLD_VERSION carries their list).
SOURCES = ("fold.py", "trialfold.py", "logfold.py", "events.py", "quotas.py", "actors.py")
RECORD = "REDUCER_DIGEST"
FOLD = STORAGE / "fold.py"


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _assigned(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.Assign):
        return {n for t in stmt.targets for n in _names(t)}
    if isinstance(stmt, ast.AnnAssign):
        return _names(stmt.target)
    return set()


def _table_parts(tree: ast.Module) -> set[str]:
    """``EVENTS`` and every module-level name its value is built from, transitively."""
    values = {}
    for stmt in tree.body:
        for name in _assigned(stmt):
            values[name] = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
    parts, todo = set(), ["EVENTS"]
    while todo:
        name = todo.pop()
        if name in parts or values.get(name) is None:
            continue
        parts.add(name)
        todo += _names(values[name])
    return parts


def _canon(value) -> str:
    if isinstance(value, ast.AST):
        fields = [f"{k}={_canon(v)}" for k, v in ast.iter_fields(value) if v is not None and v != []]
        return f"{type(value).__name__}({','.join(fields)})"
    if isinstance(value, list):
        return "[" + ",".join(_canon(v) for v in value) + "]"
    return repr(value)


def code_of(name: str) -> str:
    """The canonical code of one module of ``SOURCES``."""
    tree = ast.parse((STORAGE / name).read_text(encoding="utf-8"))
    _strip_docstrings(tree)
    skip = {RECORD} | (_table_parts(tree) if name == "events.py" else set())
    tree.body = [s for s in tree.body if not (_assigned(s) and _assigned(s) <= skip)]
    return _canon(tree)


def digest() -> str:
    """12 hex digits of the reducers' code."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + code_of(name).encode() + b"\0")
    return h.hexdigest()[:12]


def write(new: str) -> bool:
    """Record ``new`` in fold.py; False when fold.py has no ``REDUCER_DIGEST = "..."`` line."""
    text = FOLD.read_text(encoding="utf-8")
    out, n = re.subn(rf'^{RECORD} = "[0-9a-f]*"', f'{RECORD} = "{new}"', text, count=1, flags=re.M)
    if n:
        FOLD.write_text(out, encoding="utf-8")
    return bool(n)


if __name__ == "__main__":
    now = digest()
    if "--write" in sys.argv[1:]:
        if not write(now):
            sys.exit(f"no {RECORD} line in {FOLD}")
        print(f"recorded {RECORD} = {now!r} in {FOLD.relative_to(REPO)}")
    else:
        print(now)
