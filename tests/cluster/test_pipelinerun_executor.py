"""BUILDRUN_EXECUTOR=PipelineRun on the session's real Tekton: each BuildRun runs as a
Tekton PipelineRun (Shipwright v0.20.13's executor), whose `source` workspace is a
volumeClaimTemplate the stack's hostPath provisioner binds; kwok plays the kubelet for
every TaskRun's pod, with the fate a test picks (the PipelineRun's TaskRuns, and so
their pods, carry the BuildRun label, so `world.fate` reaches each of them).

What Shipwright's own integration specs expect (test/integration/
buildruns_to_pipelineruns_test.go): status.executor {kind: PipelineRun, name}, the
PipelineRun owned by the BuildRun alone, startTime and an Unknown condition while it
runs, Succeeded, and BuildRunTimeout "BuildRun NAME failed to finish within 5s". Beside
them the one-shot guarantee, cancel, a failure's details, and multi-arch's Node check.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from controller.app import App
from controller.buildrun import reasons
from controller.buildrun.outcomes import run_finished
from controller.buildrun.resources.config import PIPELINERUN_EXECUTOR
from controller.runtime.kube import JSON, SERVICEACCOUNTS, Resource
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDRUNS, PIPELINERUNS
from devtools.cluster.stack import TektonStack
from devtools.fakes.fates import results
from tests.harness import (
    World,
    assert_start_copied,
    condition,
    controller_settings,
    gone,
    metric,
    running_controller,
    running_pod,
    taskrun,
    wait_for,
)

pytestmark = pytest.mark.cluster

DIGEST = "sha256:" + "ef" * 32
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


@asynccontextmanager
async def controller(stack: TektonStack, w: World,
                     monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[App]:
    """Our controller, in-process, started as the Deployment would be with
    BUILDRUN_EXECUTOR=PipelineRun in its environment (read once, at setup)."""
    monkeypatch.setenv("BUILDRUN_EXECUTOR", PIPELINERUN_EXECUTOR)
    async with running_controller(controller_settings(stack.cluster, w.ns)) as app:
        yield app


async def pipelinerun_of(w: World, name: str) -> JSON:
    """The PipelineRun status.executor names, once it does."""
    async def named() -> str | None:
        executor = ((await w.get(name)).get("status") or {}).get("executor") or {}
        return executor.get("name") if executor.get("kind") == "PipelineRun" else None
    pr_name = await wait_for(named, 60, 0.1, what=f"BuildRun {name}'s PipelineRun")
    pipelinerun: JSON = await w.kube.get(PIPELINERUNS, w.ns, pr_name)
    return pipelinerun


async def pipelinerun_finished(w: World, name: str) -> JSON:
    async def decided() -> JSON | None:
        pr = await w.kube.get(PIPELINERUNS, w.ns, name)
        return pr if run_finished(pr) else None
    result: JSON = await wait_for(decided, 60, 0.2, what=f"Tekton to decide PipelineRun {name}")
    return result


async def test_a_buildrun_runs_as_an_owned_pipelinerun_to_succeeded(
    stack: TektonStack, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.fate("ok", results=results(**{"shp-image-digest": DIGEST}))
    async with controller(stack, world, monkeypatch):
        created = await world.buildrun("ok")
        pr = await pipelinerun_of(world, "ok")
        done = await world.finished("ok", 90)
        ran = await pipelinerun_finished(world, pr["metadata"]["name"])
    status = done["status"]
    assert status["executor"] == {"kind": "PipelineRun", "name": pr["metadata"]["name"]}
    # As Shipwright: the deprecated taskRunName is a TaskRun's only, and startTime is
    # the PipelineRun's own.
    assert "taskRunName" not in status
    assert_start_copied(done, ran)
    cond = condition(done)
    assert (cond["status"], cond["reason"]) == ("True", "Succeeded"), cond["message"]
    assert status["output"]["digest"] == DIGEST  # a result of the PipelineRun's TaskRuns
    assert status["buildSpec"]["output"]["image"]
    [owner] = pr["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "BuildRun", "ok", created["metadata"]["uid"], True)
    assert pr["metadata"]["labels"][LABEL_BUILDRUN] == "ok"
    # One PipelineRun, and it ran over a bound claim.
    prs = (await world.kube.list(PIPELINERUNS, world.ns))["items"]
    assert [p["metadata"]["name"] for p in prs] == [pr["metadata"]["name"]]
    assert condition(await pipelinerun_finished(world, pr["metadata"]["name"]))["status"] == \
        "True"


async def test_completion_time_never_changes_after_it_is_set(
    stack: TektonStack, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-shot guarantee with PipelineRuns: a watch of the BuildRun from its creation
    sees completionTime set once and never again changed, through Tekton's later writes to
    the PipelineRun and its TaskRuns and a second controller start that relists all."""
    seen: list[JSON] = []

    async def watch(rv: str) -> None:
        async for event in world.kube.watch(BUILDRUNS, world.ns, rv, timeout_seconds=120):
            obj = event.get("object") or {}
            if (obj.get("metadata") or {}).get("name") == "once":
                seen.append(obj.get("status") or {})

    listed = await world.kube.list(BUILDRUNS, world.ns)
    watcher = asyncio.create_task(watch(listed["metadata"]["resourceVersion"]))
    try:
        async with controller(stack, world, monkeypatch):
            await world.buildrun("once")
            done = await world.finished("once", 90)
            pr = await pipelinerun_of(world, "once")
            await pipelinerun_finished(world, pr["metadata"]["name"])
        async with controller(stack, world, monkeypatch):  # a restart relists everything
            await asyncio.sleep(2)
        await asyncio.sleep(1)
    finally:
        watcher.cancel()
    finished = [s for s in seen if s.get("completionTime")]
    assert finished, seen
    assert {s["completionTime"] for s in finished} == {done["status"]["completionTime"]}
    assert all(s == finished[0] for s in finished), "a finished BuildRun's status changed"
    assert (await world.get("once"))["status"] == done["status"]


async def test_a_failing_step_ends_failed_with_the_failed_taskruns_details(
    stack: TektonStack, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.fate("bad", fate="fail", exit_code="3")
    async with controller(stack, world, monkeypatch):
        await world.buildrun("bad")
        done = await world.finished("bad", 90)
    cond = condition(done)
    # Shipwright's reason for a PipelineRun that failed in a step (resources/conditions.go).
    assert (cond["status"], cond["reason"]) == ("False", reasons.PIPELINE_RUN_FAILED), cond
    pr = await world.kube.get(PIPELINERUNS, world.ns, done["status"]["executor"]["name"])
    # The first TaskRun failed (the source step is the last of its task; kwok fails that).
    failed = await taskrun(world, "bad")
    details = done["status"]["failureDetails"]
    pod_name, container = failed["status"]["podName"], details["location"]["container"]
    assert container.startswith("step-")
    assert cond["message"] == (
        f"PipelineRun {pr['metadata']['name']} failed in step {container}, for detailed "
        f"information: kubectl --namespace {world.ns} logs {pod_name} --container={container}")
    # Shipwright's PipelineRun failure details say where, not why (no error results read).
    assert details == {"location": {"pod": pod_name, "container": container}}


async def test_cancel_while_running_cancels_the_pipelinerun(
    stack: TektonStack, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.fate("stop", fate="hold")
    async with controller(stack, world, monkeypatch):
        await world.buildrun("stop")
        pr = await pipelinerun_of(world, "stop")
        await running_pod(world, "stop")
        running = condition(await world.get("stop"))
        assert running["status"] == "Unknown", running
        await world.kube.patch(BUILDRUNS, world.ns, "stop",
                               {"spec": {"state": "BuildRunCanceled"}})
        done = await world.finished("stop", 60)
        name = pr["metadata"]["name"]
        stopped = await pipelinerun_finished(world, name)
    assert (condition(done)["status"], condition(done)["reason"]) == (
        "False", reasons.BUILD_RUN_CANCELED)
    assert stopped["spec"]["status"] == "Cancelled"  # Tekton's PipelineRunSpecStatusCancelled
    assert condition(stopped)["reason"] == "Cancelled"
    assert (await world.get("stop"))["status"] == done["status"]


async def test_a_timeout_ends_buildrun_timeout_in_shipwrights_words(
    stack: TektonStack, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.build("quick", timeout="5s")
    world.fate("slow", fate="hold")
    async with controller(stack, world, monkeypatch):
        await world.buildrun("slow", "quick")
        pr = await pipelinerun_of(world, "slow")
        assert pr["spec"]["timeouts"]["pipeline"] == "5s"
        done = await world.finished("slow", 60)
        stopped = await pipelinerun_finished(world, pr["metadata"]["name"])
    cond = condition(done)
    assert (cond["status"], cond["reason"]) == ("False", reasons.BUILD_RUN_TIMEOUT), cond
    assert cond["message"] == "BuildRun slow failed to finish within 5s"
    # Tekton's own timeout stopped it (ours is a backstop --timeout-grace later), and the
    # BuildRun's startTime is the PipelineRun's, as Shipwright copies it.
    assert condition(stopped)["reason"] == "PipelineRunTimeout", stopped
    assert_start_copied(done, stopped)


async def test_multi_arch_runs_where_nodes_of_each_platform_exist(
    stack: TektonStack, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PipelineRuns, output.platforms passes Shipwright's preflight and each platform
    needs a Ready, schedulable Node with its kubernetes.io/os and /arch labels (the
    stack's kwok Node is linux/amd64). As in Shipwright v0.20.13 the PipelineRun itself
    builds one image, with no per-platform tasks."""
    amd64 = {"os": "linux", "arch": "amd64"}
    arm64 = {"os": "linux", "arch": "arm64"}
    output = {"image": "registry.example.com/app:latest"}
    node: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": f"arm64-{world.ns}",
                     "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"}},
        # Not Ready (no kubelet: kwok manages only Nodes annotated for it), then Ready.
        "spec": {"taints": [{"key": "example.com/no-pods", "effect": "NoSchedule"}]},
    }
    async with controller(stack, world, monkeypatch):
        await world.buildrun("one-arch", output={**output, "platforms": [amd64]})
        await world.buildrun("no-node", output={**output, "platforms": [amd64, arm64]})
        no_node = await world.finished("no-node", 60)
        assert (condition(no_node)["reason"], condition(no_node)["message"]) == (
            reasons.NODE_PLATFORM_NOT_FOUND,
            "no schedulable node found for platform linux/arm64"), no_node["status"]
        assert "executor" not in no_node["status"]
        one = await world.finished("one-arch", 90)
        assert condition(one)["reason"] == reasons.SUCCEEDED, one["status"]
        pr = await world.kube.get(PIPELINERUNS, world.ns, one["status"]["executor"]["name"])
        tasks = [t["name"] for t in pr["spec"]["pipelineSpec"]["tasks"]]
        assert not any("arm64" in t or "amd64" in t for t in tasks), tasks

        await world.kube.create(NODES, None, node)
        try:
            name = node["metadata"]["name"]
            await world.kube.patch(NODES, None, name, {"status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}},
                subresource="status")
            await world.buildrun("not-ready", output={**output, "platforms": [arm64]})
            assert condition(await world.finished("not-ready", 60))["reason"] == \
                reasons.NODE_PLATFORM_NOT_FOUND
            await world.kube.patch(NODES, None, name, {"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}},
                subresource="status")
            await world.buildrun("two-arch", output={**output, "platforms": [amd64, arm64]})
            two = await world.finished("two-arch", 90)
            assert condition(two)["reason"] == reasons.SUCCEEDED, two["status"]
        finally:
            await world.kube.delete(NODES, None, node["metadata"]["name"])


async def test_service_account_metrics_ttl_and_limits_work_with_pipelineruns(
    stack: TektonStack, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What surrounds the executor: `.generate` makes the ServiceAccount the PipelineRun's
    TaskRuns run as and deletes it once done; the metrics count the outcome and read the
    first TaskRun's pod (Shipwright's ramp-ups); a Build's succeededLimit deletes the
    oldest finished BuildRun, and a retention TTL the other, each PipelineRun going with
    its BuildRun (garbage collector)."""
    await world.build("kept", retention={"succeededLimit": 1})
    completed = metric("buildrun_completed_total", reason="Succeeded", namespace=world.ns)
    rampups = metric("build_buildrun_taskrun_rampup_duration_seconds_count")
    async with controller(stack, world, monkeypatch):
        await world.buildrun("gen", "kept", serviceAccount=".generate")
        first = await pipelinerun_of(world, "gen")
        assert first["spec"]["taskRunTemplate"]["serviceAccountName"] == "gen"
        assert await world.kube.get_or_none(SERVICEACCOUNTS, world.ns, "gen") is not None
        await world.finished("gen", 90)
        await gone(world, SERVICEACCOUNTS, "gen", 30)
        assert metric("buildrun_completed_total", reason="Succeeded",
                      namespace=world.ns) == completed + 1
        assert metric("build_buildrun_taskrun_rampup_duration_seconds_count") == rampups + 1

        await world.buildrun("second", "kept", retention={"ttlAfterSucceeded": "2s"})
        await world.finished("second", 90)
        await gone(world, BUILDRUNS, "gen", 30)  # the limit: one succeeded BuildRun kept
        await gone(world, BUILDRUNS, "second", 30)  # its TTL
    await gone(world, PIPELINERUNS, first["metadata"]["name"], 60)
