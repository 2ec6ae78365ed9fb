"""A cluster whose Shipwright CRDs still list v1alpha1 in status.storedVersions (issue 25,
part 3), on an API server of its own (the CRDs are replaced here).

Shipwright v0.20 stores v1beta1 and serves v1alpha1 beside it through its conversion
webhook; a cluster that ran Shipwright before v0.12 stored v1alpha1 too, and its CRDs
still say so. We serve v1beta1 only (README "Switching from Shipwright" says why), so:
the API server refuses our CRDs over those, our controller refuses to start on them
with one line, and after the migration README gives (every object written back as
v1beta1, v1alpha1 dropped from storedVersions) both go through.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from controller.app import App
from controller.runtime.kube import JSON, ApiError, ConfigError, Kube, load_api_client
from controller.shipwright.crds import CRDS
from devtools.cluster import shipwright_controller
from devtools.cluster.localcluster import REPO, LocalCluster
from tests.harness import controller_settings, wait_for

pytestmark = pytest.mark.cluster

BUILDRUNS_CRD = "buildruns.shipwright.io"


@pytest.fixture
async def bare(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        await cluster.start_bare()
        yield cluster
    finally:
        cluster.stop()


def shipwrights(storage: str) -> dict[str, object]:
    """Shipwright's BuildRun CRD (its conversion webhook left out: it does not run here),
    with `storage` the version objects are stored as."""
    crd = copy.deepcopy(next(c for c in shipwright_controller.crds(conversion=False)
                             if c["metadata"]["name"] == BUILDRUNS_CRD))
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == storage
    return crd


def ours() -> dict[str, object]:
    crd: dict[str, object] = yaml.safe_load(
        (REPO / "manifests" / "crds" / "shipwright.io_buildruns.yaml").read_text())
    return crd


async def served(call: Callable[[], Awaitable[JSON]]) -> JSON:
    """`call`'s answer once the API server serves the version (404, then 429 "storage is
    (re)initializing", for a moment after a CRD is established or its storage moved)."""
    answer: JSON = {}

    async def answered() -> bool:
        nonlocal answer
        try:
            answer = await call()
        except ApiError as exc:
            if exc.status not in (404, 429):
                raise
            return False
        return True

    await wait_for(answered, what="the version to be served")
    return answer


async def starts(cluster: LocalCluster) -> None:
    """App.create runs the start-up check; the App is closed again at once."""
    app = await App.create(controller_settings(cluster, "default"), "test")
    await app.kube.close()


async def test_a_cluster_that_stored_v1alpha1_is_refused_until_migrated(
        bare: LocalCluster) -> None:
    # Shipwright before v0.12 stored a BuildRun as v1alpha1; v0.20 stores v1beta1.
    await bare.apply(shipwrights(storage="v1alpha1"))
    await bare.wait_crds_established()
    kube = Kube(await load_api_client(str(bare.kubeconfig)))
    try:
        path = "/apis/shipwright.io/{}/namespaces/default/buildruns"
        await served(lambda: kube.request("POST", path.format("v1alpha1"), body={
            "apiVersion": "shipwright.io/v1alpha1", "kind": "BuildRun",
            "metadata": {"name": "old"}, "spec": {"buildRef": {"name": "b"}}}))
        await bare.apply(shipwrights(storage="v1beta1"))
        crd = await kube.get(CRDS, None, BUILDRUNS_CRD)
        assert crd["status"]["storedVersions"] == ["v1alpha1", "v1beta1"]

        # The API server refuses our CRD over it, and says why.
        with pytest.raises(RuntimeError) as refused:
            await bare.apply(ours())
        assert "422" in str(refused.value)
        assert "v1alpha1 was previously a storage version, and must remain in " \
               "spec.versions until a storage migration ensures no data remains " \
               "persisted in v1alpha1" in str(refused.value)
        # Our controller refuses to start on it, in one line.
        with pytest.raises(ConfigError) as line:
            await starts(bare)
        assert str(line.value).startswith(
            f"CRD {BUILDRUNS_CRD} lists v1alpha1 in status.storedVersions")

        # The migration README gives: every object written back (stored as v1beta1),
        # then v1alpha1 dropped from storedVersions.
        listed = await served(lambda: kube.request("GET", path.format("v1beta1")))
        for item in listed["items"]:
            await kube.request("PUT", f"{path.format('v1beta1')}/{item['metadata']['name']}",
                               body=item)
        await kube.patch(CRDS, None, BUILDRUNS_CRD,
                         {"status": {"storedVersions": ["v1beta1"]}}, subresource="status")
        await bare.apply(ours())
        await starts(bare)
        assert (await kube.get(CRDS, None, BUILDRUNS_CRD))["status"]["storedVersions"] == [
            "v1beta1"]
        # A client that still speaks v1alpha1 is refused (once the API server has
        # taken our CRD in), not misread.
        async def refused_v1alpha1() -> bool:
            try:
                await kube.request("GET", path.format("v1alpha1"))
            except ApiError as exc:
                return exc.status == 404
            return False

        await wait_for(refused_v1alpha1, what="v1alpha1 to be gone")
    finally:
        await kube.close()


async def test_shipwrights_crds_with_their_conversion_webhook_are_refused(
        bare: LocalCluster) -> None:
    crd = shipwrights(storage="v1beta1")
    crd["spec"]["conversion"] = {  # type: ignore[index]
        "strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "shipwright-build",
                                         "name": "shp-build-webhook", "path": "/convert"}}}}
    await bare.apply(crd)
    await bare.wait_crds_established()
    with pytest.raises(ConfigError, match=r"converts through a webhook \(Webhook\)"):
        await starts(bare)
