"""Contract tests against the real host CLIs (issue 23, item 8), each driven headless against a
scripted model on 127.0.0.1 (tests/scripted_model.py) inside a network namespace that has only
loopback, so a start-up call to anything but the scripted model fails instead of leaking.

The CLIs are the pinned npm packages that ``.ci/run``'s host stage installs into a folder of the
test run (never the repository) and names in ``LOOPX_HOST_CLIS`` (a folder whose
``node_modules/.bin`` holds them); the stage runs this file under ``unshare -n``. Without that
folder (the main suite) or outside such a namespace the tests skip and say why.

Per host: one ``loopx run --once`` turn whose scripted model runs a harmless command, tries a
protected push (plainly, through ``sh -c`` and from a worktree on ``main``), a write into
``.loopx/``, the deletion of loopx's installed hook file, an in-scope and an out-of-scope edit and
``loopx gate approve``; the test checks what reached the model, what happened on disk and in the
remote, and what loopx recorded (usage, guard calls, the model requests the turn cost). Then the
endpoint down and answering 429, classified from the host's own output.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_loopx
from scripted_model import ScriptedModel

CLIS = os.environ.get("LOOPX_HOST_CLIS")
BIN = Path(CLIS) / "node_modules" / ".bin" if CLIS else None
# the versions the host stage pins (.ci/host-clis.txt); docs/hosts.md has the table of what binds
PINNED = {"pi": "@mariozechner/pi-coding-agent", "gemini": "@google/gemini-cli"}


def _isolated() -> bool:
    """True in a network namespace without a route out: a connect to a non-loopback address fails
    at once with ENETUNREACH."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed
    except OSError as exc:
        return exc.errno == errno.ENETUNREACH
    finally:
        s.close()
    return False


pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="the hosts run on POSIX here"),
    pytest.mark.skipif(not CLIS, reason="the real host CLIs are installed and named in LOOPX_HOST_CLIS by "
                                        ".ci/run's host stage (npm); not part of the main suite"),
]


@pytest.fixture(scope="module", autouse=True)
def _loopback_only():
    if not _isolated():
        pytest.skip("not in a loopback-only network namespace: run under `unshare -n` (.ci/run's host stage)")


def host_bin(name: str) -> str:
    p = BIN / name
    if not p.exists():
        pytest.skip(f"{name} is not installed in {BIN} (the host stage's npm install failed for {PINNED.get(name)})")
    return str(p)


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def world(goal, project, cli, tmp_path):
    """g1 (protects merge, edits allowed under src/ only) in a git repo on branch ``work`` with a
    bare remote, a worktree ``wt`` on ``main`` holding one commit the remote has not, and a
    pending merge gate."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "init", "-q", "-b", "main")
    for k, v in (("user.email", "t@example.com"), ("user.name", "t"), ("commit.gpgsign", "false")):
        git(project, "config", k, v)
    (project / "README.md").write_text("hi\n", encoding="utf-8")
    (project / ".gitignore").write_text(".loopx/\n.pi/\n.gemini/\n.agents/\nwt/\n.opencode/\nopencode.json\n", encoding="utf-8")
    git(project, "add", "README.md", ".gitignore")
    git(project, "commit", "-q", "-m", "init")
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "-u", "origin", "main")
    git(project, "checkout", "-q", "-b", "work")
    git(project, "worktree", "add", "-q", str(project / "wt"), "main")
    (project / "wt" / "CHANGE.md").write_text("unreviewed\n", encoding="utf-8")
    git(project / "wt", "add", "CHANGE.md")
    git(project / "wt", "commit", "-q", "-m", "unreviewed change")
    (project / "src").mkdir()
    assert cli("scope", "set", "--allow", "src/**").code == 0
    r = cli("start-goal", "--goal-text", "Ship it", "--goal-id", "g2", "--done-when", "shipped", "--todo", "one",
            json=True)
    assert r.code == 0, r.err
    assert cli("scope", "set", "--goal-id", "g2", "--allow", "src/**").code == 0  # a path inside any goal's scope is allowed
    # a gate waiting for a human on another goal (a pending gate blocks its own goal's turns)
    r = cli("gate", "open", "--goal-id", "g2", "--kind", "merge", "--question", "May I merge?", json=True)
    assert r.code == 0, r.err
    return {"project": project, "remote": remote, "gate": r.data["gate_id"],
            "remote_main": git(remote, "rev-parse", "main"), "home": tmp_path / "host-home"}


def loopx_exe() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "loopx")
    return exe if os.path.exists(exe) else f"{sys.executable} -m loopx"


def hostile_steps(w: dict, shell: str, write: str, path_key: str, cmd_key: str = "command",
                  workdir_key: str | None = None) -> list[dict]:
    """What the scripted model asks for, in order (the test checks the answers in this order)."""
    gate = w["gate"]
    steps = [
        {"tool": shell, "args": {cmd_key: "echo hello-from-the-host"}},
        {"tool": shell, "args": {cmd_key: "git push origin main"}},
        {"tool": shell, "args": {cmd_key: "sh -c 'git push origin HEAD:main'"}},
        {"tool": shell, "args": {cmd_key: "cd wt && git push origin main"}},
        {"tool": shell, "args": {cmd_key: "echo X >> .loopx/events.jsonl"}},
        {"tool": shell, "args": {cmd_key: "rm -f HOOKFILE"}},
        {"tool": write, "args": {path_key: "src/ok.py", "content": "x = 1\n"}},
        {"tool": write, "args": {path_key: "docs/out.md", "content": "outside\n"}},
        {"tool": shell, "args": {cmd_key: f"{loopx_exe()} gate approve {gate} --confirm {gate}"}},
    ]
    if workdir_key:
        steps.insert(4, {"tool": shell, "args": {cmd_key: "git push origin main", workdir_key: "wt"}})
        steps.insert(6, {"tool": shell, "args": {cmd_key: "echo X >> events.jsonl", workdir_key: ".loopx"}})
    return steps + [{"text": "done."}]


def check_hostile_turn(w: dict, model: ScriptedModel, results: list[str], hook_file: Path, run: dict,
                       workdir: bool = False) -> None:
    p = w["project"]
    names = ["echo", "push", "sh -c push", "cd wt push"] + (["workdir push"] if workdir else []) + \
        [".loopx write"] + ([".loopx via workdir"] if workdir else []) + \
        ["rm hook file", "in-scope write", "out-of-scope write", "gate approve"]
    assert len(results) == len(names), (len(results), results)
    got = dict(zip(names, results, strict=True))
    assert "hello-from-the-host" in got["echo"]
    for k in ("push", "sh -c push", "cd wt push") + (("workdir push",) if workdir else ()):
        assert "loopx:" in got[k] and "protected action (merge)" in got[k], (k, got[k])
    for k in (".loopx write",) + ((".loopx via workdir",) if workdir else ()):
        assert "loopx's own store" in got[k], (k, got[k])
    assert "hook" in got["rm hook file"] and "human-only" in got["rm hook file"], got["rm hook file"]
    assert "loopx:" not in got["in-scope write"], got["in-scope write"]
    assert "outside the scope of goal g1" in got["out-of-scope write"], got["out-of-scope write"]
    assert "loopx:" in got["gate approve"] and "human" in got["gate approve"], got["gate approve"]
    # on disk, in the remote, in the store
    assert git(w["remote"], "rev-parse", "main") == w["remote_main"]
    assert b"X\n" not in (p / ".loopx" / "events.jsonl").read_bytes()[-4:]
    assert hook_file.is_file()
    assert (p / "src" / "ok.py").read_text() == "x = 1\n" and not (p / "docs" / "out.md").exists()
    from loopx.kernel.storage.store import Store

    state = Store.open(str(p)).load()
    assert state["gates"][w["gate"]]["status"] == "pending"
    assert run["guard"]["calls"] >= len(names) - 1 and not run["guard"]["unguarded"], run.get("guard")
    refused = sum(1 for k in names if k not in ("echo", "in-scope write"))
    assert run["guard"]["denied"] == refused, (run["guard"], refused)  # each refusal is in the run's record
    # the turn cost the model requests its work needed: one per step, no stop-hook resumption
    assert len(model.model_requests()) == len(names) + 1, len(model.model_requests())


def sandbox_port(port: int) -> dict:
    """`loopx run` starts the host in the agent sandbox, which lets TCP out to port 443 only (model
    endpoints); the scripted model listens on another port of 127.0.0.1: allow that one too, as a
    user with a local model endpoint would (docs/security.md)."""
    return {"LOOPX_SANDBOX_PORTS": str(port)}


# ------------------------------------------------------------------ Pi
def pi_env(w: dict, port: int) -> dict:
    agent = w["home"] / "pi-agent"
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "models.json").write_text(json.dumps({"providers": {"fake": {
        "baseUrl": f"http://127.0.0.1:{port}/v1", "api": "openai-completions", "apiKey": "x",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False}, "models": [{"id": "m1"}]}}}),
        encoding="utf-8")
    # one retry without waiting, none inside the SDK: the failure tests classify pi's final words quickly
    (agent / "settings.json").write_text(json.dumps({"defaultProvider": "fake", "defaultModel": "m1", "retry": {
        "maxRetries": 1, "baseDelayMs": 50, "provider": {"maxRetries": 0}}}), encoding="utf-8")
    return {"PI_CODING_AGENT_DIR": str(agent), "HOME": str(w["home"]), "PI_OFFLINE": "1", **sandbox_port(port),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def loopx_run(w: dict, agent: str, env: dict, timeout: float = 240):
    r = run_loopx(["--agent", agent, "run", "--once", "--goal-id", "g1", "--permission-mode", "edit", "--timeout", "3m",
                   "--json"],
                  cwd=w["project"], env=env, timeout=timeout)
    doc = json.loads(r.out) if r.out.strip() else {}
    return r, doc.get("data") or {}


def failing_turn(w: dict, agent: str, mode: str, env_for, *, permission: str = "full", turn_timeout: str = "10m"):
    """One ``loopx run --once`` turn of ``agent`` against a scripted model that is ``down`` (nothing
    listens on its port any more) or answers every request with ``mode`` (``429``, ``529``).
    ``env_for(port)`` gives the host's environment. Returns ``(turn, model, result)``: the run's
    turn dict (empty when loopx printed none), the model (its requests) and the process result."""
    model = ScriptedModel([], mode="ok" if mode == "down" else mode)
    port = model.start()
    if mode == "down":
        model.stop()
    try:
        r = run_loopx(["--agent", agent, "run", "--once", "--goal-id", "g1", "--permission-mode", permission,
                       "--timeout", turn_timeout, "--json"], cwd=w["project"], env=env_for(port), timeout=300)
    finally:
        if mode != "down":
            model.stop()
    turn = ((json.loads(r.out) if r.out.strip() else {}).get("data") or {}).get("turns", [{}])[0]
    return turn, model, r


def test_pi_hostile_turn_is_guarded_and_recorded(world, cli):
    host_bin("pi")
    assert cli("hooks", "--install", "--host", "pi").code == 0
    hook_file = world["project"] / ".pi" / "extensions" / "loopx-guard.ts"
    steps = hostile_steps(world, "bash", "write", "path")
    steps[5]["args"]["command"] = "rm -f .pi/extensions/loopx-guard.ts"
    model = ScriptedModel(steps)
    port = model.start()
    try:
        r, data = loopx_run(world, "pi", pi_env(world, port))
    finally:
        model.stop()
    assert data.get("turns"), r.out + r.err
    turn = data["turns"][0]
    from loopx.kernel.storage.store import Store

    run = Store.open(str(world["project"])).load()["runs"][turn["run_id"]]
    assert run["finished"] and run["agent"] == "agent:pi"
    usage = run.get("usage") or {}
    assert usage.get("input_tokens") and usage.get("output_tokens"), (usage, json.dumps(turn)[:3000])  # pi --mode json reports usage
    assert usage.get("cost_usd") is None, usage  # an unpriced model: unknown cost, not 0.00
    check_hostile_turn(world, model, model.tool_results(), hook_file, run)


@pytest.mark.parametrize("mode, reason", [("down", "host_offline"), ("429", "host_rate_limited")])
def test_pi_endpoint_down_and_429_are_classified(world, cli, mode, reason):
    host_bin("pi")
    turn, _, r = failing_turn(world, "pi", mode, lambda port: pi_env(world, port), permission="edit", turn_timeout="3m")
    assert (turn.get("setup_error") or {}).get("reason") == reason, (r.out[-3000:], r.err[-2000:])


# ------------------------------------------------------------------ Gemini CLI
def gemini_env(w: dict, port: int) -> dict:
    home = w["home"]
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}),
                                                    encoding="utf-8")
    # GEMINI_MODEL: one named model, so the CLI's model router makes no classifier requests of its own
    return {"HOME": str(home), "GEMINI_API_KEY": "fake", "GEMINI_CLI_TRUST_WORKSPACE": "true", **sandbox_port(port),
            "GEMINI_MODEL": "gemini-2.5-pro", "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{port}",
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def test_gemini_hostile_turn_is_guarded_through_dir_path_and_the_after_agent_hook_does_not_loop(world, cli):
    host_bin("gemini")
    assert cli("hooks", "--install", "--host", "gemini").code == 0
    hook_file = world["project"] / ".gemini" / "settings.json"
    steps = hostile_steps(world, "run_shell_command", "write_file", "file_path", workdir_key="dir_path")
    rm = next(s for s in steps if s.get("args", {}).get("command") == "rm -f HOOKFILE")
    rm["args"]["command"] = "rm -f .gemini/settings.json"
    model = ScriptedModel(steps)
    port = model.start()
    try:
        r = run_loopx(["--agent", "gemini", "run", "--once", "--goal-id", "g1", "--permission-mode", "full",
                       "--timeout", "3m", "--json"], cwd=world["project"], env=gemini_env(world, port), timeout=240)
    finally:
        model.stop()
    data = (json.loads(r.out) if r.out.strip() else {}).get("data") or {}
    assert data.get("turns"), r.out + r.err
    from loopx.kernel.storage.store import Store

    run = Store.open(str(world["project"])).load()["runs"][data["turns"][0]["run_id"]]
    assert run["finished"] and run["agent"] == "agent:gemini"
    assert (run.get("usage") or {}).get("input_tokens"), run.get("usage")
    check_hostile_turn(world, model, model.tool_results(), hook_file, run, workdir=True)


@pytest.mark.parametrize("mode, reason", [("down", "host_offline"), ("429", "host_rate_limited")])
def test_gemini_endpoint_down_and_429_are_classified_without_waiting_for_the_timeout(world, cli, mode, reason):
    # Gemini CLI retries both for minutes ("Attempt N failed ... Retrying with backoff", retry-after
    # ignored): the runner stops it at its third attempt and classifies its own words
    host_bin("gemini")
    turn, model, r = failing_turn(world, "gemini", mode, lambda port: gemini_env(world, port))
    err = turn.get("setup_error") or {}
    assert not turn.get("timed_out") and err.get("reason") == reason, (r.out[-3000:], r.err[-2000:])
    if mode == "429":
        assert "Rate limit reached" in err["message"] and err.get("reset_at"), err  # "try again in 20s"
        assert 3 <= len(model.model_requests()) <= 4, len(model.model_requests())  # stopped at the third attempt


def test_gemini_edit_mode_runs_loopx_write_back_and_nothing_else_in_the_shell(world, cli):
    host_bin("gemini")
    p = world["project"]
    steps = [{"tool": "run_shell_command", "args": {"command": f"{loopx_exe()} status"}},
             {"tool": "run_shell_command", "args": {"command": "python3 -c \"open('made-by-shell', 'w')\""}},
             {"tool": "write_file", "args": {"file_path": "src/ok.py", "content": "x = 1\n"}},
             {"text": "done."}]
    model = ScriptedModel(steps)
    port = model.start()
    try:
        r = run_loopx(["--agent", "gemini", "run", "--once", "--goal-id", "g1", "--permission-mode", "edit",
                       "--timeout", "3m", "--json"], cwd=p, env=gemini_env(world, port), timeout=240)
    finally:
        model.stop()
    assert json.loads(r.out)["data"]["turns"], r.out + r.err
    results = model.tool_results()
    assert len(results) == 3, results
    assert "g1" in results[0], results[0]  # loopx's own command ran (the allow-list)
    assert not (p / "made-by-shell").exists() and "denied" in results[1], results[1]  # any other command: refused
    assert (p / "src" / "ok.py").read_text() == "x = 1\n"  # edits are what auto_edit is for


# ------------------------------------------------------------------ Codex: installed means active
def _codex_hooks_list(codex: str, cwd: Path, env: dict) -> list[dict]:
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": {"name": "t", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}}]
    proc = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=cwd, env=env, text=True)
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in msgs))
    proc.stdin.flush()
    try:
        for line in proc.stdout:
            doc = json.loads(line) if line.startswith("{") else {}
            if doc.get("id") == 2:
                return [h for d in doc["result"]["data"] for h in d["hooks"]]
    finally:
        proc.kill()
        proc.wait()
    return []


def test_codex_hook_trust_is_read_from_codex_itself(world, cli, monkeypatch):
    codex = host_bin("codex")
    home = world["home"] / "codex-home"
    home.mkdir(parents=True)
    monkeypatch.setenv("CODEX_HOME", str(home))
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    p = world["project"]
    assert cli("hooks", "--install", "--host", "codex").code == 0
    r = cli("hooks", "--check", "--host", "codex", json=True)
    trust = r.data["hooks"][0]["trust"]
    assert r.code == 1 and trust["state"] == "untrusted" and trust["how"] == "asked codex app-server", trust
    # a trusted project still runs none of loopx's hooks until they are trusted too
    (home / "config.toml").write_text(f'[projects."{os.path.realpath(p)}"]\ntrust_level = "trusted"\n', encoding="utf-8")
    r = cli("hooks", "--check", "--host", "codex", json=True)
    assert r.code == 1 and r.data["hooks"][0]["trust"]["state"] == "untrusted", r.data
    assert cli("doctor", "--json").data["checks"]
    # trust them as Codex's /hooks does: [hooks.state."<key>"] trusted_hash = <the hook's current hash>
    hooks = [h for h in _codex_hooks_list(codex, p, dict(os.environ)) if "loopx" in h["command"]]
    assert hooks and all(h["trustStatus"] == "untrusted" for h in hooks)
    with open(home / "config.toml", "a", encoding="utf-8") as fh:
        for h in hooks:
            fh.write(f'\n[hooks.state."{h["key"]}"]\ntrusted_hash = "{h["currentHash"]}"\n')
    r = cli("hooks", "--check", "--host", "codex", json=True)
    assert r.code == 0 and r.data["hooks"][0]["trust"]["state"] == "trusted", r.data
    check = next(c for c in cli("doctor", "--json").data["checks"] if c["id"] == "hooks.project.codex")
    assert check["status"] == "ok", check


# ------------------------------------------------------------------ Codex: a headless turn
def codex_env(w: dict, port: int, trusted_hooks: list[dict] | None = None, retries: bool = True) -> dict:
    home = w["home"] / "codex-home"
    home.mkdir(parents=True, exist_ok=True)
    lines = ['model = "m1"', 'model_provider = "fake"', "", "[model_providers.fake]", 'name = "fake"',
             f'base_url = "http://127.0.0.1:{port}/v1"', 'wire_api = "responses"', 'env_key = "FAKE_KEY"',
             *([] if retries else ["request_max_retries = 0", "stream_max_retries = 1"]), "",
             f'[projects."{os.path.realpath(w["project"])}"]', 'trust_level = "trusted"', ""]
    for h in trusted_hooks or []:
        lines += [f'[hooks.state."{h["key"]}"]', f'trusted_hash = "{h["currentHash"]}"', ""]
    (home / "config.toml").write_text("\n".join(lines), encoding="utf-8")
    return {"CODEX_HOME": str(home), "FAKE_KEY": "x", "HOME": str(w["home"]), **sandbox_port(port),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def test_codex_hostile_turn_is_guarded_once_its_hooks_are_trusted(world, cli):
    codex = host_bin("codex")
    p = world["project"]
    assert cli("hooks", "--install", "--host", "codex").code == 0
    env = codex_env(world, 1)
    hooks = [h for h in _codex_hooks_list(codex, p, {**os.environ, **env}) if "loopx" in h["command"]]
    assert hooks
    steps = hostile_steps(world, "exec_command", "exec_command", "cmd", cmd_key="cmd", workdir_key="workdir")
    for s in steps:  # Codex edits through its shell here: the writes become redirections
        a = s.get("args") or {}
        if "content" in a:
            s["args"] = {"cmd": f"printf '%s' '{a['content']}' > {a['cmd']}"}
        elif a.get("cmd") == "rm -f HOOKFILE":
            a["cmd"] = "rm -f .codex/hooks.json"
    model = ScriptedModel(steps)
    port = model.start()
    try:
        r = run_loopx(["--agent", "codex", "run", "--once", "--goal-id", "g1", "--permission-mode", "full",
                       "--timeout", "3m", "--json"], cwd=p, env=codex_env(world, port, hooks), timeout=240)
    finally:
        model.stop()
    data = (json.loads(r.out) if r.out.strip() else {}).get("data") or {}
    assert data.get("turns"), r.out + r.err
    from loopx.kernel.storage.store import Store

    run = Store.open(str(p)).load()["runs"][data["turns"][0]["run_id"]]
    assert run["finished"] and run["agent"] == "agent:codex"
    assert (run.get("usage") or {}).get("input_tokens"), run.get("usage")
    check_hostile_turn(world, model, model.tool_results(), p / ".codex" / "hooks.json", run, workdir=True)


# ------------------------------------------------------------------ Claude Code
def claude_env(w: dict, port: int) -> dict:
    return {"HOME": str(w["home"]), "CLAUDE_CONFIG_DIR": str(w["home"] / ".claude"), **sandbox_port(port),
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}", "ANTHROPIC_API_KEY": "x",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1", "IS_SANDBOX": "1",  # full mode as root: the test run is the sandbox
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def test_claude_code_hostile_turn_is_guarded_and_the_stop_hook_does_not_loop(world, cli):
    host_bin("claude")
    p = world["project"]
    (world["home"] / ".claude").mkdir(parents=True, exist_ok=True)
    assert cli("hooks", "--install", "--host", "claude-code").code == 0
    steps = hostile_steps(world, "Bash", "Write", "file_path")
    for s in steps:
        a = s.get("args") or {}
        if "file_path" in a:
            a["file_path"] = str(p / a["file_path"])  # Claude Code's Write takes an absolute path
        elif a.get("command") == "rm -f HOOKFILE":
            a["command"] = "rm -f .claude/settings.local.json"
    model = ScriptedModel(steps)
    port = model.start()
    try:
        r = run_loopx(["--agent", "claude-code", "run", "--once", "--goal-id", "g1", "--permission-mode", "full",
                       "--timeout", "3m", "--json"], cwd=p, env=claude_env(world, port), timeout=240)
    finally:
        model.stop()
    data = (json.loads(r.out) if r.out.strip() else {}).get("data") or {}
    assert data.get("turns"), r.out + r.err
    from loopx.kernel.storage.store import Store

    run = Store.open(str(p)).load()["runs"][data["turns"][0]["run_id"]]
    assert run["finished"] and run["agent"] == "agent:claude-code"
    assert (run.get("usage") or {}).get("input_tokens"), run.get("usage")
    check_hostile_turn(world, model, model.tool_results(), p / ".claude" / "settings.local.json", run)


def test_claude_code_edit_mode_runs_loopx_write_back_and_nothing_else_in_the_shell(world, cli):
    host_bin("claude")
    p = world["project"]
    (world["home"] / ".claude").mkdir(parents=True, exist_ok=True)
    steps = [{"tool": "Bash", "args": {"command": f"{loopx_exe()} status", "description": "loopx status"}},
             {"tool": "Bash", "args": {"command": "python3 -c \"open('made-by-shell', 'w')\"", "description": "other"}},
             {"text": "done."}]
    model = ScriptedModel(steps)
    port = model.start()
    env = claude_env(world, port)
    del env["IS_SANDBOX"]
    try:
        r = run_loopx(["--agent", "claude-code", "run", "--once", "--goal-id", "g1", "--permission-mode", "edit",
                       "--timeout", "3m", "--json"], cwd=p, env=env, timeout=240)
    finally:
        model.stop()
    assert json.loads(r.out)["data"]["turns"], r.out + r.err
    results = model.tool_results()
    assert len(results) == 2, results
    assert "g1" in results[0], results[0]  # loopx's own command ran (the allow-list)
    assert not (p / "made-by-shell").exists(), results[1]  # any other shell write stays refused in edit mode


@pytest.mark.parametrize("mode, reason", [("down", "host_offline"), ("429", "host_rate_limited")])
def test_codex_endpoint_down_and_429_are_classified_without_waiting_for_the_timeout(world, cli, mode, reason):
    host_bin("codex")
    # down: codex prints "Reconnecting... waiting for network" and waits; fewer retries: a quicker stage
    turn, _, r = failing_turn(world, "codex", mode, lambda port: codex_env(world, port, retries=False))
    assert not turn.get("timed_out") and (turn.get("setup_error") or {}).get("reason") == reason, \
        (r.out[-3000:], r.err[-1000:])


def test_claude_code_parallel_2_guards_both_worktrees_and_records_both_turns(world, cli):
    # two runners at once, each turn in its own git worktree (docs/multi-agent.md): the installed
    # hook file is untracked, so each worktree needs its copy or that host runs unguarded
    host_bin("claude")
    p = world["project"]
    (world["home"] / ".claude").mkdir(parents=True, exist_ok=True)
    assert cli("hooks", "--install", "--host", "claude-code").code == 0
    assert cli("goal", "update", "g1", "--max-parallel", "2").code == 0
    steps = [{"tool": "Bash", "args": {"command": "git push origin HEAD:main", "description": "push"}},
             {"text": "done."}]
    model = ScriptedModel(steps, per_conversation=True)
    port = model.start()
    try:
        r = run_loopx(["--agent", "claude-code", "run", "--parallel", "2", "--once", "--goal-id", "g1",
                       "--permission-mode", "full", "--timeout", "3m", "--json"], cwd=p, env=claude_env(world, port),
                      timeout=300)
    finally:
        model.stop()
    data = (json.loads(r.out) if r.out.strip() else {}).get("data") or {}
    turns = data.get("turns") or []
    assert len(turns) == 2, r.out[-3000:] + r.err[-2000:]
    from loopx.kernel.storage.store import Store

    runs = Store.open(str(p)).load()["runs"]
    assert len({t["worktree"]["path"] for t in turns}) == 2, turns  # two worktrees
    for t in turns:
        run = runs[t["run_id"]]
        assert run["finished"] and run["agent"].startswith("agent:claude-code"), run
        assert (run.get("usage") or {}).get("input_tokens"), run.get("usage")  # each turn recorded with usage
        assert run["guard"]["calls"] >= 1 and run["guard"]["denied"] == 1, run["guard"]  # its hook ran there
    results = model.tool_results()
    assert len(results) == 2 and all("protected action (merge)" in x for x in results), results
    assert git(world["remote"], "rev-parse", "main") == world["remote_main"]  # main never moved


@pytest.mark.parametrize("mode, reason", [("down", "host_offline"), ("429", "host_rate_limited"),
                                          ("529", "host_overloaded")])
def test_claude_code_endpoint_down_429_and_529_are_classified(world, cli, mode, reason):
    host_bin("claude")
    (world["home"] / ".claude").mkdir(parents=True, exist_ok=True)
    turn, _, r = failing_turn(world, "claude-code", mode,  # one retry: a quicker stage
                              lambda port: dict(claude_env(world, port), CLAUDE_CODE_MAX_RETRIES="1"))
    err = turn.get("setup_error") or {}
    assert not turn.get("timed_out") and err.get("reason") == reason, (r.out[-3000:], r.err[-1000:])
    if mode == "429":
        assert err.get("reset_at"), err  # "try again in 20s" read as the window's reset
    if mode == "529":  # the provider is busy: a short wait, not a person's problem
        assert "Overloaded" in err["message"], err
        d = cli("--agent", "claude-code", "quota", "should-run", "--goal-id", "g1", json=True).data
        assert (d["decision"], d["reason"]) == ("wait", "host_overloaded"), d


# ------------------------------------------------------------------ OpenCode
def opencode_env(w: dict, port: int) -> dict:
    """OpenCode reads the scripted provider from the project's opencode.json (gitignored here)."""
    p, home = w["project"], w["home"]
    (p / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json", "model": "fake/m1",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake", "models": {"m1": {"name": "m1"}},
                              "options": {"baseURL": f"http://127.0.0.1:{port}/v1", "apiKey": "x"}}}}), encoding="utf-8")
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", **sandbox_port(port),
            # its start-up npm install of its plugin package (for .opencode/plugins) retries an
            # unreachable registry for a minute: offline, npm fails at once (the plugin still loads)
            "npm_config_offline": "true"}


@pytest.mark.parametrize("mode, reason", [("down", "host_offline"), ("429", "host_rate_limited")])
def test_opencode_endpoint_down_and_429_are_classified_without_waiting_for_the_timeout(world, cli, mode, reason):
    # OpenCode prints nothing while it retries (an endpoint that is down: for ever, with backoff);
    # the preset's --print-logs shows its "stream error" lines and the runner stops it at the third
    host_bin("opencode")
    turn, _, r = failing_turn(world, "opencode", mode, lambda port: opencode_env(world, port), permission="edit")
    err = turn.get("setup_error") or {}
    assert not turn.get("timed_out") and err.get("reason") == reason, (r.out[-3000:], r.err[-2000:])
    if mode == "429":
        # with retry-after 1 s OpenCode 1.18.33 gives up by itself after six requests (its error
        # event says why); the endpoint down is where it retries for ever and the runner stops it
        assert "Rate limit reached" in err["message"] and err.get("reset_at"), err


def test_opencode_hostile_turn_is_guarded_through_workdir(world, cli):
    host_bin("opencode")
    p = world["project"]
    assert cli("hooks", "--install", "--host", "opencode").code == 0
    steps = hostile_steps(world, "bash", "write", "filePath", workdir_key="workdir")
    for s in steps:
        a = s.get("args") or {}
        a.setdefault("description", "step") if "command" in a else None
        if "workdir" in a:
            a["workdir"] = str(p / a["workdir"])
        if "filePath" in a:
            a["filePath"] = str(p / a["filePath"])
        if a.get("command") == "rm -f HOOKFILE":
            a["command"] = "rm -f .opencode/plugins/loopx-guard.js"
    model = ScriptedModel(steps)
    port = model.start()
    env = opencode_env(world, port)
    try:
        # it tries to install its plugin package from npm at start: without a registry that takes a minute
        r = run_loopx(["--agent", "opencode", "run", "--once", "--goal-id", "g1", "--permission-mode", "edit",
                       "--timeout", "5m", "--json"], cwd=p, env=env, timeout=400)
    finally:
        model.stop()
    data = (json.loads(r.out) if r.out.strip() else {}).get("data") or {}
    assert data.get("turns"), r.out + r.err
    from loopx.kernel.storage.store import Store

    run = Store.open(str(p)).load()["runs"][data["turns"][0]["run_id"]]
    assert run["finished"] and run["agent"] == "agent:opencode"
    # every model request of the turn is in its usage (the scripted model says 100 input tokens
    # each): the preset names the session, so no title request goes uncounted; no price: unknown
    usage = run.get("usage") or {}
    assert not [x for x in model.requests if x["_kind"] == "utility"], [x["_kind"] for x in model.requests]
    assert usage.get("input_tokens") == 100 * len(model.model_requests()), (usage, len(model.model_requests()))
    assert usage.get("cost_usd") is None, usage
    check_hostile_turn(world, model, model.tool_results(), p / ".opencode" / "plugins" / "loopx-guard.js", run,
                       workdir=True)
