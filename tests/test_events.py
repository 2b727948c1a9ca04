"""Each event type is declared once (loopx.kernel.storage.events): the table drives the line check
on read, the writer's check, the reducers' plain field copies, docs/file-format.md and
FOLD_VERSION. Adding a field is one row, and what follows from it follows without anyone
remembering."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from loopx.kernel.storage import events, fold
from loopx.kernel.storage.store import Draft, Store
from loopx.kernel.write import goals, todos

H = "human:tester"


def _gen_events():
    spec = importlib.util.spec_from_file_location("gen_events", REPO / "docs" / "gen_events.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_event_table_in_file_format_md_is_current():
    """docs/file-format.md's event table is generated from loopx.kernel.storage.events."""
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "gen_events.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_event_type_has_one_row_and_one_reducer():
    assert set(events.EVENTS) == set(fold.REDUCERS)
    for etype, (_, fields) in events.EVENTS.items():
        names = [f[0] for f in fields]
        assert len(names) == len(set(names)), etype
        assert all(f[1] in ("", "s", "n", "l", "d", "b") or (len(f[1]) == 2 and f[1][1] == "?") for f in fields), etype
    assert events.EVIDENCE_STREAM == ("evidence.added",)


def _with_field(table: dict, etype: str, field: tuple) -> dict:
    note, fields = table[etype]
    return {**table, etype: (note, (*fields, field))}


def test_a_new_field_is_one_row_and_the_docs_check_and_fold_version_follow(monkeypatch):
    """Add a field to a copy of the table: FOLD_VERSION and the generated doc change with it, the
    reducer copies it, and the line check enforces its type, with nothing else edited."""
    row = ("reviewer", events.S + events.OPT, events.COPY, "who reviews the goal's work")
    table = _with_field(events.EVENTS, "goal.updated", row)

    assert fold.version(table) != fold.FOLD_VERSION == fold.version()
    assert events.digest(table) != events.digest()

    gen = _gen_events()
    doc = (REPO / "docs" / "file-format.md").read_text(encoding="utf-8")
    assert gen.render(doc) == doc  # current for the real table...
    new = gen.render(doc, table)
    assert new != doc and "`reviewer` string or null — who reviews the goal's work" in new  # ...stale for the new one

    # the reducer and the line check follow the table
    monkeypatch.setattr(events, "EVENTS", table)
    monkeypatch.setattr(events, "_COPIED", {})
    monkeypatch.setattr(fold, "_PLANS", {})
    state = fold.empty()
    rec = {"type": "goal.started", "goal": "g1", "ts": "2026-01-01T00:00:00Z", "seq": 1, "data": {"objective": "x"}}
    fold.apply(state, rec)
    upd = {"type": "goal.updated", "goal": "g1", "ts": "2026-01-01T00:00:01Z", "seq": 2, "data": {"reviewer": "ada"}}
    fold.check_shape(upd)
    fold.apply(state, upd)
    assert state["goals"]["g1"]["reviewer"] == "ada"
    with pytest.raises(ValueError, match="'reviewer' has the wrong type"):
        fold.check_shape(dict(upd, data={"reviewer": 7}))


def test_a_changed_type_or_flag_changes_fold_version():
    note, fields = events.EVENTS["todo.claimed"]
    loose = {**events.EVENTS, "todo.claimed": (note, tuple((n, events.ANY, f, d) for n, _, f, d in fields))}
    optional = {**events.EVENTS, "todo.claimed": (note, tuple((n, t, 0, d) for n, t, _, d in fields))}
    assert len({fold.version(), fold.version(loose), fold.version(optional)}) == 3


@pytest.mark.parametrize(("etype", "data", "why"), [
    ("todo.claimed", {"todo_id": "t-1", "holder": 5, "lease_until": "2026-01-01T00:00:00Z"}, "'holder' has the wrong type"),
    ("todo.renewed", {"lease_until": "2026-01-01T00:00:00Z"}, "'todo_id' is missing"),
    ("todo.added", {"todo_id": "t-1", "title": "x", "depends_on": [1]}, "'depends_on' must list strings"),
    ("trial.recorded", {"decision": "keep"}, "'trial_id' is missing"),  # the trial rows are checked too
])
def test_a_line_that_breaks_its_row_is_a_bad_line_and_never_written(project, etype, data, why):
    from loopx.kernel.storage.store import decode, encode

    line = encode({"v": 1, "seq": 1, "id": "e-1", "ts": "2026-01-01T00:00:00Z", "actor": H, "type": etype,
                   "goal": "g1", "data": data})
    with pytest.raises(ValueError, match=why):
        decode(line.rstrip(b"\n"))
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="o", goal_id="g1")
    path = store.path("events.jsonl")
    before = Path(path).read_bytes()
    with pytest.raises(ValueError, match=why):
        store.transact(lambda s, now: [Draft(etype, "g1", data)], actor=H)
    assert Path(path).read_bytes() == before  # refused before a byte was written
    assert store.load()["goals"]["g1"]["objective"] == "o"


def _folds_seen(monkeypatch) -> list:
    """Where each fold of a log file started from now on: ``[(stream, offset)]``."""
    from loopx.kernel.storage import logfold

    seen: list = []
    real = logfold.fold_file

    def spy(store, state, name, offset, *a, **kw):
        seen.append((name, offset))
        return real(store, state, name, offset, *a, **kw)

    monkeypatch.setattr(logfold, "fold_file", spy)
    return seen


def test_a_cache_made_under_another_fold_version_is_rebuilt(project, monkeypatch):
    """Changing the table changes FOLD_VERSION: every cached snapshot and live view is then stale,
    and the next read folds the log from the start, answers the same and stamps the new version."""
    import marshal

    from loopx.kernel.storage import layout

    store = Store.open(str(project))
    goals.start_goal(store, H, objective="o", goal_id="g1", todos=["a", "b"])
    todos.add(store, H, "g1", "c")
    before = store.load(save_snapshot="refresh")
    store.load(view="live", save_snapshot="refresh")
    for name in (layout.SNAPSHOT, layout.LIVE):
        with open(store.path(name), "rb") as fh:
            assert marshal.loads(fh.read())["fold"] == fold.FOLD_VERSION

    newer = fold.version(_with_field(events.EVENTS, "goal.updated", ("reviewer", events.S, events.COPY, "")))
    monkeypatch.setattr(fold, "FOLD_VERSION", newer)
    monkeypatch.setattr(fold, "CODE_STAMP", (("another loopx's fold.py", 1, 2),))  # other sources
    folded_from = _folds_seen(monkeypatch)
    assert Store.open(str(project)).load(view="live") is not None
    after = Store.open(str(project)).load()
    assert ("events", 0) in folded_from  # the whole log again, not a tail after the old cache
    assert after["goals"] == before["goals"] and after["todos"] == before["todos"]
    with open(store.path(layout.SNAPSHOT), "rb") as fh:
        assert marshal.loads(fh.read())["fold"] == newer
    assert os.path.exists(store.path(layout.LIVE))


def test_a_cache_written_by_this_code_is_current_without_computing_the_fold_version(project, monkeypatch):
    """A live view stamped with the sources this process runs (``fold.CODE_STAMP``) was folded by
    this code: a fresh process reads it without computing ``FOLD_VERSION`` (it marshals the event
    table); one stamped by other sources is checked against ``FOLD_VERSION``, and used when that
    agrees (the same code in another place), else rebuilt (the test above)."""
    from loopx.kernel.storage import layout

    store = Store.open(str(project))
    goals.start_goal(store, H, objective="o", goal_id="g1", todos=["a", "b"])
    store.load(view="live", save_snapshot="refresh")
    import marshal

    with open(store.path(layout.LIVE), "rb") as fh:
        stamp = marshal.loads(fh.read())["code"]
    assert stamp == fold.CODE_STAMP and stamp[:2] == (fold.REVISION, fold.REDUCER_DIGEST)
    assert [f for f, _, _ in stamp[2:]] == list(fold.code_files())
    code = ("import sys; from loopx.kernel.storage import fold; from loopx.kernel.storage.store import Store; "
            f"s = Store.open({str(project)!r}).load(view='live'); "
            "print(sorted(s['todos']) != [], 'FOLD_VERSION' in vars(fold))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert out.stdout.split() == ["True", "False"], out.stderr

    folded_from = _folds_seen(monkeypatch)
    monkeypatch.setattr(fold, "CODE_STAMP", (("the same code elsewhere", 1, 2),))
    assert Store.open(str(project)).load(view="live")["goals"]["g1"]["objective"] == "o"
    assert ("events", 0) not in folded_from  # the same FOLD_VERSION: the cache is used


_AFTER_AN_UPGRADE = """
import os, sys
project, new_revision = sys.argv[1], sys.argv[2]
from loopx.kernel.storage import caches, fold
from loopx.kernel.storage.store import Store
src = fold.__file__
st = os.stat(src)
with open(src, encoding="utf-8") as fh:
    text = fh.read()
with open(src, "w", encoding="utf-8") as fh:  # the same size; its mtime put back below
    fh.write(text.replace("REVISION = " + str(fold.REVISION) + chr(10), "REVISION = " + new_revision + chr(10), 1))
os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
os.remove(os.path.join(project, ".loopx", "cache", "live.bin"))
Store.open(project).load(view="live", save_snapshot="refresh")  # this process still runs the old code
"""


def test_a_cache_saved_by_code_loaded_before_its_sources_changed_is_not_taken_as_the_new_codes(project, tmp_path):
    """A process that runs on while its sources are replaced (the runner across an upgrade) stamps
    what it saves with the code it loaded, so a process of the new code checks the version and
    folds anew, even when the new files have the old ones' sizes and mtimes."""
    import marshal
    import shutil

    pkg = tmp_path / "pkg"
    shutil.copytree(REPO / "src" / "loopx", pkg / "loopx", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(pkg), "PYTHONDONTWRITEBYTECODE": "1"}
    store = Store.open(str(project))
    goals.start_goal(store, H, objective="o", goal_id="g1", todos=["a"])
    new = str(fold.REVISION + 1 if fold.REVISION < 99 else fold.REVISION - 1)
    out = subprocess.run([sys.executable, "-c", _AFTER_AN_UPGRADE, str(project), new], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with open(store.path("cache/live.bin"), "rb") as fh:
        old = marshal.loads(fh.read())
    check = ("import marshal, sys; from loopx.kernel.storage import caches, fold; "
             "live = marshal.loads(open(sys.argv[1], 'rb').read()); "
             "print(fold.REVISION, caches._same_fold(live))")
    got = subprocess.run([sys.executable, "-c", check, store.path("cache/live.bin")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert got.stdout.split() == [new, "False"], got.stderr
    assert old["fold"].startswith(f"{fold.REVISION}.")  # folded and labelled by the old code


def test_every_field_a_reducer_reads_is_declared():
    """A reducer that reads ``d["x"]`` or ``d.get("x")`` of a field no row declares fails here: the
    field's type, the docs and FOLD_VERSION would not know it."""
    import re

    declared = {f[0] for _, fields in events.EVENTS.values() for f in fields}
    src = "".join((REPO / "src" / "loopx" / "kernel" / "storage" / name).read_text()
                  for name in ("fold.py", "trialfold.py"))
    read = set(re.findall(r'\bd(?:\.get)?[\[(]"(\w+)"', src))
    assert read and read <= declared, sorted(read - declared)


# ---------------------------------------------------------------- the reducers' code (issue 25)
def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _copy_of_the_repo(tmp_path: Path) -> Path:
    """src/loopx, the event table's generator and docs/file-format.md, and tests/tools, copied."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(REPO / "src" / "loopx", copy / "src" / "loopx", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "tests" / "tools", copy / "tests" / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "docs").mkdir()
    for name in ("gen_events.py", "gendoc.py", "file-format.md"):
        shutil.copy(REPO / "docs" / name, copy / "docs" / name)
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def _fold_version(root: Path) -> str:
    """FOLD_VERSION as a fresh process importing loopx from ``root``/src computes it. No bytecode
    is written into the copy (``-B``): an edit of the same size within the second after a ``.pyc``
    was written would look current to the import system, and the edit would go unseen."""
    code = "from loopx.kernel.storage import fold; print(fold.__file__); print(fold.FOLD_VERSION)"
    proc = subprocess.run([sys.executable, "-B", "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(root / "src")})
    where, version = proc.stdout.split()
    assert Path(where).is_relative_to(root / "src")
    return version


def test_the_reducers_code_is_the_one_fold_version_was_recorded_for():
    """A reducer's logic reaches FOLD_VERSION through the digest recorded in fold.REDUCER_DIGEST
    (nothing reads source at run time). Changing that code without recording its digest fails
    here, so a cache folded by the old logic can never be served by the new one."""
    tool = _load(REPO / "tests" / "tools" / "reducer_digest.py", "reducer_digest")
    assert tool.digest() == fold.REDUCER_DIGEST, (
        "reducer code changed: record the new digest with `python tests/tools/reducer_digest.py --write` "
        "(fold.REDUCER_DIGEST; FOLD_VERSION then changes and every cache is rebuilt from the log)")
    assert f".{fold.REDUCER_DIGEST}." in fold.FOLD_VERSION == fold.version()


def test_the_reducer_digest_sees_logic_and_not_docstrings_comments_or_event_rows(tmp_path):
    """On a copy of the code: a reworded docstring, a comment, a reflowed line and a new row of the
    event table leave the digest alone (a new field stays one row); a changed reducer, a changed
    live-view rule, a changed quota default and a changed line check each change it; and
    ``--write`` records it where FOLD_VERSION reads it."""
    copy = _copy_of_the_repo(tmp_path)
    storage = copy / "src" / "loopx" / "kernel" / "storage"
    tool = _load(copy / "tests" / "tools" / "reducer_digest.py", "reducer_digest_copy")
    first = tool.digest()
    assert first == fold.REDUCER_DIGEST
    _edit(storage / "fold.py", "def _goal_updated(s, r, d):\n", "def _goal_updated(s, r, d):\n    \"\"\"Copy.\"\"\"\n")
    _edit(storage / "fold.py", "    _copy(g, r, d)\n    g[\"updated\"] = r[\"ts\"]\n",
          "    _copy(g, r, d)  # the table's copies\n    g[\"updated\"] = (\n        r[\"ts\"])\n")
    _edit(storage / "trialfold.py", "LIVE_TRIALS = 40", "LIVE_TRIALS = 40  # a comment")
    _edit(storage / "events.py", '("objective", "s", COPY, ""), ("done_when", "", COPY, ""),',
          '("objective", "s", COPY, ""), ("reviewer", "s?", COPY, "who reviews"), ("done_when", "", COPY, ""),')
    assert tool.digest() == first
    seen = {first}
    for name, old, new in [
        ("fold.py", '    g["updated_seq"] = r["seq"]\n\n\ndef _goal_status', '\n\ndef _goal_status'),
        ("fold.py", "HANDOFF_KEEP = 200", "HANDOFF_KEEP = 100"),
        ("quotas.py", '"stall_after": 3}', '"stall_after": 4}'),
        ("events.py", '"n": (int, float)', '"n": (int,)'),
        ("trialfold.py", 'DECISIONS = ("keep", "discard", "crash", "stale")', 'DECISIONS = ("keep", "discard", "crash")'),
        ("logfold.py", "BAD_SAMPLES = 20", "BAD_SAMPLES = 21"),
    ]:
        _edit(storage / name, old, new)
        now = tool.digest()
        assert now not in seen, (name, old)
        seen.add(now)
    before = _fold_version(copy)
    assert tool.write(now)
    assert tool.digest() == now  # recording it is no change of the code
    after = _fold_version(copy)
    assert after != before and f".{now}." in after


def test_a_row_added_to_events_py_moves_fold_version_and_the_doc_with_nothing_else_edited(tmp_path):
    """The promise of a new field, on a copy of the code edited as a developer would: one row in
    events.py, and FOLD_VERSION changes by itself, the reducer copies the field, the doc check
    says the table is stale until the generator runs, and no reducer digest needs recording."""
    copy = _copy_of_the_repo(tmp_path)
    _edit(copy / "src" / "loopx" / "kernel" / "storage" / "events.py",
          '("objective", "s", COPY, ""), ("done_when", "", COPY, ""),',
          '("objective", "s", COPY, ""), ("reviewer", "s?", COPY, "who reviews the goal\'s work"), '
          '("done_when", "", COPY, ""),')
    assert _fold_version(copy) != fold.FOLD_VERSION
    tool = _load(copy / "tests" / "tools" / "reducer_digest.py", "reducer_digest_row")
    assert tool.digest() == fold.REDUCER_DIGEST  # a row is not reducer code: nothing to record

    gen = [sys.executable, str(copy / "docs" / "gen_events.py")]
    stale = subprocess.run([*gen, "--check"], capture_output=True, text=True)
    assert stale.returncode == 1 and "out of date" in stale.stdout
    subprocess.run(gen, check=True)
    assert subprocess.run([*gen, "--check"], capture_output=True, text=True).returncode == 0
    assert "`reviewer` string or null — who reviews the goal's work" in (copy / "docs" / "file-format.md").read_text()

    code = ("from loopx.kernel.storage import fold\n"
            "s = fold.empty()\n"
            "fold.apply(s, {'type': 'goal.started', 'goal': 'g1', 'ts': 't', 'seq': 1, 'data': {'objective': 'x'}})\n"
            "u = {'type': 'goal.updated', 'goal': 'g1', 'ts': 't', 'seq': 2, 'data': {'reviewer': 'ada'}}\n"
            "fold.check_shape(u); fold.apply(s, u); print(s['goals']['g1']['reviewer'])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(copy / "src")})
    assert proc.stdout.strip() == "ada"
