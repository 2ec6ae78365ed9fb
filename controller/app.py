"""Wires informers, the queue, the BuildRun reconciler, leader election and the
HTTP endpoints together, and runs them until a signal or a lost lease.

Informers run on every replica, so a standby is warm and ready; workers run
only on the leader. Losing the lease stops reconciling at once and exits
non-zero (as controller-runtime does) so the Deployment restarts the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

from controller.buildrun import metrics as buildrun_metrics
from controller.buildrun.reconciler import BuildRunReconciler, Caches
from controller.buildrun.taskrun import LABEL_BUILDRUN
from controller.errors import ERROR_CLASSES, RetryableError
from controller.events import EventRecorder
from controller.informers import EventType, Informer
from controller.kube import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    JSON,
    TASKRUNS,
    ConfigError,
    Kube,
    key_of,
    load_api_client,
)
from controller.leader import LeaderElector, LeadershipLost
from controller.reconcile import Controller
from controller.server import Endpoints
from controller.settings import Settings
from workqueue import RateLimitingQueue, default_controller_rate_limiter

log = logging.getLogger(__name__)

NAME = "buildrun"
# On a clean stop, how long recorded Events may take to be posted before exiting.
EVENT_FLUSH_SECONDS = 2.0


def build_names(buildrun: JSON) -> list[str]:
    name = ((buildrun.get("spec") or {}).get("build") or {}).get("name")
    return [f"{buildrun['metadata']['namespace']}/{name}"] if name else []


def owner_buildrun(taskrun: JSON) -> str | None:
    """The BuildRun key a TaskRun belongs to: its controller ownerReference, else its label."""
    meta = taskrun["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "BuildRun" and ref.get("controller"):
            return f"{meta['namespace']}/{ref['name']}"
    name = (meta.get("labels") or {}).get(LABEL_BUILDRUN)
    return f"{meta['namespace']}/{name}" if name else None


@dataclass
class App:
    """Everything one controller process runs; `run` returns the exit code."""

    settings: Settings
    kube: Kube
    buildruns: Informer
    builds: Informer
    strategies: Informer
    taskruns: Informer
    controller: Controller
    recorder: EventRecorder
    endpoints: Endpoints
    stopping: asyncio.Event

    def request_stop(self) -> None:
        """What SIGTERM does: stop taking keys, drain, release the lease, return 0."""
        self.stopping.set()

    @classmethod
    async def create(cls, settings: Settings, identity: str) -> App:
        kube = Kube(await load_api_client(settings.kubeconfig, settings.context))
        try:
            await kube.request("GET", "/version")
        except Exception as exc:
            await kube.close()
            raise ConfigError(
                f"cannot reach the API server at {kube.api_client.configuration.host}: {exc}"
            ) from exc
        ns = settings.namespace
        resync = settings.resync_period
        buildruns = Informer(kube, BUILDRUNS, ns, indexers={"build": build_names},
                             resync_period=resync)
        builds = Informer(kube, BUILDS, ns, resync_period=resync)
        # Read when a BuildRun starts; a BuildRun never waits on a strategy, so no handler.
        strategies = Informer(kube, BUILDSTRATEGIES, ns, resync_period=resync)
        taskruns = Informer(kube, TASKRUNS, ns, resync_period=resync)
        q = settings.queue
        queue: RateLimitingQueue[str] = RateLimitingQueue(
            default_controller_rate_limiter(
                base_delay=q.base_delay, max_delay=q.max_delay, qps=q.qps, burst=q.burst,
                jitter=q.jitter,
            ),
            name=NAME,
            controller=NAME,
        )
        recorder = EventRecorder(kube, "buildrun-controller", identity)
        reconciler = BuildRunReconciler(
            kube,
            Caches(buildruns=buildruns.store, taskruns=taskruns.store, builds=builds.store,
                   strategies=strategies.store),
            recorder,
        )
        controller = Controller(
            NAME, reconciler, queue,
            workers=settings.workers,
            budget=settings.budget,
            reconcile_timeout=settings.reconcile_timeout,
            on_retry=_count_retry,
        )
        _zero_retry_series()
        app = cls(settings, kube, buildruns, builds, strategies, taskruns, controller, recorder,
                  Endpoints(lambda: app.synced()), asyncio.Event())
        app._wire()
        return app

    def _wire(self) -> None:
        enqueue = self.controller.enqueue

        def on_buildrun(_: EventType, obj: JSON, __: JSON | None) -> None:
            enqueue(key_of(obj))

        def on_taskrun(_: EventType, obj: JSON, __: JSON | None) -> None:
            owner = owner_buildrun(obj)
            if owner:
                enqueue(owner)

        def on_build(_: EventType, obj: JSON, __: JSON | None) -> None:
            for buildrun in self.buildruns.store.by_index("build", key_of(obj)):
                enqueue(key_of(buildrun))

        self.buildruns.add_handler(on_buildrun)
        self.taskruns.add_handler(on_taskrun)
        self.builds.add_handler(on_build)

    def informers(self) -> tuple[Informer, ...]:
        return (self.buildruns, self.builds, self.strategies, self.taskruns)

    def synced(self) -> bool:
        return all(i.has_synced() for i in self.informers())

    async def run(self, *, handle_signals: bool = True) -> int:
        s = self.settings
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        await self.endpoints.start(s.metrics_address, s.probe_address)
        log.info("serving", extra={"addresses": self.endpoints.addresses})
        informer_tasks = [asyncio.create_task(i.run(), name=f"informer-{i.resource.plural}")
                          for i in self.informers()]
        events = asyncio.create_task(self.recorder.run(), name="events")
        elector = LeaderElector(self.kube, s.leader_election) if s.leader_election else None
        lead = asyncio.create_task(self._lead(elector))
        stopped = asyncio.create_task(self.stopping.wait())
        done, _ = await asyncio.wait(
            [lead, stopped, *informer_tasks], return_when=asyncio.FIRST_COMPLETED
        )
        code = 0
        if lead in done and isinstance(lead.exception(), LeadershipLost):
            log.error("leader election lost, stopping at once",
                      extra={"error": str(lead.exception())})
            code = 1
        elif lead in done or any(t in done for t in informer_tasks):
            failed = next(t for t in [lead, *informer_tasks] if t in done)
            log.error("stopping after a fatal error", extra={"error": repr(failed.exception())})
            code = 1
        # Stop taking keys; in-flight reconciles get the grace period (none on a lost lease).
        await self.controller.stop(0 if code else s.shutdown_grace)
        if code == 0:
            await self.recorder.flush(EVENT_FLUSH_SECONDS)
        for task in (lead, stopped, events, *informer_tasks):
            task.cancel()
        await asyncio.gather(lead, stopped, events, *informer_tasks, return_exceptions=True)
        if elector is not None and code == 0:
            await elector.release()
        await self.endpoints.stop()
        await self.kube.close()
        return code

    async def _lead(self, elector: LeaderElector | None) -> None:
        await asyncio.gather(*(i.wait_synced() for i in self.informers()))
        if elector is not None:
            await elector.acquire()
        self.controller.start()
        if elector is not None:
            await elector.hold()  # returns only by raising LeadershipLost
        else:
            await asyncio.Event().wait()


def _zero_retry_series() -> None:
    """The error classes are a closed set: give each a zero sample up front."""
    for error_class in ERROR_CLASSES:
        buildrun_metrics.RETRIES.labels(error_class)


def _count_retry(_: str, error: RetryableError) -> None:
    buildrun_metrics.RETRIES.labels(error.error_class).inc()


async def run(settings: Settings, identity: str) -> int:
    app = await App.create(settings, identity)
    with contextlib.suppress(asyncio.CancelledError):
        return await app.run()
    return 1
