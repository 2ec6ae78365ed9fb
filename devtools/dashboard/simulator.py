"""The Tekton of the dashboard render (render.py beside it): a stand-in that moves every
TaskRun of one namespace along on its own, labelled "[tekton-simulator]" wherever it
speaks.

No Tekton controller runs on the local API server. SimulatedTekton watches TaskRuns
and plays each one through devtools.cluster.tekton.TektonSimulator's status writes (the real
API server), with a run time and an outcome a `plan` gives per TaskRun.

Invariants: each TaskRun is driven by at most one task, started the first time it is
seen unfinished (a TaskRun seen finished is left alone); a TaskRun whose spec asks for
cancellation ends TaskRunCancelled, however far along it was; stopping the simulator
(cancelling `run()`) cancels and awaits every task it started.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from controller.buildrun.status import run_finished
from controller.runtime.kube import JSON, ApiError, Kube
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import TASKRUNS
from devtools.cluster.tekton import Finish, TektonSimulator

SIMULATOR = "[tekton-simulator]"
TASKRUN_CANCELLED = "TaskRunCancelled"


@dataclass
class _Run:
    """One TaskRun being driven: `cancel` is set once its spec asks for cancellation."""

    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class SimulatedTekton:
    """Watches TaskRuns in one namespace and moves each one along as Tekton would:
    Running after `start_after` seconds, then, after the run time `plan` gives it, the
    outcome `plan` gives it (a devtools.cluster.tekton.Finish), or TaskRunCancelled as soon as
    its spec asks for cancellation. Every status write goes through the real API server
    (devtools.cluster.tekton); every line it `say`s starts with SIMULATOR.
    """

    def __init__(self, kube: Kube, namespace: str, say: Callable[[str], None],
                 plan: Callable[[JSON], tuple[float, Finish]],
                 *, start_after: float = 1.0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.say = say
        self.plan = plan
        self.start_after = start_after
        self.sim = TektonSimulator(kube)
        self._runs: dict[str, _Run] = {}

    async def run(self) -> None:
        """Lists and watches until cancelled, listing again after a broken watch."""
        try:
            while True:
                try:
                    await self._list_and_watch()
                except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as exc:
                    self.say(f"{SIMULATOR} watch interrupted ({exc}); listing again")
                    await asyncio.sleep(1.0)
        finally:
            tasks = [r.task for r in self._runs.values() if r.task is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _list_and_watch(self) -> None:
        listing = await self.kube.list(TASKRUNS, self.namespace)
        for item in listing.get("items") or []:
            self._observe(item)
        version = listing["metadata"]["resourceVersion"]
        while True:
            async for event in self.kube.watch(TASKRUNS, self.namespace, version,
                                               timeout_seconds=60):
                obj = event.get("object") or {}
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._observe(obj)

    def _observe(self, taskrun: JSON) -> None:
        name = taskrun["metadata"]["name"]
        finished = run_finished(taskrun)
        run = self._runs.get(name)
        if run is None:
            if finished:
                return
            run = self._runs[name] = _Run()
            run.task = asyncio.create_task(self._drive(taskrun, run), name=f"tekton-{name}")
        if (taskrun.get("spec") or {}).get("status") == TASKRUN_CANCELLED:
            run.cancel.set()

    async def _drive(self, taskrun: JSON, run: _Run) -> None:
        name = taskrun["metadata"]["name"]
        owner = (taskrun["metadata"].get("labels") or {}).get(LABEL_BUILDRUN, "?")
        run_for, how = self.plan(taskrun)
        try:
            self.say(f"{SIMULATOR} TaskRun {name} (BuildRun {owner}) seen, pod scheduling")
            if await self._wait_cancel(run, self.start_after):
                await self._finish(name, "cancelled", owner)
                return
            await self.sim.start(self.namespace, name)
            self.say(f"{SIMULATOR} TaskRun {name} Running (pod {name}-pod)")
            if await self._wait_cancel(run, run_for):
                await self._finish(name, "cancelled", owner)
                return
            await self._finish(name, how, owner)
        except ApiError as exc:
            self.say(f"{SIMULATOR} TaskRun {name}: {exc.status} {exc.reason}, leaving it")

    async def _finish(self, name: str, how: Finish, owner: str) -> None:
        await self.sim.finish(self.namespace, name, how)
        words = {"success": "Succeeded", "cancelled": "cancelled (TaskRunCancelled)"}
        self.say(f"{SIMULATOR} TaskRun {name} (BuildRun {owner}) {words.get(how, how)}")

    @staticmethod
    async def _wait_cancel(run: _Run, seconds: float) -> bool:
        """Sleeps `seconds`; True as soon as cancellation is asked for."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.cancel.wait(), seconds)
        return run.cancel.is_set()
