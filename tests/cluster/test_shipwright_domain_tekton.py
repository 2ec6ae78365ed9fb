"""The Shipwright domain on REAL Tekton (devtools.cluster.stack.TektonStack): a `.generate`
ServiceAccount and a ClusterBuildStrategy that Tekton and the kubelet stand-in actually
run, and the generated ServiceAccount gone afterwards. The pods succeed (kwok's default
fate); see tests/cluster/test_tekton.py for the stack itself.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from controller.buildrun import reasons
from controller.runtime.kube import JSON, PODS, SERVICEACCOUNTS, Kube, Resource
from controller.shipwright.resources import (
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    TASKRUNS,
)
from devtools.cluster import fixtures
from devtools.cluster.stack import TektonStack
from tests.cluster.test_tekton import controller
from tests.harness import World, condition, wait_for

pytestmark = pytest.mark.cluster

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret")
# A named command: Tekton would otherwise ask the (unreachable) registry for the entrypoint.
STEPS = [{"name": "build", "image": "gcr.io/kaniko-project/executor",
          "command": ["/kaniko/executor"], "args": ["--dockerfile=$(params.dockerfile)"]}]


@pytest.fixture
async def tworld(kube: Kube) -> AsyncIterator[World]:
    """A namespace with its `default` ServiceAccount (kube-controller-manager's), a push
    Secret, a BuildStrategy "kaniko" Tekton can run and a Build "app" pushing with it."""
    ns = f"dt-{uuid.uuid4().hex[:8]}"
    await kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": ns}})

    async def has_default_sa() -> bool:
        return await kube.get_or_none(SERVICEACCOUNTS, ns, "default") is not None
    await wait_for(has_default_sa, 30, what="the default ServiceAccount")
    await kube.create(SECRETS, ns, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-creds"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "eyJhdXRocyI6e319"}})  # {"auths":{}}
    await kube.create(BUILDSTRATEGIES, ns, {
        "apiVersion": fixtures.API, "kind": "BuildStrategy", "metadata": {"name": "kaniko"},
        "spec": {"parameters": [fixtures.dockerfile_parameter()], "steps": STEPS}})
    body = fixtures.build()
    body["spec"]["output"]["pushSecret"] = "registry-creds"
    await kube.create(BUILDS, ns, body)
    yield World(kube, ns)
    await kube.delete(NAMESPACES, None, ns)


async def pod_of(w: World, buildrun: str) -> JSON:
    taskrun = await w.kube.get(TASKRUNS, w.ns, await w.taskrun_of(buildrun, 30))
    pod: JSON = await w.kube.get(PODS, w.ns, taskrun["status"]["podName"])
    return pod


async def test_generate_runs_the_pod_as_its_own_service_account_then_deletes_it(
    stack: TektonStack, tworld: World
) -> None:
    async with controller(stack, tworld):
        await tworld.buildrun("gen", serviceAccount=".generate")
        sa = await wait_for(lambda: tworld.kube.get_or_none(SERVICEACCOUNTS, tworld.ns, "gen"),
                            30, what="the generated ServiceAccount")
        done = await tworld.finished("gen", 60)
        pod = await pod_of(tworld, "gen")

        async def deleted() -> bool:
            return await tworld.kube.get_or_none(SERVICEACCOUNTS, tworld.ns, "gen") is None
        await wait_for(deleted, 30, what="the generated ServiceAccount to be deleted")
    assert condition(done)["reason"] == reasons.SUCCEEDED, done["status"]
    assert pod["spec"]["serviceAccountName"] == "gen"
    assert sa["secrets"] == [{"name": "registry-creds"}]
    assert sa["automountServiceAccountToken"] is False
    # The namespace's own ServiceAccount was left alone.
    default = await tworld.kube.get(SERVICEACCOUNTS, tworld.ns, "default")
    assert "registry-creds" not in [s["name"] for s in default.get("secrets") or []]


async def test_without_a_service_account_the_default_one_gets_the_push_secret(
    stack: TektonStack, tworld: World
) -> None:
    async with controller(stack, tworld):
        await tworld.buildrun("plain")
        done = await tworld.finished("plain", 60)
        pod = await pod_of(tworld, "plain")
    assert condition(done)["reason"] == reasons.SUCCEEDED, done["status"]
    assert pod["spec"]["serviceAccountName"] == "default"
    default = await tworld.kube.get(SERVICEACCOUNTS, tworld.ns, "default")
    assert {"name": "registry-creds"} in default["secrets"]


async def test_a_cluster_build_strategy_runs_on_tekton(stack: TektonStack, tworld: World) -> None:
    cbs = f"cbs-{tworld.ns}"
    await tworld.kube.create(CLUSTERBUILDSTRATEGIES, None, {
        "apiVersion": fixtures.API, "kind": "ClusterBuildStrategy", "metadata": {"name": cbs},
        "spec": {"parameters": [fixtures.dockerfile_parameter()], "steps": STEPS}})
    body = fixtures.build("on-cluster")
    body["spec"]["strategy"] = {"name": cbs, "kind": "ClusterBuildStrategy"}
    await tworld.kube.create(BUILDS, tworld.ns, body)
    try:
        async with controller(stack, tworld):
            await tworld.buildrun("cluster", "on-cluster")
            done = await tworld.finished("cluster", 60)
    finally:
        await tworld.kube.delete(CLUSTERBUILDSTRATEGIES, None, cbs)
    assert condition(done)["reason"] == reasons.SUCCEEDED, done["status"]
    assert done["status"]["executor"]["kind"] == "TaskRun"
