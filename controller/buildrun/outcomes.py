"""What a TaskRun or PipelineRun makes of its BuildRun: whether it has finished
(`run_finished`), the reason and message it shows while it runs (`running_reason`), and
once it finished the outcome it gives the BuildRun (`Outcome`: the Succeeded condition's
status, reason and message, failureDetails, status.output and status.source), read as
Shipwright v0.20.13 reads it. Pure. status_writes.py writes what these say."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from typing import Any

from controller.buildrun.reasons import (
    BUILD_RUN_CANCELED,
    BUILD_RUN_TIMEOUT,
    CANCELLED,
    FAILED,
    PENDING,
    PIPELINE_RUN_CANCELLED,
    PIPELINE_RUN_FAILED,
    PIPELINE_RUN_TIMEOUT,
    POD_EVICTED,
    RUNNING,
    STEP_FAILED,
    STEP_OUT_OF_MEMORY,
    SUCCEEDED,
    TASK_RUN_CANCELLED,
    TASK_RUN_TIMEOUT,
    TEKTON_FAILED_REASONS,
    VULNERABILITIES_FOUND,
)
from controller.buildrun.resources.image_processing import (
    EXIT_VULNERABILITIES_FOUND,
    STEP_IMAGE_PROCESSING,
)
from controller.buildrun.resources.results import (
    RESULT_ERROR_MESSAGE,
    RESULT_ERROR_REASON,
    RESULT_IMAGE_DIGEST,
    RESULT_IMAGE_SIZE,
    RESULT_IMAGE_VULNERABILITIES,
    RESULT_SOURCE_BRANCH_NAME,
    RESULT_SOURCE_COMMIT_AUTHOR,
    RESULT_SOURCE_COMMIT_SHA,
    RESULT_SOURCE_IMAGE_DIGEST,
    RESULT_SOURCE_TIMESTAMP,
)
from controller.buildrun.spec import go_duration, parse_duration
from controller.runtime.shapes import at, items, mapping, objects, text
from controller.runtime.text import truncate
from controller.runtime.timestamps import format_time
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import TASKRUNS

# Limits from the BuildRun CRD schema: a longer value gets the whole status write rejected.
MESSAGE_MAX = 32768
REASON_MAX = 256
NAME_MAX = 253
DIGEST_MAX = 256
VULNERABILITIES_MAX = 1000


def run_finished(run: dict[str, Any]) -> bool:
    """Whether Tekton has decided the TaskRun's (or PipelineRun's) outcome (Succeeded is
    True or False)."""
    cond = succeeded_condition(run.get("status"))
    return cond is not None and cond.get("status") in ("True", "False")


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


def pod_completed(pod: dict[str, Any] | None) -> bool:
    """Whether the run's pod has completed: every container exited 0 (phase Succeeded),
    so the build, its push included, is done whatever Tekton says of the run yet."""
    return bool(at(pod, "status", "phase") == "Succeeded")


def completed_pod_outcome(pod: dict[str, Any] | None, *, canceled: bool) -> Outcome | None:
    """The outcome a TaskRun's pod shows once it has completed (`pod_completed`) where
    Tekton has not said so, or has said cancelled: a success, with the results its steps
    wrote in their termination messages (where Tekton reads them), in Tekton's words for a
    success, or Shipwright's for a cancel that came too late. None while it has not."""
    if not pod_completed(pod):
        return None
    results = _pod_results(pod)
    return _succeeded("TaskRun", SUCCEEDED, "All Steps have completed executing", canceled,
                      results, {"output": output_from_results(results),
                                "source": source_from_results(results)})


def timeout_message(buildrun_name: str, seconds: float) -> str:
    """BuildRunTimeout's message, Shipwright's words (its conditions.go): "BuildRun NAME
    failed to finish within 5m0s", the duration as Go prints it."""
    return f"BuildRun {buildrun_name} failed to finish within {go_duration(seconds)}"


def pending_timeout_message(buildrun_name: str, seconds: float, reason: str,
                            message: str) -> str:
    """BuildRunPendingTimeout's message: "BuildRun NAME did not start running within
    10m0s", the duration as Go prints it, and why it waited as the BuildRun last said it
    (`running_reason`: Tekton's reason, the scheduler's or the kubelet's words)."""
    waited = f"{reason}: {message}" if message else reason
    return truncate(f"BuildRun {buildrun_name} did not start running within "
                    f"{go_duration(seconds)}; it waited: {waited}", MESSAGE_MAX)


def outcome_from_taskrun(
    taskrun: dict[str, Any], pod: dict[str, Any] | None = None, *, canceled: bool = False
) -> Outcome | None:
    """The BuildRun outcome a TaskRun gives, or None while the TaskRun has not finished;
    as Shipwright v0.20.13 sets it (resources/conditions.go,
    UpdateBuildRunUsingTaskRunCondition, then failure_details.go,
    UpdateBuildRunUsingTaskFailures; tests/oracle/test_status_parity.py runs both).

    Tekton's reason and message are kept, but for those Shipwright maps: TaskRunTimeout is
    BuildRunTimeout; TaskRunCancelled is BuildRunCanceled when the BuildRun asked for it
    (`canceled`); Failed, and Tekton v1.12's StepFailed, StepOOM and PodEvicted, are read
    off the pod (`failed_in_pod`): PodEvicted, StepOutOfMemory, VulnerabilitiesFound or
    Failed, with the failed container. `pod` is the TaskRun's pod, None when it is gone.
    """
    status = mapping(taskrun.get("status"))
    condition = succeeded_condition(status) or {}
    cond_status = condition.get("status")
    if cond_status not in ("True", "False"):
        return None
    results = _results(status)
    extra = {"output": output_from_results(results), "source": source_from_results(results)}
    meta = mapping(taskrun.get("metadata"))
    tekton_reason = text(condition.get("reason"))
    reason, message = tekton_reason, text(condition.get("message"))
    if cond_status == "True":
        return _succeeded("TaskRun", reason, message, canceled, results, extra)
    if _last_step_ended_well(status):
        # Tekton failed a run after its last step ended well: a container status lost in a
        # containerd restart ("exited with code 255: Unknown"), a sidecar, a result too
        # large. Tekton starts a step only once the one before it ended well, so every
        # step ran, the push included: the image is in the registry.
        results = results or _step_results(status)
        return _succeeded("TaskRun", SUCCEEDED, f"All Steps have completed executing (Tekton "
                          f"ended the TaskRun {tekton_reason}: {message})", canceled, results,
                          {"output": output_from_results(results),
                           "source": source_from_results(results)})

    details: dict[str, Any] | None = None
    if tekton_reason == TASK_RUN_TIMEOUT:
        timeout = _duration(at(taskrun, "spec", "timeout"))
        reason = BUILD_RUN_TIMEOUT
        # Tekton's webhook always sets spec.timeout; without one Shipwright quotes the
        # time since creation, ours Tekton's message (README, "Status from Tekton").
        if timeout is not None:
            message = timeout_message(_buildrun_label(meta), timeout)
    elif tekton_reason == TASK_RUN_CANCELLED and canceled:
        # Tekton stops a run whose cancel it sees before its pod's end (its reconciler asks
        # IsCancelled before it reads the pod): a pod that shows the build done, its image
        # pushed, makes the truth a success, with the results the steps wrote.
        completed = completed_pod_outcome(pod, canceled=True)
        if completed is not None:
            return completed
        reason = BUILD_RUN_CANCELED
        message = "The BuildRun and underlying TaskRun were canceled successfully."
    elif tekton_reason in TEKTON_FAILED_REASONS and status.get("completionTime"):
        namespace = text(meta.get("namespace"))
        if pod is None:
            reason = FAILED
            message = f"buildrun failed, pod {namespace}/{text(status.get('podName'))} not found"
        else:
            reason, message, details = failed_in_pod(pod, _STEP_WORDS)
    elif tekton_reason in TEKTON_FAILED_REASONS:
        reason = FAILED
    if tekton_reason in (FAILED, STEP_FAILED):
        # UpdateBuildRunUsingTaskFailures: what the strategy wrote, where it failed.
        details = _strategy_failure(status, pod)
    return Outcome("False", truncate(reason, REASON_MAX), truncate(message, MESSAGE_MAX),
                   details, None, **extra)


def _duration(value: object) -> float | None:
    """A run's timeout in seconds, None when it holds none that reads as a Go duration."""
    try:
        return parse_duration(text(value)) if text(value) else None
    except ValueError:
        return None


def _buildrun_label(meta: dict[str, Any]) -> str:
    return text(mapping(meta.get("labels")).get(LABEL_BUILDRUN))


def _succeeded(kind: str, reason: str, message: str, canceled: bool,
               results: dict[str, str], extra: dict[str, Any]) -> Outcome:
    """A run Tekton says succeeded: its reason and message, but Shipwright's words when the
    BuildRun asked for a cancel that came too late."""
    if canceled and reason == SUCCEEDED:
        message = (f"The {kind} completed before the request to cancel the {kind} could be "
                   "processed.")
    return Outcome("True", reason, message, None, _digest(results), **extra)


# Shipwright's words for a failure read off the pod, for a TaskRun and for a PipelineRun
# (conditions.go: UpdateBuildRunUsingTaskRunCondition, extractPipelineRunFailureDetails),
# filled in with {run} (the PipelineRun), {container}, {namespace} and {pod}.
@dataclass(frozen=True)
class _Words:
    step: str
    oom: str
    vulnerabilities: str
    unexpected: str


_STEP_WORDS = _Words(
    step="buildrun step {container} failed, for detailed information: kubectl --namespace "
         "{namespace} logs {pod} --container={container}",
    oom="buildrun step {container} failed due to out-of-memory, for detailed information: "
        "kubectl --namespace {namespace} logs {pod} --container={container}",
    vulnerabilities="Vulnerabilities have been found in the image which can be seen in the "
                    "buildrun status. For detailed information,see kubectl --namespace "
                    "{namespace} logs {pod} --container={container}",
    unexpected="buildrun failed due to an unexpected error in pod {pod}: for detailed "
               "information: kubectl --namespace {namespace} logs {pod} --all-containers",
)
_PIPELINE_WORDS = _Words(
    step="PipelineRun {run} failed in step {container}, for detailed information: kubectl "
         "--namespace {namespace} logs {pod} --container={container}",
    oom="PipelineRun {run} failed due to out-of-memory in step {container}, for detailed "
        "information: kubectl --namespace {namespace} logs {pod} --container={container}",
    vulnerabilities="Vulnerabilities have been found in the image from PipelineRun {run}, "
                    "for detailed information: kubectl --namespace {namespace} logs {pod} "
                    "--container={container}",
    unexpected="PipelineRun {run} failed due to an unexpected error in pod {pod}: for "
               "detailed information: kubectl --namespace {namespace} logs {pod} "
               "--all-containers",
)


def failed_container(pod: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The pod's first container, in spec order, that terminated with a non-zero exit
    code, and its status (Shipwright's extractFailedPodAndContainer: container statuses
    are not sorted)."""
    statuses = {text(s.get("name")): s for s in objects(at(pod, "status", "containerStatuses"))
                if _exit_code(at(s, "state", "terminated")) not in (None, 0)}
    for container in objects(at(pod, "spec", "containers")):
        name = text(container.get("name"))
        if name in statuses:
            return name, statuses[name]
    return None


def failed_in_pod(pod: dict[str, Any], words: _Words = _STEP_WORDS, run: str = ""
                  ) -> tuple[str, str, dict[str, Any]]:
    """(reason, message, failureDetails) of a failed run, read off its pod: an evicted pod
    is PodEvicted with the kubelet's message; else the failed container's OOMKilled is
    StepOutOfMemory, image-processing's exit code 22 VulnerabilitiesFound, any other
    failure Failed; a pod without a failed container Failed "unexpected error"."""
    meta = mapping(pod.get("metadata"))
    pod_name, namespace = text(meta.get("name")), text(meta.get("namespace"))
    location: dict[str, Any] = {"pod": truncate(pod_name, NAME_MAX)}
    found = failed_container(pod)
    pod_status = mapping(pod.get("status"))
    reason = FAILED
    if found is not None:
        location["container"] = truncate(found[0], NAME_MAX)
    if pod_status.get("reason") == "Evicted":
        reason, message = POD_EVICTED, text(pod_status.get("message"))
    elif found is not None:
        container, container_status = found
        terminated = mapping(at(container_status, "state", "terminated"))
        fill = {"run": run, "container": container, "namespace": namespace, "pod": pod_name}
        message = words.step.format(**fill)
        if terminated.get("reason") == "OOMKilled":
            reason, message = STEP_OUT_OF_MEMORY, words.oom.format(**fill)
        elif (container == f"step-{STEP_IMAGE_PROCESSING}"
              and _exit_code(terminated) == EXIT_VULNERABILITIES_FOUND):
            reason, message = VULNERABILITIES_FOUND, words.vulnerabilities.format(**fill)
    else:
        message = words.unexpected.format(run=run, namespace=namespace, pod=pod_name)
    return reason, message, {"location": location}


def _strategy_failure(status: dict[str, Any], pod: dict[str, Any] | None) -> dict[str, Any]:
    """failureDetails as Shipwright's extractFailureDetails makes them: the reason and
    message a failed step wrote (shp-error-reason, shp-error-message, in its termination
    message), at the pod and the failed container, or the TaskRun's podName."""
    errors = _termination_results(items(status.get("steps")))
    details: dict[str, Any] = {}
    for key, name in (("reason", RESULT_ERROR_REASON), ("message", RESULT_ERROR_MESSAGE)):
        if errors.get(name):
            details[key] = truncate(errors[name], REASON_MAX if key == "reason" else MESSAGE_MAX)
    location = {"pod": truncate(text(status.get("podName")), NAME_MAX)}
    found = failed_container(pod) if pod is not None else None
    if pod is not None and found is not None:
        location = {"pod": truncate(text(at(pod, "metadata", "name")), NAME_MAX),
                    "container": truncate(found[0], NAME_MAX)}
    location = {k: v for k, v in location.items() if v}
    if location:
        details["location"] = location
    return details


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
            source["timestamp"] = format_time(moment)
    return source or None


def running_reason(run: dict[str, Any], pod: dict[str, Any] | None = None) -> tuple[str, str]:
    """(reason, message) for a BuildRun whose TaskRun (or PipelineRun) has not finished yet.

    Tekton's reason and message as they are, as Shipwright v0.20.13 copies them
    (resources/conditions.go, UpdateBuildRunUsingTaskRunCondition: Started, Pending,
    Running, ExceededNodeResources, PullImageFailed, ToBeRetried, ...): the reason says
    why a run waits. Where its pod (`pod`, the pod cache's copy) cannot be scheduled or
    a step's image cannot be pulled, the message is the scheduler's or the kubelet's
    own words instead (`waiting_words`), where Tekton's says "TaskRun Pod exceeded
    available resources" or wraps them. Ours only before Tekton's first status, where
    Shipwright writes no condition at all."""
    condition = succeeded_condition(run.get("status"))
    name = text(at(run, "metadata", "name"))
    kind = text(run.get("kind")) or TASKRUNS.kind
    reason = text(condition.get("reason")) if condition is not None else ""
    if not reason:
        return PENDING, f"{kind} {name} has not started yet"
    assert condition is not None
    message = text(condition.get("message"))
    words = waiting_words(pod) if reason != RUNNING else None
    return truncate(reason, REASON_MAX), truncate(words or message, MESSAGE_MAX)


# The kubelet's reasons for a container whose image cannot be had (kubelet's
# pkg/kubelet/images/types.go; the set Tekton's isImageErrorReason reads).
IMAGE_WAITING_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ImageInspectError",
                                   "ErrImageNeverPull", "RegistryUnavailable",
                                   "InvalidImageName"})
# The scheduler's event reason for a pod it cannot place (its PodScheduled condition says
# Unschedulable with the same message).
FAILED_SCHEDULING = "FailedScheduling"


def waiting_words(pod: dict[str, Any] | None) -> str | None:
    """Why a run's pod waits, in the scheduler's or the kubelet's words: "FailedScheduling:
    0/1 nodes are available: 1 Insufficient cpu. ..." (its PodScheduled condition False,
    Unschedulable), or "ImagePullBackOff (step-build): Back-off pulling image ..." (the
    first step, in the pod's order, waiting for an image it cannot pull). None when the
    pod shows neither, or there is no pod."""
    for cond in objects(at(pod, "status", "conditions")):
        if (cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"):
            return f"{FAILED_SCHEDULING}: {text(cond.get('message'))}".rstrip(": ")
    for container in objects(at(pod, "status", "containerStatuses")):
        waiting = mapping(at(container, "state", "waiting"))
        reason = text(waiting.get("reason"))
        if reason in IMAGE_WAITING_REASONS:
            words = f"{reason} ({text(container.get('name'))})"
            message = text(waiting.get("message"))
            return f"{words}: {message}" if message else words
    return None


# What changes in a waiting message without a change of meaning: a back-off's duration
# ("back-off 20s", "1m20s"), a timestamp. Masked before two messages are compared, so a
# pod update that only moves these costs no status write (`same_meaning`).
_VOLATILE = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"
    r"|\b(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+\b")


def same_meaning(message: str, other: str) -> bool:
    """Whether two waiting messages say the same once their volatile parts (`_VOLATILE`)
    are masked."""
    return _VOLATILE.sub("#", message) == _VOLATILE.sub("#", other)


def _exit_code(terminated: Any) -> int | None:
    """A terminated container's (or step's) exit code, None when it did not terminate."""
    if not isinstance(terminated, dict):
        return None
    code = terminated.get("exitCode", 0)
    return code if isinstance(code, int) else 0


def _results(status: dict[str, Any]) -> dict[str, str]:
    """String results of a TaskRun (array and object results are not ours)."""
    return {
        result["name"]: result["value"].strip()
        for result in objects(status.get("results"))
        if isinstance(result.get("name"), str) and isinstance(result.get("value"), str)
    }


def _termination_results(steps: list[dict[str, Any]]) -> dict[str, str]:
    """Results the failed steps wrote: Tekton does not publish results of a failed TaskRun
    in status.results, but they remain in each step's termination message (a JSON list of
    {key, value}), where Shipwright reads them too (a later step's win; a message that
    is not such a list is skipped whole, as Go's decoding fails on it)."""
    found: dict[str, str] = {}
    for step in steps:
        terminated = step.get("terminated") if isinstance(step, dict) else None
        if _exit_code(terminated) in (None, 0):
            continue
        for key, value in _message_results(terminated).items():
            if key in (RESULT_ERROR_REASON, RESULT_ERROR_MESSAGE):
                found[key] = value
    return found


def _last_step_ended_well(status: dict[str, Any]) -> bool:
    """Whether the run's last step terminated with exit code 0 (as Tekton recorded it)."""
    steps = objects(status.get("steps"))
    code = at(steps[-1], "terminated", "exitCode") if steps else None
    return type(code) is int and code == 0


def _step_results(status: dict[str, Any]) -> dict[str, str]:
    """The results in the steps' termination messages, a later step's winning: where
    Tekton reads them, for a run whose status.results it has not published."""
    found: dict[str, str] = {}
    for step in objects(status.get("steps")):
        found.update(_message_results(step.get("terminated")))
    return found


def _pod_results(pod: dict[str, Any] | None) -> dict[str, str]:
    """The results a completed pod's containers wrote, from their termination messages
    (where Tekton reads them, for a run it has not seen end), a later container's
    winning; what `_results` gives for a finished TaskRun."""
    found: dict[str, str] = {}
    for container in objects(at(pod, "status", "containerStatuses")):
        found.update(_message_results(at(container, "state", "terminated")))
    return found


def _message_results(terminated: Any) -> dict[str, str]:
    """key -> value (trimmed) of the results in a terminated container's (or step's)
    message, a JSON list of Tekton's RunResult; none for a message that is not such a
    list, skipped whole as Go's decoding fails on it."""
    try:
        entries = json.loads(text(mapping(terminated).get("message")) or "null")
    except ValueError:
        return {}
    if entries is None:
        return {}
    if not isinstance(entries, list) or not all(_run_result(e) for e in entries):
        return {}
    return {entry["key"]: (entry.get("value") or "").strip() for entry in entries
            if entry and entry.get("key")}


def _run_result(entry: Any) -> bool:
    """Whether Go decodes `entry` as Tekton's RunResult (key and value strings, type a
    number; null is an empty one)."""
    if entry is None:
        return True
    return (isinstance(entry, dict)
            and isinstance(entry.get("key", ""), (str, type(None)))
            and isinstance(entry.get("value", ""), (str, type(None)))
            and isinstance(entry.get("type", 0), (int, type(None)))
            and not isinstance(entry.get("type", 0), bool))


def _digest(results: dict[str, str]) -> str | None:
    # A longer value is not a digest, and writing it would get the status rejected.
    digest = results.get(RESULT_IMAGE_DIGEST)
    return digest if digest and len(digest) <= DIGEST_MAX else None


# --- PipelineRuns (BUILDRUN_EXECUTOR=PipelineRun)


def child_taskrun_names(pipelinerun: dict[str, Any]) -> list[str]:
    """The PipelineRun's TaskRuns, in Tekton's order (status.childReferences), as
    Shipwright's GetUnderlyingTaskRuns and GetResults read them."""
    return [ref["name"] for ref in objects(at(pipelinerun, "status", "childReferences"))
            if ref.get("kind") == TASKRUNS.kind and isinstance(ref.get("name"), str)]


def failed_child(children: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first child TaskRun whose Succeeded condition is False: the one Shipwright's
    extractPipelineRunFailureDetails reports (its pod tells eviction apart)."""
    return next((tr for tr in children
                 if (succeeded_condition(tr.get("status")) or {}).get("status") == "False"),
                None)


def pipelinerun_pod_name(children: list[dict[str, Any]]) -> str:
    """The pod Shipwright's metrics read for a PipelineRun: its first TaskRun's."""
    return text(at(children[0], "status", "podName")) if children else ""


def outcome_from_pipelinerun(
    pipelinerun: dict[str, Any], children: list[dict[str, Any]],
    pod: dict[str, Any] | None = None, *, canceled: bool = False,
) -> Outcome | None:
    """The BuildRun outcome a PipelineRun gives, or None while it has not finished; as
    Shipwright v0.20.13 sets it (resources/conditions.go,
    UpdateBuildRunUsingPipelineRunCondition and extractPipelineRunFailureDetails;
    tests/oracle/test_status_parity.py runs both).

    `children` are its TaskRuns that could be read, in status.childReferences order (a
    deleted one is left out, as Shipwright skips it); their string results make
    status.output and status.source, as GetResults does when the PipelineRun has none of
    its own. `pod` is the first failed child's pod, None when it is gone. Tekton's reason
    and message are kept but for PipelineRunTimeout (BuildRunTimeout), a cancel the
    BuildRun asked for (BuildRunCanceled) and Failed, described by the first failed
    TaskRun's pod (`failed_in_pod`) with Shipwright's PipelineRunFailed for a plain
    failure.
    """
    status = mapping(pipelinerun.get("status"))
    condition = succeeded_condition(status) or {}
    cond_status = condition.get("status")
    if cond_status not in ("True", "False"):
        return None
    meta = mapping(pipelinerun.get("metadata"))
    results = _results(status)
    if not results:
        for child in children:
            results.update(_results(mapping(child.get("status"))))
    extra = {"output": output_from_results(results), "source": source_from_results(results)}
    tekton_reason = text(condition.get("reason"))
    reason, message = tekton_reason, text(condition.get("message"))
    if cond_status == "True":
        # Tekton says Succeeded, or Completed when a task was skipped.
        return _succeeded("PipelineRun", reason, message, canceled, results, extra)

    details: dict[str, Any] | None = None
    if tekton_reason == PIPELINE_RUN_TIMEOUT:
        timeout = _duration(at(pipelinerun, "spec", "timeouts", "pipeline"))
        reason = BUILD_RUN_TIMEOUT
        if timeout is not None:
            message = timeout_message(_buildrun_label(meta), timeout)
    elif tekton_reason in (PIPELINE_RUN_CANCELLED, CANCELLED) and canceled:
        # Tekton v1 writes Cancelled; Shipwright's code looks for PipelineRunCancelled, a
        # reason Tekton does not write, and so ends a canceled BuildRun "Cancelled" (README,
        # "Status from Tekton").
        reason = BUILD_RUN_CANCELED
        message = "The BuildRun and underlying PipelineRun were canceled successfully."
    elif tekton_reason == FAILED and status.get("completionTime"):
        reason, message, details = _pipelinerun_failure(pipelinerun, children, pod)
    return Outcome("False", truncate(reason, REASON_MAX), truncate(message, MESSAGE_MAX),
                   details, None, **extra)


def _pipelinerun_failure(pipelinerun: dict[str, Any], children: list[dict[str, Any]],
                         pod: dict[str, Any] | None
                         ) -> tuple[str, str, dict[str, Any] | None]:
    """Shipwright's extractPipelineRunFailureDetails: the first failed TaskRun's pod says
    what went wrong, else PipelineRunFailed."""
    name = text(at(pipelinerun, "metadata", "name"))
    if not at(pipelinerun, "status", "childReferences"):
        return PIPELINE_RUN_FAILED, f"PipelineRun {name} failed with no child TaskRuns", None
    failed_run = failed_child(children)
    if failed_run is None:
        return PIPELINE_RUN_FAILED, f"PipelineRun {name} failed", None
    if pod is None:
        pod_name = text(at(failed_run, "status", "podName"))
        namespace = text(at(failed_run, "metadata", "namespace"))
        return (PIPELINE_RUN_FAILED,
                f"PipelineRun {name} failed, pod {namespace}/{pod_name} not found", None)
    reason, message, details = failed_in_pod(pod, _PIPELINE_WORDS, name)
    return (PIPELINE_RUN_FAILED if reason == FAILED else reason), message, details
