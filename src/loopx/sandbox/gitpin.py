"""The pinned mode of loopx's git calls, under the names the sandbox uses (``env``, ``pin_process``,
``unpin``, ``main_dirs``, ``worktree_dirs``). It lives in ``loopx.kernel.storage.gitcli``, the one
git adapter; see its docstring ("Pinned")."""

from __future__ import annotations

from loopx.kernel.storage.gitcli import SAFE_CONFIG, main_dirs, pin_process, unpin, worktree_dirs
from loopx.kernel.storage.gitcli import pinned_env as env

__all__ = ["SAFE_CONFIG", "env", "main_dirs", "pin_process", "unpin", "worktree_dirs"]
