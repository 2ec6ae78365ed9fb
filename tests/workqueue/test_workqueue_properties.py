"""Property tests: random interleavings of add/add_after/add_rate_limited/forget at random
priorities, clock steps, and several workers finishing in random order, all driven by a
FakeClock.

Workers are real tasks blocked in ``get``; a worker holds its item until the script
says ``finish``, so the script decides every interleaving and no real time passes.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from workqueue import FakeClock, ItemExponentialFailureRateLimiter, RateLimitingQueue, ShutDown

KEYS = [f"ns/k{i}" for i in range(6)]
WORKERS = 4

# controller-runtime's two (initial list and resyncs: -100; the rest 0), and one above.
PRIORITIES = [-100, 0, 7]

Op = tuple[str, int | float, int]
key_ops = st.tuples(st.sampled_from(["add", "add_after", "add_rate_limited", "forget"]),
                    st.integers(0, len(KEYS) - 1), st.sampled_from(PRIORITIES))
ops = st.lists(
    st.one_of(
        key_ops,
        st.tuples(st.just("finish"), st.integers(0, WORKERS - 1), st.just(0)),
        st.tuples(st.just("step"), st.sampled_from([0.0, 0.004, 0.5, 1.0, 2.5]), st.just(0)),
    ),
    max_size=60,
)


@dataclass
class Harness:
    """A named queue on a fake clock, WORKERS worker tasks, and what they observed."""

    clock: FakeClock = field(default_factory=FakeClock)
    q: RateLimitingQueue[str] = field(init=False)
    depth_before: float = field(init=False, default=0.0)
    events: itertools.count[int] = field(default_factory=itertools.count)
    last_add: dict[str, int] = field(default_factory=dict)
    last_get: dict[str, int] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)
    # The highest priority of the plain adds of each key since it was last handed out.
    added_at: dict[str, int] = field(default_factory=dict)
    holding: list[str | None] = field(default_factory=lambda: [None] * WORKERS)
    release: list[asyncio.Event] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Every example shares one series (a name per example would make each scrape
        # slower than the last), so depth is measured from where this one starts.
        self.depth_before = self.depth()
        self.q = RateLimitingQueue(
            ItemExponentialFailureRateLimiter(0.25, 2.0), name="property", clock=self.clock
        )
        self.release = [asyncio.Event() for _ in range(WORKERS)]
        self.tasks = [asyncio.create_task(self.work(w)) for w in range(WORKERS)]

    async def work(self, w: int) -> None:
        while True:
            try:
                item, priority = await self.q.get_with_priority()
            except ShutDown:
                return
            if item in self.in_flight:
                self.violations.append(f"{item} handed to two workers at once")
            if priority < self.added_at.pop(item, priority):
                self.violations.append(f"{item} handed out below the priority it was added at")
            # Invariant: nothing left queued outranks what was handed out.
            waiting = [p for k, p in self.q._dirty.items() if k not in self.q._processing]
            if waiting and max(waiting) > priority:
                self.violations.append(f"{item} at {priority} before one at {max(waiting)}")
            self.in_flight.add(item)
            self.last_get[item] = next(self.events)
            self.holding[w] = item
            await self.release[w].wait()
            self.release[w].clear()
            self.holding[w] = None
            self.in_flight.discard(item)
            self.q.done(item)

    async def settle(self) -> None:
        for _ in range(4 * WORKERS):
            await asyncio.sleep(0)

    def depth(self) -> float:
        """This example's share of the workqueue_depth gauge (every priority's series),
        read from the registry."""
        depth = sum(
            s.value for family in REGISTRY.collect() if family.name == "workqueue_depth"
            for s in family.samples
            if s.labels["name"] == "property" and s.labels["controller"] == "property")
        return depth - self.depth_before

    async def apply(self, op: Op) -> None:
        kind, arg, priority = op
        if kind == "finish":
            self.release[int(arg)].set()
        elif kind == "step":
            self.clock.step(float(arg))
        else:
            key = KEYS[int(arg)]
            if kind == "add":
                self.q.add(key, priority)
                self.added_at[key] = max(priority, self.added_at.get(key, priority))
            elif kind == "add_after":
                self.q.add_after(key, 1.0, priority)
            elif kind == "add_rate_limited":
                self.q.add_rate_limited(key, priority)
            else:
                self.q.forget(key)
            if kind != "forget":
                self.last_add[key] = next(self.events)
        await self.settle()
        assert len(self.q) >= 0
        assert self.depth() >= 0, "depth gauge went negative"

    async def finish_everything(self) -> None:
        """Advance past every delay and let workers finish until nothing is left."""
        for _ in range(100):
            self.clock.step(10.0)
            for release in self.release:
                release.set()
            await self.settle()
            if not self.in_flight and len(self.q) == 0 and self.clock.pending_timers() == 0:
                return
        raise AssertionError("the queue never went idle")

    async def stop(self) -> None:
        self.q.shutdown()
        for release in self.release:
            release.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), 1)


@settings(max_examples=150, deadline=None)
@given(script=ops)
async def test_no_key_is_processed_concurrently_and_every_add_is_processed(
    script: list[Op],
) -> None:
    h = Harness()
    try:
        for op in script:
            await h.apply(op)
        await h.finish_everything()
        assert h.violations == []
        for key, added in h.last_add.items():
            assert h.last_get.get(key, -1) > added, f"{key} not processed after its last add"
        assert h.depth() == 0
    finally:
        await h.stop()


@settings(max_examples=150, deadline=None)
@given(script=ops, finish_order=st.permutations(range(WORKERS)))
async def test_shutdown_with_drain_returns_only_when_processing_is_empty(
    script: list[Op], finish_order: list[int]
) -> None:
    h = Harness()
    try:
        for op in script:
            await h.apply(op)
        drain = asyncio.create_task(h.q.shutdown_with_drain())
        await h.settle()
        # Workers keep taking queued items after shutdown; finish them one at a
        # time and check the drain is still waiting while any is held.
        for _ in range(len(KEYS) + 1):
            for w in finish_order:
                assert drain.done() == (not h.in_flight), (
                    f"drain done={drain.done()} with {sorted(h.in_flight)} in flight"
                )
                if h.holding[w] is not None:
                    h.release[w].set()
                    await h.settle()
        assert drain.done()
        assert not h.in_flight
        await drain
        assert h.violations == []
    finally:
        await h.stop()
