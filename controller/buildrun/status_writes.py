"""Writing a BuildRun's status: `write_status`, the only writer, and the changes it
applies (pure functions from the status read to the status wanted).

`write_status` refuses to touch a BuildRun whose completionTime is set (its outcome
is frozen; the CRD's validation rules refuse it too), and on a conflict reads the
BuildRun again and applies the change anew (`retry_on_conflict`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.buildrun.buildruns import phase_of, recorded_executor, with_executor
from controller.buildrun.executors import Executor
from controller.buildrun.states import Decision, Phase
from controller.buildrun.status import running_reason, with_condition
from controller.runtime.conflict import retry_on_conflict
from controller.runtime.errors import is_not_found
from controller.runtime.kube import JSON, ApiError, Kube
from controller.shipwright.resources import BUILDRUNS

Change = Callable[[JSON], JSON]


async def write_status(kube: Kube, buildrun: JSON, change: Change) -> JSON | None:
    """The one way status is written: `change` applied to the current status.

    Optimistic concurrency: the patch carries the resourceVersion we read; on a
    conflict the BuildRun is read again and `change` re-applied. Returns the
    written object, or None when nothing was written because the BuildRun is
    gone, already complete (its outcome is frozen), or already as wanted.
    """
    namespace, name = buildrun["metadata"]["namespace"], buildrun["metadata"]["name"]

    async def write(current: JSON | None) -> JSON | None:
        if current is None or phase_of(current) is Phase.DONE:
            return None
        old: JSON = current.get("status") or {}
        new = change(old)
        if new == old:
            return None
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "status": new,
        }
        try:
            return await kube.patch(BUILDRUNS, namespace, name, body, subresource="status")
        except ApiError as exc:
            if is_not_found(exc):
                return None
            raise

    return await retry_on_conflict(kube, BUILDRUNS, buildrun, write)


def started(executor: Executor, run: JSON, snapshot: JSON, now: str) -> Change:
    """Row 10: the TaskRun (PipelineRun) created or adopted, the start time and the build
    spec snapshot, with the condition the first reconcile of the running BuildRun would
    write, so it finds nothing to change: one status write per start, not two.

    status.executor names it; the deprecated status.taskRunName only a TaskRun, as
    Shipwright writes it."""
    name = run["metadata"]["name"]

    def change(status: JSON) -> JSON:
        if recorded_executor(status):
            return status  # recorded already (we read a stale copy); keep its progress
        status = dict(status)
        status.setdefault("startTime", now)
        if executor.records_taskrun_name:
            status["taskRunName"] = name
        status["executor"] = {"kind": executor.kind, "name": name}
        status.setdefault("buildSpec", snapshot)
        return with_condition(status, "Unknown", *running_reason(run), now)

    return change


def progressed(reason: str, message: str, now: str) -> Change:
    """Row 16: the running TaskRun's reason and message on the Succeeded condition."""
    return lambda status: with_condition(with_executor(status), "Unknown", reason, message, now)


def finished(decision: Decision, now: str) -> Change:
    """A FINISH row: the decided condition, completionTime, and what the outcome read
    from the TaskRun (failure details, image digest, source results)."""
    outcome = decision.outcome

    def change(status: JSON) -> JSON:
        status = with_condition(with_executor(status), decision.succeeded,
                                decision.reason, decision.message, now)
        status["completionTime"] = now
        if outcome is not None and outcome.failure_details:
            status["failureDetails"] = outcome.failure_details
        if outcome is not None and outcome.output:
            status["output"] = outcome.output
        if outcome is not None and outcome.source:
            status["source"] = outcome.source
        return status

    return change
