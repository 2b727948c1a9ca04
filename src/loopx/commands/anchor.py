"""``loopx anchor [--push REMOTE]``: anchor the chain heads now (data folder and the git ref
``refs/loopx/anchors``), and optionally push the ref (to ``refs/loopx/anchors``, or to
``refs/loopx/node-anchors/<node>`` when several machines write the store). See docs/security.md#anchors."""

from __future__ import annotations

from loopx.commands import add
from loopx.errors import StateError
from loopx.kernel.storage import anchors
from loopx.output import safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, handler=anchor, render=render_anchor, command=name,
            example="loopx anchor --push origin")
    p.add_argument("--push", metavar="REMOTE",
                   help="also push refs/loopx/anchors to this git remote (never forced); as "
                        "refs/loopx/node-anchors/<node> once several machines write the store")


def anchor(ctx, push=None) -> dict:
    store = ctx.store()
    if store.format_number() < 2:
        raise StateError("this store has no hash chain yet (format 1)",
                         "any write (e.g. `loopx todo add`) migrates it to format 2; then anchor", code="no_chain")
    res = anchors.write(store, "loopx anchor")
    out = {"project_id": res["anchor"]["project_id"], "heads": res["anchor"]["heads"], "file": res["file"],
           "commit": res["commit"], "ref": anchors.REF if res["commit"] else None, "warnings": res["warnings"],
           "pushed": None, "pushed_ref": None}
    if push:
        if not res["commit"]:
            raise StateError("there is no git anchor to push", "run it inside the project's git repository",
                             code="no_git_anchor")
        dest = anchors.push_ref(store)  # refs/loopx/node-anchors/<node> once several machines write the store
        try:
            anchors.git(store.project_dir, "push", "--quiet", push, f"{anchors.REF}:{dest}", timeout=120)
        except RuntimeError as exc:
            raise StateError(f"pushing {anchors.REF} to {push} ({dest}) failed: {str(exc).splitlines()[-1]}",
                             "the remote refuses a rewind of a protected anchor ref: if the local anchors were "
                             "rewritten, that is what `loopx doctor` reports", code="push_failed") from None
        except OSError as exc:
            raise StateError(f"git cannot run: {exc}", "install git", code="git_missing") from None
        out["pushed"] = push
        out["pushed_ref"] = dest
    return out


def render_anchor(d: dict) -> str:
    heads = ", ".join(f"{n} {h['stream']} seq {h['seq']}" for n, h in sorted(d["heads"].items())) or "no records"
    lines = [f"anchored {heads}"]
    if d["file"]:
        lines.append(f"  data folder: {safe(d['file'])}")
    if d["commit"]:
        lines.append(f"  git: {d['ref']} at {d['commit'][:12]}")
    if d["pushed"]:
        lines.append(f"  pushed to {safe(d['pushed'])} as {d['pushed_ref']}")
    lines += [f"  warning: {safe(w)}" for w in d["warnings"]]
    return "\n".join(lines)
