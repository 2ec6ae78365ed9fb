"""Fixtures shared by every test that needs the real API server.

`stack` starts the whole local stack once per test session (devtools.cluster.stack.TektonStack:
etcd, kube-apiserver with RBAC, kube-controller-manager, kube-scheduler, kwok as the
kubelet, Tekton's webhook and controller); `cluster` is its LocalCluster (API server,
admin and restricted users). Only Tekton's CRDs define TaskRuns: the permissive one in
manifests/testing is never applied here. `fates` picks what kwok does with a BuildRun's
pod (devtools.fakes.fates); `namespace` gives each test its own namespace, with the `default`
ServiceAccount kube-controller-manager makes (Tekton's pods need it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from controller.runtime.kube import Kube, load_api_client
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.stack import TektonStack
from devtools.fakes.fates import FateWebhook
from devtools.node.realnode import NodeUnavailable, RealNode
from tests.harness import World, wait_for

# As OpenShift has it: setting blockOwnerDeletion on an owner reference (our TaskRuns',
# Tekton's pods') needs update on the owner's finalizers (tests/cluster/test_manifests.py).
STRICT = ["--enable-admission-plugins=OwnerReferencesPermissionEnforcement"]


@pytest.fixture(scope="session")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TektonStack]:
    """The session's stack. Its real node (tests/cluster/test_real_builds.py) is prepared
    here and started by the first test that asks for it (`await stack.real_node()`)."""
    t = time.monotonic()
    async with TektonStack(tmp_path_factory.mktemp("stack"), apiserver_args=STRICT,
                           real_node=True) as s:
        print(f"\nTektonStack (Tekton {s.tekton.version}) up in {time.monotonic() - t:.2f}s: "
              f"{s.timings}")
        yield s


@pytest.fixture(scope="session")
async def real_node(stack: TektonStack) -> RealNode:
    """The session stack's real node (devtools.node.realnode), started on first use; a
    test that asks for it skips, in one line saying what is missing, where this machine
    cannot hold one. A pod goes there through realnode.placement()."""
    try:
        return await stack.real_node()
    except NodeUnavailable as exc:
        pytest.skip(f"no real node on this machine: {exc}")


@pytest.fixture(scope="session")
async def cluster(stack: TektonStack) -> LocalCluster:
    return stack.cluster


@pytest.fixture(scope="session")
async def fates(stack: TektonStack) -> AsyncIterator[FateWebhook]:
    async with FateWebhook(stack.cluster) as hook:
        yield hook


async def api_client_for(kubeconfig: Path) -> client.ApiClient:
    """A kubernetes_asyncio client for `kubeconfig`, loaded as the controller loads it."""
    return await load_api_client(str(kubeconfig))


@pytest.fixture(scope="session")
async def api(cluster: LocalCluster) -> AsyncIterator[client.ApiClient]:
    """An admin ApiClient for test setup and assertions."""
    async with await api_client_for(cluster.kubeconfig) as c:
        yield c


@pytest.fixture
async def namespace(api: client.ApiClient) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    async def has_default_sa() -> bool:
        try:
            await core.read_namespaced_service_account("default", name)
        except client.ApiException:
            return False
        return True
    await wait_for(has_default_sa, 30, what=f"the default ServiceAccount of {name}")
    yield name
    # kube-controller-manager's namespace controller empties and removes it.
    await core.delete_namespace(name)


@pytest.fixture(scope="session")
async def kube(cluster: LocalCluster) -> AsyncIterator[Kube]:
    """The controller's own raw client, as admin, for test setup and assertions."""
    k = Kube(await api_client_for(cluster.kubeconfig))
    yield k
    await k.close()


@pytest.fixture
async def world(kube: Kube, namespace: str, fates: FateWebhook) -> World:
    """A namespace with a BuildStrategy "kaniko" and a Build "app" that uses it; its
    BuildRuns' pods succeed unless `world.fate(...)` says otherwise."""
    w = World(kube, namespace, fates)
    await w.strategy()
    await w.build()
    return w
