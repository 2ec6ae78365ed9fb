"""What the real Tekton of `make dev` does, told as it happens: one "[tekton]" line each
time Tekton's controller changes a TaskRun's Succeeded condition (status and reason)
in the watched namespace.

It only reads (list, then watch; listing again after a broken watch); every line starts
with TEKTON. Stopping it is cancelling `run()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp

from controller.buildrun.resources import TASKRUNS
from controller.buildrun.status import succeeded_condition
from controller.buildrun.taskrun import LABEL_BUILDRUN
from controller.runtime.kube import JSON, ApiError, Kube

TEKTON = "[tekton]"


class TektonLog:
    def __init__(self, kube: Kube, namespace: str, say: Callable[[str], None]) -> None:
        self.kube = kube
        self.namespace = namespace
        self.say = say
        self._seen: dict[str, tuple[str, str]] = {}

    async def run(self) -> None:
        while True:
            try:
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
            except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as exc:
                self.say(f"{TEKTON} watch interrupted ({exc}); listing again")
                await asyncio.sleep(1.0)

    def _observe(self, taskrun: JSON) -> None:
        meta = taskrun["metadata"]
        cond = succeeded_condition(taskrun.get("status")) or {}
        now = (str(cond.get("status") or ""), str(cond.get("reason") or ""))
        if not now[1] or self._seen.get(meta["name"]) == now:
            return
        self._seen[meta["name"]] = now
        owner = (meta.get("labels") or {}).get(LABEL_BUILDRUN, "?")
        pod = (taskrun.get("status") or {}).get("podName")
        self.say(f"{TEKTON} TaskRun {meta['name']} (BuildRun {owner}): {now[1]} "
                 f"({now[0]})" + (f", pod {pod}" if pod else ""))
