"""Build loopx wheels from a copy of the repository (optionally with another version string, or
broken on purpose), lay them out as a local PEP 503 index, and make fresh venvs. Builds are cached
for the whole test session (shared by test_packaging and test_update)."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_CACHE: dict[tuple, Path] = {}
_BASE: list[Path] = []
COPY = ("pyproject.toml", "README.md", "LICENSE", "src", "skills", "examples")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")


def base() -> Path:
    if not _BASE:
        _BASE.append(Path(tempfile.mkdtemp(prefix="loopx-wheels-")))
    return _BASE[0]


def current_version() -> str:
    text = (REPO / "src" / "loopx" / "__init__.py").read_text(encoding="utf-8")
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def pip_env(**extra) -> dict:
    """An environment where pip reads no config files and no index but the one a test passes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               LOOPX_NO_UPDATE_CHECK="1")
    env.update(extra)
    return env


def source_copy(version: str | None = None, broken: bool = False, dest: Path | None = None) -> Path:
    """A copy of the repository's packaging inputs, with ``version`` and optionally a CLI that
    crashes on start (to fail a smoke check)."""
    dest = dest or Path(tempfile.mkdtemp(prefix="src-", dir=base()))
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=IGNORE)
        elif src.exists():
            shutil.copy2(src, dest / name)
    init = dest / "src" / "loopx" / "__init__.py"
    if version:
        text = init.read_text(encoding="utf-8")
        init.write_text(re.sub(r'__version__ = "[^"]+"', f'__version__ = "{version}"', text), encoding="utf-8")
    if broken:
        with open(dest / "src" / "loopx" / "cli.py", "a", encoding="utf-8") as fh:
            fh.write('\nraise ImportError("this loopx build is broken on purpose")\n')
    return dest


def build_wheel(version: str | None = None, broken: bool = False) -> Path:
    """Build (once per session) a wheel of the repository, with ``version`` if given."""
    key = (version, broken)
    if key in _CACHE:
        return _CACHE[key]
    src = source_copy(version, broken)
    out = base() / f"dist-{version or 'current'}{'-broken' if broken else ''}"
    if importlib.util.find_spec("hatchling") and importlib.util.find_spec("build"):
        cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
               "--outdir", str(out), str(src)]
        env = pip_env()
    else:  # fetch the build backend through pip's normal configuration
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(src)]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"wheel build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    wheel = next(out.glob("loopx-*.whl"))
    _CACHE[key] = wheel
    return wheel


def make_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 simple index at ``root`` holding ``wheels``; returns its file:// URL."""
    proj = root / "loopx"
    proj.mkdir(parents=True, exist_ok=True)
    for w in wheels:
        shutil.copy2(w, proj / w.name)
    links = "".join(f'<a href="{html.escape(w.name)}">{html.escape(w.name)}</a>\n' for w in wheels)
    (proj / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n", encoding="utf-8")
    (root / "index.html").write_text('<!DOCTYPE html><html><body><a href="loopx/">loopx</a></body></html>\n',
                                     encoding="utf-8")
    return root.as_uri()


def make_venv(path: Path, with_pip: bool = True) -> Path:
    """A fresh venv at ``path``; returns its python."""
    args = [sys.executable, "-m", "venv", str(path)] + ([] if with_pip else ["--without-pip"])
    subprocess.run(args, check=True, capture_output=True, timeout=300, env=pip_env())
    return venv_bin(path, "python")


def venv_bin(venv: Path, name: str) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / (name + ".exe")
    return venv / "bin" / name


def run(cmd, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env or pip_env(), capture_output=True,
                          text=True, timeout=timeout)
