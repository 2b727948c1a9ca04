"""The store under ``.loopx/``: the append-only logs, their bytes and their lock, the pure reducers, ids,
the clock, redaction and actors; see docs/architecture.md, "The store"."""
