"""Research experiments (issue 20) with real git repositories, real measure commands and real
agent processes: keep, discard and crash; every trial's commit under refs/loopx/trials/<id>;
`trial apply`; claims that decide nothing; the plateau; slots and turns; the promote gate; the
holdout kept from the agent; the guard on the measuring files."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_loopx

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
                                reason="experiments need git")

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1"}

EVAL = """\
import json, sys
raw = open("param.txt").read().strip()
v = float(raw)            # a bad value crashes the measure command
print("loss: %.3f" % (1 - v))
print("val_acc: %s" % v)
"""
HOLDOUT = """\
v = float(open("param.txt").read())
rows = open("data/holdout.csv").read().split()
print("val_acc: %.4f" % (v * len(rows) / 10 + 0.0123))
"""
# the scripted agent: trial N (counted from the packet) tries PLAN[N-1] and claims 0.99 every time
AGENT = """\
import json, os, subprocess, sys
p = json.load(open(os.environ["LOOPX_PACKET_JSON"]))
plan = json.loads(os.environ["PLAN"])
h, v = plan[(p["experiment"]["trials"] - 1) % len(plan)]
subprocess.run([sys.executable, "-m", "loopx", "trial", "hypothesis", h, "--claim", "val_acc=0.99"], check=True)
open("param.txt", "w").write(v.replace("EXIT", "0.9") + "\\n")
if v == "EXIT":
    sys.exit(3)  # an agent whose turn fails after it changed the code
"""


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "eval.py").write_text(EVAL)
    (proj / "holdout.py").write_text(HOLDOUT)
    (proj / "param.txt").write_text("0.5\n")
    (proj / "data" / "holdout.csv").write_text("\n".join(str(i) for i in range(10)) + "\n")
    (proj / ".gitignore").write_text("data/holdout.csv\n")  # holdout data git tracks is refused
    git(proj, "init", "-q", "-b", "main")
    git(proj, "add", "-A")
    git(proj, "commit", "-q", "-m", "init")
    (tmp_path / "agent.py").write_text(AGENT)
    assert run_loopx(["connect", "--quiet"], cwd=proj).code == 0
    return proj


def start(proj, *extra):
    py = sys.executable
    r = run_loopx(["start-goal", "--goal-text", "tune the parameter", "--goal-id", "knn", "--experiment",
                   "--metric", "val_acc", "--measure", f"{py} eval.py", "--min-delta", "0.01",
                   "--holdout", f"{py} holdout.py", "--holdout-path", "data/holdout.csv", *extra, "--json"], cwd=proj)
    assert r.code == 0, r.err
    return r.data


def drive(proj, plan, turns, *extra):
    env = {"PLAN": json.dumps(plan)}
    cmd = f"{sys.executable} {proj.parent / 'agent.py'}"
    r = run_loopx(["run", "--agent-cmd", cmd, "--max-turns", str(turns), *extra, "--json"], cwd=proj, env=env,
                  timeout=180)
    assert r.code in (0, 1), r.err
    return r.data


def trials(proj) -> list[dict]:
    r = run_loopx(["trial", "list", "--json"], cwd=proj)
    assert r.code == 0, r.err
    return r.data["trials"]


def test_keep_discard_crash_and_every_trial_replayable(repo):
    d = start(repo)
    assert d["baseline"]["decision"] == "keep" and d["baseline"]["value"] == 0.5
    head = git(repo, "rev-parse", "HEAD")
    drive(repo, [["raise to 0.7", "0.7"], ["lower to 0.6", "0.6"], ["write garbage", "oops"]], 3)
    ts = trials(repo)
    assert [t["decision"] for t in ts] == ["keep", "keep", "discard", "crash"]
    base, kept, dropped, crashed = ts
    wt = repo / ".loopx" / "worktrees" / "exp-knn"
    # keep: the experiment branch (the frontier) is the kept commit
    assert git(repo, "rev-parse", "loopx/exp/knn").strip() == kept["commit"]
    # discard: the work tree equals the frontier again, and the trial's own ref holds the change
    assert (wt / "param.txt").read_text() == "0.7\n"
    assert git(wt, "status", "--porcelain") == ""
    assert git(repo, "show", f"refs/loopx/trials/{dropped['id']}:param.txt") == "0.6\n"
    assert git(repo, "show", f"refs/loopx/trials/{crashed['id']}:param.txt") == "oops\n"
    assert "refs/heads/loopx/trials" not in git(repo, "for-each-ref")  # refs, never branches
    # crash: the tail of the command's output is the evidence
    show = run_loopx(["trial", "show", crashed["id"], "--json"], cwd=repo).data
    assert "ValueError" in show["tail"] and "exited 1" in show["reason"]
    # the user's checkout was never touched
    assert (repo / "param.txt").read_text() == "0.5\n" and git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    # `trial show --diff` and `trial apply` replay a discarded trial
    diff = run_loopx(["trial", "show", dropped["id"], "--diff", "--json"], cwd=repo).data["diff"]
    assert "-0.7" in diff and "+0.6" in diff  # against its parent, the frontier it was tried on
    ap = run_loopx(["trial", "apply", dropped["id"]], cwd=repo)
    assert ap.code == 0, ap.err
    assert (wt / "param.txt").read_text() == "0.6\n"
    # after another edit there it no longer applies: one line, and a hint that leaves the checkout alone
    (wt / "param.txt").write_text("0.9\n")
    again = run_loopx(["trial", "apply", dropped["id"]], cwd=repo)
    assert again.code == 4 and "\\n" not in again.err and "does not apply" in again.err, again.err
    hint = again.err.split("hint: ", 1)[1]
    assert "git checkout" not in hint and "git worktree add" in hint, hint
    for cmd in re.findall(r"`([^`]+)`", hint):  # follow the hint as written
        argv = shlex.split(cmd)
        r = subprocess.run(argv, cwd=repo, capture_output=True, text=True) if argv[0] == "git" \
            else run_loopx(argv[1:], cwd=repo)
        assert (r.returncode if argv[0] == "git" else r.code) == 0, (cmd, r)
    assert (repo.parent / f"trial-{dropped['id']}" / "param.txt").read_text() == "0.6\n"
    assert (repo / "param.txt").read_text() == "0.5\n" and git(repo, "rev-parse", "HEAD") == head
    # tsv and csv: one header and one row per trial
    tsv = run_loopx(["trial", "list", "--format", "tsv"], cwd=repo).out.splitlines()
    assert tsv[0].split("\t")[:6] == ["trial", "commit", "metric", "value", "delta", "decision"]
    assert [r.split("\t")[5] for r in tsv[1:]] == ["keep", "keep", "discard", "crash"]
    csv = run_loopx(["trial", "list", "--format", "csv"], cwd=repo).out.splitlines()
    assert len(csv) == 5 and csv[2].startswith(kept["id"] + ",")
    assert run_loopx(["status", "--format", "csv"], cwd=repo).code == 2
    # the counts add up: the baseline is counted among the trials and named, never hidden in "kept"
    counts = "4 trials: baseline, 1 kept, 1 discarded, 1 crashed"
    assert counts in run_loopx(["trial", "list"], cwd=repo).out
    assert counts in run_loopx(["experiment", "show"], cwd=repo).out
    assert "trials:  4 (baseline, 1 kept, 1 discarded, 1 crashed)" in run_loopx(["status"], cwd=repo).out
    # the review packet names each trial's run by its trial, whose work loopx committed; no host
    # reported usage, so the cost is unknown everywhere (never 0.00 USD)
    md = run_loopx(["review-packet", "--goal-id", "knn"], cwd=repo).out
    assert f"on trial {kept['id']}: usage unknown; 1 file(s) +1/-1, committed by loopx ({kept['commit'][:10]})" in md, md
    assert "uncommitted" not in md and "on planning" not in md and "&gt;" not in md
    assert "Reported cost of the period: unknown (3 turn(s) reported no usage)." in md
    q = run_loopx(["quota", "show"], cwd=repo).out
    assert "cost in the window: unknown, tokens unknown" in q and "0.00 USD" not in q, q


def test_a_claimed_metric_decides_nothing_and_shows_as_a_claim(repo):
    start(repo)
    assert [t["decision"] for t in trials(repo)] == ["keep"]  # the listing's row cache now holds the baseline
    drive(repo, [["claims 0.99 but is worse", "0.4"]], 1)
    assert len(trials(repo)) == 2  # ... and is brought up to date, not served stale
    t = trials(repo)[-1]
    assert t["decision"] == "discard" and t["value"] == 0.4 and t["claims"] == {"val_acc": 0.99}
    text = run_loopx(["trial", "show", t["id"]], cwd=repo).out
    assert "claimed by the agent (not measured by loopx; decides nothing): val_acc=0.99" in text
    assert "0.4 (claim 0.99)" in run_loopx(["trial", "list"], cwd=repo).out
    show = run_loopx(["experiment", "show", "--json"], cwd=repo).data
    assert show["frontier"]["value"] == 0.5 and show["kept"] == 0


def test_plateau_waits_for_a_human_and_only_a_keep_spends_a_slot(repo):
    start(repo, "--plateau", "2")
    res = drive(repo, [["better", "0.8"], ["worse", "0.3"], ["crash", "x"], ["never run", "0.9"]], 10)
    assert res["stop"]["reason"] == "plateau" and res["stop"]["decision"] == "wait_human"
    assert [t["trial"]["decision"] for t in res["turns"]] == ["keep", "discard", "crash"]
    assert [t["slots"] for t in res["turns"]] == [1, 0, 0]
    sr = run_loopx(["quota", "should-run", "--json"], cwd=repo)
    assert sr.code == 1 and sr.data["reason"] == "plateau"
    quota = run_loopx(["quota", "show", "--json"], cwd=repo).data
    assert json.dumps(quota).count('"spent": 1') >= 1
    goal = run_loopx(["goal", "show", "knn", "--json"], cwd=repo).data
    assert goal["goal"]["runs"] == 3  # every trial was a turn
    # a human answers the plateau; an agent may not
    assert run_loopx(["experiment", "continue", "knn"], cwd=repo, env={"LOOPX_AGENT": "x"}).code == 4
    assert run_loopx(["experiment", "continue", "knn"], cwd=repo).code == 0
    assert run_loopx(["quota", "should-run", "--json"], cwd=repo).data["decision"] == "run"


def test_the_measure_timeout_kills_the_whole_process_group(repo, tmp_path):
    pidfile = tmp_path / "child.pid"
    script = repo / "slow.py"
    script.write_text("import subprocess, sys, time\n"
                      f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                      f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
                      "time.sleep(600)\n")
    git(repo, "add", "slow.py")
    git(repo, "commit", "-q", "-m", "slow")
    r = run_loopx(["start-goal", "--goal-text", "slow", "--goal-id", "slow", "--experiment", "--metric", "x",
                   "--measure", f"{sys.executable} slow.py", "--trial-timeout", "1", "--json"], cwd=repo, timeout=120)
    assert r.code == 0, r.err
    b = r.data["baseline"]
    assert b["decision"] == "crash" and "timed out" in b["reason"]
    pid = int(pidfile.read_text())
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        assert state in ("Z", "X"), f"the measure command's child {pid} still runs"
    except FileNotFoundError:
        pass
    sr = run_loopx(["quota", "should-run", "--json"], cwd=repo).data
    assert sr["reason"] == "baseline_crashed"
    # a human fixes the measure command and measures the baseline again; an agent may not
    script.write_text("print('x: 1.5')\n")
    git(repo, "commit", "-q", "-am", "fix the measure script")
    assert run_loopx(["experiment", "baseline", "slow"], cwd=repo, env={"LOOPX_AGENT": "a"}).code == 4
    b2 = run_loopx(["experiment", "baseline", "slow", "--json"], cwd=repo)
    assert b2.code == 0 and b2.data["decision"] == "keep" and b2.data["value"] == 1.5
    assert run_loopx(["experiment", "baseline", "slow"], cwd=repo).code == 4  # once there is a frontier
    assert run_loopx(["quota", "should-run", "--json"], cwd=repo).data["reason"] == "trial"


def test_metric_readers():
    from loopx.kernel.read import metrics

    assert metrics.read("epoch 3\nval_acc: 0.91\nloss=0.3\n", "val_acc") == {
        "metrics": {"val_acc": 0.91, "loss": 0.3}, "value": 0.91, "source": "lines"}
    assert metrics.read('noise\n{"val_acc": 0.8, "n": 3, "name": "x"}\n', "val_acc")["metrics"] == {"val_acc": 0.8, "n": 3}
    assert metrics.read("acc=1\nacc=2\n", "acc")["value"] == 2
    got = metrics.read("Accuracy 81.5%\nAccuracy 83.25%\n", "acc", r"Accuracy (?P<value>[0-9.]+)%")
    assert got["value"] == 83.25 and got["source"] == "pattern"
    assert metrics.read("val_acc: nan\n", "val_acc")["value"] is None
    assert metrics.read("nothing here", "val_acc")["value"] is None
    from loopx.errors import UsageError

    with pytest.raises(UsageError):
        metrics.check_pattern("(unclosed")


# ------------------------------------------------------------------ the measuring is protected
def _pre_tool(proj, tool, tool_input, cwd=None):
    from loopx.hosts import entry

    payload = {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input,
               "cwd": str(cwd or proj)}
    _, info = entry.pre_tool(payload, "claude-code", project=str(proj))
    return info


def test_the_hostile_agent_cannot_touch_the_measuring_nor_read_the_holdout(repo, monkeypatch):
    start(repo, "--protect-path", "data/dev.csv")
    monkeypatch.chdir(repo)
    wt = repo / ".loopx" / "worktrees" / "exp-knn"
    denied = [
        ("Edit", {"file_path": str(wt / "eval.py"), "old_string": "v", "new_string": "1"}),
        ("Write", {"file_path": str(repo / "eval.py"), "content": "print('val_acc: 1')"}),
        ("Write", {"file_path": "holdout.py", "content": "x"}),
        ("Edit", {"file_path": str(wt / "data" / "holdout.csv"), "old_string": "1", "new_string": "2"}),
        ("Write", {"file_path": str(wt / "data" / "dev.csv"), "content": "x"}),
        ("Bash", {"command": "echo 'print(\"val_acc: 1\")' > eval.py"}),
        ("Bash", {"command": "cp /dev/null ./eval.py"}),
        ("Bash", {"command": "sed -i s/v/1/ eval.py"}),
        ("Bash", {"command": "tee data/holdout.csv < /dev/null"}),
        ("Bash", {"command": "cat data/holdout.csv"}),
        ("Bash", {"command": "python3 -c 'print(1)' && head -n3 ../exp-knn/data/holdout.csv"}),
        ("Bash", {"command": "wc -l ../../../data/hold*.csv"}),  # the project's copy (untracked: none in the clone)
        ("Bash", {"command": f"{sys.executable} holdout.py"}),
        ("Read", {"file_path": str(wt / "data" / "holdout.csv")}),
        ("Read", {"file_path": str(repo / "data" / "holdout.csv")}),
        ("Grep", {"pattern": "1", "path": str(wt / "data")}),
    ]
    for tool, ti in denied:
        info = _pre_tool(repo, tool, ti, cwd=wt)
        assert info.get("allow") is False, f"allowed: {tool} {ti}"
        assert info["reason"].startswith("loopx: ")
    for tool, ti in [("Write", {"file_path": str(wt / "param.txt"), "content": "0.9"}),
                     ("Bash", {"command": "echo 0.9 > param.txt"}),
                     ("Read", {"file_path": str(wt / "eval.py")})]:
        assert _pre_tool(repo, tool, ti, cwd=wt).get("allow") is True, (tool, ti)


def test_promotion_is_a_human_decision_and_the_holdout_is_theirs_only(repo):
    start(repo)
    drive(repo, [["raise to 0.7", "0.7"]], 1)
    agent = {"LOOPX_AGENT": "sneaky"}
    assert run_loopx(["experiment", "promote", "knn"], cwd=repo, env=agent).code == 4
    r = run_loopx(["experiment", "promote", "knn", "--json"], cwd=repo, timeout=120)
    assert r.code == 0, r.err
    gate, holdout = r.data["gate_id"], r.data["holdout"]
    assert holdout["value"] == pytest.approx(0.7123)
    secret = "0.7123"
    assert "tr-" in r.data["question"] and "0.5 (baseline) -> 0.7 (frontier)" in r.data["question"]
    assert "2 trials: baseline, 1 kept, 0 discarded, 0 crashed" in r.data["question"]  # as trial list counts
    assert secret not in r.data["question"]
    # nowhere an agent looks: the store's files, the packet, the agent's view of the gate and experiment
    for f in (repo / ".loopx").rglob("*"):
        if f.is_file() and "worktrees" not in f.parts:
            assert secret.encode() not in f.read_bytes(), f
    assert not os.path.exists(repo / ".loopx" / "holdout")
    for args in (["gate", "show", gate, "--json"], ["experiment", "show", "--json"], ["trial", "list", "--json"],
                 ["status", "--json"], ["history", "--json"], ["next", "--dry-run", "--json"],
                 ["review-packet", "--goal-id", "knn"]):
        out = run_loopx(args, cwd=repo, env=agent)
        assert secret not in out.out + out.err, args
    from loopx import config

    results = os.path.join(config.data_home(), "holdout")
    assert os.path.isdir(results)
    for tool, ti in (("Read", {"file_path": r.data["holdout_file"]}), ("Bash", {"command": f"cat {results}/*/*.json"}),
                     ("Grep", {"pattern": "val_acc", "path": results})):
        assert _pre_tool(repo, tool, ti).get("allow") is False, (tool, ti)
    human_view = run_loopx(["gate", "show", gate], cwd=repo).out
    assert "holdout (for you only): val_acc=0.7123" in human_view
    assert run_loopx(["quota", "should-run", "--json"], cwd=repo).data["reason"] == "promote"  # a human decides
    # approval merges the frontier into the branch the experiment started from
    ok = run_loopx(["gate", "approve", gate, "--confirm", gate, "--json"], cwd=repo)
    assert ok.code == 0, ok.err
    assert ok.data["promoted"][0]["into"] == "main"
    assert (repo / "param.txt").read_text() == "0.7\n"
    assert git(repo, "rev-parse", "main").strip() == git(repo, "rev-parse", "loopx/exp/knn").strip()
    show = run_loopx(["experiment", "show", "--json"], cwd=repo).data
    assert show["promoted"]["holdout"]["value"] == pytest.approx(0.7123) and show["promoted"]["gate"] == gate
    hist = run_loopx(["history", "--json"], cwd=repo).out
    assert "experiment.promoted" in hist


def test_a_rejected_promotion_leaves_everything_and_as_branch_makes_a_branch(repo):
    start(repo)
    drive(repo, [["raise to 0.7", "0.7"]], 1)
    gate = run_loopx(["experiment", "promote", "knn", "--json"], cwd=repo).data["gate_id"]
    main_before = git(repo, "rev-parse", "main")
    assert run_loopx(["gate", "reject", gate, "--confirm", gate, "--note", "not yet"], cwd=repo).code == 0
    assert git(repo, "rev-parse", "main") == main_before
    bad = run_loopx(["experiment", "promote", "knn", "--as-branch", "bad branch name"], cwd=repo)
    assert bad.code == 2 and "--as-branch: 'bad branch name' is not a valid git branch name" in bad.err, bad.err
    assert "git status" not in bad.err and "hint: pick a name" in bad.err, bad.err
    r = run_loopx(["experiment", "promote", "knn", "--as-branch", "knn-best", "--json"], cwd=repo)
    assert r.code == 0, r.err
    g2 = r.data["gate_id"]
    assert run_loopx(["gate", "approve", g2, "--confirm", g2], cwd=repo).code == 0
    assert git(repo, "rev-parse", "main") == main_before
    assert git(repo, "show", "knn-best:param.txt") == "0.7\n"


def test_approving_a_promotion_into_a_deleted_branch_is_a_clean_state_error(repo):
    start(repo)
    drive(repo, [["raise to 0.7", "0.7"]], 1)
    gate = run_loopx(["experiment", "promote", "knn", "--json"], cwd=repo).data["gate_id"]
    git(repo, "checkout", "-q", "-b", "elsewhere")
    git(repo, "branch", "-q", "-D", "main")  # the branch the experiment started from is gone
    r = run_loopx(["gate", "approve", gate, "--confirm", gate, "--json"], cwd=repo)
    assert r.code == 3, r.out + r.err
    err = json.loads(r.out)["error"]
    assert err["code"] == "no_base_branch" and "main" in err["message"] and "--as-branch" in err["hint"]


def test_demo_research_approve_runs_end_to_end(tmp_path):
    demo = tmp_path / "rd"
    r = run_loopx(["demo", "--research", "--approve", "--dir", demo, "--json"], cwd=tmp_path, timeout=300)
    assert r.code == 0, r.err
    d = r.data
    decisions = [t["trial"]["decision"] for t in d["turns"]]
    assert {"keep", "discard", "crash"} <= set(decisions)
    assert d["stop"]["reason"] == "plateau" and d["stage"] == "done" and d["trace_ok"] is True
    s = d["summary"]
    assert s["frontier"]["value"] > s["baseline"]["value"] and s["promoted"]["into"] == "main"
    assert s["promoted"]["holdout"]["value"] is not None
    # the frontier is on main; the review packet and the trace are there and the trace verifies
    assert json.loads((demo / "config.json").read_text())["scaling"] == "standard"
    assert "## Experiment" in (demo / "review.md").read_text()
    v = run_loopx(["trace", "verify", demo / "trace.tar.gz"], cwd=tmp_path)
    assert v.code == 0, v.out + v.err
    text = run_loopx(["demo", "--research", "--dir", demo], cwd=tmp_path, timeout=120)
    assert text.code == 0 and "Promoted into main" in text.out


PARALLEL_AGENT = """\
import os, subprocess, sys, time
me, rid = os.environ["LOOPX_AGENT"], os.environ["LOOPX_RUN_ID"]
slot = int(me.rsplit("-", 1)[1])
val = {1: 3, 2: 5, 3: -2}[slot]
subprocess.run([sys.executable, "-m", "loopx", "trial", "hypothesis", f"{me} adds {val}"], check=True,
               stdout=subprocess.DEVNULL)
open(f"v_{rid}.txt", "w").write(str(val))
if slot != 3:
    open("shared.txt", "w").write(me + "\\n")  # two agents on one file: a replay may no longer apply
time.sleep(0.2)
"""
SCORE = "import glob\nprint('score:', sum(int(open(f).read()) for f in glob.glob('v*.txt')))\n"


def test_three_parallel_agents_never_keep_against_a_stale_frontier(repo, tmp_path):
    (repo / "score.py").write_text(SCORE)
    git(repo, "add", "score.py")
    git(repo, "commit", "-q", "-m", "score")
    (tmp_path / "pagent.py").write_text(PARALLEL_AGENT)
    r = run_loopx(["start-goal", "--goal-text", "sum", "--goal-id", "par", "--experiment", "--metric", "score",
                   "--measure", f"{sys.executable} score.py", "--json"], cwd=repo)
    assert r.code == 0, r.err
    assert run_loopx(["goal", "update", "par", "--max-parallel", "3"], cwd=repo).code == 0
    r = run_loopx(["run", "--parallel", "3", "--agent-cmd", f"{sys.executable} {tmp_path / 'pagent.py'}",
                   "--max-turns", "3", "--json"], cwd=repo, timeout=300)
    assert r.code == 0, r.err
    ts = trials(repo)
    assert len(ts) == 1 + 9 and {t["agent"] for t in ts[1:]} == {"agent:shell-1", "agent:shell-2", "agent:shell-3"}
    by_commit = {t["commit"]: t for t in ts if t["decision"] == "keep"}
    frontier = ts[0]
    for t in ts[1:]:
        assert t["decision"] in ("keep", "discard", "stale")
        full = run_loopx(["trial", "show", t["id"], "--json"], cwd=repo).data
        if t["decision"] == "stale":
            assert t["value"] is None
            continue
        # decided against the frontier it was measured on, which was the frontier at that moment
        assert full["parent"] == frontier["commit"] and full["parent_value"] == frontier["value"]
        if t["decision"] == "keep":
            assert t["value"] > frontier["value"]
            assert git(repo, "rev-parse", t["commit"] + "^").strip() == frontier["commit"]
            frontier = t
        else:
            assert t["value"] <= frontier["value"]
    assert git(repo, "rev-parse", "loopx/exp/par").strip() == frontier["commit"]
    measured = [t["value"] for t in ts if t["decision"] in ("keep", "discard")]
    show = run_loopx(["experiment", "show", "par", "--json"], cwd=repo).data
    assert show["frontier"]["value"] == max(measured) == frontier["value"]
    assert by_commit[show["frontier"]["commit"]]["id"] == show["frontier"]["trial"]


def test_an_agent_that_fails_its_turn_leaves_a_crash_and_the_frontier_untouched(repo):
    start(repo)
    res = drive(repo, [["half done", "EXIT"]], 1)
    assert res["stopped_because"] == "agent_failed"
    t = trials(repo)[-1]
    assert t["decision"] == "crash" and "the agent exited 3" in t["reason"] and t["value"] is None
    assert (repo / ".loopx" / "worktrees" / "exp-knn" / "param.txt").read_text() == "0.5\n"
    assert git(repo, "show", f"refs/loopx/trials/{t['id']}:param.txt") == "0.9\n"  # kept for a look
    run = res["turns"][0]
    assert run["result"] == "failed" and run["slots"] == 0


def test_a_turn_that_changed_nothing_is_a_trial_with_a_ref_of_its_own(repo):
    start(repo)
    drive(repo, [["raise to 0.7", "0.7"], ["try the same value", "0.7"]], 2)  # the second writes what is there
    base, kept, same = trials(repo)
    assert kept["decision"] == "keep" and same["decision"] == "discard", same
    assert same["commit"] == kept["commit"]  # nothing to commit: the record names the frontier it started on
    assert git(repo, "rev-parse", f"refs/loopx/trials/{same['id']}").strip() == same["commit"]  # every trial has one
    # ... and it is not taken for the change behind that frontier (the kept trial's)
    shown = run_loopx(["trial", "show", same["id"], "--diff", "--json"], cwd=repo)
    assert shown.code == 0 and "param.txt" not in json.dumps(shown.data), shown.data
    r = run_loopx(["trial", "apply", same["id"], "--json"], cwd=repo)
    assert r.code == 2 and r.json["error"]["code"] == "no_trial_commit", r.out + r.err
    assert "param.txt" in json.dumps(run_loopx(["trial", "show", kept["id"], "--diff", "--json"], cwd=repo).data)


SELF_COMMIT = """\
import subprocess
open("param.txt", "w").write("0.8\\n")
subprocess.run(["git", "commit", "-q", "-am", "my own commit"], check=True)
"""


def test_work_the_agent_committed_itself_is_the_trial(repo, tmp_path):
    start(repo)
    (tmp_path / "self.py").write_text(SELF_COMMIT)
    r = run_loopx(["run", "--agent-cmd", f"{sys.executable} {tmp_path / 'self.py'}", "--max-turns", "1", "--json"],
                  cwd=repo, timeout=180)
    assert r.code == 0, r.err
    t = trials(repo)[-1]
    assert t["decision"] == "keep" and t["value"] == 0.8, t  # measured, not taken for a turn that changed nothing
    assert git(repo, "show", f"refs/loopx/trials/{t['id']}:param.txt") == "0.8\n"
    assert git(repo, "log", "-1", "--format=%s", f"refs/loopx/trials/{t['id']}").startswith(f"loopx trial {t['id']}:")


def test_next_starts_a_trial_on_the_frontier_and_turn_finish_measures_it(repo):
    """An agent driven by its host's hooks (not `loopx run`): `loopx next`, edit, `loopx turn finish`."""
    start(repo)
    wt = repo / ".loopx" / "worktrees" / "exp-knn"
    (wt / "param.txt").write_text("0.95\n")  # leftovers of an earlier turn that never finished
    agent = {"LOOPX_AGENT": "hooked"}
    n = run_loopx(["next", "--json"], cwd=repo, env=agent)
    assert n.code == 0, n.err
    assert n.data["mode"] == "trial" and "TRIAL MODE" in n.data["packet_text"]
    assert (wt / "param.txt").read_text() == "0.5\n"  # the trial starts on the frontier
    assert run_loopx(["trial", "hypothesis", "0.8 is better"], cwd=repo, env=agent).code == 0
    (wt / "param.txt").write_text("0.8\n")
    f = run_loopx(["turn", "finish", "--run", n.data["run_id"], "--result", "no_progress", "--json"], cwd=repo, env=agent)
    assert f.code == 0, f.err
    assert f.data["trial"]["decision"] == "keep" and f.data["result"] == "progress" and f.data["spend"]["spent"]
    assert any("--result no_progress was not used" in w for w in f.json["warnings"])
    assert trials(repo)[-1]["hypothesis"] == "0.8 is better"
    # the trial packet speaks of trials: no todo to stay on, no zero todo counts, no slot to spend by hand
    text = n.data["packet_text"]
    for todo_words in ("Work on this one todo", "TODOS:", "spend-slot", "todo add", "A todo is done"):
        assert todo_words not in text, todo_words
    assert "Make one change for this trial" in text and "(loopx measures)" in text
    # finished by hand with a discard: no word of a failed verify command or a todo to reopen
    n2 = run_loopx(["next", "--json"], cwd=repo, env=agent)
    (wt / "param.txt").write_text("0.6\n")
    f2 = run_loopx(["turn", "finish", "--run", n2.data["run_id"], "--result", "progress"], cwd=repo, env=agent)
    assert f2.code == 0 and "discard" in f2.out, f2.out + f2.err
    assert "verify" not in f2.out + f2.err and "--reopen" not in f2.err and "measured -> evidence" in f2.out
    assert "spent" not in f2.out  # a discard spends nothing
    n3 = run_loopx(["next", "--json"], cwd=repo, env=agent)
    (wt / "param.txt").write_text("0.9\n")
    f3 = run_loopx(["turn", "finish", "--run", n3.data["run_id"], "--result", "progress"], cwd=repo, env=agent)
    assert "keep" in f3.out and "loopx spent 1 slot(s) for the keep" in f3.out and "spend-slot" not in f3.out, f3.out




# the model code the measure and holdout commands import (the agent may change it; not the scripts)
MODEL = "def score():\n    return float(open('param.txt').read())\n"
EVAL_MODEL = "import model\nprint('val_acc: %s' % model.score())\n"
HOLDOUT_MODEL = "import model\nmodel.score()\nprint('val_acc: 0.7700')\n"
# the model code trial 1 writes: it tries to forge a store line, to write outside its folder and to
# leave a copy of what it sees where the agent could read it, then scores 0.7
HOSTILE_MODEL = """
for path in {paths!r}:
    try:
        with open(path, "a") as fh:
            fh.write("FORGED by the agent's model code\\n")
    except OSError:
        pass
def score():
    return 0.7
"""
# trial 1: the hostile model code; trial 2: rewrites the measure script itself to claim 0.99 (an
# agent without hooks: nothing denies the edit)
ESCAPING_AGENT = """
import json, os
p = json.load(open(os.environ["LOOPX_PACKET_JSON"]))
if p["experiment"]["trials"] == 1:
    open("model.py", "w").write(os.environ["HOSTILE_MODEL"])
else:
    open("eval.py", "w").write("print('val_acc: 0.99')\\n")
"""


def _sandboxed():
    from loopx.sandbox import core as sandbox

    if not sandbox.enforced():
        pytest.skip(f"no kernel sandbox here ({sandbox.mode()})")  # CI=true on Linux: a failure (tests/ci_rules.py)


def test_the_agents_code_is_measured_inside_a_sandbox_and_the_measuring_cannot_be_changed(repo, tmp_path):
    """Issue 20's acceptance 2 by the sandbox: the agent's code runs inside the measure command in
    the agent's sandbox (no forged store line, no write outside the trial's worktree) and inside
    the holdout in its own (no write outside its scratch folder); a trial that changed the measure
    script is a crash, whatever it printed."""
    _sandboxed()
    py = sys.executable
    (repo / "model.py").write_text(MODEL)
    (repo / "eval.py").write_text(EVAL_MODEL)
    (repo / "holdout.py").write_text(HOLDOUT_MODEL)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the measuring imports the model")
    r = run_loopx(["start-goal", "--goal-text", "tune", "--goal-id", "knn", "--experiment", "--metric", "val_acc",
                   "--measure", f"{py} eval.py", "--min-delta", "0.01", "--holdout", f"{py} holdout.py",
                   "--holdout-path", "data/holdout.csv", "--json"], cwd=repo)
    assert r.code == 0, r.err
    (tmp_path / "escaping.py").write_text(ESCAPING_AGENT)
    targets = [str(repo / ".loopx" / "events.jsonl"), str(repo / "escaped.txt"), str(repo / "leak.txt")]
    d = run_loopx(["run", "--agent-cmd", f"{py} {tmp_path / 'escaping.py'}", "--max-turns", "2", "--json"], cwd=repo,
                  env={"HOSTILE_MODEL": HOSTILE_MODEL.format(paths=targets)}, timeout=180)
    assert d.code in (0, 1), d.err
    ts = trials(repo)
    assert [t["decision"] for t in ts] == ["keep", "keep", "crash"], ts
    assert ts[1]["value"] == 0.7  # the agent's model code was measured ...
    assert b"FORGED" not in (repo / ".loopx" / "events.jsonl").read_bytes()  # ... and could not forge a record
    assert not (repo / "escaped.txt").exists() and not (repo / "leak.txt").exists()
    assert ts[2]["value"] is None and "changed what measures it" in ts[2]["reason"] and "eval.py" in ts[2]["reason"]
    p = run_loopx(["experiment", "promote", "knn", "--json"], cwd=repo)
    assert p.code == 0, p.err
    assert p.data["holdout"]["value"] == 0.77  # the holdout ran the agent's model code, confined
    assert not (repo / "leak.txt").exists() and not (repo / "escaped.txt").exists()
    assert b"FORGED" not in (repo / ".loopx" / "events.jsonl").read_bytes()


PEEKING_AGENT = """
import json, os, subprocess
proj = os.environ["LOOPX_PROJECT_DIR"]
data = os.path.join(proj, "data", "holdout.csv")
tries = {
    "cat_project": f"cat {data}",
    "cat_worktree": "cat data/holdout.csv",
    "ls_data": f"ls {os.path.dirname(data)} && cat {os.path.dirname(data)}/*.csv",
    "python_open": f"python3 -c 'print(open(\\"{data}\\").read())'",
    "symlink": f"ln -s {data} peek.csv && cat peek.csv",
    "hardlink": f"ln {data} hl.csv && cat hl.csv",
    "hardlink_worktree": "ln data/holdout.csv hl2.csv && cat hl2.csv",
    "git_show_head": "git show HEAD:data/holdout.csv",
    "git_show_project": f"git -C {proj} show HEAD:data/holdout.csv",
}
out = {}
for name, cmd in tries.items():
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    out[name] = [p.returncode, p.stdout + p.stderr]
open(os.path.join(os.environ["PEEK_OUT"], "peek.json"), "w").write(json.dumps(out))
open("param.txt", "w").write("0.7\\n")
"""


def test_the_holdout_is_not_readable_inside_the_agents_sandbox(repo, tmp_path):
    """Issue 20's acceptance 2 (the read): a trial's agent really tries to read the holdout data
    (the project's copy, the worktree's, a symbolic link, a hard link, `git show`) and sees none of
    it, while the promotion gate still shows the holdout numbers to the human. Holdout data git
    tracks is refused at start-goal (tests/test_experiment_boundary.py)."""
    _sandboxed()
    secret = "SECRETROW"
    (repo / "data" / "holdout.csv").write_text("".join(f"{secret}{i}\n" for i in range(10)))
    assert git(repo, "ls-files", "data") == ""  # untracked (ignored): not in git's object store
    py = sys.executable
    r = run_loopx(["start-goal", "--goal-text", "tune", "--goal-id", "knn", "--experiment", "--metric", "val_acc",
                   "--measure", f"{py} eval.py", "--min-delta", "0.01", "--holdout", f"{py} holdout.py",
                   "--holdout-path", "data/holdout.csv", "--json"], cwd=repo)
    assert r.code == 0, r.err
    out = tmp_path / "peek-out"
    out.mkdir()
    (tmp_path / "peek.py").write_text(PEEKING_AGENT)
    d = run_loopx(["run", "--agent-cmd", f"{py} {tmp_path / 'peek.py'}", "--once", "--json"], cwd=repo,
                  env={"PEEK_OUT": str(out), "LOOPX_SANDBOX_WRITE": str(out)}, timeout=180)
    assert d.code in (0, 1), d.err
    peek = json.loads((out / "peek.json").read_text())
    for name, (code, text) in peek.items():
        assert secret not in text, (name, code, text)
        assert code != 0 or name == "ls_data", (name, code, text)
    assert [t["decision"] for t in trials(repo)] == ["keep", "keep"]
    # the holdout's own profile still reads the data, and the human sees its numbers
    p = run_loopx(["experiment", "promote", "knn", "--json"], cwd=repo, timeout=120)
    assert p.code == 0, p.err
    assert p.data["holdout"]["value"] == pytest.approx(0.7123)
    assert "holdout (for you only): val_acc=0.7123" in run_loopx(["gate", "show", p.data["gate_id"]], cwd=repo).out


def test_the_json_listing_from_its_cache_is_byte_for_byte_the_one_encoded_fresh(repo):
    """`trial list --json` on 10,000 trials encoded every row on every call (9x the interpreter's
    start); the full listing's JSON is now kept in cache/ and written as it is (issue 20,
    acceptance 7). Same bytes from the cache, rebuilt without it, and never for a filtered list."""
    start(repo)
    drive(repo, [["raise to 0.7", "0.7"], ["lower to 0.6", "0.6"]], 2)
    cached = repo / ".loopx" / "cache" / "trials-knn.json"
    cached.unlink(missing_ok=True)
    fresh = run_loopx(["trial", "list", "--json"], cwd=repo).out
    assert cached.exists()
    assert run_loopx(["trial", "list", "--json"], cwd=repo).out == fresh  # answered from the cache
    rows = json.loads(fresh)["data"]["trials"]
    assert [t["decision"] for t in rows] == ["keep", "keep", "discard"]
    head = cached.read_text().splitlines()[0].rsplit(" ", 1)[0]  # the version and the key, then the length
    cached.write_text(head + " 2\n[]", encoding="utf-8")  # a cache with the same key
    assert json.loads(run_loopx(["trial", "list", "--json"], cwd=repo).out)["data"]["trials"] == []  # is what is served
    cached.write_text(head + " 3\n[]", encoding="utf-8")  # cut short (its header says one byte more): rebuilt
    assert run_loopx(["trial", "list", "--json"], cwd=repo).out == fresh
    limited = json.loads(run_loopx(["trial", "list", "--json", "--limit", "1"], cwd=repo).out)["data"]["trials"]
    assert [t["id"] for t in limited] == [rows[-1]["id"]]  # a filtered list never reads it


def test_the_table_and_tsv_from_their_caches_are_byte_for_byte_the_ones_rendered_fresh(repo):
    """The table and results.tsv of the full listing are written out from their caches as they are
    (a span of the file, not read into memory): the same bytes as rendered without a cache, a cache
    cut short is rendered again, and a console that is not UTF-8 gets them decoded and escaped as
    any text it is given."""
    start(repo)
    drive(repo, [["raise to 0.7", "0.7"], ["lower to 0.6 (ünïcode)", "0.6"]], 2)
    cache = repo / ".loopx" / "cache"
    fresh = {}
    for fmt, kind in (("text", "txt"), ("tsv", "tsv")):
        (cache / f"trials-knn.{kind}").unlink(missing_ok=True)
        fresh[fmt] = run_loopx(["trial", "list", "--format", fmt], cwd=repo).out
        assert (cache / f"trials-knn.{kind}").exists()
        assert run_loopx(["trial", "list", "--format", fmt], cwd=repo).out == fresh[fmt]  # from the cache
    assert "ünïcode" in fresh["text"] and fresh["tsv"].count("\n") == 4 and fresh["text"].endswith("over the baseline)\n")
    table = cache / "trials-knn.txt"
    raw = table.read_bytes()
    table.write_bytes(raw[:-5])  # cut short: its header says more bytes follow
    assert run_loopx(["trial", "list"], cwd=repo).out == fresh["text"]
    assert table.read_bytes() == raw  # written again
    ascii_out = run_loopx(["trial", "list"], cwd=repo, env={"PYTHONIOENCODING": "ascii:backslashreplace"}).out
    assert ascii_out == fresh["text"].replace("ü", "\\xfc").replace("ï", "\\xef")
    for kind in ("bin", "txt"):  # FIFOs planted at both caches: no cache, and nothing waits on them
        (cache / f"trials-knn.{kind}").unlink()
        os.mkfifo(cache / f"trials-knn.{kind}")
    assert run_loopx(["trial", "list"], cwd=repo, timeout=60).out == fresh["text"]


def test_a_listing_never_written_out_leaves_no_file_open(repo, monkeypatch, capsys):
    """The cached listing is held open until it is written out; with ``--quiet`` (nothing printed)
    or in a ``main()`` called again and again in one process, no descriptor is left behind."""
    from loopx.cli import main

    start(repo)
    drive(repo, [["raise to 0.7", "0.7"]], 1)
    monkeypatch.chdir(repo)
    def cache_fds() -> list[str]:  # this process's descriptors on the trial caches (other threads' files aside)
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if "trials-knn." in target:
                out.append(target)
        return out

    for args in (["trial", "list"], ["trial", "list", "--format", "json"]):
        assert main(args) == 0  # renders and keeps the listing
    assert cache_fds() == []
    for _ in range(3):
        for args in (["--quiet", "trial", "list"], ["--quiet", "trial", "list", "--format", "json"],
                     ["trial", "list"], ["trial", "list", "--format", "json"]):
            assert main(args) == 0
    capsys.readouterr()
    assert cache_fds() == []


def test_a_file_span_is_written_whole_to_a_pipe_a_buffer_and_an_appended_file(tmp_path):
    """``output.FileSpan`` writes the rest of a file after its first line: through ``os.sendfile``
    to a pipe, chunk by chunk to a buffer without a file descriptor, and to a file opened for
    appending (which sendfile refuses); its file is closed after."""
    import io
    import os
    import threading

    from loopx import output

    src = tmp_path / "cache.txt"
    body = os.urandom(200_000)  # several sendfile calls and 64 KiB chunks
    src.write_bytes(b"key 1\n" + body)
    assert output.open_after_line(str(tmp_path / "missing")) is None
    os.mkfifo(tmp_path / "fifo")  # planted where a cache belongs: no cache, and nothing waits on it
    (tmp_path / "link").symlink_to(src)
    assert output.open_after_line(str(tmp_path / "fifo")) is None
    assert output.open_after_line(str(tmp_path / "link")) is None
    assert output.open_after_line(str(tmp_path)) is None

    def span_of(path):
        line, span = output.open_after_line(str(path))
        assert line == b"key 1"
        return span

    buf = io.BytesIO()
    span = span_of(src)
    assert span.size == len(body) and span.last == body[-1:]
    span.write_to(buf)
    assert buf.getvalue() == body and span.fd == -1

    rd, wr = os.pipe()
    got = bytearray()

    def read_all() -> None:
        for chunk in iter(lambda: os.read(rd, 1 << 16), b""):
            got.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    with os.fdopen(wr, "wb") as pipe:
        span_of(src).write_to(pipe)
    reader.join()
    os.close(rd)
    assert bytes(got) == body

    dst = tmp_path / "out.bin"
    dst.write_bytes(b"before ")
    with open(dst, "ab") as fh:
        span_of(src).write_to(fh)
    assert dst.read_bytes() == b"before " + body


def test_counts_and_hypotheses_read_the_same_everywhere():
    """One phrase for the counts (the baseline named), hypotheses cut at a word boundary with "…"."""
    from loopx.commands import demo_research, trial
    from loopx.kernel.read import experiments as ex

    s = {"trials": 5, "baseline": {"value": 0.5}, "kept": 3, "discarded": 0, "crashed": 1, "stale": 0,
         "frontier": {"value": 0.8}}
    assert ex.tally(s) == "5 trials: baseline, 3 kept, 0 discarded, 1 crashed"
    assert ex.tally(s, total=False) == "baseline, 3 kept, 0 discarded, 1 crashed"
    assert ex.tally(dict(s, baseline=None, stale=2)) == "5 trials: 3 kept, 0 discarded, 1 crashed, 2 stale"
    long = "k=5: k=1 memorises the 8% label noise: a vote among 5 neighbours should smooth it"
    assert ex.clip(long, 48) == "k=5: k=1 memorises the 8% label noise: a vote…"
    assert ex.clip("short", 48) == "short" and len(ex.clip("x" * 100, 48)) == 48
    row = {"id": "tr-1", "hypothesis": long, "agent": "a", "value": 0.5, "claims": {}, "delta": None,
           "decision": "keep", "commit": None, "duration": None}
    assert trial._cells("val_acc", row)[1] == "k=5: k=1 memorises the 8% label noise: a vote…"
    d = {"dir": "/tmp/rd", "stage": "gate", "gate_id": "gate-1", "question": "Promote?", "approve_command": "A",
         "continue_command": "C", "summary": s,
         "turns": [{"result": "progress", "trial": {"trial_id": "tr-bbb331", "number": 2, "decision": "keep",
                                                    "value": 0.6, "hypothesis": long}}]}
    text = demo_research.render(d)
    assert "trial 2 tr-bbb331: keep" in text and "among 5…" in text  # the turn's trial id; cut after a word
    assert "5 trials: baseline, 3 kept, 0 discarded, 1 crashed" in text


def test_a_trial_never_moves_the_experiment_branch_under_a_users_checkout(repo):
    """The experiment works in its own clone, so git lets the user switch to loopx/exp/<goal>:
    a trial must then not move that branch (the checkout's HEAD would change under its files)."""
    start(repo)
    git(repo, "switch", "-q", "loopx/exp/knn")
    head = git(repo, "rev-parse", "HEAD")
    env = {"PLAN": json.dumps([["raise to 0.7", "0.7"]])}
    r = run_loopx(["run", "--agent-cmd", f"{sys.executable} {repo.parent / 'agent.py'}", "--max-turns", "1",
                   "--json"], cwd=repo, env=env, timeout=180)
    assert r.code == 4 and "experiment_branch_checked_out" in r.out, r.out + r.err
    assert "git switch -" in r.out, r.out
    assert git(repo, "rev-parse", "HEAD") == head and (repo / "param.txt").read_text() == "0.5\n"
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    git(repo, "switch", "-q", "main")
    assert drive(repo, [["raise to 0.7", "0.7"]], 1)["turns"]  # once switched away, trials go on
    assert trials(repo)[-1]["decision"] == "keep"
    assert git(repo, "rev-parse", "loopx/exp/knn").strip() == trials(repo)[-1]["commit"]


def test_a_trial_turn_reads_the_live_view_only(repo):
    """Issue 26 for the research loop: a trial turn, driven by `loopx run` or by the agent's own
    `next` and `turn finish`, folded the whole history four or five times (the run, the experiment
    before each measurement, a keep). Counted, not timed (tests/test_flat_cost.py's harness)."""
    from test_flat_cost import LAST_OUT, _full_reads

    start(repo)
    drive(repo, [["raise to 0.7", "0.7"]], 1)  # a trial before: the live view exists and shows it
    cmd = f"{sys.executable} {repo.parent / 'agent.py'}"
    home = {"LOOPX_HOME": str(repo.parent / "home")}  # outside the project, as a user's is (the sandbox)
    assert _full_reads(repo, "run", "--agent-cmd", cmd, "--once", "--json",
                       env={**home, "PLAN": json.dumps([["0.8", "0.8"]])}) == 0
    assert json.loads(LAST_OUT[0])["data"]["turns"][0]["trial"]["decision"] == "keep", LAST_OUT[0]
    agent = {"LOOPX_AGENT": "hooked", **home}
    assert _full_reads(repo, "next", "--json", env=agent) == 0
    run = json.loads(LAST_OUT[0])["data"]["run_id"]
    (repo / ".loopx" / "worktrees" / "exp-knn" / "param.txt").write_text("0.9\n")
    assert _full_reads(repo, "turn", "finish", "--run", run, "--result", "progress", "--json", env=agent) == 0
    assert json.loads(LAST_OUT[0])["data"]["trial"]["decision"] == "keep"
    ids = [t["id"] for t in trials(repo)]
    assert len(ids) == len(set(ids)) == 4  # baseline and three trials, each its own id


def test_a_trial_id_drawn_from_a_live_view_is_long_enough_for_the_trials_it_leaves_out():
    from loopx.kernel.policy import trialstep

    shown = {f"tr-{i:06x}": {} for i in range(40)}
    view = {"trials": shown, "experiments": {"a": {"trials": 30_000}, "b": {"trials": 10}}}
    assert len(trialstep._new_trial_id(view)) > len("tr-") + 6  # 29,970 left out: more than 3 bytes
    full = {"trials": shown, "experiments": {"a": {"trials": 40}}}
    assert len(trialstep._new_trial_id(full)) == len("tr-") + 6  # nothing left out: the short form
