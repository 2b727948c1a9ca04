"""Secrets are redacted before anything is written (issue 2, acceptance 12).

One synthetic sample per rule in ``loopx.kernel.storage.redact`` goes in through real ``loopx`` processes
(evidence output on stdin and in a file, evidence summaries, todo details, goal text); the bytes on
disk (JSONL lines and blobs) must not contain the secret and must carry the rule's marker. Git SHAs,
sha256 digests and UUIDs are identifiers and stay as they are. All samples are fake.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_loopx, subprocess_env
from loopx.kernel.storage import redact

A36 = "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"   # 36 mixed alphanumerics
B24 = "Qw7Er5Ty3Ui1Op9As8Df6Gh4"                 # distinct fakes so no sample hides inside another
C30 = "Zm1Xn2Cb3Vb4Nm5Lk6Jh7Gf8Ds9Ap0"
D20 = "Kq2Wx8Ej4Rc6Tv9Yb3Un7"

# rule -> (sample text, the secret part that must vanish)
SAMPLES: dict[str, tuple[str, str]] = {
    "private-key": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx7fakefakefakeQ2w\nZm9vYmFy\n"
                    "-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAx7fakefakefakeQ2w"),
    "anthropic-key": ("key sk-ant-api03-" + A36 + "xyz", "sk-ant-api03-" + A36),
    "openai-key": ("OPENAI sk-proj-" + A36, "sk-proj-" + A36),
    "aws-access-key": ("id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    "aws-secret-key": ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    "github-token": ("GH ghp_" + A36, "ghp_" + A36),
    "gitlab-token": ("GL glpat-" + A36[:24], "glpat-" + A36[:24]),
    "slack-token": ("SLACK xoxb-123456789012-" + A36[:24], "xoxb-123456789012-" + A36[:24]),
    "slack-webhook": ("hook https://hooks.slack.com/services/T0000FAKE/B0000FAKE/" + A36[:24],
                      "T0000FAKE/B0000FAKE/" + A36[:24]),
    "npm-token": ("NPM npm_" + A36, "npm_" + A36),
    "pypi-token": ("PYPI pypi-AgEIcHlwaS5vcmc" + A36 + A36[:10], "pypi-AgEIcHlwaS5vcmc" + A36),
    "huggingface-token": ("HF hf_" + A36[:34], "hf_" + A36[:34]),
    "google-api-key": ("GCP AIza" + A36[:35], "AIza" + A36[:35]),
    "stripe-key": ("STRIPE sk_live_" + A36[:24], "sk_live_" + A36[:24]),
    "jwt": ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    "auth-header": ("Authorization: Bearer tok." + D20, "tok." + D20),
    "cookie-header": ("Cookie: session=" + C30 + "; theme=dark", C30),
    "url-password": ("db postgres://admin:Hunter2Pass99@db.example.com:5432/app", "Hunter2Pass99"),
    "assigned-secret": ("config api_token=Zx8Qw2Lm9Pv4Rt7Yk3Hn", "Zx8Qw2Lm9Pv4Rt7Yk3Hn"),
}
EXTRA = {  # more shapes of the same rules
    "auth-header": ("curl -H 'authorization: token " + B24 + "'", B24),
    "cookie-header": ("curl -H 'Cookie: sid=" + C30[::-1] + "' https://example.com", C30[::-1]),
    "assigned-secret": ('{"password": "correct horse"}', "correct horse"),
}
IDENTIFIERS = [
    "3f9a1c2b4d5e6f708192a3b4c5d6e7f809112233",                          # git SHA-1
    "3f9a1c2",                                                           # short SHA
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # sha256
    "123e4567-e89b-42d3-a456-426614174000",                              # UUID
]
ID_TEXT = ("commit 3f9a1c2b4d5e6f708192a3b4c5d6e7f809112233 (3f9a1c2) sha256 "
           "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 request "
           "123e4567-e89b-42d3-a456-426614174000 key=123e4567-e89b-42d3-a456-426614174000 "
           "commit_key=3f9a1c2b4d5e6f708192a3b4c5d6e7f809112233")


def rule_names() -> set[str]:
    return {name for name, _ in redact._RULES} | {"assigned-secret"}


def test_every_rule_has_a_sample():
    assert rule_names() == set(SAMPLES), "add a synthetic sample for each new redaction rule"


def all_samples() -> list[tuple[str, str, str]]:
    return [(r, *SAMPLES[r]) for r in SAMPLES] + [(r, *EXTRA[r]) for r in EXTRA]


def store_bytes(project: Path) -> bytes:
    root = project / ".loopx"
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*"))
                    if p.is_file() and "cache" not in p.parts and p.name != "lock")


def assert_redacted(disk: bytes, where: str) -> None:
    text = disk.decode("utf-8")
    problems = []
    for rule, _sample, secret in all_samples():
        if secret in text or json.dumps(secret)[1:-1] in text:
            problems.append(f"{rule}: secret {secret[:12]}... is on disk ({where})")
        if f"[REDACTED:{rule}]" not in text:
            problems.append(f"{rule}: no [REDACTED:{rule}] marker ({where})")
    assert not problems, "\n".join(problems)


def test_evidence_output_on_stdin_is_redacted_on_disk(goal, project):
    body = "\n".join(sample for _, sample, _ in all_samples()) + "\n" + ID_TEXT + "\n"
    proc = subprocess.run([sys.executable, "-m", "loopx", "evidence", "add", "--kind", "command", "--summary",
                           "ran it", "--output", "-", "--format", "json"], cwd=project, env=subprocess_env(),
                          input=body.encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = (project / ".loopx" / "evidence.jsonl").read_bytes()
    assert_redacted(line, "evidence.jsonl excerpt")
    for ident in IDENTIFIERS:
        assert ident in line.decode(), f"identifier {ident} must not be redacted"
    shown = run_loopx(["evidence", "show", json.loads(proc.stdout)["data"]["evidence_id"]], project)
    assert shown.code == 0
    for _, _, secret in all_samples():
        assert secret not in shown.out


def test_large_output_blob_is_redacted(goal, project, tmp_path):
    body = ("filler line\n" * 2000) + "\n".join(s for _, s, _ in all_samples()) + "\n" + ("tail\n" * 2000)
    out = tmp_path / "big.log"
    out.write_text(body)
    r = run_loopx(["evidence", "add", "--kind", "test", "--summary", "big", "--output-file", out, "--format", "json"],
                  project)
    assert r.code == 0, r.err
    blobs = [p for p in (project / ".loopx" / "blobs").rglob("*") if p.is_file()]
    assert blobs, "a large output is kept as a blob"
    assert_redacted(b"".join(p.read_bytes() for p in blobs), "blob")
    assert_redacted(store_bytes(project), "store")
    assert out.read_text() == body, "the user's own file is never changed"


@pytest.mark.parametrize("channel", ["summary", "todo-detail", "goal-text", "gate-question"])
def test_secrets_in_other_fields_are_redacted(goal, project, channel):
    text = "\n".join(f"- {sample}" if rule != "private-key" else sample for rule, sample, _ in all_samples())
    args = {
        "summary": ["evidence", "add", "--kind", "note", "--summary", text[:2000]],
        "todo-detail": ["todo", "add", "configure", "--detail", text],
        "goal-text": ["start-goal", "--goal-text", text, "--goal-id", "g2"],
        "gate-question": ["gate", "open", "--kind", "custom", "--question", text[:2000], "--goal-id", "g1"],
    }[channel]
    r = run_loopx(args, project)
    assert r.code == 0, r.err
    assert_redacted(store_bytes(project), channel)


def test_identifiers_are_left_alone(goal, project):
    r = run_loopx(["evidence", "add", "--kind", "commit", "--summary", ID_TEXT, "--commit",
                   IDENTIFIERS[0], "--format", "json"], project)
    assert r.code == 0, r.err
    disk = (project / ".loopx" / "evidence.jsonl").read_text()
    assert "REDACTED" not in disk
    for ident in IDENTIFIERS:
        assert ident in disk
    for ident in IDENTIFIERS:
        assert redact.redact_text(f"token={ident}") == f"token={ident}"


@pytest.mark.parametrize("text", ["", "short", "the key point is speed", "password reset flow is broken",
                                  "t-3f9a1c gate-8b20d4 ev-00ff11aa", "sk-1 is a valid name", "AKIA too short"])
def test_ordinary_text_is_untouched(text):
    assert redact.redact_text(text) == text


def test_secrets_in_a_recorded_command_line_are_redacted(goal, project):
    cmd = (f"curl -H 'Cookie: sid={C30}' -H 'Authorization: Bearer {D20}' "
           f"https://deploy:{B24}@api.example.com/v1 && echo done")
    r = run_loopx(["evidence", "add", "--kind", "command", "--summary", "deployed", "--command", cmd,
                   "--exit-code", "0"], project)
    assert r.code == 0, r.err
    disk = (project / ".loopx" / "evidence.jsonl").read_text()
    for secret in (C30, D20, B24):
        assert secret not in disk
    assert "api.example.com/v1 && echo done" in disk, "the rest of the command is kept"
