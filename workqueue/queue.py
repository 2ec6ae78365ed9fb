"""The deduplicating work queue: client-go's ``workqueue.Typed`` on one asyncio loop.

Every method but the two coroutines is synchronous and runs between awaits, so the
loop itself serialises them: no locks. Not thread-safe; use it from its loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from workqueue.clock import Clock, RealClock
from workqueue.metrics import QueueMetrics, queue_metrics

__all__ = ["Queue", "ShutDown"]

T = TypeVar("T", bound=Hashable)


class ShutDown(Exception):
    """Raised by ``get`` once the queue is shut down and nothing is left to hand out."""


class Queue(Generic[T]):
    """A FIFO of distinct items, each handed to at most one worker at a time.

    ``add`` marks an item dirty; ``get`` hands out the oldest dirty item and marks it
    processing; ``done`` ends processing. An item added again while processing waits
    (dirty, not queued) until ``done``, so two workers never hold the same item.
    """

    def __init__(self, *, name: str = "", controller: str = "", clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else RealClock()
        # Order of work. Invariant: every queued item is dirty and not processing,
        # and appears once.
        self._queue: deque[T] = deque()
        # Items that need processing: queued ones, plus processing ones added again.
        self._dirty: set[T] = set()
        # Items handed out by get() and not yet done().
        self._processing: set[T] = set()
        # Workers blocked in get(). Each add wakes one; a woken worker re-checks,
        # since another may have taken the item first.
        self._getters: deque[asyncio.Future[None]] = deque()
        # Callers blocked in shutdown_with_drain().
        self._drainers: list[asyncio.Future[None]] = []
        self._shutting_down = False
        # Set by shutdown_with_drain, cleared by shutdown() to cut a drain short.
        self._draining = False
        # None for an unnamed queue: one test on the hot path instead of three no-op
        # calls, which measured about 15% of an add/get/done cycle.
        self._metrics: QueueMetrics[T] | None = queue_metrics(name, controller, self._clock)

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing. Ignored once shutting down."""
        if self._shutting_down or item in self._dirty:
            return
        if self._metrics is not None:
            self._metrics.add(item)
        self._dirty.add(item)
        if item in self._processing:
            return  # done() queues it: never two workers on one item.
        self._queue.append(item)
        if self._getters:
            self._wake_getter()

    def __len__(self) -> int:
        """Items waiting to be handed out (not those processing or delayed)."""
        return len(self._queue)

    async def get(self) -> T:
        """Hand out the next item; the caller must call ``done(item)`` afterwards.

        After shutdown, items still queued are handed out; then ShutDown is raised.
        """
        queue = self._queue
        while not queue:
            if self._shutting_down:
                raise ShutDown
            await self._wait_for_item()
        item = queue.popleft()
        if self._metrics is not None:
            self._metrics.get(item)
        self._processing.add(item)
        self._dirty.remove(item)
        return item

    def done(self, item: T) -> None:
        """End processing of ``item``; queue it again if it was added meanwhile."""
        if self._metrics is not None:
            self._metrics.done(item)
        self._processing.discard(item)
        if item in self._dirty:
            self._queue.append(item)
            if self._getters:
                self._wake_getter()
        # A drain waits for processing only, not for what is still queued (client-go).
        if self._drainers and not self._processing:
            self._release_drainers()

    def shutdown(self) -> None:
        """Ignore further adds, wake every worker, and stop any drain waiting."""
        self._draining = False
        self._begin_shutdown()
        self._release_drainers()

    async def shutdown_with_drain(self) -> None:
        """Shut down, then wait until no item is processing.

        Workers must keep calling ``done``. A later ``shutdown()`` stops the wait.
        """
        self._draining = True
        self._begin_shutdown()
        # Checked again after every wake-up: by the time this resumes, a worker may
        # have taken an item that its done() queued again (client-go loops too).
        while self._processing and self._draining:
            drained = asyncio.get_running_loop().create_future()
            self._drainers.append(drained)
            try:
                await drained
            finally:
                if drained in self._drainers:
                    self._drainers.remove(drained)

    def shutting_down(self) -> bool:
        return self._shutting_down

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        while self._getters:
            self._wake_getter()

    async def _wait_for_item(self) -> None:
        woken = asyncio.get_running_loop().create_future()
        self._getters.append(woken)
        try:
            await woken
        except asyncio.CancelledError:
            if woken.cancelled():
                # Drop it now, or getters cancelled on an idle queue (timeouts) pile up.
                # _wake_getter may already have dropped it.
                with contextlib.suppress(ValueError):
                    self._getters.remove(woken)
            elif self._queue:
                # Woken, then cancelled before running: pass the wake-up on, or an
                # item could sit queued while another worker sleeps.
                self._wake_getter()
            raise

    def _wake_getter(self) -> None:
        # Futures of cancelled getters are skipped; one live getter is woken.
        getters = self._getters
        while getters:
            woken = getters.popleft()
            if not woken.done():
                woken.set_result(None)
                return

    def _release_drainers(self) -> None:
        drainers, self._drainers = self._drainers, []
        for drained in drainers:
            if not drained.done():
                drained.set_result(None)
