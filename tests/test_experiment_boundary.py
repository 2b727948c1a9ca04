"""Issue 22 for research experiments (issue 20): a trial's agent works in a private clone, so the
sandbox grants nothing inside the project's ``.git``. A scripted hostile agent really tries (with
git and with plain file writes) to add an object to the project's object store and to delete or
move the experiment's branch and a trial's ref, and fails; its ordinary work still lands and is
measured. An experiment that older loopx started (a linked worktree) keeps working and keeps its
trials. Holdout data git tracks is refused at start-goal and at promotion."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import run_loopx
from test_experiments import drive, git, repo, start, trials  # noqa: F401 - repo: the fixture

PLANTED = "PLANTED-BY-THE-AGENT\n"
HOSTILE = """
import glob, json, os, subprocess
proj = os.environ["LOOPX_PROJECT_DIR"]
gd = os.path.join(proj, ".git")
old = os.environ["OLD_COMMIT"]
trial_refs = subprocess.run(["git", "--git-dir", gd, "for-each-ref", "--format=%(refname)", "refs/loopx/trials/"],
                            capture_output=True, text=True).stdout.split()
victim = trial_refs[0] if trial_refs else "refs/loopx/trials/none"
planted = os.environ["PLANTED"]
tries = {
    "object_file": f"mkdir -p {gd}/objects/zz && echo x > {gd}/objects/zz/planted",
    "hash_object_project": f"printf '%s' '{planted}' | git --git-dir={gd} hash-object -w --stdin",
    "object_directory_env": f"printf '%s' '{planted}' | GIT_OBJECT_DIRECTORY={gd}/objects git hash-object -w --stdin",
    "delete_branch": f"git --git-dir={gd} update-ref -d refs/heads/loopx/exp/knn",
    "move_branch": f"git --git-dir={gd} update-ref refs/heads/loopx/exp/knn {old}",
    "rm_branch_file": f"rm {gd}/refs/heads/loopx/exp/knn",
    "rename_branch": f"git --git-dir={gd} branch -M loopx/exp/knn loopx/exp/gone",
    "delete_trial_ref": f"git --git-dir={gd} update-ref -d {victim}",
    "rm_trial_ref_file": f"rm {gd}/{victim}",
    "packed_refs": f"echo '{old} refs/heads/loopx/exp/knn' >> {gd}/packed-refs",
    "push_move_branch": f"git push -q --force {gd} {old}:refs/heads/loopx/exp/knn",
    "push_delete_trial": f"git push -q {gd} :{victim}",
}
out = {"victim": victim}
for name, cmd in tries.items():
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    out[name] = [p.returncode, (p.stdout + p.stderr)[-300:]]
open(os.path.join(os.environ["PEEK_OUT"], "attempts.json"), "w").write(json.dumps(out))
open("param.txt", "w").write("0.7\\n")  # the ordinary work of the trial
# and it leaves its own .git in the way of loopx's commit and fetch: a lock, and a planted commondir
open(".git/index.lock", "w").close()
open(".git/commondir", "w").write(gd + "\\n")
"""


def _sandboxed():
    from loopx.sandbox import core as sandbox

    if not sandbox.enforced():
        pytest.skip(f"no kernel sandbox here ({sandbox.mode()})")  # CI=true on Linux: a failure (tests/ci_rules.py)


def _start(proj):
    py = sys.executable
    r = run_loopx(["start-goal", "--goal-text", "tune", "--goal-id", "knn", "--experiment", "--metric", "val_acc",
                   "--measure", f"{py} eval.py", "--min-delta", "0.01", "--json"], cwd=proj)
    assert r.code == 0, r.err
    return r.data


def _blob_sha(proj, text: str) -> str:
    return subprocess.run(["git", "hash-object", "--stdin"], cwd=proj, input=text, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_a_hostile_trial_agent_cannot_touch_the_projects_git_and_its_work_still_lands(repo, tmp_path, parallel):  # noqa: F811
    _sandboxed()
    old = git(repo, "rev-parse", "HEAD").strip()
    (repo / "README").write_text("a second commit: the agent has an older one to move the branch to\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "second")
    _start(repo)
    base = trials(repo)[0]
    refs_before = git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/loopx/trials/", "refs/heads/")
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "hostile.py").write_text(HOSTILE)
    env = {"PEEK_OUT": str(out), "LOOPX_SANDBOX_WRITE": str(out), "OLD_COMMIT": old, "PLANTED": PLANTED}
    extra = ["--max-turns", "1"]
    if parallel:
        assert run_loopx(["goal", "update", "knn", "--max-parallel", "2"], cwd=repo).code == 0
        extra = ["--parallel", "2", "--max-turns", "1"]
    d = run_loopx(["run", "--agent-cmd", f"{sys.executable} {tmp_path / 'hostile.py'}", *extra, "--json"], cwd=repo,
                  env=env, timeout=240)
    assert d.code == 0, d.out + d.err
    tried = json.loads((out / "attempts.json").read_text())
    assert tried.pop("victim") == f"refs/loopx/trials/{base['id']}"  # it found the ref it went for
    for name, (code, text) in tried.items():
        assert code != 0, (name, text)
    # nothing of it reached the project: no planted object, every ref as loopx left it
    assert subprocess.run(["git", "cat-file", "-e", _blob_sha(repo, PLANTED)], cwd=repo).returncode != 0
    assert not (repo / ".git" / "objects" / "zz").exists()
    ts = trials(repo)
    kept = [t for t in ts[1:] if t["decision"] == "keep"]
    assert len(kept) == 1 and kept[0]["value"] == 0.7, ts  # its ordinary work was measured and kept
    assert git(repo, "rev-parse", "refs/heads/loopx/exp/knn").strip() == kept[0]["commit"]
    assert git(repo, "show", "loopx/exp/knn:param.txt") == "0.7\n"
    assert git(repo, "rev-parse", f"refs/loopx/trials/{base['id']}").strip() == base["commit"]
    assert "refs/heads/loopx/exp/gone" not in git(repo, "for-each-ref")
    for line in refs_before.splitlines():  # every ref that was there is still there, unmoved but the frontier
        if not line.endswith("refs/heads/loopx/exp/knn"):
            assert line in git(repo, "for-each-ref", "--format=%(objectname) %(refname)"), line
    for t in ts:  # every trial's commit is in the project's own repository
        assert git(repo, "rev-parse", f"refs/loopx/trials/{t['id']}").strip() == t["commit"]
    # the trial worked in a private clone: no linked worktree of the project
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    wt = repo / ".loopx" / "worktrees" / "exp-knn"
    assert (wt / ".git").is_dir()
    assert not [p for p in (repo / ".loopx" / "worktrees").iterdir() if p.name != "exp-knn"]  # parallel: removed


def test_an_experiment_that_older_loopx_started_in_a_linked_worktree_keeps_working_and_keeps_its_trials(repo):  # noqa: F811
    start(repo)
    drive(repo, [["raise to 0.7", "0.7"], ["lower to 0.6", "0.6"]], 2)
    before = trials(repo)
    wt = repo / ".loopx" / "worktrees" / "exp-knn"
    # what loopx made before trials ran in private clones: a linked worktree on the experiment's branch
    shutil.rmtree(wt)
    git(repo, "worktree", "add", "-q", str(wt), "loopx/exp/knn")
    assert (wt / ".git").is_file()
    drive(repo, [["raise to 0.8", "0.8"]], 1)
    ts = trials(repo)
    assert [t["id"] for t in ts[:3]] == [t["id"] for t in before]  # no trial lost
    assert [t["decision"] for t in ts] == ["keep", "keep", "discard", "keep"] and ts[-1]["value"] == 0.8
    for t in ts:
        assert git(repo, "rev-parse", f"refs/loopx/trials/{t['id']}").strip() == t["commit"]
    assert git(repo, "rev-parse", "loopx/exp/knn").strip() == ts[-1]["commit"]
    assert (wt / ".git").is_dir() and (wt / "param.txt").read_text() == "0.8\n"  # now a private clone
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    # `trial show --diff` still shows a trial made in the linked worktree
    assert "+0.6" in run_loopx(["trial", "show", before[2]["id"], "--diff", "--json"], cwd=repo).data["diff"]


def test_holdout_data_git_tracks_is_refused_at_start_goal_and_at_promotion(repo):  # noqa: F811
    """A tracked holdout file is in git's object store, which every trial reads (`git show
    HEAD:data/holdout.csv`): start-goal refuses it (exit 3, one line, the fix), and a promotion
    refuses while it is tracked again (committed on the base branch since), before the holdout runs."""
    (repo / ".gitignore").write_text("")
    git(repo, "add", "-f", "data/holdout.csv", ".gitignore")
    git(repo, "commit", "-q", "-m", "the holdout data, tracked")
    py = sys.executable
    args = ["start-goal", "--goal-text", "tune", "--goal-id", "knn", "--experiment", "--metric", "val_acc",
            "--measure", f"{py} eval.py", "--holdout", f"{py} holdout.py", "--holdout-path", "data/holdout.csv"]
    r = run_loopx(args, cwd=repo)
    assert r.code == 3, r.out + r.err
    assert r.err.count("\n") == 2 and "Traceback" not in r.err  # the error line and its hint
    assert "data/holdout.csv is tracked by git" in r.err and "git rm --cached data/holdout.csv" in r.err
    j = run_loopx([*args, "--json"], cwd=repo)
    assert j.code == 3 and j.json["error"]["code"] == "holdout_tracked"
    assert "knn" not in run_loopx(["status", "--json"], cwd=repo).out  # no goal, no branch was made
    assert "loopx/exp/knn" not in git(repo, "for-each-ref")
    # untracked (only staged as removed, not committed: HEAD still holds it): still refused
    git(repo, "rm", "-q", "--cached", "data/holdout.csv")
    assert run_loopx(args, cwd=repo).code == 3
    (repo / ".gitignore").write_text("data/holdout.csv\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "untrack the holdout data")
    start(repo)
    drive(repo, [["raise to 0.7", "0.7"]], 1)
    # a human commits the holdout data on the base branch since: the promotion refuses, nothing runs
    git(repo, "add", "-f", "data/holdout.csv")
    git(repo, "commit", "-q", "-m", "oops, the holdout data")
    p = run_loopx(["experiment", "promote", "knn", "--json"], cwd=repo, timeout=120)
    assert p.code == 3 and p.json["error"]["code"] == "holdout_tracked", p.out
    assert "promote again" in p.json["error"]["hint"]
    assert run_loopx(["gate", "list", "--json"], cwd=repo).data["gates"] == []
    git(repo, "rm", "-q", "--cached", "data/holdout.csv")
    git(repo, "commit", "-q", "-m", "untrack it again")
    p = run_loopx(["experiment", "promote", "knn", "--json"], cwd=repo, timeout=120)
    assert p.code == 0, p.err
    assert p.data["holdout"]["value"] is not None
