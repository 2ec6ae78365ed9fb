"""Tools for tests and local runs: a real local API server and a Tekton stand-in.

Nothing in the controller's production path imports this package.
"""
