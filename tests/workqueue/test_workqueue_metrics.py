"""Metrics, read back from the default prometheus registry."""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest
from prometheus_client import REGISTRY

from workqueue import (
    DelayingQueue,
    FakeClock,
    ItemFastSlowRateLimiter,
    Queue,
    RateLimitingQueue,
)

_names = itertools.count()


def unique(prefix: str) -> str:
    """Every test gets its own label values: the families are process-wide."""
    return f"{prefix}-{next(_names)}"


def value(metric: str, name: str, controller: str | None = None, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(
        metric, {"name": name, "controller": controller or name, **labels}
    )


def workqueue_samples() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for family in REGISTRY.collect()
        if family.name.startswith("workqueue_")
        for s in family.samples
    }


async def test_adds_depth_and_queue_duration() -> None:
    clock = FakeClock()
    name = unique("adds")
    q = Queue[str](name=name, clock=clock)
    q.add("a")
    q.add("a")  # deduplicated: not an add
    q.add("b")
    assert value("workqueue_adds_total", name) == 2
    assert value("workqueue_depth", name, priority="0") == 2
    clock.step(0.25)
    await q.get()
    assert value("workqueue_depth", name, priority="0") == 1
    assert value("workqueue_queue_duration_seconds_count", name) == 1
    assert value("workqueue_queue_duration_seconds_sum", name) == pytest.approx(0.25)
    assert value("workqueue_queue_duration_seconds_bucket", name, le="0.1") == 0
    assert value("workqueue_queue_duration_seconds_bucket", name, le="1.0") == 1


async def test_depth_counts_an_item_re_added_while_processing_as_client_go_does() -> None:
    name = unique("depth")
    q = Queue[str](name=name, clock=FakeClock())
    q.add("a")
    item = await q.get()
    q.add("a")
    assert len(q) == 0
    assert value("workqueue_depth", name, priority="0") == 1
    q.done(item)
    await q.get()
    assert value("workqueue_depth", name, priority="0") == 0
    assert value("workqueue_adds_total", name) == 2


async def test_work_duration() -> None:
    clock = FakeClock()
    name = unique("work")
    q = Queue[str](name=name, clock=clock)
    q.add("a")
    item = await q.get()
    clock.step(2.0)
    q.done(item)
    assert value("workqueue_work_duration_seconds_count", name) == 1
    assert value("workqueue_work_duration_seconds_sum", name) == pytest.approx(2.0)
    q.add("b")
    item = await q.get()
    clock.step(1.0)  # on a bucket's bound: counted in it ("le")
    q.done(item)
    assert value("workqueue_work_duration_seconds_bucket", name, le="0.1") == 0
    assert value("workqueue_work_duration_seconds_bucket", name, le="1.0") == 1
    assert value("workqueue_work_duration_seconds_bucket", name, le="10.0") == 2
    assert value("workqueue_work_duration_seconds_bucket", name, le="+Inf") == 2


async def test_unfinished_work_and_longest_running_are_computed_when_scraped() -> None:
    clock = FakeClock()
    name = unique("unfinished")
    q = Queue[str](name=name, clock=clock)
    assert value("workqueue_unfinished_work_seconds", name) == 0
    assert value("workqueue_longest_running_processor_seconds", name) == 0
    q.add("a")
    q.add("b")
    a = await q.get()
    clock.step(3.0)
    await q.get()
    clock.step(1.0)
    assert value("workqueue_unfinished_work_seconds", name) == pytest.approx(4.0 + 1.0)
    assert value("workqueue_longest_running_processor_seconds", name) == pytest.approx(4.0)
    q.done(a)
    assert value("workqueue_unfinished_work_seconds", name) == pytest.approx(1.0)
    assert value("workqueue_longest_running_processor_seconds", name) == pytest.approx(1.0)


async def test_retries_count_every_delayed_or_rate_limited_add() -> None:
    clock = FakeClock()
    name = unique("retries")
    q = RateLimitingQueue(ItemFastSlowRateLimiter[str](0.0, 1.0, 1), name=name, clock=clock)
    q.add("plain")  # not a retry
    q.add_rate_limited("a")
    q.add_rate_limited("a")
    q.add_after("b", 5.0)
    assert value("workqueue_retries_total", name) == 3


async def test_controller_label_is_the_name_unless_given() -> None:
    name = unique("q")
    q = DelayingQueue[str](name=name, controller="buildrun", clock=FakeClock())
    q.add("a")
    q.add_after("a", 1.0)
    assert value("workqueue_adds_total", name, "buildrun") == 1
    assert value("workqueue_retries_total", name, "buildrun") == 1
    assert value("workqueue_adds_total", name) is None


def test_histogram_buckets_are_controller_runtimes() -> None:
    name = unique("buckets")
    Queue[str](name=name)
    for metric in ("workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"):
        bounds = sorted(
            float(labels["le"])
            for sample_name, labels_items in workqueue_samples()
            if sample_name == metric + "_bucket" and (labels := dict(labels_items))["name"] == name
        )
        expected = [10e-9 * 10**i for i in range(12)] + [float("inf")]
        assert bounds == pytest.approx(expected)
        assert bounds[0] == pytest.approx(1e-8)
        assert bounds[-2] == pytest.approx(1e3)


async def test_an_unnamed_queue_records_and_registers_nothing() -> None:
    class NoMetricsClock(FakeClock):
        """Metrics are the only reason a queue without delays reads the clock."""

        def now(self) -> float:
            raise AssertionError("an unnamed queue read the clock")

    before = workqueue_samples()
    q = RateLimitingQueue(ItemFastSlowRateLimiter[str](0.0, 1.0, 5), clock=NoMetricsClock())
    q.add("a")
    item = await q.get()
    q.done(item)
    q.add_rate_limited("b")  # a retry, for a named queue
    q.forget("b")
    assert workqueue_samples() == before  # no label set, not even name=""


async def test_queues_with_the_same_labels_share_one_series() -> None:
    clock = FakeClock()
    name = unique("shared")
    first, second = Queue[str](name=name, clock=clock), Queue[str](name=name, clock=clock)
    first.add("a")
    second.add("a")
    await first.get()
    await second.get()
    clock.step(1.0)
    assert value("workqueue_adds_total", name) == 2
    assert value("workqueue_unfinished_work_seconds", name) == pytest.approx(2.0)


async def test_a_dropped_queue_is_not_kept_alive_and_its_counts_stay() -> None:
    clock = FakeClock()
    name = unique("dropped")
    q = Queue[str](name=name, clock=clock)
    q.add("a")
    await q.get()
    clock.step(1.0)
    assert value("workqueue_longest_running_processor_seconds", name) == pytest.approx(1.0)
    dropped = weakref.ref(q)
    del q
    gc.collect()
    assert dropped() is None
    assert value("workqueue_adds_total", name) == 1  # counters never go back
    assert value("workqueue_longest_running_processor_seconds", name) == 0
