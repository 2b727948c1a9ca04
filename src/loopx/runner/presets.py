"""Headless command lines of the agent hosts (``loopx run --agent NAME``).

Each preset drives its host in the form that reports usage (a JSON result or JSON events on
stdout) and with loopx's permission mode mapped to the host's own setting. ``PRESETS`` maps a
preset name to::

    {"argv": [...],            # {packet} -> the turn packet text, {prompt_file} -> a file holding it
     "report": str|None,       # how the output reports usage (loopx.runner.report.PARSERS), None: it does not
     "modes": {"read-only": [...]|None, "edit": [...]|None, "full": [...]|None},
                               # the flags of each loopx mode; None = the host has no such setting
     "kind": str}              # the host kind (usage windows, host errors): claude-code, codex, ...

The packet is given on stdin only to presets that do not take it as an argument (``{packet}``):
hosts append piped stdin to their prompt argument, which would send it twice. ``MODES`` are loopx's own words; docs/usage.md has the same
table. Other presets (the hosts issue's ``pi``) may be plain argv lists: they then report no usage
("usage unknown"), run ``edit`` and ``full`` unchanged and refuse ``read-only``.
"""

from __future__ import annotations

import os
import shlex
import shutil

from loopx import hostfacts
from loopx.errors import UsageError
from loopx.exe import loopx_command

MODES = ("read-only", "edit", "full")

def _from_table() -> dict[str, dict | list]:
    return {h: {"argv": list(r["preset"]["argv"]), "report": r["preset"]["report"], "kind": h,
                "modes": {m: (list(f) if f is not None else None) for m, f in r["preset"]["modes"].items()},
                **({"root": r["preset"]["root"]} if r["preset"].get("root") else {})}
            for h, r in hostfacts.HOSTS.items() if r.get("preset")}


# the presets are the host table's ``preset`` rows (loopx.hostfacts): one place for each host's facts
PRESETS: dict[str, dict | list] = _from_table()


def names() -> list[str]:
    return sorted(PRESETS)


def retrying(preset: str | None) -> tuple:
    """``((pattern, n), ...)``: the lines ``preset``'s host prints when it only waits and retries
    (the host table's ``preset.retrying``; ``runner.process.RetryWatch`` reads them): the runner
    stops the host after ``n`` of them instead of at the turn's timeout."""
    row = (hostfacts.HOSTS.get(preset or "") or {}).get("preset") or {}
    return tuple(row.get("retrying") or ())


def known(preset: str | None) -> bool:
    """True when ``preset`` is a preset (a host table row added since import counts)."""
    if preset not in PRESETS:
        PRESETS.update({k: v for k, v in _from_table().items() if k not in PRESETS})
    return preset in PRESETS


def spec(preset: str) -> dict:
    """The preset as a dict (plain argv lists are normalised). Raises UsageError when unknown."""
    if preset not in PRESETS:
        PRESETS.update({k: v for k, v in _from_table().items() if k not in PRESETS})  # a row added since
    if preset not in PRESETS:
        raise UsageError(f"unknown agent preset {preset!r}",
                         f"use one of {', '.join(names())}, or --agent-cmd 'your command'")
    p = PRESETS[preset]
    if isinstance(p, list):  # a plain argv: no usage report, no permission flags (read-only cannot be enforced)
        return {"argv": list(p), "report": None, "kind": preset, "modes": {"read-only": None, "edit": [], "full": []}}
    return p


def mode_flags(preset: str, mode: str | None) -> list[str]:
    """The host flags of loopx permission ``mode`` for ``preset``. Raises UsageError for an unknown
    mode or a mode the host cannot express (read-only on a host without a read-only setting)."""
    if mode is None:
        return []
    if mode not in MODES:
        raise UsageError(f"unknown permission mode {mode!r}", f"use one of {', '.join(MODES)}",
                         code="bad_permission_mode")
    flags = spec(preset)["modes"].get(mode)
    if flags is None:
        raise UsageError(f"{preset} has no {mode} setting on its command line",
                         "pick another --permission-mode, or configure the host itself and use --agent-cmd",
                         code="permission_mode_unsupported")
    return list(flags)


def argv_for(preset: str, packet_text: str, prompt_file: str, mode: str | None = None,
             verify: str | None = None) -> list[str]:
    """The argv of ``preset`` with the packet filled in and ``mode``'s flags added (``{loopx}``:
    this loopx's absolute command, ``{verify}``: the goal's verify command; a flag pair whose value
    is empty is dropped). Raises UsageError for an unknown preset or mode, a binary that is not on
    PATH, or a mode the host refuses to run in as root."""
    template = spec(preset)["argv"]
    if shutil.which(template[0]) is None:
        raise UsageError(f"{template[0]} (the {preset} command) is not on PATH",
                         f"install {preset}'s CLI, or pass --agent-cmd 'your command'", code="agent_not_found")
    _check_root(preset, mode)
    argv = [a.replace("{packet}", packet_text).replace("{prompt_file}", prompt_file) for a in template]
    return argv + fill_flags(mode_flags(preset, mode), verify)


def fill_flags(flags: list[str], verify: str | None) -> list[str]:
    """``flags`` with ``{loopx}`` and ``{verify}`` filled in; a pair whose value would be empty is left out."""
    out: list[str] = []
    i = 0
    while i < len(flags):
        f = flags[i]
        if "{verify}" in f and not verify:
            if out and out[-1].startswith("-"):
                out.pop()  # the option the empty value belonged to
            i += 1
            continue
        out.append(f.replace("{loopx}", loopx_command()).replace("{verify}", verify or ""))
        i += 1
    return out


def _check_root(preset: str, mode: str | None) -> None:
    note = (spec(preset).get("root") or {})
    if mode and note.get(mode) and hasattr(os, "geteuid") and os.geteuid() == 0 and not os.environ.get(note.get("env") or ""):
        raise UsageError(f"{preset} will not start in permission mode {mode} as root", note[mode],
                         code="permission_mode_root")


def packet_on_stdin(preset: str | None) -> bool:
    """False when ``preset`` already passes the packet as an argument: hosts such as Gemini CLI and
    Claude Code append piped stdin to the ``-p`` prompt, so giving it both ways doubles the prompt."""
    return preset is None or not any("{packet}" in a for a in spec(preset)["argv"])


def check(preset: str, mode: str | None = None) -> None:
    """Raise UsageError now (before any turn starts) when ``preset`` cannot run."""
    argv_for(preset, "", "", mode)


def quote(arg: str) -> str:
    """``arg`` quoted for the platform's shell (``sh`` on POSIX, ``cmd.exe`` on Windows)."""
    if os.name == "nt":  # pragma: no cover - exercised on the Windows CI leg
        import subprocess

        return subprocess.list2cmdline([arg])

    return shlex.quote(arg)


def fill(command: str, values: dict[str, str]) -> str:
    """``--agent-cmd`` with ``{prompt_file}``, ``{packet_json}``, ``{run_id}``, ``{goal_id}``,
    ``{todo_id}`` replaced (other braces are left alone). Values are shell-quoted."""
    out = command
    for key, val in values.items():
        out = out.replace("{" + key + "}", quote(val or ""))
    return out
