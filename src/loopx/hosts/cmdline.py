"""Hook command lines: loopx's argv rendered for the shell a host runs its hook commands with.

Hosts store a hook as one string and hand it to a shell: ``sh -c`` on Linux and macOS, and on
Windows cmd.exe, PowerShell 7 or Git Bash depending on the host. The same argv needs different
quoting in each, so the installer renders it per shell:

- ``posix``: ``shlex`` quoting (single quotes), forward or back slashes kept as given;
- ``cmd``: the MSVC/``CommandLineToArgvW`` rules (``subprocess.list2cmdline``): double quotes
  around words with spaces or tabs, backslashes doubled only before a quote. cmd.exe expands
  ``%VAR%`` even inside quotes, so a word with ``%`` or ``!`` is refused (ValueError);
- ``pwsh``: the call operator ``&`` followed by single-quoted words (``'`` doubled inside), so a
  program path with spaces is run rather than printed as a string.

A word of plain characters (letters, digits, ``/ \\ : . _ - +``) needs no quotes in any of the
three, so on a path without spaces the three renderings differ only by pwsh's ``&``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

from loopx import resources

SHELLS = ("posix", "cmd", "pwsh")
_PLAIN = re.compile(r"^[A-Za-z0-9_./\\:+=@,-]+$")


def loopx_argv() -> list[str]:
    """The argv that starts this installation's loopx: ``[abs path of the loopx script]`` or
    ``[sys.executable, "-m", "loopx"]``, from ``resources.loopx_executable()`` (a command string,
    quoted or not for the platform's shell)."""
    exe = resources.loopx_executable()
    if os.path.isfile(exe):
        return [exe]
    suffix = " -m loopx"
    if exe.endswith(suffix) and os.path.isfile(exe[: -len(suffix)]):
        return [exe[: -len(suffix)], "-m", "loopx"]
    words = split(exe, default_shell())  # the string may be quoted for the platform's shell
    if words and os.path.isabs(words[0]) and words[1:] in ([], ["-m", "loopx"]):
        return words
    return [exe]


def default_shell() -> str:
    return "posix" if os.name != "nt" else "cmd"


def render(argv: list[str], shell: str) -> str:
    """``argv`` as one command line for ``shell`` (one of SHELLS). Raises ValueError otherwise."""
    if shell == "posix":
        return " ".join(shlex.quote(a) for a in argv)
    if shell == "cmd":
        if any("%" in a or "!" in a for a in argv):  # cmd.exe expands %VAR% (and !VAR!) even inside quotes
            raise ValueError("a word with % or ! cannot be quoted for cmd.exe: " + next(a for a in argv if "%" in a or "!" in a))
        return subprocess.list2cmdline(argv)
    if shell == "pwsh":
        words = [a if _PLAIN.match(a) else "'" + a.replace("'", "''") + "'" for a in argv]
        return "& " + " ".join(words)
    raise ValueError(f"unknown shell {shell!r}")


def split(command: str, shell: str) -> list[str]:
    """The argv a shell would give the program for ``command`` (the inverse of ``render`` for the
    forms it produces). Used by doctor to find the program a hook starts."""
    if shell == "cmd":
        return _split_cmd(command)
    if shell == "pwsh":
        return _split_pwsh(command)
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _split_cmd(command: str) -> list[str]:
    """``CommandLineToArgvW`` rules: 2n backslashes + quote -> n backslashes and a quote toggle;
    2n+1 backslashes + quote -> n backslashes and a literal quote."""
    out, cur, inq, i, have = [], [], False, 0, False
    while i < len(command):
        c = command[i]
        if c == "\\":
            j = i
            while j < len(command) and command[j] == "\\":
                j += 1
            n = j - i
            if j < len(command) and command[j] == '"':
                cur.append("\\" * (n // 2))
                if n % 2:
                    cur.append('"')
                    i = j + 1
                else:
                    i = j
                have = True
                continue
            cur.append("\\" * n)
            i = j
            have = True
            continue
        if c == '"':
            inq = not inq
            have = True
        elif c in " \t" and not inq:
            if have:
                out.append("".join(cur))
            cur, have = [], False
        else:
            cur.append(c)
            have = True
        i += 1
    if have:
        out.append("".join(cur))
    return out


def _split_pwsh(command: str) -> list[str]:
    text = command.strip()
    if text.startswith("& "):
        text = text[2:]
    out, cur, i, have = [], [], 0, False
    while i < len(text):
        c = text[i]
        if c == "'":
            j = i + 1
            while j < len(text):
                if text[j] == "'" and text[j + 1:j + 2] == "'":
                    cur.append("'")
                    j += 2
                elif text[j] == "'":
                    break
                else:
                    cur.append(text[j])
                    j += 1
            i, have = j + 1, True
            continue
        if c in " \t":
            if have:
                out.append("".join(cur))
            cur, have = [], False
        else:
            cur.append(c)
            have = True
        i += 1
    if have:
        out.append("".join(cur))
    return out


def hook_command(host_shell: str | None, args: list[str], argv: list[str] | None = None,
                 windows: bool | None = None) -> str:
    """The full hook command: loopx's argv plus ``args``, rendered for this platform (POSIX) or,
    on Windows (``windows``, default: this platform), for the shell the host uses there
    (``host_shell``). Raises ValueError for a word cmd.exe cannot quote."""
    on_windows = (os.name == "nt") if windows is None else windows
    shell = (host_shell or "cmd") if on_windows else "posix"
    return render([*(argv or loopx_argv()), *args], shell)


def program_of(command: str, shell: str | None = None) -> str | None:
    """The program a hook command starts (its first word), or None for an empty command."""
    if shell is None:
        shell = "posix" if os.name != "nt" else ("pwsh" if command.lstrip().startswith("& ") else "cmd")
    words = split(command, shell)
    return words[0] if words else None


def can_start(program: str, path_env: str | None = None) -> tuple[bool, str]:
    """``(ok, where)``: whether ``program`` resolves to an executable file (an absolute path is
    checked as is; a bare name is looked up on ``path_env``, default this process's PATH)."""
    if os.path.isabs(program) or os.sep in program or (os.altsep and os.altsep in program):
        ok = os.path.isfile(program) and os.access(program, os.X_OK)
        return ok, program
    found = shutil.which(program, path=path_env if path_env is not None else os.environ.get("PATH", ""))
    return (found is not None), (found or program)

