"""Kubernetes Events, so `kubectl describe buildrun` shows Running and the outcome.

An Event is a courtesy to humans, so, as with client-go's recorder, recording
one never waits and never fails a reconcile: `record` puts it in a bounded
backlog that `run`'s senders post from. While the API server is saturated the
backlog absorbs a burst (10,000 Events, client-go keeps 1,000) and Events post
a little late; once it is full the Event is dropped and counted, rather than
holding a worker or growing without bound.

Each object's Events go through one sender, so they are written in the order
they were recorded (readers order Events of the same second by resourceVersion).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import NamedTuple

from prometheus_client import Counter

from controller.runtime import timestamps
from controller.runtime.kube import EVENTS, JSON, Kube

log = logging.getLogger(__name__)

BACKLOG_FULL, REFUSED = "backlog_full", "refused"
DROPPED = Counter(
    "controller_events_dropped_total",
    "Events not posted: the backlog was full, or the API server refused them",
    ["cause"],
)
for _cause in (BACKLOG_FULL, REFUSED):
    DROPPED.labels(_cause)  # a zero sample from the start, so rate() and alerts see it


class _Pending(NamedTuple):
    """What an Event needs, kept small: a full backlog of 10,000 is about 3.5 MB."""

    api_version: str | None
    kind: str | None
    namespace: str
    name: str
    uid: str | None
    event_type: str
    reason: str
    message: str
    time: str


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        component: str,
        instance: str,
        *,
        backlog: int = 10_000,
        senders: int = 4,
    ) -> None:
        self.kube = kube
        self.component = component
        self.instance = instance
        self._backlogs: list[asyncio.Queue[_Pending]] = [
            asyncio.Queue(max(backlog // senders, 1)) for _ in range(senders)
        ]

    def record(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        now = timestamps.format_time(timestamps.now())
        pending = _Pending(obj.get("apiVersion"), obj.get("kind"), meta["namespace"],
                           meta["name"], meta.get("uid"), event_type, reason, message[:1024], now)
        try:
            self._backlogs[hash(meta.get("uid") or meta["name"]) % len(self._backlogs)
                           ].put_nowait(pending)
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

    async def _send(self, backlog: asyncio.Queue[_Pending]) -> None:
        while True:
            pending = await backlog.get()
            try:
                await self.kube.create(EVENTS, pending.namespace, self._body(pending))
            except Exception as exc:
                DROPPED.labels(REFUSED).inc()
                log.warning("could not record event",
                            extra={"reason": pending.reason, "error": str(exc)})
            finally:
                backlog.task_done()

    def _body(self, pending: _Pending) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{pending.name[:200]}.",
                         "namespace": pending.namespace},
            "involvedObject": {"apiVersion": pending.api_version, "kind": pending.kind,
                               "name": pending.name, "namespace": pending.namespace,
                               "uid": pending.uid},
            "type": pending.event_type,
            "reason": pending.reason,
            "message": pending.message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": pending.time,
            "lastTimestamp": pending.time,
            "count": 1,
        }
