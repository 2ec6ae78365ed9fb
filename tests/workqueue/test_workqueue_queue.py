"""Queue: dedup, one worker per item, re-add while processing, shutdown and drain."""

from __future__ import annotations

import asyncio

import pytest

from workqueue import Queue, ShutDown


async def settle() -> None:
    """Let every ready task run until all are blocked again (no real time passes)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_add_dedups_items_not_yet_handed_out() -> None:
    q = Queue[str]()
    q.add("a")
    q.add("b")
    q.add("a")
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert len(q) == 0


async def test_items_come_out_in_the_order_first_added() -> None:
    q = Queue[str]()
    for item in ["c", "a", "b", "a", "c"]:
        q.add(item)
    assert [await q.get() for _ in range(3)] == ["c", "a", "b"]


async def test_item_being_processed_is_not_handed_to_a_second_worker() -> None:
    q = Queue[str]()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")
    assert len(q) == 0  # dirty again, but not queued while processing
    second = asyncio.create_task(q.get())
    await settle()
    assert not second.done()
    q.done("a")
    assert await asyncio.wait_for(second, 1) == "a"


async def test_re_add_while_processing_is_processed_once_more_after_done() -> None:
    q = Queue[str]()
    q.add("a")
    item = await q.get()
    q.add("a")
    q.add("a")
    q.done(item)
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_done_without_re_add_does_not_queue_again() -> None:
    q = Queue[str]()
    q.add("a")
    q.done(await q.get())
    assert len(q) == 0
    q.add("a")  # and a fresh add after done is queued as new
    assert len(q) == 1


async def test_get_waits_for_an_add() -> None:
    q = Queue[str]()
    getter = asyncio.create_task(q.get())
    await settle()
    assert not getter.done()
    q.add("a")
    assert await asyncio.wait_for(getter, 1) == "a"


async def test_each_add_wakes_one_waiting_worker() -> None:
    q = Queue[str]()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await settle()
    q.add("a")
    q.add("b")
    await settle()
    assert sorted(g.result() for g in getters if g.done()) == ["a", "b"]
    assert sum(not g.done() for g in getters) == 1
    q.shutdown()
    await asyncio.gather(*getters, return_exceptions=True)


async def test_a_getter_cancelled_after_being_woken_passes_the_item_on() -> None:
    q = Queue[str]()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await settle()
    q.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    await settle()
    assert first.cancelled()
    assert await asyncio.wait_for(second, 1) == "a"


async def test_cancelled_getters_do_not_pile_up_on_an_idle_queue() -> None:
    q = Queue[str]()
    for _ in range(100):
        getter = asyncio.create_task(q.get())
        await settle()
        getter.cancel()
        await settle()
    assert len(q._getters) == 0
    q.add("a")  # and the queue still works
    assert await q.get() == "a"


async def test_add_after_shutdown_is_ignored() -> None:
    q = Queue[str]()
    q.shutdown()
    q.add("a")
    assert len(q) == 0
    assert q.shutting_down()
    with pytest.raises(ShutDown):
        await q.get()


async def test_get_after_shutdown_hands_out_what_is_queued_then_raises() -> None:
    q = Queue[str]()
    q.add("a")
    q.add("b")
    q.shutdown()
    assert await q.get() == "a"
    assert await q.get() == "b"
    with pytest.raises(ShutDown):
        await q.get()


async def test_done_after_shutdown_still_queues_an_item_re_added_before_it() -> None:
    q = Queue[str]()
    q.add("a")
    item = await q.get()
    q.add("a")
    q.shutdown()
    q.done(item)
    assert await q.get() == "a"


async def test_shutdown_wakes_every_waiting_worker() -> None:
    q = Queue[str]()
    getters = [asyncio.create_task(q.get()) for _ in range(5)]
    await settle()
    assert not q.shutting_down()
    q.shutdown()
    results = await asyncio.wait_for(asyncio.gather(*getters, return_exceptions=True), 1)
    assert all(isinstance(r, ShutDown) for r in results)


async def test_shutdown_with_drain_waits_until_processing_is_empty() -> None:
    q = Queue[str]()
    q.add("a")
    q.add("b")
    a = await q.get()
    b = await q.get()
    drain = asyncio.create_task(q.shutdown_with_drain())
    await settle()
    assert q.shutting_down()
    assert not drain.done()
    q.done(a)
    await settle()
    assert not drain.done()
    q.done(b)
    await asyncio.wait_for(drain, 1)


async def test_shutdown_with_drain_returns_at_once_when_nothing_is_processing() -> None:
    q = Queue[str]()
    q.add("queued")  # queued is not processing: a drain does not wait for it
    await asyncio.wait_for(q.shutdown_with_drain(), 1)
    assert await q.get() == "queued"


async def test_shutdown_with_drain_returns_when_last_done_re_queues_its_item() -> None:
    q = Queue[str]()
    q.add("a")
    item = await q.get()
    q.add("a")
    drain = asyncio.create_task(q.shutdown_with_drain())
    await settle()
    assert not drain.done()
    q.done(item)
    await asyncio.wait_for(drain, 1)
    assert await q.get() == "a"


async def test_shutdown_cuts_a_drain_short() -> None:
    q = Queue[str]()
    q.add("a")
    await q.get()
    drain = asyncio.create_task(q.shutdown_with_drain())
    await settle()
    assert not drain.done()
    q.shutdown()
    await asyncio.wait_for(drain, 1)


async def test_a_second_drain_does_not_release_the_first() -> None:
    q = Queue[str]()
    q.add("a")
    item = await q.get()
    drains = [asyncio.create_task(q.shutdown_with_drain()) for _ in range(2)]
    await settle()
    assert not any(d.done() for d in drains)
    q.done(item)
    await asyncio.wait_for(asyncio.gather(*drains), 1)


async def test_drain_waits_again_if_a_worker_takes_a_re_queued_item_first() -> None:
    q = Queue[str]()
    q.add("a")
    item = await q.get()
    q.add("a")
    drain = asyncio.create_task(q.shutdown_with_drain())
    await settle()
    q.done(item)  # queues "a" again and empties processing for a moment...
    again = await q.get()  # ...until this worker takes it, before the drain resumes
    await settle()
    assert not drain.done()
    q.done(again)
    await asyncio.wait_for(drain, 1)
