"""The controller against REAL Tekton Pipelines (devtools.cluster.stack.TektonStack).

The session's stack (tests/conftest.py): Tekton's CRDs plus the repo's
manifests/crds, the scheduler, kwok as the kubelet, kube-controller-manager
(garbage collector, namespaces, ServiceAccounts) and Tekton's webhook and
controller. The controller runs in-process per test, watching the test's
namespace. Every assertion is on the BuildRun status our controller wrote from
what Tekton wrote; a test picks what kwok does with a pod with `world.fate(...)`
(devtools.fakes.fates).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.caches import Caches
from controller.buildrun.executors import TASKRUN
from controller.buildrun.outcomes import run_finished
from controller.buildrun.reconciler import BuildRunReconciler
from controller.runtime.events import EventRecorder
from controller.runtime.kube import JSON, PODS, ApiError, Kube, Resource
from controller.runtime.timestamps import parse_time
from controller.settings import RetryBudget
from controller.shipwright.resources import BUILDRUNS, BUILDS, BUILDSTRATEGIES, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.fixtures import API
from devtools.cluster.stack import TektonStack
from devtools.fakes.fates import PREFIX, results
from devtools.hack import StackError
from tests.harness import (
    World,
    assert_start_copied,
    condition,
    controller_settings,
    gone,
    metric,
    pods,
    running_controller,
    running_pod,
    taskrun,
    tekton_verdict,
    wait_for,
)

pytestmark = pytest.mark.cluster

LIMITRANGES = Resource("", "v1", "limitranges", "LimitRange")
QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
DIGEST = "sha256:" + "ab" * 32


async def strategy(w: World, name: str, steps: list[JSON]) -> JSON:
    return await w.kube.create(
        BUILDSTRATEGIES, w.ns,
        {"apiVersion": API, "kind": "BuildStrategy", "metadata": {"name": name},
         "spec": {"parameters": [fixtures.dockerfile_parameter()], "steps": steps}})


def controller(stack: TektonStack, w: World, **overrides: Any) -> Any:
    return running_controller(controller_settings(stack.cluster, w.ns, **overrides))


async def test_a_component_that_exits_is_named_not_waited_for(tmp_path: Path) -> None:
    """kwok exiting at once (here /bin/false) ends start() with StackError naming it,
    while the API server and scheduler it already started are stopped."""
    broken = TektonStack(tmp_path / "broken")
    broken._kwok_bin = Path("/bin/false")
    t = time.monotonic()
    with pytest.raises(StackError, match=r"^kwok exited with 1"):
        await broken.start()
    assert time.monotonic() - t < 30
    assert broken.pids() == {}


# -- outcomes of a pod that ran ---------------------------------------------------------


async def test_happy_path_reports_the_digest_tekton_read_from_the_pod(
    stack: TektonStack, world: World
) -> None:
    world.fate("ok", results=results(**{"shp-image-digest": DIGEST}))
    async with controller(stack, world):
        await world.buildrun("ok")
        done = await world.finished("ok", 60)
    tr = await taskrun(world, "ok")
    assert condition(done)["status"] == "True", done["status"]
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert done["status"]["output"]["digest"] == DIGEST
    # What Tekton's defaulting webhook added to the TaskRun our controller generated.
    assert tr["spec"]["serviceAccountName"] == "default"
    assert tr["spec"]["timeout"] == "1h0m0s"
    assert tr["status"]["podName"]
    assert {r["name"]: r["value"] for r in tr["status"]["results"]} == {
        "shp-image-digest": DIGEST}


async def test_failing_step_is_failed_with_failure_details(
    stack: TektonStack, world: World
) -> None:
    world.fate("bad", fate="fail", exit_code="3")
    async with controller(stack, world):
        await world.buildrun("bad")
        done = await world.finished("bad", 60)
    cond = condition(done)
    tr = await taskrun(world, "bad")
    pod_name = tr["status"]["podName"]
    # Tekton v1.12 says StepFailed (v1.10 said Failed); Shipwright's reason and words.
    assert (cond["status"], cond["reason"]) == ("False", reasons.FAILED), cond
    assert cond["message"] == (
        f"buildrun step step-build failed, for detailed information: kubectl --namespace "
        f"{world.ns} logs {pod_name} --container=step-build")
    # The strategy wrote no error results: only where it failed (UpdateBuildRunUsingTaskFailures).
    assert done["status"]["failureDetails"] == {
        "location": {"pod": pod_name, "container": "step-build"}}


async def test_oom_killed_step_is_step_out_of_memory(
    stack: TektonStack, world: World
) -> None:
    world.fate("oom", fate="oom")
    async with controller(stack, world):
        await world.buildrun("oom")
        done = await world.finished("oom", 60)
    assert condition(done)["reason"] == reasons.STEP_OUT_OF_MEMORY, condition(done)
    assert done["status"]["failureDetails"]["location"]["container"] == "step-build"


async def test_evicted_pod_is_pod_evicted(
    stack: TektonStack, world: World
) -> None:
    world.fate("ev", fate="hold")
    async with controller(stack, world):
        await world.buildrun("ev")
        pod = await running_pod(world, "ev")
        await world.kube.patch(PODS, world.ns, pod["metadata"]["name"], {
            "metadata": {"annotations": {PREFIX + "fate": "evict"}}})
        done = await world.finished("ev", 60)
    assert condition(done)["reason"] == reasons.POD_EVICTED, condition(done)
    assert done["status"]["failureDetails"]["location"]["pod"] == pod["metadata"]["name"]


# -- stopping a TaskRun ----------------------------------------------------------------


async def test_timeout_tekton_stops_the_taskrun_and_deletes_its_pod(
    stack: TektonStack, world: World
) -> None:
    """Tekton's timeout ends the TaskRun (TaskRunTimeout), as under Shipwright: the
    BuildRun's startTime is the TaskRun's, so our own deadline, a backstop --timeout-grace
    later (60 s here), never comes first."""
    world.fate("slow", fate="hold")
    async with controller(stack, world):
        await world.buildrun("slow", timeout="3s")
        pod = await running_pod(world, "slow")
        done = await world.finished("slow", 60)
        await gone(world, PODS, pod["metadata"]["name"])
    assert condition(done)["reason"] == reasons.BUILD_RUN_TIMEOUT, condition(done)
    # Shipwright's words (its integration suite checks them).
    assert condition(done)["message"] == "BuildRun slow failed to finish within 3s"
    tr = await taskrun(world, "slow")
    assert tr["spec"]["timeout"] == "3s"
    assert "status" not in tr["spec"], tr["spec"]  # never cancelled by us
    tekton = await tekton_verdict(world, "slow")
    assert (tekton["status"], tekton["reason"]) == ("False", "TaskRunTimeout"), tekton
    tr = await taskrun(world, "slow")
    assert_start_copied(done, tr)
    late = (parse_time(tr["status"]["completionTime"]) - parse_time(  # type: ignore[operator]
        tr["status"]["startTime"])).total_seconds() - 3
    print(f"\ntimeout: TaskRun {tekton['reason']} {late:.0f} s after its 3 s "
          f"(completionTime - startTime - timeout, whole seconds)")


async def test_the_timeout_backstop_when_tekton_never_ends_the_taskrun(
    stack: TektonStack, world: World
) -> None:
    """Tekton's controller down: nobody starts the TaskRun nor times it out. The BuildRun
    ends BuildRunTimeout --timeout-grace past its timeout, counted from the TaskRun's
    creation, and its TaskRun is cancelled, which Tekton carries out once it is back."""
    stack.tekton.stop_controller()
    try:
        async with controller(stack, world, timeout_grace=2.0):
            await world.buildrun("stuck", timeout="2s")
            name = await world.taskrun_of("stuck")
            done = await world.finished("stuck", 30)

            async def cancelled() -> JSON | None:  # the cancel follows the status write
                tr = await taskrun(world, "stuck")
                return tr if tr["spec"].get("status") == "TaskRunCancelled" else None
            tr = await wait_for(cancelled, 10, 0.1, what="the TaskRun to be cancelled")
    finally:
        stack.tekton.start_controller()
    assert (condition(done)["reason"], condition(done)["message"]) == (
        reasons.BUILD_RUN_TIMEOUT, "BuildRun stuck failed to finish within 2s")
    assert "startTime" not in done["status"]  # Tekton never started the TaskRun
    waited = (parse_time(done["status"]["completionTime"]) - parse_time(  # type: ignore[operator]
        tr["metadata"]["creationTimestamp"])).total_seconds()
    assert 4 <= waited <= 8, waited  # 2 s + 2 s of grace, whole seconds, a loaded machine
    assert tr["metadata"]["name"] == name
    tekton = await tekton_verdict(world, "stuck")
    assert (tekton["status"], tekton["reason"]) == ("False", "TaskRunCancelled"), tekton


async def test_cancel_makes_tekton_delete_the_pod(
    stack: TektonStack, world: World
) -> None:
    world.fate("c", fate="hold")
    async with controller(stack, world):
        await world.buildrun("c")
        pod = await running_pod(world, "c")
        await world.kube.patch(BUILDRUNS, world.ns, "c", {"spec": {"state": "BuildRunCanceled"}})
        done = await world.finished("c", 60)
        await gone(world, PODS, pod["metadata"]["name"])
    assert condition(done)["reason"] == reasons.BUILD_RUN_CANCELED, condition(done)
    tr = await taskrun(world, "c")
    assert tr["spec"]["status"] == "TaskRunCancelled"
    assert (await tekton_verdict(world, "c"))["reason"] == "TaskRunCancelled"


async def test_a_cancel_that_meets_a_deleted_taskrun_creates_nothing(
    stack: TektonStack, world: World
) -> None:
    """The cancel is a server-side apply (as Shipwright's Cancel), which would create a
    TaskRun deleted since it was read: pinned to the uid read, the API server refuses it
    (409, "no existing object was found"; unpinned, Tekton's webhook refused one with
    nothing but spec.status), and the cancel takes that as a run with nothing to stop."""
    world.fate("gone", fate="hold")
    async with controller(stack, world):
        await world.buildrun("gone")
        tr = await taskrun(world, "gone")
    name = tr["metadata"]["name"]
    await world.kube.delete(TASKRUNS, world.ns, name)

    async def deleted() -> bool:
        return await world.kube.get_or_none(TASKRUNS, world.ns, name) is None
    await wait_for(deleted, 30, 0.1, what="the TaskRun to go")
    reconciler = BuildRunReconciler(world.kube, Caches(), EventRecorder(world.kube, "t", "t"),
                                    executor=TASKRUN)
    await reconciler.actions.cancel(TASKRUN, tr)
    assert await world.kube.get_or_none(TASKRUNS, world.ns, name) is None


async def test_deleted_taskrun_is_missing_and_its_pod_collected(
    stack: TektonStack, world: World
) -> None:
    world.fate("d", fate="hold")
    async with controller(stack, world):
        await world.buildrun("d")
        pod = await running_pod(world, "d")
        tr_name = await world.taskrun_of("d")
        await world.kube.delete(TASKRUNS, world.ns, tr_name)
        done = await world.finished("d", 60)
        await gone(world, PODS, pod["metadata"]["name"])
    assert condition(done)["reason"] == reasons.TASK_RUN_IS_MISSING, condition(done)


# -- garbage collection by kube-controller-manager --------------------------------------


async def test_deleted_buildrun_takes_its_taskrun_and_pod(
    stack: TektonStack, world: World
) -> None:
    world.fate("g", fate="hold")
    async with controller(stack, world):
        await world.buildrun("g")
        pod = await running_pod(world, "g")
        tr_name = await world.taskrun_of("g")
        await world.kube.delete(BUILDRUNS, world.ns, "g")
        await gone(world, TASKRUNS, tr_name)
        await gone(world, PODS, pod["metadata"]["name"])


async def test_build_deletion_cascades_with_retention_at_build_deletion(
    stack: TektonStack, world: World
) -> None:
    await world.build("kept", retention={"atBuildDeletion": True})
    async with controller(stack, world):
        await world.buildrun("r", build_ref="kept")
        done = await world.finished("r", 60)
        assert condition(done)["status"] == "True", done["status"]
        owners = (await world.get("r"))["metadata"].get("ownerReferences") or []
        assert [o["kind"] for o in owners] == ["Build"]
        tr_name = done["status"]["taskRunName"]
        await world.kube.delete(BUILDS, world.ns, "kept")
        await gone(world, BUILDRUNS, "r")
        await gone(world, TASKRUNS, tr_name)


# -- refusals ---------------------------------------------------------------------------


async def test_pod_refused_by_a_limit_range_fails_without_a_pod(
    stack: TektonStack, world: World
) -> None:
    # A per-Pod maximum needs every container to state a memory limit, and none does, so
    # LimitRanger refuses the pod (403 Forbidden). A per-Container minimum would not do:
    # Tekton reads the namespace's LimitRanges and raises its containers' requests to fit.
    await world.kube.create(LIMITRANGES, world.ns, {
        "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "max-memory"},
        "spec": {"limits": [{"type": "Pod", "max": {"memory": "1Gi"}}]}})
    async with controller(stack, world):
        await world.buildrun("lr")
        done = await world.finished("lr", 60)
    cond = condition(done)
    tr = await taskrun(world, "lr")
    print(f"\nLimitRange: TaskRun {condition(tr)['reason']}: {condition(tr)['message'][:300]}")
    # Tekton's own reason, kept as Shipwright keeps it.
    assert (cond["status"], cond["reason"]) == ("False", "PodCreationFailed"), cond
    assert "maximum memory usage per Pod is 1Gi" in cond["message"]
    assert condition(tr)["reason"] == "PodCreationFailed"
    assert not (tr["status"].get("podName")) and await pods(world) == []


async def test_pod_over_quota_keeps_the_buildrun_waiting_with_tektons_reason(
    stack: TektonStack, world: World
) -> None:
    """Tekton treats "exceeded quota" as passing: the TaskRun waits (retried each minute),
    and the BuildRun shows Tekton's reason and message, as Shipwright copies them."""
    await world.kube.create(QUOTAS, world.ns, {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}}})
    # No resourcequota controller runs: write the status it would, or admission answers
    # "status unknown for quota" (which Tekton would take as a plain failure).
    await world.kube.patch(QUOTAS, world.ns, "no-pods", {
        "status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}}, subresource="status")
    async with controller(stack, world):
        await world.buildrun("q")

        async def pending_on_quota() -> JSON | None:
            cond = condition(await world.get("q"))
            return cond if "exceeded quota" in cond.get("message", "") else None
        cond = await wait_for(pending_on_quota, 30, what="a reason naming the quota")
        tr = await taskrun(world, "q")
    print(f"\nquota: BuildRun {cond['reason']}: {cond['message'][:250]}")
    assert (condition(tr)["status"], condition(tr)["reason"]) == (
        "Unknown", "ExceededResourceQuota")
    assert (cond["status"], cond["reason"]) == ("Unknown", "ExceededResourceQuota"), cond
    assert await pods(world) == []


async def test_taskrun_refused_by_tekton_webhook_is_generation_failed(
    stack: TektonStack, world: World
) -> None:
    await strategy(world, "nope", [{"name": "build", "image": "busybox",
                                     "command": ["echo"], "args": ["$(params.nope)"]}])
    await world.build("uses-nope", strategy="nope")
    async with controller(stack, world):
        await world.buildrun("n", build_ref="uses-nope")
        done = await world.finished("n", 60)
    cond = condition(done)
    print(f"\nTekton refused: {cond['message'][:400]}")
    assert cond["reason"] == reasons.TASK_RUN_GENERATION_FAILED, cond
    assert "validation.webhook.pipeline.tekton.dev" in cond["message"]
    assert "$(params.nope)" in cond["message"]
    assert await world.taskruns() == []


@pytest.mark.parametrize("param", ["shp-source-context", "shp-source-root",
                                   "shp-output-directory", "shp-output-insecure"])
async def test_shipwright_system_parameters_are_admitted_by_tekton(
    stack: TektonStack, world: World, param: str
) -> None:
    await strategy(world, "sys", [{"name": "build", "image": "busybox", "command": ["echo"],
                                    "args": [f"$(params.{param})"]}])
    await world.build("sys", strategy="sys")
    async with controller(stack, world):
        await world.buildrun("s", build_ref="sys")
        done = await world.finished("s", 60)
    # Before issue 15: TaskRunGenerationFailed, Tekton's webhook refusing
    # 'non-existent variable in "$(params.shp-source-context)"'.
    assert condition(done)["reason"] == reasons.SUCCEEDED, condition(done)


async def test_webhook_down_is_retried_until_it_returns(
    stack: TektonStack, world: World
) -> None:
    world.fate("w", results=results(**{"shp-image-digest": DIGEST}))
    errors_before = metric("controller_runtime_reconcile_total", controller="buildrun",
                           result="error")
    stack.tekton.stop_webhook()
    try:
        # More retries than the harness's 8: the webhook takes about a second to return.
        budget = RetryBudget(max_retries=100, max_age=0)
        async with controller(stack, world, budget=budget):
            await world.buildrun("w")
            # The API server answers 500 "failed calling webhook": a system error, so the
            # controller retries with backoff (0.05 s doubling to 2 s) and records nothing.
            await wait_for(lambda: metric("controller_runtime_reconcile_total",
                                          controller="buildrun", result="error")
                           >= errors_before + 3, 30, what="three failed reconciles")
            status = (await world.get("w")).get("status") or {}
            assert not status.get("taskRunName") and not status.get("completionTime"), status
            assert await world.taskruns() == []
            stack.tekton.start_webhook()
            await stack.tekton.webhook_admits()
            done = await world.finished("w", 60)
    finally:
        stack.tekton.start_webhook()
        await stack.tekton.webhook_admits()
    assert condition(done)["reason"] == reasons.SUCCEEDED, condition(done)
    assert done["status"]["output"]["digest"] == DIGEST


async def test_our_taskruns_of_every_shipwright_sample_are_admitted_by_tekton(
    stack: TektonStack, kube: Kube
) -> None:
    """The running Tekton (v1.10.3, webhook and API server) admits the TaskRun we generate
    for each of Shipwright's 11 sample Builds (dry run; tests/oracle checks the same
    TaskRuns against Shipwright's own with Tekton v1.12.0's validation)."""
    from tests.oracle.parity import NAMESPACE, ours
    from tests.oracle.test_parity import sample_cases

    await kube.create(Resource("", "v1", "namespaces", "Namespace", namespaced=False), None,
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    refused = {}
    cases = sample_cases()
    for case_id, strategy, build, buildrun, env in cases:
        taskrun = ours(strategy, build, buildrun, "default", env)
        try:
            await stack.cluster.request(
                "POST", f"/apis/tekton.dev/v1/namespaces/{NAMESPACE}/taskruns?dryRun=All",
                taskrun)
        except RuntimeError as exc:
            refused[case_id] = str(exc)[:500]
    assert len(cases) == 11
    assert not refused, refused
    # The same check sees a refusal: issue 15's, a system parameter used but not declared.
    broken = ours(*cases[0][1:4], "default", {})
    for where in (broken["spec"], broken["spec"]["taskSpec"]):
        where["params"] = [p for p in where["params"] if p["name"] != "shp-source-root"]
    with pytest.raises(RuntimeError, match="non-existent variable"):
        await stack.cluster.request(
            "POST", f"/apis/tekton.dev/v1/namespaces/{NAMESPACE}/taskruns?dryRun=All", broken)


async def test_cancelling_a_taskrun_tekton_finished_meanwhile_is_not_an_error(
    stack: TektonStack, kube: Kube, world: World
) -> None:
    """Tekton finishes a TaskRun between our read and our cancel: its webhook refuses the
    cancel (400, no update to a finished TaskRun), and there is nothing left to cancel."""
    async with controller(stack, world):
        await world.buildrun("raced")
        done = await world.finished("raced", 60)
    assert condition(done)["reason"] == reasons.SUCCEEDED
    stale = await taskrun(world, "raced")
    stale.pop("status")  # what a reconcile read before Tekton's verdict
    with pytest.raises(ApiError) as refused:  # Tekton's webhook, as the reconciler meets it
        await kube.patch(TASKRUNS, world.ns, stale["metadata"]["name"],
                         {"spec": {"status": "TaskRunCancelled"}})
    assert refused.value.status == 400, refused.value
    reconciler = BuildRunReconciler(kube, Caches(), EventRecorder(kube, "t", "t"),
                                    executor=TASKRUN)
    await reconciler.actions.cancel(TASKRUN, stale)  # returns: nothing to cancel
    assert run_finished(await taskrun(world, "raced"))


# -- the stack's storage, for PipelineRuns -------------------------------------------------


async def test_a_pipelinerun_with_a_claim_template_workspace_binds_and_runs(
    stack: TektonStack, world: World
) -> None:
    """Shipwright's PipelineRun executor binds its `source` workspace with a
    volumeClaimTemplate (1Gi RWO, no storage class): on the stack the default
    StorageClass's hostPath provisioner binds it, Tekton's affinity assistant (a
    StatefulSet) is scheduled, both tasks run, and deleting the PipelineRun takes the
    claim and its volume with it (claim protection lets them go)."""
    pipelineruns = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
    claims = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
    volumes = Resource("", "v1", "persistentvolumes", "PersistentVolume")
    task = {"workspaces": [{"name": "source"}],
            "steps": [{"name": "s", "image": "busybox", "script": "true"}]}
    await world.kube.create(pipelineruns, world.ns, {
        "apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "metadata": {"name": "pr"},
        "spec": {
            "pipelineSpec": {"workspaces": [{"name": "source"}], "tasks": [
                {"name": "one", "taskSpec": task,
                 "workspaces": [{"name": "source", "workspace": "source"}]},
                {"name": "two", "taskSpec": task, "runAfter": ["one"],
                 "workspaces": [{"name": "source", "workspace": "source"}]}]},
            "workspaces": [{"name": "source", "volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}}]}})

    async def finished() -> JSON | None:
        pr = await world.kube.get(pipelineruns, world.ns, "pr")
        done = run_finished(pr)  # a PipelineRun's Succeeded condition reads the same
        return pr if done else None

    pr = await wait_for(finished, 90, 0.5)
    assert condition(pr)["status"] == "True", pr["status"]
    [claim] = (await world.kube.list(claims, world.ns))["items"]
    assert claim["status"]["phase"] == "Bound"
    assert claim["spec"]["storageClassName"] == "hostpath"
    volume = claim["spec"]["volumeName"]
    await world.kube.delete(pipelineruns, world.ns, "pr")

    async def released() -> bool:
        left = (await world.kube.list(claims, world.ns))["items"]
        return not left and await world.kube.get_or_none(volumes, None, volume) is None

    await wait_for(released, 60, 0.5)
