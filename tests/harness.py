"""Helpers for tests that run the controller against the real API server.

The controller runs in-process (same event loop) with its endpoints on free
loopback ports, watching only the test's namespace. TaskRuns are moved along
by devtools.tekton.TektonSimulator, the one stand-in allowed here,
because no Tekton or kubelet runs on the local API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from prometheus_client import REGISTRY

from controller.app import App
from controller.buildrun.resources import BUILDRUNS, BUILDS, BUILDSTRATEGIES, TASKRUNS
from controller.runtime.kube import JSON, Kube
from controller.runtime.reconcile import Result
from controller.settings import QueueSettings, RetryBudget, Settings
from devtools import fixtures
from devtools.localcluster import LocalCluster
from devtools.polling import wait_until


def controller_settings(cluster: LocalCluster, namespace: str, **overrides: Any) -> Settings:
    base = Settings(
        kubeconfig=str(cluster.kubeconfig),
        namespace=namespace,
        metrics_address="127.0.0.1:0",
        probe_address="127.0.0.1:0",
        shutdown_grace=5.0,
        queue=QueueSettings(base_delay=0.05, max_delay=2.0),
        budget=RetryBudget(max_retries=8, max_age=0),
    )
    return replace(base, **overrides)


@contextlib.asynccontextmanager
async def running_controller(settings: Settings, identity: str = "test") -> AsyncIterator[App]:
    app = await App.create(settings, identity)
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await wait_for(lambda: app.synced() and bool(app.endpoints.addresses), timeout=30)
        yield app
    finally:
        app.request_stop()  # the path SIGTERM takes
        await asyncio.wait_for(task, 30)


async def wait_for(
    predicate: Callable[[], Any] | Callable[[], Awaitable[Any]],
    timeout: float = 20.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """devtools.polling.wait_until's first truthy value; TimeoutError naming `what` if
    none came within `timeout`."""
    value = await wait_until(predicate, timeout, interval)
    if not value:
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
    return value


class World:
    """Creates and reads the objects of one test namespace (admin credentials)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace

    async def strategy(self, name: str = fixtures.STRATEGY,
                       parameters: list[JSON] | None = None) -> JSON:
        """devtools.fixtures.strategy(): parameters None means the `dockerfile` one."""
        return await self.kube.create(BUILDSTRATEGIES, self.ns,
                                      fixtures.strategy(name, parameters=parameters))

    async def build(self, name: str = fixtures.BUILD, strategy: str = fixtures.STRATEGY,
                    **spec: Any) -> JSON:
        """devtools.fixtures.build(): `spec` adds fields to the default spec or replaces them."""
        return await self.kube.create(BUILDS, self.ns,
                                      fixtures.build(name, strategy=strategy, **spec))

    async def buildrun(self, name: str, build_ref: str | None = fixtures.BUILD,
                       **spec: Any) -> JSON:
        """A BuildRun of Build `build_ref` (none when None); `spec` adds fields."""
        return await self.kube.create(BUILDRUNS, self.ns,
                                      fixtures.buildrun(name, build_ref, **spec))

    async def get(self, name: str) -> JSON:
        return await self.kube.get(BUILDRUNS, self.ns, name)

    async def taskruns(self) -> list[JSON]:
        items: list[JSON] = (await self.kube.list(TASKRUNS, self.ns))["items"]
        return items

    async def finished(self, name: str, timeout: float = 20.0) -> JSON:
        async def done() -> JSON | None:
            br = await self.get(name)
            return br if (br.get("status") or {}).get("completionTime") else None
        result: JSON = await wait_for(done, timeout, what=f"BuildRun {name} to finish")
        return result

    async def taskrun_of(self, name: str, timeout: float = 20.0) -> str:
        async def created() -> str | None:
            br = await self.get(name)
            return (br.get("status") or {}).get("taskRunName")
        result: str = await wait_for(created, timeout, what=f"BuildRun {name}'s TaskRun")
        return result


def condition(buildrun: JSON) -> JSON:
    for cond in (buildrun.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Succeeded":
            return dict(cond)
    return {}


def metric(metric_name: str, /, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric_name, labels) or 0.0


async def scrape(app: App) -> str:
    async with aiohttp.ClientSession() as session, session.get(
        f"http://{app.endpoints.addresses['metrics']}/metrics"
    ) as resp:
        return await resp.text()


@dataclass(frozen=True)
class Interval:
    """One reconcile as a replica ran it, on the monotonic clock."""

    who: str
    key: str
    start: float
    end: float


def record_reconciles(app: App, who: str, into: list[Interval]) -> None:
    """Wraps the app's BuildRun reconciler so every reconcile's interval is appended to
    `into` when it ends (however it ends); giving up is passed through unrecorded."""
    controller = app.buildrun.controller
    inner = controller.reconciler

    class Recording:
        async def reconcile(self, key: str) -> Result:
            start = time.monotonic()
            try:
                return await inner.reconcile(key)
            finally:
                into.append(Interval(who, key, start, time.monotonic()))

        give_up = inner.give_up

    controller.reconciler = Recording()
