"""Optimistic concurrency for one write: client-go's `retry.RetryOnConflict`, with the
re-read built in.

A write carries the resourceVersion it was worked out from, so the API server refuses
it with 409 Conflict when someone wrote in between. The answer is never to force the
write, but to read the object again and work the change out anew from what is there
now: `write` is handed the fresh object (None once it is gone) and decides again.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random

from controller.runtime.errors import is_conflict
from controller.runtime.kube import JSON, Kube, Resource

T = TypeVar("T")

# client-go's retry.DefaultRetry takes 5 steps 10 ms apart (with jitter); ours are
# 0-50 ms apart, so writers racing on one object do not retry in step.
CONFLICT_TRIES = 5
CONFLICT_WAIT = 0.05


async def retry_on_conflict(
    kube: Kube, resource: Resource, obj: JSON, write: Callable[[JSON | None], Awaitable[T]]
) -> T:
    """`write(obj)`; after each 409 Conflict, `write` again with the object read anew
    (None when it is gone), up to CONFLICT_TRIES tries. Any other error, and the last
    conflict, is raised as it came."""
    meta = obj["metadata"]
    try:
        # The first try outside tenacity: nearly every write meets no conflict, and
        # setting up its retry loop was 4.5% of the controller's time in a burst of
        # finishes (py-spy, issue 34).
        return await write(obj)
    except Exception as exc:
        if not is_conflict(exc):
            raise
    await asyncio.sleep(random.uniform(0, CONFLICT_WAIT))  # as tenacity spaces the rest
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(is_conflict), stop=stop_after_attempt(CONFLICT_TRIES - 1),
        wait=wait_random(0, CONFLICT_WAIT), reraise=True,
    ):
        with attempt:
            current = await kube.get_or_none(resource, meta.get("namespace"), meta["name"])
            return await write(current)
    raise AssertionError("unreachable: tenacity reraises the last error")
