"""Each Executor's informer transform (executors.py: TASKRUN.slim, PIPELINERUN.slim):
every answer the controller reads off a cached TaskRun (PipelineRun) is the same on the
slim copy as on the whole object."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
import pytest

from controller.buildrun.caches import owner_buildrun
from controller.buildrun.executors import PIPELINERUN, TASKRUN
from controller.buildrun.outcomes import outcome_from_taskrun, run_finished, running_reason
from controller.buildrun.resources.config import SHIPWRIGHT_DEFAULTS
from controller.buildrun.resources.taskrun import generate_taskrun
from devtools.cluster import fixtures

JSON = dict[str, Any]


def parity_taskrun() -> JSON:
    """The TaskRun the controller makes for the fixtures' Build, as the server returns it."""
    buildrun = fixtures.buildrun("br-1", timeout="10m")
    buildrun["metadata"].update(namespace="ns", uid="u-1", generation=1)
    build = fixtures.build()
    build["metadata"].update(namespace="ns", uid="b-1", generation=3)
    taskrun = generate_taskrun(buildrun, build, fixtures.strategy(), "default",
                               SHIPWRIGHT_DEFAULTS)
    taskrun["metadata"].update(uid="t-1", resourceVersion="7",
                               creationTimestamp="2026-12-03T10:00:00Z",
                               annotations={"pipeline.tekton.dev/release": "v1.10.3"})
    return taskrun


def tekton_status(how: str, task_spec: JSON) -> JSON:
    """A TaskRun status in Tekton v1.10's shape, with its copy of the task spec."""
    conditions = {
        "running": ("Unknown", "Running", "Not all Steps in the Task have finished executing"),
        "pending": ("Unknown", "Pending", "pod status \"PodScheduled\":\"False\""),
        "success": ("True", "Succeeded", "All Steps have completed executing"),
        "failed": ("False", "Failed", "\"step-build\" exited with code 1"),
        "timeout": ("False", "TaskRunTimeout", "TaskRun br-1-x failed to finish within 10m"),
        "cancelled": ("False", "TaskRunCancelled", "TaskRun br-1-x was cancelled"),
    }[how]
    status: JSON = {
        "podName": "br-1-x-pod", "startTime": "2026-12-03T10:00:01Z",
        "conditions": [dict(zip(("status", "reason", "message"), conditions, strict=True),
                            type="Succeeded", lastTransitionTime="2026-12-03T10:00:09Z")],
        "taskSpec": copy.deepcopy(task_spec),
        "provenance": {"featureFlags": {"enableAPIFields": "beta", "maxResultSize": 4096}},
        "steps": [{"name": "source-default", "container": "step-source-default",
                   "imageID": "ghcr.io/x@sha256:" + "0" * 64,
                   "terminated": {"exitCode": 0, "reason": "Completed"}}],
    }
    if how == "success":
        status["results"] = [{"name": "shp-image-digest", "type": "string",
                              "value": "sha256:" + "ab" * 32},
                             {"name": "shp-source-default-commit-sha", "type": "string",
                              "value": "f" * 40}]
    if how == "failed":
        status["steps"].append({
            "name": "build", "container": "step-build",
            "terminated": {"exitCode": 1, "reason": "Error", "message": json.dumps(
                [{"key": "shp-error-reason", "value": "GitAuthFailed"}])}})
    return status


@pytest.mark.parametrize("how", ["running", "pending", "success", "failed", "timeout",
                                 "cancelled"])
def test_the_taskrun_slim_copy_reads_the_same(how: str) -> None:
    whole = parity_taskrun()
    whole["status"] = tekton_status(how, whole["spec"]["taskSpec"])
    if how == "cancelled":
        whole["spec"]["status"] = "TaskRunCancelled"
        whole["spec"]["statusMessage"] = "the BuildRun finished before its TaskRun did"
    slim = TASKRUN.slim(copy.deepcopy(whole))

    assert run_finished(slim) == run_finished(whole)
    assert outcome_from_taskrun(slim) == outcome_from_taskrun(whole)
    assert running_reason(slim) == running_reason(whole)
    assert owner_buildrun(slim) == owner_buildrun(whole) == "ns/br-1"
    assert slim["metadata"] == whole["metadata"]
    for key in ("status", "statusMessage", "timeout"):
        assert slim["spec"].get(key) == whole["spec"].get(key)
    assert slim["spec"]["timeout"] == "10m"
    assert "taskSpec" not in slim["spec"] and "taskSpec" not in slim["status"]
    assert "provenance" not in slim["status"]
    # Tekton's copy of the task in status doubles a TaskRun; the slim one keeps a fraction.
    assert len(orjson.dumps(slim)) < len(orjson.dumps(whole)) / 4


def test_the_taskrun_slim_copy_takes_odd_shapes() -> None:
    # A TaskRun without spec or status (or with them null) is kept as it is.
    assert TASKRUN.slim({"metadata": {"name": "a"}}) == {"metadata": {"name": "a"}}
    odd = {"metadata": {"name": "a"}, "spec": None, "status": None}
    assert TASKRUN.slim(copy.deepcopy(odd)) == odd


def test_the_pipelinerun_slim_copy_keeps_what_is_read_of_it() -> None:
    """The PipelineRun informer's transform drops the generated pipeline and Tekton's copy
    of it; the outcome, the running reason, cancel and the owner read the same."""
    from controller.buildrun.outcomes import outcome_from_pipelinerun

    whole: JSON = {
        "kind": "PipelineRun",
        "metadata": {"name": "pr", "namespace": "ns", "labels": {"buildrun.shipwright.io/name":
                                                                  "br"},
                     "ownerReferences": [{"kind": "BuildRun", "name": "br", "uid": "u",
                                          "controller": True}]},
        "spec": {"pipelineSpec": {"tasks": [{"name": "t", "taskSpec": {"steps": []}}]},
                 "status": "Cancelled", "timeouts": {"pipeline": "5s"},
                 "taskRunTemplate": {"serviceAccountName": "default"}},
        "status": {"conditions": [{"type": "Succeeded", "status": "False",
                                   "reason": "PipelineRunTimeout", "message": "m"}],
                   "childReferences": [{"kind": "TaskRun", "name": "pr-t"}],
                   "pipelineSpec": {"tasks": []}, "provenance": {"featureFlags": {}},
                   "startTime": "2026-12-03T10:00:00Z"},
    }
    slim = PIPELINERUN.slim(copy.deepcopy(whole))
    assert "pipelineSpec" not in slim["spec"] and "pipelineSpec" not in slim["status"]
    assert outcome_from_pipelinerun(slim, []) == outcome_from_pipelinerun(whole, [])
    assert running_reason(slim) == running_reason(whole)
    assert PIPELINERUN.cancelled(slim) and PIPELINERUN.children(slim) == ["pr-t"]
    assert owner_buildrun(slim) == owner_buildrun(whole) == "ns/br"
    assert PIPELINERUN.slim({"metadata": {"name": "a"}}) == {"metadata": {"name": "a"}}
