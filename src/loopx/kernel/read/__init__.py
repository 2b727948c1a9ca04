"""The read model: every number a client shows (budget, holdings, readiness, schedule, status) is
computed here from a folded state, and nowhere else."""
