"""An asyncio rate-limited, deduplicating work queue with client-go ``util/workqueue`` semantics.

- ``Queue``: dedups adds, never hands one item to two workers, supports drain; serves
  higher priorities first (controller-runtime's priority queue), FIFO within one.
- ``DelayingQueue``: adds ``add_after`` under one timer per queue.
- ``RateLimitingQueue``: adds ``add_rate_limited``/``forget``/``num_requeues``.
- Rate limiters as in client-go, float seconds instead of durations.
- Prometheus metrics named as controller-runtime's, for queues given a name.
"""

from workqueue.clock import Clock, FakeClock, RealClock, Timer
from workqueue.delaying import DelayingQueue
from workqueue.queue import DEFAULT_PRIORITY, Queue, ShutDown
from workqueue.rate_limiters import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
)
from workqueue.rate_limiting import RateLimitingQueue

__all__ = [
    "DEFAULT_PRIORITY",
    "BucketRateLimiter",
    "Clock",
    "DelayingQueue",
    "FakeClock",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "MaxOfRateLimiter",
    "Queue",
    "RateLimiter",
    "RateLimitingQueue",
    "RealClock",
    "ShutDown",
    "Timer",
    "WithMaxWaitRateLimiter",
    "default_controller_rate_limiter",
]
