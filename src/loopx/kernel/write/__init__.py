"""kernel.write: see docs/architecture.md (layers)."""
