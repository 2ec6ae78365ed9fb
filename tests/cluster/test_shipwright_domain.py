"""The BuildRun domain as Shipwright v0.20.13 has it, end to end on the real API server:
ClusterBuildStrategies, the wait for a Build's validation and BuildRegistrationFailed,
ServiceAccounts (`.generate`, named, the namespace's own) with the push secret, and the
labels and status.executor Shipwright writes.

The controller runs in-process (tests.harness.running_controller). Nothing here needs
a TaskRun to finish, so the tests hold on the permissive TaskRun CRD and under real
Tekton alike; what needs Tekton to run the pod is in test_shipwright_domain_tekton.py.
Where a Build must be validated the test writes the verdict Shipwright's Build controller
would (`status.registered`), so the BuildRun side is tested whatever that controller does
beside it.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.caches import Caches
from controller.buildrun.executors import TASKRUN
from controller.buildrun.reconciler import BuildRunReconciler
from controller.runtime.controller import DONE
from controller.runtime.events import EventRecorder
from controller.runtime.kube import JSON, SERVICEACCOUNTS, ApiError, Kube, Resource
from controller.shipwright.params import UNDEFINED_PARAMETER
from controller.shipwright.resources import BUILDRUNS, BUILDS, CLUSTERBUILDSTRATEGIES, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from tests.harness import World, condition, controller_settings, running_controller, wait_for

pytestmark = pytest.mark.cluster

SECRETS = Resource("", "v1", "secrets", "Secret")
PUSH_SECRET = "registry-creds"


async def validated(kube: Kube, ns: str, build: str = fixtures.BUILD, *,
                    registered: str = "True", reason: str = "Succeeded",
                    message: str = "all validations succeeded") -> None:
    """Writes the verdict of Shipwright's Build controller on the Build's status."""
    await kube.patch(BUILDS, ns, build, {"status": {
        "registered": registered, "reason": reason, "message": message}},
        subresource="status")


async def build_of(kube: Kube, ns: str, name: str, strategy: JSON) -> JSON:
    """devtools.cluster.fixtures.build() with `strategy` as its spec.strategy, kind and all."""
    body = fixtures.build(name)
    body["spec"]["strategy"] = strategy
    return await kube.create(BUILDS, ns, body)


async def registered(kube: Kube, ns: str, build: str) -> bool:
    return ((await kube.get(BUILDS, ns, build)).get("status") or {}).get("registered") == "True"


async def secret(kube: Kube, ns: str, name: str = PUSH_SECRET) -> None:
    await kube.create(SECRETS, ns, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "eyJhdXRocyI6e319"}})  # {"auths":{}}


async def service_account(kube: Kube, ns: str, name: str,
                          secrets: list[str] | None = None) -> None:
    """Creates it, unless it exists (kube-controller-manager makes `default`, where it runs)."""
    body: JSON = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    if secrets is not None:
        body["secrets"] = [{"name": s} for s in secrets]
    try:
        await kube.create(SERVICEACCOUNTS, ns, body)
    except ApiError as exc:
        if exc.status != 409:
            raise


def cluster_strategy(name: str) -> JSON:
    """devtools.cluster.fixtures.strategy()'s steps and parameter, as a ClusterBuildStrategy."""
    body: JSON = {**fixtures.strategy(name), "kind": "ClusterBuildStrategy"}
    return body


def embedded(strategy: JSON) -> dict[str, Any]:
    """A BuildRun's spec.build embedding a Build spec with `strategy` as spec.strategy."""
    return {"build": {"spec": {**fixtures.build_spec(), "strategy": strategy}}}


async def taskrun(kube: Kube, ns: str, world: World, name: str) -> JSON:
    return await kube.get(TASKRUNS, ns, await world.taskrun_of(name))


# -- ClusterBuildStrategy ----------------------------------------------------------------


async def test_a_cluster_build_strategy_runs_and_kind_defaults_to_build_strategy(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    cbs = f"cbs-{world.ns}"
    await kube.create(CLUSTERBUILDSTRATEGIES, None, {
        **cluster_strategy(cbs), "spec": {**cluster_strategy(cbs)["spec"], "steps": [
            {"name": "cluster-build", "image": fixtures.KANIKO, "args": ["--from-cluster"]}]}})
    try:
        await build_of(kube, world.ns, "on-cluster", {"name": cbs, "kind": "ClusterBuildStrategy"})
        await validated(kube, world.ns, "on-cluster")
        await build_of(kube, world.ns, "no-kind", {"name": fixtures.STRATEGY})
        await validated(kube, world.ns, "no-kind")
        async with running_controller(controller_settings(cluster, world.ns)):
            await world.buildrun("cluster", "on-cluster")
            await world.buildrun("namespaced", "no-kind")
            on_cluster = await taskrun(kube, world.ns, world, "cluster")
            namespaced = await taskrun(kube, world.ns, world, "namespaced")
    finally:
        await kube.delete(CLUSTERBUILDSTRATEGIES, None, cbs)
    steps = on_cluster["spec"]["taskSpec"]["steps"]
    assert [s["args"] for s in steps if s["name"] == "cluster-build"] == [["--from-cluster"]]
    assert not [s for s in steps if s["name"] == "build"]
    # No kind: the namespace's BuildStrategy "kaniko", as Shipwright defaults it.
    assert "kind" not in (await kube.get(BUILDS, world.ns, "no-kind"))["spec"]["strategy"]
    assert [s["args"] for s in namespaced["spec"]["taskSpec"]["steps"]
            if s["name"] == "build"] == [list(fixtures.DOCKERFILE_ARGS)]


async def test_a_cluster_build_strategy_gone_after_validation_is_a_user_error(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """The Build was validated while its ClusterBuildStrategy existed (a Build is not
    validated again when a strategy goes, in Shipwright either; it is when the
    controllers start, hence the order here): its BuildRuns fail with
    ClusterBuildStrategyNotFound."""
    cbs = f"cbs-{world.ns}"
    await kube.create(CLUSTERBUILDSTRATEGIES, None, cluster_strategy(cbs))
    async with running_controller(controller_settings(cluster, world.ns)) as app:
        await build_of(kube, world.ns, "on-cluster", {"name": cbs, "kind": "ClusterBuildStrategy"})
        await wait_for(lambda: registered(kube, world.ns, "on-cluster"), 10,
                       what="the Build controller's verdict")
        await kube.delete(CLUSTERBUILDSTRATEGIES, None, cbs)
        cache = app.informers.get(CLUSTERBUILDSTRATEGIES).store
        await wait_for(lambda: cache.get(cbs) is None, 10, what="the deletion in the cache")
        await world.buildrun("cbs", "on-cluster")
        gone = await world.finished("cbs")
    assert condition(gone)["reason"] == reasons.CLUSTER_BUILD_STRATEGY_NOT_FOUND
    assert condition(gone)["message"] == f"ClusterBuildStrategy {cbs!r} not found"
    assert await world.taskruns() == []


async def test_an_embedded_build_spec_is_validated_as_shipwright_validates_it(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """spec.build.spec is a transient Build: Shipwright's BuildRun reconciler runs the
    Build validations on it and fails the BuildRun with BuildRegistrationFailed and the
    validation's message."""
    missing = f"nowhere-{uuid.uuid4().hex[:8]}"
    no_secret = {"build": {"spec": {**fixtures.build_spec(),
                                    "output": {"image": fixtures.IMAGE,
                                               "pushSecret": "no-such-secret"}}}}
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("cbs", None, **embedded(
            {"name": missing, "kind": "ClusterBuildStrategy"}))
        await world.buildrun("ns", None, **embedded({"name": missing, "kind": "BuildStrategy"}))
        await world.buildrun("secret", None, **no_secret)
        await world.buildrun("fine", None, **embedded({"name": "kaniko"}))
        # The BuildRun's own fields come first, as in Shipwright.
        await world.buildrun("override", None, timeout="1m", **embedded({"name": missing}))
        override = condition(await world.finished("override"))
        done = {n: condition(await world.finished(n)) for n in ("cbs", "ns", "secret")}
        await world.taskrun_of("fine")
    assert {n: c["reason"] for n, c in done.items()} == dict.fromkeys(
        done, reasons.BUILD_REGISTRATION_FAILED)
    # The Build validation's messages (Shipwright's words).
    assert done["cbs"]["message"] == f"clusterBuildStrategy {missing} does not exist"
    assert done["ns"]["message"] == \
        f"buildStrategy {missing} does not exist in namespace {world.ns}"
    assert done["secret"]["message"] == "referenced secret no-such-secret not found"
    assert len(await world.taskruns()) == 1
    assert override["reason"] == reasons.BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN


# -- a Build's validation ------------------------------------------------------------------


async def test_a_buildrun_waits_for_its_builds_validation_without_a_status_or_a_retry(
    kube: Kube, namespace: str
) -> None:
    """Row 9, one reconcile at a time: nothing is written while the Build has no
    status.registered; the reconcile ends DONE (no requeue, no error, so no retry);
    once the Build is validated the next reconcile starts it."""
    world = World(kube, namespace)
    await world.strategy()
    created = await world.buildrun("early")  # before its Build exists
    await world.build()
    caches = Caches()
    caches.buildruns.upsert(created)
    reconciler = BuildRunReconciler(kube, caches, EventRecorder(kube, "t", "t"),
                                    executor=TASKRUN)
    assert await reconciler.reconcile(f"{namespace}/early") == DONE
    assert await reconciler.reconcile(f"{namespace}/early") == DONE
    waiting = await world.get("early")
    assert not waiting.get("status"), waiting["status"]
    assert await world.taskruns() == []

    await validated(kube, namespace)
    await reconciler.reconcile(f"{namespace}/early")
    started = await world.get("early")
    assert started["status"]["taskRunName"]
    assert condition(started)["reason"] == reasons.PENDING


async def test_a_buildrun_created_before_its_build_is_validated_runs_once_it_is(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    """Build and BuildRun both exist, unvalidated, when the controllers start: whichever
    reconciles first, the BuildRun runs (when it waited, the Build informer woke it)."""
    world = World(kube, namespace)
    await world.strategy()
    await world.build()
    await world.buildrun("early")
    async with running_controller(controller_settings(cluster, namespace)):
        await validated(kube, namespace)  # what the Build controller beside it writes too
        await world.taskrun_of("early")
        started = await world.get("early")
    # Started, not failed (Pending here; under real Tekton it may have finished already).
    assert condition(started)["status"] != "False", started["status"]


async def test_a_build_that_failed_validation_fails_its_buildruns_at_once(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    world = World(kube, namespace)
    await world.build(strategy="missing")  # invalid: Shipwright's Build controller says so
    await validated(kube, namespace, registered="False", reason="BuildStrategyNotFound",
                    message="buildStrategy missing does not exist in namespace " + namespace)
    async with running_controller(controller_settings(cluster, namespace)):
        await world.buildrun("doomed")
        doomed = await world.finished("doomed")
    cond = condition(doomed)
    assert (cond["status"], cond["reason"]) == ("False", reasons.BUILD_REGISTRATION_FAILED)
    assert cond["message"].startswith(
        "the Build is not registered correctly, build: app, registered status: False, "
        "reason: BuildStrategyNotFound"), cond["message"]
    assert await world.taskruns() == []
    # Not labelled: Shipwright labels a BuildRun only once its Build is validated.
    assert "build.shipwright.io/generation" not in (doomed["metadata"].get("labels") or {})


# -- ServiceAccounts -----------------------------------------------------------------------


async def test_generate_makes_an_owned_service_account_with_the_push_secret(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await secret(kube, world.ns)
    await kube.patch(BUILDS, world.ns, fixtures.BUILD,
                     {"spec": {"output": {"pushSecret": PUSH_SECRET}}})
    await validated(kube, world.ns)
    async with running_controller(controller_settings(cluster, world.ns)):
        created = await world.buildrun("gen", serviceAccount=".generate")
        tr = await taskrun(kube, world.ns, world, "gen")
        # Made before the TaskRun (its deletion after the run: the Tekton tests).
        sa = await kube.get(SERVICEACCOUNTS, world.ns, "gen")
    assert tr["spec"]["serviceAccountName"] == "gen"
    assert sa["secrets"] == [{"name": PUSH_SECRET}]
    assert sa["automountServiceAccountToken"] is False
    assert sa["metadata"]["labels"] == {"buildrun.shipwright.io/name": "gen"}
    [owner] = sa["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == \
        ("BuildRun", "gen", created["metadata"]["uid"], True)


async def test_a_canceled_generate_buildrun_deletes_its_service_account_once_the_taskrun_is_gone(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """Canceled while its TaskRun exists; once the TaskRun is gone (deleted here; stopped,
    under Tekton) the done BuildRun's ServiceAccount goes (state table row 3)."""
    await validated(kube, world.ns)
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("stop", serviceAccount=".generate")
        name = await world.taskrun_of("stop")
        await kube.patch(BUILDRUNS, world.ns, "stop", {"spec": {"state": "BuildRunCanceled"}})
        stopped = await world.finished("stop")
        await kube.delete(TASKRUNS, world.ns, name)
        await wait_for(lambda: _gone(kube, SERVICEACCOUNTS, world.ns, "stop"), 20,
                       what="the generated ServiceAccount to be deleted")
    assert condition(stopped)["reason"] in (reasons.BUILD_RUN_CANCELED, reasons.SUCCEEDED)


async def test_a_buildrun_that_fails_before_it_starts_leaves_no_generated_service_account(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await validated(kube, world.ns)
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("bad", serviceAccount=".generate",
                             paramValues=[{"name": "nope", "value": "x"}])
        bad = await world.finished("bad")
    assert condition(bad)["reason"] == UNDEFINED_PARAMETER
    assert await kube.get_or_none(SERVICEACCOUNTS, world.ns, "bad") is None


async def test_a_named_service_account_gets_the_push_secret_added_and_keeps_its_own(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await secret(kube, world.ns)
    await service_account(kube, world.ns, "builder", secrets=["something-else"])
    await kube.patch(BUILDS, world.ns, fixtures.BUILD,
                     {"spec": {"output": {"pushSecret": PUSH_SECRET}}})
    await validated(kube, world.ns)
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("named", serviceAccount="builder")
        tr = await taskrun(kube, world.ns, world, "named")
        await world.buildrun("again", serviceAccount="builder")
        await world.taskrun_of("again")
        await world.buildrun("nobody", serviceAccount="nobody")
        nobody = await world.finished("nobody")
    assert tr["spec"]["serviceAccountName"] == "builder"
    sa = await kube.get(SERVICEACCOUNTS, world.ns, "builder")
    # Added once, beside what was there (the second BuildRun finds it listed). The
    # strategic merge puts it first; Shipwright's full update appends: order means nothing.
    assert sorted(s["name"] for s in sa["secrets"]) == [PUSH_SECRET, "something-else"]
    assert condition(nobody)["reason"] == reasons.SERVICE_ACCOUNT_NOT_FOUND


async def test_without_a_service_account_pipeline_comes_before_default(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """The test makes `pipeline`, and `default` where no kube-controller-manager does."""
    await secret(kube, world.ns)
    await service_account(kube, world.ns, "default")
    await validated(kube, world.ns)
    async with running_controller(controller_settings(cluster, world.ns)) as app:
        await world.buildrun("to-default", output={"image": fixtures.IMAGE,
                                                   "pushSecret": PUSH_SECRET})
        to_default = await taskrun(kube, world.ns, world, "to-default")
        await service_account(kube, world.ns, "pipeline")
        cache = app.informers.get(SERVICEACCOUNTS).store
        await wait_for(lambda: cache.get(f"{world.ns}/pipeline") is not None, 10,
                       what="the pipeline ServiceAccount in the cache")
        await world.buildrun("to-pipeline")
        to_pipeline = await taskrun(kube, world.ns, world, "to-pipeline")
    assert to_default["spec"]["serviceAccountName"] == "default"
    # The BuildRun's own push secret (spec.output overrides the Build's) is added.
    default = await kube.get(SERVICEACCOUNTS, world.ns, "default")
    assert {"name": PUSH_SECRET} in default["secrets"]
    assert to_pipeline["spec"]["serviceAccountName"] == "pipeline"
    assert not (await kube.get(SERVICEACCOUNTS, world.ns, "pipeline")).get("secrets")


# -- labels and status as Shipwright writes them -------------------------------------------


async def test_buildruns_are_labelled_with_their_build_and_its_generation(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await kube.patch(BUILDS, world.ns, fixtures.BUILD, {"spec": {"timeout": "5m"}})
    await validated(kube, world.ns)
    generation = str((await kube.get(BUILDS, world.ns, fixtures.BUILD))["metadata"]["generation"])
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("ok")
        name = await world.taskrun_of("ok")
        await world.buildrun("bad-param", paramValues=[{"name": "nope", "value": "x"}])
        await world.finished("bad-param")
        await world.buildrun("embedded", None, build={"spec": fixtures.build_spec()})
        await world.taskrun_of("embedded")
    ok = await world.get("ok")
    assert generation == "2"
    assert ok["metadata"]["labels"]["build.shipwright.io/name"] == fixtures.BUILD
    assert ok["metadata"]["labels"]["build.shipwright.io/generation"] == generation
    assert ok["status"]["executor"] == {"kind": "TaskRun", "name": name}
    assert ok["status"]["taskRunName"] == name
    labels = (await kube.get(TASKRUNS, world.ns, name))["metadata"]["labels"]
    assert (labels["build.shipwright.io/name"], labels["build.shipwright.io/generation"],
            labels["buildrun.shipwright.io/name"], labels["buildrun.shipwright.io/generation"]
            ) == (fixtures.BUILD, generation, "ok", "1")
    selected = await kube.list(BUILDRUNS, world.ns,
                               labelSelector=f"build.shipwright.io/name={fixtures.BUILD}")
    # A user error after the Build resolved is labelled too; an embedded Build is not.
    assert sorted(b["metadata"]["name"] for b in selected["items"]) == ["bad-param", "ok"]


async def _gone(kube: Kube, resource: Resource, ns: str, name: str) -> bool:
    return await kube.get_or_none(resource, ns, name) is None
