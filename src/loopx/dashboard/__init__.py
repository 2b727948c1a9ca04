"""The local dashboard (docs/architecture.md#the-dashboard; docs/dashboard.md).

``server`` is the HTTP server (standard library ``ThreadingHTTPServer``) with its security rules,
``api`` assembles the JSON the pages show from the same kernel queries as ``loopx status``,
``service`` starts, reuses, upgrades and stops the background server, and ``static/`` is the
PWA shell shipped as package data.
"""
