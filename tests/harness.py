"""Helpers for tests that run the controller against the real API server.

The controller runs in-process (same event loop) with its endpoints on free
loopback ports, watching only the test's namespace. TaskRuns are run by the real
Tekton of the session's stack (tests/conftest.py), their pods by kwok, whose fate a
test picks with `World.fate`. devtools.fakes.tekton.TektonStatusWriter survives only where a
test needs a TaskRun state Tekton cannot be made to produce on demand; each such use
says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from prometheus_client import REGISTRY

from controller.app import App
from controller.buildrun.caches import Caches
from controller.buildrun.executors import TASKRUN
from controller.buildrun.outcomes import run_finished
from controller.buildrun.reconciler import BuildRunReconciler
from controller.runtime.controller import Result
from controller.runtime.events import EventRecorder
from controller.runtime.kube import JSON, PODS, ApiError, Kube
from controller.runtime.timestamps import parse_time
from controller.settings import QueueSettings, RetryBudget, Settings
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDRUNS, BUILDS, BUILDSTRATEGIES, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.polling import wait_until
from devtools.fakes.fates import FateWebhook, fate_annotations


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
    """devtools.cluster.polling.wait_until's first truthy value; TimeoutError naming `what` if
    none came within `timeout`."""
    value = await wait_until(predicate, timeout, interval)
    if not value:
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
    return value


class World:
    """Creates and reads the objects of one test namespace (admin credentials)."""

    def __init__(self, kube: Kube, namespace: str, fates: FateWebhook | None = None) -> None:
        self.kube = kube
        self.ns = namespace
        self.fates = fates

    def fate(self, buildrun: str, **fate: str) -> None:
        """What kwok does with `buildrun`'s pod (devtools.fakes.fates.fate_annotations): e.g.
        `fate="hold"`, `fate="fail", exit_code="3"`, `results=fates.results(...)`."""
        assert self.fates is not None, "this World has no FateWebhook"
        self.fates.set(self.ns, buildrun, **fate)

    async def strategy(self, name: str = fixtures.STRATEGY,
                       parameters: list[JSON] | None = None) -> JSON:
        """devtools.cluster.fixtures.strategy(): parameters None means the `dockerfile` one."""
        return await self.kube.create(BUILDSTRATEGIES, self.ns,
                                      fixtures.strategy(name, parameters=parameters))

    async def build(self, name: str = fixtures.BUILD, strategy: str = fixtures.STRATEGY,
                    **spec: Any) -> JSON:
        """devtools.cluster.fixtures.build(): `spec` adds fields to the default spec or
        replaces them."""
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


async def taskrun(w: World, buildrun: str) -> JSON:
    """The TaskRun made for `buildrun` (by its label, so also one the status never
    recorded); waits up to 30 s for it to exist."""
    async def made() -> JSON | None:
        return next((t for t in await w.taskruns()
                     if (t["metadata"].get("labels") or {}).get(LABEL_BUILDRUN) == buildrun),
                    None)
    result: JSON = await wait_for(made, 30, what=f"BuildRun {buildrun}'s TaskRun")
    return result


async def tekton_verdict(w: World, buildrun: str) -> JSON:
    """The TaskRun's Succeeded condition once Tekton has decided it. Tekton deletes a
    stopped TaskRun's pod first and writes the status when that reconcile ends, so the
    pod can be gone a moment before the condition says why."""
    async def decided() -> bool:
        return run_finished(await taskrun(w, buildrun))
    await wait_for(decided, 30, 0.1, what=f"Tekton to decide the TaskRun of {buildrun}")
    return condition(await taskrun(w, buildrun))


async def running_pod(w: World, buildrun: str) -> JSON:
    async def running() -> JSON | None:
        pod_name = ((await taskrun(w, buildrun)).get("status") or {}).get("podName")
        if not pod_name:
            return None
        try:
            pod = await w.kube.get(PODS, w.ns, pod_name)
        except ApiError:
            return None
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None
    result: JSON = await wait_for(running, 30, what=f"{buildrun}'s pod to run")
    return result


async def release(w: World, buildrun: str, **fate: str) -> JSON:
    """Ends a `hold` on `buildrun`'s running pod: its annotations become `fate` (default
    succeed), and kwok moves it on. Returns the pod as it was before."""
    pod = await running_pod(w, buildrun)
    await w.kube.patch(PODS, w.ns, pod["metadata"]["name"], {"metadata": {
        "annotations": fate_annotations(**({"fate": "succeed"} | fate))}})
    return pod


async def gone(w: World, resource: Any, name: str, timeout: float = 30) -> None:
    async def missing() -> bool:
        try:
            await w.kube.get(resource, w.ns, name)
        except ApiError as exc:
            return exc.status == 404
        return False
    await wait_for(missing, timeout, 0.1, what=f"{resource.plural}/{name} to be deleted")


async def pods(w: World) -> list[JSON]:
    items: list[JSON] = (await w.kube.list(PODS, w.ns))["items"]
    return items


def condition(buildrun: JSON) -> JSON:
    for cond in (buildrun.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Succeeded":
            return dict(cond)
    return {}


def assert_start_copied(buildrun: JSON, run: JSON) -> None:
    """The BuildRun's startTime is its run's (TaskRun's or PipelineRun's), copied once as
    Shipwright does (buildrun.go: only while the BuildRun has none), to within a second:
    Tekton can stamp its own startTime twice. Its knative reconciler starts from the
    informer's copy; if that copy is older than Tekton's first status write, the reconcile
    sees no startTime, stamps a new one, and updateStatus's retry on the conflict writes
    that status over the stored one (seen 12-06 under load: 18:03:05 copied, 18:03:06 on
    the TaskRun a moment later; and 06:48:54 against 06:48:55)."""
    copied = parse_time((buildrun.get("status") or {}).get("startTime"))
    tekton = parse_time((run.get("status") or {}).get("startTime"))
    assert copied is not None and tekton is not None, (buildrun.get("status"), run.get("status"))
    assert abs((copied - tekton).total_seconds()) <= 1, (copied, tekton)


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


def in_flight(kube: Kube, *cached: tuple[Any, JSON]) -> BuildRunReconciler:
    """A BuildRun reconciler whose caches hold `cached` ((resource, object) pairs), as a
    reconcile that began when they were so saw them: the product's reconciler on real
    objects, without the informers' timing."""
    caches = Caches()
    for resource, obj in cached:
        caches.store(resource).upsert(copy.deepcopy(obj))
    return BuildRunReconciler(kube, caches, EventRecorder(kube, "t", "t"), executor=TASKRUN)


def record_reconciles(app: App, who: str, into: list[Interval]) -> None:
    """Wraps the app's BuildRun reconciler so every reconcile's interval is appended to
    `into` when it ends (however it ends); giving up is passed through unrecorded."""
    controller = app.controller("buildrun")
    inner = controller.reconciler

    class Recording:
        async def reconcile(self, key: str) -> Result:
            start = time.monotonic()
            try:
                return await inner.reconcile(key)
            finally:
                into.append(Interval(who, key, start, time.monotonic()))

        give_up = inner.give_up
        wrapped = inner  # the reconciler it records

    controller.reconciler = Recording()
