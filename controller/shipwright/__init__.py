"""Shipwright's vocabulary that the Build and BuildRun domains share: resources, labels,
the Succeeded condition, parameter checks and the build_* metrics."""
