"""Compact JSON through the standard library's own C accelerator, without importing ``json``.

Why: the ``json`` package imports ``re`` (its decoder's whitespace pattern), and together they
cost about as much as the interpreter's own start on a small VM; every write of a record needs
JSON. ``_json`` is the module ``json`` itself uses for one-shot encoding and for scanning, so the
output and the accepted input are ``json``'s:

- ``dumps(obj)`` == ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` (the record
  format of ``.loopx/*.jsonl``; ``ascii``, ``sort_keys``, ``default`` and ``separators`` as in
  ``json.dumps``); raises TypeError for a value JSON cannot hold, ValueError for a circular one.
- ``loads(text)`` == ``json.loads(text)`` for ``str`` and for UTF-8 ``bytes``, a leading BOM
  included (UTF-8 is the only encoding loopx writes; bytes with a NUL among their first four,
  which are never JSON in UTF-8, raise ValueError where ``json.loads`` would guess UTF-16/32);
  raises ValueError (``json``'s ``JSONDecodeError`` where the scanner raises it, with a shorter
  message otherwise), RecursionError for absurd nesting.

When ``_json`` is missing (another Python implementation) both fall back to the ``json`` package.
tests/test_cjson.py checks both against ``json`` on generated values and texts.
"""

from __future__ import annotations

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]  # loads() then falls back to the json package

_WS = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}
_scanner = None


def _default(o):
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


class _Context:
    """The attributes ``_json.make_scanner`` reads from a decoder (``json.decoder.JSONDecoder``'s)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict = {}


def dumps(obj, *, ascii: bool = False, sort_keys: bool = False, default=None,
          separators: tuple[str, str] = (",", ":")) -> str:
    """``obj`` as JSON text: ``json.dumps(obj, ensure_ascii=ascii, sort_keys=sort_keys,
    default=default, separators=separators)`` (the defaults give the record format)."""
    if _json is None:
        import json

        return json.dumps(obj, ensure_ascii=ascii, sort_keys=sort_keys, default=default, separators=separators)
    esc = _json.encode_basestring_ascii if ascii else _json.encode_basestring
    if isinstance(obj, str):
        return esc(obj)
    # a fresh encoder per call, as json does: its markers (the circular-reference check) must not
    # keep what an earlier call that raised half-way left in them
    enc = _json.make_encoder({}, default or _default, esc, None, separators[1], separators[0], sort_keys, False, True)
    return "".join(enc(obj, 0))


def loads(text: str | bytes):
    """The value of the JSON document ``text``. Raises ValueError when it is not one."""
    global _scanner
    if _json is None:
        import json

        return json.loads(text)
    if isinstance(text, (bytes, bytearray)):
        # what json.loads does for UTF-8: a leading BOM is dropped (json picks utf-8-sig then;
        # sliced off here, so the utf_8_sig codec is not imported for every line)
        text = bytes(text)
        if text.startswith(b"\xef\xbb\xbf"):
            text = text[3:]
        text = text.decode("utf-8", "surrogatepass")
    elif not isinstance(text, str):
        raise TypeError(f"the JSON object must be str or bytes, not {text.__class__.__name__}")
    if text.startswith("\ufeff"):
        raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
    if _scanner is None:
        _scanner = _json.make_scanner(_Context())  # type: ignore[arg-type]  # a decoder's attributes suffice
    n = len(text)
    i = 0
    while i < n and text[i] in _WS:
        i += 1
    try:
        obj, end = _scanner(text, i)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    except SystemError:
        # the scanner raises json.decoder.JSONDecodeError only when that module is loaded (it looks
        # in sys.modules, it does not import); load it and let json name the error
        import json

        return json.loads(text)
    while end < n and text[end] in _WS:
        end += 1
    if end != n:
        raise ValueError(f"Extra data: char {end}")
    return obj
