"""Calls the soak itself makes to an API server that keeps being killed."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

from controller.runtime.kube import ApiError, Kube
from devtools.cluster.polling import transient, wait_until

T = TypeVar("T")


async def persist(
    call: Callable[[], Awaitable[T]],
    *,
    deadline: float,
    not_found: bool = False,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """`call()` until it works, through restarts, with capped backoff; gives up at
    `deadline` (time.monotonic) by raising the last error."""
    delay = 0.05
    while True:
        try:
            return await call()
        except Exception as exc:
            if not transient(exc, not_found=not_found) or time.monotonic() > deadline:
                raise
            if on_retry is not None:
                on_retry(exc)
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, 2.0)


async def get_text(session: aiohttp.ClientSession, url: str, *, timeout: float,
                   **kwargs: Any) -> str | None:
    """The body of a GET of `url` that answered 200 within `timeout` seconds; None for
    any other status, a timeout or a connection error (a server being killed or started
    answers so, and the soak asks again later). `kwargs` go to `session.get`."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout),
                               **kwargs) as resp:
            if resp.status != 200:
                return None
            return await resp.text()
    except (TimeoutError, aiohttp.ClientError, OSError):
        return None


async def default_service_account(kube: Kube, namespace: str, timeout: float = 60.0) -> None:
    """Waits for the `default` ServiceAccount kube-controller-manager makes in a new
    namespace (Tekton's pods need it); TimeoutError after `timeout` seconds."""
    async def exists() -> bool:
        try:
            await kube.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
        except ApiError:
            return False
        return True
    if not await wait_until(exists, timeout, 0.1):
        raise TimeoutError(f"no default ServiceAccount in {namespace} after {timeout:.0f}s")
