"""Shipwright's vocabulary that the Build and BuildRun domains share: resources, labels,
parameter checks and the build_* metrics."""
