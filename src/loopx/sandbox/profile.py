"""What the sandbox allows, derived from what loopx knows about the turn.

``build(store, cwd, *, host=None, worktree=None, tmpdir, extra_read=(), extra_write=()) -> dict``
is the policy ``loopx.sandbox.exec`` applies (``loopx.sandbox.landlock.apply``)::

    {"read": [dir], "read_files": [file], "write": [dir], "write_files": [file],
     "connect": [port] | None, "tmpdir": str, "protected": [path], "denied": [path]}

- writable: ``cwd`` (the project, or the turn's or trial's private clone with its own ``.git``)
  minus every protected path, the private ``tmpdir``, the host's own state folders minus the files
  loopx installed in them, and ``LOOPX_SANDBOX_WRITE`` (a human's ``os.pathsep`` list); never
  anything of the project's ``.git`` when ``cwd`` is a clone (every workspace ``loopx run`` makes,
  an experiment's trials included);
- protected (outside every write grant): ``.loopx/``, the project's git folder (config, hooks,
  refs; all of it for the main checkout), loopx's installed package, every file loopx installs for
  a host (``loopx.sandbox.hostfiles``) and loopx's data and config folders;
- readable: system and language folders, ``PATH``, Python's own paths, the project, ``cwd``, the
  host's state, the user's git configuration files, ``LOOPX_SANDBOX_READ``; never a folder that
  holds a denied path (``~/.ssh``, git credential stores, loopx's data and config folders with the
  dashboard secret, signing keys, allowed signers and anchors), so those are unreadable;
- network (Landlock ABI 4+): TCP connect only to port 443 (model endpoints) and
  ``LOOPX_SANDBOX_PORTS``; the dashboard's port, ssh and every local service are not reachable.
  ``LOOPX_SANDBOX_NET=open`` leaves TCP unfiltered.

Landlock grants only, per tree: the launcher makes each protected path inside a writable tree a
read-only view first (``loopx.sandbox.mounts``), so the whole tree can be granted. Where a mount
namespace is not allowed, ``fallback`` grants the tree child by child instead: new files cannot
then be created directly in a folder that holds a protected path (the project root of a main
checkout, ``.claude/``); editing existing files there still works. Symbolic links are never
followed into a grant.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys

import loopx
from loopx import config
from loopx.config import env
from loopx.guard import measuring
from loopx.kernel.read import worktrees
from loopx.kernel.storage import layout
from loopx.kernel.storage.gitcli import git_dir
from loopx.sandbox import hostfiles

SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sys",
               "/dev", "/run/systemd/resolve", "/run/resolvconf", "/snap", "/nix/store", "/var/lib/dpkg")
# what of /etc hosts and tools read (measured with the real host CLIs, tests/test_real_hosts.py):
# name resolution, TLS roots, users and groups, the dynamic linker, alternatives, time zone, git's
# and the shell's system settings. Not the rest (package-manager credentials such as /etc/npmrc and
# /etc/pip.conf, service configurations, ssh's settings); LOOPX_SANDBOX_READ adds what a tool needs.
ETC_READ = ("/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/nsswitch.conf", "/etc/gai.conf",
            "/etc/services", "/etc/protocols", "/etc/networks", "/etc/passwd", "/etc/group", "/etc/hostname",
            "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload", "/etc/alternatives",
            "/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki", "/etc/crypto-policies",
            "/etc/localtime", "/etc/timezone", "/etc/zoneinfo", "/etc/locale.alias", "/etc/locale.conf",
            "/etc/default/locale", "/etc/mime.types", "/etc/magic", "/etc/os-release", "/etc/lsb-release",
            "/etc/debian_version", "/etc/machine-id", "/etc/gitconfig", "/etc/gitattributes",
            "/etc/bash.bashrc", "/etc/profile", "/etc/profile.d", "/etc/inputrc", "/etc/environment",
            "/etc/terminfo", "/etc/python3", "/etc/fonts", "/etc/selinux/config", "/etc/xdg")


def etc_reads() -> tuple[list[str], list[str]]:
    """``(dirs, files)`` of ``ETC_READ`` that exist here (real paths: a link such as
    /etc/resolv.conf is granted at its target)."""
    dirs: list[str] = []
    files: list[str] = []
    for p in ETC_READ:
        if not os.path.exists(p):
            continue
        r = _real(p)
        (dirs if os.path.isdir(r) else files).append(r)
    return dirs, files
DEV_WRITE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom", "/dev/ptmx")
DEV_WRITE = ("/dev/pts", "/dev/shm")
GIT_USER_FILES = (".gitconfig", ".config/git/config", ".config/git/ignore", ".config/git/attributes")
GIT_PROTECTED = ("config", "config.worktree", "hooks", "info", "modules", "worktrees", "refs/loopx", "logs/refs/loopx",
                 "commondir")
SECRET_HOME = (".ssh", ".git-credentials", ".config/git/credentials", ".gnupg", ".netrc", ".npmrc", ".pypirc",
               ".config/gh", ".docker", ".aws", ".kube", ".cargo/credentials", ".cargo/credentials.toml")


def _real(p: str) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(p)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def carve(root: str, protected: list[str]) -> tuple[list[str], list[str]]:
    """``(dirs, files)`` that grant all of ``root`` except the ``protected`` paths (real, absolute)."""
    root = _real(root)
    if any(_under(root, p) for p in protected):
        return [], []
    if not any(_under(p, root) for p in protected):
        return ([root], []) if os.path.isdir(root) else ([], [root] if os.path.isfile(root) else [])
    dirs: list[str] = []
    files: list[str] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return [], []
    for n in names:
        child = os.path.join(root, n)
        if os.path.islink(child):
            continue  # never grant through a link: its target keeps whatever grant it has
        d, f = carve(child, protected)
        dirs += d
        files += f
    return dirs, files


def _git_dirs(cwd: str) -> tuple[str | None, str | None]:
    """``(git_dir, common_dir)`` of the checkout at ``cwd`` (read from files: no git call)."""
    g = git_dir(cwd)
    if g is None:
        return None, None
    if os.path.isfile(g):
        try:
            with open(g, encoding="utf-8") as fh:
                line = fh.read().strip()
        except OSError:
            return None, None
        if not line.startswith("gitdir:"):
            return None, None
        gd = line[7:].strip()
        gd = gd if os.path.isabs(gd) else os.path.join(os.path.dirname(g), gd)
        try:
            with open(os.path.join(gd, "commondir"), encoding="utf-8") as fh:
                cd = fh.read().strip()
            cd = cd if os.path.isabs(cd) else os.path.join(gd, cd)
        except OSError:
            cd = gd
        return _real(gd), _real(cd)
    return _real(g), _real(g)


def loopx_package() -> str:
    return _real(os.path.dirname(loopx.__file__))


def denied_paths(home: str) -> list[str]:
    out = [_real(os.path.join(home, p)) for p in SECRET_HOME]
    out += [_real(config.data_home()), _real(os.path.dirname(config.config_path()))]
    return out


def first_word(cmd, shell: bool, cwd: str) -> str | None:
    """The program a command line starts (``~`` expanded, resolved on PATH or against ``cwd``)."""
    try:
        word = (shlex.split(cmd) if shell else list(cmd))[0]
    except (ValueError, IndexError):
        return None
    word = os.path.expanduser(word)
    if os.sep in word:
        p = word if os.path.isabs(word) else os.path.join(cwd, word)
        return p if os.path.isfile(p) else None
    return shutil.which(word)


def named_files(cmd, shell: bool, cwd: str) -> list[str]:
    """The existing files a command line names (``python agent.py``: the script), ``~`` expanded."""
    try:
        words = shlex.split(cmd) if shell else list(cmd)
    except ValueError:
        return []
    out = []
    for w in words[:64]:
        w = os.path.expanduser(w.split("=", 1)[1] if w.startswith("--") and "=" in w else w)
        if not w or w.startswith("-"):
            continue
        p = w if os.path.isabs(w) else os.path.join(cwd, w)
        if os.path.isfile(p):
            out.append(p)
    return out


def program_reads(exe: str | None) -> tuple[list[str], list[str]]:
    """``(files, dirs)`` to read so ``exe`` can run: the file itself, and for a program installed
    under a folder (a host's own install, a node package) the folder its real file lives in."""
    if not exe:
        return [], []
    real = _real(exe)
    files = [p for p in {_real(os.path.abspath(exe)), real} if os.path.isfile(p)]
    parts = real.split(os.sep)
    dirs = []
    if "node_modules" in parts:
        # the whole node_modules folder the package sits in: npm hoists a package's dependencies
        # beside it (Pi's `undici` lies in the same node_modules, not inside the package)
        dirs.append(os.sep.join(parts[:parts.index("node_modules") + 1]))
    elif os.path.dirname(real) not in ("/usr/bin", "/bin", "/usr/local/bin"):
        home = _real(os.path.expanduser("~"))
        d = os.path.dirname(real)
        if d != home and not d.endswith(os.sep + "bin"):
            dirs.append(d)  # a versioned install folder (e.g. ~/.local/share/<host>/versions/x)
    return files, dirs


def _protected(store, project: str, cwd: str, home: str, denied: list[str]) -> tuple[list[str], str, str | None, bool]:
    """``(protected, git dir of cwd, common git dir, in_main)``: every path kept out of the write
    grants (module docstring)."""
    protected = list(denied)
    if store is not None:
        protected.append(_real(store.root))
    if os.path.isdir(os.path.join(cwd, layout.DIRNAME)):  # a workspace's own (empty, or tracked) store folder
        protected.append(_real(os.path.join(cwd, layout.DIRNAME)))
    main_git, _ = _git_dirs(project)
    wt_git, common = _git_dirs(cwd)
    in_main = bool(wt_git and wt_git == common)
    wt_git_dir = wt_git or ""
    for g in (main_git, common):
        if g and not (in_main and g == wt_git):
            protected.append(g)
    if in_main:
        # a checkout that commits through its own .git (a turn's private clone, or the main checkout
        # where there is none): all of it is writable but what makes git run commands or read
        # settings (config, hooks, info, submodules' and worktrees' folders) and loopx's own refs;
        # loopx's git calls name the folders (gitpin), so a planted ``commondir`` is never followed
        protected += [os.path.join(wt_git_dir, p) for p in GIT_PROTECTED]
    protected.append(loopx_package())
    protected += [_real(p) for p in hostfiles.owned(project, home)]
    if cwd != project:  # the hook files copied into a workspace are loopx's as well
        protected += [_real(p) for p in hostfiles.owned(cwd, home)]
    protected += [_real(os.path.join(d, "hooks")) for d in (common, main_git) if d]
    return protected, wt_git_dir, common, in_main


def _make_states(host: str | None, home: str) -> list[str]:
    states = hostfiles.state_dirs(host, home)
    for d in states:  # a host creates its state folders on first use: they must exist to be granted
        if not os.path.splitext(d)[1] and not os.path.lexists(d):  # a folder, not a file such as ~/.claude.json
            try:
                os.makedirs(d, exist_ok=True)
            except OSError:
                pass
    return states


def _write_roots(candidates, protected: list[str], denied: list[str]) -> tuple[list[str], list[str], list[str]]:
    """``(roots, carved dirs, carved files)`` of the write grants."""
    roots: list[str] = []
    carved: list[str] = []
    carved_files: list[str] = []
    for root in candidates:
        if not root or not os.path.exists(root) or os.path.islink(root):
            continue
        root = _real(root)
        # a grant never reaches above its root, so a protected folder that holds the root (the
        # run's workspace under .loopx/worktrees/) does not take it away
        above = [p for p in protected if not _under(root, p)]
        if any(_under(root, p) for p in protected if p in denied):
            continue
        got_dirs, got_files = carve(root, above)
        carved += got_dirs
        carved_files += got_files
        roots.append(root)
    return roots, carved, carved_files


def _reads(project: str, cwd: str, home: str, states: list[str], denied: list[str], extra_read=()) -> list[str]:
    cands = list(SYSTEM_READ) + etc_reads()[0] + [sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                  os.path.dirname(loopx_package())]
    cands += [p for p in sys.path if p]
    path_dirs = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    cands += path_dirs
    # a tool installed in the home folder keeps its programs beside its bin/ or shims/ folder
    # (~/.pyenv, ~/.nvm, ~/.local); never a folder holding a secret (checked below)
    for p in path_dirs:
        up = os.path.dirname(_real(p))
        if os.path.basename(_real(p)) in ("bin", "shims") and up not in ("/", "/usr", "/usr/local", "/opt", home) \
                and not any(os.path.lexists(os.path.join(up, x)) for x in SECRET_HOME):
            cands.append(up)  # not a home folder: none of the secrets a home folder holds is in it
    cands += [project, cwd, *states]
    cands += [p for p in (env("LOOPX_SANDBOX_READ") or "").split(os.pathsep) if p] + list(extra_read)
    read: list[str] = []
    for c in cands:
        r = _real(c)
        if not os.path.isdir(r) or r == "/" or r == home or any(_under(x, r) for x in denied):
            continue  # a folder that would make a secret readable is never granted
        if r not in read:
            read.append(r)
    return read


def hidden_paths(store, cwd: str) -> list[str]:
    """Every copy of an active experiment's holdout data (``--holdout-path``) the agent could
    reach: in the project, in ``cwd`` (the turn's project folder) and in each experiment's own
    worktree. Existing paths only, real and absolute."""
    if store is None:
        return []

    state = store.load(view="live")
    rels = list(measuring.holdout(state))
    if not rels:
        return []
    pre = worktrees.prefix(store.project_dir)
    bases = [store.project_dir, cwd]
    for e in (state.get("experiments") or {}).values():
        if e.get("worktree"):
            bases.append(os.path.join(store.project_dir, e["worktree"], *([pre] if pre else [])))
    out = []
    for base in bases:
        for rel in rels:
            p = _real(os.path.join(base, rel))
            if os.path.lexists(p) and p not in out:
                out.append(p)
    return out


def _view(store, cwd: str) -> dict | None:
    """``{"at": the project's repository top, "tree": the clone's top, "objects": the project's
    object store, "store": its .loopx}``; None when ``cwd`` is not a clone of the project."""
    if store is None:
        return None
    top_git, _ = _git_dirs(store.project_dir)
    ws_git, ws_common = _git_dirs(cwd)
    if not top_git or not ws_git or ws_git != ws_common or not os.path.isdir(os.path.join(ws_git, "project-objects")):
        return None
    return {"at": os.path.dirname(top_git), "tree": os.path.dirname(ws_git), "objects": os.path.join(top_git, "objects"),
            "store": _real(store.root)}


def _carve_all(grants: list[str], hidden: list[str]) -> tuple[list[str], list[str]]:
    """``grants`` (folders) with every ``hidden`` path left out, child by child."""
    dirs: list[str] = []
    files: list[str] = []
    for g in grants:
        d, f = carve(g, hidden)
        dirs += [x for x in d if x not in dirs]
        files += [x for x in f if x not in files]
    return dirs, files


def build(store, cwd: str, *, host: str | None = None, tmpdir: str, extra_read=(), extra_write=(),
          extra_read_files=(), hidden=None, view: bool = False,
          shared=()) -> dict:
    """The agent's policy (module docstring). ``hidden``: paths no grant may show (an experiment's
    holdout data; default ``hidden_paths(store, cwd)``): an empty read-only view over each in the
    mount namespace, left out of every grant child by child where there is none. ``view``: ``cwd``
    is a turn's private clone (``loopx.runner.worktree.create(view=True)``) that the mount
    namespace shows at the project's own path (``policy["view"]``, ``loopx.sandbox.mounts``), with
    the project's own ``shared`` paths (what git ignores, writable as before) at their place."""
    home = _real(os.environ.get("HOME") or os.path.expanduser("~"))
    project = _real(store.project_dir) if store is not None else _real(cwd)
    cwd = _real(cwd)
    denied = denied_paths(home)
    hide = list(hidden_paths(store, cwd) if hidden is None else [_real(h) for h in hidden if os.path.lexists(h)])
    protected, wt_git_dir, common, in_main = _protected(store, project, cwd, home, denied)
    protected += hide
    git_root = [wt_git_dir] if in_main and not _under(wt_git_dir, cwd) else []  # a project below its repository's top
    states = _make_states(host, home)
    shared = [_real(p) for p in shared] if view else []
    roots, carved, carved_files = _write_roots(
        [cwd, *git_root, tmpdir, *states, *shared, *[p for p in (env("LOOPX_SANDBOX_WRITE") or "").split(os.pathsep) if p],
         *extra_write], protected, denied)
    reopen: list[str] = [cwd] if any(_under(cwd, p) for p in protected) else []
    carved += reopen
    devs = [dev for dev in DEV_WRITE if os.path.isdir(dev)]
    write = roots + reopen + devs
    carved += devs
    read_files = [f for f in (_real(os.path.join(home, n)) for n in GIT_USER_FILES) if os.path.isfile(f)]
    read_files += etc_reads()[1]
    read_files += [_real(f) for f in extra_read_files if os.path.isfile(f) and not any(_under(f, x) for x in denied)]
    write_files = [dev for dev in DEV_WRITE_FILES if os.path.exists(dev)]
    net_mode = (env("LOOPX_SANDBOX_NET") or "").strip().lower()
    ports = [443] + [int(p) for p in (env("LOOPX_SANDBOX_PORTS") or "").replace(",", " ").split()
                     if p.isdigit()]
    ro = [p for p in sorted(set(protected)) if any(_under(p, r) for r in roots) and p not in hide]
    secret_inside = any(p in denied for p in ro)  # a read-only view would still show it: carve instead
    read = _reads(project, cwd, home, states, denied, extra_read)
    fallback = {"write": carved, "write_files": write_files + carved_files}
    if hide:  # without a mount namespace: no grant may reach a hidden path
        fallback["read"], more_files = _carve_all(read, hide)
        fallback["read_files"] = read_files + more_files
    pol_view = _view(store, cwd) if view and not secret_inside else None
    if pol_view is not None:
        pol_view["shared"] = [p for p in shared if p in roots]
    return {"read": read, "read_files": read_files, "view": pol_view,
            "write": [] if secret_inside else write,
            "write_files": write_files,
            "mount": {"roots": roots, "ro": ro, "rw": reopen, "off": secret_inside,
                      "hide": hide},
            "fallback": fallback,
            "connect": None if net_mode == "open" else sorted(set(ports)), "tmpdir": tmpdir,
            "protected": sorted(set(protected)), "denied": denied, "scope_signals": True}


def holdout(code_dir: str, data_dirs, scratch: str) -> dict:
    """The policy of an experiment's holdout run: the code (``code_dir``) and the holdout data
    (``data_dirs``) readable, no network at all (``connect=[]``), writes only in ``scratch``
    (also its ``TMPDIR``). Nothing of the project's store, git folder or secrets is reachable."""
    home = _real(os.environ.get("HOME") or os.path.expanduser("~"))
    denied = denied_paths(home)
    read = []
    etc_dirs, etc_files = etc_reads()
    for c in [*SYSTEM_READ, *etc_dirs, sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(loopx_package()),
              code_dir, *data_dirs, *[p for p in sys.path if p]]:
        r = _real(c)
        if os.path.isdir(r) and r not in ("/", home) and not any(_under(x, r) for x in denied) and r not in read:
            read.append(r)
    scratch = _real(scratch)
    files = [f for f in DEV_WRITE_FILES if os.path.exists(f)]
    return {"read": read, "read_files": etc_files, "write": [scratch], "write_files": files, "connect": [],
            "tmpdir": scratch, "mount": {"roots": [scratch], "ro": [], "rw": []},
            "fallback": {"write": [scratch], "write_files": files}, "scope_signals": True}

from loopx.sandbox.envscrub import SCRUB, scrub_env  # noqa: E402,F401 - kept here for callers
