"""The deduplicating work queue: client-go's ``workqueue.Typed`` on one asyncio loop, with
the priorities of controller-runtime's priority queue (v0.20+).

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

__all__ = ["DEFAULT_PRIORITY", "Queue", "ShutDown"]

T = TypeVar("T", bound=Hashable)

# What an add without a priority gets (controller-runtime's: its handlers give the objects
# of an informer's initial list and resyncs -100, everything else 0).
DEFAULT_PRIORITY = 0


class ShutDown(Exception):
    """Raised by ``get`` once the queue is shut down and nothing is left to hand out."""


class Queue(Generic[T]):
    """Distinct items, each handed to at most one worker at a time; the highest priority
    first, and first come first served within a priority.

    ``add`` marks an item dirty; ``get`` hands out the oldest dirty item of the highest
    priority and marks it processing; ``done`` ends processing. An item added again while
    processing waits (dirty, not queued) until ``done``, so two workers never hold the
    same item. An item added again at a higher priority moves up, behind the items of
    that priority (controller-runtime's rule); a lower one changes nothing: an item keeps
    the highest priority it was added with until it is handed out.
    """

    def __init__(self, *, name: str = "", controller: str = "", clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else RealClock()
        # Order of work: a FIFO per priority (kept in _levels, highest first).
        # Invariant: every queued item is dirty and not processing, and has exactly one
        # live entry, in the FIFO of its priority (_dirty[item]). An item that moved up
        # left an entry behind in a lower FIFO: that entry is stale, counted in _stale,
        # and skipped when reached. All stale entries of an item in one FIFO precede
        # its live one there (an entry goes stale only before the next is appended), so
        # a count per (priority, item) tells them apart exactly.
        self._queues: dict[int, deque[T]] = {DEFAULT_PRIORITY: deque()}
        self._levels: list[int] = [DEFAULT_PRIORITY]
        self._stale: dict[tuple[int, T], int] = {}
        # Live entries over all FIFOs: what len() reports.
        self._queued = 0
        # Items that need processing, with the priority each will be (or is) queued at:
        # queued ones, plus processing ones added again.
        self._dirty: dict[T, int] = {}
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

    def add(self, item: T, priority: int = DEFAULT_PRIORITY) -> None:
        """Mark ``item`` as needing processing at ``priority`` (higher first). Ignored
        once shutting down."""
        if self._shutting_down:
            return
        dirty = self._dirty
        was = dirty.get(item)
        if was is not None:
            if priority > was:
                self._raise(item, was, priority)
            return
        if self._metrics is not None:
            self._metrics.add(item, priority)
        dirty[item] = priority
        if item in self._processing:
            return  # done() queues it: never two workers on one item.
        self._append(item, priority)

    def _raise(self, item: T, was: int, priority: int) -> None:
        """A dirty item added again at a higher priority: it moves up."""
        self._dirty[item] = priority
        if self._metrics is not None:
            self._metrics.reprioritize(was, priority)
        if item in self._processing:
            return  # not queued: done() queues it at the new priority
        key = (was, item)
        self._stale[key] = self._stale.get(key, 0) + 1
        self._queued -= 1  # _append counts the new live entry
        self._append(item, priority)

    def _append(self, item: T, priority: int) -> None:
        fifo = self._queues.get(priority)
        if fifo is None:
            fifo = self._queues[priority] = deque()
            self._levels = sorted(self._queues, reverse=True)
        fifo.append(item)
        self._queued += 1
        if self._getters:
            self._wake_getter()

    def __len__(self) -> int:
        """Items waiting to be handed out (not those processing or delayed)."""
        return self._queued

    async def get(self) -> T:
        """Hand out the next item; the caller must call ``done(item)`` afterwards.

        After shutdown, items still queued are handed out; then ShutDown is raised.
        """
        return (await self.get_with_priority())[0]

    async def get_with_priority(self) -> tuple[T, int]:
        """``get``, with the priority the item was queued at (controller-runtime's
        GetWithPriority: a controller requeues a retry at the priority it came with)."""
        while not self._queued:
            if self._shutting_down:
                raise ShutDown
            await self._wait_for_item()
        item, priority = self._pop()
        if self._metrics is not None:
            self._metrics.get(item, priority)
        self._processing.add(item)
        del self._dirty[item]
        return item, priority

    def _pop(self) -> tuple[T, int]:
        """The oldest live entry of the highest priority; skips stale entries."""
        stale = self._stale
        for priority in self._levels:
            fifo = self._queues[priority]
            while fifo:
                item = fifo.popleft()
                if stale:
                    key = (priority, item)
                    left = stale.get(key)
                    if left is not None:
                        if left == 1:
                            del stale[key]
                        else:
                            stale[key] = left - 1
                        continue
                self._queued -= 1
                return item, priority
        raise AssertionError("no live entry although len() > 0")

    def done(self, item: T) -> None:
        """End processing of ``item``; queue it again if it was added meanwhile."""
        if self._metrics is not None:
            self._metrics.done(item)
        self._processing.discard(item)
        priority = self._dirty.get(item)
        if priority is not None:
            self._append(item, priority)
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
            elif self._queued:
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
