"""The layers of docs/architecture.md, enforced over the source with ``ast``: a lower layer never
imports a higher one, clients of the kernel do not import one another, and no import circle exists
(function-level imports count too: a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Lower number = lower layer. A module may import its own layer and any lower one, except where
# SIBLINGS_APART says otherwise. Longest matching prefix wins.
LAYERS: dict[str, int] = {
    "loopx": 0, "loopx.errors": 0, "loopx.resources": 0,
    "loopx.hostfacts": 0,  # the table of host facts (issue 23): plain data every layer reads
    "loopx.exe": 0,  # the absolute loopx command packets and skills print
    "loopx.config": 1, "loopx.kernel": 1, "loopx.kernel.storage": 1,
    "loopx.kernel.read": 2,
    "loopx.usage": 2,  # the hosts' own usage files, read-only (issue 14); should-run's window rule reads it
    "loopx.kernel.write": 3,
    "loopx.kernel.policy": 4,
    "loopx.guard": 4,  # the pre-tool guard (issue 25): reads the kernel, used by policy's trial step
    "loopx.sync": 4,  # sync through git (issue 25)
    "loopx.hosts": 5, "loopx.runner": 5, "loopx.dashboard": 5, "loopx.api": 5, "loopx.notify": 5,
    "loopx.ops": 6,
    "loopx.output": 7, "loopx.parsing": 7, "loopx.context": 7, "loopx.commands": 7, "loopx.cli": 7,
    "loopx.__main__": 7,
    # the sandbox (issue 22): its core is used by the kernel's verify runner and by loopx's own git
    # calls; the parts that know the store, the hosts and the broker are clients like the runner
    "loopx.sandbox": 5, "loopx.sandbox.core": 1, "loopx.sandbox.landlock": 1, "loopx.sandbox.mounts": 1,
    "loopx.sandbox.exec": 1, "loopx.sandbox.gitpin": 1, "loopx.sandbox.verify": 1, "loopx.sandbox.envscrub": 1,
    "loopx.sandbox.seatbelt": 1,
}
# Clients of the kernel in layer 5 stay independent of one another, with one exception: notify is a
# service the runner, the dashboard and the commands use (they send the outbox), and it imports no
# other client.
SIBLINGS_APART = ("loopx.hosts", "loopx.runner", "loopx.dashboard", "loopx.api", "loopx.notify")
SERVICES = ("loopx.notify",)


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
            if mod.startswith(d + ".") and d in ("loopx", "loopx.kernel", "loopx.kernel.storage", "loopx.kernel.read",
                                                 "loopx.kernel.write", "loopx.kernel.policy"):
                continue  # a module importing its own package's __init__
            if _layer(d)[1] > mine:
                bad.append(f"{mod} (layer {mine}) imports {d} (layer {_layer(d)[1]})")
    assert not bad, "\n".join(sorted(bad))


def test_kernel_clients_do_not_import_one_another():
    bad = []
    for mod, deps in _graph().items():
        home = next((s for s in SIBLINGS_APART if mod == s or mod.startswith(s + ".")), None)
        if not home:
            continue
        for d in deps:
            other = next((s for s in SIBLINGS_APART if d == s or d.startswith(s + ".")), None)
            if other and other != home and not (other in SERVICES and home not in SERVICES):
                bad.append(f"{mod} imports {d}")
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
    assert all(s in LAYERS for s in SIBLINGS_APART + SERVICES)


def test_only_the_clients_and_the_commands_use_notify():
    """notify talks to the network: the kernel never imports it (it is handed
    ``outbox.after_decision``), and notify imports no client."""
    users = set()
    for mod, deps in _graph().items():
        if not mod.startswith("loopx.notify") and any(d == "loopx.notify" or d.startswith("loopx.notify.") for d in deps):
            users.add(mod.split(".")[1])
    assert users and users <= {"runner", "dashboard", "commands", "ops", "cli"}, users
    for mod, deps in _graph().items():
        if mod.startswith("loopx.notify"):
            assert not [d for d in deps if _layer(d)[1] >= 5 and not d.startswith("loopx.notify")], mod


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


def test_the_checker_sees_a_violation(tmp_path):
    """The checks above can fail: a storage module importing the policy layer is caught."""
    mod = "loopx.kernel.storage.fake"
    path = tmp_path / "fake.py"
    path.write_text("def f():\n    from loopx.kernel.policy import decide\n", encoding="utf-8")
    deps = _imports(mod, path, set(_modules()) | {mod})
    assert "loopx.kernel.policy.decide" in deps
    assert _layer("loopx.kernel.policy.decide")[1] > _layer(mod)[1]


def test_each_command_module_is_named_after_its_command():
    from loopx.cli import COMMANDS

    aliases = {"forget": "disconnect"}
    wrong = {name: mod for name, (mod, _help) in COMMANDS.items()
             if mod != aliases.get(name, name).replace("-", "_")}
    assert not wrong, wrong
