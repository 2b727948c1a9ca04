"""A POSIX shell reader for the guard: command text in, the simple commands it would run out.

``commands(text) -> list[Simple]``. It is not an interpreter; it reads the text the way ``sh``
would split it, conservatively:

- quoting (``'...'``, ``"..."``, ``$'...'``, backslashes), backslash-newline continuations,
  comments, here-documents (their body is a script when fed to a shell);
- operators ``;`` ``&`` ``&&`` ``||`` ``|`` ``|&`` ``(`` ``)`` newlines and redirections;
- reserved words ``if then elif else fi for while until do done case esac { } !`` and
  ``function``/``name()`` definitions (bodies are read as if they ran);
- ``$(...)`` and backticks: the inner commands are read too, and the substitution's value is
  known when the inner command is a plain ``echo``/``printf``;
- variables: ``x=git; $x push`` expands from assignments seen earlier in the same text;
  ``cd DIR`` changes the working directory of the commands after it; ``alias`` definitions expand;
- wrappers (``sudo env nohup setsid flock script watch ionice taskset strace timeout xargs ...``)
  are unwrapped; ``sh|bash|zsh|dash|ksh|fish|busybox sh -c``, ``env -S``, ``eval`` and a shell fed
  from a here-document, here-string or ``echo ... |`` are read as scripts.

A word whose value cannot be known (an unset variable, a command substitution that is not a plain
echo, ``xargs`` input) is kept as ``UNKNOWN + original text``; ``is_unknown(word)`` tells. A shell
that reads a script loopx cannot see (``curl ... | sh``) yields a Simple with ``opaque`` set.
"""

from __future__ import annotations

import os

UNKNOWN = "\x00?"
PATTERN = UNKNOWN + UNKNOWN  # starts an unknown word that is an unquoted pattern of known text
MAX_DEPTH = 6
_OPS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")", "\n")
_REDIR = ("<<<", "<<-", "<<", ">>", ">&", "<&", "&>>", "&>", ">|", "<>", "<", ">")
_RESERVED_START = {"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"}
_RESERVED_END = {"fi", "done", "}", "esac"}
SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "yash", "posh", "busybox", "toybox"}


def is_unknown(word: str) -> bool:
    """True when ``word`` holds a value the reader could not determine."""
    return UNKNOWN in word


def is_pattern(word: str) -> bool:
    """True when ``word`` is unknown only because it is an unquoted pattern (``*.py``, ``{a,b}``):
    its text is what the command spelled, with no variable or substitution in it."""
    return word.startswith(PATTERN) and UNKNOWN not in word[len(PATTERN):]


class Simple:
    """One simple command: ``words`` (expanded; ``words[0]`` is the program's base name after
    unwrapping), ``cwd`` (its working directory, None = the caller's), ``env`` (assignments in
    front of it and those its wrappers set or strip: ``{name: value or None}``), ``stripped``
    (agent markers or the whole environment removed by ``env -u/-i`` or ``unset``), ``opaque``
    (a script the reader cannot see, with why), ``wrappers`` (the wrapper names removed), ``writes``
    (files its output redirections write)."""

    __slots__ = ("words", "cwd", "env", "stripped", "opaque", "wrappers", "text", "writes")

    def __init__(self, words, cwd=None, env=None, stripped=(), opaque=None, wrappers=(), writes=()):
        self.writes = list(writes)
        self.words = list(words)
        self.cwd = cwd
        self.env = dict(env or {})
        self.stripped = tuple(stripped)
        self.opaque = opaque
        self.wrappers = tuple(wrappers)
        self.text = " ".join(w.replace(PATTERN, "").replace(UNKNOWN, "?") for w in self.words)

    def __repr__(self) -> str:
        return f"Simple({self.words!r}, cwd={self.cwd!r})"


# ------------------------------------------------------------------ lexing
class _Word:
    """A word as parts: ("lit", s) | ("var", name) | ("cmd", inner text); ``quoted`` parts keep spaces."""

    __slots__ = ("parts", "raw", "bare")

    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []
        self.raw = ""
        self.bare = ""  # the unquoted, unescaped characters: where sh's globs and braces act

    def lit(self, s: str) -> None:
        if self.parts and self.parts[-1][0] == "lit":
            self.parts[-1] = ("lit", self.parts[-1][1] + s)
        else:
            self.parts.append(("lit", s))

    @property
    def plain(self) -> str | None:
        """The literal text when the word has no expansions."""
        if all(k in ("lit", "q") for k, _ in self.parts):
            return "".join(v for _, v in self.parts)
        return None


def _is_pattern(text: str) -> bool:
    """Whether unquoted ``text`` is something sh expands: a glob (``*``, ``?``, ``[...]``) or a
    brace expansion (``{a,b}``, ``{1..3}``; ``{}`` alone, as in ``find -exec``, is literal)."""
    if "*" in text or "?" in text:
        return True
    i = text.find("[")
    if i >= 0 and "]" in text[i + 2:]:
        return True
    j = text.find("{")
    while j >= 0:
        k = text.find("}", j)
        if k < 0:
            return False
        if "," in text[j:k] or ".." in text[j:k]:
            return True
        j = text.find("{", j + 1)
    return False


def _find_close(text: str, i: int, open_: str, close: str) -> int:
    """Index of the ``close`` matching an ``open_`` before ``i`` (quotes respected), or len(text)."""
    depth, n = 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if text.startswith(open_, i):
            depth += 1
            i += len(open_)
            continue
        if text.startswith(close, i):
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return n


def tokenize(text: str) -> list:  # noqa: C901, PLR0912, PLR0915 -- the shell lexer is one state machine; split, it hides the grammar
    """Words (``_Word``) and operator strings; here-document bodies follow their ``<<`` as
    ``("heredoc", body)`` tuples. Never raises: an unterminated quote runs to the end."""
    out: list = []
    i, n = 0, len(text)
    pending_heredocs: list[tuple[str, bool]] = []
    word: _Word | None = None

    def end_word():
        nonlocal word
        if word is not None:
            out.append(word)
            word = None

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2  # line continuation
            continue
        if c in " \t\r":
            end_word()
            i += 1
            continue
        if c == "#" and word is None:
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "\n":
            end_word()
            out.append("\n")
            i += 1
            for delim, strip in pending_heredocs:
                body = []
                while i < n:
                    j = text.find("\n", i)
                    line = text[i:] if j < 0 else text[i:j]
                    i = n if j < 0 else j + 1
                    if (line.lstrip("\t") if strip else line) == delim:
                        break
                    body.append(line)
                out.append(("heredoc", "\n".join(body)))
            pending_heredocs = []
            continue
        if word is None:
            # operators and redirections only start outside a word (or after fd digits)
            for r in _REDIR:
                if text.startswith(r, i):
                    out.append(("redir", r))
                    i += len(r)
                    if r in ("<<", "<<-"):
                        while i < n and text[i] in " \t":
                            i += 1
                        j = i
                        while j < n and text[j] not in " \t\n;&|<>()":
                            j += 1
                        delim = text[i:j].replace("'", "").replace('"', "").replace("\\", "")
                        pending_heredocs.append((delim, r == "<<-"))
                        out.append(("redir-target", delim))
                        i = j
                    break
            else:
                for op in _OPS:
                    if text.startswith(op, i):
                        out.append(op)
                        i += len(op)
                        break
                else:
                    word = _Word()
            if word is None:
                continue
        elif c in ";&|()<>":
            raw = word.plain
            if c in "<>" and raw is not None and raw.isdigit():
                word = None  # "2>" : the digits were a file descriptor
            else:
                end_word()
            continue
        # inside a word
        if c == "\\":
            if i + 1 < n:
                word.lit(text[i + 1])
            i += 2
        elif c == "'":
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            word.lit(text[i + 1:j])
            word.parts.append(("q", ""))
            i = j + 1
        elif c == "$" and text.startswith("$'", i):
            j = i + 2
            buf = []
            while j < n and text[j] != "'":
                if text[j] == "\\" and j + 1 < n:
                    esc = text[j + 1]
                    buf.append({"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}.get(esc, esc))
                    j += 2
                else:
                    buf.append(text[j])
                    j += 1
            word.lit("".join(buf))
            word.parts.append(("q", ""))
            i = j + 1
        elif c == '"':
            i = _read_dquoted(text, i + 1, word)
            word.parts.append(("q", ""))
        elif c == "$" or c == "`":
            i = _read_dollar(text, i, word)
        else:
            word.lit(c)
            word.bare += c
            i += 1
    end_word()
    return out


def _read_dquoted(text: str, i: int, word: _Word) -> int:
    n = len(text)
    while i < n and text[i] != '"':
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":
                i += 2
                continue
            word.lit(text[i + 1] if text[i + 1] in '$`"\\' else text[i:i + 2])
            i += 2
        elif c in "$`":
            before = len(word.parts)
            i = _read_dollar(text, i, word)
            word.parts[before:] = [("q" + k, v) if k in ("var", "cmd") else (k, v) for k, v in word.parts[before:]]
        else:
            word.lit(c)
            i += 1
    return i + 1


def _read_dollar(text: str, i: int, word: _Word) -> int:
    n = len(text)
    if text[i] == "`":
        j = i + 1
        while j < n and text[j] != "`":
            j += 2 if text[j] == "\\" else 1
        word.parts.append(("cmd", text[i + 1:j].replace("\\`", "`")))
        return j + 1
    if text.startswith("$((", i):
        j = _find_close(text, i + 3, "((", "))")
        word.parts.append(("var", "((arith))"))
        return j + 2
    if text.startswith("$(", i):
        j = _find_close(text, i + 2, "(", ")")
        word.parts.append(("cmd", text[i + 2:j]))
        return j + 1
    if text.startswith("${", i):
        j = _find_close(text, i + 2, "{", "}")
        inner = text[i + 2:j]
        name = ""
        for ch in inner:
            if ch.isalnum() or ch == "_":
                name += ch
            else:
                break
        word.parts.append(("var", name if name and name == inner else f"{{{inner}}}"))
        return j + 1
    j = i + 1
    if j < n and (text[j].isalpha() or text[j] == "_"):
        while j < n and (text[j].isalnum() or text[j] == "_"):
            j += 1
        word.parts.append(("var", text[i + 1:j]))
        return j
    if j < n and text[j] in "@*#?$!-0123456789":
        word.parts.append(("var", text[j]))
        return j + 1
    word.lit("$")
    return j


# ------------------------------------------------------------------ reading commands
class _Reader:
    def __init__(self, cwd, depth):
        self.cwd = cwd
        self.depth = depth
        self.vars: dict[str, str | None] = {}
        self.aliases: dict[str, str] = {}
        self.unset: set[str] = set()
        self.out: list[Simple] = []
        self.writes: list[str] = []
        self.written: set[str] = set()

    # words -------------------------------------------------------
    def expand(self, w: _Word) -> str:
        buf = []
        for kind, val in w.parts:
            if kind == "lit" or kind == "q":
                buf.append(val)
            elif kind in ("var", "qvar"):
                v = self.vars.get(val)
                buf.append(v if v is not None else UNKNOWN + "$" + val)
            elif kind in ("cmd", "qcmd"):
                buf.append(self.substitute(val))
        return "".join(buf)

    def fields(self, w: _Word) -> list[str]:
        """``w`` expanded and, when it has an unquoted expansion, split on blanks as sh does. An
        unquoted pattern (``*``, ``?``, ``[...]``, ``{a,b}``, ``{1..3}``) is one unknown word: what
        the shell makes of it depends on the files present (``m[a]in`` next to a file ``main``)
        or gives several words (``{main,main}``)."""
        value = self.expand(w)
        if _is_pattern(w.bare):
            return [(PATTERN if UNKNOWN not in value else UNKNOWN) + value]
        if any(k in ("var", "cmd") for k, _ in w.parts):
            return value.split()
        return [value]

    def substitute(self, inner: str) -> str:
        sub = _Reader(self.cwd, self.depth + 1)
        sub.vars = dict(self.vars)
        if self.depth < MAX_DEPTH:
            sub.read(inner)
        self.out.extend(sub.out)
        if len(sub.out) == 1 and sub.out[0].words and sub.out[0].words[0] == "echo" and not sub.out[0].opaque:
            args = [a for a in sub.out[0].words[1:] if a not in ("-n", "-e", "-E")]
            return " ".join(args)
        if len(sub.out) == 1 and sub.out[0].words[:2] == ["printf", "%s"]:
            return "".join(sub.out[0].words[2:])
        return UNKNOWN + "$(" + inner[:60] + ")"

    # statements --------------------------------------------------
    def read(self, text: str) -> None:
        toks = tokenize(text)
        seg: list = []
        pipe_from: list | None = None
        heredoc_for: list = []
        for tok in toks + ["\n"]:
            if isinstance(tok, tuple) and tok[0] == "heredoc":
                for simple_tokens in heredoc_for:
                    self.feed_shell_stdin(simple_tokens, tok[1])
                heredoc_for = []
                continue
            if isinstance(tok, str) and tok in _OPS:
                if seg:
                    if any(isinstance(t, tuple) and t == ("redir", "<<") or t == ("redir", "<<-") for t in seg):
                        heredoc_for.append(seg)
                        res = self.simple(seg, stdin=None, heredoc=True)
                    else:
                        res = self.simple(seg, stdin=pipe_from)
                    pipe_from = res if tok in ("|", "|&") else None
                elif tok not in ("|", "|&"):
                    pipe_from = None
                seg = []
                continue
            seg.append(tok)

    def feed_shell_stdin(self, seg, body: str) -> None:
        words = [t for t in seg if isinstance(t, _Word)]
        if words and self._is_stdin_shell([self.expand(w) for w in words]):
            self.script(body)

    def _is_stdin_shell(self, words: list[str]) -> bool:
        s = self.unwrap(words, {}, [], [], dry=True)
        if not s:
            return False
        base = os.path.basename(s[0])
        if base in ("busybox", "toybox") and len(s) > 1:
            s = s[1:]
            base = s[0]
        return base in SHELLS and not any(a.startswith("-") and "c" in a.lstrip("-") for a in s[1:]) \
            and not [a for a in s[1:] if not a.startswith("-")]

    def script(self, body: str, cwd=None) -> None:
        if body.strip().startswith(UNKNOWN):
            self.out.append(Simple([UNKNOWN + "script"], cwd or self.cwd, opaque=(
                f"a shell runs `{body.replace(UNKNOWN, '').strip()[:80]}`, whose text loopx cannot see")))
            return
        if self.depth >= MAX_DEPTH:
            self.out.append(Simple([UNKNOWN + "script"], cwd or self.cwd, opaque="nested too deeply to read"))
            return
        sub = _Reader(cwd or self.cwd, self.depth + 1)
        sub.vars = dict(self.vars)
        sub.aliases = dict(self.aliases)
        sub.written = self.written
        sub.read(body)
        self.out.extend(sub.out)

    def simple(self, seg: list, stdin, heredoc: bool = False):  # noqa: C901, PLR0912, PLR0915 -- one pass over a simple command's grammar (words, redirections, here-docs)
        """Read one simple command's tokens; returns the echo text it prints (for ``| sh``) or None."""
        words: list[_Word] = []
        herestring = None
        self.writes = []
        skip = False
        for idx, t in enumerate(seg):
            if skip:
                skip = False
                continue
            if isinstance(t, tuple):
                if t[0] == "redir":
                    nxt = seg[idx + 1] if idx + 1 < len(seg) else None
                    if t[1] == "<<<" and isinstance(nxt, _Word):
                        herestring = self.expand(nxt)
                    elif t[1] in (">", ">>", ">|", "&>", "&>>", "<>") and isinstance(nxt, _Word):
                        self.writes.append(self.expand(nxt))
                    skip = isinstance(nxt, _Word) or (isinstance(nxt, tuple) and nxt[0] == "redir-target")
                continue
            words.append(t)
        # reserved words in front of a command
        while words and words[0].plain in _RESERVED_START:
            words = words[1:]
        while words and words[-1].plain in _RESERVED_END and len(words) == 1:
            words = []
        if (not words or all(_assignment(w) for w in words)) and self.writes:
            self.out.append(Simple([":"], self.cwd, writes=self.writes))
        if not words:
            return None
        head = words[0].plain
        if head == "for" or head == "select":
            name = words[1].plain if len(words) > 1 else None
            if name:
                self.vars[name] = None  # several values: unknown
            for w in words[2:]:
                self.expand(w)  # substitutions in the list still run
            return None
        if head == "case":
            return None
        if head == "function" and len(words) >= 2:
            return None
        if head in _RESERVED_END:
            words = words[1:]
            if not words:
                return None
        # case patterns "pat)" and function names "f()" leave lone words before ")": harmless
        env: dict[str, str | None] = {}
        k = 0
        while k < len(words) and _assignment(words[k]):
            name, value = self.expand(words[k]).split("=", 1)
            env[name] = value
            k += 1
        if k == len(words):
            self.vars.update(env)
            for name in env:
                self.unset.discard(name)
            return None
        argv = [f for w in words[k:] for f in self.fields(w)]
        if not argv:
            return None
        # aliases
        if argv[0] in self.aliases and self.depth < MAX_DEPTH:
            self.script(self.aliases[argv[0]] + " " + " ".join(_quote(a) for a in argv[1:]))
            return None
        return self.emit(argv, env, stdin, herestring)

    def emit(self, argv: list[str], env: dict, stdin, herestring):  # noqa: C901, PLR0912, PLR0915 -- one dispatch over the builtins and forms that run code (cd, export, alias, sh -c, eval, scripts)
        stripped: list[str] = []
        wrappers: list[str] = []
        cwd = self.cwd
        box = {"cwd": cwd}
        words = self.unwrap(argv, env, stripped, wrappers, box=box)
        if not words:
            if self.writes:
                self.out.append(Simple([":"], box["cwd"], env, [], None, wrappers, self.writes))
            return None
        argv_prog = words[0]
        prog = os.path.basename(words[0]) if not is_unknown(words[0]) else words[0]
        if prog in ("busybox", "toybox") and len(words) > 1:
            words = words[1:]
            prog = os.path.basename(words[0])
        words = [prog, *words[1:]]
        cwd = box["cwd"]
        if prog == "cd":
            target = next((a for a in words[1:] if not a.startswith("-") or a == "-"), None)
            if target is None or is_unknown(target) or target == "-":
                self.cwd = UNKNOWN + "cd" if target not in (None,) else os.path.expanduser("~")
            else:
                self.cwd = os.path.normpath(os.path.join(self.cwd or ".", os.path.expanduser(target))) \
                    if not (self.cwd or "").startswith(UNKNOWN) else self.cwd
            return None
        if prog in ("pushd",) and len(words) > 1:
            self.cwd = os.path.normpath(os.path.join(self.cwd or ".", words[1]))
            return None
        if prog == "unset":
            self.unset.update(w for w in words[1:] if not w.startswith("-"))
            for w in words[1:]:
                self.vars.pop(w, None)
            return None
        if prog == "export" or prog == "declare" or prog == "typeset" or prog == "local" or prog == "readonly":
            for w in words[1:]:
                if "=" in w and w.split("=", 1)[0].isidentifier():
                    name, value = w.split("=", 1)
                    self.vars[name] = value
                elif w.startswith("-n") or w == "-u":
                    continue
            if "-n" in words[1:]:  # export -n NAME: stop exporting
                self.unset.update(w for w in words[1:] if w.isidentifier())
            return None
        if prog == "alias":
            for w in words[1:]:
                if "=" in w:
                    name, value = w.split("=", 1)
                    self.aliases[name] = value
            return None
        if prog == "read":
            for w in words[1:]:
                if w.isidentifier():
                    self.vars[w] = None
            return None
        strip_all = list(stripped) + sorted(self.unset)
        if (prog in SHELLS or prog in ("eval", "source", ".")) and \
                self.shell(prog, words, stdin, herestring, cwd, env, strip_all, wrappers):
            return None
        for w in self.writes:
            if not is_unknown(w):
                base = cwd if cwd and not str(cwd).startswith(UNKNOWN) else os.getcwd()
                self.written.add(os.path.normpath(os.path.join(base, w)))
        if "/" in argv_prog and not is_unknown(argv_prog) and prog not in SHELLS and self._looks_like_script(argv_prog, cwd):
            self.script_file(argv_prog, cwd)
        if prog in _INTERPRETERS:
            self.interpreter_code(words, cwd)
        simple = Simple(words, cwd, env, strip_all, None, wrappers, self.writes)
        self.out.append(simple)
        if prog == "echo":
            return " ".join(a for a in words[1:] if a not in ("-n", "-e", "-E"))
        if prog == "printf" and len(words) > 1:
            return " ".join(words[1:]).replace("\\n", "\n")
        if prog == "cat" and herestring is not None:
            return herestring
        return UNKNOWN + prog

    def shell(self, prog, words, stdin, herestring, cwd, env, stripped, wrappers) -> bool:
        """Read what a shell would run; True when handled."""
        if prog == "eval":
            self.script(" ".join(words[1:]), cwd)
            return True
        if prog in ("source", "."):
            return self.script_file(words[1] if len(words) > 1 else "", cwd)
        args = words[1:]
        for j, a in enumerate(args):
            if a.startswith("-") and not a.startswith("--") and "c" in a[1:]:
                if j + 1 < len(args):
                    self.script(args[j + 1], cwd)
                    return True
                return False
            if a == "--command" and j + 1 < len(args):
                self.script(args[j + 1], cwd)
                return True
            if not a.startswith("-") and not a.startswith("+"):
                return self.script_file(a, cwd)  # a script file: read it when it can be read
        # reads its script from stdin
        source = herestring if herestring is not None else stdin
        if source is None:
            return False  # interactive shell or a here-document (read by the caller)
        if is_unknown(source):
            self.out.append(Simple(words, cwd, env, stripped,
                                   f"`{prog}` reads a script from `{source.replace(UNKNOWN, '')}`, which loopx cannot see",
                                   wrappers))
            return True
        self.script(source, cwd)
        return True

    def _looks_like_script(self, name: str, cwd) -> bool:
        base = cwd if cwd and not str(cwd).startswith(UNKNOWN) else os.getcwd()
        path = os.path.normpath(os.path.join(base, os.path.expanduser(name)))
        if path in self.written:
            return True
        try:
            with open(path, "rb") as fh:
                head = fh.read(128)
        except OSError:
            return False
        first = head.split(b"\n", 1)[0]
        return first.startswith(b"#!") and any(s.encode() in first for s in ("sh", "bash", "zsh", "dash", "ksh"))

    def interpreter_code(self, words: list[str], cwd) -> None:
        """``python -c CODE``, ``node -e CODE``...: string literals that spell a command are read
        as commands (``os.system('git push origin main')``, ``["git", "push", ...]``)."""
        code = next((words[j + 1] for j, a in enumerate(words[1:-1], 1) if a in ("-c", "-e", "--eval", "-E")), None)
        if not code or not any(w in code for w in _COMMANDISH):
            return  # no literal can spell a command (its first word is one of these): `re` is not imported
        import re

        lits = [m.group(2) for m in re.finditer(r"(['\"])((?:\\.|(?!\1).){1,400})\1", code)]
        for i, lit in enumerate(lits):
            head = lit.strip().split(" ", 1)[0]
            if os.path.basename(head) in _COMMANDISH:
                self.script(lit, cwd)
                if " " not in lit.strip():
                    self.script(" ".join(_quote(x) for x in lits[i:i + 16]), cwd)

    def script_file(self, name: str, cwd) -> bool:
        """Read the shell script ``name`` (relative to ``cwd``) as commands; True when handled. A file
        written earlier in the same command text, or one that cannot be read, is opaque."""
        if not name or is_unknown(name):
            self.out.append(Simple([UNKNOWN + "script"], cwd, opaque="the script's name cannot be known"))
            return True
        base = cwd if cwd and not str(cwd).startswith(UNKNOWN) else None
        path = os.path.normpath(os.path.join(base or os.getcwd(), os.path.expanduser(name)))
        if path in self.written:
            self.out.append(Simple([name], cwd, opaque=f"`{name}` is written by the same command, so loopx cannot read it"))
            return True
        try:
            if os.path.getsize(path) > 512 * 1024:
                raise OSError("too large")
            with open(path, encoding="utf-8", errors="replace") as fh:
                body = fh.read()
        except OSError:
            return False  # no such file: running it fails; the command itself is judged as is
        self.script(body, cwd)
        return True

    # wrappers ----------------------------------------------------
    def unwrap(self, argv, env, stripped, wrappers, *, dry=False, box=None):
        return _unwrap(self, argv, env, stripped, wrappers, dry, box if box is not None else {"cwd": self.cwd})


def _assignment(w: _Word) -> bool:
    if not w.parts or w.parts[0][0] != "lit":
        return False
    name, eq, _ = w.parts[0][1].partition("=")
    return bool(eq) and name.isidentifier()


def _quote(s: str) -> str:
    if s and all(c.isalnum() or c in "@%+=:,./-_" for c in s):
        return s
    return "'" + s.replace("'", "'\"'\"'") + "'"


# wrapper -> (options that take a value, number of positional arguments before the command)
_WRAP: dict[str, tuple[set[str], int]] = {
    "sudo": ({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group", "--chdir",
              "--host", "--prompt", "--role", "--type", "--other-user", "--command-timeout", "--close-from"}, 0),
    "doas": ({"-u", "-C"}, 0),
    "run0": ({"-u", "--user", "-D", "--chdir", "--setenv", "--unit", "--description"}, 0),
    "time": ({"-f", "-o", "--format", "--output"}, 0),
    "nohup": (set(), 0), "command": (set(), 0), "exec": ({"-a"}, 0), "builtin": (set(), 0),
    "nice": ({"-n", "--adjustment"}, 0),
    "ionice": ({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}, 0),
    "chrt": ({"-T", "-P", "-D"}, 1),
    "taskset": ({"-p"}, 1),  # taskset MASK cmd / taskset -c LIST cmd (the list is the positional)
    "numactl": ({"-C", "-N", "-m", "-p", "-i", "--physcpubind", "--cpunodebind", "--membind", "--preferred",
                 "--interleave"}, 0),
    "strace": ({"-o", "-e", "-p", "-s", "-u", "-E", "-O", "-a", "-b", "-I", "-P", "-S", "-X"}, 0),
    "ltrace": ({"-o", "-e", "-p", "-s", "-u", "-n", "-a", "-l", "-x", "-E"}, 0),
    "setsid": (set(), 0), "stdbuf": ({"-i", "-o", "-e"}, 0),
    "timeout": ({"-s", "-k", "--signal", "--kill-after"}, 1),
    "flock": ({"-w", "-E", "--timeout", "--conflict-exit-code"}, 1),
    "npx": ({"-p", "--package", "-c", "--call"}, 0), "bunx": ({"-p", "--package"}, 0),
    "pnpx": ({"-p", "--package"}, 0), "uvx": ({"--from", "--with", "-p", "--python"}, 0),
    "pipx": (set(), 0), "chronic": (set(), 0), "unbuffer": (set(), 0), "caffeinate": ({"-t", "-w"}, 0),
    "faketime": ({"-f"}, 1), "proxychains": ({"-f"}, 0), "proxychains4": ({"-f"}, 0), "torsocks": (set(), 0),
    "firejail": (set(), 0), "unshare": ({"-S", "-G", "-R", "-w", "--setuid", "--setgid", "--root", "--wd"}, 0),
    "nsenter": ({"-t", "-S", "-G", "--target"}, 0), "chroot": ({"--userspec", "--groups"}, 1),
    "dbus-run-session": (set(), 0), "catchsegv": (set(), 0), "valgrind": (set(), 0), "entr": (set(), 0),
    "systemd-run": ({"-u", "--unit", "-p", "--property", "-d", "--description", "-E", "--setenv",
                     "--working-directory", "--slice", "-M", "--machine", "--uid", "--gid", "--nice"}, 0),
    "runuser": ({"-u", "-g", "-G", "--user", "--group"}, 0), "sg": (set(), 1),
    "xargs": ({"-I", "-i", "-n", "-P", "-d", "-a", "-E", "-e", "-L", "-l", "-s", "--max-args", "--max-procs",
               "--delimiter", "--arg-file", "--replace", "--max-lines", "--max-chars", "--eof"}, 0),
    "parallel": ({"-j", "-S", "--jobs"}, 0), "retry": ({"-t", "-d", "--times", "--delay"}, 0),
    "watch": ({"-n", "-d", "--interval", "--differences", "-q", "--equexit"}, 0),
    "script": ({"-c", "--command", "-E", "--echo", "-I", "-O", "-B", "-T", "--log-in", "--log-out",
                "--log-io", "--log-timing", "-m", "--logging-format", "-o", "--output-limit"}, 0),
    "su": ({"-c", "--command", "-g", "-G", "-s", "--shell", "-w"}, 0),
    "env": ({"-u", "--unset", "-C", "--chdir", "-S", "--split-string", "-a", "--argv0"}, 0),
    "perf": (set(), 0), "gdb": (set(), 0), "poetry": (set(), 0), "uv": (set(), 0), "pdm": (set(), 0),
    "hatch": (set(), 0), "rye": (set(), 0), "pipenv": (set(), 0), "bundle": (set(), 0), "dotenv": ({"-e", "-f"}, 0),
    "op": ({"--env-file"}, 0), "doppler": (set(), 0), "aws-vault": (set(), 1), "direnv": (set(), 1),
}
# program word(s) after which the wrapped command starts: "uv run X", "poetry run X", "op run -- X"
_SUBWRAP = {"poetry": "run", "uv": "run", "pdm": "run", "hatch": "run", "rye": "run", "pipenv": "run",
            "pipx": "run", "bundle": "exec", "op": "run", "doppler": "run", "aws-vault": "exec", "direnv": "exec",
            "perf": "record", "dotenv": "run"}
_STRING_CMD = {"script": ("-c", "--command"), "su": ("-c", "--command"), "flock": ("-c", "--command"),
               "env": ("-S", "--split-string"), "sg": ("-c",), "npx": ("-c", "--call")}
PYTHONS = ("python", "python3", "py", "pypy", "pypy3")
_INTERPRETERS = {"python", "python3", "pypy3", "node", "nodejs", "deno", "bun", "perl", "ruby", "php", "osascript"}
_COMMANDISH = {"git", "gh", "glab", "npm", "pnpm", "yarn", "cargo", "twine", "docker", "podman", "kubectl", "helm",
               "terraform", "tofu", "loopx", "sh", "bash", "zsh", "env", "fly", "flyctl", "vercel", "gcloud", "aws"}


def _unwrap(reader, argv, env, stripped, wrappers, dry, box):  # noqa: C901, PLR0912, PLR0915 -- the wrapper unwrapper is one loop over wrapper grammars; split, it hides them
    words = list(argv)
    for _ in range(64):
        if not words:
            return []
        w = words[0]
        base = os.path.basename(w)
        if "=" in w and w.split("=", 1)[0].isidentifier():
            name, value = w.split("=", 1)
            env[name] = value
            words = words[1:]
            continue
        if base in PYTHONS or (base.startswith("python") and base[6:].replace(".", "").isdigit()):
            # python -m MODULE args: the module is the program
            j = 1
            while j < len(words) and words[j].startswith("-") and words[j] not in ("-m", "-c"):
                j += 1
            if j + 1 < len(words) and words[j] == "-m":
                words = [words[j + 1].split(".")[0], *words[j + 2:]]
                wrappers.append(base)
                continue
            if j + 1 < len(words) and words[j].startswith("-m") and len(words[j]) > 2:
                words = [words[j][2:].split(".")[0], *words[j + 1:]]
                continue
            return words
        if base in ("pnpm", "yarn", "npm") and len(words) > 2 and words[1] in ("dlx", "exec", "x") :
            words = words[2:]
            wrappers.append(base)
            continue
        spec = _WRAP.get(base)
        if spec is None:
            return words
        sub = _SUBWRAP.get(base)
        if sub is not None:
            rest = words[1:]
            k = 0
            while k < len(rest) and rest[k] != sub:
                k += 1
            if k >= len(rest):
                return words  # "uv pip", "poetry publish": the program itself
            words = rest[k + 1:]
            if words and words[0] == "--":
                words = words[1:]
            wrappers.append(base)
            continue
        takes, npos = spec
        wrappers.append(base)
        j = 1
        string_cmd = None
        while j < len(words):
            a = words[j]
            if a == "--":
                j += 1
                break
            if not a.startswith("-") or a == "-":
                if base == "env" and "=" in a and a.split("=", 1)[0].isidentifier():
                    name, value = a.split("=", 1)
                    env[name] = value
                    j += 1
                    continue
                break
            opt, eq, val = a.partition("=")
            if not a.startswith("--") and len(a) > 2 and opt not in takes and opt not in _STRING_CMD.get(base, ()) \
                    and base != "env":
                # a cluster of short options: "-qc CMD", "-fo FILE"
                for ci, ch in enumerate(a[1:], 1):
                    if f"-{ch}" in _STRING_CMD.get(base, ()) or f"-{ch}" in takes:
                        opt, eq, val = f"-{ch}", bool(a[ci + 1:]) and "=", a[ci + 1:]
                        break
            if base == "env":
                if opt in ("-i", "--ignore-environment") or a == "-":
                    stripped.append("*")
                elif opt in ("-u", "--unset"):
                    stripped.append(val if eq else (words[j + 1] if j + 1 < len(words) else ""))
                elif opt.startswith("-u") and len(opt) > 2 and not opt.startswith("--"):
                    stripped.append(opt[2:])
                elif opt in ("-C", "--chdir"):
                    target = val if eq else (words[j + 1] if j + 1 < len(words) else ".")
                    box["cwd"] = os.path.normpath(os.path.join(box["cwd"] or ".", target))
                elif opt.startswith("-S") and len(opt) > 2:
                    string_cmd = a[2:]
            if opt in _STRING_CMD.get(base, ()):
                string_cmd = val if eq else (words[j + 1] if j + 1 < len(words) else "")
                j += 1 if eq else 2
                if base == "env":
                    break
                continue
            if base == "timeout" and opt in ("-s", "-k") or (opt in takes and not eq):
                j += 2
                continue
            if base == "sudo" and opt in ("-i", "-s", "--login", "--shell"):
                pass
            j += 1
        rest = words[j:]
        if base == "flock" and rest and string_cmd is None:
            k = 1
            while k < len(rest) and rest[k].startswith("-"):
                if rest[k] in ("-c", "--command") and k + 1 < len(rest):
                    string_cmd = rest[k + 1]
                    break
                k += 1
            if string_cmd is None:
                rest = rest[k:]
                npos = 0
        if string_cmd is not None:
            if base == "env":
                rest = _split_words(string_cmd) + rest
            else:
                if not dry:
                    reader.script(string_cmd, box["cwd"])
                return []
        if base == "watch" and rest:
            if not dry:
                reader.script(" ".join(rest), box["cwd"])
            return []
        if base == "xargs":
            rest = rest + [UNKNOWN + "xargs-input"] if rest else ["echo", UNKNOWN + "xargs-input"]
        if base == "flock" or base == "sg" or base == "chroot" or base == "timeout" or base == "faketime" \
                or base == "aws-vault" or base == "direnv" or base == "chrt":
            rest = rest[npos:] if len(rest) > npos else []
        elif base == "taskset":
            rest = rest[1:]  # the mask, or the list after -c
        elif base == "su":
            return []  # su USER without -c starts a login shell
        words = rest
    return words


def _split_words(text: str) -> list[str]:
    toks = tokenize(text)
    r = _Reader(None, MAX_DEPTH)
    return [r.expand(t) for t in toks if isinstance(t, _Word)]


def commands(text: str, *, cwd: str | None = None) -> list[Simple]:
    """The simple commands ``text`` would run, in order (see the module docstring). Never raises."""
    r = _Reader(cwd, 0)
    try:
        r.read(str(text))
    except (Exception, RecursionError) as exc:  # never let a crafted command crash the guard open
        r.out.append(Simple([UNKNOWN + "unreadable"], cwd, opaque=f"the command could not be read ({type(exc).__name__})"))
    return r.out
