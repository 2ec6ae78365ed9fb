"""The process: runs the controllers the domains' `setup` modules wire (BuildRun, Build,
build-limit cleanup) on one set of shared informers, with leader election, Events and
the HTTP endpoints, until a signal or a lost lease.

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

from controller.buildlimit import setup as buildlimit_setup
from controller.buildrun import setup as buildrun_setup
from controller.builds import setup as build_setup
from controller.runtime.controller import Controller
from controller.runtime.events import EventRecorder
from controller.runtime.informers import InformerFactory
from controller.runtime.kube import ConfigError, Kube, load_api_client
from controller.runtime.leader import LeaderElector, LeadershipLost
from controller.runtime.server import Endpoints
from controller.settings import Settings
from controller.shipwright import crds, field_managers

log = logging.getLogger(__name__)

# On a clean stop, how long recorded Events may take to be posted before exiting.
EVENT_FLUSH_SECONDS = 2.0


@dataclass
class App:
    """Everything one controller process runs; `run` returns the exit code."""

    settings: Settings
    kube: Kube
    informers: InformerFactory
    controllers: tuple[Controller, ...]
    recorder: EventRecorder
    endpoints: Endpoints
    stopping: asyncio.Event

    def request_stop(self) -> None:
        """What SIGTERM does: stop taking keys, drain, release the lease, return 0."""
        self.stopping.set()

    @classmethod
    async def create(cls, settings: Settings, identity: str) -> App:
        # Writes no controller claims (events, the lease) name the manager the API server
        # makes of Shipwright's binary's User-Agent (controller.shipwright.field_managers).
        kube = Kube(await load_api_client(settings.kubeconfig, settings.context),
                    field_manager=field_managers.BUILD_CONTROLLER)
        try:
            await kube.request("GET", "/version")
        except Exception as exc:
            await kube.close()
            raise ConfigError(
                f"cannot reach the API server at {kube.api_client.configuration.host}: {exc}"
            ) from exc
        try:  # a setting refused here (a ConfigError) must not leave the session open
            await crds.check(kube)
            recorder = EventRecorder(kube, "buildrun-controller", identity)
            informers = InformerFactory(kube, settings.namespace, settings.resync_period)
            controllers = wire(kube, settings, recorder, informers)
            # Events wait while reconciles wait: a burst's status writes go first.
            recorder.hold_while(lambda: any(len(c.queue) for c in controllers))
        except BaseException:
            await kube.close()
            raise
        app = cls(settings, kube, informers, controllers, recorder,
                  Endpoints(lambda: app.synced()), asyncio.Event())
        return app

    def controller(self, name: str) -> Controller:
        """The controller called `name` (each setup module's NAME)."""
        return next(c for c in self.controllers if c.name == name)

    def synced(self) -> bool:
        return all(i.has_synced() for i in self.informers.all())

    async def run(self, *, handle_signals: bool = True) -> int:
        s = self.settings
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        await self.endpoints.start(s.metrics_address, s.probe_address)
        log.info("serving", extra={"addresses": self.endpoints.addresses})
        informer_tasks = [asyncio.create_task(i.run(), name=f"informer-{i.resource.plural}")
                          for i in self.informers.all()]
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
        grace = 0 if code else s.shutdown_grace
        await asyncio.gather(*(c.stop(grace) for c in self.controllers))
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
        await asyncio.gather(*(i.wait_synced() for i in self.informers.all()))
        if elector is not None:
            await elector.acquire()
        for controller in self.controllers:
            controller.start()
        if elector is not None:
            await elector.hold()  # returns only by raising LeadershipLost
        else:
            await asyncio.Event().wait()


def wire(kube: Kube, settings: Settings, recorder: EventRecorder,
         informers: InformerFactory) -> tuple[Controller, ...]:
    """The process's controllers, each on the informers it asks `informers` for: what
    `App.create` runs, and what tests/unit/test_informer_path.py feeds arbitrary objects."""
    return (
        buildrun_setup.setup(kube, settings, recorder, informers),
        build_setup.setup(kube, settings, informers),
        buildlimit_setup.setup(kube, settings, recorder, informers),
    )


async def run(settings: Settings, identity: str) -> int:
    app = await App.create(settings, identity)
    with contextlib.suppress(asyncio.CancelledError):
        return await app.run()
    return 1
