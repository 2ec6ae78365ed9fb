"""Shipwright's own samples run end to end: each sample Build of samples/v1beta1, applied
as written with its strategy, and the sample BuildRun that names it, reach `Succeeded` on
the session's real Tekton with kwok pods; the BuildRun's status.output (digest, size) and
status.source (commit) come from the results the pod's steps report.

The results are what a real build's steps would write (Shipwright's git step and its
image-processing push); kwok writes them into the step's termination message
(devtools.fakes.fates), and Tekton, not this test, turns them into TaskRun results.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from controller.buildrun import reasons
from controller.builds import reasons as build_reasons
from controller.runtime.kube import JSON, ApiError, Kube
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
)
from devtools.cluster.localcluster import LocalCluster
from devtools.fakes.fates import FateWebhook, results
from tests.cluster.test_samples import samples
from tests.harness import World, condition, controller_settings, running_controller, wait_for

pytestmark = pytest.mark.cluster

DIGEST = "sha256:" + "5a" * 32
COMMIT = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"


def of_kind(kind: str) -> list[tuple[str, JSON]]:
    return [(f, o) for f, o in samples() if o["kind"] == kind]


BUILDS_ = of_kind("Build")


@pytest.fixture(scope="module")
async def cluster_strategies(kube: Kube) -> AsyncIterator[list[str]]:
    """Every sample ClusterBuildStrategy, created as written (for the module's tests)."""
    made = []
    for _, obj in of_kind("ClusterBuildStrategy"):
        try:
            await kube.create(CLUSTERBUILDSTRATEGIES, None, obj)
            made.append(obj["metadata"]["name"])
        except ApiError as exc:
            if exc.status != 409:
                raise
    yield made
    for name in made:
        await kube.delete(CLUSTERBUILDSTRATEGIES, None, name)


@pytest.mark.parametrize(("file", "build"), BUILDS_, ids=[f for f, _ in BUILDS_])
async def test_a_sample_build_and_its_sample_buildrun_succeed_on_tekton(
    cluster: LocalCluster, kube: Kube, namespace: str, fates: FateWebhook,
    cluster_strategies: list[str], file: str, build: JSON,
) -> None:
    w = World(kube, namespace, fates)
    for _, strategy in of_kind("BuildStrategy"):
        await kube.create(BUILDSTRATEGIES, namespace, strategy)
    name = build["metadata"]["name"]
    await kube.create(BUILDS, namespace, build)
    runs = [o for _, o in of_kind("BuildRun") if o["spec"]["build"].get("name") == name]
    assert runs, f"no sample BuildRun names the Build {name} ({file})"
    buildrun = runs[0]
    w.fate(buildrun["metadata"]["name"], results=results(**{
        "shp-source-default-commit-sha": COMMIT,
        "shp-source-default-commit-author": "Shipwright Sample",
        "shp-source-default-branch-name": "main",
        "shp-image-digest": DIGEST,
        "shp-image-size": "31457280",
    }))
    async with running_controller(controller_settings(cluster, namespace)):
        async def registered() -> JSON | None:
            got = await kube.get(BUILDS, namespace, name)
            return got if (got.get("status") or {}).get("registered") else None
        status = (await wait_for(registered, 30, 0.1, what=f"Build {name} validated"))["status"]
        assert (status["registered"], status["reason"]) == ("True", build_reasons.SUCCEEDED), \
            status
        await kube.create(BUILDRUNS, namespace, buildrun)
        done = await w.finished(buildrun["metadata"]["name"], 90)
    assert condition(done)["reason"] == reasons.SUCCEEDED, condition(done)
    assert done["status"]["output"] == {"digest": DIGEST, "size": 31457280}, done["status"]
    assert done["status"]["source"]["git"]["commitSha"] == COMMIT, done["status"]
