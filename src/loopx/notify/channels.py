"""Notification channels: the desktop and a webhook (generic JSON, ntfy, Slack- and Discord-compatible).

``send(channel, cfg, notice, project) -> {"ok": bool, "skipped": bool, "detail": str}``; never raises
for delivery problems (a refused connection, a timeout, an HTTP error, a missing desktop tool).
``notice`` is ``{event_id, type, goal, ts, title, body, reason}`` (loopx.kernel.read.notices); every text
is redacted before it leaves the machine.
"""

from __future__ import annotations

import json  # not at import: should-run asks ``configured`` after every decision
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

from loopx.kernel.storage.redact import redact_text

PRESETS = ("json", "ntfy", "slack", "discord")
ACTION_FIELDS = ("project_path", "goal_objective", "gate_id", "question", "command", "reject_command", "link")
TIMEOUT = 5.0          # seconds per webhook attempt
DESKTOP_TIMEOUT = 10.0


def configured(cfg: dict) -> list[str]:
    """The channels ``cfg`` (the ``[notify]`` table) turns on, in sending order."""
    out = []
    if isinstance(cfg.get("webhook"), dict) and cfg["webhook"].get("url"):
        out.append("webhook")
    if cfg.get("desktop") is True:
        out.append("desktop")
    return out


def _fields(notice: dict, project: str) -> dict:
    out = {"event_id": notice.get("event_id"), "type": notice.get("type"), "goal": notice.get("goal"),
           "reason": notice.get("reason"), "ts": notice.get("ts"), "project": notice.get("project") or project,
           "title": redact_text(str(notice.get("title") or ""))[:200],
           "body": redact_text(str(notice.get("body") or ""))[:1500]}
    for k in ACTION_FIELDS:  # loopx.notify.actions: how to act on it
        if notice.get(k) is not None:
            out[k] = redact_text(str(notice[k]))[:1000]
    return out


def webhook_request(wcfg: dict, notice: dict, project: str) -> tuple[bytes, dict]:
    """(body, headers) for the webhook, from its ``preset`` or ``template``."""
    f = _fields(notice, project)
    preset = wcfg.get("preset") or "json"
    headers = {"User-Agent": "loopx-notify", "X-Loopx-Event": str(f["event_id"])}
    template = wcfg.get("template")
    if template:
        body = str(template)
        for k in ACTION_FIELDS:  # a notice that is not a gate has no command or link: empty, not "{link}"
            f.setdefault(k, None)
        for k, v in f.items():
            body = body.replace("{" + k + "}", json.dumps("" if v is None else str(v))[1:-1])
        headers["Content-Type"] = "application/json"
        return body.encode("utf-8"), headers
    if preset == "ntfy":
        headers["Content-Type"] = "text/plain; charset=utf-8"
        headers["Title"] = f["title"].encode("ascii", "replace").decode()
        headers["Tags"] = "loopx"
        return f["body"].encode("utf-8"), headers
    if preset == "slack":
        payload: dict = {"text": f"*{f['title']}*\n{f['body']}"}
    elif preset == "discord":
        payload = {"content": f"**{f['title']}**\n{f['body']}"[:2000]}
    else:
        payload = f
    headers["Content-Type"] = "application/json"
    return json.dumps(payload, ensure_ascii=False).encode("utf-8"), headers


def send_webhook(wcfg: dict, notice: dict, project: str) -> dict:
    url = str(wcfg.get("url") or "")
    if not url.startswith(("http://", "https://")):
        return {"ok": False, "skipped": False, "detail": "the webhook URL must start with http:// or https://"}
    body, headers = webhook_request(wcfg, notice, project)
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:  # noqa: S310 - the user's own URL
            return {"ok": True, "skipped": False, "detail": f"HTTP {resp.status}"}
    except urllib.error.HTTPError as exc:
        return {"ok": False, "skipped": False, "detail": f"HTTP {exc.code}"}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"ok": False, "skipped": False, "detail": f"cannot reach the webhook: {reason}"[:200]}


def desktop_command(title: str, body: str) -> list[str] | None:
    """The platform's own notification command, or None when it has none installed."""
    if sys.platform == "darwin":
        if not shutil.which("osascript"):
            return None
        script = f"display notification {json.dumps(body)} with title {json.dumps(title)}"
        return ["osascript", "-e", script]
    if os.name == "nt":  # pragma: no cover - Windows
        ps = shutil.which("powershell") or shutil.which("pwsh")
        if not ps:
            return None
        t, b = (s.replace("'", "''") for s in (title, body))
        script = ("[Windows.UI.Notifications.ToastNotificationManager, Windows.UI.Notifications, ContentType=WindowsRuntime] > $null;"
                  "$x=[Windows.UI.Notifications.ToastNotificationManager]::GetTemplateContent([Windows.UI.Notifications.ToastTemplateType]::ToastText02);"
                  f"$n=$x.GetElementsByTagName('text');$n.Item(0).InnerText='{t}';$n.Item(1).InnerText='{b}';"
                  "[Windows.UI.Notifications.ToastNotificationManager]::CreateToastNotifier('loopx').Show([Windows.UI.Notifications.ToastNotification]::new($x))")
        return [ps, "-NoProfile", "-Command", script]
    tool = shutil.which("notify-send")
    return [tool, "--app-name=loopx", title, body] if tool else None


def send_desktop(notice: dict, project: str) -> dict:
    f = _fields(notice, project)
    cmd = desktop_command(f["title"], f"{f['body']} ({project})")
    if cmd is None:
        return {"ok": True, "skipped": True, "detail": "no desktop notification tool here (skipped)"}
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=DESKTOP_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "skipped": False, "detail": f"desktop notification failed: {exc}"[:200]}
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()[:150]
        return {"ok": False, "skipped": False, "detail": f"desktop notification failed (exit {proc.returncode}): {err}"}
    return {"ok": True, "skipped": False, "detail": "shown"}


def send(channel: str, cfg: dict, notice: dict, project: str) -> dict:
    if channel == "webhook":
        return send_webhook(cfg.get("webhook") or {}, notice, project)
    return send_desktop(notice, project)
