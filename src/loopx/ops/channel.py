"""How this loopx was installed, read from the installation's own metadata.

``detect() -> dict``::

    {"channel": "pip-venv" | "pip-user" | "pip-system" | "pip-target" | "uv-pip" | "pipx" |
                "uv-tool" | "editable" | "vcs" | "source" | "system" | "unknown",
     "manual": bool (loopx never runs the update itself: editable, vcs, source, system, unknown),
     "summary": one line, "python": sys.executable, "prefix": sys.prefix,
     "site_dir": the folder holding the .dist-info (or None), "dist_version": str | None,
     "installer": contents of INSTALLER ("pip", "uv", ...) or None,
     "direct_url": the parsed PEP 610 direct_url.json or None,
     "source_dir": checkout of an editable/source install or None, "manager": system manager or None,
     "reinstall": a command that reinstalls the running version through the same channel or None}

Sources, in order: the ``.dist-info`` beside the running package (or, for an editable install,
the one on ``sys.path`` whose ``direct_url.json`` points at the running code); ``direct_url.json``
(editable, VCS or local-file installs); ``INSTALLER``; the pipx (``pipx_metadata.json``) and
``uv tool`` (``uv-receipt.toml``) venv layouts; system package manager locations, which loopx
must never touch.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import site
import sys
import sysconfig
from urllib.parse import unquote, urlparse

import loopx
from loopx.errors import StateError
from loopx.kernel.storage.gitcli import git_dir

NAME = "loopx"
MANUAL = ("editable", "vcs", "source", "system", "unknown")
SYSTEM_INSTALLERS = {"conda": "conda", "mamba": "conda", "debian": "apt", "dpkg": "apt", "apt": "apt",
                     "rpm": "dnf", "dnf": "dnf", "brew": "brew", "homebrew": "brew", "nix": "nix",
                     "spack": "spack", "pacman": "pacman", "apk": "apk", "port": "port"}
MANAGER_HINT = {"apt": "sudo apt update && sudo apt upgrade python3-loopx", "dnf": "sudo dnf upgrade python3-loopx",
                "brew": "brew upgrade loopx", "conda": "conda update loopx", "nix": "update it in your nix configuration",
                "pacman": "sudo pacman -Syu python-loopx", "apk": "apk upgrade py3-loopx",
                "port": "sudo port upgrade py-loopx", "spack": "spack install loopx@new"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def url_path(url: str) -> str:
    """A ``file://`` URL as a local path."""
    p = urlparse(url)
    path = unquote(p.path)
    if os.name == "nt" and re.match(r"^/[A-Za-z]:", path):
        path = path[1:]
    return path


def _dist_path(dist) -> str | None:
    p = getattr(dist, "_path", None)
    return str(p) if p is not None else None


def find_distribution():
    """The installed distribution that provides the running ``loopx`` package, or None."""
    pkg_dir = os.path.realpath(os.path.dirname(loopx.__file__))
    for dist in md.distributions(path=[os.path.dirname(pkg_dir)]):
        if _norm(dist.metadata.get("Name") or "") == NAME:
            return dist
    try:
        dist = md.distribution(NAME)
    except md.PackageNotFoundError:
        return None
    du = read_direct_url(dist)
    if du and du.get("dir_info", {}).get("editable"):
        src = os.path.realpath(url_path(du.get("url", "")))
        if pkg_dir.startswith(src + os.sep):
            return dist
    return None  # some other "loopx" is installed, not the code that runs


def read_direct_url(dist) -> dict | None:
    try:
        text = dist.read_text("direct_url.json")
        data = json.loads(text) if text else None
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _git_checkout(path: str) -> str | None:
    """The git checkout (a folder with ``.git`` and ``pyproject.toml``) at most 6 levels above ``path``."""
    found = git_dir(path)
    top = os.path.dirname(found) if found else None
    if top and os.path.exists(os.path.join(top, "pyproject.toml")) \
            and os.path.relpath(os.path.abspath(path), top).count(os.sep) < 6:
        return top
    return None


def _system_manager(site_dir: str, installer: str | None, in_venv: bool) -> str | None:
    if installer and installer in SYSTEM_INSTALLERS:
        return SYSTEM_INSTALLERS[installer]
    if in_venv:
        return None
    low = site_dir.replace("\\", "/")
    if "/nix/store/" in low:
        return "nix"
    if "/dist-packages" in low and installer is None:
        return "apt"
    if ("/Cellar/" in low or "/homebrew/" in low.lower()) and installer is None:
        return "brew"
    if os.path.isdir(os.path.join(sys.prefix, "conda-meta")) and installer is None:
        return "conda"
    if installer is None and low.startswith(("/usr/lib", "/usr/lib64")):
        return "dnf"
    return None


def _base(dist, du) -> dict:
    return {"python": sys.executable, "prefix": sys.prefix, "site_dir": None, "dist_version": None,
            "installer": None, "direct_url": du, "source_dir": None, "manager": None, "reinstall": None,
            "from_file": None}


def detect() -> dict:
    """See the module docstring."""
    dist = find_distribution()
    if dist is None:
        src = _git_checkout(os.path.dirname(os.path.dirname(os.path.abspath(loopx.__file__))))
        info = _base(None, None)
        if src:
            info.update(channel="source", source_dir=src,
                        summary=f"source checkout at {src} (no installed metadata; run through PYTHONPATH)")
        else:
            info.update(channel="unknown", summary=f"no installation metadata beside {os.path.dirname(loopx.__file__)}")
        return _finish(info)
    du = read_direct_url(dist)
    info = _base(dist, du)
    dpath = _dist_path(dist)
    info["site_dir"] = os.path.dirname(dpath) if dpath else None
    info["dist_version"] = dist.version
    installer = (dist.read_text("INSTALLER") or "").strip().lower() or None
    info["installer"] = installer
    info.update(_classify(info, du, installer))
    return _finish(info)


def _classify(info: dict, du: dict | None, installer: str | None) -> dict:
    site_dir = info["site_dir"] or ""
    in_venv = sys.prefix != sys.base_prefix
    if du and du.get("dir_info", {}).get("editable"):
        src = url_path(du.get("url", ""))
        return {"channel": "editable", "source_dir": src, "summary": f"editable install of the checkout {src}"}
    if du and "vcs_info" in du:
        vcs = du["vcs_info"]
        return {"channel": "vcs", "summary": f"installed from {vcs.get('vcs', 'git')} {du.get('url')}"
                                             f" at {str(vcs.get('commit_id', ''))[:12]}"}
    if du and du.get("url", "").startswith("file:"):
        info["from_file"] = url_path(du["url"])
    manager = _system_manager(site_dir, installer, in_venv)
    if manager:
        return {"channel": "system", "manager": manager,
                "summary": f"installed by the system package manager ({manager}) in {site_dir}"}
    if os.path.exists(os.path.join(sys.prefix, "pipx_metadata.json")):
        return {"channel": "pipx", "summary": f"pipx venv {sys.prefix}"}
    if os.path.exists(os.path.join(sys.prefix, "uv-receipt.toml")):
        return {"channel": "uv-tool", "summary": f"uv tool venv {sys.prefix}"}
    return _pip_channel(site_dir, installer, in_venv)


def _pip_channel(site_dir: str, installer: str | None, in_venv: bool) -> dict:
    tool = "uv pip" if installer == "uv" else "pip"
    paths = {os.path.realpath(p) for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib")) if p}
    here = os.path.realpath(site_dir)
    user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if user_site and here == os.path.realpath(user_site):
        return {"channel": "pip-user", "summary": f"{tool} --user install in {site_dir}"}
    if here not in paths:
        return {"channel": "pip-target", "summary": f"{tool} --target install in {site_dir}"}
    if installer == "uv":
        return {"channel": "uv-pip", "summary": f"uv pip install into {'the venv ' if in_venv else ''}{sys.prefix}"}
    if in_venv:
        return {"channel": "pip-venv", "summary": f"pip install into the virtual environment {sys.prefix}"}
    return {"channel": "pip-system", "summary": f"pip install into the interpreter's site-packages {site_dir}"}


def _finish(info: dict) -> dict:
    info["manual"] = info["channel"] in MANUAL
    v = loopx.__version__
    if info["channel"] == "editable" and info["source_dir"]:
        info["reinstall"] = f"{sys.executable} -m pip install -e {info['source_dir']}"
    elif not info["manual"]:
        info["reinstall"] = " ".join(install_command(info, v, None, None))
    return info


def install_command(info: dict, version: str, index_url: str | None, find_links: str | None) -> list[str]:
    """The command that installs loopx ``version`` through ``info``'s channel (never another)."""
    spec = f"{NAME}=={version}"
    ch = info["channel"]
    idx = (["--index-url", index_url] if index_url else []) + (["--find-links", find_links] if find_links else [])
    py = info["python"]
    if ch in ("pip-venv", "pip-system"):
        return [py, "-m", "pip", "install", *idx, spec]
    if ch == "pip-user":
        return [py, "-m", "pip", "install", "--user", *idx, spec]
    if ch == "pip-target":
        return [py, "-m", "pip", "install", "--upgrade", "--target", info["site_dir"], *idx, spec]
    if ch == "uv-pip":
        return ["uv", "pip", "install", "--python", py, *idx, spec]
    if ch == "uv-tool":
        return ["uv", "tool", "install", "--force", *idx, spec]
    if ch == "pipx":
        pip_args = f"--find-links={find_links}" if find_links else None
        return ["pipx", "install", "--force", *(["--index-url", index_url] if index_url else []),
                *([f"--pip-args={pip_args}"] if pip_args else []), spec]
    raise StateError(f"loopx does not update a {ch} installation itself")
