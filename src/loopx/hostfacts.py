"""The one table of agent-host facts: plain data per host, below the kernel, so the
guard, actors, the installer, presets, doctor and ``hooks --check`` all read the same row.

``HOSTS`` maps a host name to its row::

    {"aliases": (...),            # other names people type (claude -> claude-code)
     "markers": (...),            # environment variables the host sets in its shell and tool calls
     "home_var": str|None,        # the variable that moves the host's own folder (CODEX_HOME, ...)
     "home": str,                 # that folder when the variable is unset ("~/.codex", "{xdg}/opencode")
     "project_dir_var": str|None, # the variable the host reads as the project folder (or PWD)
     "hooks": {"install": "settings"|"plugin"|None, "protocol": str|None,
               "project": path, "user": path},   # the file loopx writes (hook settings or plugin)
     "hook_trust": str|None,      # "codex": hooks run only once trusted in the host's config
     "skills": {"project": path, "user": path},  # where loopx's skill folders go
     "doc": {"project": path, "user": path|None},  # the instruction file with loopx's marked block
     "extra": [(name, {"project": path, "user": path})],  # other whole files loopx owns
     "config": {"project": (...), "user": (...)},  # files whose change can turn loopx's hooks off
     "state": (...),              # folders the host writes while it runs (sandbox write list)
     "tools": {"tool": key, "input": key, "shell": (...), "edit": (...), "builtin": (...),
               "paths": (...), "dirs": (...)},   # "dirs": tool arguments that set the working directory
     "preset": {"argv": [...], "report": str|None, "modes": {mode: [...]|None},
                "retrying": ((pattern, n), ...)} | None,  # lines of a host that only retries
                                  # (runner.process.RetryWatch): stopped after n of them
     "usage_windows": bool}       # loopx can read the host's own usage windows

Path templates: ``{project}`` is the project folder (project scope), ``{home}`` the host's own
folder (``home_var`` or ``home``), ``~`` the user's home folder (the root of user scope), ``{xdg}``
``$XDG_CONFIG_HOME`` or ``~/.config``. Relative paths are under the scope's root.

A new host is one adapter module (behaviour: payload reading, answers) plus one row here.
This module imports nothing but ``os``: every hook call reads it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time (every hook call reads this module)
if TYPE_CHECKING:
    from typing import overload

SCOPES = ("project", "user")
SKILL_PREFIX = "loopx"  # loopx's bundled skills are named loopx, loopx-start, loopx-review, ...

HOSTS: dict[str, dict] = {
    "claude-code": {
        "aliases": ("claude",),
        "markers": ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT"),
        "home_var": "CLAUDE_CONFIG_DIR", "home": "~/.claude", "project_dir_var": "CLAUDE_PROJECT_DIR",
        "hooks": {"install": "settings", "protocol": "claude", "project": ".claude/settings.local.json",
                  "user": "{home}/settings.json"},
        "hook_trust": None,
        "skills": {"project": ".claude/skills", "user": "{home}/skills"},
        "doc": {"project": "CLAUDE.md", "user": "{home}/CLAUDE.md"},
        "extra": [],
        "config": {"project": (".claude/settings.json", ".claude/settings.local.json"),
                   "user": ("{home}/settings.json", "{home}/settings.local.json")},
        "state": ("{home}", "~/.claude.json", "~/.cache/claude", "~/.config/claude", "~/.local/share/claude",
                  "~/.local/state/claude"),
        "tools": {"tool": "tool_name", "input": "tool_input", "shell": ("Bash",),
                  "edit": ("Write", "Edit", "MultiEdit", "NotebookEdit"),
                  "builtin": ("Read", "Glob", "Grep", "LS", "WebFetch", "WebSearch", "TodoWrite", "TodoRead", "Task",
                              "Agent", "ExitPlanMode", "BashOutput", "KillShell", "KillBash", "Skill", "SlashCommand",
                              "ListMcpResourcesTool", "ReadMcpResourceTool"),
                  "paths": ("file_path", "notebook_path", "path"), "dirs": ()},
        "preset": {"argv": ["claude", "-p", "{packet}", "--output-format", "json"], "report": "claude-json",
                   # acceptEdits refuses every shell command headless: allow loopx's write-back
                   # commands and the goal's verify command ({loopx}, {verify}: filled in per turn;
                   # a pair whose value is empty is left out)
                   "modes": {"read-only": ["--permission-mode", "plan"],
                             "edit": ["--permission-mode", "acceptEdits", "--allowedTools", "Bash({loopx}:*)",
                                      "--allowedTools", "Bash({verify})"],
                             "full": ["--permission-mode", "bypassPermissions"]},
                   # bypassPermissions exits at once as root unless the host is told it is sandboxed
                   "root": {"full": "Claude Code refuses --permission-mode bypassPermissions as root: run loopx "
                                    "as a normal user, or, inside a container or VM that is the sandbox, set "
                                    "IS_SANDBOX=1", "env": "IS_SANDBOX"}},
        "usage_windows": True,
    },
    "codex": {
        "aliases": ("codex-cli",),
        "markers": ("CODEX_THREAD_ID", "CODEX_SANDBOX", "CODEX_SANDBOX_NETWORK_DISABLED"),
        "home_var": "CODEX_HOME", "home": "~/.codex", "project_dir_var": None,
        "hooks": {"install": "settings", "protocol": "claude", "project": ".codex/hooks.json",
                  "user": "{home}/hooks.json"},
        "hook_trust": "codex",
        "skills": {"project": ".agents/skills", "user": "~/.agents/skills"},
        "doc": {"project": "AGENTS.md", "user": "{home}/AGENTS.md"},
        "extra": [],
        "config": {"project": (".codex/hooks.json", ".codex/config.toml"),
                   "user": ("{home}/hooks.json", "{home}/config.toml")},
        "state": ("{home}",),
        "tools": {"tool": "tool_name", "input": "tool_input",
                  "shell": ("Bash", "bash", "shell", "local_shell", "exec_command", "container.exec", "unified_exec",
                            "Shell"),
                  "edit": ("apply_patch", "write_file", "edit"),
                  "builtin": ("read_file", "list_dir", "grep_files", "view_image", "update_plan", "web_search",
                              "write_stdin"),
                  "paths": ("file_path", "path"), "dirs": ("workdir", "cwd")},
        # with no network codex exec prints "Reconnecting... waiting for network" and waits for ever
        "preset": {"argv": ["codex", "exec", "--json", "-"], "report": "codex-jsonl",
                   "retrying": (("waiting for network", 1),),
                   "modes": {"read-only": ["--sandbox", "read-only"],
                             "edit": ["--sandbox", "workspace-write"],
                             "full": ["--sandbox", "danger-full-access"]}},
        "usage_windows": True,
    },
    "cursor": {
        "aliases": ("cursor-agent",),
        "markers": ("CURSOR_AGENT", "CURSOR_TRACE_ID"),
        "home_var": None, "home": "~/.cursor", "project_dir_var": None,
        "hooks": {"install": "settings", "protocol": "cursor", "project": ".cursor/hooks.json",
                  "user": "{home}/hooks.json"},
        "hook_trust": None,
        "skills": {"project": ".cursor/skills", "user": "{home}/skills"},
        "doc": {"project": "AGENTS.md", "user": None},
        "extra": [("cursor-rule", {"project": ".cursor/rules/loopx.mdc", "user": None})],
        "config": {"project": (".cursor/hooks.json",), "user": ("{home}/hooks.json",)},
        "state": ("{home}", "~/.config/cursor", "~/.local/share/cursor-agent"),
        "tools": {"tool": "tool_name", "input": "tool_input", "shell": (), "edit": (), "builtin": (),
                  "paths": (), "dirs": ()},
        "preset": {"argv": ["cursor-agent", "-p", "{packet}", "--output-format", "json"], "report": "cursor-json",
                   # cursor-agent has no read-only switch; in print mode it may edit files, --force
                   # also runs shell commands without asking
                   "modes": {"read-only": None, "edit": [], "full": ["--force"]}},
        "usage_windows": False,
    },
    "gemini": {
        "aliases": ("gemini-cli",),
        "markers": ("GEMINI_CLI",),
        "home_var": None, "home": "~/.gemini", "project_dir_var": "GEMINI_PROJECT_DIR",
        "hooks": {"install": "settings", "protocol": "gemini", "project": ".gemini/settings.json",
                  "user": "{home}/settings.json"},
        "hook_trust": None,
        "skills": {"project": ".agents/skills", "user": "~/.agents/skills"},
        "doc": {"project": "GEMINI.md", "user": "{home}/GEMINI.md"},
        "extra": [("gemini-command", {"project": ".gemini/commands/loopx.toml",
                                      "user": "{home}/commands/loopx.toml"})],
        "config": {"project": (".gemini/settings.json",),
                   "user": ("{home}/settings.json", "{home}/trustedFolders.json")},
        "state": ("{home}",),
        "tools": {"tool": "tool_name", "input": "tool_input", "shell": ("run_shell_command",),
                  "edit": ("write_file", "replace"),
                  "builtin": ("read_file", "read_many_files", "glob", "grep_search", "search_file_content",
                              "list_directory", "google_web_search", "web_fetch", "write_todos", "ask_user",
                              "activate_skill", "get_internal_docs", "enter_plan_mode", "exit_plan_mode",
                              "save_memory", "list_mcp_resources", "read_mcp_resource", "update_topic",
                              "complete_task", "tracker_create_task", "tracker_update_task", "tracker_get_task",
                              "tracker_list_tasks", "tracker_add_dependency", "tracker_visualize"),
                  "paths": ("file_path", "path"), "dirs": ("dir_path", "directory")},
        "preset": {"argv": ["gemini", "-p", "{packet}", "--output-format", "json"], "report": "gemini-json",
                   # endpoint down or 429: "Attempt N failed [with status 429]. Retrying with backoff..."
                   # on stderr, for minutes (it ignores retry-after); the third attempt is enough
                   "retrying": ((r"attempt (\d+) failed\b.*retrying with backoff", 3),),
                   # auto_edit gives a headless model no shell unless a command is allowed:
                   # loopx's write-back commands and the goal's verify command are
                   "modes": {"read-only": ["--approval-mode", "plan"],
                             "edit": ["--approval-mode", "auto_edit", "--allowed-tools", "run_shell_command({loopx})",
                                      "--allowed-tools", "run_shell_command({verify})"],
                             "full": ["--approval-mode", "yolo"]}},
        "usage_windows": False,
    },
    "opencode": {
        "aliases": ("opencode-ai",),
        "markers": ("OPENCODE",),
        "home_var": None, "home": "{xdg}/opencode", "project_dir_var": "PWD",
        "hooks": {"install": "plugin", "protocol": "opencode-plugin", "project": ".opencode/plugins/loopx-guard.js",
                  "user": "{home}/plugins/loopx-guard.js"},
        "hook_trust": None,
        "skills": {"project": ".agents/skills", "user": "~/.agents/skills"},
        "doc": {"project": "AGENTS.md", "user": "{home}/AGENTS.md"},
        "extra": [],
        "config": {"project": (".opencode/plugins/loopx-guard.js",), "user": ("{home}/plugins/loopx-guard.js",)},
        "state": ("{home}", "~/.local/share/opencode", "~/.cache/opencode", "~/.local/state/opencode"),
        "tools": {"tool": "tool_name", "input": "tool_input", "shell": ("bash",),
                  "edit": ("edit", "write", "multiedit", "patch"),
                  "builtin": ("read", "glob", "grep", "list", "webfetch", "websearch", "todowrite", "todoread", "task",
                              "skill", "question", "codesearch", "lsp"),
                  "paths": ("filePath", "file_path", "path"), "dirs": ("workdir",)},
        # --title: a named session makes no title request (its usage is in no event: the turn's
        # usage would miss it); --print-logs at WARN: its model errors reach the output, where
        # the runner sees it only retrying (it retries an endpoint that is down for ever, silently)
        "preset": {"argv": ["opencode", "run", "--format", "json", "--title", "loopx turn", "--print-logs",
                            "--log-level", "WARN", "{packet}"], "report": "opencode-jsonl",
                   "retrying": ((r'message="stream error"', 3),),
                   # opencode's permissions live in its own config file (opencode.json "permission"),
                   # not on the command line: every mode runs with that configuration
                   "modes": {"read-only": None, "edit": [], "full": []}},
        "usage_windows": False,
    },
    "pi": {
        "aliases": ("pi-coding-agent",),
        "markers": ("PI_CODING_AGENT",),
        "home_var": "PI_CODING_AGENT_DIR", "home": "~/.pi/agent", "project_dir_var": "PWD",
        "hooks": {"install": "plugin", "protocol": "pi-extension", "project": ".pi/extensions/loopx-guard.ts",
                  "user": "{home}/extensions/loopx-guard.ts"},
        "hook_trust": None,
        "skills": {"project": ".agents/skills", "user": "{home}/skills"},
        "doc": {"project": "AGENTS.md", "user": "{home}/AGENTS.md"},
        "extra": [],
        "config": {"project": (".pi/extensions/loopx-guard.ts", ".pi/settings.json"),
                   "user": ("{home}/extensions/loopx-guard.ts", "{home}/settings.json")},
        "state": ("{home}",),
        "tools": {"tool": "tool_name", "input": "tool_input", "shell": ("bash",), "edit": ("write", "edit"),
                  "builtin": ("read", "grep", "find", "ls"), "paths": ("path", "file_path"), "dirs": ()},
        # JSON events on stdout (usage per assistant message); the packet on piped stdin
        "preset": {"argv": ["pi", "--mode", "json", "-p"], "report": "pi-jsonl",
                   "modes": {"read-only": None, "edit": [], "full": []}},
        "usage_windows": False,
    },
    "generic": {
        "aliases": (),
        "markers": ("LOOPX_AGENT",),
        "home_var": None, "home": "~", "project_dir_var": None,
        "hooks": {"install": None, "protocol": "generic", "project": None, "user": None},
        "hook_trust": None,
        "skills": {"project": ".agents/skills", "user": "~/.agents/skills"},
        "doc": {"project": "AGENTS.md", "user": None},
        "extra": [],
        "config": {"project": (), "user": ()},
        "state": (),
        "tools": {"tool": "tool_name", "input": "tool_input", "shell": ("Bash", "bash", "shell", "run_shell_command"),
                  "edit": ("Write", "Edit", "MultiEdit", "write", "edit", "write_file", "replace"),
                  "builtin": ("Read", "read"), "paths": (), "dirs": ("cwd", "workdir", "dir_path")},
        "preset": None,
        "usage_windows": False,
    },
}


# ------------------------------------------------------------------ questions over the table
def names() -> list[str]:
    """Every host in the table, in table order (``generic`` last)."""
    return list(HOSTS)


def hook_hosts() -> list[str]:
    """The hosts loopx installs hooks or a plugin for."""
    return [h for h, r in HOSTS.items() if r["hooks"]["install"]]


def agent_hosts() -> list[str]:
    """The real agent hosts (every row but ``generic``)."""
    return [h for h in HOSTS if h != "generic"]


def window_hosts() -> list[str]:
    """The hosts whose usage windows loopx can read."""
    return [h for h, r in HOSTS.items() if r["usage_windows"]]


def canonical(name: str | None) -> str | None:
    """``name`` as a host of the table (an alias resolved), or None."""
    if name in HOSTS:
        return name
    for h, r in HOSTS.items():
        if name in r["aliases"]:
            return h
    return None


def aliases() -> dict[str, str]:
    """``{alias: host}`` for every alias in the table."""
    return {a: h for h, r in HOSTS.items() for a in r["aliases"]}


def markers() -> tuple[str, ...]:
    """Every agent marker of every host (``LOOPX_AGENT`` first), without repeats."""
    out: list[str] = ["LOOPX_AGENT"]
    for r in HOSTS.values():
        out.extend(m for m in r["markers"] if m not in out)
    return tuple(out)


def host_home(host: str, user_home: str | None = None, default: bool = False) -> str:
    """The host's own folder: ``$home_var`` when set (unless ``default``), else the row's ``home``
    under ``user_home`` (default the user's home folder). Raises KeyError for an unknown host."""
    r = HOSTS[host]
    if r["home_var"] and os.environ.get(r["home_var"]) and not default:
        return os.environ[r["home_var"]]
    return _expand(r["home"], "", user_home or os.path.expanduser("~"), None)


def _expand(template: str, root: str, user_home: str, home: str | None) -> str:
    if template.startswith("{home}"):
        return os.path.join(home or "", template[len("{home}"):].lstrip("/"))
    if template.startswith("{xdg}"):
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(user_home, ".config")
        return os.path.join(xdg, template[len("{xdg}"):].lstrip("/"))
    if template == "~" or template.startswith("~/"):
        return os.path.join(user_home, template[2:])
    return os.path.join(root, template)


if TYPE_CHECKING:  # what ``resolve`` returns: a str for a str template, None for None
    @overload
    def resolve(host: str, template: str, scope: str, root: str, default: bool = ...) -> str: ...
    @overload
    def resolve(host: str, template: None, scope: str, root: str, default: bool = ...) -> None: ...
    @overload
    def resolve(host: str, template: str | None, scope: str, root: str, default: bool = ...) -> str | None: ...


def resolve(host: str, template: str | None, scope: str, root: str, default: bool = False) -> str | None:
    """``template`` of ``host``'s row as a path: ``root`` is the project folder (project scope) or
    the user's home folder (user scope); ``default``: ``{home}`` as if ``home_var`` were unset.
    None for a None template. Raises KeyError for an unknown host."""
    if template is None:
        return None
    user_home = root if scope == "user" else os.path.expanduser("~")
    home = host_home(host, user_home, default) if "{home}" in template else None
    return os.path.normpath(_expand(template, root, user_home, home))


def hook_file(host: str, scope: str, root: str) -> str | None:
    """The file loopx writes for ``host``'s hooks in ``scope`` (settings file or plugin), or None."""
    return resolve(host, HOSTS[host]["hooks"][scope], scope, root)


def skills_dir(host: str, scope: str, root: str) -> str:
    return resolve(host, HOSTS[host]["skills"][scope], scope, root)


def doc_file(host: str, scope: str, root: str) -> str | None:
    """The instruction file that holds loopx's marked block for ``host`` in ``scope``, or None."""
    return resolve(host, HOSTS[host]["doc"][scope], scope, root)


def extra_files(host: str, scope: str, root: str) -> list[tuple[str, str]]:
    """``[(name, path)]``: the other whole files loopx owns for ``host`` in ``scope``."""
    return [(name, resolve(host, paths[scope], scope, root)) for name, paths in HOSTS[host]["extra"]
            if paths.get(scope)]


def _every(templates_of, scope: str, root: str, all_homes: bool) -> list[str]:
    out: list[str] = []
    for h, r in HOSTS.items():
        for tpl in templates_of(r):
            for default in ((False, True) if all_homes else (False,)):
                p = resolve(h, tpl, scope, root, default)
                if p and p not in out:
                    out.append(p)
    return out


def owned_files(scope: str, root: str, all_homes: bool = False) -> list[str]:
    """Every whole file loopx owns for any host in ``scope`` (hook settings and plugins, extra
    files, settings that can switch the hooks off), absolute, without repeats; ``all_homes``: also
    as if no ``home_var`` were set (a later session may not set it). loopx's skill folders are in
    ``skill_dirs``, the instruction files in ``block_files``."""
    return _every(lambda r: [r["hooks"][scope], *(paths.get(scope) for _, paths in r["extra"]), *r["config"][scope]],
                  scope, root, all_homes)


def skill_dirs(scope: str, root: str, all_homes: bool = False) -> list[str]:
    """Every folder loopx's skill folders (``loopx``, ``loopx-*``) go into, in ``scope``."""
    return _every(lambda r: [r["skills"][scope]], scope, root, all_homes)


def block_files(scope: str, root: str, all_homes: bool = False) -> list[str]:
    """Every instruction file loopx keeps a marked block in, in ``scope`` (the text around the block
    is the user's)."""
    return _every(lambda r: [r["doc"][scope]], scope, root, all_homes)


def state_dirs(host: str, user_home: str | None = None) -> list[str]:
    """The folders ``host`` writes while it runs (its own home, caches): a sandbox's write list."""
    uh = user_home or os.path.expanduser("~")
    return [resolve(host, t, "user", uh) for t in HOSTS[host]["state"]]


def install_dirs(host: str, scope: str, root: str) -> list[str]:
    """The folders loopx installs into for ``host`` in ``scope`` (hook file, skills, extra files,
    instruction file): a sandbox keeps them read-only for the agent."""
    paths = [hook_file(host, scope, root), skills_dir(host, scope, root), doc_file(host, scope, root),
             *(p for _, p in extra_files(host, scope, root))]
    out: list[str] = []
    for p in paths:
        d = p if p and p == skills_dir(host, scope, root) else (os.path.dirname(p) if p else None)
        if d and d not in out:
            out.append(d)
    return out


def dir_args(host: str) -> tuple[str, ...]:
    """The tool arguments of ``host`` that set where a command runs (``workdir``, ``dir_path``)."""
    r = HOSTS.get(host) or HOSTS["generic"]
    return tuple(r["tools"]["dirs"])
