"""The CLI reference is generated from the parser and must list every command it has."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from loopx.cli import COMMANDS, build_parser


def test_cli_md_is_current_and_lists_every_command():
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "gen_cli.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(sub.choices) == set(COMMANDS)
    for name in sub.choices:
        assert f"## `loopx {name}`" in text, name


def test_every_command_help_has_an_example():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [name for name, p in sub.choices.items() if "example:" not in (p.epilog or "")]
    assert not missing, f"commands without an example in --help: {missing}"


def test_transcripts_in_the_docs_match_what_loopx_prints():
    """Every ```console block of README.md and docs/*.md, run in a scratch project (fixed clock,
    deterministic ids), prints what the docs say (docs/transcripts.py; rerun it to refresh)."""
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "transcripts.py"), "--check"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_transcript_checker_catches_a_wrong_output(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("```console\n$ loopx --version\nloopx 0.0.0-not-this\n```\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "transcripts.py"), "--check", str(doc)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "loopx now prints" in proc.stdout


def test_the_transcript_checker_masks_only_measured_durations(tmp_path):
    """A loaded machine takes longer: a turn's measured run time and unittest's timing may differ
    from the doc's, anything else on those lines may not."""
    doc = tmp_path / "x.md"
    run = "$ printf '  -> completion, verified, 1 slot spent in 7s, usage unknown\\nRan 2 tests in 1.250s\\n'\n"
    doc.write_text("```console\n" + run + "  -> completion, verified, 1 slot spent in 0s, usage unknown\n"
                   "Ran 2 tests in 0.000s\n[exit 0]\n```\n", encoding="utf-8")
    check = [sys.executable, str(REPO / "docs" / "transcripts.py"), "--check", str(doc)]
    proc = subprocess.run(check, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc.write_text("```console\n" + run + "  -> completion, not verified, 1 slot spent in 0s, usage unknown\n"
                   "Ran 2 tests in 0.000s\n[exit 0]\n```\n", encoding="utf-8")
    proc = subprocess.run(check, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "not verified" in proc.stdout


def test_links_into_architecture_md_name_sections_that_exist():
    import re

    arch = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", arch, re.M)}
    cited = set()
    for f in [*(REPO / "src").rglob("*.py"), *(REPO / "tests").glob("*.py"), *(REPO / "docs").glob("*.md")]:
        cited |= set(re.findall(r"architecture\.md#([a-z0-9-]+)", f.read_text(encoding="utf-8")))
    assert cited, "no citation found: the check would prove nothing"
    assert cited <= anchors, f"links to missing sections: {sorted(cited - anchors)}"
    assert not [f for f in (REPO / "src").rglob("*.py") if "DESIGN section" in f.read_text(encoding="utf-8")]


def test_every_environment_variable_read_is_declared_in_config():
    import re

    from loopx.config import VARS

    used = set()
    for f in (REPO / "src").rglob("*.py"):
        text = f.read_text(encoding="utf-8")
        used |= set(re.findall(r'env\("(LOOPX_[A-Z_]+)"\)', text))
        raw = re.findall(r'os\.environ(?:\.get)?[\[(]"(LOOPX_[A-Z_]+)"', text) + re.findall(r'getenv\("(LOOPX_[A-Z_]+)"', text)
        assert not raw or f.name == "config.py", f"{f} reads {raw} without loopx.config.env"
    assert used and used <= set(VARS), sorted(used - set(VARS))


def test_the_reason_table_in_loop_md_is_current():
    """docs/loop.md's table of decisions and reasons is generated from loopx.kernel.reasons."""
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "gen_reasons.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_reason_decide_can_give_is_declared_in_the_registry():
    """A reason code written in the decision's source must have its row (adding a reason is one row)."""
    import re

    from loopx.kernel import reasons

    src = "\n".join((REPO / "src" / "loopx" / p).read_text() for p in (
        "kernel/policy/decide.py", "kernel/read/watching.py", "runner/outcome.py"))
    codes = set(re.findall(r'self\.decide\("\w+", "(\w+)", "(\w+)"', src))
    declared = {(r.decision, r.reason) for r in reasons.ROWS}
    assert codes and codes <= declared, codes - declared
    for r in reasons.ROWS:
        assert r.group in reasons.GROUPS and set(r.clock) <= set(reasons.CLOCK), r


def test_operations_md_lists_every_doctor_check():
    """docs/operations.md's table of doctor's checks names every check id the code can report
    (``result("id", ...)``, ``judge("id", ...)`` and ``cid = f"..."`` in loopx/ops)."""
    import re

    ids = set()
    for f in (REPO / "src" / "loopx" / "ops").glob("*.py"):
        text = f.read_text(encoding="utf-8")
        if "from loopx.ops.check import" not in text:
            continue
        ids |= set(re.findall(r'(?:\bresult|\bjudge)\(f?"([a-z][\w.{}\[\]\'-]*)"', text))
        ids |= set(re.findall(r'\bcid = f?"([a-z][\w.{}\[\]\'-]*)"', text))
    ids = {re.sub(r"\{[^}]*\}", "*", i) for i in ids}
    ops = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    table = ops[ops.index("### The checks"):ops.index("### What `--fix` does")]
    documented = {re.sub(r"<[^>]*>", "*", d) for row in re.findall(r"^\| (.+?) \|", table, re.M)
                  for d in re.findall(r"`([^`]+)`", row)}
    assert {"store.chain", "sandbox", "signing", "setup"} <= ids, ids
    from fnmatch import fnmatchcase

    missing = {i for i in ids if not any(fnmatchcase(d, i) or d.startswith(i + ".") for d in documented)}
    assert not missing, f"doctor checks missing from docs/operations.md's table: {sorted(missing)}"
