"""What the real Tekton of `make dev` does, told as it happens: one "[tekton]" line each
time Tekton's controller changes a TaskRun's Succeeded condition (status and reason)
in the watched namespace.

It only reads, through the controller's own TaskRun informer (list, watch, relist and
backoff as the controller has them); every line starts with TEKTON. Stopping it is
cancelling `run()`.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.runtime.informers import EventType, Informer
from controller.runtime.kube import JSON, Kube
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import TASKRUNS

TEKTON = "[tekton]"


class TektonLog:
    def __init__(self, kube: Kube, namespace: str, say: Callable[[str], None]) -> None:
        self.kube = kube
        self.namespace = namespace
        self.say = say
        self._seen: dict[str, tuple[str, str]] = {}

    async def run(self) -> None:
        informer = Informer(self.kube, TASKRUNS, self.namespace)
        informer.add_handler(self._on_event)
        await informer.run()

    def _on_event(self, kind: EventType, taskrun: JSON, _: JSON | None, __: bool) -> None:
        if kind != "DELETED":
            self._observe(taskrun)

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
