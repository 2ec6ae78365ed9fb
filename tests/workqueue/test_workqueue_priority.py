"""Priorities: ports of controller-runtime v0.24's priorityqueue_test.go (the cases that
apply to a queue keeping client-go's delaying semantics), plus the invariants the
stale-entry bookkeeping must keep. The property tests run every operation at random
priorities too (test_workqueue_properties.py)."""

from __future__ import annotations

import asyncio
import itertools
import random

from prometheus_client import REGISTRY

from workqueue import DelayingQueue, FakeClock, Queue, RateLimitingQueue, ShutDown
from workqueue.rate_limiters import ItemFastSlowRateLimiter

_names = itertools.count()


def named(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def depth(name: str) -> dict[str, float]:
    """workqueue_depth by priority label, for one queue's series."""
    return {s.labels["priority"]: s.value for family in REGISTRY.collect()
            if family.name == "workqueue_depth" for s in family.samples
            if s.labels["name"] == name}


async def test_returns_items_in_order_within_a_priority() -> None:
    q = Queue[str]()
    q.add("foo")
    q.add("bar")
    assert await q.get_with_priority() == ("foo", 0)
    assert await q.get_with_priority() == ("bar", 0)


async def test_a_higher_priority_is_served_first() -> None:
    q = Queue[str]()
    q.add("listed-1", -100)
    q.add("listed-2", -100)
    q.add("new")
    q.add("urgent", 5)
    assert [(await q.get_with_priority()) for _ in range(4)] == [
        ("urgent", 5), ("new", 0), ("listed-1", -100), ("listed-2", -100)]


async def test_retains_the_highest_priority() -> None:
    name = named("highest")
    q = Queue[str](name=name, clock=FakeClock())
    q.add("foo", 1)
    q.add("foo", 2)
    assert await q.get_with_priority() == ("foo", 2)
    assert len(q) == 0
    assert depth(name) == {"0": 0, "1": 0, "2": 0}
    assert REGISTRY.get_sample_value("workqueue_adds_total",
                                     {"name": name, "controller": name}) == 1


async def test_will_not_decrease_the_priority() -> None:
    name = named("no-decrease")
    q = Queue[str](name=name, clock=FakeClock())
    q.add("foo", 2)
    q.add("foo", 1)
    assert await q.get_with_priority() == ("foo", 2)
    assert len(q) == 0
    assert depth(name) == {"0": 0, "2": 0}


async def test_gets_pushed_to_the_front_if_the_priority_increases() -> None:
    name = named("front")
    q = Queue[str](name=name, clock=FakeClock())
    q.add("foo")
    q.add("bar")
    q.add("baz")
    q.add("baz", 1)
    assert await q.get_with_priority() == ("baz", 1)
    assert len(q) == 2
    assert depth(name) == {"0": 2, "1": 0}
    # The stale entry "baz" left at priority 0 is skipped, not handed out again.
    assert [await q.get() for _ in range(2)] == ["foo", "bar"]
    assert len(q) == 0


async def test_follows_fifo_order_in_the_new_priority_when_an_item_moves_up() -> None:
    q = Queue[str]()
    q.add("foo", 0)
    q.add("bar", 1)
    q.add("foo", 1)
    assert len(q) == 2
    assert await q.get_with_priority() == ("bar", 1)
    assert await q.get_with_priority() == ("foo", 1)
    assert len(q) == 0


async def test_an_item_moved_up_then_added_low_again_is_served_once_per_add() -> None:
    """The stale entry counts: the old low entry is skipped, the new one is live."""
    q = Queue[str]()
    q.add("a", -100)
    q.add("b", -100)
    q.add("a", 0)  # a's first low entry goes stale
    item = await q.get()
    assert item == "a"
    q.done(item)
    q.add("a", -100)  # a new low entry, behind b
    assert len(q) == 2
    assert [await q.get() for _ in range(2)] == ["b", "a"]
    assert len(q) == 0


async def test_a_processing_item_added_higher_is_requeued_at_that_priority() -> None:
    q = Queue[str]()
    q.add("a", -100)
    item, priority = await q.get_with_priority()
    assert priority == -100
    q.add("a", -100)
    q.add("a", 3)  # moves up while waiting for done()
    q.add("b")
    assert len(q) == 1
    q.done(item)
    assert await q.get_with_priority() == ("a", 3)
    assert await q.get_with_priority() == ("b", 0)


async def test_doesnt_include_non_ready_items_in_len() -> None:
    name = named("len")
    q = DelayingQueue[str](name=name, clock=FakeClock())
    q.add_after("foo", 60)
    q.add("baz")
    q.add_after("bar", 60)
    q.add("bal")
    assert len(q) == 2
    assert depth(name) == {"0": 2}


async def test_a_delayed_item_is_added_at_the_highest_priority_it_was_given() -> None:
    """controller-runtime keeps max(priority) and min(ready time) of a waiting item; so does
    add_after here. (An item both waiting and added now is queued now and added again
    when its delay ends, as client-go's delaying queue does: controller-runtime's merges
    the two.)"""
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.add_after("foo", 10, -100)
    q.add_after("foo", 5, -100)  # earlier
    q.add_after("foo", 20, 4)  # later, but higher: the priority is kept
    q.add_after("bar", 1)
    clock.step(5)
    assert [await q.get_with_priority() for _ in range(2)] == [("foo", 4), ("bar", 0)]
    assert clock.pending_timers() == 0  # the stale 10 s entry was dropped, no timer left


async def test_updates_metrics_for_an_item_delayed_then_added_higher_at_once() -> None:
    name = named("after-then-now")
    clock = FakeClock()
    q = DelayingQueue[str](name=name, clock=clock)
    q.add_after("foo", 3600, 0)
    assert len(q) == 0
    assert depth(name) == {"0": 0}
    q.add("foo", 1)
    assert len(q) == 1
    assert depth(name) == {"0": 0, "1": 1}
    assert await q.get_with_priority() == ("foo", 1)
    assert all(v == 0 for v in depth(name).values())


async def test_rate_limited_adds_keep_their_priority() -> None:
    clock = FakeClock()
    q = RateLimitingQueue(ItemFastSlowRateLimiter[str](1.0, 10.0, 5), clock=clock)
    q.add_rate_limited("retry-low", -100)
    q.add_rate_limited("retry", 0)
    clock.step(1.0)
    assert [await q.get_with_priority() for _ in range(2)] == [("retry", 0),
                                                              ("retry-low", -100)]


async def test_get_after_shutdown_with_only_delayed_items_raises() -> None:
    """controller-runtime issue 3239: a shut-down queue's Get must not hang."""
    q = DelayingQueue[str](clock=FakeClock())
    q.add("baz", -100)
    q.shutdown()
    q.add_after("foo", 1, 5)
    assert await q.get_with_priority() == ("baz", -100)  # what was queued is handed out
    for _ in range(2):
        try:
            await asyncio.wait_for(q.get_with_priority(), 1)
        except ShutDown:
            continue
        raise AssertionError("get did not raise ShutDown")


async def test_returns_many_items_at_random_priorities() -> None:
    """The port of "returns many items": 20 rounds of 1,000 keys at random priorities
    (and some delays), drained by 100 workers; each round every key comes out once, and
    never before a waiting key of a higher priority."""
    rng = random.Random(3239)
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    for _ in range(20):
        want: dict[str, int] = {}
        for i in range(1000):
            rn = rng.randrange(100)
            if rn < 10:
                q.add_after(f"foo{i}", rn / 1000, 0)
                want[f"foo{i}"] = max(want.get(f"foo{i}", 0), 0)
            else:
                q.add(f"foo{i}", rn)
                want[f"foo{i}"] = rn
        clock.step(0.1)
        got: list[tuple[str, int]] = []

        async def worker(got: list[tuple[str, int]]) -> None:
            for _ in range(10):
                item, priority = await q.get_with_priority()
                got.append((item, priority))
                await asyncio.sleep(0)
                q.done(item)

        await asyncio.wait_for(asyncio.gather(*(worker(got) for _ in range(100))), 10)
        assert sorted(item for item, _ in got) == sorted(want)
        assert len(q) == 0
        priorities = [p for _, p in got]
        assert priorities == sorted(priorities, reverse=True)
