"""Soaks of the BuildRun controller: the fault soak (`python -m soak.run --help`: what it
runs in plan.py, the run in run.py, its verdict in judge.py) and the truth soak (`python
-m soak.truth --help`: its builds in builds.py, its verdict in ledger.py).

Deliberately separate from the controller's own machinery where it checks the
controller: the soak follows BuildRuns with its own list+watch (soak.watch),
so a bug in controller.runtime.informers cannot hide a bug it would cause.
"""
