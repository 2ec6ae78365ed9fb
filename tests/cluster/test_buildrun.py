"""The BuildRun state machine against the real API server, row by row.

TaskRuns are run by the session's real Tekton and their pods by kwok, whose fate
each test picks (`world.fate`); TektonStatusWriter writes only the one TaskRun state
Tekton never produces (a success after the cancel was asked for).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import orjson
import pytest

from bench.e2e.common import apiserver_requests
from controller.buildrun import reasons, serviceaccounts
from controller.buildrun.caches import Caches
from controller.buildrun.executors import TASKRUN
from controller.buildrun.reconciler import BuildRunReconciler
from controller.buildrun.setup import FINISH_PRIORITY
from controller.runtime.errors import RetryableError
from controller.runtime.events import EventRecorder
from controller.runtime.kube import EVENTS, JSON, SERVICEACCOUNTS, USER_AGENT, ApiError, Kube
from controller.settings import LeaderElectionSettings
from controller.shipwright import field_managers
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.params import (
    MISSING_PARAMETER_VALUES,
    RESTRICTED_PARAMETERS_IN_USE,
    UNDEFINED_PARAMETER,
    WRONG_PARAMETER_VALUE_TYPE,
)
from controller.shipwright.resources import BUILDRUNS, BUILDS, BUILDSTRATEGIES, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.stack import TektonStack
from devtools.fakes.fates import FateWebhook, results
from devtools.fakes.tekton import TektonStatusWriter
from tests.harness import (
    World,
    assert_start_copied,
    condition,
    controller_settings,
    in_flight,
    metric,
    release,
    running_controller,
    running_pod,
    tekton_verdict,
    wait_for,
)

pytestmark = pytest.mark.cluster


async def taskrun_cancelled(kube: Kube, namespace: str, name: str) -> bool:
    taskrun = await kube.get(TASKRUNS, namespace, name)
    return (taskrun.get("spec") or {}).get("status") == "TaskRunCancelled"


async def unrecorded_taskrun(kube: Kube, buildrun: JSON) -> JSON:
    """Row 12's first half done by hand (prepare, create the TaskRun), then a "crash"
    before the status write: the TaskRun exists, the BuildRun does not know it."""
    half = BuildRunReconciler(kube, Caches(), EventRecorder(kube, "t", "t"),
                              executor=TASKRUN)
    build, _ = await half.planner.validated_build(buildrun)
    taskrun = (await half.planner.prepare(buildrun, build)).run
    await kube.create(TASKRUNS, buildrun["metadata"]["namespace"], taskrun)
    return taskrun


def reconciles(result: str) -> float:
    return metric("controller_runtime_reconcile_total", controller="buildrun", result=result)


async def events_for(kube: Kube, namespace: str, name: str) -> list[str]:
    items = (await kube.list(EVENTS, namespace))["items"]
    return [e["reason"] for e in items if e["involvedObject"]["name"] == name]


# -- happy path and TaskRun outcomes (rows 12, 19, 14) -------------------------------------


async def test_a_run_s_end_is_queued_ahead_of_new_buildruns(
    cluster: LocalCluster, world: World
) -> None:
    """Issue 42 part 3: a TaskRun's end, as real Tekton reports it, queues its BuildRun
    ahead of BuildRuns created before it. Seen in a standby replica's queue, which its
    informers fill as the leader's and no worker drains: the leader runs the builds."""
    lease = LeaderElectionSettings(namespace=world.ns, name="order", lease_duration=2.0,
                                   renew_deadline=1.5, retry_period=0.2)
    settings = controller_settings(cluster, world.ns)
    for name in ("ends", "new-1", "new-2"):
        world.fate(name, fate="hold")  # the new ones run on, to show only the end moves up
    async with running_controller(replace(settings, leader_election=replace(
            lease, identity="leader")), "leader") as leader:
        await wait_for(lambda: bool(leader.controller("buildrun").running), what="leadership")
        async with running_controller(replace(settings, leader_election=replace(
                lease, identity="standby")), "standby") as standby:
            queue = standby.controller("buildrun").queue
            await world.buildrun("ends")
            await running_pod(world, "ends")
            for _ in range(len(queue)):  # what the standby queued so far: set aside
                queue.done((await queue.get_with_priority())[0])
            for name in ("new-1", "new-2"):
                await world.buildrun(name)
                await world.taskrun_of(name)  # started by the leader: its progress too
            await release(world, "ends")
            await world.finished("ends", 30)
            queued = [await queue.get_with_priority() for _ in range(len(queue))]
    ns = world.ns
    assert queued[0] == (f"{ns}/ends", FINISH_PRIORITY), queued
    # New work at the default priority, behind the end although it came first; what the
    # leader's starts brought (their TaskRuns' creation) does not lower it.
    assert queued[1:3] == [(f"{ns}/new-1", 0), (f"{ns}/new-2", 0)], queued
    assert all(priority <= 0 for _, priority in queued[1:]), queued


async def test_success_creates_one_owned_taskrun_and_reports_the_digest(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    world.fate("ok", fate="hold", results=results(**{"shp-image-digest": "sha256:" + "cd" * 32}))
    async with running_controller(controller_settings(cluster, world.ns)):
        created = await world.buildrun("ok")
        tr_name = await world.taskrun_of("ok")
        pending = await world.get("ok")
        assert condition(pending)["status"] == "Unknown"
        assert condition(pending)["reason"] == reasons.PENDING
        snapshot = pending["status"]["buildSpec"]
        assert snapshot["output"]["image"] == "registry.example.com/app:latest"

        async def running() -> bool:
            return condition(await world.get("ok")).get("reason") == reasons.RUNNING
        await wait_for(running, 30, what="Running reason")
        # Shipwright's startTime: the TaskRun's, copied once Tekton has started it.
        assert_start_copied(await world.get("ok"), await kube.get(TASKRUNS, world.ns, tr_name))
        await release(world, "ok")
        done = await world.finished("ok", 30)

    assert condition(done)["status"] == "True"
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert done["status"]["output"]["digest"] == "sha256:" + "cd" * 32
    taskruns = await world.taskruns()
    assert [t["metadata"]["name"] for t in taskruns] == [tr_name]
    owner = taskruns[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "BuildRun", created["metadata"]["uid"], True)
    assert {reasons.RUNNING, reasons.SUCCEEDED} <= set(
        await events_for(kube, world.ns, "ok"))


async def test_a_start_costs_one_taskrun_create_and_one_status_write(
    stack: TektonStack, world: World
) -> None:
    """Build and BuildStrategy come from the informers' caches once they hold them,
    and the start write already says what the next reconcile would (Pending), so
    that reconcile writes nothing. Counted by the API server itself, with Tekton's
    controller stopped: its first TaskRun status (a new message) would rightly cost a
    second write."""
    cluster = stack.cluster
    stack.tekton.stop_controller()
    try:
        async with running_controller(controller_settings(cluster, world.ns)) as app:
            key = f"{world.ns}/"
            await wait_for(lambda: app.informers.get(BUILDS).store.get(key + "app")
                           and app.informers.get(BUILDSTRATEGIES).store.get(key + "kaniko"),
                           what="cached")
            before = await apiserver_requests(cluster)
            await world.buildrun("cached")
            await world.taskrun_of("cached")
            await asyncio.sleep(1.0)  # the reconciles the TaskRun's and status's events cause
            after = await apiserver_requests(cluster)
    finally:
        stack.tekton.start_controller()
    made = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert "GET builds" not in made and "GET buildstrategies" not in made, made
    assert made.get("POST taskruns") == 1 and made.get("PUT buildruns/status") == 1, made


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("failure", reasons.FAILED),
        ("timeout", reasons.BUILD_RUN_TIMEOUT),
        # Someone else cancelled the TaskRun: Tekton's reason, as Shipwright keeps it.
        ("cancelled", reasons.TASK_RUN_CANCELLED),
        ("oom", reasons.STEP_OUT_OF_MEMORY),
        ("evicted", reasons.POD_EVICTED),
    ],
)
async def test_taskrun_failures_map_to_buildrun_reasons(
    cluster: LocalCluster, kube: Kube, world: World, how: Any, reason: str
) -> None:
    fate = {"failure": "fail", "oom": "oom", "evicted": "evict"}.get(how, "hold")
    world.fate("br", fate=fate)
    spec = {"timeout": "3s"} if how == "timeout" else {}
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br", **spec)
        tr_name = await world.taskrun_of("br")
        if how == "cancelled":  # someone else cancels the TaskRun; Tekton stops it
            await running_pod(world, "br")
            await kube.patch(TASKRUNS, world.ns, tr_name, {"spec": {"status": "TaskRunCancelled"}})
        done = await world.finished("br", 30)
    assert condition(done)["status"] == "False"
    assert condition(done)["reason"] == reason
    if how in ("failure", "oom"):
        assert done["status"]["failureDetails"]["location"]["container"] == "step-build"
        assert "--container=step-build" in condition(done)["message"]


# -- user errors: terminal at once, no TaskRun, no requeue (row 8) -------------------------


USER_ERRORS: list[tuple[str, dict[str, Any], str | None, str]] = [
    ("missing-build", {}, "nope", reasons.BUILD_NOT_FOUND),
    ("missing-sa", {"serviceAccount": "ghost"}, "app", reasons.SERVICE_ACCOUNT_NOT_FOUND),
    ("undefined-param", {"paramValues": [{"name": "colour", "value": "red"}]}, "app",
     UNDEFINED_PARAMETER),
    ("restricted-param", {"paramValues": [{"name": "shp-source-url", "value": "x"}]}, "app",
     RESTRICTED_PARAMETERS_IN_USE),
    ("wrong-type", {"paramValues": [{"name": "dockerfile", "values": [{"value": "a"}]}]}, "app",
     WRONG_PARAMETER_VALUE_TYPE),
    ("bad-timeout", {"timeout": "1 day"}, "app", reasons.INVALID_TIMEOUT),
    ("negative-timeout", {"timeout": "-5m"}, "app", reasons.INVALID_TIMEOUT),
    ("no-ref", {"build": {}}, None, reasons.BUILD_RUN_NO_REF_OR_SPEC),
    ("ambiguous", {"build": {"name": "app", "spec": {
        "strategy": {"name": "kaniko"}, "output": {"image": "x"}}}}, None,
     reasons.BUILD_RUN_AMBIGUOUS_BUILD),
    ("override-forbidden", {"build": {"spec": {
        "strategy": {"name": "kaniko"}, "output": {"image": "x"}}}, "timeout": "5m"}, None,
     reasons.BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN),
    ("other-namespace", {}, "kube-system/app", reasons.INVALID_REFERENCE),
    # An embedded spec is validated as a Build is (Shipwright): its missing strategy
    # fails the registration.
    ("missing-strategy", {"build": {"spec": {
        "strategy": {"name": "ghost"}, "output": {"image": "x"}}}}, None,
     reasons.BUILD_REGISTRATION_FAILED),
    # A BuildRun's own fields are checked before its TaskRun, as Shipwright checks them;
    # platforms ask for a multi-arch build, which takes PipelineRuns (we run TaskRuns).
    ("bad-toleration", {"tolerations": [{"key": "k", "operator": "Exists",
                                         "effect": "NoExecute"}]}, "app",
     reasons.TOLERATION_NOT_VALID),
    ("platforms", {"output": {"image": "registry.example.com/x", "platforms": [
        {"os": "linux", "arch": "amd64"}, {"os": "linux", "arch": "arm64"}]}}, "app",
     reasons.EXECUTOR_NOT_PIPELINE_RUN),
]


async def test_user_errors_are_terminal_at_once(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await world.strategy("needs-param", parameters=[{"name": "context", "description": "x",
                                                     "type": "string"}])
    await world.build("needs-param", strategy="needs-param")
    cases = [*USER_ERRORS, ("missing-value", {}, "needs-param", MISSING_PARAMETER_VALUES)]
    errors_before = reconciles("error")
    async with running_controller(controller_settings(cluster, world.ns)):
        for name, spec, build, _ in cases:
            await world.buildrun(name, build_ref=build, **spec)
        done = {name: await world.finished(name) for name, *_ in cases}
        await asyncio.sleep(0.5)  # room for any (wrong) requeue to show
        assert reconciles("error") == errors_before
    for name, _, _, reason in cases:
        br = done[name]
        assert condition(br)["status"] == "False", name
        assert condition(br)["reason"] == reason, (name, condition(br))
        assert condition(br)["message"], name
        assert br["status"]["completionTime"], name
        assert "taskRunName" not in br["status"], name
    assert await world.taskruns() == []


async def test_a_name_over_63_characters_fails_as_shipwrights(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """Shipwright's BuildRunNameInvalid, in its words: the name is the value of the
    buildrun.shipwright.io/name label every lookup of its TaskRun uses. A 63-character
    name runs, its TaskRun found by that label with the whole name."""
    long, fits = "s" * 64, "s" * 63
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun(long)
        await world.buildrun(fits)
        refused = await world.finished(long)
        ran = await world.finished(fits)
    assert (condition(refused)["reason"], condition(refused)["message"]) == (
        reasons.BUILD_RUN_NAME_INVALID, "must be no more than 63 bytes")
    assert "taskRunName" not in refused["status"]
    assert condition(ran)["reason"] == reasons.SUCCEEDED, condition(ran)
    [found] = (await kube.list(TASKRUNS, world.ns,
                               labelSelector=f"{LABEL_BUILDRUN}={fits}"))["items"]
    assert found["metadata"]["name"] == ran["status"]["taskRunName"]
    assert [t["metadata"]["name"] for t in await world.taskruns()] == [found["metadata"]["name"]]


# -- cancel (rows 7, 17), a deleted TaskRun (16), the DONE rows (1, 4) -------------------


async def test_cancel_before_start_and_while_running(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    cancel = {"spec": {"state": "BuildRunCanceled"}}
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("early", state="BuildRunCanceled")
        early = await world.finished("early")
        await world.buildrun("late")
        tr_name = await world.taskrun_of("late")
        await kube.patch(BUILDRUNS, world.ns, "late", cancel)
        late = await world.finished("late")
        # The status is written first, then the TaskRun is cancelled.
        await wait_for(lambda: taskrun_cancelled(kube, world.ns, tr_name), what="TaskRun cancel")
    assert condition(early)["reason"] == reasons.BUILD_RUN_CANCELED
    assert "taskRunName" not in early["status"]
    assert condition(late)["reason"] == reasons.BUILD_RUN_CANCELED


async def test_cancel_after_completion_changes_nothing(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br")
        before = await world.finished("br", 30)
        await kube.patch(BUILDRUNS, world.ns, "br", {"spec": {"state": "BuildRunCanceled"}})
        await asyncio.sleep(1.0)
        after = await world.get("br")
    assert after["status"] == before["status"]


async def test_timeout_wins_and_a_late_success_never_flips_it(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """The mission's race: timed out, then the TaskRun reports success anyway."""
    world.fate("slow", fate="hold")
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("slow", timeout="2s")
        tr_name = await world.taskrun_of("slow")
        await running_pod(world, "slow")
        timed_out = await world.finished("slow", timeout=10)
        # Tekton stops the TaskRun at its own timeout, as under Shipwright...
        assert (await tekton_verdict(world, "slow"))["reason"] == "TaskRunTimeout"
        # ...but a success lands on it regardless. Simulated: Tekton never reports success
        # once a cancel is asked, and the TaskRun is Done, so Tekton leaves this write be.
        await TektonStatusWriter(kube).finish(world.ns, tr_name, "success")
        await asyncio.sleep(1.0)
        after = await world.get("slow")
    assert condition(timed_out)["reason"] == reasons.BUILD_RUN_TIMEOUT
    start = timed_out["status"]["startTime"]
    assert timed_out["status"]["completionTime"] >= start
    assert after["status"]["completionTime"] == timed_out["status"]["completionTime"]
    assert condition(after) == condition(timed_out)
    assert "output" not in after["status"]


async def test_deleted_taskrun_ends_the_buildrun(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br")
        tr_name = await world.taskrun_of("br")
        await kube.delete(TASKRUNS, world.ns, tr_name)
        done = await world.finished("br")
    assert condition(done)["reason"] == reasons.TASK_RUN_IS_MISSING


Entry = tuple[str, str, str]  # (manager, operation, subresource) of a managedFields entry


def managed(obj: JSON) -> set[Entry]:
    return {(e["manager"], e["operation"], e.get("subresource", ""))
            for e in obj["metadata"].get("managedFields") or []}


async def test_every_write_names_shipwrights_field_manager(
    cluster: LocalCluster, kube: Kube, namespace: str, fates: FateWebhook
) -> None:
    """As Shipwright v0.20.13's controllers write (client.WithFieldOwner; its Cancel a
    server-side apply), so managedFields read the same after a switch: the BuildRun
    reconciler's writes as shipwright-buildrun-controller, the Build controller's and a
    cancel as shipwright-build-controller, and nothing under our User-Agent's name. The
    test's own writes are "test-user"'s."""
    user = World(kube.with_field_manager("test-user"), namespace, fates)
    await user.strategy()
    await user.build()
    user.fate("held", fate="hold")
    async with running_controller(controller_settings(cluster, namespace)):
        await user.buildrun("ok")
        await user.buildrun("held", serviceAccount=".generate")
        await running_pod(user, "held")
        held_sa = await kube.get(SERVICEACCOUNTS, namespace,
                                 serviceaccounts.generated_name(await user.get("held")))
        await user.kube.patch(BUILDRUNS, namespace, "held", {"spec": {"state": "BuildRunCanceled"}})
        ok, held = await user.finished("ok", 30), await user.finished("held", 30)
        cancelled = await tekton_verdict(user, "held")
        build = await kube.get(BUILDS, namespace, fixtures.BUILD)
    assert condition(held)["reason"] == reasons.BUILD_RUN_CANCELED, cancelled
    ours, theirs = field_managers.BUILDRUN_CONTROLLER, field_managers.BUILD_CONTROLLER
    assert (theirs, "Update", "status") in managed(build)  # the suite's Build spec
    for br in (ok, held):
        assert {(ours, "Update", "status"), (ours, "Update", "")} <= managed(br), br
        assert {m for m, _, _ in managed(br)} == {"test-user", ours}, managed(br)
    taskruns = {t["metadata"]["labels"][LABEL_BUILDRUN]: t for t in await user.taskruns()}
    assert (ours, "Update", "") in managed(taskruns["ok"])  # the suite's TaskRun spec
    assert {(ours, "Update", ""), (theirs, "Apply", "")} <= managed(taskruns["held"])
    assert managed(held_sa) == {(ours, "Update", "")}
    events = [e for e in (await kube.list(EVENTS, namespace))["items"]
              if e["involvedObject"]["kind"] == "BuildRun"]
    assert events and {m for e in events for m, _, _ in managed(e)} == {theirs}
    everything = [build, ok, held, held_sa, *taskruns.values(), *events]
    assert not any(m == USER_AGENT.split("/")[0] for o in everything for m, _, _ in managed(o))


async def test_status_updates_leave_every_other_managers_claim_as_it_was(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """A status write is an update of the BuildRun as cached; the API server's field
    manager takes a field missing from it as removed from its owner's claim. So a
    BuildRun made by `kubectl apply` (its last-applied annotation, which other informers'
    caches drop) keeps kubectl's claim on every field through Pending, Running and the
    outcome."""
    kubectl = kube.with_field_manager("kubectl-client-side-apply")
    body = fixtures.buildrun("applied")
    body["metadata"]["labels"] = {"team": "a"}
    body["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": orjson.dumps(body).decode()}
    world.fate("applied", fate="hold")
    async with running_controller(controller_settings(cluster, world.ns)):
        created = await kubectl.create(BUILDRUNS, world.ns, body)

        async def running() -> bool:
            return condition(await world.get("applied")).get("reason") == reasons.RUNNING
        await wait_for(running, 30, what="Running reason")
        await release(world, "applied")
        done = await world.finished("applied", 30)
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert done["metadata"]["annotations"] == body["metadata"]["annotations"]

    def claim(obj: JSON) -> JSON:
        return next(e["fieldsV1"] for e in obj["metadata"]["managedFields"]
                    if e["manager"] == "kubectl-client-side-apply")
    assert claim(done) == claim(created)
    assert "f:kubectl.kubernetes.io/last-applied-configuration" in claim(
        done)["f:metadata"]["f:annotations"]


# -- the API server enforces the one-try shot too ------------------------------------------


async def test_api_server_rejects_spec_changes_and_status_flips(kube: Kube, world: World) -> None:
    await world.buildrun("br")
    with pytest.raises(ApiError) as err:
        await kube.patch(BUILDRUNS, world.ns, "br", {"spec": {"timeout": "1h"}})
    assert err.value.status == 422
    assert "spec.timeout is immutable" in err.value.message
    with pytest.raises(ApiError) as err:
        await kube.patch(BUILDRUNS, world.ns, "br", {"spec": {"build": {"name": "other"}}})
    assert "spec.build is immutable" in err.value.message
    await kube.patch(BUILDRUNS, world.ns, "br", {"spec": {"state": "BuildRunCanceled"}})
    with pytest.raises(ApiError) as err:
        await kube.patch(BUILDRUNS, world.ns, "br", {"spec": {"state": ""}})
    assert "spec.state may only change to BuildRunCanceled" in err.value.message

    done = {"completionTime": "2026-01-01T00:00:00Z", "conditions": [
        {"type": "Succeeded", "status": "False", "reason": "Failed", "message": "x",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    await kube.patch(BUILDRUNS, world.ns, "br", {"status": done}, subresource="status")
    flip = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                            "message": "y", "lastTransitionTime": "2026-01-01T00:00:01Z"}]}
    with pytest.raises(ApiError) as err:
        await kube.patch(BUILDRUNS, world.ns, "br", {"status": flip}, subresource="status")
    assert err.value.status == 422
    assert "Succeeded condition is immutable" in err.value.message
    with pytest.raises(ApiError) as err:
        await kube.patch(BUILDRUNS, world.ns, "br",
                         {"status": {"completionTime": "2027-01-01T00:00:00Z"}},
                         subresource="status")
    assert "completionTime is immutable" in err.value.message


# -- system errors: retried with backoff, outcome left open, then given up (5, 10) ---------


async def test_webhook_timeouts_are_retried_then_succeed(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    from devtools.fakes.webhook import FlakyWebhook

    k = 3
    retries_before = metric("buildrun_retries_total", error_class="webhook")
    wq_retries_before = metric("workqueue_retries_total", name="buildrun", controller="buildrun")
    requeues_before = reconciles("requeue_after")
    seen_open: list[bool] = []
    script = FlakyWebhook(cluster, world.ns, lambda n: "timeout" if n <= k else "allow")
    async with script as hook, running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("flaky")

        async def failing_then_created() -> str | None:
            br = await world.get("flaky")
            status = br.get("status") or {}
            seen_open.append("completionTime" not in status)
            return status.get("taskRunName")
        await wait_for(failing_then_created, timeout=40, what="TaskRun after retries")
        done = await world.finished("flaky", 30)
    assert hook.verdicts[: k + 1] == ["timeout"] * k + ["allow"]
    assert all(seen_open), "a completionTime appeared while system errors were being retried"
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert metric("buildrun_retries_total", error_class="webhook") - retries_before == k
    # The queue counts each backoff and, as client-go's AddAfter does, each requeue_after
    # (a running BuildRun waits for its TaskRun's timeout backstop): the k backoffs exactly.
    assert metric("workqueue_retries_total", name="buildrun", controller="buildrun") - \
        wq_retries_before == k + reconciles("requeue_after") - requeues_before
    assert len(await world.taskruns()) == 1


async def test_webhook_failing_forever_ends_in_retries_exhausted(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    from controller.settings import RetryBudget
    from devtools.fakes.webhook import FlakyWebhook

    exhausted_before = metric("buildrun_retry_exhausted_total")
    settings = controller_settings(cluster, world.ns, budget=RetryBudget(max_retries=3, max_age=0))
    failing = FlakyWebhook(cluster, world.ns, lambda n: "error")
    async with failing as hook, running_controller(settings):
        await world.buildrun("doomed")
        done = await world.finished("doomed", timeout=40)
    assert hook.calls == 4  # the first try and three retries
    assert condition(done)["reason"] == reasons.RECONCILER_RETRIES_EXHAUSTED
    assert "failed calling webhook" in condition(done)["message"]
    assert metric("buildrun_retry_exhausted_total") - exhausted_before == 1
    assert "ReconcilerRetriesExhausted" in await events_for(kube, world.ns, "doomed")
    assert await world.taskruns() == []


async def test_giving_up_takes_a_finished_unrecorded_taskruns_outcome(
    kube: Kube, world: World
) -> None:
    """Row 5: a try created the TaskRun, then every try failed; the TaskRun built the
    image meanwhile. Giving up records it, and the next look (its status write's event
    brings one) reports the image, not ReconcilerRetriesExhausted."""
    world.fate("br", results=results(**{"shp-image-digest": "sha256:" + "ef" * 32}))
    await unrecorded_taskrun(kube, await world.buildrun("br"))
    await tekton_verdict(world, "br")
    reconciler = BuildRunReconciler(kube, Caches(), EventRecorder(kube, "t", "t"),
                                    executor=TASKRUN)
    await reconciler.give_up(f"{world.ns}/br", RetryableError("webhook", "failed calling"))
    recorded = await world.get("br")
    assert recorded["status"]["taskRunName"] and "completionTime" not in recorded["status"]
    await in_flight(kube, (BUILDRUNS, recorded)).reconcile(f"{world.ns}/br")
    done = await world.get("br")
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert done["status"]["output"]["digest"] == "sha256:" + "ef" * 32


async def test_giving_up_finishes_new_and_running_buildruns_and_stops_their_taskruns(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """Rows 6 and 15: the last error is the message, and no TaskRun runs on. A NEW one of
    which a TaskRun exists is not given up on: the TaskRun is recorded (row 5), to decide."""
    world.fate("running", fate="hold")
    world.fate("adopted", fate="hold")
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("running")
        running = await world.taskrun_of("running")
    await world.buildrun("new", build={"name": "never-validated"})
    adopted = (await unrecorded_taskrun(kube, await world.buildrun("adopted")))["metadata"]
    exhausted_before = metric("buildrun_retry_exhausted_total")
    reconciler = BuildRunReconciler(kube, Caches(), EventRecorder(kube, "t", "t"),
                                    executor=TASKRUN)
    for name in ("new", "running", "adopted"):
        await reconciler.give_up(f"{world.ns}/{name}",
                                 RetryableError("server_error", "HTTP 500: etcd is sad"))
    for name in ("new", "running"):
        cond = condition(await world.get(name))
        assert cond["reason"] == reasons.RECONCILER_RETRIES_EXHAUSTED, name
        assert cond["message"].endswith("last error: HTTP 500: etcd is sad"), cond
    assert await taskrun_cancelled(kube, world.ns, running)
    assert (await world.get("adopted"))["status"]["taskRunName"] == adopted["name"]
    assert "completionTime" not in (await world.get("adopted"))["status"]
    assert not await taskrun_cancelled(kube, world.ns, adopted["name"])
    assert metric("buildrun_retry_exhausted_total") - exhausted_before == 2
    # Giving up on a finished BuildRun changes nothing.
    before = await world.get("new")
    await reconciler.give_up(f"{world.ns}/new", RetryableError("timeout", "again"))
    assert (await world.get("new"))["metadata"]["resourceVersion"] == \
        before["metadata"]["resourceVersion"]


async def test_controller_restart_mid_run_creates_no_second_taskrun(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    settings = controller_settings(cluster, world.ns)
    world.fate("br", fate="hold")
    async with running_controller(settings):
        await world.buildrun("br")
        tr_name = await world.taskrun_of("br")
    # The controller is gone; the world moves on without it.
    await running_pod(world, "br")
    async with running_controller(settings):
        await asyncio.sleep(0.5)
        await release(world, "br")
        done = await world.finished("br", 30)
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert [t["metadata"]["name"] for t in await world.taskruns()] == [tr_name]


async def test_controller_restart_between_create_and_status_adopts_the_taskrun(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """A TaskRun left by a controller that died before writing status is adopted."""
    taskrun = await unrecorded_taskrun(kube, await world.buildrun("br"))
    async with running_controller(controller_settings(cluster, world.ns)):
        tr_name = await world.taskrun_of("br")
        done = await world.finished("br", 30)
    assert tr_name == taskrun["metadata"]["name"]
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert len(await world.taskruns()) == 1


async def test_cancel_stops_a_taskrun_an_earlier_try_never_recorded(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """An unrecorded TaskRun must not run on (and build an image) for a canceled BuildRun."""
    world.fate("br", fate="hold")
    taskrun = await unrecorded_taskrun(kube, await world.buildrun("br"))
    await kube.patch(BUILDRUNS, world.ns, "br", {"spec": {"state": "BuildRunCanceled"}})
    async with running_controller(controller_settings(cluster, world.ns)):
        done = await world.finished("br")
        await wait_for(lambda: taskrun_cancelled(kube, world.ns, taskrun["metadata"]["name"]),
                       what="the unrecorded TaskRun to be cancelled")
    assert condition(done)["reason"] == reasons.BUILD_RUN_CANCELED
