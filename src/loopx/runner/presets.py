"""Headless command lines of the agent hosts (``loopx run --agent NAME``).

Each preset is an argv template; ``{packet}`` is replaced by the turn packet text and
``{prompt_file}`` by the path of a file holding it. The packet is also given on stdin.
Extra flags (permission modes, models, budgets) belong in ``--agent-cmd`` when you need them.
"""

from __future__ import annotations

import shutil

from loopx.errors import UsageError

PRESETS: dict[str, list[str]] = {
    "claude-code": ["claude", "-p", "{packet}"],
    "codex": ["codex", "exec", "{packet}"],
    "cursor": ["cursor-agent", "-p", "{packet}"],
    "opencode": ["opencode", "run", "{packet}"],
    "gemini": ["gemini", "-p", "{packet}"],
    "pi": ["pi", "-p"],  # print mode; pi reads the prompt (the packet) from piped stdin
}


def names() -> list[str]:
    return sorted(PRESETS)


def argv_for(preset: str, packet_text: str, prompt_file: str) -> list[str]:
    """The argv of ``preset`` with the packet filled in. Raises UsageError for an unknown preset
    or a binary that is not on PATH."""
    if preset not in PRESETS:
        raise UsageError(f"unknown agent preset {preset!r}",
                         f"use one of {', '.join(names())}, or --agent-cmd 'your command'")
    template = PRESETS[preset]
    if shutil.which(template[0]) is None:
        raise UsageError(f"{template[0]} (the {preset} command) is not on PATH",
                         f"install {preset}'s CLI, or pass --agent-cmd 'your command'", code="agent_not_found")
    return [a.replace("{packet}", packet_text).replace("{prompt_file}", prompt_file) for a in template]


def check(preset: str) -> None:
    """Raise UsageError now (before any turn starts) when ``preset`` cannot run."""
    argv_for(preset, "", "")


def quote(arg: str) -> str:
    """``arg`` quoted for the platform's shell (``sh`` on POSIX, ``cmd.exe`` on Windows)."""
    import os

    if os.name == "nt":  # pragma: no cover - exercised on the Windows CI leg
        import subprocess

        return subprocess.list2cmdline([arg])
    import shlex

    return shlex.quote(arg)


def fill(command: str, values: dict[str, str]) -> str:
    """``--agent-cmd`` with ``{prompt_file}``, ``{packet_json}``, ``{run_id}``, ``{goal_id}``,
    ``{todo_id}`` replaced (other braces are left alone). Values are shell-quoted."""
    out = command
    for key, val in values.items():
        out = out.replace("{" + key + "}", quote(val or ""))
    return out
