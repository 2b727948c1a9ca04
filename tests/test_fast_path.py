"""The parser-free fast path for `status` and `quota should-run` must behave exactly like argparse."""

from __future__ import annotations

import inspect

import pytest

from loopx import cli


@pytest.mark.parametrize("argv", [
    ["status"], ["status", "--goal-id", "g1"], ["status", "--goal=g1"], ["status", "--orient"],
    ["quota", "should-run"], ["quota", "should-run", "--goal-id", "g1", "--skip-exit", "0", "--explain"],
    ["quota", "should-run", "--no-record", "--skip-exit=3"],
    ["history"], ["history", "--limit", "20"], ["history", "--limit=0", "--events"],
    ["history", "--goal", "g1", "--since", "24h", "--type", "gate.", "--rounds"],
    ["todo", "list"], ["todo", "list", "--ready"], ["todo", "list", "--all", "--goal-id", "g1"],
    ["trial", "list"], ["trial", "list", "--goal", "knn"], ["experiment", "show"], ["experiment", "show", "--goal-id", "k"],
    ["experiment", "show", "knn"],
    ["todo", "done", "t-1"], ["todo", "done", "t-1", "--evidence", "ev-1", "--evidence=ev-2", "--fence", "7"],
    ["todo", "done", "t-1", "--next", "a", "--next", "b", "--note", "n", "--fence=-2"],
    ["quota", "spend-slot", "--run", "r-1"], ["quota", "spend-slot", "--run=r-1", "--slots", "2"],
    ["gate", "open", "--kind", "merge", "--question", "q?", "--blocks", "t-1", "--blocks", "t-2"],
    ["scope", "check", "src/a.py"], ["scope", "check", "--goal", "g1", "src/a.py"],
])
def test_fast_path_parses_like_argparse(argv):
    fast = cli._fast(argv)
    assert fast is not None
    handler, render, name, args = cli._parse(argv)
    assert fast[0] is handler and fast[1] is render and fast[2] == name
    defaults = {k: p.default for k, p in inspect.signature(handler).parameters.items() if k != "ctx"}
    assert {**defaults, **fast[3]} == args  # the handler's defaults fill in what the fast path omits


@pytest.mark.parametrize("argv", [
    ["status", "--help"], ["status", "--bogus"], ["status", "--goal-id"], ["status", "--goal-id", "--orient"],
    ["status", "extra"], ["quota", "should-run", "--explain=yes"], ["quota", "show"],
    ["history", "--rounds", "--events"], ["history", "--limit"],
    ["todo", "list", "--status", "bogus"], ["todo", "list", "--status", "open"], ["trial", "list", "--limit", "3"],
    ["trial", "list", "--decision", "keep"], ["experiment", "show", "knn", "extra"],
    ["todo", "done"], ["todo", "done", "t-1", "--fence", "x"], ["todo", "done", "t-1", "--fence", "1", "--fence", "2"],
    ["todo", "done", "t-1", "--evidence"], ["quota", "spend-slot"], ["quota", "spend-slot", "--slots", "2"],
])
def test_anything_unusual_falls_back_to_argparse(argv):
    assert cli._fast(argv) is None


def test_same_output_both_ways(goal, cli, monkeypatch):
    from loopx.kernel.storage import clock

    # one frozen moment for both calls: the answer stamps whole seconds (`evaluated_at`), and on a
    # loaded machine two calls can straddle a second
    monkeypatch.setenv("LOOPX_NOW", clock.now_iso())
    fast_out = cli("quota", "should-run", "--goal-id", goal, "--no-record", json=True)
    monkeypatch.setattr("loopx.cli._fast", lambda rest: None)
    slow_out = cli("quota", "should-run", "--goal-id", goal, "--no-record", json=True)
    assert fast_out.code == slow_out.code and fast_out.json == slow_out.json
    assert cli("status", "--bogus").code == 2  # the argparse error, not a fast-path crash
    assert cli("todo", "list", "--status", "bogus").code == 2  # the choice is checked by the parser


# ---------------------------------------------------------------- the quick exit (cli.entry)
def _entry(tmp_path, argv: list[str], before: str = "", **kw):
    """Run ``loopx.cli.entry()`` in a fresh interpreter after ``before`` (Python source). The exit
    callbacks that the interpreter's start registered are cleared first: a ``.pth`` file in
    site-packages may register one (seen in CI: a CA injector whose ``certifi.where()`` does), and
    with any callback registered ``entry()`` rightly takes the normal way out."""
    import os
    import subprocess
    import sys

    code = f"import atexit, sys\natexit._clear()\n{before}\nsys.argv = ['loopx', *{argv!r}]\nfrom loopx.cli import entry\nentry()\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_HOME"] = str(tmp_path / "home")
    return subprocess.run([sys.executable, "-c", code], cwd=kw.get("cwd", tmp_path), env=env,
                          capture_output=True, timeout=60)


def test_a_hot_command_ends_without_a_collection_and_the_normal_way_out_turns_it_back_on(project, goal, tmp_path):
    """After a hot command's main() nothing is collected before the quick exit (turning the collector
    back on there would walk every object the command made, right before the exit frees them); a
    process that takes the normal way out (here: an atexit callback) has its collector on again."""
    log = tmp_path / "gc.log"
    spy = ("import atexit, gc\n"
           "import loopx.cli as c\n"
           "real = c.main\n"
           f"out = open({str(log)!r}, 'a')\n"
           "after = []\n"
           "gc.callbacks.append(lambda phase, info: after and phase == 'start' and (out.write('collected\\n'), out.flush()))\n"
           "def main(*a, **k):\n"
           "    code = real(*a, **k)\n"
           "    after.append(1)  # from here on, a collection is logged\n"
           "    return code\n"
           "c.main = main\n")
    proc = _entry(tmp_path, ["quota", "should-run", "--format", "json"], before=spy, cwd=project)
    assert proc.returncode in (0, 1), proc.stderr
    assert log.read_text() == ""
    at_exit = spy + f"atexit.register(lambda: open({str(log)!r}, 'a').write(f'enabled={{gc.isenabled()}}\\n'))\n"
    proc = _entry(tmp_path, ["quota", "should-run", "--format", "json"], before=at_exit, cwd=project)
    assert proc.returncode in (0, 1), proc.stderr
    assert "enabled=True" in log.read_text().splitlines()


def test_an_interrupt_escaping_main_under_entry_turns_the_collector_back_on(tmp_path, monkeypatch):
    """A hot command's pause lasts to the quick exit only: when something escapes ``main()`` under
    ``entry()`` (a second Ctrl-C while the first error is reported), the collector is on again."""
    import gc
    import sys

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)  # no store: should-run fails and reports it
    monkeypatch.setenv("LOOPX_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cli, "_fail", interrupted)
    monkeypatch.setattr(sys, "argv", ["loopx", "quota", "should-run", "--format", "json"])
    assert gc.isenabled()
    with pytest.raises(KeyboardInterrupt):
        cli.entry()
    assert gc.isenabled() and not cli.LAST["paused"] and not cli.LAST["exits"]


def test_quick_exit_keeps_the_exit_code_and_every_byte_of_output(project, goal, cli, tmp_path):
    for i in range(300):  # far more than one pipe buffer of JSON
        assert cli("todo", "add", f"todo {i} " + "x" * 100, "--quiet").code == 0
    proc = _entry(tmp_path, ["history", "--limit", "1000", "--format", "json"], cwd=project)
    import json

    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["data"]["events"]) >= 300
    bad = _entry(tmp_path, ["todo", "show", "t-nope"], cwd=project)
    assert bad.returncode == 2 and b"no todo matches" in bad.stderr and b"hint:" in bad.stderr


def test_an_atexit_callback_still_runs(tmp_path):
    marker = tmp_path / "ran"
    before = f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').close())"
    proc = _entry(tmp_path, ["--version"], before=before)
    assert proc.returncode == 0 and proc.stdout.startswith(b"loopx ")
    assert marker.exists()  # skipping the interpreter's shutdown would have skipped it


def test_a_buffered_file_an_exit_callback_writes_to_is_flushed(tmp_path):
    """A callback registered at start-up (a ``sitecustomize`` or ``.pth`` keeping a log) may write
    to a buffered file that only the interpreter's shutdown flushes: with any callback registered,
    ``entry()`` takes the normal way out, and nothing it wrote is lost. (Running the callbacks and
    then ``os._exit`` lost the file's buffer: tried and reverted.)"""
    log = tmp_path / "site.log"
    before = (f"import atexit\nLOG = open({str(log)!r}, 'a')\nLOG.write('start\\n')\n"
              "atexit.register(lambda: LOG.write('end\\n'))\n")
    proc = _entry(tmp_path, ["--version"], before=before)
    assert proc.returncode == 0 and proc.stdout.startswith(b"loopx ")
    assert log.read_text() == "start\nend\n"


def test_a_live_thread_is_waited_for(tmp_path):
    marker = tmp_path / "ran"
    before = ("import threading, time\n"
              f"threading.Thread(target=lambda: (time.sleep(0.3), open({str(marker)!r}, 'w').close())).start()")
    assert _entry(tmp_path, ["--version"], before=before).returncode == 0
    assert marker.exists()


def test_a_profiler_still_gets_to_print_its_report(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "cProfile", "-m", "loopx", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "function calls" in proc.stdout  # cProfile prints after loopx returns


def test_full_exit_zero_means_off(monkeypatch):
    monkeypatch.setenv("LOOPX_FULL_EXIT", "1")
    assert cli._nothing_at_exit() is False
    monkeypatch.setenv("LOOPX_FULL_EXIT", "0")
    monkeypatch.setattr("sys.gettrace", lambda: None)
    monkeypatch.setattr("sys.getprofile", lambda: None)
    monkeypatch.setattr("atexit._ncallbacks", lambda: 0)
    monkeypatch.setitem(__import__("sys").modules, "threading", None)
    monkeypatch.setattr("sys.monitoring", None, raising=False)
    assert cli._nothing_at_exit() is True


def test_a_tool_registered_through_sys_monitoring_takes_the_normal_way_out(monkeypatch):
    """From 3.12 cProfile (and coverage's sysmon core) register a sys.monitoring tool instead of
    sys.setprofile; the quick exit must see it there too, whichever of the six tool ids it took."""
    import sys

    monkeypatch.setenv("LOOPX_FULL_EXIT", "0")
    monkeypatch.setattr("sys.gettrace", lambda: None)
    monkeypatch.setattr("sys.getprofile", lambda: None)
    monkeypatch.setattr("atexit._ncallbacks", lambda: 0)
    monkeypatch.setitem(sys.modules, "threading", None)

    class Monitoring:
        def __init__(self, taken):
            self.taken = taken

        def get_tool(self, tool_id):
            return "a profiler" if tool_id == self.taken else None

    for taken in range(6):
        monkeypatch.setattr("sys.monitoring", Monitoring(taken), raising=False)
        assert cli._nothing_at_exit() is False, taken
    monkeypatch.setattr("sys.monitoring", Monitoring(None), raising=False)
    assert cli._nothing_at_exit() is True
    if sys.version_info >= (3, 12):  # the real API, as cProfile uses it
        monkeypatch.undo()
        monkeypatch.setenv("LOOPX_FULL_EXIT", "0")
        monkeypatch.setattr("atexit._ncallbacks", lambda: 0)
        monkeypatch.setitem(sys.modules, "threading", None)
        mon = sys.monitoring
        free = next(i for i in (mon.PROFILER_ID, mon.DEBUGGER_ID, 3, 4) if mon.get_tool(i) is None)
        mon.use_tool_id(free, "test profiler")
        try:
            assert cli._nothing_at_exit() is False
        finally:
            mon.free_tool_id(free)


def test_a_hot_command_pauses_the_collector_and_gives_the_caller_its_setting_back(goal, cli, monkeypatch):
    """A hot command runs with the cyclic GC paused (its imports make thousands of containers and no
    cycles worth a walk); any other command keeps it on, and an in-process caller of ``main`` gets
    the collector back as it had it, on success and on failure."""
    import gc

    from loopx.commands import goal as goal_cmd
    from loopx.commands import status as status_cmd

    seen = {}
    real_status, real_list = status_cmd.status, goal_cmd.goal_list

    def spy(name, real):
        def call(*a, **k):
            seen[name] = gc.isenabled()
            return real(*a, **k)
        return call

    monkeypatch.setattr(status_cmd, "status", spy("status", real_status))
    monkeypatch.setattr(goal_cmd, "goal_list", spy("goal list", real_list))
    assert gc.isenabled()
    assert cli("status").code == 0 and gc.isenabled()
    assert cli("goal", "list").code == 0 and gc.isenabled()
    assert cli("status", "--goal-id", "no-such-goal").code != 0 and gc.isenabled()
    assert seen == {"status": False, "goal list": True}
    gc.disable()
    try:
        assert cli("status").code == 0 and not gc.isenabled()  # a caller's own choice stands
    finally:
        gc.enable()
