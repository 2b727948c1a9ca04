"""Sending notifications: channels (desktop, webhook) and the outbox that sends queued notices once.

What to send is decided by ``loopx.kernel.read.notices`` from the store; where to send it comes from the
user's config file (``[notify]`` in ``config.toml``, see loopx.config), never from a project."""
