"""kernel.policy: see docs/architecture.md (layers)."""
