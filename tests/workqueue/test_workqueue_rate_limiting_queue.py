"""RateLimitingQueue = DelayingQueue + a limiter choosing the delay."""

from __future__ import annotations

from workqueue import (
    FakeClock,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    RateLimitingQueue,
)


async def test_add_rate_limited_waits_the_limiters_delay() -> None:
    clock = FakeClock()
    limiter = ItemExponentialFailureRateLimiter[str](1.0, 100.0)
    q = RateLimitingQueue(limiter, clock=clock)
    q.add_rate_limited("a")
    clock.step(0.999)
    assert len(q) == 0
    clock.step(0.001)
    assert await q.get() == "a"
    q.done("a")
    q.add_rate_limited("a")  # second failure: 2 s
    clock.step(1.999)
    assert len(q) == 0
    clock.step(0.001)
    assert len(q) == 1


async def test_forget_and_num_requeues_go_to_the_limiter() -> None:
    limiter = ItemFastSlowRateLimiter[str](0.0, 1.0, 1)
    q = RateLimitingQueue(limiter, clock=FakeClock())
    q.add_rate_limited("a")
    q.add_rate_limited("a")
    assert q.num_requeues("a") == 2 == limiter.num_requeues("a")
    q.forget("a")
    assert q.num_requeues("a") == 0 == limiter.num_requeues("a")


async def test_zero_delay_from_the_limiter_adds_at_once() -> None:
    clock = FakeClock()
    q = RateLimitingQueue(ItemFastSlowRateLimiter[str](0.0, 1.0, 5), clock=clock)
    q.add_rate_limited("a")
    assert len(q) == 1
    assert clock.pending_timers() == 0


async def test_without_a_limiter_it_uses_the_default_controller_one_on_its_clock() -> None:
    clock = FakeClock()
    q = RateLimitingQueue[str](clock=clock)
    q.add_rate_limited("a")
    clock.step(0.004)
    assert len(q) == 0
    clock.step(0.001)
    assert len(q) == 1
    # The overall bucket runs on the queue's clock too: 99 tokens are left...
    for i in range(99):
        q.add_rate_limited(f"k{i}")
    q.add_rate_limited("over-the-burst")
    clock.step(0.005)
    assert len(q) == 100
    clock.step(0.1 - 0.005)
    assert len(q) == 101
