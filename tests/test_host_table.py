"""The one table of host facts (issue 23, items 1 and 2): every file loopx installs for a host is a
governance path of the guard (the plugin and extension files included), loopx's marked block in
an instruction file is too while the rest of the file stays the agent's, the host's own
working-directory argument is read, and a host added as one adapter module plus one table row
installs, checks, guards and runs."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from conftest import run_loopx
from loopx import hostfacts
from loopx.guard import verdicts
from loopx.kernel.storage.store import Store

POSIX = os.name == "posix"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    return h


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


@pytest.fixture
def repo(home, goal, project, cli):
    """``project`` as a git repo on branch ``work`` with a worktree ``wt`` on ``main``, a bare
    remote, goal g1 protecting merge."""
    remote = project.parent / "remote.git"
    git(project.parent, "init", "-q", "--bare", str(remote))
    git(project, "init", "-q", "-b", "main")
    for k, v in (("user.email", "t@example.com"), ("user.name", "t"), ("commit.gpgsign", "false")):
        git(project, "config", k, v)
    (project / "README.md").write_text("hi\n", encoding="utf-8")
    git(project, "add", "README.md")
    git(project, "commit", "-q", "-m", "init")
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "-u", "origin", "main")
    git(project, "checkout", "-q", "-b", "work")
    git(project, "worktree", "add", "-q", str(project / "wt"), "main")
    return project


def state_of(project):
    return Store.open(str(project)).load()


def verdict(project, **kw):
    return verdicts.evaluate(state_of(project), project_dir=str(project), cwd=kw.pop("cwd", str(project)), **kw)


# ------------------------------------------------------------------ item 1: governance paths from the table
def test_every_file_loopx_installs_is_a_governance_path(home, goal, project, cli):
    for scope in ("project", "user"):
        assert cli("workflow-skills", "--install", "--scope", scope).code == 0
    assert cli("hooks", "--install", "--host", "all").code == 0
    os.chdir(home)  # outside the project: user-scope hooks for another project's sessions
    assert cli("hooks", "--install", "--host", "all", "--scope", "user").code == 0
    os.chdir(project)
    from loopx.hosts import files

    installed = sorted(files.load_manifest()["files"])
    assert any(p.endswith("loopx-guard.js") for p in installed) and any(p.endswith("loopx-guard.ts") for p in installed)
    blocks = {p for p in installed if Path(p).name in ("AGENTS.md", "CLAUDE.md", "GEMINI.md")}
    assert blocks and len(installed) > 30
    for path in installed:
        if path in blocks:
            continue
        for v in (verdict(project, paths=[path]),
                  verdict(project, commands=[f"rm -f {path}"]),
                  verdict(project, commands=[f"mv {path} {project}/x"])):
            assert not v["allow"] and v["kind"] == "governance", (path, v)
    # the folders too: rm -rf of the plugin and extension folders, of loopx's skills
    for rel in (".opencode", ".opencode/plugins", ".pi/extensions", ".agents/skills/loopx", ".claude/skills",
                ".cursor/rules"):
        v = verdict(project, commands=[f"rm -rf {rel}"])
        assert not v["allow"] and v["kind"] == "governance", (rel, v)


def test_loopx_block_is_guarded_and_the_rest_of_the_file_and_user_skills_stay_editable(home, goal, project, cli):
    assert cli("workflow-skills", "--install", "--host", "codex").code == 0
    doc = project / "AGENTS.md"
    doc.write_text("# My project\nRun make test.\n\n" + doc.read_text(encoding="utf-8"), encoding="utf-8")
    block_line = next(ln for ln in doc.read_text(encoding="utf-8").splitlines() if ln.startswith("- Never edit"))
    text = doc.read_text(encoding="utf-8")

    def edit(**ti):
        from loopx.hosts import entry

        payload = {"tool_name": "Edit", "tool_input": {"file_path": str(doc), **ti}, "cwd": str(project)}
        sys.stdin = io.StringIO(json.dumps(payload))
        try:
            _, info = entry.dispatch("pre-tool", "claude-code", sys.stdin, project=None, agent=None, goal_id=None,
                                     cap=8)
        finally:
            sys.stdin = sys.__stdin__
        return info

    assert edit(old_string="Run make test.", new_string="Run make check.")["allow"]
    denied = edit(old_string=block_line, new_string="- Edit .loopx/ as you like.")
    assert not denied["allow"] and denied["kind"] == "governance" and "marked block" in denied["reason"]
    assert not edit(old_string="<!-- loopx:end -->", new_string="")["allow"]
    whole = verdict(project, paths=[str(doc)], texts={"removed": [], "content": ["# My project\n"], "deleted": False})
    assert not whole["allow"]
    kept = verdict(project, paths=[str(doc)], texts={"removed": [], "content": [text + "more\n"], "deleted": False})
    assert kept["allow"], kept
    assert not verdict(project, commands=[f"rm {doc}"])["allow"]
    patch = f"*** Begin Patch\n*** Update File: AGENTS.md\n@@\n-{block_line}\n+- nothing\n*** End Patch\n"
    assert not verdict(project, commands=[f"apply_patch <<'EOF'\n{patch}EOF"])["allow"]
    ok_patch = "*** Begin Patch\n*** Update File: AGENTS.md\n@@\n-Run make test.\n+Run make check.\n*** End Patch\n"
    assert verdict(project, commands=[f"apply_patch <<'EOF'\n{ok_patch}EOF"])["allow"]
    mine = project / ".agents" / "skills" / "mine" / "SKILL.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("---\nname: mine\n---\n", encoding="utf-8")
    assert verdict(project, paths=[str(mine)])["allow"]
    assert verdict(project, commands=["rm -rf .agents/skills/mine"])["allow"]
    v = verdict(project, paths=[str(project / ".agents" / "skills" / "loopx" / "SKILL.md")])
    assert not v["allow"] and v["kind"] == "governance"


@pytest.mark.skipif(not POSIX, reason="shell payloads")
@pytest.mark.parametrize("host, rel, payload", [
    ("opencode", ".opencode/plugins/loopx-guard.js", {"tool_name": "bash", "tool_input": {"command": "CMD"}}),
    ("pi", ".pi/extensions/loopx-guard.ts", {"tool_name": "bash", "tool_input": {"command": "CMD"}}),
])
def test_an_agent_cannot_delete_its_own_guard(home, goal, project, cli, host, rel, payload):
    assert cli("hooks", "--install", "--host", host).code == 0
    assert (project / rel).is_file()
    for cmd in (f"rm -f {rel}", f"cd {os.path.dirname(rel)} && rm -f {os.path.basename(rel)}",
                f"mv {rel} /tmp/x.js", f"rm -rf {rel.split('/')[0]}"):
        body = json.loads(json.dumps(payload).replace("CMD", cmd.replace('"', '\\"')))
        body["cwd"] = str(project)
        r = run_loopx(["hook", "pre-tool", "--host", host], cwd=project, input=json.dumps(body))
        assert r.code == 2 and json.loads(r.out)["decision"] == "deny", (cmd, r.out, r.err)
    assert (project / rel).is_file()


def test_pi_agent_marker_is_known():
    from loopx.kernel.storage import actors

    assert "PI_CODING_AGENT" in actors.AGENT_ENV_MARKERS
    assert set(actors.AGENT_ENV_MARKERS) >= {m for r in hostfacts.HOSTS.values() for m in r["markers"]}


def test_pi_marker_stops_gate_approve(goal, project):
    r = run_loopx(["gate", "open", "--goal-id", goal, "--kind", "merge", "--question", "May I?"], cwd=project)
    assert r.code == 0, r.err
    gate = next(iter(state_of(project)["gates"]))
    r = run_loopx(["gate", "approve", gate, "--confirm", gate], cwd=project, env={"PI_CODING_AGENT": "true"})
    assert r.code != 0
    assert state_of(project)["gates"][gate]["status"] == "pending"


# ------------------------------------------------------------------ item 2: the host's working-directory argument
@pytest.mark.skipif(not POSIX, reason="git worktrees and shell payloads")
@pytest.mark.parametrize("host, tool, key", [("gemini", "run_shell_command", "dir_path"), ("opencode", "bash", "workdir"),
                                             ("codex", "exec_command", "workdir")])
def test_the_hosts_workdir_argument_is_where_the_command_runs(repo, host, tool, key):
    from loopx.hosts import entry

    def ask(command, where):
        payload = {"tool_name": tool, "tool_input": {"command": command, key: where}, "cwd": str(repo)}
        return entry.pre_tool(payload, host)[1]

    assert ask("git push", ".")["allow"]  # branch work is not protected
    v = ask("git push", "wt")  # the worktree on main
    assert not v["allow"] and v["kind"] == "merge", v
    assert not ask("git push", str(repo / "wt"))["allow"]
    v = ask("echo X >> events.jsonl", ".loopx")
    assert not v["allow"] and ".loopx" in v["reason"], v
    assert ask("echo X >> notes.txt", "wt")["allow"]


# ------------------------------------------------------------------ a new host: one module, one row
ACME_ROW = {
    "aliases": ("acme-cli",), "markers": ("ACME_AGENT",), "home_var": "ACME_HOME", "home": "~/.acme",
    "project_dir_var": "ACME_PROJECT",
    "hooks": {"install": "settings", "protocol": "claude", "project": ".acme/hooks.json", "user": "{home}/hooks.json"},
    "hook_trust": None,
    "skills": {"project": ".acme/skills", "user": "{home}/skills"},
    "doc": {"project": "ACME.md", "user": "{home}/ACME.md"},
    "extra": [], "config": {"project": (".acme/hooks.json",), "user": ("{home}/hooks.json",)}, "state": ("{home}",),
    "tools": {"tool": "tool", "input": "args", "shell": ("sh",), "edit": ("put",), "builtin": ("look",),
              "paths": ("file",), "dirs": ("wd",)},
    "preset": {"argv": ["acme", "--quiet"], "report": None, "modes": {"read-only": None, "edit": [], "full": []}},
    "usage_windows": False,
}


def acme_module():
    from loopx.hosts.adapters import base

    mod = types.ModuleType("loopx.hosts.adapters.acme")
    mod.NAME, mod.KIND, mod.WINDOWS_SHELL, mod.VERIFIED = "acme", base.kind("acme"), "posix", "a test host"
    mod.SHAPE = base.shape("acme")
    mod.deny = base.decision_deny
    mod.allow = lambda: ({"decision": "allow"}, 0, "")
    mod.cont = lambda text: {"decision": "continue", "reason": text}
    mod.let_stop = lambda: {}
    mod.context = lambda text: {"additionalContext": text}
    mod.config_path = lambda scope, root: base.hook_file("acme", scope, root)

    def wanted(cmd, cap_arg, cap=8):
        return {"PreTool": [{"hooks": [{"type": "command", "command": cmd("pre-tool")}]}],
                "Stop": [{"hooks": [{"type": "command", "command": cmd("stop", cap_arg)}]}]}

    mod.wanted = wanted
    return mod


@pytest.mark.skipif(not POSIX, reason="a fake host executable")
def test_a_host_added_as_one_module_and_one_row_installs_checks_guards_and_runs(repo, cli, monkeypatch, tmp_path):
    monkeypatch.setitem(hostfacts.HOSTS, "acme", ACME_ROW)
    monkeypatch.setitem(sys.modules, "loopx.hosts.adapters.acme", acme_module())
    # installs and checks
    r = cli("hooks", "--install", "--host", "acme", json=True)
    assert r.code == 0, r.err
    assert (repo / ".acme" / "hooks.json").is_file()
    r = cli("hooks", "--check", "--host", "acme-cli", json=True)  # the alias from the row
    assert r.code == 0 and r.data["hooks"][0]["status"] == "current", r.out
    r = cli("workflow-skills", "--install", "--host", "acme", json=True)
    assert r.code == 0, r.err
    assert (repo / ".acme" / "skills" / "loopx" / "SKILL.md").is_file() and "loopx:begin" in (repo / "ACME.md").read_text()
    r = cli("doctor", "--json")
    assert next(c for c in r.data["checks"] if c["id"] == "hooks.project.acme")["status"] == "ok"
    # guards: a push to main, through its own working-directory argument, and its own files
    from loopx.hosts import entry

    def ask(args, tool="sh"):
        return entry.pre_tool({"tool": tool, "args": args, "cwd": str(repo)}, "acme")[1]

    assert not ask({"cmd": "git push origin main"})["allow"]
    assert not ask({"cmd": "git push", "wd": "wt"})["allow"]
    assert ask({"cmd": "git push"})["allow"]
    for target in (".acme/hooks.json", ".acme/skills/loopx/SKILL.md"):
        v = ask({"cmd": f"rm -f {target}"})
        assert not v["allow"] and v["kind"] == "governance", (target, v)
        v = ask({"file": target}, tool="put")
        assert not v["allow"] and v["kind"] == "governance", (target, v)
    # runs: loopx run --agent acme starts the row's preset
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "acme"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > acme-args.txt\ncat > /dev/null\necho did it\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    r = cli("--agent", "acme", "run", "--once", "--permission-mode", "edit", json=True)
    assert r.code == 0, r.err + r.out
    turn = r.data["turns"][0]
    assert turn["run_id"] and (repo / "acme-args.txt").read_text().split() == ["--quiet"]
    assert state_of(repo)["runs"][turn["run_id"]]["agent"] == "agent:acme"


# ------------------------------------------------------------------ item 4: hooks and runner agree
def _stop(project, env=None, **changes):
    body = {"session_id": "s1", "transcript_path": "/t.jsonl", "cwd": str(project), "hook_event_name": "Stop",
            "stop_hook_active": False, **changes}
    return run_loopx(["hook", "stop", "--host", "claude-code", "--json"], cwd=project, input=json.dumps(body), env=env)


def open_runs(project):
    return [r for r in state_of(project)["runs"].values() if r["finished"] is None]


def test_under_loopx_run_the_stop_hook_does_not_resume_the_runners_run(goal, project, cli):
    r = cli("--agent", "claude-code", "next", json=True)  # the runner's run, as `loopx run` starts it
    assert r.code == 0 and r.data["run_id"], r.out
    rid = r.data["run_id"]
    res = _stop(project, env={"LOOPX_RUN_ID": rid, "LOOPX_AGENT": "claude-code"})
    info = json.loads(res.out)["data"]["info"]
    assert info["action"] == "stop" and info["reason"] == "runner_owns_run", info
    assert [x["id"] for x in open_runs(project)] == [rid]  # left for the runner to verify and finish


def test_outside_loopx_run_a_continuation_the_agent_ignores_is_closed_not_resent(goal, project):
    first = json.loads(_stop(project).out)["data"]["info"]
    assert first["action"] == "continue" and len(open_runs(project)) == 1
    # the agent stops again without finishing the turn: the hook closes it and lets the agent stop
    again = json.loads(_stop(project, stop_hook_active=True).out)["data"]["info"]
    assert again["action"] == "stop" and again["reason"] == "continuation_not_finished", again
    assert open_runs(project) == []
    closed = state_of(project)["runs"][first["run_id"]]
    assert closed["result"] == "no_progress"


def test_hooks_in_a_second_scope_are_refused(home, goal, project, cli):
    assert cli("hooks", "--install", "--host", "codex").code == 0
    r = cli("hooks", "--install", "--host", "codex", "--scope", "user", json=True)
    assert r.code == 4 and "both" in r.err + r.out, (r.out, r.err)
    assert not (home / ".codex" / "hooks.json").exists()
    assert cli("hooks", "--install", "--host", "claude-code", "--scope", "user").code == 0  # another host is fine


@pytest.mark.skipif(not POSIX, reason="runs the printed command through sh")
def test_every_write_back_line_works_as_printed_for_a_goal_without_verify(project, cli):
    r = cli("start-goal", "--goal-text", "Write notes", "--goal-id", "g2", "--done-when", "notes exist", "--todo", "one",
            json=True)
    assert r.code == 0, r.err
    r = cli("--agent", "codex", "next", "--goal-id", "g2", json=True)
    finish = r.data["packet"]["commands"]["finish"]
    exe = finish.split()[0]
    assert os.path.isabs(exe) and "--verify" not in finish, finish
    line = finish.replace("progress|completion|no_progress|failed|blocked", "progress")
    # a login shell with a PATH that lacks loopx, as Codex's `bash -lc` gives it
    proc = subprocess.run(["sh", "-c", line], cwd=project, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"],
                               "LOOPX_HOME": os.environ["LOOPX_HOME"]})
    assert proc.returncode == 0, (line, proc.stderr)
    assert state_of(project)["runs"][r.data["run_id"]]["finished"] is not None


def test_installed_skills_name_the_absolute_loopx(home, project, cli):
    from loopx.exe import loopx_command

    assert cli("workflow-skills", "--install", "--host", "codex").code == 0
    text = (project / ".agents" / "skills" / "loopx" / "SKILL.md").read_text(encoding="utf-8")
    exe = loopx_command()
    assert os.path.isabs(exe) and f"This loopx is `{exe}`" in text and text.startswith("---\nname: loopx\n")


# ------------------------------------------------------------------ item 5: installed means active (Codex trust)
def test_untrusted_codex_hooks_are_an_error_and_loopx_run_refuses_them(home, goal, project, cli, monkeypatch):
    from conftest import trust_codex_hooks

    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no codex CLI to ask: loopx reads Codex's config.toml
    r = cli("hooks", "--install", "--host", "codex")
    assert r.code == 0 and "/hooks" in r.err, r.err  # says what the user must do
    r = cli("hooks", "--check", "--host", "codex", json=True)
    assert r.code == 1 and r.data["hooks"][0]["trust"]["state"] == "untrusted", r.out
    check = next(c for c in cli("doctor", "--json").data["checks"] if c["id"] == "hooks.project.codex")
    assert check["status"] == "error" and "guard is off" in check["finding"], check
    r = cli("--agent", "codex", "run", "--once", json=True)
    assert r.code == 3 and "host_unguarded" in r.out + r.err and "--allow-unguarded" in r.out + r.err, (r.out, r.err)
    assert open_runs(project) == []
    r = cli("--agent", "codex", "run", "--once", "--allow-unguarded", json=True)
    assert r.code == 2 and "not on PATH" in r.out + r.err  # past the trust check: the missing CLI is next
    trust_codex_hooks(project)
    assert cli("hooks", "--check", "--host", "codex").code == 0
    check = next(c for c in cli("doctor", "--json").data["checks"] if c["id"] == "hooks.project.codex")
    assert check["status"] == "ok", check


@pytest.mark.skipif(not POSIX, reason="a fake codex app-server")
def test_codex_trust_is_asked_of_codex_app_server_when_it_is_there(home, goal, project, cli, monkeypatch, tmp_path):
    """A stand-in for ``codex app-server`` (JSON-RPC on stdio): loopx believes its trustStatus."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    status = tmp_path / "status.txt"
    status.write_text("untrusted", encoding="utf-8")
    fake = bindir / "codex"
    fake.write_text(f"""#!{sys.executable}
import json, sys
while True:
    line = sys.stdin.readline()
    if not line:
        break
    msg = json.loads(line)
    if msg.get("id") == 1:
        print(json.dumps({{"id": 1, "result": {{}}}}), flush=True)
    elif msg.get("method") == "hooks/list":
        cwd = msg["params"]["cwds"][0]
        path = cwd + "/.codex/hooks.json"
        conf = json.load(open(path))
        hooks = [{{"key": path + ":x:0:0", "command": h["command"], "sourcePath": path,
                   "trustStatus": open({str(status)!r}).read().strip(), "enabled": True}}
                 for groups in conf["hooks"].values() for g in groups for h in g["hooks"]]
        print(json.dumps({{"id": 2, "result": {{"data": [{{"cwd": cwd, "hooks": hooks}}]}}}}), flush=True)
""", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    assert cli("hooks", "--install", "--host", "codex").code == 0
    r = cli("hooks", "--check", "--host", "codex", json=True)
    trust = r.data["hooks"][0]["trust"]
    assert r.code == 1 and trust["state"] == "untrusted" and trust["how"] == "asked codex app-server", trust
    status.write_text("trusted", encoding="utf-8")
    r = cli("hooks", "--check", "--host", "codex", json=True)
    assert r.code == 0 and r.data["hooks"][0]["trust"]["state"] == "trusted", r.out


# ------------------------------------------------------------------ item 3: guarded wherever the host runs
@pytest.mark.skipif(not POSIX, reason="git worktrees")
def test_a_parallel_runs_worktree_carries_the_hook_files_and_guards_them(repo, cli):
    from loopx.runner import hostenv, worktree

    assert cli("hooks", "--install", "--host", "opencode").code == 0
    assert cli("hooks", "--install", "--host", "pi").code == 0
    store = Store.open(str(repo))
    wt = worktree.create(store, "run-abc123", "work")
    assert not (Path(wt["cwd"]) / ".opencode" / "plugins" / "loopx-guard.js").exists()  # untracked: git leaves it out
    copied = hostenv.copy_hooks(str(repo), wt["cwd"], "opencode")
    assert ".opencode/plugins/loopx-guard.js" in copied
    assert (Path(wt["cwd"]) / ".opencode" / "plugins" / "loopx-guard.js").is_file()
    hostenv.copy_hooks(str(repo), wt["cwd"])
    assert (Path(wt["cwd"]) / ".pi" / "extensions" / "loopx-guard.ts").is_file()
    v = verdict(repo, commands=["rm -f .opencode/plugins/loopx-guard.js"], cwd=wt["cwd"])
    assert not v["allow"] and v["kind"] == "governance", v
    assert verdict(repo, commands=["echo x > notes.txt"], cwd=wt["cwd"])["allow"]


def fake_host(tmp_path, name, body):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    f = bindir / name
    f.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    f.chmod(0o755)
    return bindir


@pytest.mark.skipif(not POSIX, reason="a fake host executable")
def test_loopx_run_sets_pwd_and_records_how_often_the_guard_was_called(goal, project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    payload = json.dumps({"tool_name": "bash", "tool_input": {"command": "ls"}, "cwd": str(project)})
    # a Pi whose extension loaded: it calls the guard once per tool call (here: once). Python, not
    # sh: a shell recomputes $PWD itself, Node (OpenCode, Pi) believes the variable it was given
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "pi").write_text(f"""#!{sys.executable}
import os, subprocess, sys
sys.stdin.read()
open(os.path.join(os.environ["LOOPX_PROJECT_DIR"], "pwd.txt"), "w").write(os.environ.get("PWD", ""))
subprocess.run([sys.executable, "-m", "loopx", "hook", "pre-tool", "--host", "pi"], input={payload!r}, text=True,
               capture_output=True)
print("did it")
""", encoding="utf-8")
    (bindir / "pi").chmod(0o755)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = run_loopx(["--project", str(project), "--agent", "pi", "run", "--once", "--permission-mode", "edit", "--json"], cwd=elsewhere, env=env)
    assert r.code == 0, r.out + r.err
    rid = json.loads(r.out)["data"]["turns"][0]["run_id"]
    assert (project / "pwd.txt").read_text().strip() == str(project)  # OpenCode and Pi work in $PWD
    assert state_of(project)["runs"][rid]["guard"] == {"calls": 1, "denied": 0, "unguarded": False}
    # a host whose hook never loaded: the turn is recorded as unguarded
    fake_host(tmp_path, "pi", "cat > /dev/null\necho did it\n")
    r = run_loopx(["--project", str(project), "--agent", "pi", "run", "--once", "--permission-mode", "edit", "--json"], cwd=elsewhere, env=env)
    assert r.code == 0, r.err
    rid = json.loads(r.out)["data"]["turns"][0]["run_id"]
    assert state_of(project)["runs"][rid]["guard"] == {"calls": 0, "denied": 0, "unguarded": True}


@pytest.mark.skipif(not POSIX, reason="a fake host executable")
def test_a_host_that_only_waits_for_the_network_is_stopped_and_classified_offline(goal, project, tmp_path):
    """Codex with no network prints "Reconnecting... waiting for network" and waits for ever: the
    runner stops it when its output says so, not at the turn's timeout (10 minutes here)."""
    bindir = fake_host(tmp_path, "codex", "cat > /dev/null\n"
                       "echo '{\"type\":\"thread.started\",\"thread_id\":\"t1\"}'\n"
                       "echo '{\"type\":\"error\",\"message\":\"Reconnecting... waiting for network (Connection failed)\"}'\n"
                       "exec sleep 3600\n")
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = run_loopx(["--agent", "codex", "run", "--once", "--permission-mode", "edit", "--timeout", "10m", "--json"],
                  cwd=project, env=env, timeout=300)
    turn = json.loads(r.out)["data"]["turns"][0]
    assert not turn["timed_out"] and turn["setup_error"]["reason"] == "host_offline", turn


def test_codex_usage_limit_reset_at_a_clock_time_is_read_as_the_window():
    """Codex words its usage-limit reset as a local clock time ("try again at 10:49 PM"): the next
    such moment in this machine's time zone."""
    from datetime import timedelta

    from loopx.kernel.storage import clock
    from loopx.runner import outcome

    now = clock.parse_ts("2026-12-01T22:00:00Z")

    def expected(h, m):
        local = now.astimezone()
        at = local.replace(hour=h, minute=m, second=0, microsecond=0)
        return clock.iso(at if at > local else at + timedelta(days=1))

    err = outcome.classify(1, False, "You've hit your usage limit. Try again at 10:49 PM.", {}, preset="codex", now=now)
    assert err["reason"] == "host_rate_limited" and err["reset_at"] == expected(22, 49), err
    assert outcome.reset_time("try again at 9:05 am", now) == expected(9, 5)
    assert outcome.reset_time("try again at 12:30 AM", now) == expected(0, 30)


@pytest.mark.skipif(not POSIX, reason="a fake host executable")
def test_a_host_that_timed_out_is_worded_as_the_hosts_problem_by_doctor_and_resume(goal, project, tmp_path):
    """A real host (here a fake codex) that hangs until the turn's time limit is a host setup error:
    doctor names the host's error (not "could not run its verify command `None`"), and `goal resume`
    says the host is tried again, not the verify command."""
    bindir = fake_host(tmp_path, "codex", "cat > /dev/null\nexec sleep 3600\n")
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = run_loopx(["--agent", "codex", "run", "--once", "--permission-mode", "edit", "--timeout", "1s", "--json"],
                  cwd=project, env=env, timeout=300)
    turn = json.loads(r.out)["data"]["turns"][0]
    assert turn["timed_out"] and turn["setup_error"]["reason"] == "host_timed_out", turn
    doc = run_loopx(["doctor", "--format", "json"], cwd=project, env=env, timeout=300)
    setup = [c for c in json.loads(doc.out)["data"]["checks"] if c["id"] == f"setup.{goal}"]
    assert len(setup) == 1 and "host_timed_out" in setup[0]["finding"], [c for c in json.loads(doc.out)["data"]["checks"] if "setup" in c["id"] or c["status"] != "ok"]
    assert "verify command" not in setup[0]["finding"] and "None" not in setup[0]["finding"], setup
    assert "host" in setup[0]["fix"] and f"loopx goal resume {goal}" in setup[0]["fix"], setup
    res = run_loopx(["goal", "resume", goal], cwd=project, timeout=60)
    assert res.code == 0 and "host will be tried again" in res.out and "host_timed_out" in res.out, res.out
