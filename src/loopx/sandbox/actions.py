"""Protected actions loopx performs itself after a human approved them (issue 22, item 3).

A sandboxed agent holds no credentials and cannot reach the remote, so it asks: ``request_push``
opens a ``merge`` gate whose question and context pin the action (remote name and URL, branch,
commit SHA), never agent-written command text. After a human approves that gate, ``perform``
(``loopx action perform GATE`` by a human, or ``loopx run`` between turns) records the use
first (``gate.used``: one approval, one action) and then pushes outside any sandbox, once:

- from a fresh bare repository made for this push (its objects borrowed from the project through
  ``objects/info/alternates``), so none of the project's repository configuration applies: no
  ``remote.<name>.push`` refspecs, ``url.*.insteadOf`` rewrites or aliases an agent could have
  written outside a sandbox; ``core.hooksPath=/dev/null`` and ``--no-verify`` run no hook;
- to the URL recorded when the request was made, refusing when the project's remote now points
  elsewhere; ``SHA:refs/heads/BRANCH`` exactly, never forced (a non-fast-forward fails).

The user's own global git configuration still applies (credential helpers live there; it is not
writable inside the sandbox). A second identical request opens a second gate that needs a second
approval; a standing approval is a human's explicit ``--standing``.

- ``request_push(store, actor, goal_id, remote, branch, sha, run=None) -> dict`` (the gate)
- ``pending_action(gate) -> dict | None``: the pinned action of a gate opened by ``request_push``
- ``perform(store, actor, gate_ref) -> dict``: ``{"gate_id", "performed", "exit_code", "output",
  "action"}``; raises StateError (``gate_not_approved``, ``action_used``, ``remote_moved``),
  UsageError (not an action gate).
- ``perform_approved(store, actor) -> [dict]``: every approved, unused action gate, performed.
"""

from __future__ import annotations

import json
import os
import re
import tempfile

from loopx.errors import StateError, UsageError
from loopx.kernel.read import approvals, queries
from loopx.kernel.storage import gitcli
from loopx.kernel.write import evidence, gates

MARK = "loopx-action"
_REMOTE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_BRANCH = re.compile(r"^(?!/)(?!.*//)(?!.*\.\.)[A-Za-z0-9._/-]{1,200}(?<!/)(?<!\.lock)$")
_SHA = re.compile(r"^[0-9a-f]{40}$")


def _git(cwd: str, *args: str) -> gitcli.Result:
    """loopx's git in the project (pinned: the agent may have written its .git), text output."""
    return gitcli.run(cwd, "-c", "core.hooksPath=/dev/null", *args, pinned=True, text=True, timeout=600)


def question(action: dict) -> str:
    return f"Push {action['sha'][:12]} to {action['remote']} ({action['url']}) branch {action['branch']}?"


def request_push(store, actor: str, goal_id: str | None, remote: str, branch: str, sha: str,
                 run: str | None = None) -> dict:
    branch = branch.removeprefix("refs/heads/")
    if not _REMOTE.match(remote or ""):
        raise UsageError(f"bad remote name {remote!r}", "name a configured remote, e.g. --remote origin")
    if not _BRANCH.match(branch or ""):
        raise UsageError(f"bad branch name {branch!r}", "name the branch to push to, e.g. --branch main")
    full = _git(store.project_dir, "rev-parse", "--verify", "-q", (sha or "") + "^{commit}").stdout.strip()
    if not _SHA.match(full):
        raise UsageError(f"{sha!r} is not a commit of this repository", "pass the commit's SHA: git rev-parse HEAD")
    url = _git(store.project_dir, "config", "--get", f"remote.{remote}.url").stdout.strip()
    if not url:
        raise UsageError(f"the project has no remote {remote!r}", "git remote -v lists them")
    action = {"action": "push", "remote": remote, "url": url, "branch": branch, "sha": full}
    gate = gates.open_gate(store, actor, goal_id, kind="merge", question=question(action),
                           context=json.dumps({MARK: action}, sort_keys=True), run=run)
    return dict(gate, action=action)


def pending_action(g: dict) -> dict | None:
    try:
        a = json.loads(g.get("context") or "").get(MARK)
    except (ValueError, AttributeError):
        return None
    if not isinstance(a, dict) or a.get("action") != "push" or not all(isinstance(a.get(k), str) for k in
                                                                       ("remote", "url", "branch", "sha")):
        return None
    if not _SHA.match(a["sha"]) or not _BRANCH.match(a["branch"]) or g.get("question") != question(a):
        return None  # the human approved a question that must be the action itself, word for word
    return a


def perform(store, actor: str, gate_ref: str) -> dict:
    state = store.load()
    g = queries.resolve_gate(state, gate_ref)
    a = pending_action(g)
    if a is None:
        raise UsageError(f"{g['id']} is not a push request made with `loopx action push`",
                         "loopx action list shows the requests")
    if g["status"] != "approved":
        raise StateError(f"{g['id']} is {g['status']}: a human approves it first",
                         f"loopx gate approve {g['id']}", code="gate_not_approved")
    url = _git(store.project_dir, "config", "--get", f"remote.{a['remote']}.url").stdout.strip()
    if url != a["url"]:
        raise StateError(f"remote {a['remote']} now points to {url or 'nothing'}, not {a['url']} as approved",
                         "nothing was pushed; ask again with `loopx action push`", code="remote_moved")
    # the use is recorded before the push: a second perform of the same approval finds it used
    if not gates.use(store, actor, g["id"], f"loopx push {a['sha']} to {a['url']} refs/heads/{a['branch']}"):
        raise StateError(f"the approval of {g['id']} was used already: one approval, one push",
                         "ask again with `loopx action push`; a human approves the new gate", code="action_used")
    with tempfile.TemporaryDirectory(prefix="loopx-push-") as tmp:
        gitcli.run(tmp, "init", "-q", "--bare", tmp, env={"GIT_TEMPLATE_DIR": ""})
        objects = _git(store.project_dir, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()
        with open(os.path.join(tmp, "objects", "info", "alternates"), "w", encoding="utf-8") as fh:
            fh.write(os.path.join(objects, "objects") + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        proc = gitcli.run(tmp, "-c", "core.hooksPath=/dev/null", "--git-dir", tmp, "push", "--no-verify",
                          "--porcelain", a["url"], f"{a['sha']}:refs/heads/{a['branch']}", base=env, text=True,
                          timeout=600)
    out = (proc.stdout + proc.stderr).strip()
    ok = proc.returncode == 0
    evidence.add(store, actor, g["goal"], kind="command",
                 summary=f"loopx {'pushed' if ok else 'could not push'} {a['sha'][:12]} to {a['remote']} "
                         f"{a['branch']} (approved in {g['id']})",
                 command=f"git push {a['url']} {a['sha']}:refs/heads/{a['branch']}", exit_code=proc.returncode,
                 output=out.encode("utf-8"))
    return {"gate_id": g["id"], "performed": ok, "exit_code": proc.returncode, "output": out[-2000:], "action": a}


def perform_approved(store, actor: str) -> list[dict]:
    done = []
    # between every two turns: the live view, which keeps the usable approvals of each kind
    # (fold.APPROVALS_KEPT per goal and kind, the rest counted in approvals_left)
    for g in list(store.load(view="live")["gates"].values()):
        if pending_action(g) and approvals.usable(g) and not g.get("standing"):
            try:
                done.append(perform(store, actor, g["id"]))
            except (StateError, UsageError) as exc:
                done.append({"gate_id": g["id"], "performed": False, "error": exc.message})
    return done


def listing(state: dict) -> list[dict]:
    out = []
    for g in state["gates"].values():
        a = pending_action(g)
        if a:
            out.append({"gate_id": g["id"], "status": g["status"], "used": bool(g.get("used")), **a})
    return out
