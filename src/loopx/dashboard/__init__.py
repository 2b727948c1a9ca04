"""The local dashboard: an HTTP server on 127.0.0.1, the page data from the kernel's read model, and
the service that runs one server per user (docs/architecture.md#the-dashboard; docs/dashboard.md).

``server`` is the HTTP server (standard library ``ThreadingHTTPServer``) with its security rules,
``api`` assembles the JSON the pages show from the same kernel queries as ``loopx status``,
``service`` starts, reuses, upgrades and stops the background server, and ``static/`` is the
PWA shell shipped as package data.
"""
