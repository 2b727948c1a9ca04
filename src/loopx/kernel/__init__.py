"""The kernel: a library of operations over one project's store, shared by every client (the CLI, the hooks,
the runner, the dashboard and ``loopx.api``); see docs/architecture.md, "Layers"."""
