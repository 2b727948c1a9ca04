"""Hook command lines for POSIX sh, cmd.exe and PowerShell 7 (the generated strings; Windows
itself is not needed to check the quoting rules), the absolute loopx path, and the payload table:
which tool calls each host's adapter reads as commands or edits."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from loopx.hosts import adapters, cmdline
from loopx.hosts.adapters import base
from loopx.resources import loopx_executable

ARGVS = [
    [r"C:\Users\dev\.venv\Scripts\loopx.exe", "hook", "pre-tool", "--host", "gemini"],
    [r"C:\Program Files\Python 3.12\Scripts\loopx.exe", "hook", "stop", "--host", "cursor", "--max-continuations", "3"],
    [r"C:\Users\O'Brien\AppData\Local\loopx env\loopx.exe", "hook", "pre-tool", "--host", "codex"],
    [r"C:\tools\a&b %PATH% (x)\loopx.exe", "hook", "session-start", "--host", "claude-code"],
    ["/home/dev/my venv/bin/loopx", "hook", "pre-tool", "--host", "claude-code"],
    ["/usr/bin/python3", "-m", "loopx", "hook", "pre-tool", "--host", "pi"],
    [r"D:\données\loopx.exe", "hook", "pre-tool", "--host", "generic"],
]


@pytest.mark.parametrize("argv", ARGVS)
@pytest.mark.parametrize("shell", cmdline.SHELLS)
def test_rendered_command_lines_give_the_program_back_its_argv(argv, shell):
    if shell == "cmd" and any("%" in a for a in argv):
        with pytest.raises(ValueError, match="cmd.exe"):
            cmdline.render(argv, shell)  # cmd.exe would expand %PATH% even inside quotes
        return
    line = cmdline.render(argv, shell)
    assert cmdline.split(line, shell) == argv
    assert "\n" not in line


@pytest.mark.parametrize("argv", ARGVS)
def test_cmd_quoting_follows_the_msvc_rules(argv):
    if any("%" in a for a in argv):
        return
    line = cmdline.render(argv, "cmd")
    if " " in argv[0]:
        assert line.startswith('"') and line.index('"', 1) > len(argv[0]) - 2
    assert cmdline.split(line, "cmd") == argv


@pytest.mark.parametrize("argv", ARGVS)
def test_pwsh_uses_the_call_operator_and_single_quotes(argv):
    line = cmdline.render(argv, "pwsh")
    assert line.startswith("& ")
    if " " in argv[0] or "'" in argv[0] or "&" in argv[0]:
        assert line[2] == "'"  # a quoted program path is run, not echoed as a string
    assert '"' not in line  # no expansion of $ or backticks inside double quotes


def test_plain_paths_need_no_quotes_in_any_shell():
    argv = [r"C:\Users\dev\.venv\Scripts\loopx.exe", "hook", "pre-tool", "--host", "gemini"]
    assert cmdline.render(argv, "cmd") == " ".join(argv)
    assert cmdline.render(argv, "pwsh") == "& " + " ".join(argv)


@pytest.mark.skipif(os.name != "posix", reason="runs sh")
def test_posix_line_runs_through_sh(tmp_path):
    prog = tmp_path / "it's a dir" / "echo args"
    prog.parent.mkdir()
    prog.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '[%s]' \"$a\"; done\n")
    prog.chmod(0o755)
    line = cmdline.render([str(prog), "hook", "a b", "$HOME", "`x`"], "posix")
    out = subprocess.run(line, shell=True, capture_output=True, text=True).stdout
    assert out == "[hook][a b][$HOME][`x`]"


def test_loopx_executable_is_absolute_and_runs():
    exe = loopx_executable()
    argv = cmdline.loopx_argv()
    assert os.path.isabs(argv[0])
    assert cmdline.split(exe, cmdline.default_shell()) == argv
    assert len(argv) == 1 and os.access(argv[0], os.X_OK) or argv[1:] == ["-m", "loopx"]
    proc = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0 and "loopx" in proc.stdout


def test_can_start_reports_missing_programs(tmp_path):
    assert cmdline.can_start(str(tmp_path / "nope")) == (False, str(tmp_path / "nope"))
    ok, where = cmdline.can_start("sh", "/usr/bin:/bin")
    assert ok and os.path.isabs(where)
    assert cmdline.can_start("loopx", str(tmp_path))[0] is False
    assert cmdline.program_of(shlex.join(["/a b/loopx", "hook"])) == "/a b/loopx"


# ------------------------------------------------------------------ the payload table
def calls(host: str, payload: dict):
    mod = adapters.get(host)
    return mod.tool_call(payload) if hasattr(mod, "tool_call") else base.tool_call(payload, mod.SHAPE)


@pytest.mark.parametrize("host,payload,commands,paths", [
    ("claude-code", {"tool_name": "mcp__filesystem__write_file", "tool_input": {"path": "/p/.loopx/x"}}, [], ["/p/.loopx/x"]),
    ("claude-code", {"tool_name": "mcp__fs__edit", "tool_input": {"filePath": "a.py", "edits": [{"path": "b.py"}]}},
     [], ["a.py", "b.py"]),
    ("claude-code", {"tool_name": "mcp__fs__move", "tool_input": {"source_path": "a", "destination": "b"}}, [], ["b", "a"]),
    ("claude-code", {"tool_name": "mcp__x__write", "tool_input": '{"filename": "c.txt"}'}, [], ["c.txt"]),
    ("claude-code", {"tool_name": "mcp__x__files", "tool_input": {"paths": ["d", "e"]}}, [], ["d", "e"]),
    ("claude-code", {"tool_name": "Read", "tool_input": {"file_path": "/p/.loopx/events.jsonl"}}, [], []),
    ("claude-code", {"tool_name": "mcp__desktop__execute_command", "tool_input": {"command": "git push origin main"}},
     ["git push origin main"], []),
    ("claude-code", {"tool_name": "mcp__fs__write", "tool_input": {"uri": "file:///p/.loopx/a%20b"}}, [], ["/p/.loopx/a b"]),
    ("claude-code", {"tool_name": "bash", "tool_input": {"command": "gh pr merge 1"}}, ["gh pr merge 1"], []),
    ("claude-code", {"tool_name": "Bash", "tool_input": {"command": "git push"}}, ["git push"], []),
    ("gemini", {"tool_name": "run_shell_command", "tool_input": {"command": "npm publish"}}, ["npm publish"], []),
    ("gemini", {"tool_name": "replace", "tool_input": {"file_path": "src/a.py"}}, [], ["src/a.py"]),
    ("gemini", {"tool_name": "read_file", "tool_input": {"file_path": ".loopx/x"}}, [], []),
    ("gemini", {"tool_name": "mcp_fs_write_file", "tool_input": {"path": ".loopx/x"}}, [], [".loopx/x"]),
    ("opencode", {"tool_name": "apply_patch", "tool_input": {"patchText": "*** Begin Patch\n*** Add File: z.py\n"}},
     [], ["z.py"]),
    ("opencode", {"tool_name": "write", "tool_input": {"filePath": "w.py"}}, [], ["w.py"]),
    ("pi", {"tool_name": "bash", "tool_input": {"command": "git push origin main"}}, ["git push origin main"], []),
    ("pi", {"tool_name": "edit", "tool_input": {"path": "src/a.py", "edits": [{"oldText": "a", "newText": "b"}]}},
     [], ["src/a.py"]),
    ("pi", {"tool_name": "read", "tool_input": {"path": ".loopx/events.jsonl"}}, [], []),
    ("cursor", {"hook_event_name": "beforeShellExecution", "command": "git push"}, ["git push"], []),
    ("cursor", {"hook_event_name": "beforeMCPExecution", "tool_name": "write_file", "tool_input": '{"path": "x"}',
                "command": "npx server"}, [], ["x"]),
    ("cursor", {"hook_event_name": "beforeReadFile", "file_path": "x"}, [], []),
    ("generic", {"command": "git push", "paths": ["a"]}, ["git push"], ["a"]),
    ("codex", {"tool_name": "shell", "tool_input": {"command": ["bash", "-lc", "git push"]}},
     ["bash -lc 'git push'"], []),
])
def test_payload_table(host, payload, commands, paths):
    assert calls(host, payload) == (commands, paths)


def test_every_adapter_has_the_table_fields():
    for host in adapters.TABLE:
        mod = adapters.get(host)
        assert host == mod.NAME and mod.KIND in ("settings", "plugin", "none") and mod.VERIFIED
        assert {"tool", "input", "shell", "edit", "builtin", "paths"} <= set(mod.SHAPE)
        response, code, _ = mod.deny("loopx: no.")
        assert code in (0, 2) and response


@pytest.mark.parametrize("host", ["claude-code", "codex", "cursor", "gemini"])
@pytest.mark.parametrize("exe", [r"C:\Program Files\loopx env\Scripts\loopx.exe", r"C:\Users\dev\.venv\Scripts\loopx.exe"])
def test_windows_hook_entries_are_quoted_for_the_hosts_shell(host, exe):
    from loopx.hosts import hookconf

    shell = adapters.get(host).WINDOWS_SHELL
    want = hookconf.wanted(host, [exe], cap=3, windows=True)
    commands = [h["command"] for entries in want.values() for e in entries for h in [e, *e.get("hooks", [])]
                if "command" in h]
    assert commands
    for command in commands:
        words = cmdline.split(command, shell)
        assert words[0] == exe and words[1] == "hook" and words[words.index("--host") + 1] == host
        if shell == "pwsh":
            assert command.startswith("& ")


def test_a_loopx_path_cmd_cannot_quote_is_a_clear_state_error():
    from loopx.errors import StateError
    from loopx.hosts import hookconf

    with pytest.raises(ValueError):
        cmdline.hook_command("cmd", ["hook"], [r"C:\100% done\loopx.exe"], windows=True)
    mod = adapters.get("codex")
    old = mod.WINDOWS_SHELL
    try:
        mod.WINDOWS_SHELL = "cmd"
        with pytest.raises(StateError, match="cannot write a codex hook"):
            hookconf.wanted("codex", [r"C:\100% done\loopx.exe"], windows=True)
    finally:
        mod.WINDOWS_SHELL = old


@pytest.mark.skipif(os.name != "posix", reason="POSIX quoting of the path")
def test_loopx_argv_reads_quoted_and_unquoted_paths(tmp_path, monkeypatch):
    import loopx.resources as res

    exe = tmp_path / "my venv" / "bin" / "loopx"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    for text in (str(exe), shlex.quote(str(exe))):
        monkeypatch.setattr(res, "loopx_executable", lambda t=text: t)
        assert cmdline.loopx_argv() == [str(exe)]
    py = tmp_path / "py env" / "python"
    py.parent.mkdir()
    py.write_text("")
    for text in (f"{py} -m loopx", f"{shlex.quote(str(py))} -m loopx"):
        monkeypatch.setattr(res, "loopx_executable", lambda t=text: t)
        assert cmdline.loopx_argv() == [str(py), "-m", "loopx"]
