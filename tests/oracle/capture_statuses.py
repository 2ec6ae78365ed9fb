"""Captures the status oracle's corpus from real runs: TaskRuns and PipelineRuns as the
running Tekton finishes them on the session's stack, with the pods (and a PipelineRun's
TaskRuns) our controller reads, into tests/oracle/status_corpus/tekton-VERSION.json.

Not collected by `pytest` (no test_ prefix): run it on purpose, once per Tekton release,
after `make stack` (or `TEKTON_VERSION=v1.10.3 hack/build-all` for another):

    .venv/bin/pytest -q -p no:cacheprovider tests/oracle/capture_statuses.py
    TEKTON_VERSION=v1.10.3 .venv/bin/pytest -q tests/oracle/capture_statuses.py

Each scenario is a BuildRun our controller runs, with a fate kwok gives its pod
(hack/kwok/stages); what is kept of each object is what a status mapping can read
(`slim`), so the corpus stays small and holds nobody's secrets.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from controller.buildrun.outcomes import child_taskrun_names, run_finished
from controller.buildrun.resources.config import PIPELINERUN_EXECUTOR, TASKRUN_EXECUTOR
from controller.runtime.kube import JSON, PODS, ApiError, Resource
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDRUNS, PIPELINERUNS, TASKRUNS
from devtools.cluster.stack import TektonStack
from devtools.fakes.fates import PREFIX, results
from tests.harness import (
    World,
    controller_settings,
    running_controller,
    running_pod,
    taskrun,
    wait_for,
)

pytestmark = pytest.mark.cluster

CORPUS = Path(__file__).parent / "status_corpus"
LIMITRANGES = Resource("", "v1", "limitranges", "LimitRange")
DIGEST = "sha256:" + "c0" * 32
CAPTURED: list[JSON] = []


def slim(obj: JSON) -> JSON:
    """What a status mapping reads of a TaskRun, PipelineRun or Pod: names, labels, the
    timeouts, and the status without Tekton's copy of the task or pipeline spec."""
    meta = obj.get("metadata") or {}
    kind = obj.get("kind")
    out: JSON = {"apiVersion": obj.get("apiVersion"), "kind": kind, "metadata": {
        k: meta[k] for k in ("name", "namespace", "labels", "creationTimestamp") if k in meta}}
    spec = obj.get("spec") or {}
    status = dict(obj.get("status") or {})
    if kind == "Pod":
        out["spec"] = {"containers": [{"name": c["name"]} for c in spec.get("containers") or []],
                       "initContainers": [{"name": c["name"]}
                                          for c in spec.get("initContainers") or []]}
        keep = ("phase", "reason", "message", "conditions", "containerStatuses",
                "initContainerStatuses")
        out["status"] = {k: status[k] for k in keep if k in status}
        return out
    out["spec"] = {k: spec[k] for k in ("timeout", "timeouts", "status") if k in spec}
    for heavy in ("taskSpec", "pipelineSpec", "provenance", "spanContext"):
        status.pop(heavy, None)
    out["status"] = status
    return out


async def get(w: World, resource: Resource, name: str) -> JSON | None:
    try:
        return await w.kube.get(resource, w.ns, name)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def executor_of(w: World, buildrun: str, executor: str) -> JSON:
    """The TaskRun or PipelineRun our controller made for `buildrun`, once it exists."""
    if executor == "TaskRun":
        return await taskrun(w, buildrun)

    async def named() -> str | None:
        ex = ((await w.get(buildrun)).get("status") or {}).get("executor") or {}
        return ex.get("name")
    name = await wait_for(named, 60, 0.1, what=f"{buildrun}'s PipelineRun")
    run: JSON = await w.kube.get(PIPELINERUNS, w.ns, name)
    return run


async def record(stack: TektonStack, w: World, scenario: str, run: JSON, *,
                 executor: str, canceled: bool = False) -> None:
    """Keeps `run` as it is now, with the pods and TaskRuns a mapping of it may read."""
    resource = TASKRUNS if executor == "TaskRun" else PIPELINERUNS
    run = await w.kube.get(resource, w.ns, run["metadata"]["name"])
    objects: list[JSON] = []
    for name in child_taskrun_names(run) if executor != "TaskRun" else []:
        child = await get(w, TASKRUNS, name)
        if child is not None:
            objects.append(child)
    pod_names = [((o.get("status") or {}).get("podName")) for o in [run, *objects]]
    for pod_name in filter(None, pod_names):
        pod = await get(w, PODS, pod_name)
        if pod is not None:
            objects.append(pod)
    CAPTURED.append({
        "id": f"{stack.tekton.version}/{executor}/{scenario}",
        "tekton": stack.tekton.version,
        "executor": executor,
        "canceled": canceled,
        "run": slim(run),
        "objects": [slim(o) for o in objects],
    })


async def record_buildrun(stack: TektonStack, w: World, buildrun: str, executor: str) -> None:
    br = await w.get(buildrun)
    await record(stack, w, buildrun, await executor_of(w, buildrun, executor),
                 executor=executor,
                 canceled=(br.get("spec") or {}).get("state") == "BuildRunCanceled")


async def decided(w: World, buildrun: str, executor: str) -> None:
    """Until Tekton has decided the run and our controller has finished the BuildRun."""
    async def done() -> bool:
        br = await w.get(buildrun)
        ex = ((br.get("status") or {}).get("executor") or {}).get("name")
        if not ex:
            return False
        run = await get(w, TASKRUNS if executor == "TaskRun" else PIPELINERUNS, ex)
        return run is not None and run_finished(run)
    await wait_for(done, 90, 0.2, what=f"Tekton to decide {buildrun}'s run")


Scenario = Callable[[TektonStack, World, str], Awaitable[None]]


async def _plain(stack: TektonStack, w: World, executor: str, name: str, *,
                 fate: dict[str, str], **spec: Any) -> None:
    w.fate(name, **fate)
    await w.buildrun(name, **spec)
    await decided(w, name, executor)
    await record_buildrun(stack, w, name, executor)


async def _held(stack: TektonStack, w: World, executor: str, name: str,
                act: Callable[[JSON], Awaitable[Any]]) -> None:
    """A BuildRun whose pod is held Running until `act(pod)` ends it some way."""
    w.fate(name, fate="hold")
    await w.buildrun(name)
    await act(await running_pod(w, name))
    await decided(w, name, executor)
    await record_buildrun(stack, w, name, executor)


def _evict_running(stack: TektonStack, w: World, executor: str) -> Awaitable[None]:
    return _held(stack, w, executor, "evict-running", lambda pod: w.kube.patch(
        PODS, w.ns, pod["metadata"]["name"],
        {"metadata": {"annotations": {PREFIX + "fate": "evict"}}}))


def _cancel(stack: TektonStack, w: World, executor: str) -> Awaitable[None]:
    return _held(stack, w, executor, "cancel", lambda _: w.kube.patch(
        BUILDRUNS, w.ns, "cancel", {"spec": {"state": "BuildRunCanceled"}}))


async def _cancelled_by_someone(stack: TektonStack, w: World, executor: str) -> None:
    w.fate("someone-cancels", fate="hold")
    await w.buildrun("someone-cancels")
    await running_pod(w, "someone-cancels")
    tr = await taskrun(w, "someone-cancels")
    await w.kube.patch(TASKRUNS, w.ns, tr["metadata"]["name"],
                       {"spec": {"status": "TaskRunCancelled"}})
    await decided(w, "someone-cancels", executor)
    await record_buildrun(stack, w, "someone-cancels", executor)


async def _says(w: World, buildrun: str, executor: str, reason: str | None) -> None:
    """Until Tekton's condition on the run has `reason` (any, when None)."""
    resource = TASKRUNS if executor == "TaskRun" else PIPELINERUNS

    async def said() -> bool:
        run = await w.kube.get(resource, w.ns,
                               (await executor_of(w, buildrun, executor))["metadata"]["name"])
        condition = succeeded_condition(run.get("status"))
        return condition is not None and reason in (None, condition.get("reason"))
    await wait_for(said, 60, 0.2, what=f"Tekton to say {reason or 'anything'} of {buildrun}")


async def _running(stack: TektonStack, w: World, executor: str) -> None:
    """Unfinished: a pod held Running, and one held Pending."""
    w.fate("running", fate="hold")
    await w.buildrun("running")
    await running_pod(w, "running")
    await _says(w, "running", executor, "Running")
    await record_buildrun(stack, w, "running", executor)
    w.fate("pending", fate="hold", start_delay="600s")
    await w.buildrun("pending")
    await _says(w, "pending", executor, None)
    await record_buildrun(stack, w, "pending", executor)


async def _timeout(stack: TektonStack, w: World, executor: str) -> None:
    """Tekton's own timeout: a copy of a run our controller made, under a BuildRun name
    no BuildRun has (so no deadline of ours cancels it first), with a 3 s timeout."""
    w.fate("timeout-source", fate="hold")
    w.fate("timeout", fate="hold")
    await w.buildrun("timeout-source")
    source = await executor_of(w, "timeout-source", executor)
    spec = copy.deepcopy(source["spec"])
    spec.pop("status", None)
    if executor == "TaskRun":
        spec["timeout"] = "3s"
    else:
        spec["timeouts"] = {"pipeline": "3s"}
    resource = TASKRUNS if executor == "TaskRun" else PIPELINERUNS
    run = await w.kube.create(resource, w.ns, {
        "apiVersion": "tekton.dev/v1", "kind": source["kind"],
        "metadata": {"name": "timeout", "labels": {LABEL_BUILDRUN: "timeout"}},
        "spec": spec})

    async def timed_out() -> bool:
        return run_finished(await w.kube.get(resource, w.ns, "timeout"))
    await wait_for(timed_out, 60, 0.2, what="Tekton's timeout")
    await record(stack, w, "timeout", run, executor=executor)


async def _limit_range(stack: TektonStack, w: World, executor: str) -> None:
    await w.kube.create(LIMITRANGES, w.ns, {
        "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "max-memory"},
        "spec": {"limits": [{"type": "Pod", "max": {"memory": "1Gi"}}]}})
    try:
        await w.buildrun("limit-range")
        await decided(w, "limit-range", executor)
        await record_buildrun(stack, w, "limit-range", executor)
    finally:
        await w.kube.delete(LIMITRANGES, w.ns, "max-memory")


SCENARIOS: list[tuple[str, Callable[[TektonStack, World, str], Awaitable[None]]]] = [
    ("succeed", lambda s, w, e: _plain(s, w, e, "succeed", fate={"results": results(**{
        "shp-image-digest": DIGEST, "shp-image-size": "12345",
        "shp-source-default-commit-sha": "0123abc", "shp-source-default-commit-author": "Ann",
        "shp-source-default-branch-name": "main"})})),
    ("fail", lambda s, w, e: _plain(s, w, e, "fail", fate={"fate": "fail", "exit_code": "3"})),
    ("fail-with-error-results", lambda s, w, e: _plain(
        s, w, e, "fail-with-error-results", fate={"fate": "fail", "results": results(**{
            "shp-error-reason": "GitAuthFailed",
            "shp-error-message": "authentication to the git remote failed"})})),
    ("oom", lambda s, w, e: _plain(s, w, e, "oom", fate={"fate": "oom"})),
    ("evict-pending", lambda s, w, e: _plain(s, w, e, "evict-pending",
                                             fate={"fate": "evict", "start_delay": "1s"})),
    ("evict-running", _evict_running),
    ("timeout", _timeout),
    ("cancel", _cancel),
    ("running", _running),
    ("limit-range", _limit_range),
]
TASKRUN_ONLY = [("someone-cancels", _cancelled_by_someone)]


@pytest.mark.parametrize("executor", [TASKRUN_EXECUTOR, PIPELINERUN_EXECUTOR])
async def test_capture(stack: TektonStack, world: World, executor: str,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every scenario on one controller: the run Tekton leaves, kept in CAPTURED."""
    monkeypatch.setenv("BUILDRUN_EXECUTOR", executor)
    settings = controller_settings(stack.cluster, world.ns)
    async with running_controller(settings):
        for _, scenario in SCENARIOS + (TASKRUN_ONLY if executor == "TaskRun" else []):
            await scenario(stack, world, executor)


def test_write_corpus(stack: TektonStack) -> None:
    """Writes what the captures kept (run last, after both executors)."""
    assert CAPTURED, "nothing was captured"
    CORPUS.mkdir(exist_ok=True)
    path = CORPUS / f"tekton-{stack.tekton.version}.json"
    path.write_text(json.dumps(sorted(CAPTURED, key=lambda c: c["id"]), indent=1,
                               sort_keys=True) + "\n")
    print(f"\n{len(CAPTURED)} runs -> {path}")
