"""What a BuildRun runs as: a Tekton TaskRun (Shipwright's default) or, with
BUILDRUN_EXECUTOR=PipelineRun, a Tekton PipelineRun (Shipwright's ImageBuildRunner and its
two wrappers, pkg/reconciler/buildrun/imagebuildrunner.go and pipelinerun_runner.go).

One `Executor` per kind holds all that differs between the two (how it is generated,
cancelled, read for an outcome, and trimmed in the informer's cache); observe, act, the
status writes and the wiring ask it and never test the kind themselves. Pure: the I/O
it describes (which TaskRuns and pod to read) is done by `observe.py`.

setup.py resolves BUILDRUN_EXECUTOR to one, once, and passes it in: a new BuildRun runs
as that kind; one already started keeps the kind its status names (`executor_of`), so
changing BUILDRUN_EXECUTOR never orphans a running one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.resources.pipelinerun import generate_pipelinerun
from controller.buildrun.resources.taskrun import generate_taskrun
from controller.buildrun.spec import parse_duration
from controller.buildrun.status import (
    Outcome,
    child_taskrun_names,
    failed_child,
    outcome_from_pipelinerun,
    outcome_from_taskrun,
    pipelinerun_pod_name,
)
from controller.runtime.kube import JSON, Resource
from controller.runtime.shapes import at, mapping, text
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.resources import PIPELINERUNS, TASKRUNS

# generate_taskrun's contract: (buildrun, build, strategy, service account, config).
Generate = Callable[[JSON, JSON, JSON, str, ShipwrightConfig], JSON]
# spec.status that cancels each (Tekton's TaskRunSpecStatusCancelled and
# PipelineRunSpecStatusCancelled).
TASKRUN_CANCELLED = "TaskRunCancelled"
PIPELINERUN_CANCELLED = "Cancelled"


@dataclass(frozen=True)
class Executor:
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
    # The informer's transform for its kind: drops, in place, what nothing reads from the
    # cache (setup.py; an object read with a GET stays whole).
    slim: Callable[[JSON], JSON]
    # Whether it runs a multi-arch build (spec.output.platforms): Shipwright builds one
    # only as a PipelineRun, a task per platform (ValidateMultiArchPreflight).
    multi_arch: bool
    # The timeout Tekton enforces on it, in seconds (its spec says: a TaskRun's
    # spec.timeout, a PipelineRun's spec.timeouts.pipeline); None for none ("0s") or none
    # readable. The timeout backstop counts from it, whoever made the run (issue 39: a run
    # Shipwright started with the BuildRun's own timeout, longer than its Build's).
    timeout: Callable[[JSON], float | None]

    @property
    def kind(self) -> str:
        """What status.executor.kind and the messages call it: its resource's kind."""
        return self.resource.kind

    def cancelled(self, obj: JSON) -> bool:
        """Whether the cancel was asked for already (spec.status)."""
        return bool(at(obj, "spec", "status") == self.cancel_patch["spec"]["status"])


# What the controller reads of a cached TaskRun (reconciler.py, status.py, metrics.py):
# its metadata, these fields of its spec (cancel, timeout message) and its status but for
# the two copies Tekton keeps there. A reader of more must add it here.
TASKRUN_SPEC_READ = ("status", "statusMessage", "timeout")
TASKRUN_STATUS_UNREAD = ("taskSpec", "provenance")


def _slim_taskrun(taskrun: JSON) -> JSON:
    """TASKRUN.slim, the TaskRun informer's transform: drops, in place, the spec's task (the steps,
    parameters and volumes we generated: about 4 KB of the 4.3 KB a parity TaskRun is
    as JSON), Tekton's copy of it in status.taskSpec and its status.provenance. Nothing
    reads them from the cache; an object read with a GET stays whole."""
    return _slim(taskrun, TASKRUN_SPEC_READ, TASKRUN_STATUS_UNREAD)


# What the controller reads of a cached PipelineRun: its metadata, these fields of its spec
# (cancel, timeout message) and its status but for Tekton's copy of the pipeline and the
# provenance. Its TaskRuns are read from the TaskRun informer.
PIPELINERUN_SPEC_READ = ("status", "timeouts")
PIPELINERUN_STATUS_UNREAD = ("pipelineSpec", "provenance")


def _slim_pipelinerun(pipelinerun: JSON) -> JSON:
    """PIPELINERUN.slim, the PipelineRun informer's transform, as TASKRUN.slim: drops, in
    place, the generated pipeline (spec.pipelineSpec, every task's steps), Tekton's copy
    of it in status.pipelineSpec and its provenance."""
    return _slim(pipelinerun, PIPELINERUN_SPEC_READ, PIPELINERUN_STATUS_UNREAD)


def _slim(obj: JSON, spec_read: tuple[str, ...], status_unread: tuple[str, ...]) -> JSON:
    """Keeps only `spec_read` of the spec and drops `status_unread` from the status, in
    place (an informer's transform)."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        obj["spec"] = {k: spec[k] for k in spec_read if k in spec}
    status = obj.get("status")
    if isinstance(status, dict):
        for key in status_unread:
            status.pop(key, None)
    return obj


def _seconds(duration: object) -> float | None:
    """A run's timeout as Tekton reads it: a Go duration, "0s" (or 0) for none."""
    try:
        seconds = parse_duration(text(duration))
    except ValueError:
        return None
    return seconds or None


def _pod_of_failed(taskrun: JSON | None) -> str | None:
    status = mapping(at(taskrun, "status"))
    failed = (succeeded_condition(status) or {}).get("status") == "False"
    return text(status.get("podName")) or None if failed else None


TASKRUN = Executor(
    resource=TASKRUNS,
    generate=generate_taskrun,
    cancel_patch={"spec": {"status": TASKRUN_CANCELLED,
                           "statusMessage": "the BuildRun finished before its TaskRun did"}},
    records_taskrun_name=True,
    children=lambda _: [],
    failed_pod=lambda taskrun, _: _pod_of_failed(taskrun),
    outcome=lambda taskrun, _, pod, canceled: outcome_from_taskrun(taskrun, pod,
                                                                    canceled=canceled),
    pod_name=lambda taskrun, _: text(at(taskrun, "status", "podName")),
    slim=_slim_taskrun,
    multi_arch=False,
    timeout=lambda taskrun: _seconds(at(taskrun, "spec", "timeout")),
)

PIPELINERUN = Executor(
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
    slim=_slim_pipelinerun,
    multi_arch=True,
    timeout=lambda pipelinerun: _seconds(at(pipelinerun, "spec", "timeouts", "pipeline")),
)

EXECUTORS: dict[str, Executor] = {e.kind: e for e in (TASKRUN, PIPELINERUN)}


def executor_of(buildrun: JSON, configured: Executor) -> Executor:
    """The executor a BuildRun runs as: the kind its status.executor names, a TaskRun for
    one that records only taskRunName (older versions, Shipwright's TaskRun mode), else
    (not started, or a kind we do not know) the configured one."""
    status = mapping(buildrun.get("status"))
    kind = text(at(status, "executor", "kind"))
    if kind in EXECUTORS:
        return EXECUTORS[kind]
    if status.get("taskRunName"):
        return TASKRUN
    return configured
