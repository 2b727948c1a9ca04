"""Issue 22: agents run inside a kernel sandbox (Landlock) with one brokered channel to loopx.

The hostile agent (tests/fixtures/sandbox/hostile_agent.py) runs as the agent of a real
``loopx run`` turn and really tries the issue's attacks: pushes to a bare remote made here,
writes to the store, the loopx package and the hook files, self-approval, the dashboard,
governance commands, a forge API and an npm registry stand-in on 127.0.0.1. The checks are on
ground truth (the remote's refs, file hashes, the folded store, the stand-in's request log), not
on what the agent says. Skipped only where Landlock is absent, and failing then under CI=true.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import REPO, run_loopx, subprocess_env
from loopx.kernel.storage.store import Store
from loopx.sandbox import landlock

ABI = landlock.abi() if sys.platform.startswith("linux") else 0


@pytest.fixture(autouse=True)
def _landlock():
    if ABI < 1:
        if os.environ.get("CI") == "true" and sys.platform.startswith("linux"):
            pytest.fail("Landlock is not available on this Linux CI machine: the sandbox tests must run here")
        pytest.skip("Landlock is not available on this system (the sandbox cannot be enforced)")


def git(cwd, *args, check=True) -> str:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True, env=env).stdout.strip()


class Forge(http.server.BaseHTTPRequestHandler):
    """A stand-in for a forge API and an npm registry: it records every request it gets."""

    seen: list = []

    def _any(self):
        Forge.seen.append((self.command, self.path))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_PUT = do_POST = do_DELETE = _any

    def log_message(self, *a):
        pass


@pytest.fixture
def forge():
    Forge.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forge)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def world(project, tmp_path, cli, monkeypatch):
    """A git project with a bare remote, installed hooks, a goal, a pending gate, a fake HOME with
    secrets, and a secret in loopx's data folder."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("SSH-SECRET\n")
    (home / ".git-credentials").write_text("https://x:CRED-SECRET@example.com\n")
    (home / ".gitconfig").write_text("[user]\n\tname = t\n\temail = t@t\n")
    monkeypatch.setenv("HOME", str(home))
    loopx_home = Path(os.environ["LOOPX_HOME"])
    (loopx_home / "dashboard-secret").write_text("DASH-SECRET\n")
    (loopx_home / "allowed_signers").write_text("human ssh-ed25519 AAAA\n")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "init", "-q", "-b", "main")
    (project / "src").mkdir()
    (project / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (project / "test_calc.py").write_text("import unittest\nfrom src.calc import add\n\n\nclass T(unittest.TestCase):\n"
                                         "    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n")
    (project / ".gitignore").write_text("__pycache__/\n")  # as any Python project (the verify runs write it)
    git(project, "add", "src", "test_calc.py", ".gitignore")
    git(project, "commit", "-q", "-m", "init")
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "origin", "main")
    # a branch whose tree holds a forged store file (the `git checkout evil -- .loopx/...` attack)
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=project, input="FORGED\n", text=True,
                          capture_output=True, check=True).stdout.strip()
    sub = subprocess.run(["git", "mktree"], cwd=project, input=f"100644 blob {blob}\tevents.jsonl\n", text=True,
                         capture_output=True, check=True).stdout.strip()
    top = subprocess.run(["git", "mktree"], cwd=project, input=f"040000 tree {sub}\t.loopx\n", text=True,
                         capture_output=True, check=True).stdout.strip()
    git(project, "update-ref", "refs/heads/evil", git(project, "commit-tree", top, "-m", "evil"))
    assert cli("start-goal", "--goal-text", "Fix add", "--goal-id", "g1", "--done-when", "tests pass",
               "--verify", f"{sys.executable} -m unittest -q test_calc", "--scope", "src/**", "--scope", "*.py",
               "--protect", "merge", "--todo", "fix add",
               "--todo-verify", f"{sys.executable} -m unittest -q test_calc", "--todo", "release").code == 0
    assert cli("hooks", "--install", "--host", "all", "--scope", "project").code == 0
    release = [t["id"] for t in Store.open(str(project)).load()["todos"].values() if t["title"] == "release"][0]
    r = cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "Merge into main?", "--blocks", release,
            json=True)
    gate = r.data["gate_id"]
    return {"project": project, "remote": remote, "home": home, "gate": gate, "loopx_home": loopx_home}


def _hash_tree(paths) -> dict:
    out = {}
    for p in paths:
        p = Path(p)
        files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file() and "__pycache__" not in x.parts)
        for f in files:
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


HOOK_FILES = (".claude/settings.local.json", ".codex/hooks.json", ".cursor/hooks.json", ".gemini/settings.json",
              ".opencode/plugins/loopx-guard.js", ".pi/extensions/loopx-guard.ts")


def test_hostile_agent_in_a_loopx_run_turn_fails_at_every_attack(world, forge, tmp_path):
    proj, remote = world["project"], world["remote"]
    hooks = [proj / h for h in HOOK_FILES if (proj / h).exists()]
    assert len(hooks) >= 4, "loopx hooks --install wrote the hosts' files"
    package = REPO / "src" / "loopx"
    guarded = [package, *hooks, proj / ".git" / "config", proj / ".git" / "hooks"]
    before = _hash_tree(guarded)
    refs_before = git(remote, "for-each-ref", "--format=%(refname) %(objectname)")
    victim = subprocess.Popen(["sleep", "600"])
    agent = proj / "hostile.py"
    shutil.copy(REPO / "tests" / "fixtures" / "sandbox" / "hostile_agent.py", agent)
    facts = {"gate": world["gate"], "goal": "g1", "project": str(proj), "remote": str(remote), "loopx": "loopx",
             "forge_port": forge, "secret": str(world["loopx_home"] / "dashboard-secret"),
             "signers": str(world["loopx_home"] / "allowed_signers"),
             "ssh_key": str(world["home"] / ".ssh" / "id_ed25519"),
             "git_credentials": str(world["home"] / ".git-credentials"),
             "guard_py": str(package / "guard" / "verdicts.py"), "runner_pid": victim.pid,
             # the hot modules' code file the hooks outside the sandbox load (loopx.codecache)
             "code_file": str(package / "__pycache__" / f"hot.{sys.implementation.cache_tag}.bin"),
             "pwned": str(tmp_path / "pwned.md")}
    assert Path(facts["guard_py"]).is_file()  # the attack on it is a real one
    code_file = Path(facts["code_file"])
    code_before = code_file.read_bytes() if code_file.exists() else None
    (proj / "facts.json").write_text(json.dumps(facts))
    try:
        bindir = os.path.dirname(sys.executable)
        r = run_loopx(["run", "--agent-cmd", f"{sys.executable} hostile.py facts.json", "--once", "--json"], cwd=proj,
                      env={"GH_TOKEN": "SEKRIT_TOKEN_VALUE", "GITHUB_TOKEN": "SEKRIT_TOKEN_VALUE", "HOME": str(world["home"]),
                           "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}, timeout=900)
        assert victim.poll() is None, "the agent could signal a process outside its sandbox"
    finally:
        victim.kill()
        victim.wait()
    assert r.code in (0, 1), r.out + r.err
    assert r.data["sandbox"]["mode"] == "landlock"
    assert (proj / "attacks.json").exists(), r.out[-3000:] + r.err[-3000:]
    attacks = json.loads((proj / "attacks.json").read_text())

    # ground truth: nothing moved on the remote, no protected byte changed, no gate decided
    assert git(remote, "for-each-ref", "--format=%(refname) %(objectname)") == refs_before
    assert _hash_tree(guarded) == before
    if ABI >= 4:  # TCP connect is filtered from Landlock ABI 4 on (docs/security.md)
        assert Forge.seen == [], f"the forge / registry stand-in was reached: {Forge.seen}"
    state = Store.open(str(proj)).load()
    g = state["gates"][world["gate"]]
    assert g["status"] == "pending" and not g.get("used")
    assert [x for x in state["gates"].values() if x["status"] != "pending"] == []
    assert set(state["goals"]) == {"g1"} and state["goals"]["g1"]["scope"]["allow"] == ["src/**", "*.py"]
    for f in (proj / ".loopx").rglob("*"):
        if f.is_file() and "worktrees" not in f.parts:
            assert b"FORGED" not in f.read_bytes(), f
    assert not (proj / ".loopx-old").exists() and not (proj / ".git-old").exists() and not (proj / "hl").exists()
    assert not (proj / ".git" / "commondir").exists(), "the planted commondir was removed"
    assert not (tmp_path / "pwned.md.fsmonitor").exists(), "loopx's git outside the sandbox followed the agent's config"
    assert "FORGED" not in world["loopx_home"].joinpath("allowed_signers").read_text()
    assert not (tmp_path / "pwned.md").exists()
    for blob in (proj / ".loopx").rglob("*"):
        assert not blob.is_file() or b"SSH-SECRET" not in blob.read_bytes(), blob

    # what the agent saw: each attack failed
    code_after = code_file.read_bytes() if code_file.exists() else None
    # loopx itself (the runner and the hooks, outside the sandbox) rewrites the code file when a hot
    # command loads a module the file did not hold yet (which ones it holds depends on what ran
    # before, in any order); the agent's plant (b"LXC1-planted", the whole file) never lands
    from loopx import codecache

    assert code_after == code_before or (code_after is not None
                                         and code_after.startswith(codecache.TAG + codecache.MAGIC))
    for name in ("sed_guard", "plant_code_file", "truncate_settings", "dd_events", "append_events", "checkout_store", "hardlink_store",
                 "rename_store", "rename_git", "git_config_alias", "git_hook", "read_ssh",
                 "read_git_credentials", "dashboard_secret", "broker_approve", "widen_scope", "goal_resume",
                 "goal_verify", "doctor_fix", "dashboard_own", "broker_read_file", "broker_write_file",
                 "push_plain", "push_url", "push_make",
                 "forge_merge", "npm_publish", "kill_runner"):
        if ABI < 4 and name in ("forge_merge", "npm_publish"):
            continue
        assert attacks[name]["exit"] != 0, (name, attacks[name])
    for name in ("read_ssh", "read_git_credentials", "dashboard_secret", "signing_log"):
        assert "SECRET" not in attacks[name]["out"] and "AAAA" not in attacks[name]["out"], (name, attacks[name])
    assert attacks["env_token"]["out"].split() == ["0", "0"], attacks["env_token"]

    # the run records what the broker refused
    notes = [e["summary"] for e in state["evidence"].values() if "sandbox broker refused" in e.get("summary", "")]
    for words in ("gate approve", "start-goal", "goal resume", "goal update", "doctor --fix", "dashboard"):
        assert any(words in n for n in notes), (words, notes)
    assert any("commondir" in x["why"] for x in r.data["sandbox"]["refused"]), r.data["sandbox"]


def test_ordinary_work_succeeds_inside_the_sandbox(world, cli):
    """Edits in scope, a commit on the run's branch, write-back through the broker, verify commands."""
    proj = world["project"]
    assert cli("gate", "reject", world["gate"], "--note", "not needed", "--confirm", world["gate"]).code == 0
    assert cli("goal", "update", "g1", "--max-parallel", "2").code == 0
    (proj / "agent.sh").write_text(
        "set -e\n"
        "sed -i 's/a - b/a + b/' src/calc.py\n"
        "echo 'NOTE = 1' > src/new_module.py\n"
        "git add -A src && git commit -q -m 'fix add'\n"
        "loopx evidence add --kind note --summary 'fixed add in the sandbox' --todo \"$LOOPX_TODO_ID\"\n"
        "loopx todo done \"$LOOPX_TODO_ID\"\n"
        # the host's pre-tool hook, brokered like every loopx call: the guard still answers inside
        "printf '{\"hook_event_name\": \"PreToolUse\", \"tool_name\": \"Bash\", \"tool_input\": "
        "{\"command\": \"git push origin main\"}, \"cwd\": \"%s\"}' \"$PWD\" | "
        "loopx hook pre-tool --host claude-code > src/hook.out\n")  # in scope: the turn stays verifiable
    git(proj, "add", "agent.sh")
    git(proj, "commit", "-q", "-m", "agent script")
    bindir = os.path.dirname(sys.executable)
    r = run_loopx(["run", "--agent-cmd", "sh agent.sh", "--once", "--json"], cwd=proj,
                  env={"HOME": str(world["home"]), "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}, timeout=600)
    assert r.code == 0, r.out + r.err
    t = r.data["turns"][0]
    assert t["agent_exit"] == 0, t
    assert t["verified"] and t["result"] in ("progress", "completion"), json.dumps(t)[:3000]
    state = Store.open(str(proj)).load()
    todo = state["todos"][t["todo_id"]]
    assert todo["status"] == "done"
    ev = [e for e in state["evidence"].values() if e["summary"] == "fixed add in the sandbox"]
    assert ev and ev[0]["actor"].startswith("agent:")
    branch = t["worktree"]["branch"]
    assert "fix add" in git(proj, "log", "--format=%s", branch)
    assert "a + b" in git(proj, "show", f"{branch}:src/calc.py")
    assert '"deny"' in git(proj, "show", f"{branch}:src/hook.out"), "the brokered pre-tool hook denied the push"


def test_protected_push_requested_in_the_sandbox_is_performed_once_per_approval(world, cli):
    proj, remote = world["project"], world["remote"]
    git(proj, "commit", "-q", "--allow-empty", "-m", "release me")
    sha = git(proj, "rev-parse", "HEAD")
    before = git(remote, "rev-parse", "main")
    bindir = os.path.dirname(sys.executable)
    env = {"HOME": str(world["home"]), "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    ask = ["sandbox", "--as", "bot", "--", "sh", "-c", f"git push origin main; loopx action push --remote origin "
           f"--branch main --sha {sha} --format json"]
    r = run_loopx(ask, cwd=proj, env=env)
    assert r.code == 0, r.out + r.err
    assert git(remote, "rev-parse", "main") == before  # the agent's own push failed
    gate = json.loads(r.out.splitlines()[-1].split("\n")[0] if r.out.startswith("{") else r.out[r.out.index("{"):].split("\n")[0])["data"]["gate_id"]
    assert cli("action", "perform", gate).code == 3  # pending: nothing happens before a human approves
    assert git(remote, "rev-parse", "main") == before
    assert cli("gate", "approve", gate, "--confirm", gate).code == 0
    # a clean git configuration: the project's own pre-push hook and push rewrites do not apply
    (proj / ".git" / "hooks" / "pre-push").write_text("#!/bin/sh\necho HOOK-RAN > hook-ran\nexit 1\n")
    (proj / ".git" / "hooks" / "pre-push").chmod(0o755)
    git(proj, "config", "remote.origin.push", "refs/heads/main:refs/heads/hijacked")
    done = cli("action", "perform", gate, json=True)
    assert done.code == 0, done.err
    assert git(remote, "rev-parse", "main") == sha
    assert not (proj / "hook-ran").exists() and git(remote, "branch", "--list", "hijacked") == ""
    again = cli("action", "perform", gate, json=True)
    assert again.code == 3 and again.json["error"]["code"] == "action_used"
    # a second identical request is a second gate that needs its own approval
    r2 = run_loopx(ask, cwd=proj, env=env)
    gate2 = r2.out[r2.out.index("{"):].split("\n")[0]
    gate2 = json.loads(gate2)["data"]["gate_id"]
    assert gate2 != gate
    assert cli("action", "perform", gate2).code == 3
    assert cli("gate", "approve", gate2, "--confirm", gate2).code == 0
    assert cli("action", "perform", gate2).code == 0


def test_loopx_sandbox_enforces_the_same_rules_on_an_interactive_command(world):
    proj = world["project"]
    bindir = os.path.dirname(sys.executable)
    script = ("echo ok > new-at-root.txt && echo WROTE_ROOT; echo x >> .loopx/events.jsonl || echo STORE_DENIED; "
              f"cat {world['home']}/.ssh/id_ed25519 || echo SSH_DENIED; "
              f"loopx gate approve {world['gate']} --confirm {world['gate']} || echo APPROVE_REFUSED; "
              "loopx status -q && echo STATUS_OK; git push origin main || echo PUSH_FAILED")
    r = run_loopx(["sandbox", "--", "sh", "-c", script], cwd=proj,
                  env={"HOME": str(world["home"]), "PATH": bindir + os.pathsep + os.environ.get("PATH", "")})
    for word in ("WROTE_ROOT", "STORE_DENIED", "SSH_DENIED", "APPROVE_REFUSED", "STATUS_OK", "PUSH_FAILED"):
        assert word in r.out, (word, r.out, r.err)
    assert "SSH-SECRET" not in r.out
    assert Store.open(str(proj)).load()["gates"][world["gate"]]["status"] == "pending"


def test_loopx_sandbox_of_a_missing_command_is_a_one_line_error(world):
    r = run_loopx(["sandbox", "--", "no-such-command-here", "arg"], cwd=world["project"])
    assert r.code == 2 and r.err.startswith("loopx: error: cannot run no-such-command-here: not found"), r.err
    assert "hint: check the command and PATH" in r.err and "Traceback" not in r.err
    j = run_loopx(["--format", "json", "sandbox", "--", "no-such-command-here"], cwd=world["project"])
    assert j.code == 2 and json.loads(j.out)["error"]["code"] == "command_not_found"


def test_without_a_sandbox_run_says_so_doctor_reports_it_and_the_guard_still_applies(world, cli):
    proj = world["project"]
    env = {"LOOPX_SANDBOX": "off"}
    r = run_loopx(["run", "--agent-cmd", "true", "--once"], cwd=proj, env=env)
    assert "sandbox: off (LOOPX_SANDBOX=off)" in r.err, r.err
    d = run_loopx(["doctor", "--format", "json"], cwd=proj, env=env)
    sb = [c for c in d.json["data"]["checks"] if c["id"] == "sandbox"][0]
    assert sb["status"] == "warning" and "off" in sb["finding"]
    d_on = run_loopx(["doctor", "--format", "json"], cwd=proj)
    assert [c for c in d_on.json["data"]["checks"] if c["id"] == "sandbox"][0]["status"] == "ok"
    payload = json.dumps({"tool_name": "Bash", "tool_input": {"command": "git push origin main"},
                          "cwd": str(proj), "hook_event_name": "PreToolUse"})
    h = run_loopx(["hook", "pre-tool", "--host", "claude-code"], cwd=proj, env={**env, "CLAUDECODE": "1"},
                  input=payload)
    assert "deny" in h.out, h.out + h.err
    s = run_loopx(["sandbox", "--", "true"], cwd=proj, env=env)
    assert s.code == 3 and "sandbox: off" in s.err


def test_run_sandboxed_with_a_holdout_profile_reads_its_data_writes_only_scratch_and_has_no_network(tmp_path, forge):
    from loopx import sandbox
    from loopx.sandbox import profile

    data, scratch, other = tmp_path / "holdout", tmp_path / "scratch", tmp_path / "other"
    for d in (data, scratch, other):
        d.mkdir()
    (data / "y.csv").write_text("42\n")
    (other / "secret.txt").write_text("NOPE\n")
    pol = profile.holdout(str(tmp_path / "scratch"), [str(data)], str(scratch))
    script = (f"cat {data}/y.csv; echo r > {scratch}/out && echo WROTE; echo x > {data}/y.csv || echo RO; "
              f"cat {other}/secret.txt || echo UNREADABLE; "
              f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {forge}), 3)\" || echo NONET")
    r = sandbox.run_sandboxed(["sh", "-c", script], str(scratch), pol, timeout=120)
    out = r.stdout.decode()
    assert out.split()[:4] == ["42", "WROTE", "RO", "UNREADABLE"], (out, r.stderr.decode())
    assert (data / "y.csv").read_text() == "42\n"
    if ABI >= 4:
        assert out.split()[4:] == ["NONET"] and Forge.seen == [], out


def test_a_sandboxed_agent_ends_with_its_runner_even_after_kill_9(world):
    import signal
    import time

    from loopx.kernel.storage import agentproc

    proj = world["project"]
    runner = subprocess.Popen([sys.executable, "-m", "loopx", "run", "--once", "--agent-cmd", "sleep 600 & wait"],
                              cwd=proj, env=subprocess_env({"HOME": str(world["home"])}), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        proc = None
        while proc is None and time.monotonic() < end:
            runs = [r for r in Store.open(str(proj)).load()["runs"].values() if r.get("process")]
            proc = runs[0]["process"] if runs else None
            time.sleep(0.1)
        assert proc is not None and agentproc.alive(proc), "the run records the agent's process group"
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        end = time.monotonic() + 120
        while agentproc.alive(proc) and time.monotonic() < end:
            time.sleep(0.1)
        assert not agentproc.alive(proc), "the sandboxed agent outlived its runner"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_a_turn_works_in_a_private_clone_and_the_projects_git_is_outside_every_write_grant(world, cli):
    """Item 1 of what is left of issue 22: a single `loopx run` turn works in a private clone that
    the sandbox shows at the project's own path, so the project's real `.git` (objects, refs,
    config, hooks) is not reachable by any path: the agent's writes to "its" `.git` land in the
    clone (config and hooks read-only there too), the bare remote does not move, and ordinary work
    (an edit in scope, commits, an uncommitted file, the write-back through the broker, the todo's
    verify) still lands on the user's branch."""
    proj, remote = world["project"], world["remote"]
    pgit = proj / ".git"
    main_before = git(proj, "rev-parse", "main")
    remote_before = git(remote, "for-each-ref", "--format=%(refname) %(objectname)")
    guarded = [p for p in (pgit / "config", pgit / "hooks", pgit / "packed-refs") if p.exists()]
    hashes = _hash_tree(guarded)
    tries = {
        "objects": f"mkdir -p {pgit}/objects/ab && echo x > {pgit}/objects/ab/cdef0123",
        "ref_main": f"sha=$(git rev-parse HEAD) && echo $sha > {pgit}/refs/heads/main",
        "new_ref": f"echo {main_before} > {pgit}/refs/heads/planted",
        "config": f"git config --file {pgit}/config alias.ship 'push origin main'",
        "hook": f"echo 'exit 0' > {pgit}/hooks/pre-commit",
        "push_remote": f"git push {remote} HEAD:main",
        "push_origin": "git push origin HEAD:main",
        "update_ref": f"git -C {proj} update-ref refs/heads/other {main_before}",
        "update_ref_gitdir": f"git --git-dir={pgit} update-ref refs/heads/planted2 {main_before}",
        "git_commit_there": f"git -C {proj} commit -q --allow-empty -m evil",
    }
    lines = "".join(f"( {cmd} ) >/dev/null 2>&1; echo \"{name} $?\" >> src/git_attacks.txt\n"
                    for name, cmd in tries.items())
    (proj / "agent.sh").write_text(
        "set -u\n"
        "sed -i 's/a - b/a + b/' src/calc.py\n"
        "git add src/calc.py && git commit -q -m 'fix add'\n" + lines +  # a commit the pushes would carry
        "echo 'NOTE = 1' > src/extra.py\n"  # left uncommitted: it lands uncommitted
        "loopx evidence add --kind note --summary 'fixed add in a private clone' --todo \"$LOOPX_TODO_ID\"\n"
        "loopx todo done \"$LOOPX_TODO_ID\"\n"
        "pwd > src/where.txt\n")
    status = git(proj, "status", "--porcelain")
    bindir = os.path.dirname(sys.executable)
    r = run_loopx(["run", "--agent-cmd", "sh agent.sh", "--once", "--json"], cwd=proj,
                  env={"HOME": str(world["home"]), "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}, timeout=600)
    assert r.code == 0, r.out + r.err
    t = r.data["turns"][0]
    assert t["agent_exit"] == 0 and t["worktree"]["kept"] is False, t
    assert t["merge"]["action"] == "merged", json.dumps(t)
    # the agent saw its clone at the project's path (hosts keep their paths, trust and settings)
    assert (proj / "src" / "where.txt").read_text().strip() == str(proj)
    results = dict(line.split() for line in (proj / "src" / "git_attacks.txt").read_text().splitlines())
    assert set(results) == set(tries)
    for name in ("config", "hook", "push_remote", "push_origin"):  # read-only even in the clone; no remote
        assert results[name] != "0", (name, results)
    # ground truth: nothing planted in the project's .git, the remote did not move
    assert not (pgit / "objects" / "ab" / "cdef0123").exists()
    assert not (pgit / "refs" / "heads" / "planted").exists()
    for ref in ("refs/heads/planted2", "refs/heads/other"):
        assert git(proj, "rev-parse", "-q", "--verify", ref, check=False) == "", ref
    assert _hash_tree(guarded) == hashes
    assert git(remote, "for-each-ref", "--format=%(refname) %(objectname)") == remote_before
    # ordinary work landed on the user's branch: the agent's commit; what it left uncommitted is
    # uncommitted in the checkout, as if it had worked there (loopx commits nothing for it)
    log = git(proj, "log", "--format=%s", f"{main_before}..main").splitlines()
    assert "fix add" in log and not any(s.startswith("loopx: run-") for s in log), log
    assert "a + b" in (proj / "src" / "calc.py").read_text()
    assert (proj / "src" / "extra.py").read_text() == "NOTE = 1\n"
    now = git(proj, "status", "--porcelain").splitlines()
    assert set(status.splitlines()) <= set(now), "the user's own files stay theirs, uncommitted"
    assert set(now) - set(status.splitlines()) == {"?? src/extra.py", "?? src/git_attacks.txt", "?? src/where.txt"}
    state = Store.open(str(proj)).load()
    assert state["todos"][t["todo_id"]]["status"] == "done"
    ev = [e for e in state["evidence"].values() if e["summary"] == "fixed add in a private clone"]
    assert ev and ev[0]["actor"].startswith("agent:")
    assert not (proj / ".loopx" / "worktrees" / t["run_id"]).exists(), "the workspace is removed after the turn"


def test_workflow_skills_install_prints_the_shell_functions_that_make_loopx_sandbox_the_default(world, tmp_path):
    """`workflow-skills --install` suggests, and does not write, a shell function per host; the
    printed function really starts the host inside the sandbox."""
    proj, home = world["project"], world["home"]
    profiles = {n: (home / n).read_text() if (home / n).exists() else None for n in (".bashrc", ".zshrc", ".profile")}
    r = run_loopx(["workflow-skills", "--install", "--host", "claude-code", "--scope", "project"], cwd=proj,
                  env={"HOME": str(home)})
    assert r.code == 0, r.err
    line = 'claude() { loopx sandbox -- claude "$@"; }'
    assert line in r.out and "loopx does not write it" in r.out, r.out
    j = run_loopx(["workflow-skills", "--install", "--host", "codex", "--scope", "project", "--format", "json"],
                  cwd=proj, env={"HOME": str(home)})
    assert json.loads(j.out)["data"]["sandbox_default"] == ['codex() { loopx sandbox -- codex "$@"; }']
    assert {n: (home / n).read_text() if (home / n).exists() else None for n in profiles} == profiles
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    (bindir / "claude").write_text("#!/bin/sh\necho \"inside=${LOOPX_SANDBOXED:-no} $*\"\n"
                                   "cat \"$HOME/.ssh/id_ed25519\" 2>/dev/null || echo no-ssh\n")
    (bindir / "claude").chmod(0o755)
    path = os.pathsep.join([str(bindir), os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    out = subprocess.run(["bash", "-c", f"{line}\nclaude hello"], cwd=proj, capture_output=True, text=True,
                         env=subprocess_env({"HOME": str(home), "PATH": path}), timeout=300)
    assert out.stdout.split() == ["inside=1", "hello", "no-ssh"], out.stdout + out.stderr
