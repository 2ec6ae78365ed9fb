"""What a BuildRun runs as: a Tekton TaskRun (Shipwright's default) or, with
BUILDRUN_EXECUTOR=PipelineRun, a Tekton PipelineRun (Shipwright's ImageBuildRunner and its
two wrappers, pkg/reconciler/buildrun/imagebuildrunner.go and pipelinerun_runner.go).

One `Executor` per kind holds all that differs between the two; observe, act, the status
writes and the wiring ask it and never test the kind themselves. Pure: the I/O it
describes (which TaskRuns and pod to read) is done by `observe.py`.

A new BuildRun runs as the configured kind; one already started keeps the kind its
status names (`executor_of`), so changing BUILDRUN_EXECUTOR never orphans a running one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controller.buildrun.config import (
    PIPELINERUN_EXECUTOR,
    TASKRUN_EXECUTOR,
    ShipwrightConfig,
)
from controller.buildrun.pipelinerun import generate_pipelinerun
from controller.buildrun.status import (
    Outcome,
    child_taskrun_names,
    failed_child,
    outcome_from_pipelinerun,
    outcome_from_taskrun,
    pipelinerun_pod_name,
    succeeded_condition,
)
from controller.buildrun.taskrun import generate_taskrun
from controller.runtime.kube import JSON, Resource
from controller.shipwright.resources import PIPELINERUNS, TASKRUNS

# generate_taskrun's contract: (buildrun, build, strategy, service account, config).
Generate = Callable[[JSON, JSON, JSON, str, ShipwrightConfig], JSON]
# spec.status that cancels each (Tekton's TaskRunSpecStatusCancelled and
# PipelineRunSpecStatusCancelled).
TASKRUN_CANCELLED = "TaskRunCancelled"
PIPELINERUN_CANCELLED = "Cancelled"


@dataclass(frozen=True)
class Executor:
    kind: str
    resource: Resource
    generate: Generate
    # The merge patch that cancels it: spec.status as Tekton spells it for the kind
    # (a PipelineRun's spec has no statusMessage).
    cancel_patch: JSON
    # Shipwright writes the deprecated status.taskRunName for a TaskRun only.
    records_taskrun_name: bool
    # Once it finished: the TaskRuns to read (a PipelineRun's children; none for a
    # TaskRun, which is its own), the pod to read for a failure (eviction, the failed
    # container), and the outcome from it, the children read, that pod and whether the
    # BuildRun asked for a cancel.
    children: Callable[[JSON], list[str]]
    failed_pod: Callable[[JSON, list[JSON]], str | None]
    outcome: Callable[[JSON, list[JSON], JSON | None, bool], Outcome | None]
    # The pod Shipwright's ramp-up metrics read (GetPodName, or for a PipelineRun its
    # first TaskRun's, as buildrun.go does).
    pod_name: Callable[[JSON, list[JSON]], str]

    def cancelled(self, obj: JSON) -> bool:
        """Whether the cancel was asked for already (spec.status)."""
        return bool((obj.get("spec") or {}).get("status") == self.cancel_patch["spec"]["status"])


def _pod_of_failed(taskrun: JSON | None) -> str | None:
    status = (taskrun or {}).get("status") or {}
    failed = (succeeded_condition(status) or {}).get("status") == "False"
    return str(status["podName"]) if failed and status.get("podName") else None


TASKRUN = Executor(
    kind=TASKRUN_EXECUTOR,
    resource=TASKRUNS,
    generate=generate_taskrun,
    cancel_patch={"spec": {"status": TASKRUN_CANCELLED,
                           "statusMessage": "the BuildRun finished before its TaskRun did"}},
    records_taskrun_name=True,
    children=lambda _: [],
    failed_pod=lambda taskrun, _: _pod_of_failed(taskrun),
    outcome=lambda taskrun, _, pod, canceled: outcome_from_taskrun(taskrun, pod,
                                                                    canceled=canceled),
    pod_name=lambda taskrun, _: str((taskrun.get("status") or {}).get("podName") or ""),
)

PIPELINERUN = Executor(
    kind=PIPELINERUN_EXECUTOR,
    resource=PIPELINERUNS,
    generate=generate_pipelinerun,
    # Tekton's PipelineRunSpecStatusCancelled, as Shipwright's Cancel sets it.
    cancel_patch={"spec": {"status": PIPELINERUN_CANCELLED}},
    records_taskrun_name=False,
    children=child_taskrun_names,
    failed_pod=lambda _, children: _pod_of_failed(failed_child(children)),
    outcome=lambda run, children, pod, canceled: outcome_from_pipelinerun(
        run, children, pod, canceled=canceled),
    pod_name=lambda _, children: pipelinerun_pod_name(children),
)

EXECUTORS: dict[str, Executor] = {e.kind: e for e in (TASKRUN, PIPELINERUN)}


def executor_of(buildrun: JSON, configured: Executor) -> Executor:
    """The executor a BuildRun runs as: the kind its status.executor names, a TaskRun for
    one that records only taskRunName (older versions, Shipwright's TaskRun mode), else
    (not started, or a kind we do not know) the configured one."""
    status = buildrun.get("status") or {}
    kind = (status.get("executor") or {}).get("kind")
    if kind in EXECUTORS:
        return EXECUTORS[kind]
    if status.get("taskRunName"):
        return TASKRUN
    return configured
