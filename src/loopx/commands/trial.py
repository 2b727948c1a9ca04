"""``loopx trial hypothesis|list|show|apply``: the trials of a research experiment (docs/experiments.md)."""

from __future__ import annotations

import marshal
import os
import sys

from loopx.commands import actions, add, goal_opt
from loopx.errors import UsageError
from loopx.kernel.read import experiments, queries
from loopx.kernel.read import experiments as ex
from loopx.kernel.storage import fs, layout
from loopx.output import FileSpan, Reply, Spliced, _ascii_only, encode, open_after_line, safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx trial list --format tsv > results.tsv")
    acts = actions(p)
    h = add(acts, "hypothesis", "state the hypothesis of your current trial (during the turn)", handler=trial_hypothesis,
            render=lambda d: f"hypothesis of {d['run_id'] or 'the next trial'} recorded"
            + (f" (claims: {', '.join(f'{k}={v:g}' for k, v in d['claims'].items())}; shown as claims only)"
               if d["claims"] else ""),
            command="trial hypothesis",
            example="loopx trial hypothesis 'k=7 smooths the boundary' --claim val_acc=0.93")
    h.add_argument("text", metavar="TEXT")
    h.add_argument("--run", metavar="RUN", help="the run (default: your open run on an experiment goal)")
    h.add_argument("--claim", action="append", metavar="NAME=VALUE",
                   help="a number you measured yourself (shown as a claim; loopx's measurement decides)")
    goal_opt(h)

    lst = add(acts, "list", "the trials as a table (id, hypothesis, agent, metric, delta, decision, commit, duration)",
              handler=trial_list, render=render_list, command="trial list",
              example="loopx trial list --format csv")
    goal_opt(lst)
    lst.add_argument("--decision", choices=["keep", "discard", "crash", "stale"], help="only these")
    lst.add_argument("--limit", type=int, metavar="N", help="only the last N")

    s = add(acts, "show", "one trial: every metric, the guard, the claims, the crash output", handler=trial_show,
            render=render_show, command="trial show", example="loopx trial show tr-3f9a1c --diff")
    s.add_argument("trial")
    s.add_argument("--diff", action="store_true", help="the trial's change against its parent")

    a = add(acts, "apply", "bring a trial's change back as uncommitted changes in the experiment's worktree",
            handler=trial_apply, render=lambda d: f"applied {d['trial_id']} in {safe(d['into'])}: "
            + ", ".join(safe(f) for f in d["files"]), command="trial apply", example="loopx trial apply tr-3f9a1c")
    a.add_argument("trial")
    a.add_argument("--into", metavar="DIR", help="another checkout to apply it in (default: the experiment's worktree)")


def trial_hypothesis(ctx, text, run=None, claim=None, goal_id=None):
    from loopx.kernel.read import metrics  # imports re: not for `trial list`
    from loopx.kernel.write import trials

    return trials.hypothesize(ctx.store(), ctx.actor, text, metrics.parse_claims(claim), goal_id=goal_id, run_id=run)


def _goal(state, goal_id):
    if goal_id is None:
        exps = list(state.get("experiments") or {})
        if len(exps) == 1:
            return exps[0]
        if not exps:
            raise UsageError("no experiment goal here", "start one with `loopx start-goal --experiment ...`",
                             code="not_an_experiment")
    g = queries.resolve_goal(state, goal_id)
    if not experiments.is_experiment(state, g["id"]):
        raise UsageError(f"goal {g['id']} is not an experiment", "see `loopx goal list`", code="not_an_experiment")
    return g["id"]


def _row(exp_metric, t):
    return {"id": t["id"], "number": t.get("number"), "hypothesis": t.get("hypothesis"), "agent": t.get("agent"),
            "metric": exp_metric, "value": t.get("value"), "delta": t.get("delta"), "decision": t["decision"],
            "commit": t.get("commit"), "duration": t.get("duration"), "claims": t.get("claims") or {},
            "remeasured": t.get("remeasured", False), "reason": t.get("reason"), "ts": t.get("ts")}


class Rows(list):
    """The trial rows of ``trial list``, carrying their text cells (``cells``) from the row cache
    so the table is not formatted again, or (text and tsv) the whole rendered listing (``text``,
    ``total``: the number of trials in it) from the rendered cache, or (json) the rows' JSON
    (``json``, written by ``loopx.output.print_json`` in their place), each a span of its cache
    file, written out without reading it into memory; JSON-encodes as a plain list."""

    cells: list | None = None
    text: FileSpan | None = None
    json: FileSpan | None = None
    total: int = 0  # not ``count``: that is list.count


def _cells(metric: str, r: dict) -> list[str]:
    return [r["id"], safe(ex.clip(r["hypothesis"], 48)), safe(r["agent"] or ""),
            ex.fmt_value(r["value"]) + (" (claim " + ", ".join(f"{v:g}" for v in r["claims"].values()) + ")"
                                         if r["claims"] else ""),
            ex.fmt_delta(r["delta"]), r["decision"], (r["commit"] or "")[:10],
            "-" if r["duration"] is None else f"{r['duration']:.1f}s"]


CACHE_VERSION = 2  # 2: hypotheses cut at a word boundary


def _cached_rows(store, gid: str) -> tuple[list, list, dict | None]:
    """(rows, cells, summary) of every trial of ``gid`` through ``cache/trials-<goal>.bin``: a
    disposable projection keyed by the experiment's trial count and last trial (in the live view),
    brought up to date from the live view's recent trials when only those are new, rebuilt from
    the full state otherwise. Flat cost: a listing after each new trial folds no history."""
    live = store.load(view="live")
    e = experiments.get(live, gid)
    assert e is not None  # trial_list resolved gid to an experiment goal (_goal)
    key = [e["trials"], e["last_trial"]]
    path = store.path(layout.trials_cache(gid, "bin"))
    try:
        with fs.open_file(path) as fh:  # a FIFO planted there is no cache, and nothing waits on it
            cache = marshal.loads(fh.read())
        if cache.get("v") != CACHE_VERSION or cache.get("metric") != e["metric"]:
            cache = None
    except (OSError, ValueError, EOFError, TypeError, AttributeError):
        cache = None
    if cache and cache["key"] == key:
        return cache["rows"], cache["cells"], experiments.summary(live, gid)
    rows = cells = None
    if cache and cache["key"][0] < key[0]:  # only new trials: the live view keeps the recent ones
        have = cache["key"][0]
        new = [t for t in experiments.rows(live, gid) if t.get("number", 0) > have]
        prev = [t for t in experiments.rows(live, gid) if t.get("number", 0) == have]
        if len(new) == key[0] - have and (have == 0 or (prev and prev[0]["id"] == cache["key"][1])):
            add = [_row(e["metric"], t) for t in new]
            rows, cells = cache["rows"] + add, cache["cells"] + [_cells(e["metric"], r) for r in add]
    if rows is None:
        full = store.load()
        rows = [_row(e["metric"], t) for t in experiments.rows(full, gid)]
        cells = [_cells(e["metric"], r) for r in rows]
    assert cells is not None  # set together with rows
    try:
        os.makedirs(store.path(layout.CACHE), exist_ok=True)
        fs.atomic_write(path, marshal.dumps({"v": CACHE_VERSION, "key": key, "metric": e["metric"], "rows": rows,
                                             "cells": cells}), sync=False, follow=False)
    except (OSError, ValueError):
        pass  # a cache that cannot be written is rebuilt next time
    return rows, cells, experiments.summary(live, gid)


def _keyed(key: list) -> bytes:
    """A rendered cache's first line but its last field: the cache version and ``key``; the line
    ends with the byte length of what follows, so a file cut short is never served."""
    return " ".join(map(str, [CACHE_VERSION, *key])).encode()


def _read_span(store, gid: str, kind: str, key: list) -> FileSpan | None:
    """The cached rendering ``kind`` (``txt``: the table, ``tsv``: results.tsv, ``json``: the rows'
    JSON; UTF-8) for ``key``, as a span of its file to be written out as it is, or None."""
    got = open_after_line(store.path(layout.trials_cache(gid, kind)))
    if got is None:
        return None
    line, span = got
    head, _, length = line.rpartition(b" ")
    if head != _keyed(key) or not length.isdigit() or int(length) != span.size:
        span.close()  # another key, or cut short or grown since it was written: rendered again
        return None
    return span


def _write_text(store, gid: str, kind: str, key: list, text: str) -> None:
    body = text.encode("utf-8")
    try:
        fs.atomic_write(store.path(layout.trials_cache(gid, kind)), b"%s %d\n%s" % (_keyed(key), len(body), body),
                        sync=False, follow=False)
    except OSError:
        pass


def trial_list(ctx, goal_id=None, decision=None, limit=None):
    """Every trial of the experiment goal as rows (``_row``) with the summary; the full listing
    (no ``decision``, no ``limit``) is answered from its rendered text (table, tsv or the JSON of
    the rows) in ``cache/`` while the experiment's trial count and last trial are unchanged."""
    store = ctx.store()
    live = store.load(view="live")
    gid = store.read(lambda st: _goal(st, goal_id), live)
    e = experiments.get(live, gid)
    kind = {"text": "txt", "tsv": "tsv", "json": "json", "jsonl": "json"}.get(ctx.fmt)
    whole = kind is not None and decision is None and not limit
    key = [e["trials"], e["last_trial"]] + ([int(_ascii())] if kind == "json" else [])
    if whole:  # the rendered listing, as it was last rendered for this key, written out as it is
        span = _read_span(store, gid, kind, key)
        if span is not None:
            out = Rows()
            if kind == "json":
                out.json = span
            else:
                out.text = span
            out.total = e["trials"]
            return {"goal_id": gid, "metric": e["metric"], "direction": e["direction"], "trials": out,
                    "summary": experiments.summary(live, gid)}
    rows, cells, summary = _cached_rows(store, gid)
    pick = [i for i, r in enumerate(rows) if decision in (None, r["decision"])]
    if limit:
        pick = pick[-limit:]
    out = Rows(rows[i] for i in pick) if len(pick) != len(rows) else Rows(rows)
    out.cells = [cells[i] for i in pick] if len(pick) != len(rows) else cells
    data = {"goal_id": gid, "metric": e["metric"], "direction": e["direction"], "trials": out, "summary": summary}
    if whole and kind == "json":
        _write_text(store, gid, "json", key, encode(list(out), bool(key[-1])))
    elif whole:
        _write_text(store, gid, "txt", key[:2], _table(data))
        _write_text(store, gid, "tsv", key[:2], tabular(data, "\t").rstrip("\n"))  # as printed, less its newline
    return data


def _ascii() -> bool:
    """Whether ``--format json`` writes ASCII only here (``loopx.output``: by stdout's encoding)."""
    return _ascii_only(sys.stdout)


def tabular(d: dict, sep: str) -> str | Spliced:
    """``trial list --format tsv|csv``: one header and one line per trial (a results.tsv); from
    the rendered cache, a ``Spliced`` of its file (``loopx.output.print_text`` writes it out)."""
    if getattr(d["trials"], "text", None) is not None and sep == "\t":
        return Spliced([d["trials"].text])
    cols = experiments.TSV_COLUMNS
    lines: list[tuple[str, ...] | list[str]] = [cols]
    for r in d["trials"]:
        lines.append(experiments.row_cells(d["metric"], r))
    if sep == "\t":
        return "\n".join("\t".join(str(c).replace("\n", " ") for c in row) for row in lines) + "\n"

    import csv  # imports re: only the csv format pays for it
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerows(lines)
    return buf.getvalue()


def _table(d: dict) -> str:
    """The table of ``trial list`` without its summary line."""
    cells = getattr(d["trials"], "cells", None) or [_cells(d["metric"], r) for r in d["trials"]]
    header = ["trial", "hypothesis", "agent", d["metric"], "delta", "decision", "commit", "duration"]
    widths = [max(len(header[i]), max(map(len, col))) for i, col in enumerate(zip(*cells, strict=True))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    return "\n".join([fmt.format(*header).rstrip()] + [fmt.format(*c).rstrip() for c in cells])


def render_list(d: dict) -> str | Spliced:
    """The table and the summary line; with the table from the rendered cache, a ``Spliced`` of its
    file and the line (``loopx.output.print_text`` writes it out)."""
    t = d["trials"]
    if not t and not getattr(t, "total", 0):
        return f"no trials on {d['goal_id']} yet"
    s = d["summary"]
    line = (f"\n{ex.tally(s)}"
            + f"; frontier {ex.fmt_value((s['frontier'] or {}).get('value'))} ({ex.fmt_delta(s['total_improvement'])} "
              "over the baseline)")
    if getattr(t, "text", None) is not None:
        return Spliced([t.text, line])
    return _table(d) + line


def trial_show(ctx, trial, diff=False):
    from loopx.kernel.policy import trialstep  # the trial step loads the sandbox: not for `trial list`

    store = ctx.store()
    state = store.load()
    t = trialstep.resolve_trial(state, trial)
    e = experiments.get(state, t["goal"])
    out = dict(t, metric=e["metric"], ref=trialstep.trial_ref(t["id"]))
    if diff:
        out["diff"] = trialstep.diff(store, t["id"])
    return out


def render_show(d: dict) -> str:
    L = [f"trial {d['id']} (#{d.get('number')}) on {d['goal']}: {d['decision']}" + (" (re-measured on a newer frontier)"
                                                                                    if d.get("remeasured") else ""),
         f"  hypothesis: {safe(d.get('hypothesis') or '')}", f"  agent: {safe(d.get('agent') or '')}",
         f"  commit: {d.get('commit')}  (ref {d['ref']})", f"  parent frontier: {d.get('parent')} "
         f"({d['metric']} {ex.fmt_value(d.get('parent_value'))})",
         f"  {d['metric']}: {ex.fmt_value(d.get('value'))}  delta {ex.fmt_delta(d.get('delta'))}",
         f"  why: {safe(d.get('reason') or '')}"]
    others = {k: v for k, v in (d.get("metrics") or {}).items() if k != d["metric"]}
    if others:
        L.append("  other metrics: " + ", ".join(f"{k}={v:g}" for k, v in others.items()))
    if d.get("claims"):
        L.append("  claimed by the agent (not measured by loopx; decides nothing): "
                 + ", ".join(f"{k}={v:g}" for k, v in d["claims"].items()))
    g = d.get("guard")
    if g:
        L.append(f"  guard: {'passed' if g['passed'] else 'failed'} (exit {g['exit_code']})")
    if d.get("duration") is not None:
        L.append(f"  duration {d['duration']:.1f}s" + (f", {d['tokens']} tokens" if d.get("tokens") else "")
                 + (f", {d['cost_usd']:.4f} USD" if d.get("cost_usd") else ""))
    if d.get("tail"):
        L += ["  output (tail):"] + ["    " + safe(x) for x in d["tail"].splitlines()]
    if d.get("diff") is not None:
        L += ["", d["diff"] or "(no change)"]
    return "\n".join(L)


def trial_apply(ctx, trial, into=None):
    from loopx.kernel.policy import trialstep

    return Reply(trialstep.apply_trial(ctx.store(), ctx.actor, trial, into=into))
