"""The soak's cast besides the controller and the real Tekton stack: a flaky webhook
that knows whose call it answers, and a second writer that makes status updates
conflict."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Literal

from controller.runtime.kube import JSON, Kube
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.polling import transient
from devtools.fakes.webhook import FlakyWebhook, Verdict

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
