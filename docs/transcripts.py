"""Keep the terminal transcripts in README.md and docs/*.md true by running them.

A transcript is a fenced block whose info string is ``console``: lines starting with ``$ `` are
commands (a trailing ``\\`` continues one on the next line), the lines after a command up to the
next one are its output (stdout and stderr together) and a last ``[exit N]`` line. A fenced block
of any other language whose first comment line names a file (``# prices.py``, or ``# ~/bin/x.sh:
...`` after a shebang) is written into the scratch project (``~`` is the scratch home) before
the transcripts after it run, so the files a document shows are the files its commands see. All transcripts of one file run in order in
one scratch git repository (``/home/alice/shop`` in the text) with a fixed clock (``LOOPX_NOW``),
deterministic ids (``LOOPX_ID_SEED``), an isolated ``LOOPX_HOME``, no agent markers and no colour,
so their output is stable and is compared line for line. What no fixed clock can hold, a duration
the machine measured (a turn's ``-> ... in 2s,``, unittest's ``Ran 1 test in 0.003s``), is masked
before the comparison (``MEASURED``): a loaded machine takes longer, and that is not a wrong doc.

    python docs/transcripts.py          # rerun every transcript and rewrite the outputs in place
    python docs/transcripts.py --check  # exit 1 naming the first difference (tests/test_docs.py)
    python docs/transcripts.py docs/loop.md   # only these files
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NOW = "2026-12-01T09:00:00Z"
FAKE_PROJECT, FAKE_HOME = "/home/alice/shop", "/home/alice"
FAKE_LOOPX = "/home/alice/.venvs/loopx/bin/loopx"  # this venv's loopx script, as the docs show it
BLOCK = re.compile(r"^```console\n(.*?)^```\n", re.M | re.S)
ANY_BLOCK = re.compile(r"^```([a-z]*)\n(.*?)^```\n", re.M | re.S)
FILE_LINE = re.compile(r"^# (~?[\w./-]+\.(?:py|sh|txt|toml|json|md)|\.gitignore)(?::.*)?$")
# Durations measured on the wall clock (a turn's run time, unittest's own timing): masked in --check,
# and kept as the doc has them when only they differ.
MEASURED = (re.compile(r"^(  -> .*? in )(-?\d+[smhd][\dmh]*)(, )", re.M),
            re.compile(r"^(Ran \d+ tests? in )(\d+\.\d+s)$", re.M))
MARKERS = ("LOOPX_AGENT", "CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CODEX_SANDBOX", "CODEX_SANDBOX_NETWORK_DISABLED",
           "CODEX_THREAD_ID", "CURSOR_AGENT", "CURSOR_TRACE_ID", "GEMINI_CLI", "OPENCODE", "LOOPX_RUN_ID")


def files() -> list[Path]:
    return [REPO / "README.md", *sorted(HERE.glob("*.md"))]


def masked(text: str) -> str:
    """``text`` with every measured duration (``MEASURED``) replaced by ``<duration>``."""
    for pattern in MEASURED:
        text = pattern.sub(lambda m: m.group(1) + "<duration>" + m.group(3) if m.lastindex == 3
                           else m.group(1) + "<duration>", text)
    return text


def parse(block: str) -> list[tuple[str, list[str]]]:
    """``[(command, expected output lines)]`` of one block."""
    steps: list[tuple[str, list[str]]] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise ValueError(f"a console block must start with a `$ ` command, not {line!r}")
        cmd = line[2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd + "\n" + lines[i]
        out = []
        i += 1
        while i < len(lines) and not lines[i].startswith("$ "):  # its output (and a blank line)
            out.append(lines[i])
            i += 1
        steps.append((cmd, out))
    return steps


class Session:
    """One scratch project in which a file's transcripts run in order."""

    def __init__(self, tmp: str) -> None:
        self.home = os.path.join(tmp, "home")
        self.project = os.path.join(tmp, "shop")
        os.makedirs(self.home)
        os.makedirs(self.project)
        env = {k: v for k, v in os.environ.items() if k not in MARKERS and not k.startswith("LOOPX_")}
        env.update(LOOPX_HOME=os.path.join(self.home, ".loopx-home"), HOME=self.home, LOOPX_NOW=NOW,
                   LOOPX_ID_SEED="docs", USER="alice", LOGNAME="alice", NO_COLOR="1", COLUMNS="100", TZ="UTC",
                   LOOPX_NO_UPDATE_CHECK="1", GIT_AUTHOR_NAME="alice", GIT_AUTHOR_EMAIL="alice@example.com",
                   GIT_COMMITTER_NAME="alice", GIT_COMMITTER_EMAIL="alice@example.com",
                   GIT_AUTHOR_DATE=NOW, GIT_COMMITTER_DATE=NOW, PYTHONIOENCODING="utf-8",
                   # this checkout's loopx, whether it is installed or only on a (relative) PYTHONPATH
                   PYTHONPATH=os.pathsep.join([str(REPO / "src"), *[os.path.abspath(p) for p in
                                                                     os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]))
        self.env = env
        self.run("git init -q -b main . && mkdir -p src tests && echo '# shop' > README.md && "
                 "git add -A && git commit -qm init")

    def write_file(self, body: str) -> None:
        """Write a shown file (see the module docstring) when its first comment line names one."""
        lines = body.splitlines()
        first = lines[1] if lines and lines[0].startswith("#!") and len(lines) > 1 else (lines[0] if lines else "")
        m = FILE_LINE.match(first)
        if not m:
            return
        name = m.group(1)
        path = os.path.join(self.home, name[2:]) if name.startswith("~/") else os.path.join(self.project, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(body)
        if body.startswith("#!"):
            os.chmod(path, 0o755)

    def run(self, cmd: str) -> str:
        script = f'loopx() {{ "{sys.executable}" -m loopx "$@"; }}\nexport -f loopx\n{cmd}\n'
        proc = subprocess.run(["bash", "-c", script], cwd=self.project, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120, stdin=subprocess.DEVNULL)
        out = self.normalise(proc.stdout)
        return (out + "\n" if out else "") + f"[exit {proc.returncode}]"

    def normalise(self, text: str) -> str:
        text = text.replace(self.project, FAKE_PROJECT).replace(self.home, FAKE_HOME)
        text = text.replace(os.path.realpath(self.project), FAKE_PROJECT)
        # the packet's write-back lines name the absolute loopx (issue 23: an agent's login shell may
        # reset PATH): the docs show it where getting-started.md installs it
        text = text.replace(os.path.join(os.path.dirname(sys.executable), "loopx"), FAKE_LOOPX)
        text = text.replace(sys.executable, "python")
        import re

        text = re.sub(r"(?m)^sandbox: Landlock ABI \d+ ", "sandbox: Landlock ABI N ", text)  # the kernel's version
        try:  # decisions name the OS account (never $USER): show it as the docs' alice
            import pwd

            text = text.replace(f"human:{pwd.getpwuid(os.getuid()).pw_name}", "human:alice")
        except (ImportError, KeyError):
            pass
        return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines())


def render(block: str, session: Session) -> str:
    parts = []
    for cmd, _expected in parse(block):
        parts.append("$ " + cmd + "\n" + session.run(cmd))
    return "\n\n".join(parts) + "\n"


def process(path: Path) -> tuple[str, str]:
    """(current text, text with every transcript's output refreshed)."""
    text = path.read_text(encoding="utf-8")
    if not BLOCK.search(text):
        return text, text
    with tempfile.TemporaryDirectory(prefix="loopx-docs-") as tmp:
        session = Session(tmp)

        def each(m: re.Match) -> str:
            if m.group(1) != "console":
                session.write_file(m.group(2))
                return m.group(0)
            return "```console\n" + render(m.group(2), session) + "```\n"

        new = ANY_BLOCK.sub(each, text)
    return text, new


def main(argv: list[str]) -> int:
    check = "--check" in argv
    chosen = [Path(a).resolve() for a in argv if not a.startswith("--")] or files()
    status = 0
    for path in chosen:
        old, new = process(path)
        if masked(old) == masked(new):
            continue
        if check:
            rel = os.path.relpath(path, REPO)
            for n, (a, b) in enumerate(zip(masked(old).splitlines(), masked(new).splitlines(), strict=False), 1):
                if a != b:
                    print(f"{rel}:{n}: the transcript says\n    {a}\nbut loopx now prints\n    {b}")
                    break
            else:
                print(f"{rel}: transcript length differs")
            print("rerun `python docs/transcripts.py` and review the diff")
            status = 1
        else:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {os.path.relpath(path, REPO)}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
