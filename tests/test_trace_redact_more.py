"""``loopx trace export --redact-more`` (issue 12 item 9): private-but-not-secret values become
stable placeholders, ordinary text stays readable, and ``trace verify`` still checks the archive."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from loopx.kernel.storage import chain
from loopx.kernel.storage.codec import decode, encode
from loopx.kernel.storage.privacy import Redactor, private_host

# made-up private look-alikes: (text, the private part that must not survive, the placeholder kind)
PRIVATE = [
    ("cd /home/alice/src/app && pytest", "alice", "user"),
    ("opened /Users/bob.smith/Projects/x.py", "bob.smith", "user"),
    (r"C:\Users\carol\repo\main.py failed", "carol", "user"),
    ("/var/home/dave/work/notes.txt", "dave", "user"),
    ("approved by human:erin", "erin", "user"),
    ("mail alice.liddell@example.org please", "alice.liddell@example.org", "email"),
    ("Co-Authored-By: F <frank+ci@corp.example.com>", "frank+ci@corp.example.com", "email"),
    ("host build7.corp.internal answered", "build7.corp.internal", "host"),
    ("ssh printer.lan then nas.local", "printer.lan", "host"),
    ("ssh printer.lan then nas.local", "nas.local", "host"),
    ("postgres on 10.1.2.3:5432", "10.1.2.3", "ip"),
    ("gateway 192.168.0.17.", "192.168.0.17", "ip"),
    ("public 203.0.113.9 answered", "203.0.113.9", "ip"),
    ("link-local fe80::1ff:fe23:4567:890a", "fe80::1ff:fe23:4567:890a", "ip"),
    ("v6 2001:db8::1 is up", "2001:db8::1", "ip"),
    ("git clone https://bob:[REDACTED:url-password]@github.com/org/repo.git", "bob", "url"),
    ("git remote add origin https://deploy@gitlab.example.com/team/app.git", "deploy@", "url"),
    ("curl http://buildbox:8080/status", "buildbox", "url"),
    ("scrape http://10.0.0.5/metrics", "10.0.0.5", "url"),
    ("git push git@git.corp.internal:team/app.git main", "git.corp.internal", "url"),
    ("alice@alices-laptop:~$ ls", "alices-laptop", "host"),
    ("ran on alices-laptop today", "alices-laptop", "host"),
    ("curl http://[fe80::1]:8080/health", "fe80::1", "url"),
    ("scp dump.sql alice@10.0.0.2:/tmp/", "10.0.0.2", "url"),
    ("from user@host.docker.internal", "host.docker.internal", "email"),
    ("ping nas.local.", "nas.local", "host"),
]

ORDINARY = [
    "git clone https://github.com/org/repo.git",
    "git push git@github.com:org/repo.git main",
    "pytest tests/test_x.py -q: 800 passed in 3.21s",
    "python 3.11.2, tag v1.2.3.4",
    "commit 46dd086a, uuid 123e4567-e89b-12d3-a456-426614174000",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "at 12:30:45 the run finished",
    "edit src/home/users_list.py and docs/Users/guide.md",
    "listen on 127.0.0.1:8080, 0.0.0.0 and ::1",
    "std::vector<int> and a::b and abc::def",
    "see https://docs.python.org/3/library/re.html",
    "the root user, the runner and ubuntu",
    "node n-4fc8b1078b91c515",
    "[REDACTED:openai-key] stays a marker",
    "loopx@1.2.0 is a version spec",
    "human:root approved",
    "~/src/app and ./home/x",
    "cp .env.local .env; edit .claude/settings.local.json",
    "import pip._internal",
    "at 2026-12-01T05:09:17Z, pid 1234, port 8080",
    "1.2.3.4.5 and 999.1.1.1 are not addresses",
]


@pytest.mark.parametrize("text,secret,kind", PRIVATE)
def test_private_look_alikes_are_replaced_by_placeholders(text, secret, kind):
    r = Redactor(users={"alice"}, hosts={"alices-laptop"})
    out = r.text(text)
    assert secret not in out, out
    assert f"[{kind}-1]" in out, out


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_stays_readable(text):
    r = Redactor(users={"alice"}, hosts={"alices-laptop"})
    assert r.text(text) == text


def test_the_same_value_gets_the_same_placeholder():
    r = Redactor()
    r.learn({"actor": "human:alice"})
    a = r.text("/home/alice/x and alice wrote to alice@example.org from 10.0.0.7")
    b = r.text("10.0.0.7 again, /home/alice/y, human:alice, mail alice@example.org, host 10.0.0.8")
    assert a == "/home/[user-1]/x and [user-1] wrote to [email-1] from [ip-1]"
    assert b == "[ip-1] again, /home/[user-1]/y, human:[user-1], mail [email-1], host [ip-2]"
    assert r.summary()["placeholders"] == {"email": 1, "ip": 2, "user": 1}


def test_learned_machine_names_come_from_process_records_not_agent_hosts():
    r = Redactor()
    r.learn({"run": {"host": "claude"}, "proc": {"pid": 7, "host": "ws-4711"}})
    assert r.text("claude ran on ws-4711") == "claude ran on [host-1]"


@pytest.mark.parametrize("host,private", [("10.0.0.1", True), ("172.16.4.4", True), ("100.64.1.1", True),
                                          ("buildbox", True), ("x.internal", True), ("github.com", False),
                                          ("localhost", False), ("127.0.0.1", False), ("8.8.8.8", False)])
def test_private_hosts(host, private):
    assert private_host(host) is private


# ---------------------------------------------------------------------- the archive
def _scene(project, cli, goal) -> Path:
    log = project.parent / "pytest.log"
    log.write_text("".join(f"test_{i} PASSED on build7.corp.internal\n" for i in range(400))
                   + "cwd /home/alice/src/app, report to alice@example.org\n")
    r = cli("evidence", "add", "--goal-id", goal, "--kind", "test", "--summary",
            "400 passed on 10.1.2.3 in /home/alice/src/app", "--output-file", log, json=True)
    assert r.code == 0, r.err
    r = cli("todo", "add", "--goal-id", goal, "ask alice@example.org about https://deploy@git.corp.internal/app.git",
            json=True)
    assert r.code == 0, r.err
    r = cli("start-goal", "--goal-text", "Another goal", "--goal-id", "g2", "--done-when", "x", "--verify",
            f"{sys.executable} -c pass", json=True)
    assert r.code == 0, r.err
    out = project.parent / "g1-public.tar.gz"
    r = cli("trace", "export", "--goal-id", goal, "-o", out, "--redact-more", json=True)
    assert r.code == 0, r.err
    more = r.data["redact_more"]
    assert more["verified_before_redaction"]["ok"] and more["records"] >= 2 and len(more["blobs"]) == 1
    return out


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def _write(path: Path, members: dict[str, bytes]) -> None:
    man = json.loads(members["manifest.json"])
    man["files"] = {n: chain.sha256(b).hexdigest() for n, b in members.items() if n != "manifest.json"}
    members["manifest.json"] = json.dumps(man).encode()
    with tarfile.open(path, "w:gz") as tar:
        for n, b in members.items():
            info = tarfile.TarInfo(n)
            info.size = len(b)
            tar.addfile(info, io.BytesIO(b))


def _rows(m) -> list[dict]:
    return [json.loads(x) for x in m["records.jsonl"].decode().splitlines()]


def test_redact_more_archive_hides_private_values_and_still_verifies(project, cli, goal):
    trace = _scene(project, cli, goal)
    m = _members(trace)
    everything = b"".join(m.values())
    for private in (b"alice", b"10.1.2.3", b"build7.corp.internal", b"git.corp.internal", b"deploy@"):
        assert private not in everything, private
    assert b"/home/[user-1]/src/app" in m["records.jsonl"] and b"[email-1]" in m["records.jsonl"]
    blob = next(b for n, b in m.items() if n.startswith("blobs/"))
    assert b"test_399 PASSED on [host-1]" in blob and b"/home/[user-1]/src/app" in blob  # same placeholders
    assert b"Make the tests pass" in m["review.md"]  # the review packet is redacted with the same table
    man = json.loads(m["manifest.json"])
    assert man["redact_more"]["rules"] == ["url", "email", "home-path", "user", "host", "ip"]
    assert all("hash" not in r for r in _rows(m) if "line" in r and b"todo.added" in r["line"].encode()
               and b"first" in r["line"].encode())  # a record with nothing private stays verbatim

    r = cli("trace", "verify", trace, json=True)
    assert r.code == 0 and r.data["ok"], r.data["problems"]
    assert r.data["redact_more"] and r.data["redacted"] >= 2 and r.data["redacted_blobs"] == 1
    assert "checked by their original hashes only" in cli("trace", "verify", trace).out


def test_a_tampered_redacted_archive_fails_verify(project, cli, goal):
    trace = _scene(project, cli, goal)
    m = _members(trace)
    rows = _rows(m)
    i = next(i for i, r in enumerate(rows) if "hash" in r)
    forged = dict(rows[i], hash="0" * 64)  # a redacted record swapped for another: its hash no longer links
    m2 = dict(m, **{"records.jsonl": "".join(json.dumps(r) + "\n" for r in rows[:i] + [forged] + rows[i + 1:]).encode()})
    _write(trace, m2)
    r = cli("trace", "verify", trace, json=True)
    assert r.code == 1 and any("chain of node" in p or "chain head" in p for p in r.data["problems"]), r.data

    dropped = rows[:i] + rows[i + 1:]  # a redacted record left out
    _write(trace, dict(m, **{"records.jsonl": "".join(json.dumps(r) + "\n" for r in dropped).encode()}))
    r = cli("trace", "verify", trace, json=True)
    assert r.code == 1 and any("chain" in p for p in r.data["problems"]), r.data


def test_a_verbatim_record_may_not_claim_a_hash_in_an_unredacted_archive(project, cli, goal):
    out = project.parent / "plain.tar.gz"
    assert cli("trace", "export", "--goal-id", goal, "-o", out).code == 0
    m = _members(out)
    rows = _rows(m)
    i = next(i for i, r in enumerate(rows) if "line" in r and '"todo.added"' in r["line"])
    rec = decode(rows[i]["line"].encode())
    original = chain.line_hash(rows[i]["line"].encode())
    rec["data"]["title"] = "something else"
    rows[i] = {"stream": rows[i]["stream"], "line": encode({k: v for k, v in rec.items() if k != "crc"}).decode().rstrip("\n"),
               "hash": original}  # the edited text, the old hash: as if it had been redacted
    _write(out, dict(m, **{"records.jsonl": "".join(json.dumps(r) + "\n" for r in rows).encode()}))
    r = cli("trace", "verify", out, json=True)
    assert r.code == 1 and any("does not say it was redacted" in p for p in r.data["problems"]), r.data


def test_a_store_that_did_not_verify_before_redaction_is_reported(project, cli, goal):
    events = project / ".loopx" / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    rec = decode(lines[1].rstrip(b"\n"))
    rec["data"]["title"] = "rewritten after the fact"
    lines[1] = encode({k: v for k, v in rec.items() if k != "crc"})  # fresh CRC, broken chain
    events.write_bytes(b"".join(lines))
    out = project.parent / "broken.tar.gz"
    r = cli("trace", "export", "--goal-id", goal, "-o", out, "--redact-more", json=True)
    assert r.code == 0 and not r.data["redact_more"]["verified_before_redaction"]["ok"]
    assert "did not verify before redaction" in cli("trace", "export", "--goal-id", goal, "-o", out, "--redact-more").out
    r = cli("trace", "verify", out, json=True)
    assert r.code == 1 and any("before redaction did not hold" in p for p in r.data["problems"]), r.data


def test_a_blob_that_is_not_utf8_keeps_its_other_bytes(project, cli, goal):
    raw = b"\xff\xfe binary \x00\x01 then 10.9.8.7 and \xc3\x28 end\n" * 300
    out_file = project.parent / "dump.bin"
    out_file.write_bytes(raw)
    r = cli("evidence", "add", "--goal-id", goal, "--kind", "artifact", "--summary", "a dump",
            "--output-file", out_file, json=True)
    assert r.code == 0, r.err
    trace = project.parent / "bin.tar.gz"
    assert cli("trace", "export", "--goal-id", goal, "-o", trace, "--redact-more").code == 0
    m = _members(trace)
    names = [n for n in m if n.startswith("blobs/")]
    assert len(names) == 1
    for name in names:  # only the address changed
        stored = next((project / ".loopx" / "blobs").rglob(name.split("/", 1)[1])).read_bytes()
        assert b"10.9.8.7" in stored and m[name] == stored.replace(b"10.9.8.7", b"[ip-1]")
    assert b"10.9.8.7" not in m["records.jsonl"]
    assert cli("trace", "verify", trace).code == 0
