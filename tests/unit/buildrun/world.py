"""What the BuildRun controller's unit tests on FakeKube share: the namespace they run in
and the TaskRun status Tekton writes (test_actions.py's rows, test_interleavings.py's
state machine)."""

from __future__ import annotations

from controller.buildrun.resources.results import RESULT_IMAGE_DIGEST
from controller.runtime.kube import JSON, SERVICEACCOUNTS
from controller.shipwright.conditions import CONDITION_SUCCEEDED
from controller.shipwright.resources import BUILDS, BUILDSTRATEGIES
from devtools.cluster import fixtures
from tests.fakekube import FakeKube


def seed_namespace(kube: FakeKube) -> None:
    """Namespace ns as a BuildRun of `fixtures.build()` finds it: its BuildStrategy, the
    Build (validated: status.registered) and the default ServiceAccount."""
    kube.add(BUILDSTRATEGIES, fixtures.strategy())
    kube.add(BUILDS, {**fixtures.build(), "status": {"registered": "True"}})
    kube.add(SERVICEACCOUNTS, {"metadata": {"name": "default"}})


def tekton_status(status: str, reason: str, *, message: str | None = None,
                  start_time: str | None = None, completion_time: str | None = None,
                  pod: str | None = None, digest: str | None = None) -> JSON:
    """A TaskRun's status as Tekton writes it: the Succeeded condition (`status`, `reason`,
    `message`), and those of startTime, completionTime, podName and the image digest
    result that are given."""
    condition = {"type": CONDITION_SUCCEEDED, "status": status, "reason": reason}
    if message is not None:
        condition["message"] = message
    written: JSON = {"conditions": [condition]}
    for key, value in (("startTime", start_time), ("completionTime", completion_time),
                       ("podName", pod)):
        if value is not None:
            written[key] = value
    if digest is not None:
        written["results"] = [{"name": RESULT_IMAGE_DIGEST, "value": digest}]
    return written
