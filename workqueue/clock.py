"""Time sources for the queues: the real monotonic clock and a fake one for tests.

A clock offers two things: the current time, and a one-shot timer that calls back
at an absolute time. The delaying queue needs nothing more, and a callback (rather
than an awaitable) lets the fake clock fire timers synchronously inside ``step``,
so tests advance time without sleeping or yielding to the event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "FakeClock", "RealClock", "Timer"]


class Timer(Protocol):
    """A pending callback that can be called off. ``asyncio.TimerHandle`` is one."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic seconds plus a one-shot timer at an absolute time of the same clock."""

    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer: ...


class RealClock:
    """``time.monotonic`` with timers on the running asyncio loop."""

    def now(self) -> float:
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        # call_later on our own clock's difference, so this stays right even with a
        # loop (uvloop, a test loop) whose time() is not time.monotonic().
        loop = asyncio.get_running_loop()
        return loop.call_later(when - time.monotonic(), callback)


class _FakeTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when told; due timers fire inside ``step``/``set_time``.

    Timers fire in time order (ties in the order they were set), each seeing
    ``now()`` already at the new time, like client-go's fake clock.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        # (when, seq, timer, callback); seq breaks ties so timers never get compared.
        self._timers: list[tuple[float, int, _FakeTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer()
        heapq.heappush(self._timers, (when, next(self._seq), timer, callback))
        return timer

    def step(self, seconds: float) -> None:
        self.set_time(self._now + seconds)

    def set_time(self, now: float) -> None:
        if now < self._now:
            raise ValueError(f"a monotonic clock cannot go back from {self._now} to {now}")
        self._now = now
        # A callback may set a new timer that is already due: the loop picks it up.
        while self._timers and self._timers[0][0] <= now:
            _, _, timer, callback = heapq.heappop(self._timers)
            if not timer.cancelled:
                callback()

    def pending_timers(self) -> int:
        """How many timers are set and not cancelled: lets tests see a queue's timers."""
        return sum(not timer.cancelled for _, _, timer, _ in self._timers)
