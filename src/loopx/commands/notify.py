"""``loopx notify set|test|list``: where loopx tells a person it needs them.

Targets live in the user's config file (``[notify]`` in config.toml, loopx.config), never in a
project, so a repository cannot redirect them. ``notify set`` is a human-only change.
See docs/notifications.md.
"""

from __future__ import annotations

from loopx.commands import actions, add
from loopx.config import config_path, set_user_value
from loopx.errors import StateError, UsageError
from loopx.kernel.humans import require_human
from loopx.kernel.read import notices, validate
from loopx.kernel.storage import clock, ids
from loopx.notify import channels, outbox
from loopx.notify.outbox import user_cfg
from loopx.output import Reply, safe


def register(sub, name, help_text):
    p = add(sub, name, help_text, example="loopx notify list")
    acts = actions(p)
    s = add(acts, "set", "configure notification channels in the user config (humans only)", handler=notify_set,
            render=render_set, command="notify set",
            example="loopx notify set --webhook https://ntfy.sh/my-topic --preset ntfy --desktop on")
    s.add_argument("--webhook", metavar="URL", help="POST a small JSON body here (http:// or https://)")
    s.add_argument("--preset", choices=["json", "ntfy", "slack", "discord"], help="body format (default json)")
    s.add_argument("--template", metavar="JSON",
                   help="custom body; {title} {body} {goal} {reason} {event_id} {project} {ts} {type} are filled in")
    s.add_argument("--desktop", choices=["on", "off"], help="the desktop's own notifications")
    s.add_argument("--no-webhook", action="store_true", help="remove the webhook")
    t = add(acts, "test", "send a test notification to every configured channel", handler=notify_test,
            render=render_test, command="notify test", example="loopx notify test")
    t.set_defaults()
    lst = add(acts, "list", "the configured channels and this project's recent notifications",
              handler=notify_list, render=render_list, command="notify list", example="loopx notify list")
    lst.add_argument("--limit", default=20, metavar="N", help="notifications to show (default 20)")
    sd = add(acts, "send", "send queued notifications now (should-run and loopx run also do)",
             handler=notify_send, render=render_send, command="notify send", example="loopx notify send")
    sd.set_defaults()


def _public(cfg: dict) -> dict:
    hook = cfg.get("webhook")
    if not isinstance(hook, dict):
        hook = {}
    return {"channels": channels.configured(cfg), "desktop": cfg.get("desktop") is True,
            "webhook": {"url": hook.get("url"), "preset": hook.get("preset") or "json",
                        "template": hook.get("template")} if hook.get("url") else None,
            "since": cfg.get("since")}


def notify_set(ctx, webhook=None, preset=None, template=None, desktop=None, no_webhook=False) -> dict:
    require_human(ctx, "changing notification targets")
    if webhook is None and preset is None and template is None and desktop is None and not no_webhook:
        raise UsageError("nothing to set", "pass --webhook URL, --preset, --template, --desktop on|off or --no-webhook")
    if webhook is not None:
        webhook = validate.text(webhook, "--webhook", limit=2000)
        if not webhook.startswith(("http://", "https://")) or any(c.isspace() for c in webhook):
            raise UsageError(f"--webhook {webhook!r} is not an http(s) URL", "e.g. --webhook https://ntfy.sh/my-topic")
    if template is not None:
        template = validate.text(template, "--template", limit=4000)
    cfg = user_cfg()
    if no_webhook:
        set_user_value("notify.webhook", None)
    if webhook is not None:
        set_user_value("notify.webhook.url", webhook)
    if preset is not None:
        set_user_value("notify.webhook.preset", preset)
    if template is not None:
        set_user_value("notify.webhook.template", template)
    if desktop is not None:
        set_user_value("notify.desktop", desktop == "on")
    if not cfg.get("since"):  # events from before notifications were set up are never sent
        set_user_value("notify.since", clock.now_iso())
    return dict(_public(user_cfg()), config=config_path())


def render_set(d: dict) -> str:
    chans = ", ".join(d["channels"]) or "none"
    lines = [f"notification channels: {chans}  (in {safe(d['config'])})"]
    if d["webhook"]:
        lines.append(f"  webhook: {safe(d['webhook']['url'])} ({d['webhook']['preset']})")
    lines.append("try it: loopx notify test")
    return "\n".join(lines)


def notify_test(ctx):
    cfg = user_cfg()
    chans = channels.configured(cfg)
    notice = {"event_id": ids.event_id(), "type": "notify.test", "goal": None, "ts": clock.now_iso(),
              "title": "loopx: test notification", "body": "notifications from loopx reach you here",
              "reason": "test"}
    results = [dict(channels.send(ch, cfg, notice, "loopx"), channel=ch) for ch in chans]
    ok = bool(results) and all(r["ok"] for r in results)
    return Reply({"results": results, "channels": chans}, 0 if ok else 1)


def render_test(d: dict) -> str:
    if not d["channels"]:
        return "no notification channel configured (`loopx notify set --webhook URL` or `--desktop on`)"
    return "\n".join(f"{r['channel']}: {'ok' if r['ok'] else 'FAILED'} ({safe(r['detail'])})" for r in d["results"])


def notify_list(ctx, limit=20) -> dict:
    n = validate.count(limit, "--limit", low=1, high=200)
    out = _public(user_cfg())
    try:
        state = ctx.store().load()
    except StateError:
        state = None
    out["notifications"] = notices.recent(state, n) if state else []
    out["project"] = state is not None
    return out


def render_list(d: dict) -> str:
    lines = [f"channels: {', '.join(d['channels']) or 'none (loopx notify set ...)'}"]
    if d["webhook"]:
        lines.append(f"  webhook: {safe(d['webhook']['url'])} ({d['webhook']['preset']})")
    if d["desktop"]:
        lines.append("  desktop: on")
    for n in d["notifications"]:
        states = ", ".join(f"{ch} {v['status']}" + (f" (retry {v['retry_at']})" if v.get("retry_at") and
                                                      v["status"] == "failed" else "")
                           for ch, v in n["deliveries"].items()) or "queued"
        lines.append(f"{n['ts']}  {safe(n['title'], limit=70)}  [{states}]")
    if d["project"] and not d["notifications"]:
        lines.append("no notifications in this project yet")
    return "\n".join(lines)


def notify_send(ctx) -> dict:
    res = outbox.flush(ctx.store())
    return {"sent": len(res["sent"]), "failed": len(res["failed"]), "busy": res["busy"], "channels": res["channels"],
            "details": res["sent"] + res["failed"]}


def render_send(d: dict) -> str:
    if d["busy"]:
        return "another loopx process is sending notifications"
    return f"sent {d['sent']}, failed {d['failed']} (channels: {', '.join(d['channels']) or 'none'})"
