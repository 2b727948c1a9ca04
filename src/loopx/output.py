"""One data dict, two renderings: the JSON envelope and terminal-safe text (docs/architecture.md#the-cli).

The JSON envelope is always exactly one document on stdout::

    {"schema": 1, "command": "todo add", "ok": true, "exit_code": 0, "data": {...},
     "warnings": [], "error": null}

Text output is rendered from the same data. Everything agent-provided goes through ``safe()`` so
terminal escapes and bidi controls cannot reorder or hide what a human reads, and stdout never
fails on a console that cannot encode a character (it is escaped instead).
"""

from __future__ import annotations

import os
import sys

SCHEMA = 1

# C0/C1 controls (minus tab/newline), bidi embeddings/overrides/isolates, zero-width marks.
_UNSAFE = {c: f"\\u{c:04x}" for c in [*range(0, 9), *range(11, 32), 127, *range(0x80, 0xA0),
                                        0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029,
                                        *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0xFEFF]}
_ONE_LINE = {**_UNSAFE, 10: "\\n", 9: " "}


class Reply:
    """What a handler returns: ``data`` (JSON-able dict), ``exit_code`` (0 or 1 for a clean no),
    ``warnings`` (list of str)."""

    __slots__ = ("data", "exit_code", "warnings")

    def __init__(self, data: dict, exit_code: int = 0, warnings: list[str] | None = None) -> None:
        self.data = data
        self.exit_code = exit_code
        self.warnings = warnings or []


def safe(text, *, one_line: bool = True, limit: int | None = None) -> str:
    """``text`` fit for a terminal: control and bidi characters shown as ``\\uXXXX``, newlines as
    ``\\n`` when ``one_line``; cut to ``limit`` characters with an ellipsis."""
    if text is None:
        return ""
    s = str(text)
    s = s.translate(_ONE_LINE if one_line else _UNSAFE)
    if limit is not None and len(s) > limit:
        s = s[: max(1, limit - 1)] + "…"
    return s


def setup_streams() -> None:
    """Never fail on an encoding: escape what the console cannot show."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a TextIOWrapper's; a replaced stream may lack it
        try:
            if reconfigure is not None:
                reconfigure(errors="backslashreplace")
        except ValueError:
            pass


def _ascii_only(stream) -> bool:
    enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return enc not in ("utf8", "utf8sig")


def colour_enabled(stream=None) -> bool:
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ \
        and os.environ.get("TERM") != "dumb"


class Style:
    """ANSI styles that collapse to plain text when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, s: str) -> str:
        return f"\x1b[{code}m{s}\x1b[0m" if self.enabled else s

    def bold(self, s: str) -> str:
        return self._wrap("1", s)

    def dim(self, s: str) -> str:
        return self._wrap("2", s)

    def red(self, s: str) -> str:
        return self._wrap("31", s)

    def green(self, s: str) -> str:
        return self._wrap("32", s)

    def yellow(self, s: str) -> str:
        return self._wrap("33", s)


class FileSpan:
    """The rest of an open file from ``offset`` on (``size`` bytes): a cached rendering that an answer
    includes as it is (``trial list``'s table, results.tsv or rows' JSON for 10,000 trials: several
    MB), written out without holding it in memory. Holding 4 MB in a ``bytes`` (read whole, then
    joined with what the header line left buffered) cost about 2,000 page faults, a third of such
    a command. Owns ``fd``: closed once written or read, or when the span is dropped unwritten."""

    __slots__ = ("fd", "offset", "size", "last")

    def __init__(self, fd: int, offset: int, size: int, last: bytes) -> None:
        self.fd, self.offset, self.size, self.last = fd, offset, size, last  # last: its final byte (b"" if empty)

    def read(self) -> bytes:
        """The bytes, whole (for a caller that needs them in memory). Raises OSError."""
        try:
            return os.pread(self.fd, self.size, self.offset)
        finally:
            self.close()

    def write_to(self, raw) -> None:
        """Write the bytes to the binary stream ``raw`` (flushed first): ``os.sendfile`` where the
        kernel copies them itself (Linux, to a pipe, file or socket), else 64 KiB at a time.
        Raises OSError (the reader went away, a full disk)."""
        try:
            raw.flush()
            done = 0
            try:
                out = raw.fileno() if hasattr(os, "sendfile") else None
            except (AttributeError, OSError, ValueError):  # a buffer in memory (io.BytesIO): no fd
                out = None
            if out is not None:
                try:
                    while done < self.size:
                        n = os.sendfile(out, self.fd, self.offset + done, self.size - done)
                        if n == 0:
                            break  # the file is shorter than it was: what is there was written
                        done += n
                    return
                except OSError as exc:  # an O_APPEND file, an fd sendfile does not take: copied instead
                    if done or exc.errno not in _NO_SENDFILE:
                        raise
            while done < self.size:
                chunk = os.pread(self.fd, min(1 << 16, self.size - done), self.offset + done)
                if not chunk:
                    break
                raw.write(chunk)
                done += len(chunk)
            raw.flush()
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:  # never written (``--quiet``, a reader gone before it): closed with the answer
        try:
            self.close()
        except OSError:
            pass


_NO_SENDFILE = {22, 38, 95, 29, 9}  # EINVAL, ENOSYS, EOPNOTSUPP, ESPIPE, EBADF: copy it instead


def open_after_line(path: str, limit: int = 256) -> tuple[bytes, FileSpan] | None:
    """``(first line without its newline, the rest of the file as a FileSpan)`` of the regular file
    at ``path`` (a cache loopx wrote: a symlink, a FIFO or a folder there is no cache, and nothing
    waits on it); None when there is none, it cannot be read, or it has no newline in its first
    ``limit`` bytes."""
    try:
        if os.lstat(path).st_mode & 0o170000 != 0o100000:  # checked before it is opened: a FIFO would block
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        start = os.pread(fd, limit, 0) if st.st_mode & 0o170000 == 0o100000 else b""
        line, nl, _ = start.partition(b"\n")
        if not nl:
            os.close(fd)
            return None
        offset = len(line) + 1
        size = st.st_size - offset
        last = os.pread(fd, 1, st.st_size - 1) if size else b""
        return line, FileSpan(fd, offset, size, last)
    except OSError:
        os.close(fd)
        return None


class Spliced:
    """Text made of ``str`` pieces and ``FileSpan``s of UTF-8 text, printed piece by piece
    (``print_text``); ``str()`` joins them in memory."""

    __slots__ = ("parts",)

    def __init__(self, parts: list) -> None:
        self.parts = parts

    def __str__(self) -> str:
        return "".join(p if isinstance(p, str) else p.read().decode("utf-8", "replace") for p in self.parts)

    def ends_with_newline(self) -> bool:
        last = next((p for p in reversed(self.parts) if (p if isinstance(p, str) else p.size)), "")
        return last.endswith("\n") if isinstance(last, str) else last.last == b"\n"


def envelope(command: str, *, data=None, exit_code: int = 0, warnings=None, error: dict | None = None) -> dict:
    return {"schema": SCHEMA, "command": command, "ok": error is None, "exit_code": exit_code,
            "data": data if data is not None else {}, "warnings": list(warnings or []), "error": error}


def encode(obj, ascii: bool) -> str:
    """``obj`` as ``print_json`` writes it (its separators; ``ascii``: no character above 127)."""
    from loopx.kernel.storage.cjson import dumps  # json's own encoder without importing json (and re)

    return dumps(obj, ascii=ascii, default=str, separators=(", ", ": "))


def print_json(doc, stream=None) -> None:
    """Write ``doc`` as one line of JSON. A value of ``doc["data"]`` that carries its own JSON text
    (a ``json`` attribute: a ``FileSpan`` of the UTF-8 bytes of ``encode`` of it, cached by its
    command, as ``trial list`` does for 10,000 rows) is written from that file, not encoded again."""
    stream = stream or sys.stdout
    ascii = _ascii_only(stream)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict):
        data = {}
    known = [k for k, v in data.items() if getattr(v, "json", None) is not None]
    if not known:
        stream.write(encode(doc, ascii) + "\n")
        stream.flush()
        return
    # the first such value encoded as a unique placeholder string, the text around it written as is
    key = known[0]
    text = encode({**doc, "data": {k: f"\0{k}\0" if k == key else v for k, v in data.items()}}, ascii)
    head, tail = text.split(encode(f"\0{key}\0", ascii), 1)
    stream.write(head)
    stream.flush()
    raw = getattr(stream, "buffer", None)
    if raw is not None:
        data[key].json.write_to(raw)
    else:
        stream.write(data[key].json.read().decode("utf-8"))
    stream.write(tail + "\n")
    stream.flush()


def print_text(text, stream=None) -> None:
    """Write ``text`` (a ``str`` or a ``Spliced``) with one newline at its end. A ``Spliced``'s
    files are written as they are where the stream is UTF-8 (their encoding), else decoded and
    written as text (the stream then escapes what it cannot encode)."""
    stream = stream or sys.stdout
    if isinstance(text, Spliced):
        raw = getattr(stream, "buffer", None)
        utf8 = (getattr(stream, "encoding", "") or "").lower().replace("-", "").replace("_", "") == "utf8"
        for part in text.parts:
            if isinstance(part, str):
                stream.write(part)
            elif raw is not None and utf8:
                stream.flush()
                part.write_to(raw)
            else:
                stream.write(part.read().decode("utf-8", "replace"))
        if not text.ends_with_newline():
            stream.write("\n")
    elif text:
        stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()


def print_error(message: str, hint: str | None) -> None:
    sys.stderr.write(f"loopx: error: {safe(message)}\n")
    if hint:
        sys.stderr.write(f"hint: {safe(hint)}\n")
    sys.stderr.flush()


def print_warnings(warnings) -> None:
    for w in warnings:
        sys.stderr.write(f"loopx: warning: {safe(w)}\n")
    sys.stderr.flush()


def table(rows: list[list[str]], header: list[str] | None = None, indent: str = "") -> str:
    """Left-aligned columns; the last column is never padded."""
    all_rows = ([header] if header else []) + rows
    if not all_rows:
        return ""
    widths = [max(len(r[i]) for r in all_rows if i < len(r)) for i in range(max(len(r) for r in all_rows))]
    out = []
    for r in all_rows:
        cells = [c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)]
        out.append(indent + "  ".join(cells).rstrip())
    return "\n".join(out)


def generic(data: dict) -> str:
    """Fallback text rendering: ``key: value`` lines, nested dicts indented."""
    import json

    lines: list[str] = []

    def walk(d, pad):
        for k, v in d.items():
            if isinstance(v, dict):
                lines.append(f"{pad}{k}:")
                walk(v, pad + "  ")
            elif isinstance(v, list):
                lines.append(f"{pad}{k}: " + ", ".join(safe(x) if not isinstance(x, dict) else safe(json.dumps(x)) for x in v))
            else:
                lines.append(f"{pad}{k}: {safe(v)}")

    walk(data, "")
    return "\n".join(lines)
