"""Host hooks: ``loopx hook stop|pre-tool|session-start`` driven as real processes with payloads
shaped as each host documents them (tests/fixtures/hosts), checking the exact stdout and exit
code; ``loopx hooks --install|--check|--remove``; the guard's command -> gate-kind mapping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_loopx, trust_codex_hooks
from loopx.guard import verdicts

FIX = Path(__file__).parent / "fixtures" / "hosts"


def payload(host: str, name: str, project: Path, **changes) -> dict:
    text = (FIX / host / f"{name}.json").read_text(encoding="utf-8").replace("{{PROJECT}}", str(project))
    data = json.loads(text)
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k] = {**data[k], **v}
        else:
            data[k] = v
    return data


def hook(project: Path, event: str, host: str, data, *extra, env=None):
    body = data if isinstance(data, str) else json.dumps(data)
    return run_loopx(["hook", event, "--host", host, *extra], cwd=project, input=body, env=env)


def deny_reason(r) -> str:
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert list(doc) == ["hookSpecificOutput"]
    out = doc["hookSpecificOutput"]
    assert out["hookEventName"] == "PreToolUse" and out["permissionDecision"] == "deny"
    return out["permissionDecisionReason"]


def allowed(r) -> bool:
    assert r.code == 0, r.err
    return r.out == ""


def open_merge_gate(cli) -> str:
    r = cli("--agent", "claude-code", "gate", "open", "--kind", "merge", "--question", "Merge PR #12 into main?", json=True)
    assert r.code == 0, r.err
    return r.data["gate_id"]


def approve(cli, gate_id: str) -> None:
    r = cli("gate", "approve", gate_id, "--confirm", gate_id)
    assert r.code == 0, r.err


# ------------------------------------------------------------------ pre-tool (acceptance 4)
def test_pre_tool_denies_push_and_merge_while_gate_pending_then_allows_after_approval(goal, project, cli):
    push = payload("claude-code", "pre_tool_bash", project)
    merge = payload("claude-code", "pre_tool_bash", project, tool_input={"command": "gh pr merge 12"})
    reason = deny_reason(hook(project, "pre-tool", "claude-code", push))
    assert "protected action (merge)" in reason and "loopx gate open" in reason
    gate_id = open_merge_gate(cli)
    for data in (push, merge):
        reason = deny_reason(hook(project, "pre-tool", "claude-code", data))
        assert gate_id in reason and "waiting for a human" in reason
    approve(cli, gate_id)
    assert allowed(hook(project, "pre-tool", "claude-code", push))
    # a single approval authorises one action (issue 12 item 2): the guard recorded its use
    reason = deny_reason(hook(project, "pre-tool", "claude-code", merge))
    assert gate_id in reason and "was used" in reason
    shown = cli("gate", "show", gate_id, json=True).data["gate"]
    assert shown["used"]["count"] == 1 and "git push" in shown["used"]["command"]
    assert cli("gate", "check", "--action", "merge").code == 1
    standing = open_merge_gate(cli)
    r = cli("gate", "approve", standing, "--confirm", standing, "--standing")
    assert r.code == 0 and "standing approval" in r.out
    for data in (push, merge, push):
        assert allowed(hook(project, "pre-tool", "claude-code", data))
    assert cli("gate", "check", "--action", "merge", json=True).data["standing"] is True


def test_a_newer_pending_gate_of_the_same_kind_revokes_an_older_approval(goal, project, cli):
    approve(cli, open_merge_gate(cli))
    push = payload("claude-code", "pre_tool_bash", project)
    assert allowed(hook(project, "pre-tool", "claude-code", push))
    second = open_merge_gate(cli)
    assert second in deny_reason(hook(project, "pre-tool", "claude-code", push))


def test_pre_tool_denies_an_edit_outside_scope_and_allows_one_inside(goal, project, cli):
    assert cli("scope", "set", "--allow", "src/**").code == 0
    reason = deny_reason(hook(project, "pre-tool", "claude-code", payload("claude-code", "pre_tool_write", project)))
    assert "docs/notes.md is outside the scope of goal g1" in reason
    assert allowed(hook(project, "pre-tool", "claude-code", payload("claude-code", "pre_tool_edit", project)))


def test_pre_tool_denies_denied_paths_and_the_store_itself(goal, project, cli):
    assert cli("scope", "set", "--deny", "src/secrets/**").code == 0
    secret = payload("claude-code", "pre_tool_write", project, tool_input={"file_path": str(project / "src/secrets/k.txt")})
    assert "denied by src/secrets/**" in deny_reason(hook(project, "pre-tool", "claude-code", secret))
    store = payload("claude-code", "pre_tool_edit", project, tool_input={"file_path": str(project / ".loopx/events.jsonl")})
    assert "loopx's own store" in deny_reason(hook(project, "pre-tool", "claude-code", store))


def test_unprotected_kinds_and_plain_commands_pass(goal, project):
    publish = payload("claude-code", "pre_tool_bash", project, tool_input={"command": "npm publish"})
    assert allowed(hook(project, "pre-tool", "claude-code", publish))  # g1 protects merge only
    feature = payload("claude-code", "pre_tool_bash", project, tool_input={"command": "git push origin feature/x"})
    assert allowed(hook(project, "pre-tool", "claude-code", feature))
    read = payload("claude-code", "pre_tool_bash", project, tool_name="Read",
                   tool_input={"file_path": str(project / ".loopx/events.jsonl")})
    assert allowed(hook(project, "pre-tool", "claude-code", read))


def test_codex_payloads_get_the_documented_deny(goal, project, cli):
    assert cli("scope", "set", "--allow", "src/**").code == 0
    assert "gh pr merge 12 --squash" in deny_reason(hook(project, "pre-tool", "codex", payload("codex", "pre_tool_bash", project)))
    reason = deny_reason(hook(project, "pre-tool", "codex", payload("codex", "pre_tool_apply_patch", project)))
    assert "docs/notes.md is outside the scope" in reason


def test_cursor_before_shell_execution_deny_and_neutral_answers(goal, project, cli):
    data = payload("cursor", "before_shell_execution", project)
    r = hook(project, "pre-tool", "cursor", data)
    assert r.code == 0
    doc = json.loads(r.out)
    assert doc["permission"] == "deny" and "protected action (merge)" in doc["agent_message"] and doc["user_message"]
    approve(cli, open_merge_gate(cli))
    r = hook(project, "pre-tool", "cursor", data)
    assert (r.code, json.loads(r.out)) == (0, {})


def test_corrupt_store_blocks_protected_commands_but_not_ordinary_ones(goal, project):
    (project / ".loopx" / "format.json").write_text("{not json", encoding="utf-8")
    reason = deny_reason(hook(project, "pre-tool", "claude-code", payload("claude-code", "pre_tool_bash", project)))
    assert "cannot be read" in reason and "loopx doctor" in reason
    ls = payload("claude-code", "pre_tool_bash", project, tool_input={"command": "pytest -q"})
    assert allowed(hook(project, "pre-tool", "claude-code", ls))


def test_bad_payload_and_unknown_host_print_nothing(goal, project):
    assert allowed(hook(project, "pre-tool", "claude-code", "this is not json"))
    assert allowed(hook(project, "pre-tool", "claude-code", "[1, 2]"))
    assert allowed(hook(project, "pre-tool", "vim", payload("claude-code", "pre_tool_bash", project)))


def test_not_governed_project_allows_everything(tmp_path):
    (tmp_path / "free").mkdir()
    data = payload("claude-code", "pre_tool_bash", tmp_path / "free")
    assert allowed(hook(tmp_path / "free", "pre-tool", "claude-code", data))


# ------------------------------------------------------------------ stop (acceptance 3)
def test_stop_continues_with_the_turn_packet_when_should_run_says_run(goal, project, cli):
    r = hook(project, "stop", "claude-code", payload("claude-code", "stop", project))
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert set(doc) == {"decision", "reason"} and doc["decision"] == "block"
    runs = cli("status", json=True).data["goals"][0]["open_runs"]
    assert len(runs) == 1 and runs[0]["agent"] == "agent:claude-code"
    assert runs[0]["id"] in doc["reason"] and "Make the tests pass" in doc["reason"]


def test_stop_lets_the_agent_stop_when_should_run_says_anything_else(goal, project, cli):
    open_merge_gate(cli)  # blocks the whole goal: wait_human
    r = hook(project, "stop", "claude-code", payload("claude-code", "stop", project))
    assert (r.code, r.out) == (0, "")
    assert cli("status", json=True).data["goals"][0]["open_runs"] == []
    r = hook(project, "stop", "claude-code", payload("claude-code", "stop", project), "--json")
    assert r.json["data"]["info"]["decision"] == "wait_human"


def _finish_open_run(project, cli):
    runs = cli("status", json=True).data["goals"][0]["open_runs"]
    for r in runs:  # the agent does the continued turn and finishes it, as the packet says
        assert cli("--agent", "claude-code", "turn", "finish", "--run", r["id"], "--result", "progress").code == 0


def test_stop_caps_consecutive_continuations(goal, project, cli):
    first = payload("claude-code", "stop", project)
    again = payload("claude-code", "stop", project, stop_hook_active=True)
    assert json.loads(hook(project, "stop", "claude-code", first, "--max-continuations", "2").out)["decision"] == "block"
    _finish_open_run(project, cli)
    assert json.loads(hook(project, "stop", "claude-code", again, "--max-continuations", "2").out)["decision"] == "block"
    _finish_open_run(project, cli)
    r = hook(project, "stop", "claude-code", again, "--max-continuations", "2")
    assert (r.code, r.out) == (0, "")
    # a fresh stop (stop_hook_active false: the user spoke) starts counting again
    assert json.loads(hook(project, "stop", "claude-code", first, "--max-continuations", "2").out)["decision"] == "block"
    _finish_open_run(project, cli)
    r = hook(project, "stop", "claude-code", again, env={"LOOPX_STOP_HOOK_CAP": "0"})
    assert (r.code, r.out) == (0, "")


def test_stop_fails_open_on_a_corrupt_store(goal, project):
    (project / ".loopx" / "format.json").write_text("garbage", encoding="utf-8")
    r = hook(project, "stop", "claude-code", payload("claude-code", "stop", project))
    assert (r.code, r.out, r.err) == (0, "", "")
    r = hook(project, "stop", "claude-code", "{broken json")
    assert (r.code, r.out) == (0, "")


def test_codex_and_cursor_stop_answers(goal, project):
    doc = json.loads(hook(project, "stop", "codex", payload("codex", "stop", project)).out)
    assert doc["decision"] == "block" and "loopx turn" in doc["reason"]
    r = hook(project, "stop", "cursor", payload("cursor", "stop", project))
    assert "followup_message" in json.loads(r.out)
    for data in (payload("cursor", "stop", project, status="aborted"), payload("cursor", "stop", project, loop_count=8)):
        r = hook(project, "stop", "cursor", data)
        assert (r.code, json.loads(r.out)) == (0, {})


# ------------------------------------------------------------------ session start
def test_session_start_adds_a_state_summary(goal, project, cli):
    gate_id = open_merge_gate(cli)
    for host in ("claude-code", "codex"):
        r = hook(project, "session-start", host, payload(host, "session_start", project))
        out = json.loads(r.out)["hookSpecificOutput"]
        assert out["hookEventName"] == "SessionStart"
        assert "goal g1" in out["additionalContext"] and gate_id in out["additionalContext"]


def test_session_start_prints_nothing_without_goals(project):
    r = hook(project, "session-start", "claude-code", payload("claude-code", "session_start", project))
    assert (r.code, r.out) == (0, "")


# ------------------------------------------------------------------ hooks --install/--check/--remove
def test_hooks_install_outside_a_project_says_where_the_hooks_went(tmp_path, monkeypatch, cli):
    """Outside any loopx project the project scope is the current folder: installing there is
    allowed (a project may be connected later) but never silent."""
    folder = tmp_path / "not-a-project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    r = cli("hooks", "--install", "--host", "claude-code")
    assert r.code == 0, r.err
    assert (folder / ".claude" / "settings.local.json").is_file()
    assert "no loopx project here" in r.err and "--scope user" in r.err, r.err
    r = cli("hooks", "--install", "--host", "claude-code", "--dry-run", "--project", str(folder))
    assert "no loopx project here" not in r.err  # the folder was named: no surprise to warn of


def test_hooks_install_check_remove_keep_user_settings(project, cli):
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir()
    user = {"permissions": {"allow": ["Bash(pytest:*)"]},
            "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}
    settings.write_text(json.dumps(user), encoding="utf-8")
    assert cli("hooks", "--install", "--host", "all").code == 0
    data = json.loads(settings.read_text())
    assert data["permissions"] == user["permissions"]
    stop_cmds = [h["command"] for e in data["hooks"]["Stop"] for h in e["hooks"]]
    assert stop_cmds[0] == "notify-send done" and "hook stop --host claude-code" in stop_cmds[1]
    codex = json.loads((project / ".codex" / "hooks.json").read_text())
    assert set(codex["hooks"]) == {"SessionStart", "PreToolUse", "Stop"}
    cursor = json.loads((project / ".cursor" / "hooks.json").read_text())
    assert cursor["version"] == 1 and cursor["hooks"]["stop"][0]["loop_limit"] == 8
    assert "hook pre-tool --host cursor" in cursor["hooks"]["beforeShellExecution"][0]["command"]
    before = settings.read_bytes()
    r = cli("hooks", "--install", "--host", "all", json=True)
    assert all(row["action"] == "unchanged" for row in r.data["hooks"]) and settings.read_bytes() == before
    assert cli("hooks", "--check").code == 1  # installed, but Codex runs none until they are trusted (issue 23)
    trust_codex_hooks(project)
    assert cli("hooks", "--check").code == 0
    assert cli("hooks", "--remove", "--host", "all").code == 0
    assert json.loads(settings.read_text()) == user
    assert not (project / ".codex").exists() and not (project / ".cursor").exists()
    assert cli("hooks", "--check").code == 1


def test_hooks_dry_run_and_unparsable_config(project, cli):
    r = cli("hooks", "--install", "--host", "codex", "--dry-run", json=True)
    assert r.data["hooks"][0]["action"] == "would create" and not (project / ".codex").exists()
    bad = project / ".cursor" / "hooks.json"
    bad.parent.mkdir()
    bad.write_text("{oops", encoding="utf-8")
    r = cli("hooks", "--install", "--host", "cursor")
    assert r.code == 3 and "not valid JSON" in r.err and bad.read_text() == "{oops"
    assert cli("hooks", "--install", "--host", "vim").code == 2
    r = cli("hooks", "--install", "--max-continuations", "lots")
    assert r.code == 2 and "hint:" in r.err and not (project / ".claude").exists()


def test_hooks_rules_outside_a_project_is_a_state_error(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    r = cli("hooks", "--rules")
    assert r.code == 3 and "loopx connect" in r.err


def test_hooks_install_writes_a_custom_cap(project, cli):
    assert cli("hooks", "--install", "--host", "claude-code", "--max-continuations", "3").code == 0
    data = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert data["hooks"]["Stop"][0]["hooks"][0]["command"].endswith("--max-continuations 3")


# ------------------------------------------------------------------ per-goal rules
def test_goal_rules_map_commands_and_paths_to_kinds(goal, project, cli):
    assert cli("scope", "set", "--protect", "merge", "--protect", "release", "--protect", "route-change").code == 0
    assert cli("hooks", "--rules", "--add-rule", "release=make ship*", "--add-rule", "none=git push origin main",
               "--add-path-rule", "route-change=src/routes/**").code == 0
    r = cli("hooks", "--rules", "--try", "make ship now", json=True)
    assert r.data["try"]["verdict"]["allow"] is False and r.data["try"]["matches"][0]["kind"] == "release"
    assert allowed(hook(project, "pre-tool", "claude-code", payload("claude-code", "pre_tool_bash", project)))
    route = payload("claude-code", "pre_tool_edit", project, tool_input={"file_path": str(project / "src/routes/a.py")})
    assert "(route-change)" in deny_reason(hook(project, "pre-tool", "claude-code", route))
    assert cli("hooks", "--rules", "--protect-branch", "trunk", "--reset-rules").code == 0
    trunk = payload("claude-code", "pre_tool_bash", project, tool_input={"command": "git push origin trunk"})
    assert "(merge)" in deny_reason(hook(project, "pre-tool", "claude-code", trunk))


def test_bad_rules_are_usage_errors(goal, cli):
    for bad in ("nokind", "deploy=kubectl *", "merge="):
        r = cli("hooks", "--rules", "--add-rule", bad)
        assert r.code == 2 and "hint:" in r.err


# ------------------------------------------------------------------ the default mapping
@pytest.mark.parametrize("command,kind", [
    ("git push origin main", "merge"),
    ("git push origin HEAD:master", "merge"),
    ("git push -f origin feature:refs/heads/main", "merge"),
    ("git -C sub push --all", "merge"),
    ("cd app && git push", "merge"),  # the current branch (main here) is protected
    ("gh pr merge 12 --squash", "merge"),
    ("git push origin feature/x", None),
    ("git push origin v1.2.0:refs/tags/v1.2.0", "release"),
    ("npm publish --access public", "release"),
    ("python -m build && twine upload dist/*", "release"),
    ("cargo publish", "release"),
    ("gh release create v1.0.0", "release"),
    ("sudo -E kubectl apply -f deploy.yaml", "production-write"),
    ("bash -c 'terraform apply -auto-approve'", "production-write"),
    ("FLY_APP=x fly deploy", "production-write"),
    ("npx vercel --prod", "production-write"),
    ("kubectl get pods", None),
    ("echo git push origin main", None),
    ("terraform plan", None),
    ("pytest -q", None),
])
def test_default_mapping(command, kind):
    hits = verdicts.command_kinds(command, verdicts.config(None), branch_of=lambda cwd: "main")
    assert (hits[0]["kind"] if hits else None) == kind


def test_the_installed_hook_command_runs_and_denies(goal, project, cli):
    """The exact command written into the host's settings, run through a shell as the host would."""
    import subprocess

    from conftest import subprocess_env

    assert cli("hooks", "--install", "--host", "claude-code").code == 0
    data = json.loads((project / ".claude" / "settings.local.json").read_text())
    command = data["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    proc = subprocess.run(command, shell=True, cwd=project, input=json.dumps(payload("claude-code", "pre_tool_bash", project)),
                          capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_user_scope_hooks_follow_codex_home(project, cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    assert cli("hooks", "--install", "--host", "codex", "--scope", "user").code == 0
    assert (tmp_path / "codex-home" / "hooks.json").exists() and not (project / ".codex").exists()
    trust_codex_hooks(project)
    assert cli("hooks", "--check", "--host", "codex", "--scope", "user").code == 0
    assert cli("hooks", "--remove", "--host", "codex", "--scope", "user").code == 0
    assert not (tmp_path / "codex-home" / "hooks.json").exists()


def test_a_payload_too_large_to_check_is_denied_not_waved_through(goal, project):
    big = payload("claude-code", "pre_tool_bash", project,
                  tool_input={"command": "gh pr merge 5", "description": "x" * (9 << 20)})
    assert "could not check this tool call" in deny_reason(hook(project, "pre-tool", "claude-code", big))


def _inspectable(text: str) -> bool:
    """Whether this interpreter's json (the one the hook runs on) decodes ``text``: 3.11 refuses
    1,000 levels, 3.12 5,000, 3.13 reads 5,000 and refuses 50,000."""
    try:
        json.loads(text)
    except RecursionError:
        return False
    return True


@pytest.mark.parametrize("depth", [100, 5000, 200_000])
def test_deeply_nested_payloads_are_judged_when_readable_and_denied_when_not(goal, project, depth):
    """The promise on every Python: a payload loopx cannot inspect is denied; one it can is judged."""
    def deep(command: str) -> str:
        body = payload("claude-code", "pre_tool_bash", project, tool_input={"command": command})
        return json.dumps(body)[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"

    protected, harmless = deep("gh pr merge 5"), deep("ls -la")
    if _inspectable(protected):
        reason = deny_reason(hook(project, "pre-tool", "claude-code", protected))
        assert "could not check" not in reason and "merge" in reason  # judged: a merge without a gate
        assert allowed(hook(project, "pre-tool", "claude-code", harmless))  # judged: nothing protected
    else:
        assert "could not check" in deny_reason(hook(project, "pre-tool", "claude-code", protected))
        assert "could not check" in deny_reason(hook(project, "pre-tool", "claude-code", harmless))


def test_the_nesting_cases_cover_both_branches_on_this_python():
    assert _inspectable("[" * 100 + "]" * 100)  # judged on every version
    assert not _inspectable("[" * 200_000 + "]" * 200_000)  # denied as uncheckable on every version


@pytest.mark.parametrize("depth", [5000, 200_000])
def test_deeply_nested_payloads_never_crash_a_hook(goal, project, depth):
    deep = json.dumps({"cwd": str(project)})[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    for event in ("stop", "session-start"):
        r = hook(project, event, "claude-code", deep)
        assert r.code == 0 and "Traceback" not in r.err
    r = hook(project, "stop", "cursor", deep)
    if _inspectable(deep):  # judged: should-run says run, so the loop continues
        assert r.code == 0 and "should-run says run" in json.loads(r.out)["followup_message"]
    else:
        assert r.code == 0 and json.loads(r.out) == {}  # unreadable: Cursor's "just stop" (fail open)


@pytest.mark.parametrize("host", ["claude-code", "codex", "cursor"])
def test_a_garbage_stop_payload_lets_the_agent_stop(goal, project, host):
    r = hook(project, "stop", host, "{not json")
    assert r.code == 0 and r.out.strip() in ("", "{}")


def test_a_hook_whose_stdout_fails_still_exits_0(goal, project):
    import subprocess
    import sys

    from conftest import subprocess_env

    body = json.dumps(payload("claude-code", "pre_tool_bash", project, tool_input={"command": "gh pr merge 5"}))
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "loopx", "hook", "pre-tool", "--host", "claude-code"], cwd=project,
                              input=body.encode(), stdout=full, stderr=subprocess.PIPE, env=subprocess_env(), timeout=60)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr


@pytest.mark.parametrize("host", ["claude-code", "generic"])
def test_a_tool_input_string_nested_too_deeply_is_denied_not_waved_through(goal, project, host):
    # some hosts send tool_input as a JSON *string*; one padded past the decoder's nesting limit used
    # to raise inside the guard, whose "a bug must not wedge the agent" branch then allowed the call
    depth = 200_000  # past the limit on every version (test_the_nesting_cases_cover_both_branches_on_this_python)
    for command in ("gh pr merge 5", "rm -rf .loopx"):
        ti = json.dumps({"command": command})[:-1] + ', "pad": ' + "[" * depth + "]" * depth + "}"
        body = payload("claude-code", "pre_tool_bash", project, tool_input={})
        body["tool_input"] = ti
        r = hook(project, "pre-tool", host, json.dumps(body))
        assert "Traceback" not in r.err
        if host == "claude-code":
            assert "could not check" in deny_reason(r), (command, r.out, r.err)
        else:  # the generic contract: {"decision": "deny", "reason"} and exit 2
            doc = json.loads(r.out)
            assert (r.code, doc["decision"]) == (2, "deny") and "could not check" in doc["reason"], (command, r.out)
