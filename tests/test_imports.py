"""Lazy imports only where someone waits (issue 25, item 4).

The hot modules, the ones a hot command (should-run, status, next, turn finish, todo add, evidence
add, gate open, history, the hooks: tests/test_flat_cost.py's HOT) imports, may import inside functions, so a
command pays only for what it uses, and so may the modules in ``LAZY_BY_CONTRACT``. Every other
module imports at the top, where a reader sees its dependencies. The exceptions are a platform-only
module (it does not exist on the other platform, or the import sits under an ``if`` on the
platform) and the imports in ``KEPT``, each with its reason. ``tests/tools/hoist_imports.py`` moves
a cold module's function-level imports to the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# What the hot commands import, cold caches and warm (test_the_hot_list_is_what_the_hot_commands_import
# checks it against python -X importtime), plus every host's hook adapter (a hook runs on each tool call
# of its host; the measured hooks are Claude Code's).
HOT_MODULES = frozenset({
    "loopx",
    "loopx.cli",
    "loopx.codecache",
    "loopx.commands", "loopx.commands.evidence", "loopx.commands.experiment", "loopx.commands.gate",
    "loopx.commands.history", "loopx.commands.scope", "loopx.commands.trial",
    "loopx.commands.hook", "loopx.commands.next", "loopx.commands.quota", "loopx.commands.status",
    "loopx.commands.todo", "loopx.commands.turn",
    "loopx.config",
    "loopx.context",
    "loopx.errors",
    "loopx.exe",
    "loopx.hostfacts",
    "loopx.hosts", "loopx.hosts.adapters", "loopx.hosts.adapters.base", "loopx.hosts.adapters.claude_code",
    "loopx.hosts.adapters.opencode", "loopx.hosts.adapters.pi",
    "loopx.hosts.entry",
    "loopx.kernel",
    "loopx.guard", "loopx.guard.rules", "loopx.guard.shell", "loopx.guard.verdicts",
    "loopx.kernel.policy", "loopx.kernel.policy.decide", "loopx.kernel.policy.decision_cache",
    "loopx.kernel.policy.packet", "loopx.kernel.policy.turn",
    "loopx.kernel.read", "loopx.kernel.read.approvals", "loopx.kernel.read.budget", "loopx.kernel.read.experiments",
    "loopx.kernel.read.fingerprint",
    "loopx.kernel.read.gitrefs", "loopx.kernel.read.history", "loopx.kernel.read.hosts",
    "loopx.kernel.read.notices", "loopx.kernel.read.proof", "loopx.kernel.read.queries", "loopx.kernel.read.schedule",
    "loopx.kernel.read.scope", "loopx.kernel.read.stall", "loopx.kernel.read.status",
    "loopx.kernel.read.turnscope", "loopx.kernel.read.validate", "loopx.kernel.read.verify",
    "loopx.kernel.read.worktrees",
    "loopx.kernel.reasons",
    "loopx.kernel.storage", "loopx.kernel.storage.actors", "loopx.kernel.storage.agentproc",
    "loopx.kernel.storage.caches", "loopx.kernel.storage.codec", "loopx.kernel.storage.gitcli",
    "loopx.kernel.storage.layout", "loopx.kernel.storage.logfold",
    "loopx.kernel.storage.anchors", "loopx.kernel.storage.chain", "loopx.kernel.storage.cjson",
    "loopx.kernel.storage.clock", "loopx.kernel.storage.events", "loopx.kernel.storage.fold", "loopx.kernel.storage.fs",
    "loopx.kernel.storage.ids", "loopx.kernel.storage.machines", "loopx.kernel.storage.quotas", "loopx.kernel.storage.redact",
    "loopx.kernel.storage.registry", "loopx.kernel.storage.store", "loopx.kernel.storage.trialfold",
    "loopx.kernel.write", "loopx.kernel.write.evidence", "loopx.kernel.write.gates",
    "loopx.kernel.humans", "loopx.kernel.write.runs", "loopx.kernel.write.signing",
    "loopx.kernel.write.todos",
    "loopx.notify", "loopx.notify.outbox",
    "loopx.sync", "loopx.sync.sharing",
    "loopx.output",
    "loopx.usage", "loopx.usage.claude", "loopx.usage.claudescan", "loopx.usage.codex", "loopx.usage.files", "loopx.usage.text",
})
HOOK_ADAPTERS = "loopx.hosts.adapters."  # every one is hot (see above)
# Modules no hot command imports that stay lazy by contract, each with its reason.
LAZY_BY_CONTRACT = {
    "loopx.api": "importing the API loads no kernel module (tests/test_api.py): a custom runner pays only for "
                 "the calls it makes",
}

# Modules that exist on one platform only: importing one at the top would break the others.
PLATFORM_ONLY = frozenset({"fcntl", "msvcrt", "winreg", "_winapi", "ctypes", "termios", "tty", "pwd", "grp",
                           "resource"})

# (module, what it imports) -> why the import stays in its function (at the top it would close an
# import circle, or cost every process what one path needs).
KEPT: dict[tuple[str, str], str] = {
    ("loopx.ops.segscan", "hashlib"): "only the forked scan processes hash with OpenSSL (faster); the main "
                                      "process must not load it (~4 MB of RSS, docs/performance.md)",
    ("loopx.parsing", "difflib"): "only a mistyped command looks for the close names; every argparse "
                                  "command would pay for difflib (heapq) otherwise",
    ("loopx.guard.gitpush", "fnmatch"): "fnmatch imports re (milliseconds): only a push whose target "
                                        "branch is compared with the protected ones pays for it",
}


def module_name(path: Path) -> str:
    """``src/loopx/kernel/read/status.py`` -> ``loopx.kernel.read.status``."""
    parts = list(path.resolve().relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_hot(mod: str) -> bool:
    """Whether ``mod`` may import inside its functions."""
    return mod in HOT_MODULES or mod in LAZY_BY_CONTRACT or mod.startswith(HOOK_ADAPTERS)


def platform_test(test: ast.expr) -> bool:
    """Whether an ``if`` test asks which platform this is (its imports may not exist elsewhere)."""
    text = ast.unparse(test)
    return any(k in text for k in ("sys.platform", "os.name", "platform.system"))


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]


def function_level_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, imported module, statement) of each import inside a function of ``path``, but those
    under an ``if`` on the platform."""
    out = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(n) for i in ast.walk(tree) if isinstance(i, ast.If) and platform_test(i.test)
            for part in (i.body, i.orelse) for st in part for n in ast.walk(st)}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for st in fn.body:
            for node in ast.walk(st):
                if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                    out.extend((node.lineno, t, ast.unparse(node)) for t in _targets(node))
    return sorted(set(out))


def test_cold_modules_import_at_the_top():
    bad = []
    for path in sorted((SRC / "loopx").rglob("*.py")):
        mod = module_name(path)
        if is_hot(mod):
            continue
        for line, target, stmt in function_level_imports(path):
            if target.split(".")[0] in PLATFORM_ONLY or (mod, target) in KEPT:
                continue
            bad.append(f"{path.relative_to(SRC)}:{line}: {stmt}")
    assert not bad, (f"{len(bad)} function-level imports in modules no hot command imports (move them to the top: "
                     "python tests/tools/hoist_imports.py):\n" + "\n".join(bad[:40]))


def test_the_exceptions_name_real_imports():
    mods = {module_name(p): p for p in (SRC / "loopx").rglob("*.py")}
    for (mod, target), why in KEPT.items():
        assert mod in mods and why, (mod, target)
        assert target in {t for _l, t, _s in function_level_imports(mods[mod])}, f"{mod} no longer imports {target} late"
    stale = sorted(m for m in HOT_MODULES if m not in mods)
    assert not stale, f"HOT_MODULES names modules that do not exist: {stale}"


def measure_hot(root: Path) -> set[str]:
    """The loopx modules test_flat_cost's hot commands import, counted by ``python -X importtime``,
    each command run on a fresh 1k-event store under ``root`` until its caches are warm, and its
    experiment listings (``TRIAL_HOT``) on a store with 50 trials."""
    import test_flat_cost as flat

    proj = Path(flat._builder().build(str(root), 1_000))
    seen: set[str] = set()
    for args, _banned, event, agent in flat.HOT:
        stdin = None
        if event:
            extra = {"tool_name": "Bash", "tool_input": {"command": "ls"}} if event == "PreToolUse" else {}
            stdin = flat._hook_payload(event, proj, **extra)
        for _ in range(flat.WARM + 1):
            seen |= {m for m in flat._imports(proj, args, stdin, agent) if m.startswith("loopx")}
    exp = Path(flat._trials_builder().build(str(root), 50))  # the experiment listings (issue 20)
    for args in flat.TRIAL_HOT:
        for _ in range(flat.WARM + 1):
            seen |= {m for m in flat._imports(exp, args) if m.startswith("loopx")}
    return seen


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="test_flat_cost's stores need Linux")
def test_the_hot_list_is_what_the_hot_commands_import(tmp_path):
    """A module the hot commands import that is missing from the list would be forced to import
    eagerly; a listed module they no longer import keeps lazy imports for nothing. (After a move:
    ``python tests/tools/hoist_imports.py --hot`` prints the list as measured.)"""
    seen = measure_hot(tmp_path)
    listed = set(HOT_MODULES)
    assert not seen - listed, f"hot, not listed in HOT_MODULES: {sorted(seen - listed)}"
    assert not listed - seen, f"listed in HOT_MODULES, imported by no hot command: {sorted(listed - seen)}"
