"""The field managers Shipwright v0.20.13's controllers write as, spelled as Shipwright
spells them, so that a cluster's managedFields read the same whichever controller wrote
(its integration suite looks for two of them by name).

Each controller's client writes as one (controller-runtime's client.WithFieldOwner, which
sends `fieldManager`: setup.py wraps the controller's Kube with `with_field_manager`).
"""

from __future__ import annotations

# pkg/reconciler/buildrun/buildrun.go: every write of the BuildRun reconciler (its status,
# its labels and owner, the TaskRun or PipelineRun it creates, the generated
# ServiceAccount).
BUILDRUN_CONTROLLER = "shipwright-buildrun-controller"
# pkg/reconciler/build/build.go: the Build's status and the owner references it sets on
# the Build's BuildRuns. Also the server-side apply that cancels a TaskRun or PipelineRun
# (imagebuildrunner.go and pipelinerun_runner.go, Cancel: client.FieldOwner with
# ForceOwnership), and what the API server makes of the User-Agent of Shipwright's binary
# (cmd/shipwright-build-controller) for a write that names none: its events and leases.
BUILD_CONTROLLER = "shipwright-build-controller"
