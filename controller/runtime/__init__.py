"""The generic controller runtime: API access, informers, caches, the worker loop and
its result handling, leader election, Events, probes and metrics.

Nothing here knows about Builds or BuildRuns; `controller.buildrun` builds on it, and a
test (tests/unit/test_layering.py) keeps it that way.
"""
