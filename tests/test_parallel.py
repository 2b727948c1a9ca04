"""Several agents on one machine (docs/multi-agent.md): ``loopx run --parallel N`` with a scripted
agent, each turn in its own git worktree on branch ``loopx/<run-id>``, merged back (or gated, or
turned into a conflict todo), worktrees cleaned up; ``max_parallel`` is a human-only setting."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import run_loopx, subprocess_env
from loopx.kernel.storage.store import Store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="shell agents and git worktrees are POSIX here")

# the scripted agent: writes a file named after its todo, in its own working directory (the worktree)
AGENT = 'printf "%s\\n" "$LOOPX_TODO_ID" > "work-$LOOPX_TODO_ID.txt"; pwd > "$CWD_LOG/cwd-$LOOPX_RUN_ID"'


def git(cwd, *args) -> str:
    env = subprocess_env({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                          "GIT_COMMITTER_EMAIL": "t@t"})
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


CWD_LOG = Path()  # where the agent records its working folder; set for each test by _cwd_log


@pytest.fixture(autouse=True)
def _cwd_log(tmp_path, monkeypatch):
    """The agent records its folder outside ``.loopx/``: a sandboxed agent cannot write the store."""
    global CWD_LOG
    CWD_LOG = tmp_path / "cwd-log"
    CWD_LOG.mkdir()
    monkeypatch.setenv("CWD_LOG", str(CWD_LOG))
    monkeypatch.setenv("LOOPX_SANDBOX_WRITE", str(CWD_LOG))


@pytest.fixture
def repo(project: Path) -> Path:
    git(project, "init", "-q", "-b", "main")
    (project / "README").write_text("hello\n")
    git(project, "add", "README")
    git(project, "commit", "-q", "-m", "init")
    return project


def _goal(cli, todos=("one", "two", "three"), verify="ls work-*.txt", protect=None, max_parallel=3):
    args = ["start-goal", "--goal-text", "Ship it", "--goal-id", "g1", "--verify", verify]
    for t in todos:
        args += ["--todo", t]
    for p in protect or ():
        args += ["--protect", p]
    assert cli(*args).code == 0
    if max_parallel > 1:
        r = cli("goal", "update", "g1", "--max-parallel", max_parallel)
        assert r.code == 0, r.err


def _state(project: Path) -> dict:
    return Store.open(str(project)).load()


def _branches(project: Path) -> list[str]:
    return git(project, "branch", "--list", "loopx/*", "--format=%(refname:short)").split()


@pytest.mark.parametrize("commit_store", [False, True], ids=["store-untracked", "store-committed"])
def test_parallel_3_three_worktrees_three_verified_runs_three_clean_merges(repo, cli, commit_store):
    _goal(cli)
    if commit_store:  # .loopx/ tracked (the default advice): it keeps changing in the checkout meanwhile
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "track .loopx/")
    r = run_loopx(["run", "--parallel", "3", "--agent-cmd", AGENT, "--as", "bot", "--json"], cwd=repo, timeout=180)
    assert r.code == 0, r.out + r.err
    d = r.data
    turns = d["turns"]
    assert len(turns) == 3
    assert all(t["verified"] and t["result"] == "completion" for t in turns)
    assert sorted(t["todo_id"] for t in turns) == sorted(_state(repo)["todos"])
    # each run worked in its own worktree on its own branch, and the agents were bot-1..bot-3
    cwds = {(CWD_LOG / f"cwd-{t['run_id']}").read_text().strip() for t in turns}
    assert len(cwds) == 3 and all(f"/.loopx/worktrees/{t['run_id']}" in " ".join(cwds) for t in turns)
    agents = {rr["agent"] for rr in d["runners"]}
    assert agents <= {"agent:bot-1", "agent:bot-2", "agent:bot-3"} and len(agents) == 3
    # three clean merges into main, the work is on main, no worktree or run branch left behind
    assert [t["merge"]["action"] for t in turns] == ["merged"] * 3
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    for t in turns:
        assert (repo / f"work-{t['todo_id']}.txt").read_text().strip() == t["todo_id"]
    merges = git(repo, "log", "--merges", "--format=%s", "main").splitlines()
    assert git(repo, "diff", "--name-only", "HEAD~3", "HEAD", "--", ".loopx") == ""  # merges never touch the store
    assert len(merges) == 3 and all(m.startswith("loopx: merge loopx/run-") for m in merges)
    assert _branches(repo) == []
    assert not list((repo / ".loopx" / "worktrees").iterdir())
    assert "worktrees" not in git(repo, "worktree", "list")
    assert git(repo, "status", "--porcelain", "--untracked-files=all", "--", ".", ":(exclude).loopx") == ""
    state = _state(repo)
    assert all(t["status"] == "done" for t in state["todos"].values())
    assert sum(e[1] for e in state["spends"]["g1"]) == 3


def test_protected_merges_wait_at_three_merge_gates_then_merge_after_approval(repo, cli):
    _goal(cli, protect=["merge"])
    r = run_loopx(["run", "--parallel", "3", "--agent-cmd", AGENT, "--json"], cwd=repo, timeout=180)
    assert r.code == 0, r.out + r.err
    turns = r.data["turns"]
    assert [t["merge"]["action"] for t in turns] == ["gated"] * 3
    state = _state(repo)
    gates = [g for g in state["gates"].values() if g["kind"] == "merge"]
    assert len(gates) == 3 and all(g["status"] == "pending" for g in gates)
    for t in turns:  # the gate names the branch and its diff stat
        g = state["gates"][t["merge"]["gate_id"]]
        assert f"loopx/{t['run_id']}" in g["question"] and f"work-{t['todo_id']}.txt" in g["context"]
    assert git(repo, "log", "--merges", "--format=%s", "main") == ""  # nothing merged into main
    assert len(_branches(repo)) == 3  # the branches wait; the worktrees are gone
    assert not list((repo / ".loopx" / "worktrees").iterdir())
    # the look for approved merges before every turn: the live view answers while none is approved;
    # an approved one needs its finished run, which the view may have left out (then the full state)
    from loopx.kernel.storage.store import Store
    from loopx.runner import merge

    store = Store.open(str(repo))
    assert merge._approved_merges(store.load(view="live")) == []
    for g in gates:
        assert cli("gate", "approve", g["id"], "--confirm", g["id"]).code == 0
    found = store.read(merge._approved_merges)
    assert found == merge._approved_merges(store.load()) and len(found) == 3
    r2 = run_loopx(["run", "--parallel", "1", "--agent-cmd", AGENT, "--json"], cwd=repo, timeout=120)
    assert r2.code == 0, r2.out + r2.err
    merged = [m for rr in r2.data["runners"] for m in rr["merges"]]
    assert [m["action"] for m in merged] == ["merged"] * 3
    assert len(git(repo, "log", "--merges", "--format=%s", "main").splitlines()) == 3
    assert _branches(repo) == []


def test_conflicting_merge_becomes_a_todo_and_main_stays_clean(repo, cli):
    _goal(cli, todos=("one",), max_parallel=2)
    # the agent edits README; main moves on README meanwhile (a human commit while the agent works)
    agent = (AGENT + '; echo agent > README; git -C "$LOOPX_PROJECT_DIR" -c user.name=h -c user.email=h@h commit -q '
             '--allow-empty -m noop; printf "human\\n" > "$LOOPX_PROJECT_DIR/README"; '
             'git -C "$LOOPX_PROJECT_DIR" -c user.name=h -c user.email=h@h commit -qam human')
    # the "human" commit comes from the agent's shell: outside the sandbox, which forbids it (test_sandbox.py)
    r = run_loopx(["run", "--parallel", "1", "--agent-cmd", agent, "--once", "--json"], cwd=repo, timeout=120,
                  env={"LOOPX_SANDBOX": "off"})
    assert r.code == 0, r.out + r.err
    t = r.data["turns"][0]
    assert t["verified"] and t["merge"]["action"] == "conflict"
    m = t["merge"]
    assert m["files"] == ["README"]
    todo = _state(repo)["todos"][m["todo_id"]]
    assert f"loopx/{t['run_id']}" in todo["title"] and todo["status"] == "open"
    assert _branches(repo) == [f"loopx/{t['run_id']}"]  # kept for the resolving turn
    assert not list((repo / ".loopx" / "worktrees").iterdir())
    assert (repo / "README").read_text() == "human\n"
    assert git(repo, "status", "--porcelain", "--", "README") == ""
    assert "<<<<<<<" not in (repo / "README").read_text()


def test_failed_run_keeps_its_worktree_and_doctor_lists_it(repo, cli):
    _goal(cli, todos=("one",), max_parallel=2)
    r = run_loopx(["run", "--parallel", "1", "--agent-cmd", "echo half > half.txt; exit 3", "--json"], cwd=repo, timeout=120)
    assert r.code == 1
    t = r.data["turns"][0]
    assert t["result"] == "failed" and t["worktree"]["kept"] is True
    kept = repo / ".loopx" / "worktrees" / t["run_id"]
    assert (kept / "half.txt").exists()
    d = run_loopx(["doctor", "--json"], cwd=repo)
    check = next(c for c in d.json["data"]["checks"] if c["id"] == "worktrees")
    assert check["status"] == "warning" and t["run_id"] in check["finding"]


def test_status_shows_which_run_is_in_which_worktree(repo, cli):
    _goal(cli, todos=("one",), max_parallel=2)
    agent = 'touch "$CWD_LOG/go"; while [ ! -f "$CWD_LOG/stop" ]; do sleep 0.1; done'
    p = subprocess.Popen([os.sys.executable, "-m", "loopx", "run", "--parallel", "1", "--agent-cmd", agent, "--json"],
                         cwd=repo, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        go = CWD_LOG / "go"
        for _ in range(600):
            if go.exists() or p.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"])
        assert go.exists()
        s = run_loopx(["status", "--json"], cwd=repo)
        runs = s.json["data"]["goals"][0]["open_runs"]
        assert len(runs) == 1 and runs[0]["worktree"]["branch"] == f"loopx/{runs[0]['id']}"
        assert runs[0]["worktree"]["path"].endswith(f".loopx/worktrees/{runs[0]['id']}")
        assert f"loopx/{runs[0]['id']}" in run_loopx(["status"], cwd=repo).out
    finally:
        (CWD_LOG / "stop").touch()
        p.communicate(timeout=120)


def test_parallel_beyond_max_parallel_is_refused(repo, cli):
    _goal(cli, max_parallel=1)
    r = run_loopx(["run", "--parallel", "2", "--agent-cmd", AGENT], cwd=repo)
    assert r.code == 2 and "max-parallel 2" in r.err and "hint:" in r.err
    assert _state(repo)["runs"] == {}


def test_parallel_needs_git(project, cli):
    _goal(cli, max_parallel=2)
    r = run_loopx(["run", "--parallel", "2", "--agent-cmd", AGENT], cwd=project)
    assert r.code == 2 and "git" in r.err and "hint:" in r.err


@pytest.mark.parametrize("marker", [None, "LOOPX_AGENT", "CLAUDECODE", "CODEX_SANDBOX", "CURSOR_AGENT"])
def test_raising_max_parallel_is_human_only(project, cli, marker):
    _goal(cli, max_parallel=1)
    env = subprocess_env({marker: "1"} if marker else None)
    args = ["goal", "update", "g1", "--max-parallel", "4"] + (["--agent", "sneaky"] if marker is None else [])
    r = run_loopx(args, cwd=project, env=env)
    assert r.code == 4 and "human" in r.err and "hint:" in r.err
    assert _state(project)["goals"]["g1"].get("max_parallel", 1) == 1
    # lowering (or keeping) it is allowed to anyone; a human may raise it
    assert cli("goal", "update", "g1", "--max-parallel", "3").code == 0
    low = run_loopx(["goal", "update", "g1", "--max-parallel", "2"], cwd=project, env=env)
    assert low.code == 0, low.err
    assert _state(project)["goals"]["g1"]["max_parallel"] == 2


@pytest.mark.parametrize("bad", ["0", "65", "two", "-1"])
def test_bad_max_parallel_and_parallel(project, cli, bad):
    _goal(cli, max_parallel=1)
    r = cli("goal", "update", "g1", "--max-parallel", bad)
    assert r.code == 2 and "--max-parallel" in r.err
    r = cli("run", "--parallel", bad, "--agent-cmd", "true")
    assert r.code == 2 and "--parallel" in r.err


def test_two_separate_runners_take_two_slots_and_names(repo, cli):
    _goal(cli, todos=("one", "two"), max_parallel=2)
    agent = ('touch "$CWD_LOG/in-$LOOPX_AGENT"; '
             'while [ ! -f "$CWD_LOG/stop" ]; do sleep 0.1; done; ' + AGENT)
    cmd = [os.sys.executable, "-m", "loopx", "run", "--agent-cmd", agent, "--as", "w", "--once", "--json"]
    ps = [subprocess.Popen(cmd, cwd=repo, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
          for _ in range(2)]
    cache = CWD_LOG
    try:
        for _ in range(900):
            if (cache / "in-w-1").exists() and (cache / "in-w-2").exists():
                break
            if any(p.poll() is not None for p in ps):
                break
            subprocess.run(["sleep", "0.1"])
        assert (cache / "in-w-1").exists() and (cache / "in-w-2").exists()
        third = run_loopx(["run", "--agent-cmd", "true", "--as", "w", "--once"], cwd=repo)
        assert third.code == 4 and "runner slots" in third.err
    finally:
        (cache / "stop").touch()
        outs = [p.communicate(timeout=120) for p in ps]
    assert all(p.returncode == 0 for p in ps), outs
    assert all(t["status"] == "done" for t in _state(repo)["todos"].values())
    assert _branches(repo) == []


def test_run_branches_do_not_change_the_fingerprint(repo, cli):
    from loopx.kernel.read import fingerprint

    before = fingerprint.git_part(str(repo))
    git(repo, "branch", "loopx/run-x")
    git(repo, "worktree", "add", "-q", str(repo / ".loopx" / "worktrees" / "run-x"), "loopx/run-x")
    (repo / ".loopx" / "worktrees" / "run-x" / "new.txt").write_text("x")
    assert fingerprint.git_part(str(repo)) == before


def test_ctrl_c_stops_every_runner_and_closes_their_runs(repo, cli):
    import signal

    _goal(cli, todos=("one", "two"), max_parallel=2)
    agent = 'touch "$CWD_LOG/in-$LOOPX_AGENT"; sleep 120 & wait'
    p = subprocess.Popen([os.sys.executable, "-m", "loopx", "run", "--parallel", "2", "--agent-cmd", agent, "--as", "w",
                          "--json"], cwd=repo, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    cache = CWD_LOG
    try:
        for _ in range(900):
            if ((cache / "in-w-1").exists() and (cache / "in-w-2").exists()) or p.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"])
        assert (cache / "in-w-1").exists() and (cache / "in-w-2").exists()
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C in the terminal does: the parent and both runners
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    runs = _state(repo)["runs"].values()
    assert len(runs) == 2 and all(r["finished"] and r["result"] == "failed" for r in runs)
    kept = sorted(x.name for x in (repo / ".loopx" / "worktrees").iterdir() if x.is_dir())
    assert kept == sorted(r["id"] for r in runs)  # failed runs keep their worktrees for a look


def test_an_agent_inside_a_worktree_uses_the_projects_store_and_scope(repo, cli):
    from loopx.guard import verdicts

    _goal(cli, todos=("one",), max_parallel=2)
    assert cli("scope", "set", "--allow", "src/**").code == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "commit .loopx/ too")  # so every worktree checks out a stale copy
    assert cli("todo", "add", "added after the commit", "--goal-id", "g1").code == 0
    wt = repo / ".loopx" / "worktrees" / "run-x"
    git(repo, "worktree", "add", "-q", "-b", "loopx/run-x", str(wt))
    assert (wt / ".loopx" / "events.jsonl").exists()
    (wt / "src").mkdir()
    listed = run_loopx(["todo", "list", "--json"], cwd=wt / "src")
    assert listed.code == 0, listed.err
    assert "added after the commit" in [t["title"] for t in listed.data["todos"]]
    state = _state(repo)
    ok = verdicts.evaluate(state, paths=[str(wt / "src" / "a.py")], project_dir=str(repo), cwd=str(wt))
    assert ok["allow"], ok
    out = verdicts.evaluate(state, paths=[str(wt / "docs" / "x.md")], project_dir=str(repo), cwd=str(wt))
    assert not out["allow"] and "docs/x.md" in out["reason"]
    own = verdicts.evaluate(state, paths=[str(wt / ".loopx" / "events.jsonl")], project_dir=str(repo), cwd=str(wt))
    assert not own["allow"] and "own store" in own["reason"]


@pytest.mark.parametrize("name", ["bad name", "../x", "x" * 63, "ünï/còde"])
def test_bad_runner_names_are_refused_before_anything_is_claimed(repo, cli, name):
    _goal(cli, todos=("one",), max_parallel=2)
    r = run_loopx(["run", "--parallel", "2", "--agent-cmd", AGENT, "--as", name], cwd=repo)
    assert r.code == 2 and "agent name" in r.err and "hint:" in r.err and "Traceback" not in r.err
    assert _state(repo)["runs"] == {} and _branches(repo) == []


def test_a_single_runner_leaves_the_checkout_as_if_it_had_worked_there(repo, cli):
    """Under the kernel sandbox a single runner's turn works in a private clone shown at the
    project's own path (the project's .git outside every write grant) and its work lands in the
    checkout; without one it works in the checkout itself. Either way the agent's folder is the
    project's, the user sees the agent's work where the agent left it (an uncommitted file stays
    uncommitted: loopx commits nothing for it), no run branch and no workspace left."""
    from loopx import sandbox

    _goal(cli, todos=("one",), max_parallel=1)
    (repo / "notes.txt").write_text("the user's own work in progress\n")  # untracked, carried in
    head = git(repo, "rev-parse", "HEAD").strip()
    r = run_loopx(["run", "--agent-cmd", AGENT, "--once", "--json"], cwd=repo)
    assert r.code == 0, r.err
    t = r.data["turns"][0]
    assert r.data["agent"] == "agent:shell"
    where = (CWD_LOG / f"cwd-{t['run_id']}").read_text().strip()
    if sandbox.enforced():
        assert where == str(repo), where
        assert t["worktree"]["kept"] is False and t["merge"]["action"] == "nothing", t
    else:
        assert "worktree" not in t and where == str(repo)
    assert (repo / f"work-{t['todo_id']}.txt").read_text().strip() == t["todo_id"]
    assert git(repo, "rev-parse", "HEAD").strip() == head  # no commit the agent did not make
    assert f"?? work-{t['todo_id']}.txt" in git(repo, "status", "--porcelain").splitlines()
    assert (repo / "notes.txt").read_text() == "the user's own work in progress\n"
    assert not list((repo / ".loopx" / "worktrees").glob("*")) if (repo / ".loopx" / "worktrees").exists() else True
    assert _branches(repo) == []


def test_an_edit_the_user_makes_during_a_sandboxed_turn_is_never_overwritten(repo, cli):
    """The agent rewrites a file the user is also editing while the turn runs: loopx does not copy
    the agent's version over the user's; it commits the agent's work in the workspace, where it
    lands as a branch (here a merge that conflicts, kept for a human), and the user's edit stays.
    The user's edit is made from outside the sandbox when the agent says it has written (a file in
    CWD_LOG), and the agent waits for it: no timing involved."""
    import threading

    from loopx import sandbox

    if not sandbox.enforced():
        pytest.skip(f"the kernel sandbox is not available here: {sandbox.status()['line']}")
    _goal(cli, todos=("one",), max_parallel=1)
    user = repo / "README"
    user.write_text("hello\nthe user's draft\n")  # uncommitted, carried into the workspace
    agent = ('printf "agent version\\n" > README; : > "$CWD_LOG/written"; '
             'i=0; while [ ! -e "$CWD_LOG/edited" ] && [ $i -lt 6000 ]; do sleep 0.05; i=$((i+1)); done')

    def the_user():
        for _ in range(6000):
            if (CWD_LOG / "written").exists():
                with open(user, "a") as fh:
                    fh.write("the user kept typing\n")
                break
            threading.Event().wait(0.05)
        (CWD_LOG / "edited").write_text("")

    typist = threading.Thread(target=the_user)
    typist.start()
    r = run_loopx(["run", "--agent-cmd", agent, "--once", "--json"], cwd=repo, timeout=600)
    typist.join()
    assert r.code == 0, r.err
    t = r.data["turns"][0]
    assert user.read_text() == "hello\nthe user's draft\nthe user kept typing\n"  # never overwritten
    assert t["merge"]["action"] != "nothing", t
    assert git(repo, "show", f"{t['worktree']['branch']}:README") == "agent version\n"  # kept, not lost


def test_doctor_names_run_branches_that_keep_unmerged_work(repo, cli):
    _goal(cli, todos=("one",), protect=["merge"], max_parallel=2)
    r = run_loopx(["run", "--parallel", "1", "--agent-cmd", AGENT, "--once", "--json"], cwd=repo, timeout=120)
    assert r.code == 0, r.err
    branch = r.data["turns"][0]["worktree"]["branch"]
    d = run_loopx(["doctor", "--json"], cwd=repo)
    check = next(c for c in d.json["data"]["checks"] if c["id"] == "worktrees")
    assert check["status"] == "ok" and branch in check["finding"]


def test_parallel_with_a_missing_host_cli_fails_once_up_front(repo, cli, monkeypatch):
    _goal(cli, todos=("one",), max_parallel=2)
    env = subprocess_env({"PATH": "/nonexistent"})
    r = run_loopx(["--agent", "gemini", "run", "--parallel", "2"], cwd=repo, env=env)
    assert r.code == 2 and "gemini" in r.err and "--agent-cmd" in r.err
    assert _state(repo)["runs"] == {}


def test_a_project_in_a_subfolder_of_its_repository(tmp_path, cli, monkeypatch):
    """A monorepo: the project is ``services/api`` of the repository; agents and verification
    work in that folder of each worktree and the merges land there."""
    from loopx.cli import main
    from loopx.guard import verdicts

    top = tmp_path / "mono"
    proj = top / "services" / "api"
    proj.mkdir(parents=True)
    git(top, "init", "-q", "-b", "main")
    (proj / "README").write_text("api\n")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "init")
    monkeypatch.chdir(proj)
    assert main(["connect", "--quiet"]) == 0
    _goal(cli, todos=("one", "two"), max_parallel=2)
    assert cli("scope", "set", "--allow", "*.txt").code == 0
    r = run_loopx(["run", "--parallel", "2", "--agent-cmd", AGENT, "--json"], cwd=proj, timeout=180)
    assert r.code == 0, r.out + r.err
    turns = r.data["turns"]
    assert len(turns) == 2 and all(t["merge"]["action"] == "merged" for t in turns)
    for t in turns:
        assert (proj / f"work-{t['todo_id']}.txt").exists()
        cwd = (CWD_LOG / f"cwd-{t['run_id']}").read_text().strip()
        assert cwd.endswith(f"/.loopx/worktrees/{t['run_id']}/services/api")
    assert git(top, "ls-files").split() == sorted(
        ["services/api/README"] + [f"services/api/work-{t['todo_id']}.txt" for t in turns])
    assert _state(proj)["goals"]["g1"]["status"] == "done"  # parallel goals close too (issue 21)
    assert cli("goal", "resume", "g1").code == 0  # the guard below judges an active goal's scope
    wt = proj / ".loopx" / "worktrees" / "run-y"
    state = _state(proj)
    inside = verdicts.evaluate(state, paths=[str(wt / "services" / "api" / "x.txt")], project_dir=str(proj))
    outside = verdicts.evaluate(state, paths=[str(wt / "web" / "x.txt")], project_dir=str(proj))
    assert inside["allow"] and not outside["allow"]
