"""Virtual time for asyncio unit tests: no test waits for real seconds.

`run(coro)` runs `coro` on a fresh event loop whose clock (`loop.time()`) is
virtual: whenever no callback is ready and no I/O is pending, the clock jumps by
exactly the time to the earliest timer. So `asyncio.sleep`, `asyncio.timeout`,
`wait_for` and `call_later` all fire at once, in order, at exact times, however
loaded the machine is. A fresh loop per call, so nothing scheduled on
pytest-asyncio's session loop ever sees time jump.

Invariants: I/O is still polled on every turn (without blocking); time never
moves while anything is ready; a loop with nothing scheduled at all raises
instead of waiting forever (with fakes, that is always a bug in the test).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], *, start: float = 1000.0) -> T:
    loop = asyncio.new_event_loop()
    _install(loop, start)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _install(loop: asyncio.AbstractEventLoop, start: float) -> None:
    now = [start]
    selector: selectors.BaseSelector = loop._selector  # type: ignore[attr-defined]
    poll = selector.select

    def select(timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = poll(0)
        if events:
            return events
        if timeout is None:
            raise RuntimeError("virtual time: nothing is scheduled or ready, the test would "
                               "wait forever")
        now[0] += timeout
        return events

    selector.select = select  # type: ignore[method-assign]
    loop.time = lambda: now[0]  # type: ignore[method-assign]
