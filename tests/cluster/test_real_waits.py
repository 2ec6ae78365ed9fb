"""Why a build waits (issue 43), on the stack's real node: a build whose step image the
stack's registry does not have, and one whose resource request no node can meet. Each
is asserted as the user sees it: Tekton's reason on the BuildRun (as Shipwright copies
it), its message in the kubelet's or the scheduler's words, one status write per change
of meaning, and the pending deadline (the BuildRun's annotation) ending the one that
cannot be scheduled, its TaskRun cancelled.

The real node (devtools.node.realnode) is where a kubelet really pulls images; the
scheduler is the stack's kube-scheduler. Where the machine cannot hold a real node,
every test here skips with one line saying what is missing (the real_node fixture).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import pytest

from controller.buildrun import reasons
from controller.buildrun.annotations import PENDING_TIMEOUT
from controller.buildrun.executors import TASKRUN_CANCELLED
from controller.buildrun.outcomes import same_meaning
from controller.runtime.kube import JSON, PODS
from controller.runtime.timestamps import parse_time
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.cluster.stack import TektonStack
from devtools.node.realnode import RealNode
from tests.cluster import test_real_builds as real
from tests.cluster.test_real_builds import BUILD_SECONDS, controller, shell_build
from tests.harness import World, condition, gone, taskrun, tekton_verdict

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

# The real builds' fixtures: Shipwright's step images in the environment, a namespace.
node_env = real.node_env
world_real = real.world_real

# More cores than any node here has (the real node has the machine's two).
NO_NODE_HAS = "64"


@contextlib.asynccontextmanager
async def history(w: World, name: str, build: str, **metadata: JSON
                  ) -> AsyncIterator[list[JSON]]:
    """Creates BuildRun `name` of `build` (with `metadata`, its annotations) and yields
    the Succeeded condition of every version of it the API server stores, from a watch
    (so no write is missed), until the block ends."""
    body = fixtures.buildrun(name, build)
    body["metadata"].update(metadata)
    created = await w.kube.create(BUILDRUNS, w.ns, body)
    seen: list[JSON] = []

    async def follow() -> None:
        rv = created["metadata"]["resourceVersion"]
        while True:
            async for event in w.kube.watch(BUILDRUNS, w.ns, rv, timeout_seconds=60):
                obj = event["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if event["type"] == "MODIFIED" and obj["metadata"]["name"] == name:
                    seen.append(condition(obj) if (obj.get("status") or {}).get(
                        "conditions") else {})

    task = asyncio.create_task(follow())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def status_writes(seen: list[JSON]) -> list[JSON]:
    """The versions whose condition changed: each a status write (a label patch leaves it)."""
    return [c for i, c in enumerate(seen) if c and (i == 0 or c != seen[i - 1])]


def assert_one_write_per_meaning(writes: list[JSON]) -> None:
    for before, after in itertools.pairwise(writes):
        assert not (before["reason"] == after["reason"]
                    and before["status"] == after["status"]
                    and same_meaning(before["message"], after["message"])), (before, after)


async def test_an_image_that_cannot_be_pulled_is_said_in_the_kubelets_words(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    """Tekton (its default-imagepullbackoff-timeout 0, as shipped) fails the TaskRun at the
    kubelet's first back-off; until then it says PullImageFailed, and the BuildRun with it,
    in the kubelet's words."""
    w = world_real
    missing = real_node.registry.image("nowhere/missing", "2.0")
    await shell_build(w, real_node, "pull", "true", image=missing)
    async with controller(stack, w), history(w, "pull-1", "pull") as seen:
        done = await w.finished("pull-1", BUILD_SECONDS)
    writes = status_writes(seen)
    waits = [c for c in writes if c["status"] == "Unknown"]
    print("\nwaiting, as written:", [(c["reason"], c["message"][:100]) for c in waits])
    pulling = [c for c in waits if c["reason"] == "PullImageFailed"]
    assert pulling, writes
    # The kubelet's words, naming the container and the image, not Tekton's wrapping.
    assert pulling[0]["message"].startswith(("ErrImagePull (step-build): ",
                                             "ImagePullBackOff (step-build): ")), pulling
    assert missing in pulling[0]["message"]
    assert_one_write_per_meaning(writes)
    # Then Tekton's verdict, kept as Shipwright keeps it.
    tekton = await tekton_verdict(w, "pull-1")
    assert (condition(done)["reason"], condition(done)["message"]) == (
        "TaskRunImagePullFailed", tekton["message"])


async def test_a_request_no_node_meets_is_said_in_the_schedulers_words_and_times_out(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    w = world_real
    await shell_build(w, real_node, "huge", "true",
                      resources={"requests": {"cpu": NO_NODE_HAS}})
    async with controller(stack, w), history(
            w, "huge-1", "huge", annotations={PENDING_TIMEOUT: "30s"}) as seen:
        done = await w.finished("huge-1", 120)
        pod_name = (await taskrun(w, "huge-1"))["status"].get("podName")
        if pod_name:
            await gone(w, PODS, pod_name, 60)  # Tekton deletes the pod of a cancelled run
        verdict = await tekton_verdict(w, "huge-1")
    writes = status_writes(seen)
    print("\nwritten:", [(c["status"], c["reason"], c["message"][:120]) for c in writes])
    waits = [c for c in writes if c["status"] == "Unknown"]
    scheduling = [c for c in waits if c["message"].startswith("FailedScheduling: ")]
    assert scheduling, writes
    # Tekton's reason for it (its IsPodExceedingNodeResources), the scheduler's words.
    assert scheduling[-1]["reason"] == "ExceededNodeResources", scheduling
    assert "Insufficient cpu" in scheduling[-1]["message"]
    assert_one_write_per_meaning(writes)
    assert len(writes) <= 6, writes  # Pending, Tekton's reasons, the words, the verdict

    cond = condition(done)
    assert (cond["status"], cond["reason"]) == ("False", reasons.BUILD_RUN_PENDING_TIMEOUT)
    assert cond["message"].startswith(
        "BuildRun huge-1 did not start running within 30s; it waited: "
        "ExceededNodeResources: FailedScheduling: "), cond["message"]
    # The run is stopped as the other verdicts of ours stop it.
    run = await taskrun(w, "huge-1")
    assert run["spec"]["status"] == TASKRUN_CANCELLED
    assert verdict["reason"] == reasons.TASK_RUN_CANCELLED, verdict
    # When: the deadline counts from the TaskRun's creation (the BuildRun's start).
    created = parse_time(run["metadata"]["creationTimestamp"])
    ended = parse_time(done["status"]["completionTime"])
    assert created is not None and ended is not None
    late = (ended - created).total_seconds() - 30
    print(f"pending deadline: ended {late:.1f}s after it (completionTime whole seconds)")
    assert -1 <= late <= 5, late
