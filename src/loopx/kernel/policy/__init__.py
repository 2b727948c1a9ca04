"""The policy: the should-run decision and its cache, the turn lifecycle and the turn and review
packets; see docs/architecture.md, "The governed loop"."""
