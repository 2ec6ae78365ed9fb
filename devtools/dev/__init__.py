"""`make dev`: the controller against the local stack, with a story of sample BuildRuns on a
screen (`python -m devtools.dev.run`)."""
