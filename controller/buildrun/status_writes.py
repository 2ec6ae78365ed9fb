"""Writing a BuildRun's status: `write_status`, the only writer, and the changes it
applies (pure functions from the status read to the status wanted), with the Succeeded
condition they set (`with_condition`, and a cancel's words while the run stops).

`write_status` refuses to touch a BuildRun whose completionTime is set (its outcome
is frozen; the CRD's validation rules refuse it too), and on a conflict reads the
BuildRun again and applies the change anew (`retry_on_conflict`).
"""

from __future__ import annotations

from collections.abc import Callable

from controller.buildrun.buildruns import (
    cancel_asked_at,
    phase_of,
    run_completion,
    run_start,
    with_executor,
)
from controller.buildrun.executors import Executor
from controller.buildrun.outcomes import MESSAGE_MAX, REASON_MAX, running_reason
from controller.buildrun.reasons import BUILD_RUN_CANCELED
from controller.buildrun.states import Decision, Phase
from controller.runtime.conflict import retry_on_conflict
from controller.runtime.errors import is_not_found
from controller.runtime.kube import JSON, ApiError, Kube
from controller.runtime.text import truncate
from controller.shipwright.conditions import CONDITION_SUCCEEDED
from controller.shipwright.recorded_executor import recorded_executor
from controller.shipwright.resources import BUILDRUNS

Change = Callable[[JSON], JSON]


async def write_status(kube: Kube, buildrun: JSON, change: Change) -> JSON | None:
    """The one way status is written: `change` applied to the current status.

    An update of the status subresource (PUT), as Shipwright's Status().Update: the
    BuildRun as read with its status replaced, carrying the resourceVersion read, so a
    write based on a stale copy fails with a conflict; then the BuildRun is read again
    and `change` re-applied. Returns the written object, or None when nothing was
    written because the BuildRun is gone, already complete (its outcome is frozen), or
    already as wanted.

    An update rather than a merge patch: the API server then neither reads the object
    to patch it nor works the patch out, 0.17-1.04 ms less of its CPU per write, of
    4.4-5.4 (bench/e2e/status_writes.py and BENCHMARKS.md, issue 34). The body is the
    whole object, metadata as read: the API server's field manager takes a field missing
    from an update as removed from its owner's claim in managedFields (the object keeps
    it), so the BuildRun informer is `updated` and keeps kubectl's last-applied
    annotation until the BuildRun finishes (informers.strip_noise).
    """
    namespace, name = buildrun["metadata"]["namespace"], buildrun["metadata"]["name"]

    async def write(current: JSON | None) -> JSON | None:
        if current is None or phase_of(current) is Phase.DONE:
            return None
        old: JSON = current.get("status") or {}
        new = change(old)
        if new == old:
            return None
        try:
            return await kube.put(BUILDRUNS, namespace, name, status_update(current, new),
                                  subresource="status")
        except ApiError as exc:
            if is_not_found(exc):
                return None
            raise

    return await retry_on_conflict(kube, BUILDRUNS, buildrun, write)


def status_update(buildrun: JSON, status: JSON) -> JSON:
    """The body of `write_status`'s update: the BuildRun as read (managedFields left out:
    the API server takes a subresource's from the object it holds) with `status`."""
    meta = {k: v for k, v in buildrun["metadata"].items() if k != "managedFields"}
    return {**buildrun, "apiVersion": BUILDRUNS.api_version, "kind": BUILDRUNS.kind,
            "metadata": meta, "status": status}


def started(executor: Executor, run: JSON, snapshot: JSON | None, now: str) -> Change:
    """Rows 12 and 5: the TaskRun (PipelineRun) created or adopted and the build spec
    snapshot (none for a run adopted by a BuildRun that does not resolve), with the
    condition the first reconcile of the running BuildRun would write, so it finds
    nothing to change: one status write per start, not two.

    status.executor names it; the deprecated status.taskRunName only a TaskRun, as
    Shipwright writes it. startTime is the run's own, as Shipwright copies it (an adopted
    run may have one already; a new one gets it from Tekton, and the write that reports
    its progress copies it: `progressed`)."""
    name = run["metadata"]["name"]

    def change(status: JSON) -> JSON:
        if recorded_executor(status) is not None:
            return status  # recorded already (we read a stale copy); keep its progress
        status = with_start(status, run_start(run))
        if executor.records_taskrun_name:
            status["taskRunName"] = name
        status["executor"] = {"kind": executor.kind, "name": name}
        if snapshot is not None:
            status.setdefault("buildSpec", snapshot)
        return with_condition(status, "Unknown", *running_reason(run), now)

    return change


def retried(executor: Executor, failed: str, run: JSON, now: str) -> Change:
    """Row 13: the next attempt's run recorded in place of the one the infrastructure
    failed (`failed`, as the status named it; a status that names another, read stale,
    is left as it is), with its Pending condition. startTime goes with the failed run: it
    is the run's, as Shipwright copies it, and the timeout backstop counts from it
    (`progressed` copies the new run's). No completionTime: the BuildRun stays open."""
    name = run["metadata"]["name"]

    def change(status: JSON) -> JSON:
        recorded = recorded_executor(status)
        if recorded is None or recorded.name != failed:
            return status
        status = {k: v for k, v in status.items() if k != "startTime"}
        status = with_start(status, run_start(run))
        if executor.records_taskrun_name:
            status["taskRunName"] = name
        status["executor"] = {"kind": executor.kind, "name": name}
        return with_condition(status, "Unknown", *running_reason(run), now)

    return change


def progressed(run: JSON, now: str, pod: JSON | None = None) -> Change:
    """Row 21: the running TaskRun's reason and message on the Succeeded condition, and its
    startTime once Tekton has set it; `pod`, the run's, says why it waits
    (outcomes.running_reason)."""
    reason, message = running_reason(run, pod)
    return lambda status: with_condition(with_start(with_executor(status), run_start(run)),
                                         "Unknown", reason, message, now)


def waiting(decision: Decision, now: str) -> Change:
    """Row 11: a serial Build's BuildRun waiting behind another, Unknown with the decided
    reason and the message naming that one; unchanged (no write) while it is the same."""
    return lambda status: with_condition(status, "Unknown", decision.reason,
                                         decision.message, now)


def cancel_asked(executor: Executor, now: str) -> Change:
    """Row 18: Unknown/BuildRunCanceled with Shipwright's words, its lastTransitionTime
    the moment the run was asked to stop (from which the cancel backstop counts:
    buildruns.cancel_left); unchanged once shown."""
    def change(status: JSON) -> JSON:
        if cancel_asked_at({"status": status}) is not None:
            return status
        status = with_condition(status, "Unknown", BUILD_RUN_CANCELED,
                                cancel_requested_message(executor.kind), now)
        # A new reason, not a new status value: moved all the same, to say when.
        conditions = [{**c, "lastTransitionTime": now} if c.get("type") == CONDITION_SUCCEEDED
                      else c for c in status["conditions"]]
        return {**status, "conditions": conditions}

    return change


def finished(decision: Decision, run: JSON | None, now: str) -> Change:
    """A FINISH row: the decided condition, completionTime, the run's startTime if not
    copied yet, and what the outcome read from the TaskRun (failure details, image digest,
    source results).

    completionTime is the run's when the run decided the outcome, as Shipwright copies it
    (buildrun.go, GetCompletionTime): it is when the build ended, whenever this controller
    came to see it (after an outage or a backlog, minutes to hours later), and the
    CompletionTime column, the duration metrics and the retention TTL all count from it.
    Our own verdicts (a user error, a backstop, a cancel before start) take `now`."""
    outcome = decision.outcome
    ended = (run_completion(run) if outcome is not None else None) or now

    def change(status: JSON) -> JSON:
        status = with_condition(with_start(with_executor(status), run_start(run)),
                                decision.succeeded, decision.reason, decision.message, ended)
        status["completionTime"] = ended
        if outcome is not None and outcome.failure_details:
            status["failureDetails"] = outcome.failure_details
        if outcome is not None and outcome.output:
            status["output"] = outcome.output
        if outcome is not None and outcome.source:
            status["source"] = outcome.source
        return status

    return change


def with_condition(status: JSON, cond_status: str, reason: str, message: str, now: str) -> JSON:
    """A new status with the Succeeded condition set.

    lastTransitionTime moves only when the condition's status value changes (API
    conventions), so repeated reconciles of a running BuildRun do not churn it.
    """
    conditions = list(status.get("conditions") or [])
    index = next((i for i, c in enumerate(conditions)
                  if c.get("type") == CONDITION_SUCCEEDED), None)
    old = conditions[index] if index is not None else {}
    unchanged = old.get("status") == cond_status and old.get("lastTransitionTime")
    condition = {
        "type": CONDITION_SUCCEEDED,
        "status": cond_status,
        "reason": truncate(reason, REASON_MAX),
        "message": truncate(message, MESSAGE_MAX),
        "lastTransitionTime": old["lastTransitionTime"] if unchanged else now,
    }
    if index is None:
        conditions.append(condition)
    else:
        conditions[index] = condition
    return {**status, "conditions": conditions}


def cancel_requested_message(kind: str) -> str:
    """Unknown/BuildRunCanceled's message while the run has not stopped yet: Shipwright's
    words for a TaskRun (conditions.go, its two spaces and its typo kept: tools match on
    them), the same for a PipelineRun (where Shipwright shows Tekton's Running)."""
    return (f"The user requested the BuildRun to be canceled.  This BuildRun controller has "
            f"requested the {kind} be canceled.  That request has not been process by "
            f"Tekton's {kind} controller yet.")


def with_start(status: JSON, start: str | None) -> JSON:
    """A copy of `status` with startTime set to the run's `start`, unless it has one (as
    Shipwright: set once, from the executor) or the run has none yet."""
    status = dict(status)
    if start and not status.get("startTime"):
        status["startTime"] = start
    return status
