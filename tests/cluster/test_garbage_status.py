"""One object never stops every build (issue 39 part 0), on a real API server: a TaskRun
whose status is garbage, and the other BuildRuns still finish, through the informers'
list and through their watch; then the garbage one finishes once its status is valid.

Where garbage can land. Tekton v1.12's TaskRun CRD types its status and its webhook
decodes every write, so on the session stack such a status is refused (a string
for status.conditions: "cannot unmarshal string into Go struct field
TaskRunStatus.status.Status.conditions", seen there). A TaskRun CRD that keeps status
schemaless lets anything in: Tekton's releases before their CRDs carried schemas, and the
bare LocalCluster's stand-in CRD (manifests/testing), the API server the issue's report
ran the controller against. So this test runs there, on a bare LocalCluster of its own,
and Tekton's part, the TaskRuns' status, is written by devtools.cluster.tekton's
stand-in: real Tekton cannot be made to write garbage, nor run beside such a CRD.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from controller.buildrun import reasons
from controller.runtime.kube import JSON, Kube, load_api_client
from controller.shipwright.resources import TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.tekton import TektonSimulator
from tests.harness import World, condition, controller_settings, metric, running_controller

pytestmark = pytest.mark.cluster

GARBAGE_LISTED = {"conditions": "garbage"}  # what the report found
GARBAGE_WATCHED = {"conditions": [None, 7, {"type": ["Succeeded"]}], "startTime": {"a": 1},
                   "podName": 42, "completionTime": "later", "results": "none",
                   "steps": {"build": None}}
NAMES = ("garbage", "listed", "watched")


@pytest.fixture
async def bare(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    """etcd and the API server, our CRDs and the schemaless stand-in TaskRun CRD."""
    async with LocalCluster(tmp_path / "cluster") as cluster:
        yield cluster


@pytest.fixture
async def admin(bare: LocalCluster) -> AsyncIterator[Kube]:
    kube = Kube(await load_api_client(str(bare.kubeconfig)))
    try:
        yield kube
    finally:
        await kube.close()


async def set_status(kube: Kube, ns: str, name: str, status: JSON) -> None:
    """The TaskRun's status, exactly `status` (a merge patch merges: null first)."""
    for body in ({"status": None}, {"status": status}):
        await kube.patch(TASKRUNS, ns, name, body, subresource="status")


async def test_a_taskrun_with_garbage_status_stops_no_other_buildrun(
        bare: LocalCluster, admin: Kube) -> None:
    ns = "garbage"
    await fixtures.setup_namespace(admin, ns)
    world = World(admin, ns)
    tekton = TektonSimulator(admin)
    settings = controller_settings(bare, ns)
    failures = metric("informer_handler_failures_total", resource=TASKRUNS.plural)
    runs: dict[str, str] = {}
    async with running_controller(settings):
        for name in NAMES:
            await world.buildrun(name)
        for name in NAMES:
            runs[name] = await world.taskrun_of(name)
            await tekton.start(ns, runs[name])
    # With no controller running, "listed"'s run finishes and "garbage"'s status goes bad.
    await tekton.finish(ns, runs["listed"], "success")
    await set_status(admin, ns, runs["garbage"], GARBAGE_LISTED)
    async with running_controller(settings) as app:
        # The informers' first list held the garbage (the controller is synced: it would
        # not be, had the list failed on it), and "listed" finished from that list.
        listed = await world.finished("listed", 30)
        assert condition(listed)["reason"] == reasons.SUCCEEDED
        # Through the watch: the garbage changes, then another run ends; its BuildRun
        # hears of it after the garbage's event.
        await set_status(admin, ns, runs["garbage"], GARBAGE_WATCHED)
        await tekton.finish(ns, runs["watched"], "failure")
        watched = await world.finished("watched", 30)
        assert condition(watched)["reason"] == reasons.FAILED
        # The garbage one waits: nothing can be read off its run...
        assert "completionTime" not in (await world.get("garbage"))["status"]
        # ...until its status is valid again, and then it ends with its run's outcome.
        await tekton.finish(ns, runs["garbage"], "success")
        done = await world.finished("garbage", 30)
        assert condition(done)["reason"] == reasons.SUCCEEDED
        # Read as a run without a condition, never held out of the cache.
        for informer in app.informers.all():
            assert informer.quarantined == {}, informer.resource.plural
    assert metric("informer_handler_failures_total", resource=TASKRUNS.plural) == failures
