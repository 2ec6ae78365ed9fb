"""The Succeeded condition: the one condition type on which Shipwright's BuildRun and
Tekton's TaskRun and PipelineRun all report their outcome (knative's
apis.ConditionSucceeded, Shipwright's v1beta1 `Succeeded`), and reading it off a status.
"""

from __future__ import annotations

from typing import Any

from controller.runtime.shapes import mapping, objects

# The condition's type (a successful BuildRun's reason is spelled the same, which is
# controller.buildrun.reasons.SUCCEEDED).
CONDITION_SUCCEEDED = "Succeeded"


def succeeded_condition(status: object) -> dict[str, Any] | None:
    """The Succeeded condition of a BuildRun's, TaskRun's or PipelineRun's status (a
    copy), if there is one. Total: a status or a list of conditions that is not what it
    should be (Tekton's status is schemaless) holds none."""
    for condition in objects(mapping(status).get("conditions")):
        if condition.get("type") == CONDITION_SUCCEEDED:
            return dict(condition)
    return None
