"""Shipwright's build-limit cleanup: a Build's `spec.retention.succeededLimit` and
`failedLimit` bound how many of its finished BuildRuns are kept."""
