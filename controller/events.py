"""Kubernetes Events, so `kubectl describe buildrun` shows each transition.

An Event is a courtesy to humans, so, as with client-go's recorder, recording
one never waits and never fails a reconcile: `record` puts it in a bounded
backlog that `run`'s senders post from. When the backlog is full (the API
server is slow or refusing Events) the Event is dropped and counted, rather
than holding a worker or growing without bound.

Each object's Events go through one sender, so they are written in the order
they were recorded (readers order Events of the same second by resourceVersion).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging

from prometheus_client import Counter

from controller.kube import EVENTS, JSON, Kube

log = logging.getLogger(__name__)

BACKLOG_FULL, REFUSED = "backlog_full", "refused"
DROPPED = Counter(
    "controller_events_dropped_total",
    "Events not posted: the backlog was full, or the API server refused them",
    ["cause"],
)
for _cause in (BACKLOG_FULL, REFUSED):
    DROPPED.labels(_cause)  # a zero sample from the start, so rate() and alerts see it


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        component: str,
        instance: str,
        *,
        backlog: int = 1000,
        senders: int = 4,
    ) -> None:
        self.kube = kube
        self.component = component
        self.instance = instance
        self._backlogs: list[asyncio.Queue[JSON]] = [
            asyncio.Queue(max(backlog // senders, 1)) for _ in range(senders)
        ]

    def record(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._backlogs[hash(meta.get("uid") or meta["name"]) % len(self._backlogs)
                           ].put_nowait(body)
        except asyncio.QueueFull:
            DROPPED.labels(BACKLOG_FULL).inc()

    async def run(self) -> None:
        """Posts recorded Events until cancelled."""
        await asyncio.gather(*(self._send(backlog) for backlog in self._backlogs))

    async def flush(self, timeout: float) -> None:
        """Waits up to `timeout` for the backlog to be posted (a clean stop)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(backlog.join() for backlog in self._backlogs)), timeout)

    async def _send(self, backlog: asyncio.Queue[JSON]) -> None:
        while True:
            body = await backlog.get()
            try:
                await self.kube.create(EVENTS, body["metadata"]["namespace"], body)
            except Exception as exc:
                DROPPED.labels(REFUSED).inc()
                log.warning("could not record event",
                            extra={"reason": body["reason"], "error": str(exc)})
            finally:
                backlog.task_done()
