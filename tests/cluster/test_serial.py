"""One run at a time per Build (issue 43) against the real API server and real Tekton
(kwok plays the kubelet, each pod held until the test releases it): BuildRuns of a Build
annotated with a serial run policy, created at once, run one at a time in the order of
their creation (creationTimestamp, then name), across a restart of the controller; under
SerialLatestOnly the older waiting ones end BuildRunCanceled naming the newest; a value
that is no policy fails the BuildRun, saying so. The controller runs its default four
workers, so its workers race for the Build's turn; and two controllers, one with a start
held in flight (as a replica that lost its lease), keep to one run at a time by the turn
the API server orders (the Build's annotation, written over its resourceVersion)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.annotations import RUN_POLICY
from controller.buildrun.serial import order_key, turn_of, turn_value
from controller.runtime.kube import JSON, Kube
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDS, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.fakes.webhook import FlakyWebhook, Verdict
from tests.harness import (
    World,
    condition,
    controller_settings,
    release,
    running_controller,
    wait_for,
)

pytestmark = pytest.mark.cluster


async def annotate(kube: Kube, world: World, policy: str) -> None:
    await kube.patch(BUILDS, world.ns, fixtures.BUILD,
                     {"metadata": {"annotations": {RUN_POLICY: policy}}})


async def create_at_once(world: World, names: list[str]) -> list[JSON]:
    """The BuildRuns created concurrently, each pod held; returned in the run order."""
    for name in names:
        world.fate(name, fate="hold")
    created = await asyncio.gather(*(world.buildrun(name) for name in names))
    return sorted(created, key=order_key)


async def runs_going(kube: Kube, world: World) -> list[str]:
    """The BuildRuns whose TaskRuns have not finished, by the TaskRuns' label."""
    items = (await kube.list(TASKRUNS, world.ns))["items"]
    return sorted(t["metadata"]["labels"]["buildrun.shipwright.io/name"] for t in items
                  if not (t.get("status") or {}).get("completionTime"))


async def only_running(kube: Kube, world: World, name: str, seconds: float = 1.5) -> None:
    """`name`'s run is going, and for `seconds` no other run of the Build starts."""
    await wait_for(lambda: _is(kube, world, [name]), 30, what=f"{name}'s run alone")
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        assert await runs_going(kube, world) == [name]
        await asyncio.sleep(0.1)


async def _one(kube: Kube, world: World) -> str | None:
    going = await runs_going(kube, world)
    assert len(going) <= 1, going
    return going[0] if going else None


async def _is(kube: Kube, world: World, names: list[str]) -> bool:
    return await runs_going(kube, world) == names


async def test_serial_runs_one_at_a_time_in_creation_order_across_a_restart(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await annotate(kube, world, "Serial")
    settings = controller_settings(cluster, world.ns)
    assert settings.workers == 4
    order: list[str] = []
    async with running_controller(settings):
        queue = await create_at_once(world, [f"s-{i}" for i in range(5)])
        # One starts: the first in the order, or one created a moment before a later
        # creation of the same second whose name sorts first (it does not preempt a
        # run). The rest follow in the order.
        first = await wait_for(lambda: _one(kube, world), 30, what="one run")
        order = [first] + [b["metadata"]["name"] for b in queue
                           if b["metadata"]["name"] != first]
        for i, name in enumerate(order[:2]):
            await only_running(kube, world, name)
            for ahead, waiting in zip(order[i:], order[i + 1:], strict=False):
                async def names_ahead(ahead: str = ahead, waiting: str = waiting) -> bool:
                    cond = condition(await world.get(waiting))
                    return (cond.get("status"), cond.get("reason"), cond.get("message")) == (
                        "Unknown", reasons.SERIAL_RUN_WAITING, "the Build's run policy is "
                        f"Serial: waiting for BuildRun {ahead} to finish")
                await wait_for(names_ahead, 20, what=f"{waiting} waiting behind {ahead}")
            await release(world, name)
            await world.finished(name, 30)
    # A new process (a restart, a new leader) reads the order off the cluster alone.
    async with running_controller(settings):
        for name in order[2:]:
            await only_running(kube, world, name)
            await release(world, name)
            await world.finished(name, 30)
    done = [await world.get(name) for name in order]
    assert [condition(b)["reason"] for b in done] == [reasons.SUCCEEDED] * len(order)
    # Each started once the one ahead had ended (whole seconds: at or after).
    for before, after in itertools.pairwise(done):
        assert after["status"]["startTime"] >= before["status"]["completionTime"], (
            before, after)
    assert len((await kube.list(TASKRUNS, world.ns))["items"]) == len(order)


async def test_serial_latest_only_cancels_the_older_waiting_ones_naming_the_newest(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await annotate(kube, world, "SerialLatestOnly")
    async with running_controller(controller_settings(cluster, world.ns)):
        world.fate("first", fate="hold")
        await world.buildrun("first")
        await only_running(kube, world, "first", 0.5)
        queue = await create_at_once(world, ["l-a", "l-b", "l-c"])
        *older, newest = [b["metadata"]["name"] for b in queue]
        for i, name in enumerate(older):
            done = await world.finished(name, 30)
            # Named: a newer one the controller had seen when it decided. The three are
            # created at once, so it may decide on the first before the last is in its
            # cache (a whole make test met l-a superseded by l-b, 2026-12-06).
            assert condition(done)["reason"] == reasons.BUILD_RUN_CANCELED
            assert condition(done)["message"] in {
                f"superseded by the newer BuildRun {newer} (the Build's run policy is "
                "SerialLatestOnly); canceled before it started"
                for newer in [*older[i + 1:], newest]}
            assert not (done["status"].get("taskRunName"))
        assert condition(await world.get(newest))["reason"] == reasons.SERIAL_RUN_WAITING
        await release(world, "first")
        await only_running(kube, world, newest, 0.5)
        await release(world, newest)
        assert condition(await world.finished(newest, 30))["reason"] == reasons.SUCCEEDED


async def test_a_run_policy_that_is_none_fails_the_buildrun_saying_so(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await annotate(kube, world, "serial")
    async with running_controller(controller_settings(cluster, world.ns)):
        await world.buildrun("typo")
        done = await world.finished("typo", 30)
    assert (condition(done)["reason"], condition(done)["message"]) == (
        reasons.INVALID_RUN_POLICY, "the Build's annotation buildrun-controller.dev/run-policy "
        "is 'serial'; it may be one of 'Parallel', 'Serial', 'SerialLatestOnly', or absent")
    assert not (await kube.list(TASKRUNS, world.ns))["items"]


class HoldingRunsOf(FlakyWebhook):
    """Holds every create of `buildrun`'s TaskRun for `hold_seconds`, then admits it; the
    others at once."""

    def __init__(self, cluster: LocalCluster, namespace: str, buildrun: str) -> None:
        super().__init__(cluster, namespace, lambda _: "allow", timeout_seconds=15,
                         hold_seconds=HOLD)
        self.buildrun = buildrun

    def verdict_for(self, request: dict[str, Any]) -> Verdict:
        labels = request["object"]["metadata"].get("labels") or {}
        return "hold" if labels.get(LABEL_BUILDRUN) == self.buildrun else "allow"


HOLD = 6.0  # seconds b's TaskRun create is held in flight


async def test_two_controllers_one_with_a_start_in_flight_keep_one_run_at_a_time(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    """Controller one starts b: it takes the Build's turn, and its TaskRun create is held
    in flight (an admission webhook answers it HOLD seconds late), as a replica's that
    lost its lease. Controller two, started then (leader election off: a new leader that
    acts while the old one's start is in flight), finds c, newer: under SerialLatestOnly c
    supersedes b, NEW and without a run. Before the turn, two canceled b ("canceled
    before it started") and started c, and one's create then landed: two runs of the
    Build at once. The turn holds b first: c waits behind it, b runs, then c; the real
    TaskRuns' times do not overlap."""
    await annotate(kube, world, "SerialLatestOnly")
    settings = controller_settings(cluster, world.ns)
    assert settings.leader_election is None
    world.fate("b", fate="hold")
    world.fate("c", fate="hold")
    most: list[list[str]] = [[]]  # the most runs of the Build seen going at once

    async def watch_runs() -> None:
        while True:
            going = await runs_going(kube, world)
            if len(going) > len(most[0]):
                most[0] = going
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch_runs())
    async with HoldingRunsOf(cluster, world.ns, "b") as webhook, \
            running_controller(settings, "one"):
        b = await world.buildrun("b")
        await wait_for(lambda: webhook.verdicts.count("hold") >= 1, 20,
                       what="b's TaskRun create held in flight")
        build = await kube.get(BUILDS, world.ns, fixtures.BUILD)
        assert turn_of(build) == tuple(turn_value(b).split("/"))  # taken before the create
        assert await runs_going(kube, world) == []
        async with running_controller(settings, "two"):
            await world.buildrun("c")

            async def c_waits_behind_b() -> bool:
                cond = condition(await world.get("c"))
                return (cond.get("reason"), cond.get("message")) == (
                    reasons.SERIAL_RUN_WAITING, "the Build's run policy is SerialLatestOnly: "
                    "waiting for BuildRun b to finish")
            await wait_for(c_waits_behind_b, 20, what="c waiting behind b")
            await only_running(kube, world, "b", HOLD)
            assert condition(await world.get("b"))["reason"] != reasons.BUILD_RUN_CANCELED
            await release(world, "b")
            await world.finished("b", 30)
            await only_running(kube, world, "c", 1.0)
            await release(world, "c")
            await world.finished("c", 30)
    watcher.cancel()
    assert most[0] == ["b"] or most[0] == ["c"], f"runs going at once: {most[0]}"
    done = [await world.get(name) for name in ("b", "c")]
    assert [condition(d)["reason"] for d in done] == [reasons.SUCCEEDED] * 2
    taskruns = sorted((await kube.list(TASKRUNS, world.ns))["items"],
                      key=lambda t: t["status"]["startTime"])
    assert [t["metadata"]["labels"][LABEL_BUILDRUN] for t in taskruns] == ["b", "c"]
    first, second = taskruns
    assert second["status"]["startTime"] >= first["status"]["completionTime"], taskruns
