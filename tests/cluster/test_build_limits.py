"""A Build's retention succeededLimit / failedLimit on the real cluster (Tekton runs the
TaskRuns, kwok the pods): the oldest finished BuildRuns beyond each limit are deleted,
the newest kept, nothing else touched, and a recreated namesake is judged as new."""

from __future__ import annotations

import asyncio

import pytest

from controller.buildlimit.reconciler import REASON_DELETED
from controller.runtime.kube import EVENTS, Kube
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster.localcluster import LocalCluster
from tests.harness import World, controller_settings, metric, running_controller, wait_for

pytestmark = pytest.mark.cluster


async def names(kube: Kube, ns: str) -> set[str]:
    return {b["metadata"]["name"] for b in (await kube.list(BUILDRUNS, ns))["items"]}


async def test_limits_delete_the_oldest_finished_and_nothing_else(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    await world.build("limited", retention={"succeededLimit": 2, "failedLimit": 1})
    await world.build("unlimited")
    deleted = {k: metric("buildrun_deleted_by_limit_total", limit=k)
               for k in ("succeeded", "failed")}
    async with running_controller(controller_settings(cluster, world.ns)):
        for name in ("f0", "f1"):
            world.fate(name, fate="fail")
        # One at a time, so each finishes before the next is created: the limit then
        # holds after every finish, not only at the end.
        for name in ("s0", "s1", "f0", "s2", "f1", "s3"):
            await world.buildrun(name, build_ref="limited")
            await world.finished(name, 60)
        for name in ("u0", "u1", "u2"):
            await world.buildrun(name, build_ref="unlimited")
        # A BuildRun of the limited Build still running is never counted or deleted.
        world.fate("held", fate="hold")
        await world.buildrun("held", build_ref="limited")
        for name in ("u0", "u1", "u2"):
            await world.finished(name, 60)

        async def settled() -> bool:
            return await names(kube, world.ns) == {"s2", "s3", "f1", "held", "u0", "u1", "u2"}
        await wait_for(settled, 30, 0.2, what="the limits to delete s0, s1 and f0")
        assert metric("buildrun_deleted_by_limit_total", limit="succeeded") - \
            deleted["succeeded"] == 2
        assert metric("buildrun_deleted_by_limit_total", limit="failed") - deleted["failed"] == 1

        # A new s0, created a second later, is the newest: s2 goes, the new s0 stays.
        await asyncio.sleep(1.1)
        await world.buildrun("s0", build_ref="limited")
        await world.finished("s0", 60)

        async def settled_again() -> bool:
            return await names(kube, world.ns) == {"s0", "s3", "f1", "held", "u0", "u1", "u2"}
        await wait_for(settled_again, 30, 0.2, what="the limit to delete s2, not the new s0")
        await asyncio.sleep(1.0)  # nothing more goes once the limits hold
        assert await names(kube, world.ns) == {"s0", "s3", "f1", "held", "u0", "u1", "u2"}

    async def events() -> list[str]:
        items = (await kube.list(EVENTS, world.ns))["items"]
        return [e["message"] for e in items if e["reason"] == REASON_DELETED
                and e["involvedObject"]["name"] == "limited"]
    messages = await wait_for(events, 10, 0.2, what="the Build's deletion Events")
    assert any("beyond succeededLimit 2" in m and "s0" in m for m in messages), messages
    assert any("beyond failedLimit 1: f0" in m for m in messages), messages
