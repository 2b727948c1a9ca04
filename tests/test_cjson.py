"""loopx.kernel.storage.cjson gives what the json package gives (it skips only json's import)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import subprocess_env
from loopx.kernel.storage import cjson

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(values)
def test_dumps_is_json_dumps_compact(value):
    assert cjson.dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(values)
def test_loads_reads_what_json_reads(value):
    text = json.dumps(value, ensure_ascii=False, indent=1)
    assert cjson.loads(text) == value
    assert cjson.loads(text.encode("utf-8")) == value


def _same_outcome(text):
    try:
        want = ("ok", json.loads(text))
    except ValueError:
        want = ("error",)
    try:
        got = ("ok", cjson.loads(text))
    except ValueError:
        got = ("error",)
    return want, got


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.text(alphabet=' \t\n{}[]",:0123456789.eE+-truefalsnNaIiy\\u', max_size=30))
def test_bad_and_odd_texts_fail_or_pass_as_in_json(text):
    want, got = _same_outcome(text)
    assert want[0] == got[0], (text, want, got)
    if want[0] == "ok" and not (isinstance(want[1], float) and math.isnan(want[1])):
        assert want == got


@pytest.mark.parametrize("text", ["", " ", "{", '{"a":1} x', "[1,]", "\ufeff{}", '"\\ud800"', "NaN", " 1 ", "01"])
def test_edge_texts(text):
    want, got = _same_outcome(text)
    assert want[0] == got[0], (text, want, got)


def test_unserialisable_values_raise_type_error():
    with pytest.raises(TypeError, match="set"):
        cjson.dumps({"a": {1, 2}})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        cjson.dumps(loop)


def test_a_write_imports_neither_json_nor_re():
    code = ("import sys; from loopx.kernel.storage import cjson; "
            "cjson.loads(cjson.dumps({'a': [1, 2.5, None, 'é']})); print('json' in sys.modules, 're' in sys.modules)")
    out = subprocess.run([sys.executable, "-S", "-c", code], env=subprocess_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_bad_json_is_a_value_error_before_json_was_ever_imported():
    # _json's scanner names its errors through json.decoder only when that module is loaded
    code = ("import sys; from loopx.kernel.storage import cjson\n"
            "for t in ['{\"format\": \"x\"', '{', '[1,', '{\"a\" 1}', '\"\\\\x\"']:\n"
            "    try:\n        cjson.loads(t); print('parsed', t)\n"
            "    except ValueError as e:\n        print('ValueError')\n")
    out = subprocess.run([sys.executable, "-S", "-c", code], env=subprocess_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["ValueError"] * 5, (out.stdout, out.stderr)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values, st.booleans(), st.booleans())
def test_dumps_options_are_json_dumps_options(value, ascii, sort_keys):
    # the envelope printer (default separators, default=str) and the fingerprint (sorted keys, ASCII)
    assert cjson.dumps(value, ascii=ascii, sort_keys=sort_keys, default=str, separators=(", ", ": ")) == \
        json.dumps(value, ensure_ascii=ascii, sort_keys=sort_keys, default=str)


def test_default_turns_unknown_values_into_text():
    import datetime

    v = {"when": datetime.date(2026, 12, 1), "n": [1, {2}]}
    assert cjson.dumps(v, default=str) == json.dumps(v, default=str, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("raw", [b'\xef\xbb\xbf{"a": 1}', b"\xef\xbb\xbf [1, 2] ", b"\xef\xbb\xbf", b"\xef\xbb\xbf\xef\xbb\xbf1",
                                 b'"\xef\xbb\xbf"', b"\xff1", b'"\xed\xa0\x80"', b" \t1\r\n"])
def test_utf8_bytes_read_as_json_reads_them(raw):
    # json.loads takes UTF-8 bytes that start with a BOM (a file saved by a Windows editor)
    want, got = _same_outcome(raw)
    assert want == got, (raw, want, got)
