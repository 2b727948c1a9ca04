"""The review packet: a handoff and retrospective report of one goal.

``build(store, goal_id=None, since=None) -> dict`` (``since``: a datetime, or None for the whole
life of the goal) gathers::

    {"goal": {id, objective, done_when, status, verify, created},
     "period": {"since": ISO|None, "until": ISO},
     "progress": {"counts": {open, claimed, expired, blocked, done, archived},
                  "done": [{id, title, done_at, evidence[]}], "open": [{id, title, status}],
                  "blocked": [{id, title, note}]},
     "rounds": {"count", "finished", "by_result": {result: n}, "progress_rate" (0..1|None),
                "verified", "slots_spent", "budget": {slots, window, spent, left}},
     "gates": {"decided": [{id, kind, question, status, decided_by, note, decided}],
               "pending": [{id, kind, question, created}]},
     "evidence": {"tests": [{id, summary, exit_code, ts}], "commits": [{id, summary, commit, ts}]},
     "problems": {"failures": [{run_id, todo_id, result, note, finished}], "stalls": n,
                  "skips": n, "out_of_scope": [{run_id, todo_id, files[]}] (turns that changed files
                  outside the goal's scope)},
     "decision": <should-run decision dict, not recorded>,
     "next_steps": [str],
     "machines": {node: name} (only when records of several machines are in the store; then the
                 turns and failures also carry ``machine`` and the decided gates ``decided_on``)}

``render_markdown(d) -> str`` renders it; agent-written text is escaped so it shows as text in
any Markdown or HTML viewer.
"""

from __future__ import annotations

import re

from loopx.kernel import reasons
from loopx.kernel.policy import decide
from loopx.kernel.read import budget, experiments, queries
from loopx.kernel.read import experiments as ex
from loopx.kernel.storage import clock, machines
from loopx.kernel.storage.clock import datetime
from loopx.usage.text import usage_line

LIST = 20
_CTRL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def _t(s, limit: int = 300) -> str:
    """Agent text made inert for Markdown/HTML: one line, no controls, HTML-escaped, bounded."""
    if s is None:
        return ""
    s = " ".join(_CTRL.sub("", str(s)).split())
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    # & and < are all Markdown's HTML needs to stay text; a lone > (the "->" of a trial's summary)
    # opens nothing, and escaped it reads as "-&gt;" wherever the packet is shown as plain text
    return s.replace("&", "&amp;").replace("<", "&lt;")


def build(store, goal_id: str | None = None, since: datetime | None = None) -> dict:
    state = store.load()
    g = queries.resolve_goal(state, goal_id)
    gid = g["id"]
    now = clock.now()
    since_iso = clock.iso(since) if since else ""
    d = decide.for_client(store, state, gid, now=now)  # the one input builder: what should-run says
    runs = sorted((r for r in state["runs"].values() if r["goal"] == gid and r["started"] > since_iso),
                  key=lambda r: r["started"])
    out: dict = {
        "goal": {k: g.get(k) for k in ("id", "objective", "done_when", "status", "verify", "created")},
        "period": {"since": since_iso or None, "until": clock.iso(now)},
        "progress": _progress(queries.by_status(state, gid, clock.iso(now)), since_iso),
        "rounds": _rounds(state, g, runs, since_iso, now),
        "gates": _gates([x for x in state["gates"].values() if x["goal"] == gid], since_iso),
        "evidence": _evidence(state, gid, since_iso),
        "problems": _problems(store, gid, runs, since_iso, _trial_runs(state, gid)),
        "decision": d,
    }
    out["next_steps"] = _next_steps(out, d)
    _with_machines(out, state, runs)
    if (state.get("experiments") or {}).get(gid):  # research experiments (issue 20): the same read model

        summary = experiments.summary(state, gid)
        assert summary is not None  # the goal has an experiment (the test above)
        out["experiment"] = dict(summary, trials_list=[
            {k: t.get(k) for k in ("id", "number", "hypothesis", "agent", "value", "delta", "decision", "commit", "claims")}
            for t in experiments.rows(state, gid)])
    return out


def _experiment_md(x: dict) -> list[str]:
    b, f = x.get("baseline") or {}, x.get("frontier") or {}
    L = ["", "## Experiment", "",
         f"{_t(x['metric'])} ({'higher' if x['direction'] == 'max' else 'lower'} is better): baseline "
         f"{ex.fmt_value(b.get('value'))}, frontier {ex.fmt_value(f.get('value'))} ({ex.fmt_delta(x['total_improvement'])}); "
         f"{ex.tally(x)}.", ""]
    p = x.get("promoted")
    if p:
        h = p.get("holdout") or {}
        L += [f"Promoted {p['trial']} into {_t(p.get('into') or '?')} (gate {p['gate']}); holdout "
              + (ex.fmt_value(h.get("value")) if h else "none") + ".", ""]
    L += ["| trial | hypothesis | value | delta | decision |", "|---|---|---|---|---|"]
    for t in x["trials_list"][-50:]:
        claim = (" (claimed " + ", ".join(f"{v:g}" for v in t["claims"].values()) + ")") if t.get("claims") else ""
        L.append(f"| {t['id']} | {_t(t.get('hypothesis') or '', 120).replace('|', '/')} | {ex.fmt_value(t.get('value'))}"
                 f"{claim} | {ex.fmt_delta(t.get('delta'))} | {t['decision']} |")
    return L


def _with_machines(out: dict, state: dict, runs: list[dict]) -> None:
    """When the store holds records of several machines, name the machine of each turn, decided
    gate, done todo and failure (``machine``, ``decided_on``) and list them (``machines``)."""
    if not machines.several(state):
        return
    names = machines.labels(state)
    by_run = {r["id"]: machines.label(names, r.get("node")) for r in runs}
    out["machines"] = names
    for t in out["rounds"]["turns"]:
        t["machine"] = by_run.get(t["run_id"])
    for f in out["problems"]["failures"]:
        f["machine"] = by_run.get(f["run_id"])
    for x in out["gates"]["decided"]:
        x["decided_on"] = machines.label(names, state["gates"][x["id"]].get("decided_node"))


def _progress(groups: dict, since_iso: str) -> dict:
    return {
        "counts": {k: len(v) for k, v in groups.items()},
        "done": [{"id": t["id"], "title": t["title"], "done_at": t.get("done_at"), "evidence": t.get("evidence") or [],
                  "forced": t.get("forced")}
                 for t in groups["done"] if (t.get("done_at") or "") > since_iso][-LIST:],
        "open": [{"id": t["id"], "title": t["title"], "status": t["status"]}
                 for t in groups["open"] + groups["claimed"] + groups["expired"]][:LIST],
        "blocked": [{"id": t["id"], "title": t["title"], "note": t.get("note")} for t in groups["blocked"]][:LIST]}


def _rounds(state: dict, g: dict, runs: list[dict], since_iso: str, now) -> dict:
    finished = [r for r in runs if r["finished"]]
    by_result: dict[str, int] = {}
    for r in finished:
        by_result[r["result"]] = by_result.get(r["result"], 0) + 1
    good = by_result.get("progress", 0) + by_result.get("completion", 0)
    spends = [e for e in state["spends"].get(g["id"], []) if e[0] > since_iso]
    costed = [r["usage"] for r in finished if r.get("usage")]
    # a trial's run: loopx committed its work (to the trial's ref) after the turn's changes were measured
    trial_of = _trial_runs(state, g["id"])
    usd = [u["cost_usd"] for u in costed if u.get("cost_usd") is not None]
    tok = [u["total_tokens"] for u in costed if u.get("total_tokens") is not None]
    return {"count": len(runs), "finished": len(finished), "by_result": by_result,
            "progress_rate": round(good / len(finished), 3) if finished else None,
            "verified": sum(1 for r in finished if r["verified"] and r["result"] in ("progress", "completion")),
            "slots_spent": sum(e[1] for e in spends), "budget": budget.brief(budget.budget(state, g, now)),
            "cost_usd": round(sum(usd), 6) if usd else None, "tokens": sum(tok) if tok else None,
            "usage_unknown": len(finished) - len(costed),
            "cost_unknown": len(costed) - len(usd),  # tokens reported, no price (never counted as 0.00)
            "host_errors": [{"run_id": r["id"], "reason": r["setup_error"].get("reason"),
                             "message": r["setup_error"].get("message")} for r in finished if r.get("setup_error")][-10:],
            "turns": [{"run_id": r["id"], "todo_id": r.get("todo"), "result": r["result"], "usage": r.get("usage"),
                       "changes": r.get("changes"), "permission_mode": r.get("permission_mode"),
                       "trial": trial_of.get(r["id"], {}).get("id"), "trial_commit": trial_of.get(r["id"], {}).get("commit")}
                      for r in finished][-10:]}


def _gates(gates: list[dict], since_iso: str) -> dict:
    gates = sorted(gates, key=lambda x: x["created"])
    return {"decided": [{k: x.get(k) for k in ("id", "kind", "question", "status", "decided_by", "note", "decided")}
                        for x in gates if x["status"] != "pending" and (x.get("decided") or "") > since_iso],
            "pending": [{k: x.get(k) for k in ("id", "kind", "question", "created")}
                        for x in gates if x["status"] == "pending"]}


def _evidence(state: dict, gid: str, since_iso: str) -> dict:
    evid = sorted((e for e in state["evidence"].values() if e["goal"] == gid and e["ts"] > since_iso),
                  key=lambda e: e.get("seq", 0))
    return {"tests": [{"id": e["id"], "summary": e["summary"], "exit_code": e.get("exit_code"), "ts": e["ts"]}
                      for e in evid if e["kind"] == "test" and e.get("exit_code") == 0][-10:],
            "commits": [{"id": e["id"], "summary": e["summary"], "commit": e.get("commit"), "ts": e["ts"]}
                        for e in evid if e["kind"] == "commit" or e.get("commit")][-10:]}


def _worked_on(run: dict) -> str:
    """What a listed run worked on: its trial, its todo, or planning."""
    return f"trial {run['trial']}" if run.get("trial") else (run.get("todo_id") or "planning")


def _trial_runs(state: dict, gid: str) -> dict:
    """{run id: its trial} of an experiment goal (a trial's run works on no todo)."""
    return {t["run"]: t for t in (state.get("trials") or {}).values() if t.get("goal") == gid and t.get("run")}


def _problems(store, gid: str, runs: list[dict], since_iso: str, trial_of: dict) -> dict:
    stalls = skips = 0
    for rec in store.iter_records("events"):
        if rec["type"] == "decision.recorded" and rec.get("goal") == gid and rec["ts"] > since_iso:
            data = rec.get("data") or {}
            stalls += data.get("reason") == "stalled"
            skips += data.get("decision") == "skip"
    return {"failures": [{"run_id": r["id"], "todo_id": r.get("todo"), "result": r["result"], "note": r.get("note"),
                          "finished": r["finished"], "trial": trial_of.get(r["id"], {}).get("id")}
                         for r in runs if r["finished"] and r["result"] in ("failed", "no_progress", "blocked")][-10:],
            "stalls": stalls, "skips": skips,
            "out_of_scope": [{"run_id": r["id"], "todo_id": r.get("todo"), "files": r["out_of_scope"]}
                             for r in runs if r.get("out_of_scope")][-10:]}


def _next_steps(r: dict, d: dict) -> list[str]:
    steps = []
    for x in r["gates"]["pending"]:
        steps.append(f"A human decides gate {x['id']} ({x['kind']}): {x['question'][:200]} -- "
                     f"`loopx gate approve {x['id']} --confirm {x['id']}` or `loopx gate reject {x['id']} --note ...`")
    for t in r["progress"]["blocked"][:5]:
        steps.append(f"Unblock {t['id']} ({t['title'][:80]}): {t.get('note') or 'no reason recorded'}")
    if d["reason"] != "gate_pending" or not r["gates"]["pending"]:  # the registry's command for the decision

        steps.append(f"should-run says {d['decision']} ({d['reason']}): {d['message']} "
                     f"(`{reasons.next_command(d)}`)")
    return steps


def _on(machine: str | None) -> str:
    """`` on <machine>`` (the machine of a turn or decision, in a multi-machine store) or nothing."""
    return f" on {_t(machine, 80)}" if machine else ""


def _n(count: int, noun: str) -> str:
    """``1 turn``, ``2 turns``, ``0 turns``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def render_markdown(d: dict) -> str:
    g, p, r = d["goal"], d["progress"], d["rounds"]
    L = [f"# Review: {_t(g['id'])}", "", f"**Objective:** {_t(g['objective'], 1000)}", ""]
    if g.get("done_when"):
        L += [f"**Done when:** {_t(g['done_when'], 1000)}", ""]
    since = d["period"]["since"] or g.get("created")
    L += [f"Status **{g['status']}** · period {since} to {d['period']['until']}", ""]
    if d.get("machines"):
        L += ["Machines: " + ", ".join(f"{_t(name, 80)} (`{node}`)" for node, name in sorted(d["machines"].items(),
                                                                                        key=lambda x: x[1])), ""]
    L += ["## Progress", ""]
    c = p["counts"]
    L.append(f"{c['done']} done, {c['open'] + c['claimed'] + c['expired']} open, {c['blocked']} blocked.")
    L.append("")
    L += [f"- [x] {_t(t['title'], 120)} (`{t['id']}`, evidence {', '.join(t['evidence']) or 'none'})"
          if not t.get("forced") else
          f"- [ ] {_t(t['title'], 120)} (`{t['id']}`, **closed UNVERIFIED** by {_t(t['forced'].get('by'))} with "
          f"--force-unverified: {_t(t['forced'].get('why'), 200)})" for t in p["done"]]
    L += [f"- [ ] {_t(t['title'], 120)} (`{t['id']}`, {t['status']})" for t in p["open"]]
    L += [f"- [!] {_t(t['title'], 120)} (`{t['id']}`, blocked" + (f": {_t(t['note'], 160)}" if t.get("note") else "") + ")"
          for t in p["blocked"]]
    rate = "n/a" if r["progress_rate"] is None else f"{round(r['progress_rate'] * 100)}%"
    b = r["budget"]
    L += ["", "## Rounds", "",
          f"{_n(r['count'], 'turn')} ({r['finished']} finished), progress rate {rate}, {r['verified']} verified.",
          f"Slots spent in the period: {r['slots_spent']}; budget now {b['spent']}/{b['slots']} per "
          f"{clock.format_duration(b['window'])} ({b['left']} left).", ""]
    if r["by_result"]:
        L.append("Results: " + ", ".join(f"{k} {v}" for k, v in sorted(r["by_result"].items())))
        L.append("")
    if r.get("turns"):
        usd_known = r["cost_usd"] is not None
        cost = f"{r['cost_usd']:.2f} USD" if usd_known else "unknown"
        toks = "unknown" if r["tokens"] is None else f"{r['tokens']:,} tokens"
        L.append(f"Reported cost of the period: {cost if cost == toks else f'{cost}, {toks}'}"
                 + (f" ({r['usage_unknown']} turn(s) reported no usage)" if r["usage_unknown"] else "")
                 + (f" ({r['cost_unknown']} turn(s) without a price)" if r.get("cost_unknown") and usd_known else "")
                 + ".")
        L.append("")

        for t in r["turns"]:
            c = t.get("changes")
            if c and t.get("trial"):
                ch = (f"; {c['files']} file(s) +{c['added']}/-{c['removed']}, committed by loopx"
                      + (f" ({t['trial_commit'][:10]})" if t.get("trial_commit") else ""))
            else:
                ch = (f"; {c['files']} file(s) +{c['added']}/-{c['removed']}, {c['commit_count']} commit(s)"
                      + ("" if c.get("committed") else ", uncommitted")) if c else ""
            L.append(f"- `{t['run_id']}` {t['result']} on {_worked_on(t)}{_on(t.get('machine'))}: "
                     f"{usage_line(t.get('usage'))}{ch}")
        L.append("")
    for e in r.get("host_errors") or []:
        L.append(f"- host could not work in `{e['run_id']}`: {e['reason']}: {_t(e['message'], 200)}")
    if r.get("host_errors"):
        L.append("")
    L += ["## Gates", ""]
    gates = d["gates"]
    for x in gates["pending"]:
        L.append(f"- **pending** `{x['id']}` ({x['kind']}): {_t(x['question'])}")
    for x in gates["decided"]:
        note = f" -- {_t(x['note'])}" if x.get("note") else ""
        L.append(f"- {x['status']} `{x['id']}` ({x['kind']}) by {_t(x['decided_by'])}{_on(x.get('decided_on'))}: "
                 f"{_t(x['question'])}{note}")
    if not gates["pending"] and not gates["decided"]:
        L.append("No gates in this period.")
    L += ["", "## Key evidence", ""]
    ev = d["evidence"]
    L += [f"- test `{e['id']}`: {_t(e['summary'], 200)}" for e in ev["tests"]]
    L += [f"- commit `{e['id']}`" + (f" {_t(e['commit'], 40)}" if e.get("commit") else "") + f": {_t(e['summary'], 200)}"
          for e in ev["commits"]]
    if not ev["tests"] and not ev["commits"]:
        L.append("No passing tests or commits recorded in this period.")
    pr = d["problems"]
    L += ["", "## Stalls and failures", "",
          f"{_n(len(pr['failures']), 'unproductive turn')} listed, {_n(pr['stalls'], 'stall')}, "
          f"{_n(pr['skips'], 'skip decision')}."]
    L += [f"- `{f['run_id']}` {f['result']} on {_worked_on(f)}{_on(f.get('machine'))}: "
          f"{_t(f.get('note'), 200) or 'no note'}" for f in pr["failures"]]
    if pr.get("out_of_scope"):
        L += ["", "## Changes outside the scope", "",
              "These turns changed files outside the goal's scope; none counts as a verified completion "
              "until a human looked:", ""]
        L += [f"- `{x['run_id']}` on {x['todo_id'] or 'planning'}: " + ", ".join(f"`{_t(p, 200)}`" for p in x["files"][:20])
              for x in pr["out_of_scope"]]
    if d.get("experiment"):
        L += _experiment_md(d["experiment"])
    L += ["", "## Next steps", ""] + [f"{i}. {_t(s, 600)}" for i, s in enumerate(d["next_steps"], 1)]
    return "\n".join(L) + "\n"
