"""Self-update: ``check`` (installed vs newest on an index), ``plan`` (the exact command for the
channel loopx was installed through, pinned, plus the rollback command) and ``apply`` (run the
plan, smoke-check the new version in a subprocess, roll back through the same channel on failure).

loopx is not published on PyPI under this name (another project owns it), so the index is always
explicit: ``--index-url URL`` (a PEP 503 simple index, ``file://`` works), ``--find-links DIR|URL``
or ``LOOPX_INDEX_URL``. Never migrates data. Raises UsageError (2) / StateError (3).
"""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tarfile
import urllib.request
import zipfile
from typing import Any

from loopx import __version__
from loopx.config import env
from loopx.errors import StateError, UsageError
from loopx.kernel.storage import gitcli
from loopx.ops.backup import backup_path, backup_wheel
from loopx.ops.channel import MANAGER_HINT, NAME, detect, install_command, url_path

_V = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|rc|c|alpha|beta)[-_.]?(\d*))?(?:[-_.]?post[-_.]?(\d*))?"
                r"(?:[-_.]?dev[-_.]?(\d*))?(?:\+[a-z0-9.]+)?$", re.I)
_FILE = re.compile(r"^loopx-([^-]+?)(?:-[^-]+-[^-]+-[^-]+\.whl|\.tar\.gz|\.zip)$", re.I)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2}
SMOKE_TIMEOUT = 120


# ------------------------------------------------------------------ versions
def vkey(v: str):
    """A sort key for a PEP 440 version, or None when ``v`` is not one."""
    m = _V.match(v.strip())
    if not m:
        return None
    rel = [int(x) for x in m.group(1).split(".")]
    while len(rel) > 1 and rel[-1] == 0:
        rel.pop()
    pre, post, dev = m.group(2), m.group(4), m.group(5)
    pre_key: tuple[int, ...]
    if pre:
        pre_key = (0, _PRE_RANK[pre.lower()], int(m.group(3) or 0))
    elif dev is not None and post is None:
        pre_key = (-1,)
    else:
        pre_key = (1,)
    post_key = int(post or 0) if post is not None else -1
    dev_key = (0, int(dev or 0)) if dev is not None else (1,)
    return (tuple(rel), pre_key, post_key, dev_key)


def is_pre(v: str) -> bool:
    m = _V.match(v.strip())
    return bool(m and (m.group(2) or m.group(5) is not None))


def index_options(index_url: str | None, find_links: str | None) -> tuple[str | None, str | None]:
    index_url = index_url or env("LOOPX_INDEX_URL") or None
    return index_url, find_links


def _need_index(index_url, find_links) -> None:
    if not index_url and not find_links:
        raise UsageError("no package index for loopx given",
                         "pass --index-url URL or --find-links DIR (or set LOOPX_INDEX_URL); loopx is not "
                         "installed from PyPI, where the name belongs to another project")


def _listing(location: str) -> list[dict]:
    """Files offered at an index page, a find-links page or a local folder, each
    ``{filename, yanked: bool, requires_python: str | None}`` (PEP 691 JSON or the PEP 503/592 HTML
    attributes ``data-yanked`` and ``data-requires-python``; a plain folder's wheels and sdists are
    read for their ``Requires-Python``)."""
    if location.startswith("file:") or "://" not in location:
        path = url_path(location) if location.startswith("file:") else location
        if os.path.isdir(path):
            page = os.path.join(path, "index.html")
            if not os.path.exists(page):
                return [{"filename": n, "yanked": False, "requires_python": _file_requires_python(os.path.join(path, n))}
                        for n in os.listdir(path)]
            with open(page, encoding="utf-8", errors="replace") as fh:
                return _anchors(fh.read())
        raise StateError(f"the package index {location} does not exist", "check --index-url / --find-links")
    req = urllib.request.Request(location, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.5", "User-Agent": f"loopx/{__version__}"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:  # noqa: S310 - user-given index URL
            body = resp.read().decode("utf-8", "replace")
            ctype = resp.headers.get("Content-Type", "")
    except Exception as exc:
        raise StateError(f"could not reach the package index {location}: {exc}",
                         "check the network (you may be offline) or pass another --index-url") from None
    if "json" in ctype:
        try:
            return [{"filename": str(f.get("filename", "")), "yanked": bool(f.get("yanked")),
                     "requires_python": f.get("requires-python") or None}
                    for f in json.loads(body).get("files", []) if isinstance(f, dict)]
        except (ValueError, AttributeError):
            return []
    return _anchors(body)


_A = re.compile(r"<a\s([^>]*)>", re.I)
_ATTR = re.compile(r'([a-z][a-z0-9_-]*)\s*(?:=\s*(?:"([^"]*)"|\'([^\']*)\'|([^\s>]+)))?', re.I)


def _anchors(html: str) -> list[dict]:
    out = []
    for m in _A.finditer(html):
        attrs = {a.group(1).lower(): htmllib.unescape(a.group(2) or a.group(3) or a.group(4) or "")
                 for a in _ATTR.finditer(m.group(1))}
        href = attrs.get("href")
        if not href:
            continue
        out.append({"filename": href.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1],
                    "yanked": "data-yanked" in attrs,
                    "requires_python": attrs.get("data-requires-python") or None})
    return out


def _file_requires_python(path: str) -> str | None:
    """``Requires-Python`` from a wheel's METADATA or an sdist's PKG-INFO; None when absent/unreadable."""
    try:
        if path.endswith(".whl"):
            with zipfile.ZipFile(path) as zf:
                name = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
                meta = zf.read(name).decode("utf-8", "replace") if name else ""
        elif path.endswith(".tar.gz"):
            with tarfile.open(path) as tf:
                member = next((m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")), None)
                fh = tf.extractfile(member) if member else None
                meta = fh.read().decode("utf-8", "replace") if fh else ""
        else:
            return None
    except (OSError, ValueError, KeyError, EOFError) as exc:  # a damaged archive offers nothing usable

        if isinstance(exc, (zipfile.BadZipFile, tarfile.TarError)):
            return "<0"
        return None
    for line in meta.split("\n\n", 1)[0].splitlines():
        if line.lower().startswith("requires-python:"):
            return line.split(":", 1)[1].strip() or None
    return None


def python_ok(spec: str | None, python: str | None = None) -> bool:
    """Whether the interpreter version ``python`` (default: this one) satisfies the PEP 440
    specifier ``spec`` (``>=3.12``, ``>=3.9,!=3.11.*``, ``~=3.10``, ``==3.11.*``). An empty spec is
    satisfied; one loopx cannot parse is not (pip skips such a release too)."""
    if not spec or not spec.strip():
        return True
    have = _release(python or ".".join(map(str, sys.version_info[:3])))
    for clause in spec.split(","):
        clause = clause.strip()
        if not clause:
            continue
        m = re.match(r"^(~=|===|==|!=|<=|>=|<|>)\s*v?([0-9][0-9.]*)(\.\*)?$", clause)
        if not m or (m.group(3) and m.group(1) not in ("==", "!=")):
            return False
        op, want, wild = m.group(1), _release(m.group(2)), bool(m.group(3))
        if wild:
            match = have[:len(want)] == want
            ok = match if op == "==" else not match
        else:
            n = max(len(have), len(want))
            a, b = have + (0,) * (n - len(have)), want + (0,) * (n - len(want))
            ok = {"==": a == b, "===": a == b, "!=": a != b, "<=": a <= b, ">=": a >= b, "<": a < b,
                  ">": a > b, "~=": a >= b and len(want) > 1 and have[:len(want) - 1] == want[:-1]}[op]
        if not ok:
            return False
    return True


def _release(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.strip(".").split(".") if x.isdigit())


def available(index_url: str | None, find_links: str | None, *, yanked: bool = False) -> list[str]:
    """The loopx versions pip would install here, oldest first: a version counts when one of its
    files is not yanked (unless ``yanked``; pip installs a yanked one only when pinned to it) and
    its ``Requires-Python`` admits the running interpreter."""
    files: list[dict] = []
    if index_url:
        files += _listing(index_url.rstrip("/") + "/" + NAME + "/")
    if find_links:
        files += _listing(find_links)
    versions = {m.group(1) for f in files if (m := _FILE.match(f["filename"])) and vkey(m.group(1))
                and (yanked or not f["yanked"]) and python_ok(f["requires_python"])}
    return sorted(versions, key=vkey)


def newest(versions: list[str], pre: bool = False) -> str | None:
    pool = [v for v in versions if pre or not is_pre(v)]
    return pool[-1] if pool else None


def check(index_url=None, find_links=None, pre: bool = False, info: dict | None = None) -> dict:
    """``{installed, newest, update_available, checked, reason, index}``; for an editable or source
    install also ``{channel, source_dir, steps, rollback_steps}`` (the git steps; no index is read).
    ``newest`` is the newest release pip would install here (see ``available``)."""
    index_url, find_links = index_options(index_url, find_links)
    out = {"installed": __version__, "newest": None, "update_available": False, "checked": False,
           "reason": None, "index": index_url or find_links, "index_url": index_url, "find_links": find_links}
    info = info or detect()
    if info["channel"] in ("editable", "source"):  # no index applies: git moves this one
        steps, back = manual_steps(info)
        out.update(channel=info["channel"], source_dir=info.get("source_dir"), steps=steps, rollback_steps=back,
                   reason=f"this loopx is a source checkout ({info['summary']}); update it with git")
        return out
    if env("LOOPX_NO_UPDATE_CHECK") not in (None, "0"):
        out["reason"] = "update checks are off (LOOPX_NO_UPDATE_CHECK is set)"
        return out
    _need_index(index_url, find_links)
    top = newest(available(index_url, find_links), pre)
    out.update(checked=True, newest=top, update_available=bool(top and vkey(top) > vkey(__version__)))
    if top is None:
        out["reason"] = "the index offers no loopx release"
    return out


# ------------------------------------------------------------------ commands per channel
def manual_steps(info: dict) -> tuple[list[str], list[str]]:
    """(update commands, rollback commands) for channels a human runs by hand."""
    ch = info["channel"]
    if ch in ("editable", "source") and info.get("source_dir"):
        src = info["source_dir"]
        head = _git_head(src)
        steps = [f"git -C {src} pull --ff-only"]
        if ch == "editable":
            steps.append(f"{info['python']} -m pip install -e {src}")
        return steps, ([f"git -C {src} checkout {head}"] if head else [])
    if ch == "vcs":
        du = info.get("direct_url") or {}
        commit = (du.get("vcs_info") or {}).get("commit_id", "")
        url = du.get("url", "")
        return ([f'{info["python"]} -m pip install --upgrade "loopx @ git+{url}"'],
                [f'{info["python"]} -m pip install "loopx @ git+{url}@{commit}"'] if commit else [])
    if ch == "system":
        return [MANAGER_HINT.get(info.get("manager") or "", "update it with your system package manager")], []
    return ["reinstall loopx with pip, pipx or uv tool"], []


def _git_head(src: str) -> str | None:
    out = gitcli.output(src, "rev-parse", "HEAD", timeout=10)
    return out.decode("utf-8", "replace").strip() or None if out is not None else None


def plan(to: str | None = None, index_url=None, find_links=None, pre: bool = False, info: dict | None = None) -> dict:
    """``{channel, summary, manual, installed, target, up_to_date, command [argv], rollback [argv],
    steps [str], rollback_steps [str], smoke [argv]}``."""
    info = info or detect()
    index_url, find_links = index_options(index_url, find_links)
    out = {"channel": info["channel"], "summary": info["summary"], "manual": info["manual"],
           "installed": __version__, "target": None, "up_to_date": False, "command": None, "rollback": None,
           "rollback_source": None,
           "index": index_url or find_links, "index_url": index_url, "find_links": find_links,
           "smoke": smoke_command(info)}
    if info["manual"]:
        out["steps"], out["rollback_steps"] = manual_steps(info)
        out["target"] = to
        return out
    _need_index(index_url, find_links)
    versions = available(index_url, find_links)
    target: str | None
    if to and to not in versions:
        versions = available(index_url, find_links, yanked=True)  # pip installs a yanked release when pinned
    if to:
        if vkey(to) is None:
            raise UsageError(f"{to!r} is not a version", "example: --to 0.2.0")
        if to not in versions:
            raise UsageError(f"the index offers no loopx {to}",
                             "available: " + (", ".join(versions[-8:]) or "none"))
        target = to
    else:
        target = newest(versions, pre)
        if target is None:
            raise StateError("the index offers no loopx release", "check --index-url / --find-links")
    out["target"] = target
    out["up_to_date"] = target == __version__
    out["command"] = install_command(info, target, index_url, find_links)
    out["steps"] = [_shell(out["command"])]
    _plan_rollback(out, info, __version__ in versions, index_url, find_links)
    return out


def _plan_rollback(out: dict, info: dict, on_index: bool, index_url, find_links) -> None:
    """The way back: the installed version from the same index, else (pip channels) a wheel
    rebuilt from the installation itself before anything changes, else none."""
    wheel = backup_path() if info["channel"] in FILE_CHANNELS else None
    if on_index:
        out["rollback_source"], out["rollback"] = "index", install_command(info, __version__, index_url, find_links)
    elif wheel:
        out["rollback_source"], out["rollback"] = "backup", install_file_command(info, wheel)
    else:
        out["rollback_source"], out["rollback"] = None, None
        out["rollback_steps"] = [f"none: the index does not offer loopx {__version__}"]
        return
    out["rollback_steps"] = [_shell(out["rollback"])]


FILE_CHANNELS = ("pip-venv", "pip-system", "pip-user", "pip-target", "uv-pip")


def install_file_command(info: dict, wheel: str) -> list[str]:
    """Reinstall loopx from a wheel file through ``info``'s (pip) channel."""
    py, ch = info["python"], info["channel"]
    if ch == "pip-target":
        return [py, "-m", "pip", "install", "--upgrade", "--no-deps", "--target", info["site_dir"], wheel]
    if ch == "uv-pip":
        return ["uv", "pip", "install", "--python", py, "--reinstall", "--no-deps", wheel]
    return [py, "-m", "pip", "install", "--force-reinstall", "--no-deps", *(["--user"] if ch == "pip-user" else []),
            wheel]


def _shell(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def smoke_command(info: dict) -> list[str]:
    """How to run the installed loopx: its console script when the channel has one, else -m."""
    scheme = f"{os.name}_user" if info["channel"] == "pip-user" else None
    scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
    exe = os.path.join(scripts, "loopx.exe" if os.name == "nt" else "loopx")
    if info["channel"] in ("pip-venv", "pip-system", "pip-user", "uv-pip", "pipx", "uv-tool") and os.path.exists(exe):
        return [exe]
    return [info["python"], "-m", "loopx"]


# ------------------------------------------------------------------ apply
def _run(argv: list[str], timeout: float = 600) -> dict:
    """Run ``argv``; ``{argv, exit_code, output}`` (stdout and stderr, cut to their last 2,000
    characters for the report)."""
    return _exec(argv, timeout)[0]


def _exec(argv: list[str], timeout: float) -> tuple[dict, str]:
    """``_run``'s report and the whole of stdout (what an envelope is read from)."""
    env = dict(os.environ, LOOPX_NO_UPDATE_CHECK="1")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        return {"argv": argv, "exit_code": 127, "output": f"{argv[0]}: command not found"}, ""
    except subprocess.TimeoutExpired:
        return {"argv": argv, "exit_code": 124, "output": f"timed out after {timeout:g}s"}, ""
    out = (proc.stdout + proc.stderr).strip()
    return {"argv": argv, "exit_code": proc.returncode, "output": out[-2000:]}, proc.stdout


def smoke(cmd: list[str], version: str) -> dict:
    """Run ``loopx --version`` (must print ``version``) and ``loopx doctor --format json`` (must
    answer with its envelope, exit 0 or 1) from the new installation. Returns ``{ok, why, steps}``."""
    ver = _run([*cmd, "--version"], SMOKE_TIMEOUT)
    if ver["exit_code"] != 0 or f"loopx {version}" not in ver["output"]:
        last = next((ln.strip() for ln in reversed(ver["output"].splitlines()) if ln.strip()), "nothing")
        return {"ok": False, "why": f"the new `loopx --version` exited {ver['exit_code']}: {last[-200:]}",
                "steps": [ver]}
    doc, stdout = _exec([*cmd, "doctor", "--format", "json"], SMOKE_TIMEOUT)
    last = next((ln for ln in reversed(stdout.splitlines()) if ln.strip()), "")
    try:  # doctor's envelope: one line of stdout, read whole (it can be longer than the report's cut)
        env = json.loads(last) if last else {}
        answered = isinstance(env, dict) and env.get("command") == "doctor"
    except ValueError:
        answered = False
    if doc["exit_code"] not in (0, 1) or not answered:
        return {"ok": False, "why": f"`loopx doctor` failed (exit {doc['exit_code']})", "steps": [ver, doc]}
    return {"ok": True, "why": None, "steps": [ver, doc]}


def apply(p: dict) -> dict:
    """Run plan ``p``; smoke-check; roll back on failure. Returns ``{result, plan, install, smoke,
    rollback, rollback_smoke}`` where result is ``up_to_date`` | ``updated`` | ``install_failed`` |
    ``rolled_back`` | ``rollback_failed``. Raises StateError for channels updated by hand."""
    if p["manual"]:
        raise StateError(f"loopx does not update a {p['channel']} installation itself ({p['summary']})",
                          "run: " + " && ".join(p.get("steps") or []))
    out: dict[str, Any] = {"result": None, "plan": p, "install": None, "smoke": None, "rollback": None, "rollback_smoke": None,
           "backup": None}
    if p["up_to_date"]:
        out["result"] = "up_to_date"
        return out
    if p["rollback"] is None:
        raise StateError(f"no way back to loopx {p['installed']}: the index does not offer it",
                         "add it to the index first, so a failed update can be undone")
    if p["rollback_source"] == "backup":
        out["backup"] = backup_wheel()
        p["rollback"][-1] = out["backup"]
    out["install"] = _run(p["command"])
    if out["install"]["exit_code"] == 0:
        out["smoke"] = smoke(p["smoke"], p["target"])
        if out["smoke"]["ok"]:
            out["result"] = "updated"
            return out
    out["rollback"] = _run(p["rollback"])
    out["rollback_smoke"] = smoke(p["smoke"], p["installed"])
    if out["rollback"]["exit_code"] == 0 and out["rollback_smoke"]["ok"]:
        out["result"] = "install_failed" if out["smoke"] is None else "rolled_back"
    else:
        out["result"] = "rollback_failed"
    return out
