"""Doctor's checks of where things are: ``loopx`` on PATH (and its version), and whether
``.loopx/`` sits on a network mount or inside a folder a sync client rewrites."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig

from loopx import __version__
from loopx.ops.check import result

# Path components of folders that sync clients own (case-insensitive).
SYNCED = ("dropbox", "onedrive", "icloud drive", "icloud~", "mobile documents", "com~apple~clouddocs",
          "google drive", "googledrive", "my drive", "cloudstorage", "box sync", "pcloud drive", "mega")
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "afs", "ncpfs", "sshfs", "davfs",
              "glusterfs", "ceph", "lustre", "gpfs", "9p", "drvfs", "webdav")
LOCAL_FUSE = ("fuse-overlayfs", "fuse.lxcfs", "fuse.portal", "fuse.gvfsd-fuse")


def _script_python(path: str) -> str | None:
    """The interpreter named by a console script's shebang, or None."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1024)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode("utf-8", "replace").strip().split()
    return parts[0] if parts else None


def _imports_re(path: str) -> bool:
    """Whether a console script is pip's template before pip 25, which imports ``re`` to strip a
    Windows suffix from ``sys.argv[0]`` (pip 25 and uv write one that imports only ``sys``)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b"\nimport re\n" in head and b"re.sub(" in head


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def path_version(exe: str) -> str | None:
    """``loopx --version`` of another installation, or None when it does not answer."""
    env = dict(os.environ, LOOPX_NO_UPDATE_CHECK="1")
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"loopx (\S+)", proc.stdout + proc.stderr)
    return m.group(1) if m and proc.returncode == 0 else None


def check() -> dict:
    found = shutil.which("loopx")
    scripts = sysconfig.get_path("scripts")
    if not found:
        return result("path", "warning", "`loopx` is not on PATH (your shell, skills and agents call it by name; installed hooks use its absolute path)",
                      f"add {scripts} to PATH, or call `{sys.executable} -m loopx`")
    py = _script_python(found)
    if py and os.path.isabs(py) and _same_file(py, sys.executable):
        if _imports_re(found):
            return result("path", "ok", f"{found} (this installation; written by pip < 25, the script imports `re` "
                          "before loopx starts: about 3 ms more for every command)",
                          f"{sys.executable} -m pip install -U pip, then reinstall loopx the same way")
        return result("path", "ok", f"{found} (this installation)")
    ver = path_version(found)
    if ver is None:
        return result("path", "warning", f"{found} does not answer `--version`",
                      f"reinstall it, or put {scripts} first on PATH")
    if ver != __version__:
        return result("path", "warning", f"{found} is loopx {ver}; this one is {__version__} ({sys.executable})",
                      f"put {scripts} first on PATH, or update the other installation")
    return result("path", "ok", f"{found} (loopx {ver})")


# ------------------------------------------------------------------ network / synced folders
def synced_folder(path: str) -> str | None:
    """The sync-client folder name in ``path``, or None."""
    for part in re.split(r"[\\/]+", path.lower()):
        for name in SYNCED:
            if part == name or part.startswith(name + " ") or part.startswith(name + "-") \
                    or (name.endswith("~") and part.startswith(name)):
                return part
    return None


def mount_of(path: str, mounts_text: str) -> tuple[str, str] | None:
    """(mount point, fs type) of the longest mount containing ``path`` in /proc/mounts text."""
    best = None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mnt = fields[1].replace("\\040", " ")
        if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and (best is None or len(mnt) > len(best[0])):
            best = (mnt, fields[2])
    return best


def network_fs(fstype: str) -> bool:
    t = fstype.lower()
    if t in LOCAL_FUSE:
        return False
    return t in NETWORK_FS or t.startswith(("fuse.", "nfs", "smb")) or t == "fuse"


def mounts_text() -> str:
    """The mount table as ``/proc/mounts`` lines (``device mountpoint fstype ...``); on macOS
    converted from ``mount`` output; empty when unknown."""
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        pass
    if sys.platform != "darwin":
        return ""
    try:
        out = subprocess.run(["mount"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return from_mount_output(out)


def from_mount_output(out: str) -> str:
    """BSD/macOS ``mount`` lines (``//u@nas/share on /Volumes/share (smbfs, nodev)``) as
    ``/proc/mounts`` lines."""
    lines = []
    for line in out.splitlines():
        m = re.match(r"^(.+?) on (.+?) \(([^,)]+)", line)
        if m:
            dev, mnt = (x.replace(" ", "\\040") for x in (m.group(1), m.group(2)))
            lines.append(f"{dev} {mnt} {m.group(3)}")
    return "\n".join(lines)


def windows_remote(path: str) -> bool:
    """A UNC path or a mapped network drive (Windows only)."""
    if os.name != "nt":
        return False
    if path.startswith(("\\\\", "//")):
        return True
    try:
        import ctypes

        drive = os.path.splitdrive(path)[0] + "\\"
        return ctypes.windll.kernel32.GetDriveTypeW(drive) == 4  # type: ignore[attr-defined]  # DRIVE_REMOTE
    except Exception:
        return False


def location(root: str, mounts: str | None = None) -> dict:
    real = os.path.realpath(root)
    sync = synced_folder(real)
    if sync:
        return result("location", "warning",
                      f".loopx/ is inside a synced folder ({sync}): the sync client can tear or duplicate files",
                      "move the project out of the synced folder (or exclude .loopx/ from syncing)")
    if windows_remote(real):
        return result("location", "warning", ".loopx/ is on a network drive: file locks may not hold",
                      "keep the project on a local disk")
    hit = mount_of(real, mounts_text() if mounts is None else mounts)
    if hit and network_fs(hit[1]):
        return result("location", "warning",
                      f".loopx/ is on a network file system ({hit[1]} at {hit[0]}): file locks may not hold",
                      "keep the project on a local disk")
    return result("location", "ok", f"{real} is on a local file system")
