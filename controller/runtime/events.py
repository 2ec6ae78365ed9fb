"""Kubernetes Events, so `kubectl describe buildrun` shows Running and the outcome.

An Event is a courtesy to humans, so, as with client-go's recorder, recording
one never waits and never fails a reconcile: `record` puts it in a bounded
backlog that `run`'s senders post from. While the API server is saturated the
backlog absorbs a burst (10,000 Events, client-go keeps 1,000) and Events post
a little late; once it is full the Event is dropped and counted, rather than
holding a worker or growing without bound.

Each object's Events go through one sender, so they are written in the order
they were recorded (readers order Events of the same second by resourceVersion).

Events also wait while reconciles wait (`hold_while`): each is an API write that
changes no object, so while the controllers have a backlog the API server's time goes
to their status writes first, and a burst's Events are posted once it is worked off
(or `max_hold` seconds after each was recorded, whichever comes first). Measured:
BENCHMARKS-journal.md, "Issue 34".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
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

# The longest message an Event holds: the API server's limit for Events of
# events.k8s.io/v1 and for core/v1 Events with an eventTime (NoteLengthLimit, in bytes;
# core/v1 Events like ours, without one, are not checked, but their readers are written
# for that limit). Longer messages are cut to it.
MESSAGE_MAX = 1024

# While held (`hold_while`), how often a sender looks again, and the longest an Event
# waits for the backlog to go: a burst of 5,000 finishes is worked off in 20-40 s here.
HOLD_POLL = 0.05
MAX_HOLD = 30.0


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
    recorded_at: float  # the recorder's clock, for max_hold


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        component: str,
        instance: str,
        *,
        backlog: int = 10_000,
        senders: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.component = component
        self.instance = instance
        self._backlogs: list[asyncio.Queue[_Pending]] = [
            asyncio.Queue(max(backlog // senders, 1)) for _ in range(senders)
        ]
        self._clock = clock
        self._busy: Callable[[], bool] = lambda: False
        self._max_hold = MAX_HOLD
        self._flushing = False
        self._deferred: set[asyncio.Task[None]] = set()

    def hold_while(self, busy: Callable[[], bool], max_hold: float = MAX_HOLD) -> None:
        """Recorded Events wait to be posted while `busy()` (the process's controllers
        have keys waiting), each at most `max_hold` seconds after it was recorded; a
        clean stop's flush posts at once."""
        self._busy, self._max_hold = busy, max_hold

    def record(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        now = timestamps.format_time(timestamps.now())
        pending = _Pending(obj.get("apiVersion"), obj.get("kind"), meta["namespace"],
                           meta["name"], meta.get("uid"), event_type, reason,
                           message[:MESSAGE_MAX], now,
                           self._clock())
        try:
            self._backlogs[hash(meta.get("uid") or meta["name"]) % len(self._backlogs)
                           ].put_nowait(pending)
        except asyncio.QueueFull:
            DROPPED.labels(BACKLOG_FULL).inc()

    def record_deferred(self, obj: JSON, event_type: str, reason: str,
                        message: Awaitable[str]) -> None:
        """`record`, once `message` is worked out (a read that may take a while: the
        caller bounds it and must not let it raise). The caller goes on at once; the
        Event is recorded when the message is there, so Events the object gets after this
        one may be posted before it."""
        async def deferred() -> None:
            try:
                text = await message
            except Exception as exc:  # the caller's bug: the Event is lost, not the process
                DROPPED.labels(REFUSED).inc()
                log.warning("could not work out an event's message",
                            extra={"reason": reason, "error": repr(exc)})
                return
            self.record(obj, event_type, reason, text)

        task = asyncio.create_task(deferred(), name=f"event-{reason}")
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)

    async def run(self) -> None:
        """Posts recorded Events until cancelled; deferred ones not yet recorded are
        then given up."""
        try:
            await asyncio.gather(*(self._send(backlog) for backlog in self._backlogs))
        finally:
            for task in list(self._deferred):
                task.cancel()

    async def flush(self, timeout: float) -> None:
        """Waits up to `timeout` for the deferred Events to be recorded and the backlog
        to be posted (a clean stop): held no longer."""
        self._flushing = True
        deadline = time.monotonic() + timeout
        if self._deferred:
            await asyncio.wait(list(self._deferred), timeout=timeout)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(backlog.join() for backlog in self._backlogs)),
                max(deadline - time.monotonic(), 0.0))

    async def _send(self, backlog: asyncio.Queue[_Pending]) -> None:
        while True:
            pending = await backlog.get()
            try:
                await self._turn(pending)
                await self.kube.create(EVENTS, pending.namespace, self._body(pending))
            except Exception as exc:
                DROPPED.labels(REFUSED).inc()
                log.warning("could not record event",
                            extra={"reason": pending.reason, "error": str(exc)})
            finally:
                backlog.task_done()

    async def _turn(self, pending: _Pending) -> None:
        """Returns once `pending` may be posted: nothing is busy, it waited max_hold, or
        the process is stopping."""
        while self._held(pending):  # noqa: ASYNC110 - polls a predicate: no event to await
            await asyncio.sleep(HOLD_POLL)

    def _held(self, pending: _Pending) -> bool:
        return (not self._flushing and self._busy()
                and self._clock() - pending.recorded_at < self._max_hold)

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
