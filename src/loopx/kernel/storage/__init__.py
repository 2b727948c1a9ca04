"""kernel.storage: see docs/architecture.md (layers)."""
