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
# Written by the controller on a Build with a serial run policy: the BuildRun that holds
# the Build's turn to run, "NAME/UID" (serial.py). A serial BuildRun takes it, by a merge
# patch carrying the resourceVersion read (409 Conflict to a concurrent writer, across
# replicas), before it creates its run, and holds it until it has finished; the last
# holder stays named after it ends (freeing it would cost a second write per run).
SERIAL_TURN = PREFIX + "serial-turn"
# Issue 43, infrastructure retries (retries.py): on a BuildRun, or on its Build, how many
# times a run that failed for the infrastructure (its pod evicted or deleted under it, its
# node lost, an image pull that timed out) is run again; "0" is off. Wins over the flag
# --infrastructure-retries; the BuildRun's over the Build's.
INFRASTRUCTURE_RETRIES = PREFIX + "infrastructure-retries"
# The record the controller writes on the BuildRun: a JSON list, one entry per attempt that
# failed for the infrastructure ({"taskRun": name, "reason": ..., "message": ..., "time":
# ...}), written before the next attempt's run is created.
INFRASTRUCTURE_ATTEMPTS = PREFIX + "infrastructure-attempts"
# How long a BuildRun may wait for its TaskRun to run (from the TaskRun's creation until
# Tekton reports it Running) before it ends BuildRunPendingTimeout, the run cancelled: a
# duration as spec.timeout is written ("10m", "1h30m"; "0s" for none). On a BuildRun, or
# on its Build for all its BuildRuns; the BuildRun's wins, and either wins over
# --pending-timeout. A value that is no duration fails the BuildRun InvalidPendingTimeout
# before it starts (README, "Why a build waits").
PENDING_TIMEOUT = PREFIX + "pending-timeout"
