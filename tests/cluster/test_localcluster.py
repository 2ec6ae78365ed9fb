"""The fixture itself: a real API server that serves our CRDs and enforces RBAC."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client, watch

from devtools.cluster.localcluster import CRD_DIRS, LocalCluster
from devtools.hack import HACK, REPO
from tests.conftest import api_client_for

pytestmark = pytest.mark.cluster

GROUP, VERSION = "shipwright.io", "v1beta1"


def test_paths_point_into_this_checkout() -> None:
    """devtools/ sits at the top of the repo: REPO is its parent, not the one above."""
    assert (REPO / "pyproject.toml").is_file(), REPO
    assert (HACK / "localcluster" / "build").is_file(), HACK
    assert all(folder.is_dir() and any(folder.glob("*.yaml")) for folder in CRD_DIRS), CRD_DIRS


async def test_create_read_and_watch_a_buildrun(api: client.ApiClient, namespace: str) -> None:
    crd = client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BuildRun",
        "metadata": {"name": "smoke"},
        "spec": {"build": {"name": "some-build"}},
    }
    created = await crd.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "buildruns", body
    )
    got = await crd.get_namespaced_custom_object(GROUP, VERSION, namespace, "buildruns", "smoke")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["spec"] == {"build": {"name": "some-build"}}

    w = watch.Watch()
    stream = w.stream(
        crd.list_namespaced_custom_object, GROUP, VERSION, namespace, "buildruns",
        resource_version=created["metadata"]["resourceVersion"], timeout_seconds=10,
    )
    await crd.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "buildruns", "smoke", {"metadata": {"labels": {"seen": "yes"}}},
        # The stubs leave out _content_type, which the generated client takes (without
        # it, it sends a JSON patch, and this body is a merge patch).
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    event = await asyncio.wait_for(stream.__anext__(), 10)
    w.stop()
    assert event["type"] == "MODIFIED"
    assert event["object"]["metadata"]["labels"] == {"seen": "yes"}


async def test_restricted_user_is_denied_by_rbac(cluster: LocalCluster, namespace: str) -> None:
    async with await api_client_for(cluster.write_kubeconfig(cluster.restricted)) as restricted:
        with pytest.raises(client.ApiException) as err:
            await client.CustomObjectsApi(restricted).list_namespaced_custom_object(
                GROUP, VERSION, namespace, "buildruns"
            )
    assert err.value.status == 403


async def test_server_prunes_unknown_fields_and_checks_the_schema(
    api: client.ApiClient, namespace: str
) -> None:
    crd = client.CustomObjectsApi(api)
    with pytest.raises(client.ApiException) as err:
        await crd.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "buildruns",
            {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "BuildRun",
                "metadata": {"name": "bad-state"},
                "spec": {"build": {"name": "b"}, "state": "Paused"},
            },
        )
    assert err.value.status == 422
    assert "spec.state" in str(err.value.body)  # typed bytes | None; the text either way
