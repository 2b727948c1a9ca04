"""kernel.read: see docs/architecture.md (layers)."""
