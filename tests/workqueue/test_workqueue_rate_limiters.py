"""Rate limiters: client-go's delays, defaults, overflow safety, caps and jitter."""

from __future__ import annotations

import pytest

from workqueue import (
    BucketRateLimiter,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
)


def test_exponential_doubles_per_failure_up_to_the_cap() -> None:
    # The sequence client-go's own test expects for (1ms, 1s).
    limiter = ItemExponentialFailureRateLimiter[str](0.001, 1.0)
    delays = [limiter.when("one") for _ in range(12)]
    assert delays == pytest.approx(
        [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.0, 1.0]
    )
    assert limiter.num_requeues("one") == 12


def test_exponential_counts_each_item_apart_and_forget_resets_it() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](0.001, 1.0)
    limiter.when("one")
    limiter.when("one")
    assert limiter.when("two") == pytest.approx(0.001)
    assert limiter.num_requeues("one") == 2
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == pytest.approx(0.001)
    limiter.forget("never-seen")  # no error


def test_exponential_defaults_are_client_gos_5ms_to_1000s() -> None:
    limiter = ItemExponentialFailureRateLimiter[str]()
    delays = [limiter.when("k") for _ in range(20)]
    assert delays[0] == pytest.approx(0.005)
    assert delays[17] == pytest.approx(0.005 * 2**17)  # 655.36 s, the last below the cap
    assert delays[18] == 1000.0
    assert delays[19] == 1000.0


def test_exponential_is_overflow_safe_at_huge_failure_counts() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](0.005, 1000.0)
    for _ in range(5000):  # 2.0**1024 and beyond would raise OverflowError
        delay = limiter.when("k")
    assert delay == 1000.0
    assert limiter.num_requeues("k") == 5000


def test_exponential_caps_a_delay_that_overflows_to_infinity() -> None:
    # base * 2**1023 is inf for base > 2: still capped, never inf or nan.
    limiter = ItemExponentialFailureRateLimiter[str](10.0, 1e300)
    delays = [limiter.when("k") for _ in range(1100)]
    assert delays[1023] == 1e300
    assert delays[-1] == 1e300


def test_exponential_jitter_is_off_by_default() -> None:
    limiter = ItemExponentialFailureRateLimiter[int](0.01, 100.0)
    assert [limiter.when(i) for i in range(50)] == [0.01] * 50


def test_exponential_jitter_adds_up_to_that_fraction_of_the_delay() -> None:
    limiter = ItemExponentialFailureRateLimiter[int](0.01, 100.0, jitter=0.5)
    delays = [limiter.when(i) for i in range(2000)]
    assert all(0.01 <= d <= 0.015 for d in delays)
    assert max(delays) - min(delays) > 0.004  # it does spread them
    capped = ItemExponentialFailureRateLimiter[str](1.0, 2.0, jitter=0.5)
    for _ in range(100):
        assert 1.0 <= capped.when("k") <= 3.0


def test_negative_jitter_is_refused() -> None:
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter[str](jitter=-0.1)


def test_fast_slow_switches_after_max_fast_attempts() -> None:
    limiter = ItemFastSlowRateLimiter[str](0.005, 10.0, 3)
    assert [limiter.when("one") for _ in range(5)] == [0.005, 0.005, 0.005, 10.0, 10.0]
    assert limiter.when("two") == 0.005
    assert limiter.num_requeues("one") == 5
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == 0.005


def test_bucket_allows_a_burst_then_paces_at_qps_for_all_items_together() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter[str](qps=2.0, burst=3, clock=clock)
    assert [limiter.when(f"k{i}") for i in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.when("k3") == pytest.approx(0.5)
    assert limiter.when("k4") == pytest.approx(1.0)
    clock.step(1.0)  # repays the two tokens owed; the bucket is empty
    assert limiter.when("k5") == pytest.approx(0.5)
    clock.step(100.0)  # refills, but never beyond the burst
    assert [limiter.when("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.when("k") == pytest.approx(0.5)
    assert limiter.num_requeues("k") == 0
    limiter.forget("k")
    assert limiter.when("k") == pytest.approx(1.0)  # forget does not refill


def test_bucket_refuses_a_rate_or_burst_that_could_never_allow_anything() -> None:
    with pytest.raises(ValueError):
        BucketRateLimiter[str](qps=0)
    with pytest.raises(ValueError):
        BucketRateLimiter[str](burst=0)


def test_bucket_defaults_are_10_qps_burst_100() -> None:
    limiter = BucketRateLimiter[int](clock=FakeClock())
    assert [limiter.when(i) for i in range(100)] == [0.0] * 100
    assert limiter.when(100) == pytest.approx(0.1)
    assert limiter.when(101) == pytest.approx(0.2)


def test_max_of_returns_the_longest_delay_and_asks_every_limiter() -> None:
    fast_slow = ItemFastSlowRateLimiter[str](0.005, 3.0, 3)
    exponential = ItemExponentialFailureRateLimiter[str](0.001, 1.0)
    limiter = MaxOfRateLimiter(fast_slow, exponential)
    assert [limiter.when("k") for _ in range(4)] == pytest.approx([0.005, 0.005, 0.005, 3.0])
    assert exponential.num_requeues("k") == 4
    assert limiter.num_requeues("k") == 4
    limiter.forget("k")
    assert fast_slow.num_requeues("k") == 0
    assert exponential.num_requeues("k") == 0


def test_max_of_nothing_waits_zero() -> None:
    limiter = MaxOfRateLimiter[str]()
    assert limiter.when("k") == 0.0
    assert limiter.num_requeues("k") == 0


def test_with_max_wait_caps_the_delay_and_passes_the_rest_through() -> None:
    inner = ItemExponentialFailureRateLimiter[str](1.0, 1000.0)
    limiter = WithMaxWaitRateLimiter(inner, 5.0)
    assert [limiter.when("k") for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert limiter.num_requeues("k") == 5
    limiter.forget("k")
    assert inner.num_requeues("k") == 0


def test_default_controller_rate_limiter_is_client_gos() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock=clock)
    # Per item: 5 ms doubling...
    assert [limiter.when("k") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    # ...and overall 10 qps with a burst of 100 (3 tokens are gone already).
    assert [limiter.when(i) for i in range(97)] == pytest.approx([0.005] * 97)
    assert limiter.when("next") == pytest.approx(0.1)
    assert limiter.num_requeues("k") == 3
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0
    clock.step(1000)
    for _ in range(18):
        delay = limiter.when("capped")
    assert delay == pytest.approx(0.005 * 2**17)
    assert limiter.when("capped") == 1000.0


def test_default_controller_rate_limiter_passes_its_arguments_on() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(
        base_delay=1.0, max_delay=3.0, qps=1.0, burst=1, jitter=0.0, clock=clock
    )
    assert limiter.when("k") == 1.0
    assert limiter.when("k") == 2.0  # the bucket owes 1 s, the item 2 s
    clock.step(100)
    assert limiter.when("k") == 3.0
