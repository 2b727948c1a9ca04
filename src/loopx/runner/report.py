"""What a host's headless output says about the turn: tokens, cost, model, session, errors.

``parse(report, text) -> dict``::

    {"usage": {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens" (int|None),
               "cost_usd" (float|None), "model" (str|None), "session_id" (str|None),
               "num_turns" (int|None), "total_tokens" (int|None: the four counts added),
               "source" (the report name)} | None,
     "is_error": bool,            # the host said the turn failed (a JSON error field)
     "error": str|None,           # the host's own error message
     "text": str|None,            # the host's final answer, when it gives one
     "malformed": bool}           # output of a reporting preset that could not be read

``usage`` None means "usage unknown" (never 0): the host reports nothing, or its output could not be
read. Token counts are normalised: ``input_tokens`` excludes cached input (Codex reports cached
input inside ``input_tokens``; it is moved to ``cache_read_tokens``). Shapes verified against the
real CLIs are listed in docs/usage.md. Never raises.
"""

from __future__ import annotations

import json


def _int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def _str(v) -> str | None:
    return v[:200] if isinstance(v, str) and v else None


def _usage(source: str, **fields) -> dict | None:
    keys = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd")
    u = {k: fields.get(k) for k in keys}
    if all(u[k] is None for k in keys):
        return None
    u.update(model=fields.get("model"), session_id=fields.get("session_id"), num_turns=fields.get("num_turns"),
             source=source)
    return u


def _json_objects(text: str) -> list[dict]:
    """Every line of ``text`` that is a JSON object (JSONL), or the one object the text holds."""
    out = []
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
            if isinstance(obj, dict):
                return [obj]
        except ValueError:
            pass
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _dict(value) -> dict:
    """``value`` when it is a JSON object, else an empty one (a host's report is untrusted)."""
    return value if isinstance(value, dict) else {}


def _last_object(text: str) -> dict | None:
    """The last JSON object in ``text``: the whole text, else the last line, else the last ``{``
    at the start of a line through the end (pretty-printed output after log lines)."""
    objs = _json_objects(text)
    if objs:
        return objs[-1]
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("{"):
            try:
                obj = json.loads("\n".join(lines[i:]))
            except ValueError:
                continue
            return obj if isinstance(obj, dict) else None
    return None


def _result(usage=None, is_error=False, error=None, text=None, malformed=False) -> dict:
    return {"usage": usage, "is_error": bool(is_error), "error": error, "text": text, "malformed": malformed}


def claude_json(text: str) -> dict:
    """``claude -p --output-format json``: one result object (cursor-agent uses the same shape)."""
    obj = _last_object(text)
    if obj is None or obj.get("type") not in ("result", None) or "is_error" not in obj and "result" not in obj:
        return _result(malformed=True)
    u = _dict(obj.get("usage"))
    model = None
    mu = obj.get("modelUsage")
    if isinstance(mu, dict) and mu:
        model = max(mu, key=lambda k: (mu[k] or {}).get("costUSD", 0) if isinstance(mu[k], dict) else 0)
    usage = _usage("claude-json", input_tokens=_int(u.get("input_tokens")), output_tokens=_int(u.get("output_tokens")),
                   cache_read_tokens=_int(u.get("cache_read_input_tokens")),
                   cache_write_tokens=_int(u.get("cache_creation_input_tokens")),
                   cost_usd=_num(obj.get("total_cost_usd")), model=_str(model) or _str(obj.get("model")),
                   session_id=_str(obj.get("session_id")), num_turns=_int(obj.get("num_turns")))
    is_error = bool(obj.get("is_error")) or str(obj.get("subtype") or "").startswith("error")
    res = obj.get("result") if isinstance(obj.get("result"), str) else None
    return _result(usage, is_error, (res or obj.get("subtype")) if is_error else None, res)


def cursor_json(text: str) -> dict:
    """``cursor-agent -p --output-format json``: Claude's result shape; usage only when present."""
    out = claude_json(text)
    if out["usage"]:
        out["usage"]["source"] = "cursor-json"
    return out


def codex_jsonl(text: str) -> dict:
    """``codex exec --json``: JSONL events; usage in ``turn.completed``, errors in ``error`` /
    ``turn.failed``; the session id in ``thread.started``."""
    objs = _json_objects(text)
    if not objs:
        return _result(malformed=True)
    tin = tout = tcached = None
    session = error = model = None
    failed = completed = False
    for o in objs:
        t = o.get("type")
        if t == "thread.started":
            session = _str(o.get("thread_id")) or session
        elif t == "turn.completed":
            completed = True
            u = _dict(o.get("usage"))
            for name, val in (("in", u.get("input_tokens")), ("out", u.get("output_tokens")),
                              ("cached", u.get("cached_input_tokens"))):
                v = _int(val)
                if v is None:
                    continue
                if name == "in":
                    tin = (tin or 0) + v
                elif name == "out":
                    tout = (tout or 0) + v
                else:
                    tcached = (tcached or 0) + v
            model = _str(o.get("model")) or model
        elif t == "turn.failed":
            failed = True
            err = o.get("error")
            error = _str(err.get("message")) if isinstance(err, dict) else _str(err) or error
        elif t == "error":
            error = _str(o.get("message")) or error
    if tin is not None and tcached is not None:
        tin = max(0, tin - tcached)
    usage = _usage("codex-jsonl", input_tokens=tin, output_tokens=tout, cache_read_tokens=tcached,
                   model=model, session_id=session) if completed else None
    return _result(usage, failed or (error is not None and not completed), error, None)


def gemini_json(text: str) -> dict:
    """``gemini -p --output-format json``: ``{"response", "stats": {"models": {name: {"tokens":
    {"prompt", "candidates", "cached", "thoughts", "tool", "total"}}}}, "error": {...}, "session_id"}``."""
    obj = _last_object(text)
    if obj is None or not ({"response", "stats", "error"} & set(obj)):
        return _result(malformed=True)
    err = obj.get("error") if isinstance(obj.get("error"), dict) else None
    tin = tout = tcached = None
    model = None
    models = (obj.get("stats") or {}).get("models") if isinstance(obj.get("stats"), dict) else None
    if isinstance(models, dict):
        best = -1
        for name, m in models.items():
            tok = (m or {}).get("tokens") if isinstance(m, dict) else None
            if not isinstance(tok, dict):
                continue
            p, c, ca = _int(tok.get("prompt")), _int(tok.get("candidates")), _int(tok.get("cached"))
            th = _int(tok.get("thoughts")) or 0
            if p is not None:
                tin = (tin or 0) + p
            if c is not None:
                tout = (tout or 0) + c + th
            if ca is not None:
                tcached = (tcached or 0) + ca
            if (_int(tok.get("total")) or 0) > best:
                best, model = _int(tok.get("total")) or 0, name
    if tin is not None and tcached is not None:
        tin = max(0, tin - tcached)
    usage = _usage("gemini-json", input_tokens=tin, output_tokens=tout, cache_read_tokens=tcached,
                   model=_str(model), session_id=_str(obj.get("session_id")))
    resp = obj.get("response") if isinstance(obj.get("response"), str) else None
    return _result(usage, err is not None, _str(err.get("message")) if err else None, resp)


def opencode_jsonl(text: str) -> dict:
    """``opencode run --format json``: JSONL events; each ``step_finish`` part carries ``tokens``
    (input, output, reasoning, cache.read, cache.write) and ``cost``; errors come as ``error``.
    A cost of 0 with tokens is a model without a price: cost unknown. The preset names the session
    (``--title``), so opencode makes no title request, whose usage no event reports."""
    objs = _json_objects(text)
    if not objs:
        return _result(malformed=True)
    vals: dict = {}
    session = error = None
    for o in objs:
        session = _str(o.get("sessionID")) or session
        part = _dict(o.get("part"))
        if o.get("type") == "error":
            e = o.get("error")
            error = _str((e.get("data") or {}).get("message") if isinstance(e, dict) and isinstance(e.get("data"), dict)
                         else (e.get("message") if isinstance(e, dict) else e)) or "error"
        if o.get("type") != "step_finish" and part.get("type") != "step-finish":
            continue
        tok = _dict(part.get("tokens"))
        cache = _dict(tok.get("cache"))
        for key, v in (("input_tokens", tok.get("input")), ("output_tokens", tok.get("output")),
                       ("cache_read_tokens", cache.get("read")), ("cache_write_tokens", cache.get("write")),
                       ("cost_usd", part.get("cost"))):
            n = _num(v)
            if n is not None:
                vals[key] = vals.get(key, 0) + n
        r = _int(tok.get("reasoning"))
        if r:
            vals["output_tokens"] = vals.get("output_tokens", 0) + r
    for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        if k in vals:
            vals[k] = int(vals[k])
    if vals.get("cost_usd") == 0 and (vals.get("input_tokens") or vals.get("output_tokens")):
        del vals["cost_usd"]  # opencode prices a model without a price at 0: that is unknown, not free
    usage = _usage("opencode-jsonl", session_id=session, **vals)
    return _result(usage, error is not None, error, None)


def pi_jsonl(text: str) -> dict:
    """``pi --mode json``: JSONL events; assistant messages carry ``usage`` (input, output,
    cacheRead, cacheWrite, cost.total). Read when the hosts' preset uses that mode."""
    objs = _json_objects(text)
    if not objs:
        return _result(malformed=True)
    vals: dict = {}
    model = None
    error = None  # the host's own words when its last model call failed (issue 23: classified from them)
    for o in objs:
        msg = o.get("message") if isinstance(o.get("message"), dict) else None
        if o.get("type") == "auto_retry_end" and o.get("success") is False:
            error = _str(o.get("finalError")) or error
        if o.get("type") != "message_end" or not msg or not isinstance(msg.get("usage"), dict):
            continue
        if msg.get("role") == "assistant":
            error = _str(msg.get("errorMessage")) if msg.get("stopReason") == "error" else None
        u = msg["usage"]
        cost = u.get("cost").get("total") if isinstance(u.get("cost"), dict) else None
        for key, v in (("input_tokens", u.get("input")), ("output_tokens", u.get("output")),
                       ("cache_read_tokens", u.get("cacheRead")), ("cache_write_tokens", u.get("cacheWrite")),
                       ("cost_usd", cost)):
            n = _num(v)
            if n is not None:
                vals[key] = vals.get(key, 0) + n
        model = _str(msg.get("model")) or model
    for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        if k in vals:
            vals[k] = int(vals[k])
    if vals.get("cost_usd") == 0 and (vals.get("input_tokens") or vals.get("output_tokens")):
        del vals["cost_usd"]  # pi prices a model it has no price for at 0: that is unknown, not free
    if not any(vals.get(k) for k in ("input_tokens", "output_tokens")):
        vals = {}
    return _result(_usage("pi-jsonl", model=model, **vals), error is not None, error)


PARSERS = {"claude-json": claude_json, "codex-jsonl": codex_jsonl, "cursor-json": cursor_json,
           "gemini-json": gemini_json, "opencode-jsonl": opencode_jsonl, "pi-jsonl": pi_jsonl}


def parse(report: str | None, text: str) -> dict:
    """The turn report of ``text`` read as ``report`` (see the module docstring); ``report`` None
    (a custom command or a host that reports nothing) gives usage unknown."""
    fn = PARSERS.get(report or "")
    if fn is None:
        return _result()
    try:
        out = fn(text or "")
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError):
        return _result(malformed=True)
    if out["usage"]:
        out["usage"]["total_tokens"] = tokens_total(out["usage"])
    return out


def tokens_total(usage: dict | None) -> int | None:
    """All tokens the host processed for the turn (input + output + cache read + cache write), or
    None when unknown."""
    if not usage:
        return None
    parts = [usage.get(k) for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")]
    if all(p is None for p in parts):
        return None
    return int(sum(p or 0 for p in parts))
