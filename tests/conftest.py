"""Fixtures shared by every test that needs the real API server.

`cluster` starts one etcd + kube-apiserver per test session (built by
hack/localcluster/build, RBAC on); `namespace` gives each test its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from controller.runtime.kube import Kube, load_api_client
from devtools.localcluster import LocalCluster
from tests.harness import World


@pytest.fixture(scope="session")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    async with LocalCluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


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
    yield name
    # No namespace controller runs here, so deletion only marks it; that is enough
    # to keep tests apart, since every name below it is unique to the test.
    await core.delete_namespace(name)


@pytest.fixture(scope="session")
async def kube(cluster: LocalCluster) -> AsyncIterator[Kube]:
    """The controller's own raw client, as admin, for test setup and assertions."""
    k = Kube(await api_client_for(cluster.kubeconfig))
    yield k
    await k.close()


@pytest.fixture
async def world(kube: Kube, namespace: str) -> World:
    """A namespace with a BuildStrategy "kaniko" and a Build "app" that uses it."""
    w = World(kube, namespace)
    await w.strategy()
    await w.build()
    return w
