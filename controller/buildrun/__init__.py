"""BuildRun reconciliation."""
