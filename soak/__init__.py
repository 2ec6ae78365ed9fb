"""Fault soak for the BuildRun controller: `python -m soak.run --help`.

Deliberately separate from the controller's own machinery where it checks the
controller: the soak follows BuildRuns with its own list+watch (soak.watch),
so a bug in controller.runtime.informers cannot hide a bug it would cause.
"""
