"""Packaging: the wheel built from the repository installs into a fresh venv (and with
``pip install --target``) and works from outside the source tree, carrying the skills, the
dashboard's static files and the examples; everything under ``src/`` imports only the standard
library or loopx."""

from __future__ import annotations

import ast
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

import wheelkit

REPO = Path(__file__).resolve().parents[1]
VERSION = wheelkit.current_version()


@pytest.fixture(scope="module")
def wheel() -> Path:
    return wheelkit.build_wheel()


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pkg") / "venv"
    py = wheelkit.make_venv(path)
    proc = wheelkit.run([py, "-m", "pip", "install", "--no-index", "--no-deps", wheel])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


@pytest.fixture(scope="module")
def target(wheel, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pkg") / "target"
    proc = wheelkit.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", path, wheel])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


@pytest.fixture(params=["venv", "target"])
def loopx_cmd(request, venv, target, tmp_path):
    """A callable running the installed loopx from a scratch folder outside the source tree."""
    home = tmp_path / "home"
    home.mkdir()
    env = wheelkit.pip_env(HOME=str(home), USERPROFILE=str(home), LOOPX_HOME=str(home / "loopx-home"),
                           NO_COLOR="1")
    if request.param == "venv":
        base = [wheelkit.venv_bin(venv, "loopx")]
    else:
        base = [sys.executable, "-m", "loopx"]
        env["PYTHONPATH"] = str(target)
    work = tmp_path / "work"
    work.mkdir()

    def run(*args, cwd=work):
        return wheelkit.run([*base, *args], cwd=cwd, env=env, timeout=600)

    run.kind, run.env, run.work, run.base = request.param, env, work, base
    return run


def test_wheel_carries_skills_static_files_and_examples(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("loopx/_data/skills/loopx/SKILL.md") for n in names)
    assert any(n.startswith("loopx/dashboard/static/index.html") for n in names)
    assert any(n.startswith("loopx/_data/examples/") for n in names)
    assert not any("__pycache__" in n or n.startswith(("tests/", "src/")) for n in names)


def test_installed_version_runs_from_outside_the_tree(loopx_cmd):
    proc = loopx_cmd("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"loopx {VERSION}"
    if loopx_cmd.kind == "target":
        where = wheelkit.run([sys.executable, "-c", "import loopx; print(loopx.__file__)"], env=loopx_cmd.env,
                             cwd=loopx_cmd.work)
        assert where.stdout.startswith(loopx_cmd.env["PYTHONPATH"]) and str(REPO) not in where.stdout


def test_installed_code_is_not_the_checkout(venv):
    py = wheelkit.venv_bin(venv, "python")
    proc = wheelkit.run([py, "-c", "import loopx, loopx.resources as r; print(loopx.__file__); "
                                   "print(r.data_path('skills'))"], cwd=venv)
    lines = proc.stdout.split()
    assert str(venv) in lines[0] and str(REPO) not in proc.stdout
    assert lines[1].endswith(os.path.join("_data", "skills"))


def test_workflow_skills_dry_run(loopx_cmd):
    proj = loopx_cmd.work / "proj"
    proj.mkdir()
    assert loopx_cmd("connect", cwd=proj).returncode == 0
    proc = loopx_cmd("workflow-skills", "--install", "--dry-run", "--format", "json", cwd=proj)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = json.dumps(json.loads(proc.stdout)["data"])
    assert "SKILL.md" in text
    assert not (proj / ".claude").exists() and not (proj / ".agents").exists()  # a dry run writes nothing


def test_demo(loopx_cmd):
    probe = loopx_cmd("demo", "--help")
    if probe.returncode != 0 and "demo" in (probe.stderr + probe.stdout) and "No module named" in probe.stderr:
        pytest.skip("`loopx demo` is not built yet (the governed-loop issue adds it)")
    proc = loopx_cmd("demo", "--approve")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_doctor_in_the_installed_venv(loopx_cmd):
    proc = loopx_cmd("doctor", "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    checks = {c["id"]: c for c in json.loads(proc.stdout)["data"]["checks"]}
    want = "--target install" if loopx_cmd.kind == "target" else "virtual environment"
    assert want in checks["install"]["finding"], checks["install"]
    assert checks["python"]["status"] == "ok"
    assert checks["package"]["status"] == "ok", checks["package"]  # the wheel carries its data


# ------------------------------------------------------------------ stdlib only
def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def test_every_import_under_src_is_stdlib_or_loopx():
    # CPython's built-in SHA-256 module is ``_sha256`` on 3.11 and ``_sha2`` from 3.12 on (both stdlib;
    # kernel/storage/chain.py tries one then the other), so either name is allowed on every version.
    allowed = set(sys.stdlib_module_names) | {"loopx", "__future__", "_sha256", "_sha2"}
    bad = []
    files = list((REPO / "src").rglob("*.py"))
    assert len(files) > 20
    for f in files:
        for line, mod in _imports(f):
            if mod not in allowed:
                bad.append(f"{f.relative_to(REPO)}:{line}: {mod}")
    assert not bad, "third-party imports under src/:\n" + "\n".join(bad)
