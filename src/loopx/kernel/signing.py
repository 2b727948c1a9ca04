"""Signed approvals (opt-in): placeholder until signing is configured."""

from __future__ import annotations


def approval_counts(gate: dict) -> bool:
    return True
