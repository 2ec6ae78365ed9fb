"""The annotations this controller reads and writes beyond Shipwright's API.

Everything this controller does that Shipwright v0.20.13 does not is asked for by a
flag, an environment variable or one of these annotations, never by a field: a field
Shipwright's CRD schema does not have would make the object invalid for Shipwright, and
a cluster switched back to Shipwright must keep every Build and BuildRun. Shipwright
ignores annotations it does not know, so these cost a switch-back nothing.

The prefix is our own, not `shipwright.io`'s: the keys are this controller's API, and a
future Shipwright feature under its own domain cannot collide with them.
"""

from __future__ import annotations

PREFIX = "buildrun-controller.dev/"

# On a Build: its run policy, Serial or SerialLatestOnly (or Parallel, as without it): one
# BuildRun of the Build runs at a time, in the order of creation (serial.py).
RUN_POLICY = PREFIX + "run-policy"
