"""Move the function-level imports of loopx's cold modules to the top of their module.

Only the hot modules (``tests/test_imports.py`` lists them: what the hot commands import) keep
lazy imports: there someone waits for the process to start. Everywhere else an import inside a
function only hides a dependency, so this script hoists it. It finds imports with ``ast`` and edits
the text by line numbers (comments and layout stay; no lib2to3, no libcst), then lets ruff sort the
new import block.

    python tests/tools/hoist_imports.py            # rewrite src/loopx, print what it left alone
    python tests/tools/hoist_imports.py --check    # only list what it would move (exit 1 if any)
    python tests/tools/hoist_imports.py --hot      # measure the hot modules (for test_imports.HOT_MODULES)

An import stays where it is, and is printed with the reason, when moving it could change what the
code does: a platform-only module (fcntl, msvcrt, ...), an import under ``try`` that handles
ImportError or under an ``if`` on the platform, a name the module already binds to something else,
two functions importing different things under one name, a name the function also assigns, and an
import listed in test_imports.KEPT with its reason.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
sys.path.insert(0, str(REPO / "tests"))

from test_imports import KEPT, PLATFORM_ONLY, is_hot, measure_hot, module_name, platform_test  # noqa: E402

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
IMPORTS = (ast.Import, ast.ImportFrom)


@dataclass
class Found:
    """One function-level import: its node, the names it binds and the function it sits in."""

    node: ast.Import | ast.ImportFrom
    func: ast.FunctionDef | ast.AsyncFunctionDef
    guarded: str = ""  # why it must stay (empty: it may move)
    binds: dict[str, str] = field(default_factory=dict)  # bound name -> what it names


def _binds(node: ast.Import | ast.ImportFrom, mod: str) -> dict[str, str]:
    out = {}
    if isinstance(node, ast.Import):
        for a in node.names:
            out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    else:
        base = "." * node.level + (node.module or "")
        for a in node.names:
            out[a.asname or a.name] = f"{base}:{a.name}"
    return out


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return [node.module or ""]


def _handles_import_error(node: ast.Try) -> bool:
    for h in node.handlers:
        text = ast.unparse(h.type) if h.type is not None else "BaseException"
        if any(k in text for k in ("ImportError", "ModuleNotFoundError")):
            return True
    return False


def _walk(body: list[ast.stmt], func, guard: str, out: list[Found], mod: str) -> None:
    for st in body:
        if isinstance(st, IMPORTS):
            if func is not None:
                out.append(Found(st, func, guard, _binds(st, mod)))
            continue
        if isinstance(st, FUNCS):
            _walk(st.body, st, "", out, mod)
            continue
        if isinstance(st, ast.ClassDef):
            _walk(st.body, None, "", out, mod)
            continue
        g = guard
        if isinstance(st, ast.If) and platform_test(st.test):
            g = g or f"under `if {ast.unparse(st.test)}`"
        if isinstance(st, ast.Try) and _handles_import_error(st):
            _walk(st.body, func, g or "under a try that handles ImportError", out, mod)
            for part in (st.orelse, st.finalbody, *[h.body for h in st.handlers]):
                _walk(part, func, g, out, mod)
            continue
        for name in ("body", "orelse", "finalbody"):
            _walk(getattr(st, name, []) or [], func, g, out, mod)
        for h in getattr(st, "handlers", []) or []:
            _walk(h.body, func, g, out, mod)
        for case in getattr(st, "cases", []) or []:
            _walk(case.body, func, g, out, mod)


def _module_binds(tree: ast.Module, mod: str) -> dict[str, str]:
    """Names bound at module level -> what (an import's target, or '<def>' for anything else)."""
    out: dict[str, str] = {}
    for st in tree.body:
        nodes = [st]
        if isinstance(st, ast.If | ast.Try):
            nodes = [n for n in ast.walk(st) if isinstance(n, ast.stmt)]
        for n in nodes:
            if isinstance(n, IMPORTS):
                out.update(_binds(n, mod))
            elif isinstance(n, (*FUNCS, ast.ClassDef)):
                out[n.name] = "<def>"
            elif isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    for x in ast.walk(t):
                        if isinstance(x, ast.Name):
                            out[x.id] = "<def>"
    return out


def _assigned_in(func, name: str, skip: ast.stmt) -> bool:
    """Whether ``func`` binds ``name`` other than by the import ``skip`` (it would stay local)."""
    for n in ast.walk(func):
        if n is skip:
            continue
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store | ast.Del):
            return True
        if isinstance(n, ast.arg) and n.arg == name:
            return True
        if isinstance(n, IMPORTS) and n is not skip and name in _binds(n, ""):
            other = _binds(n, "")[name]
            if other != _binds(skip, "")[name]:
                return True
        if isinstance(n, (*FUNCS, ast.ClassDef)) and n is not func and n.name == name:
            return True
        if isinstance(n, ast.Global | ast.Nonlocal) and name in n.names:
            return True
    return False


def plan(path: Path) -> tuple[list[Found], list[Found]]:
    """Return (imports to move, imports that stay with ``guarded`` set) for one file."""
    mod = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[Found] = []
    _walk(tree.body, None, "", found, mod)
    top = _module_binds(tree, mod)
    # a loop variable anywhere in the module would shadow a hoisted import (ruff's F402); other
    # locals of other functions only shadow it inside their function, as they did before
    local = {x.id for n in ast.walk(tree) if isinstance(n, ast.For | ast.AsyncFor)
             for x in ast.walk(n.target) if isinstance(x, ast.Name)}
    by_name: dict[str, set[str]] = {}
    for f in found:
        for name, what in f.binds.items():
            by_name.setdefault(name, set()).add(what)
    for f in found:
        if f.guarded:
            continue
        for t in _targets(f.node):
            if t.split(".")[0] in PLATFORM_ONLY:
                f.guarded = f"{t} is platform-only"
            elif (mod, t) in KEPT:
                f.guarded = KEPT[(mod, t)]
        for name, what in f.binds.items():
            if f.guarded:
                break
            if name in top and top[name] != what:
                f.guarded = f"the module already binds {name!r} to something else"
            elif len(by_name[name]) > 1:
                f.guarded = f"functions import different things as {name!r}"
            elif _assigned_in(f.func, name, f.node):
                f.guarded = f"{f.func.name}() also assigns {name!r}"
            elif name in local:
                f.guarded = f"a loop of the module binds {name!r} (it would shadow the import)"
    return [f for f in found if not f.guarded], [f for f in found if f.guarded]


def _insert_at(tree: ast.Module) -> int:
    """The line (1-based) after which new imports go: after the module's first import block."""
    last = 0
    for st in tree.body:
        if isinstance(st, IMPORTS):
            last = st.end_lineno or st.lineno
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and last == 0:
            last = st.end_lineno or st.lineno  # the docstring
        elif isinstance(st, ast.If) and "TYPE_CHECKING" in ast.unparse(st.test):
            break
        else:
            break
    return last


def _only_imports_left(block: list[ast.stmt], gone: set[int]) -> bool:
    return all(id(s) in gone for s in block)


def _separators(lines: list[str], drop: set[int]) -> set[int]:
    """The blank lines that only separated dropped imports from a function's code."""
    out = set()
    for i in sorted(drop):
        j = i + 1
        if j < len(lines) and j not in drop and not lines[j].strip():
            k = i - 1
            while k >= 0 and k in drop:
                k -= 1
            prev = lines[k].rstrip() if k >= 0 else ""
            if prev.endswith((":", '"""')) or not prev:
                out.add(j)
    return out


def rewrite(path: Path, moves: list[Found]) -> None:
    """Delete the moved imports from their functions and add each once at the top."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    gone = {id(f.node) for f in moves}
    drop: set[int] = set()  # 0-based line numbers
    for f in moves:
        drop.update(range(f.node.lineno - 1, (f.node.end_lineno or f.node.lineno)))
    need_pass: dict[int, str] = {}  # a block left empty gets `pass` at the first import's line
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt) and _only_imports_left(block, gone):
                first = block[0]
                need_pass[first.lineno - 1] = " " * first.col_offset + "pass\n"
    drop |= _separators(lines, drop)
    existing = {ast.unparse(st) for st in tree.body if isinstance(st, IMPORTS)}
    new: list[str] = []
    for f in moves:
        src = "".join(lines[f.node.lineno - 1:f.node.end_lineno]).strip()
        stmt = ast.unparse(f.node)
        if stmt in existing:
            continue
        existing.add(stmt)
        new.append(src.replace("\n" + " " * f.node.col_offset, "\n") + "\n")
    at = _insert_at(tree)
    out: list[str] = []
    for i, line in enumerate(lines):
        if i in need_pass:
            out.append(need_pass[i])
        if i not in drop:
            out.append(line)
        if i == at - 1 and new:
            out.extend(new)
    if at == 0 and new:
        out = new + out
    path.write_text("".join(out), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="list what would move; change nothing")
    ap.add_argument("--hot", action="store_true", help="print the hot modules as the hot commands import them")
    ap.add_argument("paths", nargs="*", type=Path, help="files (default: every cold module under src/loopx)")
    opts = ap.parse_args(argv)
    if opts.hot:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            for mod in sorted(measure_hot(Path(tmp))):
                print(f'    "{mod}",')
        return 0
    files = opts.paths or sorted((SRC / "loopx").rglob("*.py"))
    moved = kept = 0
    changed: list[Path] = []
    for path in files:
        if is_hot(module_name(path)):
            continue
        moves, stays = plan(path)
        for f in stays:
            kept += 1
            print(f"kept {path.relative_to(REPO)}:{f.node.lineno}: {ast.unparse(f.node)} ({f.guarded})")
        if not moves:
            continue
        moved += len(moves)
        if opts.check:
            for f in moves:
                print(f"would move {path.relative_to(REPO)}:{f.node.lineno}: {ast.unparse(f.node)}")
            continue
        rewrite(path, moves)
        changed.append(path)
    if changed:
        ruff = [sys.executable, "-m", "ruff"]
        subprocess.run([*ruff, "check", "-q", "--fix", "--select", "I,F401", *map(str, changed)], cwd=REPO)
    print(f"{'would move' if opts.check else 'moved'} {moved} imports in {len(changed) or moved and '?'} files; "
          f"kept {kept}", file=sys.stderr)
    return 1 if opts.check and moved else 0


if __name__ == "__main__":
    raise SystemExit(main())
