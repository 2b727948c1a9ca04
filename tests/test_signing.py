"""Signed approvals with a plain ed25519 key the test generates (issue 12, item 4, acceptance 3):
signed approvals verify; an unsigned or wrongly signed approval leaves the gate closed and the
guard denies the protected action; swapping the allowed-signers file is detected by doctor."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import human_channel
from loopx.guard import verdicts
from loopx.kernel.storage.store import Store
from loopx.kernel.write import gates, signing, signsetup

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) is missing")


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "loopx-test", "-f", str(path)], check=True,
                   capture_output=True, timeout=60)
    return path


@pytest.fixture
def key(tmp_path) -> Path:
    return keygen(tmp_path / "id_human")


@pytest.fixture
def signed(goal, project, cli, key):
    r = cli("gate", "signing", "--enable", "--key", key, "--principal", "alice", json=True)
    assert r.code == 0, r.err
    assert r.data["enabled"] and r.data["fingerprint"].startswith("SHA256:")
    return r.data


def open_gate(cli) -> str:
    r = cli("--agent", "bot", "gate", "open", "--kind", "merge", "--question", "Merge PR 7?", json=True)
    assert r.code == 0, r.err
    return r.data["gate_id"]


def push_allowed(project: Path) -> bool:
    state = Store(str(project / ".loopx")).load()
    return verdicts.evaluate(state, commands=["git push origin main"], project_dir=str(project), cwd=str(project),
                          branch_of=lambda cwd: "feature")["allow"]


def test_a_signed_approval_verifies_and_opens_the_gate(signed, project, cli):
    gid = open_gate(cli)
    r = cli("gate", "approve", gid, "--confirm", gid, json=True)
    assert r.code == 0, r.err
    assert r.data["signed_by"].startswith("alice SHA256:")
    g = Store(str(project / ".loopx")).load()["gates"][gid]
    assert "BEGIN SSH SIGNATURE" in g["signature"]["sig"] and signing.approval_counts(g)
    assert cli("gate", "check", "--action", "merge").code == 0
    assert push_allowed(project)
    doc = cli("doctor", json=True).data
    finding = next(c for c in doc["checks"] if c["id"] == "signing")
    assert finding["status"] == "ok" and signed["fingerprint"] in finding["finding"]


def test_an_unsigned_approval_leaves_the_gate_closed(signed, project, cli):
    gid = open_gate(cli)
    store = Store(str(project / ".loopx"))
    gates.decide(store, "human:alice", gid, approve=True, channel="confirm-flag", human=human_channel())
    r = cli("gate", "check", "--action", "merge", json=True)
    assert r.code == 1 and r.data["unsigned"] == [gid]
    assert not push_allowed(project)
    doc = cli("doctor", json=True).data
    assert any(c["id"] == "signing.approvals" and gid in c["finding"] for c in doc["checks"])


def test_the_turn_packet_counts_only_signed_approvals_reading_the_setting_once(signed, goal, project, cli, key,
                                                                             monkeypatch):
    """A packet lists each protected action with whether an approval covers it; with signing on an
    unsigned approval does not, a signed one does, and the signing setting (the user's config and
    the signing log) is read once a packet, not once per approved gate."""
    from loopx.kernel.policy import packet
    from loopx.kernel.storage import clock

    store = Store(str(project / ".loopx"))
    for _ in range(3):  # unsigned approvals, recorded around the CLI's signing
        gates.decide(store, "human:alice", open_gate(cli), approve=True, channel="confirm-flag",
                     human=human_channel())
    reads = []
    real = signing.enabled
    monkeypatch.setattr(signing, "enabled", lambda: reads.append(1) or real())

    def merge_entry() -> dict:
        p = packet.build(store.load(), goal, None, "run-x", None, "agent:bot", clock.now())
        return next(x for x in p["protected"] if x["action"] == "merge")

    assert merge_entry()["gate"] == "none" and len(reads) == 1
    gid = open_gate(cli)
    assert cli("gate", "approve", gid, "--confirm", gid).code == 0  # signed with the user's key
    reads.clear()
    got = merge_entry()
    assert got["gate"] == "approved" and got["gate_id"] == gid and len(reads) == 1


def test_a_signing_log_that_is_not_utf8_is_a_broken_entry_not_an_internal_error(goal, project, cli):
    """Every turn packet of a goal with a protected action asks for the signing setting: a log
    damaged with bytes that are not UTF-8 reads as a broken entry (doctor names it), and `next`
    still starts the turn."""
    os.makedirs(os.path.dirname(signing.log_path()), exist_ok=True)
    with open(signing.log_path(), "wb") as fh:
        fh.write(b'{"enabled": false}\n\xff\xfe garbage\n')
    r = cli("--agent", "bot", "next", json=True)
    assert r.code == 0 and r.data["started"], r.err
    assert any("not JSON" in p for p in signsetup.check()["problems"])


def test_a_wrongly_signed_approval_leaves_the_gate_closed(signed, project, cli, tmp_path):
    gid = open_gate(cli)
    store = Store(str(project / ".loopx"))
    g = store.load()["gates"][gid]
    other = keygen(tmp_path / "id_agent")
    forged = {"principal": "alice", "sig": signsetup.sign(signing.message(g, False), str(other)), "fingerprint": "x"}
    gates.decide(store, "human:alice", gid, approve=True, channel="confirm-flag", human=human_channel(),
                 signature=forged)
    assert cli("gate", "check", "--action", "merge").code == 1
    assert not push_allowed(project)
    # a good signature over another decision (standing instead of single-use) does not count either
    gid2 = open_gate(cli)
    g2 = store.load()["gates"][gid2]
    replay = {"principal": "alice", "sig": signsetup.sign(signing.message(g2, False), signed_key(signed)),
              "fingerprint": "x"}
    gates.decide(store, "human:alice", gid2, approve=True, channel="confirm-flag", human=human_channel(),
                 signature=replay, standing=True)
    assert not push_allowed(project)


def signed_key(info) -> str:
    return signing.settings()["key"]


def test_swapping_the_allowed_signers_file_is_detected(signed, project, cli, tmp_path):
    gid = open_gate(cli)
    assert cli("gate", "approve", gid, "--confirm", gid).code == 0
    other = keygen(tmp_path / "id_agent")
    pub = (tmp_path / "id_agent.pub").read_text().split()
    Path(signing.signers_path()).write_text(f'alice namespaces="loopx-gate" {pub[0]} {pub[1]}\n')
    signing.forget_verified()
    doc = cli("doctor", json=True).data
    problems = [c["finding"] for c in doc["checks"] if c["id"].startswith("signing") and c["status"] == "error"]
    assert any("differs from the signers the signing log last recorded" in p for p in problems)
    assert any(gid in p for p in problems)  # the human's approval no longer verifies: the gate is closed
    assert not push_allowed(project)
    assert other.exists()


def test_an_agent_cannot_turn_signing_off(signed, project, cli, monkeypatch):
    monkeypatch.setenv("CLAUDECODE", "1")
    r = cli("gate", "signing", "--disable", json=True)
    assert r.code == 4 and r.json["error"]["code"] == "human_required"
    monkeypatch.delenv("CLAUDECODE")
    from loopx import config

    config.set_user_value("signing.enabled", False)  # edited behind loopx's back
    assert signing.enabled(), "the signed log still says on"
    assert cli("gate", "signing", "--disable").code == 0  # a human, with the allowed key
    assert not signing.enabled()


def test_a_re_rooted_signing_log_is_reported_by_doctor(signed, project, cli, tmp_path):
    """The agent replaces the signing log with one entry self-signed by its own key and adds that
    key to the allowed signers: a chain of its own that verifies. The last human-signed set, kept
    in the data folder, tells them apart."""
    import json

    gid = open_gate(cli)
    assert cli("gate", "approve", gid, "--confirm", gid).code == 0
    agent = keygen(tmp_path / "id_agent")
    pub = (tmp_path / "id_agent.pub").read_text().split()
    signers = f'alice namespaces="loopx-gate" {pub[0]} {pub[1]}\n'
    entry = {"seq": 1, "enabled": True, "allowed_signers": signers, "principal": "alice", "prev": None}
    entry["sig"] = signsetup.sign(signsetup._entry_text(entry), str(agent))
    entry["fingerprint"] = signing.verify(signsetup._entry_text(entry), entry["sig"], "alice", signers)
    assert entry["fingerprint"], "the forged entry verifies on its own"
    Path(signing.log_path()).write_text(json.dumps(entry, sort_keys=True) + "\n")
    Path(signing.signers_path()).write_text(signers)
    signing.forget_verified()
    doc = cli("doctor", json=True).data
    problems = [c["finding"] for c in doc["checks"] if c["id"] == "signing" and c["status"] == "error"]
    assert any("re-rooted" in p for p in problems), doc["checks"]
    # one entry appended by hand after the human's last one is reported too
    Path(signing.log_path()).unlink()
    Path(signing.signers_path()).unlink()
    Path(signsetup.root_path()).unlink()
    assert cli("gate", "signing", "--enable", "--key", signed_key(None), "--principal", "alice").code == 0
    with open(signing.log_path(), "a") as fh:
        fh.write(json.dumps(dict(entry, seq=2)) + "\n")
    doc = cli("doctor", json=True).data
    problems = [c["finding"] for c in doc["checks"] if c["id"] == "signing" and c["status"] == "error"]
    assert any("were not made by a human" in p for p in problems), problems


SIGNING_LOG_FIFO = """
import os, sys
os.environ["LOOPX_HOME"] = sys.argv[1]
from loopx.kernel.write import signing
os.mkfifo(signing.log_path())
print(signing.enabled(), signing.read_text(signing.log_path()))
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_at_the_signing_log_is_no_log_and_nothing_waits_on_it(tmp_path):
    """Every turn packet with a protected action asks whether signing is on, which reads the
    signing log: a FIFO put there (the config folder is the user's, but a hook or a stray tool
    may write it) is an unreadable log, never a wait for a writer."""
    home = tmp_path / "home"
    home.mkdir()
    out = subprocess.run([sys.executable, "-c", SIGNING_LOG_FIFO, str(home)], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(Path(signing.__file__).parents[3])})
    assert out.stdout.split() == ["False", "None"], (out.stdout, out.stderr)
