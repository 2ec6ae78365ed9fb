"""Waiting for a condition that other tasks or processes make true, by asking again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def wait_until(predicate: Callable[[], Any] | Callable[[], Awaitable[Any]],
                     timeout: float, interval: float = 0.2) -> Any:
    """Calls `predicate` (awaiting it if it returns a coroutine) every `interval` seconds
    until it returns something truthy, and returns that; returns None once `timeout`
    seconds have passed without.

    Invariants: `predicate` is called at least once, even with `timeout` <= 0, and never
    after the deadline has been seen passed; the wait is bounded by `timeout` plus one
    call and one `interval`.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(interval)
