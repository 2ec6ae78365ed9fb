"""The soak's cast besides the controller: a flaky webhook that knows whose call it
answers, Tekton (TektonSimulator, made to persist through API server restarts),
and a second writer that makes status updates conflict."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Literal

from controller.buildrun.resources import BUILDRUNS
from controller.buildrun.taskrun import LABEL_BUILDRUN
from controller.runtime.errors import is_already_exists
from controller.runtime.kube import JSON, PODS, ApiError, Kube
from devtools.localcluster import LocalCluster
from devtools.polling import transient
from devtools.tekton import TektonSimulator
from devtools.webhook import FlakyWebhook, Verdict
from soak.api import persist

Outcome = Literal["success", "failure", "timeout", "evicted", "oom"]
OUTCOMES: tuple[Outcome, ...] = ("success", "failure", "timeout", "evicted", "oom")


class AttributedWebhook(FlakyWebhook):
    """FlakyWebhook whose verdict may depend on the BuildRun the TaskRun is for, and
    which records every verdict per BuildRun (read off the TaskRun's label)."""

    def __init__(self, cluster: LocalCluster, namespace: str,
                 decide: Callable[[str], Verdict]) -> None:
        super().__init__(cluster, namespace, lambda _: "allow", timeout_seconds=1)
        self.decide = decide
        self.by_buildrun: defaultdict[str, list[Verdict]] = defaultdict(list)
        self.log: list[tuple[float, str, Verdict]] = []  # (monotonic time, BuildRun, verdict)

    def verdict_for(self, request: JSON) -> Verdict:
        obj = request.get("object") or {}
        owner = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_BUILDRUN, "?")
        verdict = self.decide(owner)
        self.by_buildrun[owner].append(verdict)
        self.log.append((time.monotonic(), owner, verdict))
        return verdict


class Tekton:
    """Plays Tekton for every TaskRun that appears: Running after a short while, then
    the outcome planned for its BuildRun. Every call persists through restarts."""

    def __init__(self, kube: Kube, plan: dict[str, Outcome], rng: random.Random,
                 delay: tuple[float, float], deadline: float) -> None:
        self.sim = TektonSimulator(kube)
        self.kube = kube
        self.plan = plan
        self.rng = rng
        self.delay = delay
        self.deadline = deadline
        self.handled: set[str] = set()
        self.finished: Counter[str] = Counter()
        self.unplanned: list[str] = []  # TaskRuns of BuildRuns that should have none
        self.retries = 0
        self.failures: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def on_taskrun(self, _: str, taskrun: JSON) -> None:
        meta = taskrun["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if key in self.handled:
            return
        self.handled.add(key)
        task = asyncio.create_task(self._play(taskrun))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _retried(self, _: BaseException) -> None:
        self.retries += 1

    async def _play(self, taskrun: JSON) -> None:
        meta = taskrun["metadata"]
        ns, name = meta["namespace"], meta["name"]
        owner = (meta.get("labels") or {}).get(LABEL_BUILDRUN, "")
        how = self.plan.get(owner)
        if how is None:
            self.unplanned.append(name)
            how = "success"
        try:
            await asyncio.sleep(self.rng.uniform(*self.delay))
            await persist(lambda: self.sim.start(ns, name), deadline=self.deadline,
                          not_found=True, on_retry=self._retried)
            await asyncio.sleep(self.rng.uniform(*self.delay))
            if how == "evicted":
                # finish("evicted") is finish("failure") plus an evicted Pod; the Pod part
                # is made idempotent here so a retry after a restart does not trip on it.
                await persist(lambda: self._evict(ns, f"{name}-pod"), deadline=self.deadline,
                              on_retry=self._retried)
                await persist(lambda: self.sim.finish(ns, name, "failure"),
                              deadline=self.deadline, not_found=True, on_retry=self._retried)
            else:
                await persist(lambda: self.sim.finish(ns, name, how), deadline=self.deadline,
                              not_found=True, on_retry=self._retried)
            self.finished[how] += 1
        except Exception as exc:  # reported, and the BuildRun will show up as lost
            self.failures.append(f"{name}: {exc!r}")

    async def _evict(self, ns: str, pod: str) -> None:
        try:
            await self.sim.evict_pod(ns, pod)
        except ApiError as exc:
            if not is_already_exists(exc):
                raise
            await self.kube.patch(PODS, ns, pod, {"status": {
                "phase": "Failed", "reason": "Evicted",
                "message": "The node was low on resource: memory.",
            }}, subresource="status")

    @property
    def busy(self) -> int:
        return len(self._tasks)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class SecondWriter:
    """Merge-patches a label on random BuildRuns, as another client would: each patch
    moves the resourceVersion under the controller's feet, so its next status write
    (which carries the version it read) conflicts."""

    LABEL = "soak.buildrun-controller.test/touched"

    def __init__(self, kube: Kube, namespace: str, rng: random.Random, rate: float,
                 names: Callable[[], list[str]], unfinished: Callable[[], list[str]]) -> None:
        self.kube = kube
        self.ns = namespace
        self.rng = rng
        self.rate = rate
        self.names = names
        self.unfinished = unfinished
        self.patches = 0
        self.on_unfinished = 0
        self.failed = 0

    async def run(self, stop: asyncio.Event) -> None:
        if self.rate <= 0:
            return
        while not stop.is_set():
            await asyncio.sleep(self.rng.expovariate(self.rate))
            open_ = self.unfinished()
            pick_open = bool(open_) and self.rng.random() < 0.8
            pool = open_ if pick_open else self.names()
            if not pool:
                continue
            name = self.rng.choice(pool)
            body = {"metadata": {"labels": {self.LABEL: str(self.patches)}}}
            try:
                await self.kube.patch(BUILDRUNS, self.ns, name, body)
            except Exception as exc:
                if not transient(exc):
                    raise
                self.failed += 1
                continue
            self.patches += 1
            self.on_unfinished += pick_open


async def poisson(rng: random.Random, every: float, stop: asyncio.Event,
                  action: Callable[[], object]) -> None:
    """Calls `action` (awaiting it if it is a coroutine) at exponential intervals with mean
    `every` seconds until `stop` is set; an action in progress is never interrupted."""
    if every <= 0:
        return
    while True:
        wait = rng.expovariate(1.0 / every)
        try:
            await asyncio.wait_for(stop.wait(), wait)
            return
        except TimeoutError:
            pass
        result = action()
        if asyncio.iscoroutine(result):
            await result
