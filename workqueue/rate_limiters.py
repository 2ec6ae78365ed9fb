"""Rate limiters deciding how long an item waits before it is retried (client-go's).

Delays are float seconds. Per-item limiters count failures until ``forget``; callers
must forget an item once it succeeds (or is given up), or its count grows forever.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from workqueue.clock import Clock, RealClock

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "WithMaxWaitRateLimiter",
    "default_controller_rate_limiter",
]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)

# 2.0 ** exp overflows a float from here on.
_FLOAT_MAX_EXP = sys.float_info.max_exp


class RateLimiter(Protocol[T_contra]):
    def when(self, item: T_contra) -> float:
        """Seconds ``item`` should wait now; counts as one more failure of it."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stop tracking ``item``, whether it succeeded or was given up on."""
        ...

    def num_requeues(self, item: T_contra) -> int:
        """How many failures of ``item`` are being tracked."""
        ...


class ItemExponentialFailureRateLimiter(Generic[T]):
    """``base_delay * 2**failures``, capped at ``max_delay``.

    ``jitter`` (off by default) adds a random fraction of the delay: the result is
    uniform in ``[d, d * (1 + jitter)]`` where d is the capped delay, so it may exceed
    ``max_delay`` by that fraction. It spreads out items that failed together.
    """

    def __init__(
        self, base_delay: float = 0.005, max_delay: float = 1000.0, jitter: float = 0.0
    ) -> None:
        if jitter < 0:
            raise ValueError(f"jitter must be >= 0, not {jitter}")
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._jitter = jitter
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        # Past the float range the delay is past any max_delay anyway: never compute it.
        if exp >= _FLOAT_MAX_EXP:
            delay = self._max_delay
        else:
            delay = min(self._base_delay * 2.0**exp, self._max_delay)
        if self._jitter:
            delay += delay * self._jitter * random.random()
        return delay

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)


class ItemFastSlowRateLimiter(Generic[T]):
    """``fast_delay`` for an item's first ``max_fast_attempts`` failures, then ``slow_delay``."""

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        self._fast_delay = fast_delay
        self._slow_delay = slow_delay
        self._max_fast_attempts = max_fast_attempts
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        failures = self._failures.get(item, 0) + 1
        self._failures[item] = failures
        return self._fast_delay if failures <= self._max_fast_attempts else self._slow_delay

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter(Generic[T]):
    """A token bucket over all items together (golang.org/x/time/rate semantics).

    It starts full with ``burst`` tokens and refills at ``qps`` a second. Each ``when``
    takes a token, going into debt if none is left, and returns how long until that
    debt is repaid. It tracks no item, so ``forget``/``num_requeues`` do nothing.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1, not qps={qps} burst={burst}")
        self._qps = qps
        self._burst = burst
        self._clock: Clock = clock if clock is not None else RealClock()
        self._tokens = float(burst)
        self._last = self._clock.now()

    def when(self, item: T) -> float:
        now = self._clock.now()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps) - 1
        self._last = now
        return -self._tokens / self._qps if self._tokens < 0 else 0.0

    def forget(self, item: T) -> None:
        pass

    def num_requeues(self, item: T) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """The worst case of several limiters: every one is asked (each counts the failure)."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        self._limiters = limiters

    def when(self, item: T) -> float:
        return max((limiter.when(item) for limiter in self._limiters), default=0.0)

    def forget(self, item: T) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max((limiter.num_requeues(item) for limiter in self._limiters), default=0)


class WithMaxWaitRateLimiter(Generic[T]):
    """Another limiter's delay, but never more than ``max_wait``."""

    def __init__(self, limiter: RateLimiter[T], max_wait: float) -> None:
        self._limiter = limiter
        self._max_wait = max_wait

    def when(self, item: T) -> float:
        return min(self._limiter.when(item), self._max_wait)

    def forget(self, item: T) -> None:
        self._limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._limiter.num_requeues(item)


def default_controller_rate_limiter(
    base_delay: float = 0.005,
    max_delay: float = 1000.0,
    qps: float = 10.0,
    burst: int = 100,
    jitter: float = 0.0,
    *,
    clock: Clock | None = None,
) -> RateLimiter[Hashable]:
    """client-go's DefaultControllerRateLimiter: per-item exponential backoff (5 ms
    doubling up to 1000 s), and an overall 10 qps bucket of 100, whichever is longer."""
    return MaxOfRateLimiter[Hashable](
        ItemExponentialFailureRateLimiter(base_delay, max_delay, jitter),
        BucketRateLimiter(qps, burst, clock=clock),
    )
