"""BuildRun lifecycle beyond the outcome, on the real API server: retention TTL,
deleted TaskRuns, Build deletion, failure details, lastTransitionTime. TaskRuns run
on the session's real Tekton, their pods on kwok with the fate each test picks."""

from __future__ import annotations

import asyncio
import time

import pytest

from controller.buildrun import reasons
from controller.buildrun.caches import Caches
from controller.buildrun.executors import TASKRUN
from controller.buildrun.reconciler import BuildRunReconciler
from controller.runtime.events import EventRecorder
from controller.runtime.kube import ApiError, Kube
from controller.runtime.timestamps import parse_time
from controller.shipwright.resources import BUILDRUNS, BUILDS, TASKRUNS
from devtools.cluster.localcluster import LocalCluster
from devtools.fakes.fates import results
from tests.harness import (
    World,
    condition,
    controller_settings,
    release,
    running_controller,
    running_pod,
    taskrun,
    wait_for,
)

pytestmark = pytest.mark.cluster


async def deleted_at(world: World, name: str, timeout: float = 30) -> float:
    """Wall-clock time at which the BuildRun was first seen gone (50 ms polling)."""
    async def gone() -> float | None:
        try:
            await world.get(name)
        except ApiError as exc:
            if exc.status == 404:
                return time.time()
            raise
        return None
    result: float = await wait_for(gone, timeout, what=f"{name} to be deleted")
    return result


def ts(text: str) -> float:
    when = parse_time(text)
    assert when is not None
    return when.timestamp()


async def test_ttl_after_succeeded_deletes_on_time(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br", retention={"ttlAfterSucceeded": "3s"})
        done = await world.finished("br", 30)
        gone = await deleted_at(world, "br")
    late = gone - (ts(done["status"]["completionTime"]) + 3)
    # completionTime has whole seconds: the true deadline is up to 1 s after it.
    assert 0 <= late < 1.0, late


async def test_ttl_survives_a_controller_restart(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    settings = controller_settings(cluster, world.ns)
    world.fate("br", fate="fail")
    async with running_controller(settings):
        await world.buildrun("br", retention={"ttlAfterFailed": "4s"})
        done = await world.finished("br", 30)
    await asyncio.sleep(1.0)
    async with running_controller(settings):
        gone = await deleted_at(world, "br")
    late = gone - (ts(done["status"]["completionTime"]) + 4)
    assert 0 <= late < 1.0, late


async def test_ttl_falls_back_to_the_build_and_keeps_succeeded_runs(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await world.build("retained", retention={"ttlAfterFailed": "1s"})
    world.fate("fails", fate="fail")
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("fails", build_ref="retained")
        await world.buildrun("succeeds", build_ref="retained")
        await world.finished("succeeds", 30)
        await deleted_at(world, "fails")
        await asyncio.sleep(1.5)
        kept = await world.get("succeeds")
    assert condition(kept)["reason"] == reasons.SUCCEEDED


async def test_a_finished_buildruns_ttl_may_be_lowered_or_raised(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """As Shipwright's TTL cleanup (and two specs of its integration suite): once a
    BuildRun has finished, its spec.retention TTLs may change and the live value counts.
    Lowered, the BuildRun goes at once (it finished more than the new TTL ago); raised,
    it stays past the TTL it was created with. While it runs the CRD refuses the change,
    and any other spec change stays refused after it finished."""
    for name in ("lowered", "raised"):
        world.fate(name, fate="fail")
    world.fate("running", fate="hold")
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("lowered", retention={"ttlAfterFailed": "1h"})
        await world.buildrun("raised", retention={"ttlAfterFailed": "4s"})
        await world.buildrun("running", retention={"ttlAfterFailed": "1h"})
        await world.finished("lowered", 30)
        raised = await world.finished("raised", 30)
        await kube.patch(BUILDRUNS, world.ns, "raised",
                         {"spec": {"retention": {"ttlAfterFailed": "1h"}}})
        await asyncio.sleep(1.0)
        await kube.patch(BUILDRUNS, world.ns, "lowered",
                         {"spec": {"retention": {"ttlAfterFailed": "1s"}}})
        lowered_at = time.time()
        gone = await deleted_at(world, "lowered")
        assert gone - lowered_at < 2.0, gone - lowered_at
        with pytest.raises(ApiError) as refused:
            await kube.patch(BUILDRUNS, world.ns, "raised", {"spec": {"timeout": "1h"}})
        assert "spec.timeout is immutable" in refused.value.message
        await running_pod(world, "running")
        with pytest.raises(ApiError) as refused:
            await kube.patch(BUILDRUNS, world.ns, "running",
                             {"spec": {"retention": {"ttlAfterFailed": "1s"}}})
        assert refused.value.status == 422
        assert "spec.retention is immutable until the BuildRun has finished" in (
            refused.value.message)
        # Past the 4 s it was created with (and the 1 s grace of completionTime's seconds).
        await asyncio.sleep(max(ts(raised["status"]["completionTime"]) + 6 - time.time(), 0))
        kept = await world.get("raised")
    assert kept["spec"]["retention"] == {"ttlAfterFailed": "1h"}
    assert kept["status"] == raised["status"]  # the outcome untouched


async def test_deletion_never_hits_a_recreated_namesake(kube: Kube, world: World) -> None:
    old = await world.buildrun("br", build_ref="missing")
    await kube.delete(BUILDRUNS, world.ns, "br")
    await world.buildrun("br", build_ref="missing")
    reconciler = BuildRunReconciler(kube, Caches(), EventRecorder(kube, "t", "t"),
                                    executor=TASKRUN)
    with pytest.raises(ApiError) as err:
        await reconciler.actions.delete(old)
    assert err.value.status == 409
    assert (await world.get("br"))["metadata"]["uid"] != old["metadata"]["uid"]


async def test_at_build_deletion_makes_the_build_the_owner(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    build = await world.build("owned", retention={"atBuildDeletion": True})
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br", build_ref="owned")
        await world.buildrun("plain")
        await world.taskrun_of("br")
        await world.taskrun_of("plain")
    refs = (await world.get("br"))["metadata"]["ownerReferences"]
    assert [(r["kind"], r["uid"]) for r in refs] == [("Build", build["metadata"]["uid"])]
    assert "ownerReferences" not in (await world.get("plain"))["metadata"]


async def test_build_deleted_while_running_does_not_fail_the_buildrun(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    world.fate("br", fate="hold")
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br")
        await world.taskrun_of("br")
        await kube.delete(BUILDS, world.ns, "app")
        await running_pod(world, "br")
        await asyncio.sleep(0.5)
        await release(world, "br")
        done = await world.finished("br", 30)
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert done["status"]["buildSpec"]["strategy"]["name"] == "kaniko"


async def test_taskrun_deleted_after_completion_changes_nothing(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br")
        tr_name = await world.taskrun_of("br")
        before = await world.finished("br", 30)
        await kube.delete(TASKRUNS, world.ns, tr_name)
        await asyncio.sleep(1.0)
        after = await world.get("br")
    assert after["status"] == before["status"]


async def test_failure_details_come_from_the_strategy_results(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    world.fate("br", fate="fail", results=results(**{
        "shp-error-reason": "GitAuthFailed",
        "shp-error-message": "authentication to the git remote failed"}))
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br")
        done = await world.finished("br", 30)
    details = done["status"]["failureDetails"]
    assert details["reason"] == "GitAuthFailed"
    assert details["message"] == "authentication to the git remote failed"
    pod = (await taskrun(world, "br"))["status"]["podName"]
    assert details["location"] == {"pod": pod, "container": "step-build"}


async def test_last_transition_time_moves_only_when_the_status_changes(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    # The pod stays Pending 1.5 s (timestamps have whole seconds), then holds Running.
    world.fate("br", fate="hold", start_delay="1500ms")
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br")
        await world.taskrun_of("br")
        pending = condition(await world.get("br"))

        async def running() -> dict[str, str] | None:
            c = condition(await world.get("br"))
            return c if c.get("reason") == reasons.RUNNING else None
        running_cond = await wait_for(running, 30, what="Running")
        await asyncio.sleep(1.1)
        await release(world, "br")
        done = condition(await world.finished("br", 30))
    assert pending["status"] == running_cond["status"] == "Unknown"
    assert running_cond["lastTransitionTime"] == pending["lastTransitionTime"]
    assert done["lastTransitionTime"] > running_cond["lastTransitionTime"]
