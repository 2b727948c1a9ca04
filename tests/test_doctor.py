"""loopx doctor: a healthy project exits 0; each seeded problem is reported with its fix and exits 1;
``--fix`` repairs the safe ones (a second run exits 0) and never touches what is not safe to fix."""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import run_loopx
from loopx.kernel.storage import caches
from loopx.kernel.storage.store import Store


@pytest.fixture(autouse=True)
def healthy_env(tmp_path, monkeypatch):
    """A private HOME and this installation's ``loopx`` first on PATH (so the path check is ok)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    path = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    found = shutil.which("loopx", path=path)
    if os.name != "nt" and (found is None or not _same_python(found)):
        shim = tmp_path / "bin"
        shim.mkdir()
        (shim / "loopx").write_text(f"#!{sys.executable}\nfrom loopx.cli import entry\nentry()\n")
        (shim / "loopx").chmod(0o755)
        path = os.pathsep.join([str(shim), path])
    monkeypatch.setenv("PATH", path)
    return home


def _same_python(script: str) -> bool:
    from loopx.ops.pathcheck import _same_file, _script_python

    py = _script_python(script)
    return bool(py) and os.path.isabs(py) and _same_file(py, sys.executable)


def doctor(cli, *args):
    r = cli("doctor", *args, json=True)
    checks = {c["id"]: c for c in r.data["checks"]}
    return r, checks


def problems(checks: dict) -> dict:
    return {k: c for k, c in checks.items() if c["status"] in ("warning", "error")}


def events_file(project: Path) -> Path:
    return project / ".loopx" / "events.jsonl"


# ------------------------------------------------------------------ seeded problems
def seed_torn(project: Path) -> None:
    with open(events_file(project), "ab") as fh:
        fh.write(b'{"v":1,"seq":99,"id":"half')


def seed_garbage(project: Path) -> None:
    lines = events_file(project).read_bytes().split(b"\n")
    lines.insert(1, b"not json at all")
    events_file(project).write_bytes(b"\n".join(lines))


def seed_ignore(project: Path) -> None:
    (project / ".loopx" / ".gitignore").write_text("# mine\nlock\n")


def seed_stale_skill(project: Path) -> None:
    from loopx.hosts import files

    assert run_loopx(["workflow-skills", "--install", "--host", "claude-code", "--scope", "project"],
                     cwd=project, env=_env()).code == 0
    skill = next((project / ".claude" / "skills").rglob("SKILL.md"))
    old = "---\nname: loopx\ndescription: an older loopx wrote this\n---\nold text\n"
    skill.write_text(old, encoding="utf-8")
    manifest = files.load_manifest()
    manifest["files"][str(skill)]["sha256"] = files.sha(old)  # what an older loopx recorded
    files.save_manifest(manifest)


def seed_newer_format(project: Path) -> None:
    (project / ".loopx" / "format.json").write_text('{"format": 99, "project_id": "p-x"}\n')


def _env() -> dict:
    return {k: os.environ[k] for k in ("HOME", "PATH", "LOOPX_HOME") if k in os.environ}


SEEDS = {
    "torn tail": (seed_torn, "store.tail", "error", True),
    "garbage line": (seed_garbage, "store.lines", "error", True),
    "missing ignore rule": (seed_ignore, "gitignore", "warning", True),
    "stale skill": (seed_stale_skill, "hosts.project", "warning", True),
    "newer format": (seed_newer_format, "store.format", "error", False),
}


def test_healthy_project_exits_0(goal, cli):
    r, checks = doctor(cli)
    assert r.code == 0, problems(checks)
    assert r.json["exit_code"] == 0
    for cid in ("python", "path", "install", "store.format", "store.lines", "store.tail", "gitignore", "clock"):
        assert checks[cid]["status"] == "ok", checks[cid]
    for c in checks.values():
        assert set(c) >= {"id", "status", "finding", "fix"}
        assert c["status"] in ("ok", "warning", "error", "skipped")


@pytest.mark.parametrize("name", list(SEEDS))
def test_seeded_problem_reported_and_fixed(name, goal, cli, project):
    seed, cid, status, safe = SEEDS[name]
    seed(project)
    r, checks = doctor(cli)
    assert r.code == 1
    assert checks[cid]["status"] == status, checks[cid]
    assert checks[cid]["fix"], "every problem names its fix"
    text = cli("doctor")
    assert text.code == 1 and "fix:" in text.out and cid in text.out

    fixed, checks = doctor(cli, "--fix")
    if safe:
        assert fixed.code == 0, (fixed.data["fixed"], problems(checks))
        assert all(f["done"] for f in fixed.data["fixed"])
        again, checks = doctor(cli)
        assert again.code == 0, problems(checks)
    else:
        assert fixed.code == 1 and checks[cid]["status"] == status
        assert json.loads((project / ".loopx" / "format.json").read_text())["format"] == 99


def test_fix_keeps_quarantined_bytes_and_records_the_repair(goal, cli, project):
    seed_garbage(project)
    seed_torn(project)
    before = cli("todo", "list", json=True).data
    r = cli("doctor", "--fix")
    assert r.code == 0, r.out
    assert "fixed:" in r.out and "quarantine" in r.out
    q = project / ".loopx" / "quarantine"
    kept = b"".join(p.read_bytes() for p in q.iterdir())
    assert b"not json at all" in kept and b'"id":"half' in kept
    assert cli("todo", "list", json=True).data == before  # nothing good was lost
    types = [rec["type"] for rec in Store.open(str(project)).iter_records()]
    assert types.count("store.repaired") == 2


def test_damaged_line_quarantined_without_leaving_a_seq_gap_warning(goal, cli, project):
    path = events_file(project)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"seq":3', b'"seq":3x', 1)  # damaged: no longer JSON
    path.write_bytes(b"\n".join(lines))
    r, checks = doctor(cli)
    assert checks["store.lines"]["status"] == "error"
    r, checks = doctor(cli, "--fix")
    assert r.code == 0, problems(checks)
    assert checks["store.seq"]["status"] == "ok"


def test_a_hand_edited_line_is_never_dropped_and_status_does_not_pretend_the_project_is_empty(goal, cli, project):
    path = events_file(project)
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b"Make the tests pass", b"Make the tests PASS", 1))  # valid JSON, stale CRC
    r = cli("status")
    assert "no goals could be read" in r.out and "no goals yet" not in r.out, r.out
    assert "could not be read" in r.out and "next: loopx doctor" in r.out and "start-goal" not in r.out, r.out
    # starting over never takes the lost goal's id (it would inherit its todos, budget and gates)
    again = cli("start-goal", "--goal-text", "Make the tests pass", "--goal-id", "g1", "--done-when", "x")
    assert again.code == 4 and "its start could not be read" in again.err and "loopx doctor" in again.err, again.err
    fresh = cli("start-goal", "--goal-text", "g1", "--done-when", "x", json=True)  # its slug is the lost id
    assert fresh.code == 0 and fresh.data["goal_id"] != "g1" and not fresh.data["todo_ids"], fresh.data
    todos = cli("todo", "list", "--goal-id", fresh.data["goal_id"], json=True).data["todos"]
    assert todos == [], todos
    edited = path.read_bytes()
    r, checks = doctor(cli, "--fix")
    assert r.code == 1
    lines = checks["store.lines"]
    assert lines["status"] == "error" and "edited by hand" in lines["finding"], lines
    assert "undo the edit of .loopx/events.jsonl line 1" in lines["fix"] and not lines["fixable"], lines
    assert "git log" not in lines["fix"] and "git does not track .loopx/" in lines["fix"], lines  # not a git repo
    assert path.read_bytes() == edited  # the edited record stays where it was: nothing moved to quarantine
    seed_garbage(project)  # a damaged line beside it: --fix moves that one, never the edited one
    r, checks = doctor(cli, "--fix")
    assert b"Make the tests PASS" in path.read_bytes() and b"not json at all" not in path.read_bytes()
    assert "moves the other 1 bad line(s)" not in checks["store.lines"]["fix"]  # after the fix: only the edit left
    path.write_bytes(path.read_bytes().replace(b"Make the tests PASS", b"Make the tests pass", 1))  # undone
    assert cli("todo", "list", json=True).data["todos"], "the goal's todos came back"
    r, checks = doctor(cli)
    assert checks["store.lines"]["status"] == "ok", checks["store.lines"]


def test_conflict_markers_are_reported_and_never_rewritten(goal, cli, project):
    path = events_file(project)
    path.write_bytes(path.read_bytes() + b"<<<<<<< HEAD\n=======\n>>>>>>> theirs\n")
    raw = path.read_bytes()
    r, checks = doctor(cli, "--fix")
    assert r.code == 1
    assert checks["store.lines"]["status"] == "error" and "conflict" in checks["store.lines"]["finding"]
    assert "--ours" in checks["store.lines"]["fix"]
    assert path.read_bytes() == raw


def test_corrupt_format_json_does_not_break_doctor(goal, cli, project):
    (project / ".loopx" / "format.json").write_text("{oops")
    r, checks = doctor(cli, "--fix")
    assert r.code == 1
    assert checks["store.format"]["status"] == "error"
    assert "git checkout" in checks["store.format"]["fix"]
    assert checks["store.lines"]["status"] == "ok"  # the events are still scanned


def test_missing_format_json_is_one_finding_that_connect_fixes(goal, cli, project):
    (project / ".loopx" / "format.json").unlink()
    r, checks = doctor(cli)
    assert r.code == 1
    assert {k: c["finding"] for k, c in problems(checks).items()} == \
        {"store.format": ".loopx/format.json is missing (the store cannot be read without it)"}, problems(checks)
    assert "loopx connect" in checks["store.format"]["fix"]
    assert cli("connect").code == 0
    r, checks = doctor(cli)
    assert r.code == 0, problems(checks)
    assert cli("todo", "list", json=True).data["todos"]  # the events were untouched


def test_merged_logs_duplicate_ids_are_read_once_and_explained(goal, cli, project):
    path = events_file(project)
    before = Store.open(str(project)).load()
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + lines[-2:]))
    r, checks = doctor(cli)
    assert checks["store.merge"]["status"] == "ok"
    assert "duplicate id" in checks["store.merge"]["finding"] and "union" in checks["store.merge"]["finding"]
    after = Store.open(str(project)).load()
    assert after["todos"] == before["todos"] and after["goals"] == before["goals"]


def test_unknown_event_type_is_a_warning(goal, cli, project):
    from loopx.kernel.storage.store import Draft

    Store.open(str(project)).transact(lambda s, now: [Draft("widget.frobbed", None, {})], actor="human:t")
    r, checks = doctor(cli)
    assert r.code == 1
    assert checks["store.types"]["status"] == "warning" and "widget.frobbed" in checks["store.types"]["finding"]


def test_snapshot_that_disagrees_with_the_log_is_rebuilt(goal, cli, project):
    store = Store.open(str(project))
    state = store.load(save_snapshot=False)
    state["goals"]["g1"]["objective"] = "tampered"
    caches.save_snapshot(store, state)
    r, checks = doctor(cli)
    assert r.code == 1 and checks["store.snapshot"]["status"] == "error"
    r, checks = doctor(cli, "--fix")
    assert r.code == 0, problems(checks)
    assert Store.open(str(project)).load()["goals"]["g1"]["objective"] == "Make the tests pass"


def test_outside_a_project_checks_the_installation_only(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r, checks = doctor(cli)
    assert r.code == 0, problems(checks)
    assert r.data["project"] is None
    assert not [c for c in checks if c.startswith("store.") or c == "gitignore"]
    assert "installation checks only" in cli("doctor").out


def test_project_option_not_connected(tmp_path, cli):
    r, checks = doctor(cli, "--project", str(tmp_path))
    assert r.code == 1
    assert checks["project"]["status"] == "warning" and "loopx connect" in checks["project"]["fix"]


def test_clock_checks(goal, cli, project, monkeypatch):
    monkeypatch.setenv("LOOPX_NOW", "2030-01-01T00:00:00Z")
    r, checks = doctor(cli)
    assert checks["clock"]["status"] == "warning" and "LOOPX_NOW" in checks["clock"]["finding"]
    cli("todo", "add", "from the future")
    monkeypatch.delenv("LOOPX_NOW")
    r, checks = doctor(cli)
    assert r.code == 1
    assert checks["clock"]["status"] == "warning" and "behind" in checks["clock"]["finding"]


def test_loopx_on_path_with_another_version_is_a_warning(tmp_path, cli, monkeypatch):
    if os.name == "nt":
        pytest.skip("POSIX shell script stand-in")
    other = tmp_path / "other"
    other.mkdir()
    (other / "loopx").write_text("#!/bin/sh\necho 'loopx 0.0.1'\n")
    (other / "loopx").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(other), os.environ["PATH"]]))
    monkeypatch.chdir(tmp_path)
    r, checks = doctor(cli)
    assert r.code == 1
    assert checks["path"]["status"] == "warning" and "0.0.1" in checks["path"]["finding"]


def test_network_and_synced_folders_are_warned_about():
    from loopx.ops.pathcheck import location

    mounts = "server:/export /mnt/nfs nfs4 rw 0 0\n/dev/sda1 / ext4 rw 0 0\n"
    assert location("/mnt/nfs/proj/.loopx", mounts)["status"] == "warning"
    assert "nfs4" in location("/mnt/nfs/proj/.loopx", mounts)["finding"]
    assert location("/home/u/proj/.loopx", mounts)["status"] == "ok"
    assert location("/home/u/Dropbox/proj/.loopx", mounts)["status"] == "warning"
    assert location("/Users/u/Library/CloudStorage/OneDrive-Acme/p/.loopx", "")["status"] == "warning"
    smb = "//nas/share /mnt/share cifs rw 0 0\n"
    assert location("/mnt/share/p/.loopx", smb)["status"] == "warning"
    assert location("/home/u/p/.loopx", "/dev/fuse /home fuse-overlayfs rw 0 0\n")["status"] == "ok"


def test_macos_mount_table_is_understood():
    from loopx.ops.pathcheck import from_mount_output, location

    table = from_mount_output("/dev/disk3s1s1 on / (apfs, sealed, local, read-only, journaled)\n"
                              "//ada@nas/team share on /Volumes/team share (smbfs, nodev, nosuid)\n")
    assert location("/Volumes/team share/p/.loopx", table)["status"] == "warning"
    assert "smbfs" in location("/Volumes/team share/p/.loopx", table)["finding"]
    assert location("/Users/ada/p/.loopx", table)["status"] == "ok"


def test_modified_skill_is_reported_and_kept(goal, cli, project):
    assert run_loopx(["workflow-skills", "--install", "--host", "claude-code", "--scope", "project"],
                     cwd=project, env=_env()).code == 0
    skill = next((project / ".claude" / "skills").rglob("SKILL.md"))
    skill.write_text("my own notes\n", encoding="utf-8")
    r, checks = doctor(cli, "--fix")
    assert r.code == 1
    assert checks["hosts.project"]["status"] == "warning" and "modified" in checks["hosts.project"]["finding"]
    assert skill.read_text(encoding="utf-8") == "my own notes\n"


def test_real_process_cycle(goal, project):
    seed_torn(project)
    env = _env()
    assert run_loopx(["doctor"], cwd=project, env=env).code == 1
    fixed = run_loopx(["doctor", "--fix"], cwd=project, env=env)
    assert fixed.code == 0, fixed.out + fixed.err
    assert "fixed: repair_torn_tail" in fixed.out
    assert run_loopx(["doctor"], cwd=project, env=env).code == 0


def test_hooks_pointing_at_another_loopx_are_stale(goal, cli, project):
    assert run_loopx(["hooks", "--install", "--host", "claude-code"], cwd=project, env=_env()).code == 0
    r, checks = doctor(cli)
    assert checks["hooks.project.claude-code"]["status"] == "ok"
    conf = project / ".claude" / "settings.local.json"
    conf.write_text(conf.read_text().replace("hook stop", "hook stop --max-continuations 99"))
    r, checks = doctor(cli)
    assert r.code == 1
    c = checks["hooks.project.claude-code"]
    assert c["status"] == "warning" and "loopx hooks --install --host claude-code" in c["fix"]


def test_unreadable_event_file_is_a_finding_not_a_crash(goal, cli, project):
    path = events_file(project)
    raw = path.read_bytes()
    path.unlink()
    path.mkdir()  # a folder where the log should be: unreadable for any user
    try:
        r, checks = doctor(cli)
        assert r.code == 1
        assert checks["store.lines"]["status"] == "error" and "cannot read" in checks["store.lines"]["finding"]
    finally:
        path.rmdir()
        path.write_bytes(raw)


def test_a_failing_check_is_a_finding_not_a_crash(goal, cli, monkeypatch):
    from loopx.ops import doctor as ops

    def boom(t):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(ops, "INSTALL_CHECKS", (*ops.INSTALL_CHECKS, boom))
    r, checks = doctor(cli)
    assert r.code == 1
    assert checks["boom"]["status"] == "error" and "kaboom" in checks["boom"]["finding"]
    assert checks["store.tail"]["status"] == "ok"  # the other checks still ran


def test_bom_and_crlf_are_reported_and_left_alone(goal, cli, project):
    path = events_file(project)
    raw = b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n")
    path.write_bytes(raw)
    r, checks = doctor(cli, "--fix")
    assert r.code == 1
    c = checks["store.encoding"]
    assert c["status"] == "warning" and "BOM" in c["finding"] and "CRLF" in c["finding"]
    assert checks["store.lines"]["status"] == "ok"  # still readable line by line
    assert path.read_bytes() == raw


def test_garbage_snapshot_file_is_harmless(goal, cli, project):
    (project / ".loopx" / "cache" / "snapshot.bin").write_bytes(b"\x00garbage" * 50)
    r, checks = doctor(cli)
    assert r.code == 0, problems(checks)
    assert "stale" in checks["store.snapshot"]["finding"]
    assert cli("todo", "list").code == 0


def test_quarantine_in_a_store_with_a_snapshot(goal, cli, project):
    for i in range(205):
        assert cli("todo", "add", f"t{i}", "--quiet").code == 0
    # writers keep only the live view; a full read (done todos too) writes the snapshot
    assert cli("todo", "list", "--status", "done").code == 0
    assert (project / ".loopx" / "cache" / "snapshot.bin").exists()
    lines = events_file(project).read_bytes().split(b"\n")
    lines.insert(3, b"{garbage in the middle}")
    events_file(project).write_bytes(b"\n".join(lines))
    r, checks = doctor(cli, "--fix")
    assert r.code == 0, problems(checks)
    titles = {t["title"] for t in cli("todo", "list", json=True).data["todos"]}
    assert {f"t{i}" for i in range(205)} <= titles  # every good event survived the rewrite


def test_fix_while_other_processes_write_loses_nothing(goal, project):
    from concurrent.futures import ThreadPoolExecutor

    seed_garbage(project)
    env = _env()

    def writer(w):
        return [run_loopx(["todo", "add", f"w{w}-{i}", "--quiet"], cwd=project, env=env).code for i in range(8)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        writers = [pool.submit(writer, w) for w in range(3)]
        fixed = pool.submit(run_loopx, ["doctor", "--fix"], project, env)
        codes = [c for f in writers for c in f.result()]
        fix = fixed.result()
    assert codes == [0] * 24
    assert "fixed: quarantine_bad_lines" in fix.out, fix.out + fix.err
    listed = run_loopx(["todo", "list", "--format", "json"], cwd=project, env=env).json["data"]["todos"]
    titles = {t["title"] for t in listed}
    assert {f"w{w}-{i}" for w in range(3) for i in range(8)} <= titles
    assert run_loopx(["doctor"], cwd=project, env=env).code == 0


def test_missing_bundled_data_is_an_error(goal, cli, monkeypatch, tmp_path):
    import loopx.resources

    monkeypatch.setattr(loopx.resources, "data_path", lambda *parts: tmp_path.joinpath("nowhere", *parts))
    r, checks = doctor(cli)
    assert r.code == 1
    assert checks["package"]["status"] == "error" and "skills" in checks["package"]["finding"]


def test_a_broken_user_config_is_an_error_and_should_run_says_so(goal, cli):
    # usage limits, notification targets and signing live in the user config; a file that does not
    # parse used to be noticed only by the commands that write it
    from loopx import config

    r, checks = doctor(cli)
    assert checks["config"]["status"] == "ok"
    path = Path(config.config_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[usage.claude-code]\nblock_tokens = [broken\n")
    r, checks = doctor(cli)
    assert r.code == 1 and checks["config"]["status"] == "error"
    assert str(path) in checks["config"]["finding"] and checks["config"]["fix"]
    sr = cli("quota", "should-run", "--goal-id", goal, "--skip-exit", "0", json=True)
    assert sr.code == 0  # cron keeps working
    assert any("cannot be read" in w and "usage limits" in w for w in sr.json["warnings"]), sr.json


def test_a_console_script_of_old_pip_is_named_as_slower(tmp_path, cli, monkeypatch):
    if os.name == "nt":
        pytest.skip("POSIX console script stand-in")
    old = tmp_path / "oldpip"
    old.mkdir()
    (old / "loopx").write_text(f"#!{sys.executable}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                               "from loopx.cli import entry\nif __name__ == '__main__':\n"
                               "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                               "    sys.exit(entry())\n")
    (old / "loopx").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(old), os.environ["PATH"]]))
    monkeypatch.chdir(tmp_path)
    r, checks = doctor(cli)
    assert checks["path"]["status"] == "ok" and "pip < 25" in checks["path"]["finding"]
    assert "pip install -U pip" in checks["path"]["fix"]


def test_fix_hints_name_git_history_only_when_git_tracks_the_log(goal, cli, project):
    import subprocess

    def git(*args):
        subprocess.run(["git", *args], cwd=project, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-f", ".loopx/events.jsonl")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "log")
    path = events_file(project)
    path.write_bytes(path.read_bytes().replace(b"Make the tests pass", b"Make the tests PASS", 1))
    r, checks = doctor(cli)
    assert "`git log -p .loopx/`" in checks["store.lines"]["fix"], checks["store.lines"]
