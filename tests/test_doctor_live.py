"""Issue 26: `doctor` on a store whose full snapshot is large compares the live view with one
rebuilt from the newest checkpoint instead of folding the whole log next to the loaded snapshot
(which held two full states: 44 s of CPU and 1.16 GB at a million events). Counted, not timed."""

from __future__ import annotations

import importlib.util
import marshal

import pytest

from conftest import REPO
from loopx.kernel.storage import caches, fold, layout, logfold
from loopx.kernel.storage.caches import SNAPSHOT_VERSION
from loopx.kernel.storage.store import Store
from loopx.ops import storechecks


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("storebuild", REPO / "bench" / "storebuild.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build(str(tmp_path_factory.mktemp("doctor-live")), 30_000)  # one closed segment, a checkpoint


def _doctor(cli, proj, *args):
    r = cli("doctor", "--project", proj, *args, json=True)
    assert "checks" in r.data, f"doctor gave no checks (exit {r.code}): {r.out} {r.err}"
    return r, {c["id"]: c for c in r.data["checks"]}


def test_a_large_snapshot_is_checked_through_the_live_view_without_folding_the_log(big, cli, monkeypatch):
    assert Store.open(big).closed_segments("events") >= 1
    assert cli("todo", "list", "--all", "--project", big).code == 0  # a full read: writes cache/snapshot.bin
    assert storechecks.too_large(Store.open(big), str(Store.open(big).path("cache", "snapshot.bin")))
    folded = [0]
    real = logfold.fold_file

    def counting(*a, **kw):
        n, torn = real(*a, **kw)
        folded[0] += n
        return n, torn

    monkeypatch.setattr(logfold, "fold_file", counting)
    r, checks = _doctor(cli, big)
    snap = checks["store.snapshot"]
    assert snap["status"] == "ok" and "the live view matches the log" in snap["finding"], snap
    assert folded[0] < 30_000 // 3, folded  # the tails after the cache and the checkpoint, not the log

    # a live view that disagrees with the log is found, and --fix rebuilds it
    store = Store.open(big)
    cached, _ = caches.load_snapshot(store, layout.LIVE)
    cached["goals"]["goal-1"]["objective"] = "tampered"
    with open(store.path(layout.LIVE), "wb") as fh:
        fh.write(marshal.dumps({"v": SNAPSHOT_VERSION, "fold": fold.FOLD_VERSION, "state": cached}))
    r, checks = _doctor(cli, big)
    assert checks["store.snapshot"]["status"] == "error" and "goal-1" in checks["store.snapshot"]["finding"]
    r, checks = _doctor(cli, big, "--fix")
    assert checks.get("store.snapshot", {}).get("status") != "error"
    assert Store.open(big).load(view="live")["goals"]["goal-1"]["objective"] != "tampered"
