"""Reading metrics from a measure command's output (issue 20).

``read(output, metric, pattern=None) -> {"metrics": {name: float}, "value": float | None,
"source": "pattern"|"json"|"lines"|None}``:

- with ``pattern`` (``--metric-pattern REGEX``): the last match decides; the named group
  ``value`` (or else the first group, else the whole match) is the value of ``metric``;
- else a JSON object on the last non-empty line: every number in it is a metric
  (``{"val_acc": 0.91, "loss": 0.3}``);
- else ``NAME: value`` and ``NAME=value`` lines (``val_acc: 0.91``, ``loss=0.3``); a name seen
  twice keeps its last value.

Only finite numbers count (``nan``/``inf`` are not metrics). ``value`` is None when the deciding
metric was not found; the caller records that as a crash. Raises UsageError for a pattern that
does not compile (``check_pattern`` at start-goal).
"""

from __future__ import annotations

import re

from loopx.errors import FieldError
from loopx.kernel.storage import cjson

MAX_METRICS = 50
_LINE = r"^\s*([A-Za-z_][A-Za-z0-9_.\-/]{0,63})\s*[:=]\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def check_pattern(pattern: str | None) -> str | None:
    """``pattern`` when it compiles, else UsageError (exit 2)."""
    if pattern is None:
        return None

    try:
        re.compile(pattern, re.M)
    except re.error as exc:
        raise FieldError("metric_pattern", f"{{field}} does not compile: {exc}",
                         r"write a regular expression with a group, e.g. 'accuracy (?P<value>[0-9.]+)'",
                         code="bad_metric_pattern") from None
    return pattern


def read(output: str, metric: str, pattern: str | None = None) -> dict:
    text = output or ""
    metrics: dict[str, float] = {}
    source = None
    if pattern:
        found = list(re.finditer(pattern, text, re.M))
        if found:
            m = found[-1]
            raw = m.groupdict().get("value") if "value" in m.re.groupindex else (m.group(1) if m.re.groups else m.group(0))
            try:
                v = _num(float(raw)) if raw is not None else None  # a group that did not take part
            except (TypeError, ValueError):
                v = None
            if v is not None:
                metrics[metric] = v
                source = "pattern"
        return {"metrics": metrics, "value": metrics.get(metric), "source": source}
    lines = [x for x in text.splitlines() if x.strip()]
    if lines and lines[-1].lstrip().startswith("{"):
        try:
            obj = cjson.loads(lines[-1].strip())
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            for k, v in obj.items():
                n = _num(v)
                if n is not None and isinstance(k, str) and len(metrics) < MAX_METRICS:
                    metrics[k[:64]] = n
            if metrics:
                source = "json"
    if not metrics:
        for name, raw in re.findall(_LINE, text, re.M):
            v = _num(float(raw))
            if v is not None and (name in metrics or len(metrics) < MAX_METRICS):
                metrics[name] = v
        source = "lines" if metrics else None
    return {"metrics": metrics, "value": metrics.get(metric), "source": source}


def parse_claims(items) -> dict:
    """``["val_acc=0.95", "loss: 0.2"]`` (what an agent claims) -> {name: float}. UsageError on a bad item."""
    out: dict[str, float] = {}
    for item in items or ():
        text = str(item)
        sep = "=" if "=" in text else ":"
        name, ok, raw = text.partition(sep)
        try:
            v = _num(float(raw.strip())) if ok else None
        except ValueError:
            v = None
        if not name.strip() or v is None:
            raise FieldError("claim", "bad claim " + repr(text), "write NAME=VALUE, e.g. {field} val_acc=0.93", code="bad_claim")
        out[name.strip()[:64]] = v
    return out
