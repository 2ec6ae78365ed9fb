"""A delaying queue whose retries are paced by a rate limiter (client-go's)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from workqueue.clock import Clock
from workqueue.delaying import DelayingQueue
from workqueue.queue import DEFAULT_PRIORITY
from workqueue.rate_limiters import RateLimiter, default_controller_rate_limiter

__all__ = ["RateLimitingQueue"]

T = TypeVar("T", bound=Hashable)


class RateLimitingQueue(DelayingQueue[T]):
    """Rate limiting = delaying + a limiter that picks the delay.

    Call ``forget(item)`` once an item succeeds, or its failure count (and so its
    backoff) keeps growing. ``forget`` does not replace ``done``.
    """

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str = "",
        controller: str = "",
        clock: Clock | None = None,
    ) -> None:
        super().__init__(name=name, controller=controller, clock=clock)
        self._rate_limiter: RateLimiter[T] = (
            rate_limiter
            if rate_limiter is not None
            else default_controller_rate_limiter(clock=self._clock)
        )

    def add_rate_limited(self, item: T, priority: int = DEFAULT_PRIORITY) -> None:
        """Add ``item`` at ``priority`` after the delay the limiter picks (a retry, in the
        metrics)."""
        self.add_after(item, self._rate_limiter.when(item), priority)

    def forget(self, item: T) -> None:
        self._rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._rate_limiter.num_requeues(item)
