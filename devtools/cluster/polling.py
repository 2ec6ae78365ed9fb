"""Asking the API server (or anything else) again: until a condition holds, and past
the errors that go away by themselves."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from controller.runtime.kube import ApiError


async def wait_until(predicate: Callable[[], Any] | Callable[[], Awaitable[Any]],
                     timeout: float, interval: float = 0.2, *,
                     alive: Callable[[], None] | None = None) -> Any:
    """Calls `predicate` (awaiting it if it returns a coroutine) every `interval` seconds
    until it returns something truthy, and returns that; returns None once `timeout`
    seconds have passed without. `alive`, if given, is called before each call of
    `predicate` and raises to end the wait at once: waiting for a child process to serve,
    the owner's check_alive (devtools.cluster.processes), so a child that died is
    reported then, with its log, not at the timeout.

    Invariants: `predicate` is called at least once, even with `timeout` <= 0, and never
    after the deadline has been seen passed; the wait is bounded by `timeout` plus one
    call and one `interval`.
    """
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(interval)


def transient(exc: BaseException, *, not_found: bool = False) -> bool:
    """An error that a restarting or loaded API server gives and that goes away by itself.

    503 "made before all known HTTP paths have been installed" and 429 are what a
    fresh kube-apiserver answers for a moment, 5xx and dropped connections what a
    killed or overloaded one gives; 404 counts only where the caller knows the object
    must exist (`not_found`). Used by the soak and the benchmarks, which must get
    through such errors; the controller classifies errors its own way
    (controller.runtime.errors).
    """
    if isinstance(exc, ApiError):
        return exc.status >= 500 or exc.status == 429 or (not_found and exc.status == 404)
    return isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError))
