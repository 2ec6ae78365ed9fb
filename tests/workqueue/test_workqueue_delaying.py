"""DelayingQueue: add_after order, earlier ready time wins, one timer, shutdown."""

from __future__ import annotations

import asyncio
import random

import pytest

from workqueue import DelayingQueue, FakeClock, ShutDown


async def take_all(q: DelayingQueue[str]) -> list[str]:
    """Get and finish every item queued right now, in order."""
    out = []
    while len(q):
        item = await q.get()
        q.done(item)
        out.append(item)
    return out


async def test_items_are_added_when_their_delay_has_passed() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.add_after("a", 1.0)
    assert len(q) == 0
    clock.step(0.999)
    assert len(q) == 0
    clock.step(0.001)
    assert await take_all(q) == ["a"]


async def test_items_come_out_in_ready_time_order_not_add_order() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.add_after("c", 3.0)
    q.add_after("a", 1.0)
    q.add_after("b", 2.0)
    clock.step(1.5)
    assert await take_all(q) == ["a"]
    clock.step(10)
    assert await take_all(q) == ["b", "c"]


async def test_zero_or_negative_delay_adds_at_once() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.add_after("a", 0)
    q.add_after("b", -5)
    assert await take_all(q) == ["a", "b"]
    assert clock.pending_timers() == 0


async def test_re_adding_a_waiting_item_keeps_the_earlier_ready_time() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.add_after("later-ignored", 1.0)
    q.add_after("later-ignored", 5.0)
    q.add_after("earlier-wins", 5.0)
    q.add_after("earlier-wins", 2.0)
    clock.step(1.0)
    assert await take_all(q) == ["later-ignored"]
    clock.step(1.0)
    assert await take_all(q) == ["earlier-wins"]
    assert clock.pending_timers() == 0  # none kept for the superseded 5.0 entry
    # The superseded entries (5.0) must not add either item a second time.
    clock.step(10)
    assert len(q) == 0


async def test_delayed_add_of_an_item_being_processed_waits_for_done() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.add("a")
    item = await q.get()
    q.add_after("a", 1.0)
    clock.step(1.0)
    assert len(q) == 0
    q.done(item)
    assert await take_all(q) == ["a"]


async def test_one_timer_serves_every_waiting_item() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    assert clock.pending_timers() == 0  # started lazily
    rng = random.Random(7)
    for i in range(500):
        q.add_after(f"k{i}", rng.uniform(0.001, 10.0))
        assert clock.pending_timers() == 1
    clock.step(5.0)
    assert clock.pending_timers() == 1
    assert 0 < len(q) < 500
    clock.step(5.0)
    assert len(q) == 500
    assert clock.pending_timers() == 0


async def test_real_clock_uses_no_task_per_item() -> None:
    q = DelayingQueue[str]()
    tasks_before = asyncio.all_tasks()
    for i in range(50):
        q.add_after(f"k{i}", 0.001 + i * 0.0001)
    assert asyncio.all_tasks() == tasks_before
    got = {await asyncio.wait_for(q.get(), 1) for _ in range(50)}  # tiny real wait
    assert got == {f"k{i}" for i in range(50)}
    assert q._timer is None


async def test_add_after_needs_no_timer_for_a_later_ready_time() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.add_after("a", 1.0)
    timer = q._timer
    q.add_after("b", 2.0)
    assert q._timer is timer
    q.add_after("c", 0.5)
    assert q._timer is not timer
    assert clock.pending_timers() == 1


async def test_shutdown_cancels_the_timer_and_drops_waiting_items() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.add_after("a", 1.0)
    q.shutdown()
    assert clock.pending_timers() == 0
    clock.step(2.0)
    assert len(q) == 0
    with pytest.raises(ShutDown):
        await q.get()


async def test_add_after_once_shut_down_is_ignored() -> None:
    clock = FakeClock()
    q = DelayingQueue[str](clock=clock)
    q.shutdown()
    q.add_after("a", 1.0)
    q.add_after("b", 0)
    assert clock.pending_timers() == 0
    assert len(q) == 0


def test_fake_clock_refuses_to_go_back() -> None:
    clock = FakeClock(start=10.0)
    with pytest.raises(ValueError):
        clock.set_time(9.0)
