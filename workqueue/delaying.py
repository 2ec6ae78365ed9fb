"""A work queue that can add an item later: client-go's delaying queue.

Waiting items sit in a min-heap by ready time under ONE clock timer, always set for
the earliest of them: no task or timer per item, and no polling. The timer is set on
the first ``add_after`` that needs it (so, for the real clock, inside a running loop)
and cancelled on shutdown, together with everything still waiting.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import TypeVar

from workqueue.clock import Clock, Timer
from workqueue.metrics import retry_metrics
from workqueue.queue import DEFAULT_PRIORITY, Queue

__all__ = ["DelayingQueue"]

T = TypeVar("T", bound=Hashable)

# (ready_at, seq, item): seq is unique, so two entries never get to compare items.
_Entry = tuple[float, int, T]


class DelayingQueue(Queue[T]):
    def __init__(self, *, name: str = "", controller: str = "", clock: Clock | None = None) -> None:
        super().__init__(name=name, controller=controller, clock=clock)
        self._waiting: list[_Entry[T]] = []
        # The live heap entry of each waiting item. Moving an item earlier pushes a
        # new entry (heapq has no decrease-key); the old one stays in the heap, stale,
        # and is skipped when popped because it is no longer the item's live entry.
        self._live: dict[T, _Entry[T]] = {}
        # The priority each waiting item is added at when due: the highest it was given.
        self._priority: dict[T, int] = {}
        self._seq = itertools.count()
        self._timer: Timer | None = None
        self._timer_at = 0.0
        self._retries = retry_metrics(name, controller)

    def add_after(self, item: T, delay: float, priority: int = DEFAULT_PRIORITY) -> None:
        """Add ``item`` at ``priority`` once ``delay`` seconds have passed; at once if
        ``delay <= 0``.

        An item already waiting keeps the earlier of its two ready times and the higher
        of its two priorities (controller-runtime's priority queue). Counts as a retry in
        ``workqueue_retries_total``, as every AddAfter does in client-go.
        """
        if self._shutting_down:
            return
        if self._retries is not None:
            self._retries.retry()
        if delay <= 0:
            self.add(item, priority)
            return
        ready_at = self._clock.now() + delay
        live = self._live.get(item)
        if live is not None:
            if priority > self._priority[item]:
                self._priority[item] = priority
            if live[0] <= ready_at:
                return
        else:
            self._priority[item] = priority
        entry = (ready_at, next(self._seq), item)
        self._live[item] = entry
        heapq.heappush(self._waiting, entry)
        if self._timer is None or ready_at < self._timer_at:
            self._set_timer(ready_at)

    def _set_timer(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._clock.call_at(when, self._fire)
        self._timer_at = when

    def _fire(self) -> None:
        self._timer = None
        now = self._clock.now()
        waiting, live = self._waiting, self._live
        while waiting:
            entry = waiting[0]
            item = entry[2]
            if live.get(item) is not entry:
                heapq.heappop(waiting)  # stale: dropped now so no timer is set for it
            elif entry[0] <= now:
                heapq.heappop(waiting)
                del live[item]
                self.add(item, self._priority.pop(item))
            else:
                self._set_timer(entry[0])
                return

    def _begin_shutdown(self) -> None:
        super()._begin_shutdown()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # Nothing waiting can be added any more (client-go drops them too).
        self._waiting.clear()
        self._live.clear()
        self._priority.clear()
