"""The BuildRun's Succeeded condition, and the outcome a finished TaskRun gives it."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from typing import Any

from controller.buildrun.reasons import (
    BUILD_RUN_CANCELED,
    BUILD_RUN_TIMEOUT,
    FAILED,
    PENDING,
    PIPELINE_RUN_CANCELLED,
    PIPELINE_RUN_FAILED,
    PIPELINE_RUN_TIMEOUT,
    POD_EVICTED,
    RUNNING,
    STEP_OUT_OF_MEMORY,
    SUCCEEDED,
    TASK_RUN_CANCELLED,
    TASK_RUN_TIMEOUT,
    VULNERABILITIES_FOUND,
)
from controller.buildrun.spec import go_duration, parse_duration
from controller.runtime.text import truncate
from controller.shipwright.conditions import CONDITION_SUCCEEDED, succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import TASKRUNS

# Limits from the BuildRun CRD schema: a longer value gets the whole status write rejected.
MESSAGE_MAX = 32768
REASON_MAX = 256
NAME_MAX = 253
DIGEST_MAX = 256
VULNERABILITIES_MAX = 1000

# image-processing exits with this code when it found more vulnerabilities than allowed.
EXIT_VULNERABILITIES_FOUND = 22
STEP_IMAGE_PROCESSING = "image-processing"

# TaskRun results the generated TaskRun declares and a strategy's steps may write.
RESULT_IMAGE_DIGEST = "shp-image-digest"
RESULT_ERROR_REASON = "shp-error-reason"
RESULT_ERROR_MESSAGE = "shp-error-message"
RESULT_IMAGE_SIZE = "shp-image-size"
RESULT_IMAGE_VULNERABILITIES = "shp-image-vulnerabilities"
# The source step's results (Shipwright names its one source "default").
RESULT_SOURCE_COMMIT_SHA = "shp-source-default-commit-sha"
RESULT_SOURCE_COMMIT_AUTHOR = "shp-source-default-commit-author"
RESULT_SOURCE_BRANCH_NAME = "shp-source-default-branch-name"
RESULT_SOURCE_IMAGE_DIGEST = "shp-source-default-image-digest"
RESULT_SOURCE_TIMESTAMP = "shp-source-default-source-timestamp"


def run_finished(run: dict[str, Any]) -> bool:
    """Whether Tekton has decided the TaskRun's (or PipelineRun's) outcome (Succeeded is
    True or False)."""
    cond = succeeded_condition(run.get("status"))
    return cond is not None and cond.get("status") in ("True", "False")


def with_condition(
    status: dict[str, Any], cond_status: str, reason: str, message: str, now: str
) -> dict[str, Any]:
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


@dataclass(frozen=True)
class Outcome:
    """How a finished TaskRun ends its BuildRun."""

    status: str
    reason: str
    message: str
    failure_details: dict[str, Any] | None
    digest: str | None
    # status.output and status.source as Shipwright fills them from the TaskRun's results.
    output: dict[str, Any] | None = None
    source: dict[str, Any] | None = None


def timeout_message(buildrun_name: str, seconds: float) -> str:
    """BuildRunTimeout's message, Shipwright's words (its conditions.go): "BuildRun NAME
    failed to finish within 5m0s", the duration as Go prints it."""
    return f"BuildRun {buildrun_name} failed to finish within {go_duration(seconds)}"


def outcome_from_taskrun(
    taskrun: dict[str, Any], pod: dict[str, Any] | None = None
) -> Outcome | None:
    """The BuildRun outcome a TaskRun gives, or None while the TaskRun has not finished.

    `pod` is the TaskRun's pod when the caller could fetch it; only an eviction is
    read from it.
    """
    status = taskrun.get("status") or {}
    condition = succeeded_condition(status) or {}
    name = (taskrun.get("metadata") or {}).get("name") or ""
    results = _results(status)
    extra = {"output": output_from_results(results), "source": source_from_results(results)}
    if condition.get("status") == "True":
        message = condition.get("message") or f"TaskRun {name} succeeded"
        return Outcome("True", SUCCEEDED, message, None, _digest(results), **extra)
    if condition.get("status") != "False":
        return None

    tekton_reason = condition.get("reason")
    if tekton_reason == TASK_RUN_TIMEOUT:
        timeout = (taskrun.get("spec") or {}).get("timeout")
        buildrun = ((taskrun.get("metadata") or {}).get("labels") or {}).get(LABEL_BUILDRUN, "")
        message = (timeout_message(buildrun, parse_duration(timeout)) if timeout
                   else _message(condition))
        return Outcome("False", BUILD_RUN_TIMEOUT, message, None, None)
    if tekton_reason == TASK_RUN_CANCELLED:
        message = "The BuildRun and its TaskRun were canceled"
        return Outcome("False", BUILD_RUN_CANCELED, message, None, None)

    namespace = (taskrun.get("metadata") or {}).get("namespace") or ""
    pod_name = status.get("podName") or ""
    steps = status.get("steps") or []
    failed = [s for s in steps if (s.get("terminated") or {}).get("exitCode", 0) != 0]
    oom = [s for s in steps if (s.get("terminated") or {}).get("reason") == "OOMKilled"]
    pod_status = (pod or {}).get("status") or {}
    step: dict[str, Any] | None
    if pod_status.get("reason") == "Evicted":
        reason, step = POD_EVICTED, (failed or [None])[0]
        message = pod_status.get("message") or f"pod {pod_name} was evicted"
    elif oom:
        reason, step = STEP_OUT_OF_MEMORY, oom[0]
        message = f"step {oom[0].get('name')} ran out of memory; " + _logs_hint(
            namespace, pod_name, oom[0]
        )
    elif failed and _container(failed[0]) == f"step-{STEP_IMAGE_PROCESSING}" and (
        failed[0]["terminated"].get("exitCode") == EXIT_VULNERABILITIES_FOUND
    ):
        reason, step = VULNERABILITIES_FOUND, failed[0]
        message = ("Vulnerabilities have been found in the image which can be seen in the "
                   "buildrun status; " + _logs_hint(namespace, pod_name, failed[0]))
    elif failed:
        reason, step = FAILED, failed[0]
        exit_code = failed[0]["terminated"]["exitCode"]
        message = f"step {failed[0].get('name')} failed with exit code {exit_code}; " + _logs_hint(
            namespace, pod_name, failed[0]
        )
    else:
        reason, step, message = FAILED, None, _message(condition)

    location = {}
    if pod_name:
        location["pod"] = truncate(pod_name, NAME_MAX)
    if step is not None:
        location["container"] = truncate(_container(step), NAME_MAX)
    # The strategy's own words about what went wrong beat our guess from exit codes.
    errors = {**_termination_results(failed), **results}
    details: dict[str, Any] = {
        "reason": truncate(errors.get(RESULT_ERROR_REASON) or reason, REASON_MAX),
        "message": truncate(errors.get(RESULT_ERROR_MESSAGE) or message, MESSAGE_MAX),
    }
    if location:
        details["location"] = location
    return Outcome("False", reason, message, details, None, **extra)


_SEVERITIES = {"L": "low", "M": "medium", "H": "high", "C": "critical"}


def output_from_results(results: dict[str, str]) -> dict[str, Any] | None:
    """status.output from the image-processing results, as Shipwright reads them: the
    digest, the size (ignored unless an integer) and the vulnerabilities
    ("ID:S,ID:S" with S one of L, M, H, C)."""
    output: dict[str, Any] = {}
    digest = _digest(results)
    if digest:
        output["digest"] = digest
    size = results.get(RESULT_IMAGE_SIZE, "")
    if re.fullmatch(r"[+-]?[0-9]{1,18}", size) and int(size) != 0:
        output["size"] = int(size)
    listed = results.get(RESULT_IMAGE_VULNERABILITIES, "")
    if listed:
        found = []
        for entry in listed.split(",")[:VULNERABILITIES_MAX]:
            vuln_id, _, severity = entry.partition(":")
            found.append({"id": truncate(vuln_id, NAME_MAX),
                          "severity": _SEVERITIES.get(severity.upper(), "unknown")})
        output["vulnerabilities"] = found
    return output or None


def source_from_results(results: dict[str, str]) -> dict[str, Any] | None:
    """status.source from the source step's results: git (commit, author, branch), the
    OCI bundle's digest, and the source timestamp (epoch seconds) as a time."""
    source: dict[str, Any] = {}
    git = {field: truncate(results[name], MESSAGE_MAX) for field, name in (
        ("commitSha", RESULT_SOURCE_COMMIT_SHA), ("commitAuthor", RESULT_SOURCE_COMMIT_AUTHOR),
        ("branchName", RESULT_SOURCE_BRANCH_NAME)) if results.get(name)}
    if git:
        source["git"] = git
    bundle = results.get(RESULT_SOURCE_IMAGE_DIGEST, "")
    if bundle and len(bundle) <= DIGEST_MAX:
        source["ociArtifact"] = {"digest": bundle}
    stamp = results.get(RESULT_SOURCE_TIMESTAMP, "")
    if source and re.fullmatch(r"[+-]?[0-9]{1,11}", stamp):
        try:
            moment = datetime.datetime.fromtimestamp(int(stamp), datetime.UTC)
        except (OverflowError, OSError, ValueError):
            moment = None
        if moment is not None:
            source["timestamp"] = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return source or None


def running_reason(run: dict[str, Any]) -> tuple[str, str]:
    """(reason, message) for a BuildRun whose TaskRun (or PipelineRun) has not finished yet."""
    condition = succeeded_condition(run.get("status"))
    name = (run.get("metadata") or {}).get("name") or ""
    kind = run.get("kind") or TASKRUNS.kind
    if condition is None:
        return PENDING, f"{kind} {name} has not started yet"
    if condition.get("status") == "Unknown" and condition.get("reason") == "Running":
        return RUNNING, condition.get("message") or f"{kind} {name} is running"
    # Tekton's message says what the pod waits for (image pull, scheduling, quota).
    return PENDING, condition.get("message") or f"{kind} {name} is pending"


def _message(condition: dict[str, Any]) -> str:
    return str(condition.get("message") or condition.get("reason") or "TaskRun failed")


def _container(step: dict[str, Any]) -> str:
    return str(step.get("container") or f"step-{step.get('name')}")


def _logs_hint(namespace: str, pod_name: str, step: dict[str, Any]) -> str:
    return f"for details: kubectl logs -n {namespace} {pod_name} -c {_container(step)}"


def _results(status: dict[str, Any]) -> dict[str, str]:
    """String results of a TaskRun (array and object results are not ours)."""
    return {
        result["name"]: result["value"].strip()
        for result in status.get("results") or []
        if isinstance(result.get("name"), str) and isinstance(result.get("value"), str)
    }


def _termination_results(failed_steps: list[dict[str, Any]]) -> dict[str, str]:
    """Results a failed step wrote: Tekton does not publish results of a failed TaskRun in
    status.results, but they remain in the step's termination message (a JSON list of
    {key, value}), where Shipwright reads them too."""
    found: dict[str, str] = {}
    for step in failed_steps:
        try:
            entries = json.loads(step["terminated"].get("message") or "[]")
        except ValueError:
            continue
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if (
                isinstance(entry, dict)
                and entry.get("key") in (RESULT_ERROR_REASON, RESULT_ERROR_MESSAGE)
                and isinstance(entry.get("value"), str)
            ):
                found[entry["key"]] = entry["value"].strip()
    return found


def _digest(results: dict[str, str]) -> str | None:
    # A longer value is not a digest, and writing it would get the status rejected.
    digest = results.get(RESULT_IMAGE_DIGEST)
    return digest if digest and len(digest) <= DIGEST_MAX else None


# --- PipelineRuns (BUILDRUN_EXECUTOR=PipelineRun)


def child_taskrun_names(pipelinerun: dict[str, Any]) -> list[str]:
    """The PipelineRun's TaskRuns, in Tekton's order (status.childReferences), as
    Shipwright's GetUnderlyingTaskRuns and GetResults read them."""
    return [ref["name"] for ref in (pipelinerun.get("status") or {}).get("childReferences") or []
            if ref.get("kind") == TASKRUNS.kind and isinstance(ref.get("name"), str)]


def failed_child(children: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first child TaskRun whose Succeeded condition is False: the one Shipwright's
    extractPipelineRunFailureDetails reports (its pod tells eviction apart)."""
    return next((tr for tr in children
                 if (succeeded_condition(tr.get("status")) or {}).get("status") == "False"),
                None)


def pipelinerun_pod_name(children: list[dict[str, Any]]) -> str:
    """The pod Shipwright's metrics read for a PipelineRun: its first TaskRun's."""
    return str(((children[0].get("status") or {}).get("podName") or "") if children else "")


def outcome_from_pipelinerun(
    pipelinerun: dict[str, Any], children: list[dict[str, Any]],
    pod: dict[str, Any] | None = None,
) -> Outcome | None:
    """The BuildRun outcome a PipelineRun gives, or None while it has not finished; as
    Shipwright v0.20.13 maps one (resources/conditions.go,
    UpdateBuildRunUsingPipelineRunCondition).

    `children` are its TaskRuns that could be read, in status.childReferences order (a
    deleted one is left out, as Shipwright skips it); their string results make
    status.output and status.source, as GetResults does when the PipelineRun has none of
    its own. `pod` is the first failed child's pod, when it could be read: a failure is
    described as that TaskRun's (`outcome_from_taskrun`, so eviction, OOM and
    vulnerabilities are told apart the same way), with Shipwright's PipelineRunFailed
    for a plain failure.
    """
    status = pipelinerun.get("status") or {}
    condition = succeeded_condition(status) or {}
    name = (pipelinerun.get("metadata") or {}).get("name") or ""
    results = _results(status)
    if not results:
        for child in children:
            results.update(_results(child.get("status") or {}))
    extra = {"output": output_from_results(results), "source": source_from_results(results)}
    if condition.get("status") == "True":
        # Tekton says Succeeded, or Completed when a task was skipped.
        message = condition.get("message") or f"PipelineRun {name} succeeded"
        return Outcome("True", SUCCEEDED, message, None, _digest(results), **extra)
    if condition.get("status") != "False":
        return None

    tekton_reason = condition.get("reason")
    if tekton_reason == PIPELINE_RUN_TIMEOUT:
        timeout = ((pipelinerun.get("spec") or {}).get("timeouts") or {}).get("pipeline")
        buildrun = ((pipelinerun.get("metadata") or {}).get("labels") or {}).get(
            LABEL_BUILDRUN, "")
        message = (timeout_message(buildrun, parse_duration(timeout)) if timeout
                   else _message(condition))
        return Outcome("False", BUILD_RUN_TIMEOUT, message, None, None)
    # Tekton v1 says Cancelled; Shipwright's code looks for PipelineRunCancelled, a reason
    # Tekton does not write, and so keeps Tekton's reason. Both mean the same here.
    if tekton_reason in (PIPELINE_RUN_CANCELLED, "Cancelled"):
        message = "The BuildRun and its PipelineRun were canceled"
        return Outcome("False", BUILD_RUN_CANCELED, message, None, None)

    failed_run = failed_child(children)
    if failed_run is None:
        # No TaskRun failed (none made: Tekton refused the pipeline; or it was deleted):
        # Tekton's own words, under Shipwright's reason.
        detail = condition.get("message") or tekton_reason or "failed"
        message = (f"PipelineRun {name} failed with no child TaskRuns: {detail}"
                   if not children else f"PipelineRun {name} failed: {detail}")
        return Outcome("False", PIPELINE_RUN_FAILED, message, None, None, **extra)
    failed = outcome_from_taskrun(failed_run, pod)
    if failed is None or failed.status != "False":  # a child condition says False
        return Outcome("False", PIPELINE_RUN_FAILED, f"PipelineRun {name} failed", None, None,
                       **extra)
    reason = PIPELINE_RUN_FAILED if failed.reason == FAILED else failed.reason
    details = dict(failed.failure_details or {})
    if details.get("reason") == FAILED:
        details["reason"] = reason
    message = f"PipelineRun {name} failed: {failed.message}"
    return Outcome("False", reason, message, details or None, None, **extra)
