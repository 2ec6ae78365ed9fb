"""A write never lands on another BuildRun of the same name (issue 39 part 2), on the real
API server and real Tekton.

The interleaving is made, not waited for: a reconcile in flight is a reconciler whose
caches hold the BuildRun (and its TaskRun) as it was when the reconcile began; meanwhile
the BuildRun is deleted and created again under its name, as a script's `delete` then
`apply` does. Each test then lets that reconcile act and checks the namesake is as it was
created. Before the fix both reconciles wrote on the namesake: the re-read after the
conflict took whatever held the name.

And the API server's own answers that `controller.runtime.conflict.pinned` relies on, for
each kind of write the controller pins (merge, strategic merge and apply patches).
"""

from __future__ import annotations

import pytest

from controller.runtime.conflict import patch_pinned
from controller.runtime.kube import (
    APPLY_PATCH,
    JSON,
    MERGE_PATCH,
    SERVICEACCOUNTS,
    STRATEGIC_MERGE_PATCH,
    Resource,
)
from controller.shipwright.labels import LABEL_BUILD
from controller.shipwright.resources import BUILDRUNS, BUILDS, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from tests.harness import (
    World,
    controller_settings,
    in_flight,
    release,
    running_controller,
    running_pod,
    taskrun,
    tekton_verdict,
    wait_for,
)

pytestmark = pytest.mark.cluster


async def recreate(world: World, name: str) -> JSON:
    """`kubectl delete` then `kubectl apply` of the BuildRun: another object, its name."""
    await world.kube.delete(BUILDRUNS, world.ns, name)
    return await world.buildrun(name)


async def test_a_finished_runs_verdict_never_lands_on_a_namesake(
        cluster: LocalCluster, world: World) -> None:
    world.fate("br", fate="hold")
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("br")
        await running_pod(world, "br")
        old = await world.get("br")
    await release(world, "br")
    assert (await tekton_verdict(world, "br"))["status"] == "True"
    finished_run = await taskrun(world, "br")
    namesake = await recreate(world, "br")
    reconciler = in_flight(world.kube, (BUILDRUNS, old), (TASKRUNS, finished_run))
    await reconciler.reconcile(f"{world.ns}/br")
    now = await world.get("br")
    assert now["metadata"]["uid"] == namesake["metadata"]["uid"]
    assert now["metadata"]["resourceVersion"] == namesake["metadata"]["resourceVersion"], \
        now.get("status")


async def test_a_start_in_flight_never_lands_on_a_namesake(
        cluster: LocalCluster, world: World) -> None:
    async with running_controller(controller_settings(cluster, world.ns)):
        # The Build validated (a BuildRun of a Build not validated yet waits: row 9).
        async def registered() -> bool:
            build = await world.kube.get(BUILDS, world.ns, fixtures.BUILD)
            return (build.get("status") or {}).get("registered") == "True"
        await wait_for(registered, what="the Build to be validated")
    old = await world.buildrun("br")
    namesake = await recreate(world, "br")
    reconciler = in_flight(world.kube, (BUILDRUNS, old))
    await reconciler.reconcile(f"{world.ns}/br")
    now = await world.get("br")
    assert now["metadata"]["resourceVersion"] == namesake["metadata"]["resourceVersion"], now
    assert LABEL_BUILD not in (now["metadata"].get("labels") or {})
    # A TaskRun it made is the old BuildRun's (its owner: the garbage collector removes
    # it, maybe already), never the namesake's.
    assert all(o["uid"] != namesake["metadata"]["uid"] for made in await world.taskruns()
               for o in made["metadata"]["ownerReferences"])


PINNED_WRITES: dict[str, tuple[Resource, JSON, str]] = {
    "merge patch": (BUILDRUNS, {"metadata": {"labels": {"pinned": "yes"}}}, MERGE_PATCH),
    "strategic merge patch": (SERVICEACCOUNTS, {"secrets": [{"name": "pushed"}]},
                              STRATEGIC_MERGE_PATCH),
    "server-side apply": (TASKRUNS, {"spec": {"status": "TaskRunCancelled"}}, APPLY_PATCH),
}


def contains(obj: object, part: object) -> bool:
    """Whether `part` is in `obj`: a mapping's keys with their values contained, a list's
    items each contained in one of obj's, anything else equal."""
    if isinstance(part, dict):
        return isinstance(obj, dict) and all(k in obj and contains(obj[k], v)
                                             for k, v in part.items())
    if isinstance(part, list):
        return isinstance(obj, list) and all(any(contains(o, p) for o in obj) for p in part)
    return obj == part


@pytest.mark.parametrize("write", list(PINNED_WRITES))
async def test_a_pinned_write_lands_on_its_object_and_never_on_a_namesake(
        world: World, write: str) -> None:
    resource, patch, content_type = PINNED_WRITES[write]
    body: JSON = {"apiVersion": resource.api_version, "kind": resource.kind,
                  "metadata": {"name": "x", "namespace": world.ns}}
    if resource is BUILDRUNS:
        body["spec"] = {"build": {"name": "app"}}
    if resource is TASKRUNS:
        body["spec"] = {"taskSpec": {"steps": [{"name": "s", "image": "busybox"}]}}
    apply = content_type == APPLY_PATCH
    if apply:  # an apply is the whole intent: kind and name too
        patch = {**{k: v for k, v in body.items() if k != "spec"}, **patch}
    kube = world.kube.with_field_manager("pinned-test")

    async def write_on(obj: JSON) -> JSON | None:
        return await patch_pinned(kube, resource, obj, patch, content_type=content_type,
                                  force=apply)

    def written(obj: JSON) -> bool:
        # What the write sets is there. (Not the resourceVersion: Tekton's controller
        # takes a new TaskRun up at once, and a cold run saw it between create and read.)
        return contains(obj, PINNED_WRITES[write][1])

    first = await world.kube.create(resource, world.ns, body)
    assert not written(first)
    # The control: on the object it was decided on, the write lands.
    landed = await write_on(first)
    assert landed is not None and written(landed)
    await kube.delete(resource, world.ns, "x")
    namesake = await world.kube.create(resource, world.ns, body)
    # On a namesake it is refused, and told as "gone"; the namesake is as it was made.
    assert await write_on(first) is None
    now = await kube.get(resource, world.ns, "x")
    assert now["metadata"]["uid"] == namesake["metadata"]["uid"]
    assert not written(now), now
