"""controller.buildrun.outcomes: what a TaskRun or PipelineRun, finished or not, makes of
its BuildRun. The condition it is written with: test_status_writes.py; the reason
constants: test_reasons.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.buildrun import reasons
from controller.buildrun.executors import PIPELINERUN, TASKRUN
from controller.buildrun.outcomes import (
    MESSAGE_MAX,
    REASON_MAX,
    Outcome,
    child_taskrun_names,
    failed_child,
    outcome_from_pipelinerun,
    outcome_from_taskrun,
    pending_timeout_message,
    run_finished,
    running_reason,
    same_meaning,
    waiting_words,
)
from controller.runtime.kube import PODS
from controller.shipwright.resources import PIPELINERUNS, TASKRUNS
from tests.unit.test_informer_path import OBJECTS

T1 = "2026-01-01T00:05:00Z"

# --- outcome_from_taskrun


def taskrun(
    status: str,
    reason: str = "",
    message: str = "",
    **extra: Any,
) -> dict[str, Any]:
    condition = {"type": "Succeeded", "status": status, "reason": reason, "message": message}
    return {
        "metadata": {"name": "br-1234abcd", "namespace": "team-a"},
        "spec": extra.pop("spec", {}),
        "status": {"conditions": [condition], "podName": "br-1234abcd-pod", **extra},
    }


def step(name: str, exit_code: int, reason: str = "Completed", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "container": f"step-{name}",
        "terminated": {"exitCode": exit_code, "reason": reason, **extra},
    }


@pytest.mark.parametrize(
    "tr",
    [
        {"metadata": {"name": "x"}},
        {"metadata": {"name": "x"}, "status": {"conditions": []}},
        taskrun("Unknown", "Running"),
        taskrun("Unknown", "Pending"),
    ],
)
def test_outcome_is_none_while_unfinished(tr: dict[str, Any]) -> None:
    assert outcome_from_taskrun(tr) is None


def test_outcome_succeeded_with_digest() -> None:
    results = [
        {"name": "shp-image-digest", "type": "string", "value": "sha256:abc\n"},
        {"name": "other", "type": "array", "value": ["x"]},
    ]
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded", "All done", results=results))
    assert outcome == Outcome("True", reasons.SUCCEEDED, "All done", None, "sha256:abc",
                              output={"digest": "sha256:abc"})


def test_outcome_succeeded_keeps_tektons_words() -> None:
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded"))
    assert outcome == Outcome("True", reasons.SUCCEEDED, "", None, None)
    late = outcome_from_taskrun(taskrun("True", "Succeeded", "All done"), canceled=True)
    assert late is not None and late.message == (
        "The TaskRun completed before the request to cancel the TaskRun could be processed.")


def test_outcome_ignores_oversized_digest() -> None:
    results = [{"name": "shp-image-digest", "value": "x" * 257}]
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded", results=results))
    assert outcome is not None
    assert outcome.digest is None


def test_outcome_timeout() -> None:
    tr = taskrun("False", reasons.TASK_RUN_TIMEOUT, "timed out", spec={"timeout": "600s"})
    tr["metadata"]["labels"] = {"buildrun.shipwright.io/name": "br"}
    outcome = outcome_from_taskrun(tr)
    assert outcome is not None
    assert (outcome.status, outcome.reason) == ("False", reasons.BUILD_RUN_TIMEOUT)
    # Shipwright's words and Go's duration format (conditions.go: taskRun.Spec.Timeout).
    assert outcome.message == "BuildRun br failed to finish within 10m0s"
    assert outcome.failure_details is None


def test_outcome_cancelled_is_buildrun_canceled_only_when_the_buildrun_asked() -> None:
    tr = taskrun("False", reasons.TASK_RUN_CANCELLED, "TaskRun \"x\" was cancelled")
    outcome = outcome_from_taskrun(tr, canceled=True)
    assert outcome == Outcome("False", reasons.BUILD_RUN_CANCELED,
                              "The BuildRun and underlying TaskRun were canceled successfully.",
                              None, None)
    # Someone else cancelled the TaskRun: Tekton's reason and words, as Shipwright keeps them.
    outcome = outcome_from_taskrun(tr)
    assert outcome == Outcome("False", reasons.TASK_RUN_CANCELLED,
                              "TaskRun \"x\" was cancelled", None, None)


def pod(*containers: tuple[str, int, str], **status: Any) -> dict[str, Any]:
    """The TaskRun's pod: (container, exit code, terminated reason) in spec order; the
    statuses listed in reverse, as the kubelet does not sort them."""
    return {
        "metadata": {"name": "br-1234abcd-pod", "namespace": "team-a"},
        "spec": {"containers": [{"name": name} for name, _, _ in containers]},
        "status": {"containerStatuses": [
            {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}
            for name, code, reason in reversed(containers)], **status},
    }


DONE: dict[str, Any] = {"completionTime": T1}
LOGS = "kubectl --namespace team-a logs br-1234abcd-pod"


@pytest.mark.parametrize("tekton_reason", ["Failed", "StepFailed"])
def test_outcome_failed_step_points_at_its_logs(tekton_reason: str) -> None:
    steps = [step("source", 0), step("build", 2, "Error"), step("push", 1, "Error")]
    the_pod = pod(("step-source", 0, "Completed"), ("step-build", 2, "Error"),
                  ("step-push", 1, "Error"))
    outcome = outcome_from_taskrun(
        taskrun("False", tekton_reason, "step failed", steps=steps, **DONE), the_pod)
    assert outcome == Outcome(
        "False", reasons.FAILED, "buildrun step step-build failed, for detailed information: "
        f"{LOGS} --container=step-build",
        {"location": {"pod": "br-1234abcd-pod", "container": "step-build"}}, None)


def test_outcome_out_of_memory() -> None:
    the_pod = pod(("step-prepare", 0, "Completed"), ("step-build", 137, "OOMKilled"))
    for tekton_reason in ("Failed", reasons.STEP_OOM):
        outcome = outcome_from_taskrun(taskrun("False", tekton_reason, **DONE), the_pod)
        assert outcome is not None
        assert outcome.reason == reasons.STEP_OUT_OF_MEMORY
        assert outcome.message == ("buildrun step step-build failed due to out-of-memory, for "
                                   f"detailed information: {LOGS} --container=step-build")
        assert outcome.failure_details is not None
        assert outcome.failure_details["location"]["container"] == "step-build"


@pytest.mark.parametrize("tekton_reason", ["Failed", reasons.POD_EVICTED])
def test_outcome_pod_evicted_beats_out_of_memory(tekton_reason: str) -> None:
    the_pod = pod(("step-build", 137, "OOMKilled"), reason="Evicted",
                  message="The node was low on resource: memory.")
    outcome = outcome_from_taskrun(taskrun("False", tekton_reason, **DONE), the_pod)
    assert outcome is not None
    assert outcome.reason == reasons.POD_EVICTED
    assert outcome.message == "The node was low on resource: memory."


def test_outcome_pod_without_a_failed_container_is_an_unexpected_error() -> None:
    outcome = outcome_from_taskrun(taskrun("False", "Failed", "it broke", **DONE),
                                   pod(("step-build", 0, "Completed"), phase="Failed"))
    assert outcome == Outcome(
        "False", reasons.FAILED, "buildrun failed due to an unexpected error in pod "
        f"br-1234abcd-pod: for detailed information: {LOGS} --all-containers",
        {"location": {"pod": "br-1234abcd-pod"}}, None)


def test_outcome_pod_gone() -> None:
    outcome = outcome_from_taskrun(taskrun("False", reasons.STEP_OOM, "oom", **DONE))
    assert outcome == Outcome("False", reasons.FAILED,
                              "buildrun failed, pod team-a/br-1234abcd-pod not found", None, None)


def test_outcome_without_completion_time_keeps_tektons_message() -> None:
    outcome = outcome_from_taskrun(taskrun("False", reasons.STEP_FAILED, "\"step-build\" "
                                           "exited with code 1"))
    assert outcome is not None
    assert (outcome.reason, outcome.message) == (reasons.FAILED,
                                                 '"step-build" exited with code 1')


@pytest.mark.parametrize("tekton_reason", [
    "TaskRunImagePullFailed", "CreateContainerConfigError", "PodCreationFailed",
    "ExceededResourceQuota", "InvalidParamValue", "TaskRunValidationFailed", "SidecarOOM",
    "InitContainerFailed", "SomethingNew"])
def test_outcome_keeps_tektons_own_failure_reasons(tekton_reason: str) -> None:
    outcome = outcome_from_taskrun(taskrun("False", tekton_reason, "what Tekton says", **DONE),
                                   pod(("step-build", 1, "Error")))
    assert outcome == Outcome("False", tekton_reason, "what Tekton says", None, None)


def test_outcome_failure_details_from_termination_message() -> None:
    # Real Tekton keeps a failed TaskRun's results only in the step's termination message.
    message = json.dumps(
        [
            {"key": "shp-error-reason", "value": "GitRemotePrivate", "type": 1},
            {"key": "shp-error-message", "value": "repository is private\n", "type": 1},
        ]
    )
    steps = [step("source", 1, "Error", message=message)]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps, **DONE),
                                   pod(("step-source", 1, "Error")))
    assert outcome is not None
    assert outcome.failure_details == {
        "reason": "GitRemotePrivate",
        "message": "repository is private",
        "location": {"pod": "br-1234abcd-pod", "container": "step-source"},
    }
    # Not for StepOOM or PodEvicted: Shipwright's UpdateBuildRunUsingTaskFailures reads
    # Failed and StepFailed only.
    outcome = outcome_from_taskrun(taskrun("False", reasons.STEP_OOM, steps=steps, **DONE),
                                   pod(("step-source", 137, "OOMKilled")))
    assert outcome is not None
    assert outcome.failure_details == {
        "location": {"pod": "br-1234abcd-pod", "container": "step-source"}}


@pytest.mark.parametrize("message", ["not json", '{"key": "x"}', "[1, 2]",
                                     '[{"key": "shp-error-reason", "value": 3}]'])
def test_outcome_ignores_unreadable_termination_message(message: str) -> None:
    steps = [step("build", 1, "Error", message=message)]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps, **DONE))
    assert outcome is not None
    assert outcome.failure_details == {"location": {"pod": "br-1234abcd-pod"}}


def test_outcome_failure_details_bounded() -> None:
    message = json.dumps([{"key": "shp-error-reason", "value": "R" * 1000},
                          {"key": "shp-error-message", "value": "M" * 100_000}])
    steps = [step("build", 1, "Error", message=message)]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps))
    assert outcome is not None
    assert outcome.failure_details is not None
    assert len(outcome.failure_details["reason"]) == 256
    assert len(outcome.failure_details["message"]) == MESSAGE_MAX


# --- running_reason


@pytest.mark.parametrize(
    ("tr", "expected"),
    [
        (
            taskrun("Unknown", "Running", "Not all Steps have completed"),
            (reasons.RUNNING, "Not all Steps have completed"),
        ),
        # Tekton's reason and message as they are, an empty one too (as Shipwright).
        (taskrun("Unknown", "Running"), (reasons.RUNNING, "")),
        (
            taskrun("Unknown", "Pending", 'pod status "Initialized":"False"'),
            (reasons.PENDING, 'pod status "Initialized":"False"'),
        ),
        (taskrun("Unknown", "Started"), ("Started", "")),
        (taskrun("Unknown", "ExceededNodeResources", "TaskRun Pod exceeded available resources"),
         ("ExceededNodeResources", "TaskRun Pod exceeded available resources")),
        (taskrun("Unknown", "ToBeRetried", "retry"), ("ToBeRetried", "retry")),
        ({"metadata": {"name": "tr"}}, (reasons.PENDING, "TaskRun tr has not started yet")),
    ],
)
def test_running_reason(tr: dict[str, Any], expected: tuple[str, str]) -> None:
    assert running_reason(tr) == expected




@pytest.mark.parametrize(("status", "finished"), [
    (None, False),
    ({}, False),
    ({"conditions": [{"type": "Succeeded", "status": "Unknown"}]}, False),
    ({"conditions": [{"type": "Succeeded", "status": "True"}]}, True),
    ({"conditions": [{"type": "Succeeded", "status": "False"}]}, True),
    ({"conditions": [{"type": "Ready", "status": "True"}]}, False),
])
def test_taskrun_finished(status: dict[str, Any] | None, finished: bool) -> None:
    assert run_finished({"status": status}) is finished


# --- results -> status.output and status.source


def test_output_and_source_from_results() -> None:
    results = [
        {"name": "shp-image-digest", "value": "sha256:abc"},
        {"name": "shp-image-size", "value": "1234\n"},
        {"name": "shp-image-vulnerabilities", "value": "CVE-1:c,CVE-2:H,CVE-3:x,GHSA-4"},
        {"name": "shp-source-default-commit-sha", "value": "0123abc"},
        {"name": "shp-source-default-commit-author", "value": "Ann <ann@example.com>"},
        {"name": "shp-source-default-branch-name", "value": "main"},
        {"name": "shp-source-default-source-timestamp", "value": "1691234567"},
    ]
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded", results=results))
    assert outcome is not None
    assert outcome.output == {"digest": "sha256:abc", "size": 1234, "vulnerabilities": [
        {"id": "CVE-1", "severity": "critical"}, {"id": "CVE-2", "severity": "high"},
        {"id": "CVE-3", "severity": "unknown"}, {"id": "GHSA-4", "severity": "unknown"}]}
    assert outcome.source == {
        "git": {"commitSha": "0123abc", "commitAuthor": "Ann <ann@example.com>",
                "branchName": "main"},
        "timestamp": "2023-08-05T11:22:47Z",
    }


def test_bundle_source_and_bad_numbers() -> None:
    results = [
        {"name": "shp-image-size", "value": "big"},
        {"name": "shp-source-default-image-digest", "value": "sha256:def"},
        {"name": "shp-source-default-source-timestamp", "value": "yesterday"},
    ]
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded", results=results))
    assert outcome is not None
    assert outcome.output is None
    assert outcome.source == {"ociArtifact": {"digest": "sha256:def"}}


def test_timestamp_alone_makes_no_source() -> None:
    """As Shipwright: the timestamp is set only on a source result it already has."""
    results = [{"name": "shp-source-default-source-timestamp", "value": "1691234567"}]
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded", results=results))
    assert outcome is not None and outcome.source is None


def test_vulnerabilities_found_when_image_processing_exits_22() -> None:
    results = [{"name": "shp-image-vulnerabilities", "value": "CVE-1:C"}]
    tr = taskrun("False", "Failed", "step failed", results=results,
                 steps=[step("build", 0), step("image-processing", 22)], **DONE)
    outcome = outcome_from_taskrun(tr, pod(("step-build", 0, "Completed"),
                                           ("step-image-processing", 22, "Error")))
    assert outcome is not None
    assert outcome.reason == reasons.VULNERABILITIES_FOUND
    assert outcome.message == (
        "Vulnerabilities have been found in the image which can be seen in the buildrun "
        f"status. For detailed information,see {LOGS} --container=step-image-processing")
    assert outcome.output == {"vulnerabilities": [{"id": "CVE-1", "severity": "critical"}]}


def test_another_exit_code_of_image_processing_is_a_plain_failure() -> None:
    tr = taskrun("False", "Failed", steps=[step("image-processing", 1)], **DONE)
    outcome = outcome_from_taskrun(tr, pod(("step-image-processing", 1, "Error")))
    assert outcome is not None and outcome.reason == reasons.FAILED


# --- outcome_from_pipelinerun (BUILDRUN_EXECUTOR=PipelineRun)

DIGEST = "sha256:" + "12" * 32


def pipelinerun(status: str, reason: str = "", message: str = "", *,
                children: tuple[str, ...] = ("pr-source-acquisition", "pr-build-strategy",
                                             "pr-output-image"),
                **extra: Any) -> dict[str, Any]:
    condition = {"type": "Succeeded", "status": status, "reason": reason, "message": message}
    refs = [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": c} for c in children]
    return {
        "kind": "PipelineRun",
        "metadata": {"name": "pr", "namespace": "team-a",
                     "labels": {"buildrun.shipwright.io/name": "br"}},
        "spec": extra.pop("spec", {"timeouts": {"pipeline": "1h0m0s"}}),
        "status": {"conditions": [condition], "childReferences": refs, **extra},
    }


def child(name: str, status: str = "True", reason: str = "Succeeded",
          **extra: Any) -> dict[str, Any]:
    tr = taskrun(status, reason, **extra)
    tr["metadata"]["name"] = name
    tr["status"]["podName"] = f"{name}-pod"
    return tr


def test_child_taskrun_names_are_its_taskruns_in_order() -> None:
    pr = pipelinerun("Unknown", "Running")
    pr["status"]["childReferences"].insert(1, {"kind": "CustomRun", "name": "not-a-taskrun"})
    assert child_taskrun_names(pr) == ["pr-source-acquisition", "pr-build-strategy",
                                       "pr-output-image"]
    assert child_taskrun_names({"status": {}}) == []


@pytest.mark.parametrize("reason", ["Started", "Running", "PipelineRunPending"])
def test_pipelinerun_outcome_is_none_while_unfinished(reason: str) -> None:
    assert outcome_from_pipelinerun(pipelinerun("Unknown", reason), []) is None
    assert outcome_from_pipelinerun({"metadata": {"name": "pr"}}, []) is None


def test_pipelinerun_running_reason_names_the_pipelinerun() -> None:
    assert running_reason({"kind": "PipelineRun", "metadata": {"name": "pr"}}) == (
        reasons.PENDING, "PipelineRun pr has not started yet")
    running = pipelinerun("Unknown", "Running", "Tasks Completed: 1 (Failed: 0)")
    assert running_reason(running) == (reasons.RUNNING, "Tasks Completed: 1 (Failed: 0)")


@pytest.mark.parametrize("tekton_reason", ["Succeeded", "Completed"])
def test_pipelinerun_succeeded_takes_results_from_its_taskruns(tekton_reason: str) -> None:
    """As GetResults: the PipelineRun's own results if it has any, else every child
    TaskRun's, in childReferences order. Tekton's reason is kept, as Shipwright keeps it."""
    children = [
        child("pr-source-acquisition", results=[
            {"name": "shp-source-default-commit-sha", "value": "abc"},
            {"name": "shp-source-default-source-timestamp", "value": "1700000000"}]),
        child("pr-build-strategy"),
        child("pr-output-image", results=[{"name": "shp-image-digest", "value": DIGEST},
                                          {"name": "shp-image-size", "value": "42"}]),
    ]
    outcome = outcome_from_pipelinerun(pipelinerun("True", tekton_reason, "done"), children)
    assert outcome == Outcome(
        "True", tekton_reason, "done", None, DIGEST,
        output={"digest": DIGEST, "size": 42},
        source={"git": {"commitSha": "abc"}, "timestamp": "2023-11-14T22:13:20Z"})
    own = pipelinerun("True", "Succeeded", results=[
        {"name": "shp-image-digest", "value": "sha256:own"}])
    outcome = outcome_from_pipelinerun(own, children)
    assert outcome is not None and outcome.output == {"digest": "sha256:own"}
    assert outcome.source is None  # the PipelineRun's own results only


def test_pipelinerun_timeout_in_shipwrights_words() -> None:
    pr = pipelinerun("False", reasons.PIPELINE_RUN_TIMEOUT, "PipelineRun pr failed to finish",
                     spec={"timeouts": {"pipeline": "90s"}})
    outcome = outcome_from_pipelinerun(pr, [child("pr-source-acquisition", "False",
                                                  "TaskRunCancelled")])
    assert outcome == Outcome("False", reasons.BUILD_RUN_TIMEOUT,
                              "BuildRun br failed to finish within 1m30s", None, None)
    no_timeout = pipelinerun("False", reasons.PIPELINE_RUN_TIMEOUT, "took too long", spec={})
    outcome = outcome_from_pipelinerun(no_timeout, [])
    assert outcome is not None and outcome.message == "took too long"


@pytest.mark.parametrize("tekton_reason", ["Cancelled", reasons.PIPELINE_RUN_CANCELLED])
def test_pipelinerun_cancelled(tekton_reason: str) -> None:
    outcome = outcome_from_pipelinerun(pipelinerun("False", tekton_reason, "cancelled"), [],
                                       canceled=True)
    assert outcome == Outcome(
        "False", reasons.BUILD_RUN_CANCELED,
        "The BuildRun and underlying PipelineRun were canceled successfully.", None, None)
    # Someone else cancelled it: Tekton's reason, as Shipwright keeps it.
    outcome = outcome_from_pipelinerun(pipelinerun("False", tekton_reason, "cancelled"), [])
    assert outcome == Outcome("False", tekton_reason, "cancelled", None, None)


PR_DONE: dict[str, Any] = {"completionTime": T1}


def test_pipelinerun_failed_step_is_pipelinerun_failed_with_the_pods_words() -> None:
    children = [child("pr-source-acquisition"),
                child("pr-build-strategy", "False", "Failed",
                      steps=[step("build", 3, "Error")])]
    the_pod = pod(("step-build", 3, "Error"))
    the_pod["metadata"]["name"] = "pr-build-strategy-pod"
    outcome = outcome_from_pipelinerun(pipelinerun("False", "Failed", "Tasks Completed: 2 "
                                                   "(Failed: 1)", **PR_DONE), children, the_pod)
    assert outcome == Outcome(
        "False", reasons.PIPELINE_RUN_FAILED,
        "PipelineRun pr failed in step step-build, for detailed information: kubectl "
        "--namespace team-a logs pr-build-strategy-pod --container=step-build",
        {"location": {"pod": "pr-build-strategy-pod", "container": "step-build"}}, None)


def test_pipelinerun_failure_reads_the_first_failed_taskrun_and_its_pod() -> None:
    children = [child("pr-source-acquisition", "False", "Failed",
                      steps=[step("source-default", 1, "OOMKilled")]),
                child("pr-build-strategy", "False", "Failed",
                      steps=[step("build", 2, "Error")])]
    assert failed_child(children) is children[0]
    failed = pipelinerun("False", "Failed", **PR_DONE)
    oom = pod(("step-source-default", 137, "OOMKilled"))
    outcome = outcome_from_pipelinerun(failed, children, oom)
    assert outcome is not None and outcome.reason == reasons.STEP_OUT_OF_MEMORY
    assert outcome.message.startswith("PipelineRun pr failed due to out-of-memory in step "
                                      "step-source-default")
    evicted = pod(reason="Evicted", message="The node was low on memory.")
    outcome = outcome_from_pipelinerun(failed, children, evicted)
    assert outcome == Outcome("False", reasons.POD_EVICTED, "The node was low on memory.",
                              {"location": {"pod": "br-1234abcd-pod"}}, None)
    outcome = outcome_from_pipelinerun(failed, children, None)
    assert outcome == Outcome(
        "False", reasons.PIPELINE_RUN_FAILED,
        "PipelineRun pr failed, pod team-a/pr-source-acquisition-pod not found", None, None)


def test_pipelinerun_failed_without_a_failed_taskrun() -> None:
    refused = pipelinerun("False", "Failed", "bad param", children=(), **PR_DONE)
    outcome = outcome_from_pipelinerun(refused, [])
    assert outcome == Outcome("False", reasons.PIPELINE_RUN_FAILED,
                              "PipelineRun pr failed with no child TaskRuns", None, None)
    outcome = outcome_from_pipelinerun(pipelinerun("False", "Failed", "x", **PR_DONE),
                                       [child("pr-source-acquisition")])
    assert outcome == Outcome("False", reasons.PIPELINE_RUN_FAILED, "PipelineRun pr failed",
                              None, None)
    # Tekton's own reasons are kept with its words, as Shipwright keeps them.
    invalid = pipelinerun("False", "PipelineValidationFailed", "bad param", children=())
    assert outcome_from_pipelinerun(invalid, []) == Outcome(
        "False", "PipelineValidationFailed", "bad param", None, None)


# --- whatever a run and its pod hold (issue 39: a TaskRun's status is schemaless in older
# Tekton releases), what a reconcile reads off them does not raise, and what it would write
# fits the BuildRun's CRD (strings within its limits)

def _fits(outcome: Outcome | None) -> None:
    if outcome is None:
        return
    assert outcome.status in ("True", "False")
    assert isinstance(outcome.reason, str) and len(outcome.reason) <= REASON_MAX
    assert isinstance(outcome.message, str) and len(outcome.message) <= MESSAGE_MAX
    assert outcome.digest is None or isinstance(outcome.digest, str)


@settings(max_examples=300, deadline=None)
@given(run=OBJECTS[TASKRUNS], pod=st.none() | OBJECTS[PODS], canceled=st.booleans())
def test_whatever_a_taskrun_holds_it_is_read_without_raising(
        run: dict[str, Any], pod: dict[str, Any] | None, canceled: bool) -> None:
    _fits(TASKRUN.outcome(run, [], pod, canceled))
    reason, message = running_reason(run, pod)
    assert isinstance(reason, str) and 0 < len(reason) <= REASON_MAX
    assert isinstance(message, str)
    assert len(message) <= MESSAGE_MAX + 100  # our own words around a truncated name
    waiting_words(pod)
    TASKRUN.failed_pod(run, [])
    TASKRUN.pod_name(run, [])
    TASKRUN.timeout(run)
    TASKRUN.cancelled(run)


@settings(max_examples=300, deadline=None)
@given(run=OBJECTS[PIPELINERUNS], children=st.lists(OBJECTS[TASKRUNS], max_size=2),
       pod=st.none() | OBJECTS[PODS], canceled=st.booleans())
def test_whatever_a_pipelinerun_holds_it_is_read_without_raising(
        run: dict[str, Any], children: list[dict[str, Any]], pod: dict[str, Any] | None,
        canceled: bool) -> None:
    PIPELINERUN.children(run)
    PIPELINERUN.failed_pod(run, children)
    PIPELINERUN.pod_name(run, children)
    PIPELINERUN.timeout(run)
    _fits(PIPELINERUN.outcome(run, children, pod, canceled))
    running_reason(run)


# --- why a run waits: its pod's words (issue 43)

UNSCHEDULABLE = ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are "
                 "available: 1 No preemption victims found for incoming pod.")


def pending_pod(*, scheduled: str | None = None, waiting: dict[str, str] | None = None,
                container: str = "step-build") -> dict[str, Any]:
    """A run's pod as the kube-scheduler or the kubelet leave it when it cannot start."""
    status: dict[str, Any] = {"phase": "Pending", "conditions": []}
    if scheduled is not None:
        status["conditions"].append({"type": "PodScheduled", "status": "False",
                                     "reason": "Unschedulable", "message": scheduled,
                                     "lastProbeTime": None,
                                     "lastTransitionTime": "2026-12-06T08:00:00Z"})
    else:
        status["conditions"].append({"type": "PodScheduled", "status": "True"})
    if waiting is not None:
        status["containerStatuses"] = [
            {"name": "step-source-default", "state": {"running": {}}},
            {"name": container, "state": {"waiting": waiting}}]
    return {"metadata": {"name": "br-1234abcd-pod", "namespace": "team-a"}, "status": status}


def test_an_unschedulable_pod_is_said_in_the_schedulers_words() -> None:
    run = taskrun("Unknown", "ExceededNodeResources", "TaskRun Pod exceeded available resources")
    # Tekton's reason kept, the scheduler's words for the message.
    assert running_reason(run, pending_pod(scheduled=UNSCHEDULABLE)) == (
        "ExceededNodeResources", f"FailedScheduling: {UNSCHEDULABLE}")
    # Without the pod (not cached yet), Tekton's words.
    assert running_reason(run) == (
        "ExceededNodeResources", "TaskRun Pod exceeded available resources")


def test_an_image_that_cannot_be_pulled_is_said_in_the_kubelets_words() -> None:
    run = taskrun("Unknown", "PullImageFailed", 'build step "step-build" is pending with '
                  'reason "Back-off pulling image \\"r/x:1\\""')
    pod = pending_pod(waiting={"reason": "ImagePullBackOff",
                               "message": 'Back-off pulling image "r/x:1"'})
    assert running_reason(run, pod) == (
        "PullImageFailed", 'ImagePullBackOff (step-build): Back-off pulling image "r/x:1"')
    assert waiting_words(pending_pod(waiting={"reason": "ErrImagePull"})) == (
        "ErrImagePull (step-build)")


@pytest.mark.parametrize("pod", [
    None,
    pending_pod(),
    # Waiting for another reason than an image: Tekton's words say it.
    pending_pod(waiting={"reason": "ContainerCreating", "message": "x"}),
    {"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                "reason": "SchedulingGated"}]}},
])
def test_a_pod_that_waits_for_nothing_of_the_two_keeps_tektons_words(
        pod: dict[str, Any] | None) -> None:
    assert waiting_words(pod) is None
    run = taskrun("Unknown", "Pending", 'pod status "Initialized":"False"')
    assert running_reason(run, pod) == ("Pending", 'pod status "Initialized":"False"')


def test_a_running_run_keeps_tektons_words_whatever_its_pod_said() -> None:
    run = taskrun("Unknown", "Running", "Not all Steps in the Task have finished executing")
    assert running_reason(run, pending_pod(scheduled=UNSCHEDULABLE)) == (
        "Running", "Not all Steps in the Task have finished executing")


@pytest.mark.parametrize(("a", "b", "same"), [
    ("Back-off 10s pulling image", "Back-off 20s pulling image", True),
    ("back-off 1m20s restarting", "back-off 5m0s restarting", True),
    ("at 2026-12-06T08:00:00Z", "at 2026-12-06T08:00:07.5+01:00", True),
    (f"FailedScheduling: {UNSCHEDULABLE}", f"FailedScheduling: {UNSCHEDULABLE}", True),
    # A change of meaning: another count of nodes, another reason, another image.
    ("0/1 nodes are available: 1 Insufficient cpu.",
     "0/2 nodes are available: 2 Insufficient cpu.", False),
    ("ErrImagePull (step-build): x", "ImagePullBackOff (step-build): x", False),
    ('Back-off pulling image "r/x:1"', 'Back-off pulling image "r/x:2"', False),
])
def test_same_meaning_masks_only_durations_and_timestamps(a: str, b: str, same: bool) -> None:
    assert same_meaning(a, b) is same


def test_the_pending_timeout_message_says_how_long_and_why() -> None:
    assert pending_timeout_message("br", 90, "ExceededNodeResources", "FailedScheduling: x") == (
        "BuildRun br did not start running within 1m30s; it waited: ExceededNodeResources: "
        "FailedScheduling: x")
    assert pending_timeout_message("br", 600, "Started", "") == (
        "BuildRun br did not start running within 10m0s; it waited: Started")
