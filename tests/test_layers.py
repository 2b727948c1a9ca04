"""The layers of docs/architecture.md, enforced over the source with ``ast``: a lower layer never
imports a higher one, clients of the kernel do not import one another, and no import circle exists
(function-level imports count too: a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lower number = lower layer. A module may import its own layer and any lower one; the services
# and the clients of the kernel also stay apart from their siblings (APART). Longest matching
# prefix wins.
LAYERS: dict[str, int] = {
    "loopx": 0, "loopx.errors": 0, "loopx.resources": 0,
    "loopx.hostfacts": 0,  # the table of host facts (issue 23): plain data every layer reads
    "loopx.exe": 0,  # the absolute loopx command packets and skills print
    "loopx.codecache": 0,  # the hot modules' code in one file; loopx/__init__ installs its finder first
    "loopx.config": 1, "loopx.kernel": 1, "loopx.kernel.storage": 1,
    "loopx.kernel.read": 2,
    "loopx.usage": 2,  # the hosts' own usage files, read-only (issue 14); should-run's window rule reads it
    "loopx.kernel.write": 3,
    # the pre-tool guard reads the state and the gates (read.approvals, humans, write.signing); the trial step
    # of the policy layer asks it what an experiment's measuring is (guard.measuring)
    "loopx.guard": 4,
    "loopx.kernel.policy": 5,
    # services: they talk to the network (a git remote, webhooks), use the policy layer (a shared
    # claim starts a turn) and are used by the clients and the commands
    "loopx.sync": 6, "loopx.notify": 6,
    "loopx.hosts": 7, "loopx.runner": 7, "loopx.dashboard": 7, "loopx.api": 7,
    "loopx.ops": 8,
    "loopx.output": 9, "loopx.parsing": 9, "loopx.context": 9, "loopx.commands": 9, "loopx.cli": 9,
    "loopx.__main__": 9,
    # the sandbox (issue 22): its core is used by the kernel's verify runner and by loopx's own git
    # calls; the parts that know the store, the hosts and the broker are clients like the runner
    "loopx.sandbox": 7, "loopx.sandbox.core": 1, "loopx.sandbox.landlock": 1, "loopx.sandbox.mounts": 1,
    "loopx.sandbox.exec": 1, "loopx.sandbox.gitpin": 1, "loopx.sandbox.verify": 1, "loopx.sandbox.envscrub": 1,
    "loopx.sandbox.seatbelt": 1,
}
# Packages of one layer that never import one another: the two services, and the clients of the
# kernel (each is usable without the others).
APART = (("loopx.sync", "loopx.notify"), ("loopx.hosts", "loopx.runner", "loopx.dashboard", "loopx.api"))
# package __init__ modules other modules of the package may import without it being a dependency
PACKAGE_INITS = ("loopx", "loopx.kernel", "loopx.kernel.storage", "loopx.kernel.read", "loopx.kernel.write",
                 "loopx.kernel.policy", "loopx.guard", "loopx.sync")


def _modules() -> dict[str, Path]:
    out = {}
    for f in (SRC / "loopx").rglob("*.py"):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _imports(mod: str, path: Path, known: set[str]) -> set[str]:
    deps = set()
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for n in names:
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n and n.startswith("loopx") and n != mod:
                deps.add(n)
    return deps


def _layer(mod: str) -> tuple[str, int]:
    best = max((p for p in LAYERS if mod == p or mod.startswith(p + ".")), key=len)
    return best, LAYERS[best]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def test_every_module_has_a_layer():
    for mod in _modules():
        assert _layer(mod)[0], mod


def test_no_lower_layer_imports_a_higher_one():
    bad = []
    for mod, deps in _graph().items():
        _, mine = _layer(mod)
        for d in deps:
            if mod.startswith(d + ".") and d in PACKAGE_INITS:
                continue  # a module importing its own package's __init__
            if _layer(d)[1] > mine:
                bad.append(f"{mod} (layer {mine}) imports {d} (layer {_layer(d)[1]})")
    assert not bad, "\n".join(sorted(bad))


def _apart_violations(graph: dict[str, set[str]]) -> list[str]:
    def home(m: str) -> tuple[int, str] | None:
        return next(((i, p) for i, group in enumerate(APART) for p in group if m == p or m.startswith(p + ".")), None)

    bad = []
    for mod, deps in graph.items():
        mine = home(mod)
        for d in deps:
            other = home(d)
            if mine and other and other[0] == mine[0] and other[1] != mine[1]:
                bad.append(f"{mod} imports {d}")
    return bad


def test_services_and_kernel_clients_do_not_import_their_siblings():
    bad = _apart_violations(_graph())
    assert not bad, "\n".join(sorted(bad))


def test_every_package_and_top_level_module_has_a_layer_of_its_own():
    """No package falls through to the base layer by the prefix rule: a new package (or module of
    the loopx package) must be placed in LAYERS, and so be checked."""
    root = SRC / "loopx"
    named = {"loopx." + ".".join(p.parent.relative_to(root).parts) for p in root.rglob("__init__.py")} - {"loopx."}
    named |= {f"loopx.{p.stem}" for p in root.glob("*.py") if p.stem != "__init__"}
    inherit = {"loopx.hosts.adapters"}  # a part of hosts/, which it belongs to
    missing = sorted(m for m in named - inherit if m not in LAYERS)
    assert not missing, f"packages without a layer: {missing}"
    assert all(p in LAYERS for group in APART for p in group)
    assert all(len({LAYERS[p] for p in group}) == 1 for group in APART), "siblings kept apart share one layer"


def test_only_the_clients_and_the_commands_use_the_services():
    """sync and notify talk to the network: the kernel and the guard never import them (notify is
    handed ``outbox.after_decision``, the trial step is handed ``shared.spend_slot``), so a hook or
    a should-run never reaches a remote except through the caller that chose to."""
    for service in ("notify", "sync"):
        users = set()
        for mod, deps in _graph().items():
            if not mod.startswith(f"loopx.{service}") and any(
                    d == f"loopx.{service}" or d.startswith(f"loopx.{service}.") for d in deps):
                users.add(mod.split(".")[1])
        assert users and users <= {"runner", "dashboard", "api", "hosts", "commands", "ops", "cli"}, (service, users)


def test_no_import_circle():
    graph = _graph()
    # Package __init__ edges (a module importing its parent package) are how Python loads packages,
    # not a design dependency: leave them out.
    edges = {m: {d for d in ds if not m.startswith(d + ".")} for m, ds in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("mod,line,dep", [
    ("loopx.kernel.storage.fake", "from loopx.kernel.policy import decide", "loopx.kernel.policy.decide"),
    ("loopx.kernel.policy.fake", "from loopx.sync import shared", "loopx.sync.shared"),
    ("loopx.guard.fake", "from loopx.kernel.policy import decide", "loopx.kernel.policy.decide"),
    ("loopx.sync.fake", "from loopx.runner import loop", "loopx.runner.loop"),
    ("loopx.notify.fake", "import loopx.commands.sync", "loopx.commands.sync"),
])
def test_the_checker_sees_an_upward_import(tmp_path, mod, line, dep):
    """The layer check can fail: a lazy import of a higher layer is seen and refused."""
    path = tmp_path / "fake.py"
    path.write_text(f"def f():\n    {line}\n", encoding="utf-8")
    deps = _imports(mod, path, set(_modules()) | {mod})
    assert dep in deps
    assert _layer(dep)[1] > _layer(mod)[1]


def test_the_checker_sees_siblings_import_one_another(tmp_path):
    graph = {"loopx.notify.fake": {"loopx.sync.transport"}, "loopx.runner.fake": {"loopx.dashboard.api"},
             "loopx.runner.ok": {"loopx.sync.shared", "loopx.notify.outbox", "loopx.runner.loop"}}
    assert sorted(_apart_violations(graph)) == ["loopx.notify.fake imports loopx.sync.transport",
                                                "loopx.runner.fake imports loopx.dashboard.api"]


def test_each_command_module_is_named_after_its_command():
    from loopx.cli import COMMANDS

    aliases = {"forget": "disconnect"}
    wrong = {name: mod for name, (mod, _help) in COMMANDS.items()
             if mod != aliases.get(name, name).replace("-", "_")}
    assert not wrong, wrong
