"""The Succeeded condition: the one condition type on which Shipwright's BuildRun and
Tekton's TaskRun and PipelineRun all report their outcome (knative's
apis.ConditionSucceeded, Shipwright's v1beta1 `Succeeded`), and reading it off a status.
"""

from __future__ import annotations

from typing import Any

# The condition's type (a successful BuildRun's reason is spelled the same, which is
# controller.buildrun.reasons.SUCCEEDED).
CONDITION_SUCCEEDED = "Succeeded"


def succeeded_condition(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Succeeded condition of a BuildRun's, TaskRun's or PipelineRun's status (a
    copy), if there is one."""
    for condition in (status or {}).get("conditions") or []:
        if condition.get("type") == CONDITION_SUCCEEDED:
            return dict(condition)
    return None
