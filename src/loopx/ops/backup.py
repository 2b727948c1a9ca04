"""A wheel of the running installation, rebuilt from its own ``RECORD``, so ``update apply`` can
roll back through the same pip channel even when the index no longer offers the installed version.

``backup_wheel(dest_dir) -> str`` (the wheel's path). Files outside the installation folder
(console scripts) are left out: pip regenerates them from ``entry_points.txt``. Raises StateError
when the installation has no usable metadata.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import zipfile

from loopx.errors import StateError
from loopx.kernel.storage import registry
from loopx.kernel.storage.fs import atomic_write
from loopx.ops.channel import _dist_path, find_distribution

SKIP_META = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
KEEP = 3  # backup wheels kept in <loopx data folder>/update-backups/


def _tag(dist) -> str:
    for line in (dist.read_text("WHEEL") or "").splitlines():
        if line.lower().startswith("tag:"):
            return line.split(":", 1)[1].strip()
    return "py3-none-any"


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def backup_dir() -> str:
    return os.path.join(registry.home(), "update-backups")


def backup_path(dest_dir: str | None = None) -> str | None:
    """Where ``backup_wheel`` will write the running installation's wheel (None: no metadata)."""
    dist = find_distribution()
    if dist is None:
        return None
    return os.path.join(dest_dir or backup_dir(), f"loopx-{dist.version}-{_tag(dist)}.whl")


def backup_wheel(dest_dir: str | None = None) -> str:
    dist = find_distribution()
    dpath = _dist_path(dist) if dist is not None else None
    if dist is None or dpath is None or not dist.files:
        raise StateError("the installed loopx has no file list to back up",
                         "reinstall loopx through its channel before updating")
    info_dir = os.path.basename(dpath)
    dest_dir = dest_dir or backup_dir()
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, f"loopx-{dist.version}-{_tag(dist)}.whl")

    buf = io.BytesIO()
    records = []
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in dist.files:
            rel = f.as_posix()
            name = rel.rsplit("/", 1)[-1]
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            if rel.startswith(info_dir + "/") and name in SKIP_META:
                continue
            try:
                data = f.locate().read_bytes()
            except OSError as exc:
                raise StateError(f"cannot back up {rel}: {exc}", "reinstall loopx, then update") from None
            zf.writestr(rel, data)
            records.append(f"{rel},{_digest(data)},{len(data)}")
        records.append(f"{info_dir}/RECORD,,")
        zf.writestr(f"{info_dir}/RECORD", "\n".join(records) + "\n")
    atomic_write(path, buf.getvalue())
    prune(dest_dir, keep=path)
    return path


def prune(dest_dir: str, keep: str, limit: int = KEEP) -> None:
    """Keep the ``limit`` newest backup wheels (always ``keep``); remove the rest."""
    try:
        wheels = [os.path.join(dest_dir, n) for n in os.listdir(dest_dir) if n.endswith(".whl")]
        wheels.sort(key=os.path.getmtime, reverse=True)
    except OSError:
        return
    for w in wheels[limit:]:
        if os.path.abspath(w) != os.path.abspath(keep):
            try:
                os.remove(w)
            except OSError:
                pass
