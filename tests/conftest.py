"""Shared fixtures: an isolated LOOPX_HOME, a connected scratch project, and two ways to run loopx:
in process through ``main(argv)`` (fast) and as a real subprocess (for concurrency and crashes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from loopx.cli import main
from loopx.context import AGENT_ENV_MARKERS
from loopx.kernel.storage.actors import human_name

# CI=true: a skip for a missing tool is a failure; the random order's seed is printed (tests/ci_rules.py)
pytest_plugins = ["ci_rules"]

REPO = Path(__file__).resolve().parents[1]
HUMAN = f"human:{human_name()}"  # the actor of a human's command: the OS account, never $USER


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> dict:
        return json.loads(self.out)

    @property
    def data(self) -> dict:
        return self.json["data"]


def pytest_configure(config):
    """A suite started from a background shell job (`nohup ... &`, a script's `cmd &`) inherits
    SIGINT and SIGQUIT ignored, and every process a test starts would inherit that too: the tests
    of Ctrl-C handling would then wait for an interrupt that never comes. Restore the defaults."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "SIGQUIT") and signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _every_write_prunes_the_live_view(monkeypatch):
    """In process, every write rewrites (and so prunes) the live view, as each did before writes
    left up to ``caches.LIVE_EVERY`` lines past it: the tests of left-out records need a view that
    left them out. A process a test starts uses the real value; tests/test_live_view.py's
    ``real_live_every`` tests the deferral itself."""
    from loopx.kernel.storage import caches

    monkeypatch.setattr(caches, "LIVE_EVERY", 1)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("loopx-home")
    monkeypatch.setenv("LOOPX_HOME", str(home))
    monkeypatch.setenv("USER", "tester")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("LOOPX_NO_UPDATE_CHECK", "1")
    for var in (*AGENT_ENV_MARKERS, "LOOPX_NOW", "LOOPX_LOCK_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    # the hosts' own folders: never the real user's (loopx usage and should-run read them)
    monkeypatch.setenv("CODEX_HOME", str(home / "codex-home"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / "claude-home"))
    yield


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A connected, empty project; the cwd is set to it."""
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)
    assert main(["connect", "--quiet"]) == 0
    return proj


@pytest.fixture
def cli(capsys):
    """Run loopx in process: ``cli("todo", "add", "x", json=True)`` -> Result."""

    def run(*args, json: bool = False) -> Result:
        argv = [str(a) for a in args] + (["--format", "json"] if json else [])
        capsys.readouterr()
        code = main(argv)
        cap = capsys.readouterr()
        return Result(code, cap.out, cap.err)

    return run


def human_channel(via: str = "confirm-flag"):
    """A human channel as the CLI's terminal path mints it (tests call the kernel directly)."""
    from loopx.kernel import humans

    return humans.HumanChannel("human:tester", via, _seal=humans._SEAL)


def subprocess_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in AGENT_ENV_MARKERS}
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def trust_codex_hooks(project) -> None:
    """Trust ``project`` and loopx's installed Codex hooks (both scopes) in $CODEX_HOME/config.toml,
    as Codex's /hooks does (issue 23: untrusted hooks are an error in doctor and hooks --check)."""
    from loopx.hosts.adapters import codex

    home = Path(os.environ["CODEX_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    keys = codex.hook_keys("project", str(project)) + codex.hook_keys("user", os.path.expanduser("~"))
    lines = [f'[projects."{os.path.realpath(project)}"]', 'trust_level = "trusted"', ""]
    for k in keys:
        lines += [f'[hooks.state."{k}"]', 'trusted_hash = "sha256:test"', ""]
    (home / "config.toml").write_text("\n".join(lines), encoding="utf-8")


def run_loopx(args, cwd, env: dict | None = None, timeout: float = 60, input: str | None = None) -> Result:
    """Run ``python -m loopx ARGS`` as a real process."""
    proc = subprocess.run([sys.executable, "-m", "loopx", *map(str, args)], cwd=cwd, env=subprocess_env(env),
                          capture_output=True, text=True, timeout=timeout, input=input)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def goal(project, cli) -> str:
    """A started goal with two todos in ``project``; returns the goal id."""
    r = cli("start-goal", "--goal-text", "Make the tests pass", "--goal-id", "g1", "--done-when", "pytest exits 0",
            "--verify", f"{sys.executable} -c pass", "--todo", "first", "--todo", "second", "--protect", "merge",
            json=True)
    assert r.code == 0, r.err
    return r.data["goal_id"]


class Clock:
    """A test clock driven through ``LOOPX_NOW``; starts at ``start`` and moves by ``advance``."""

    def __init__(self, monkeypatch, start):
        self.mp = monkeypatch
        self.set(start)

    def set(self, when):
        from loopx.kernel.storage import clock

        self.now = when
        self.mp.setenv("LOOPX_NOW", clock.iso(when))

    def advance(self, seconds=60):
        from datetime import timedelta

        self.set(self.now + timedelta(seconds=seconds))
        return self.iso

    @property
    def iso(self):
        from loopx.kernel.storage import clock

        return clock.iso(self.now)


@pytest.fixture
def clk(monkeypatch):
    """A fixed, movable clock starting at 2026-03-01T09:00:00Z (test_decide.BASE)."""
    from datetime import UTC, datetime

    return Clock(monkeypatch, datetime(2026, 3, 1, 9, 0, tzinfo=UTC))


def rewrite_history(project: Path, drop) -> None:
    """What a hostile agent with a shell does: remove records, renumber seq, recompute every prev
    and CRC, and delete the cache (which remembers the heads)."""
    import shutil

    from loopx.kernel.storage import chain
    from loopx.kernel.storage.codec import decode, encode

    root = project / ".loopx"
    recs = []
    for stream in ("events", "evidence"):
        p = root / f"{stream}.jsonl"
        if p.exists():
            recs += [(stream, decode(x)) for x in p.read_bytes().splitlines() if x]
    recs = [(s, r) for s, r in recs if not drop(r)]
    recs.sort(key=lambda sr: (sr[1]["hlc"], sr[1]["node"], sr[1]["id"]))
    seq = {"events": 0, "evidence": 0}
    last: dict[str, str] = {}
    out: dict[str, list[bytes]] = {"events": [], "evidence": []}
    for stream, rec in recs:
        rec = {k: v for k, v in rec.items() if k != "crc"}
        seq[stream] += 1
        rec["seq"] = seq[stream]
        rec["prev"] = last.get(rec["node"])
        line = encode(rec)
        last[rec["node"]] = chain.line_hash(line)
        out[stream].append(line)
    for stream, lines in out.items():
        p = root / f"{stream}.jsonl"
        if p.exists() or lines:
            p.write_bytes(b"".join(lines))
    shutil.rmtree(root / "cache", ignore_errors=True)
    for f in root.glob("snapshot*"):
        f.unlink()
