"""The result handler, row by row (see controller/runtime/controller.py's table), on a
real workqueue with a FakeClock and a scripted reconciler; each row checks the queue
and the controller-runtime metrics. Loop time is virtual (reconcile timeouts)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from controller.runtime import logs
from controller.runtime.controller import DONE, LOW_PRIORITY, Controller, Result, event_priority
from controller.runtime.errors import RetryableError, TerminalError, UserError
from controller.settings import RetryBudget
from tests.harness import metric
from tests.virtualtime import run
from workqueue import FakeClock, ItemExponentialFailureRateLimiter, RateLimitingQueue

KEY = "ns/br"
BASE_DELAY = 1.0  # the limiter's first backoff: 1 s, then 2 s, 4 s, ...

Step = Result | BaseException | Callable[[], Any]


class Scripted:
    """Answers each reconcile with the next step: a Result, an exception to raise, or a
    coroutine function to await (its result returned)."""

    def __init__(self, *steps: Step) -> None:
        self.steps = deque(steps)
        self.calls: list[str] = []
        self.gave_up: list[tuple[str, RetryableError]] = []
        self.after_giving_up: Result = DONE
        self.cancelled = 0

    async def reconcile(self, key: str) -> Result:
        self.calls.append(key)
        step = self.steps.popleft()
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, Result):
            return step
        try:
            result: Result = await step()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return result

    async def give_up(self, key: str, error: RetryableError) -> Result:
        self.gave_up.append((key, error))
        return self.after_giving_up


class Rig:
    """A Controller of its own name (so its metrics start at zero) on a fake clock."""

    def __init__(self, reconciler: Scripted, *, budget: RetryBudget | None = None,
                 reconcile_timeout: float | None = 60.0) -> None:
        self.name = f"c{uuid.uuid4().hex[:8]}"
        self.clock = FakeClock()
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(
            ItemExponentialFailureRateLimiter(BASE_DELAY, 100.0),
            name=self.name, controller=self.name, clock=self.clock,
        )
        self.retried: list[str] = []
        self.reconciler = reconciler
        self.controller = Controller(
            self.name, reconciler, self.queue, workers=1, budget=budget,
            reconcile_timeout=reconcile_timeout, clock=self.clock.now,
            on_retry=lambda key, error: self.retried.append(error.error_class),
        )

    async def turn(self) -> None:
        """Takes the key that is due and runs one worker turn on it."""
        assert len(self.queue) == 1, "exactly one key should be due"
        assert await self.controller.process_next()

    def due_after(self, seconds: float) -> bool:
        """True if the key is queued exactly `seconds` from now (not a moment sooner)."""
        if len(self.queue) or not self.clock.pending_timers():
            return False
        self.clock.step(seconds - 0.001)
        if len(self.queue):
            return False
        self.clock.step(0.001)
        return len(self.queue) == 1

    def results(self) -> dict[str, float]:
        return {r: metric("controller_runtime_reconcile_total", controller=self.name, result=r)
                for r in ("success", "error", "requeue", "requeue_after")
                if metric("controller_runtime_reconcile_total", controller=self.name, result=r)}

    def count(self, name: str) -> float:
        return metric(name, controller=self.name)


def test_success_forgets_the_key() -> None:
    async def main() -> None:
        rig = Rig(Scripted(RetryableError("conflict", "lost a race"), DONE))
        rig.queue.add(KEY)
        await rig.turn()
        assert rig.queue.num_requeues(KEY) == 1
        assert rig.due_after(BASE_DELAY)
        await rig.turn()
        assert rig.queue.num_requeues(KEY) == 0  # forgotten: the next failure starts at 1 s
        assert len(rig.queue) == 0 and rig.clock.pending_timers() == 0
        assert rig.results() == {"error": 1, "success": 1}

    run(main())


def test_requeue_after_forgets_the_backoff_and_adds_after_exactly_that_long() -> None:
    async def main() -> None:
        rig = Rig(Scripted(RetryableError("timeout", "slow"), Result(requeue_after=30.0)))
        rig.queue.add(KEY)
        await rig.turn()
        rig.clock.step(BASE_DELAY)
        await rig.turn()
        assert rig.queue.num_requeues(KEY) == 0
        assert rig.due_after(30.0)
        assert rig.results() == {"error": 1, "requeue_after": 1}
        assert metric("workqueue_retries_total", name=rig.name, controller=rig.name) == 2

    run(main())


def test_a_retryable_error_with_budget_left_backs_off() -> None:
    async def main() -> None:
        rig = Rig(Scripted(RetryableError("throttled", "429"), RetryableError("throttled", "429")))
        rig.queue.add(KEY)
        await rig.turn()
        assert rig.due_after(BASE_DELAY)
        await rig.turn()
        assert rig.due_after(2 * BASE_DELAY)  # exponential
        assert rig.queue.num_requeues(KEY) == 2
        assert rig.retried == ["throttled", "throttled"]
        assert rig.results() == {"error": 2}
        assert rig.count("controller_runtime_reconcile_errors_total") == 2
        assert rig.count("controller_runtime_reconcile_panics_total") == 0

    run(main())


def test_a_spent_budget_queues_the_key_now_and_the_next_turn_gives_up() -> None:
    async def main() -> None:
        last = RetryableError("server_error", "etcd down")
        rig = Rig(Scripted(RetryableError("server_error", "etcd down"), last),
                  budget=RetryBudget(max_retries=1, max_age=0))
        rig.queue.add(KEY)
        await rig.turn()  # first failure: retried with backoff
        assert rig.due_after(BASE_DELAY)
        await rig.turn()  # second failure: one retry already spent
        assert len(rig.queue) == 1 and rig.clock.pending_timers() == 0  # at once, no backoff
        assert rig.count("controller_retry_budget_exhausted_total") == 1
        assert rig.retried == ["server_error"]  # the spent one is not a retry
        await rig.turn()
        assert rig.reconciler.calls == [KEY, KEY]  # the third turn did not reconcile
        assert rig.reconciler.gave_up == [(KEY, last)]
        assert rig.queue.num_requeues(KEY) == 0 and len(rig.queue) == 0
        assert rig.results() == {"error": 2, "success": 1}

    run(main())


def test_giving_up_with_a_requeue_after_looks_again_then_with_a_fresh_budget() -> None:
    async def main() -> None:
        rig = Rig(Scripted(RetryableError("server_error", "etcd down"),
                           RetryableError("server_error", "etcd down"), DONE),
                  budget=RetryBudget(max_retries=1, max_age=0))
        rig.reconciler.after_giving_up = Result(requeue_after=500.0)
        rig.queue.add(KEY)
        await rig.turn()
        assert rig.due_after(BASE_DELAY)
        await rig.turn()  # the budget spent
        await rig.turn()  # gives up, and asks for another look
        assert len(rig.reconciler.gave_up) == 1
        assert rig.due_after(500.0)
        await rig.turn()  # a reconcile again, not a second give_up
        assert rig.reconciler.calls == [KEY, KEY, KEY]
        assert len(rig.reconciler.gave_up) == 1
        assert rig.results() == {"error": 2, "requeue_after": 1, "success": 1}

    run(main())


def test_the_budget_also_runs_out_by_age() -> None:
    async def main() -> None:
        rig = Rig(Scripted(RetryableError("timeout", "a"), RetryableError("timeout", "b")),
                  budget=RetryBudget(max_retries=0, max_age=10.0))
        rig.queue.add(KEY)
        await rig.turn()
        rig.clock.step(10.0)  # fires the 1 s backoff too
        await rig.turn()
        assert rig.count("controller_retry_budget_exhausted_total") == 1
        await rig.turn()
        assert [error.message for _, error in rig.reconciler.gave_up] == ["b"]

    run(main())


def test_a_terminal_error_drops_the_key() -> None:
    async def main() -> None:
        rig = Rig(Scripted(RetryableError("conflict", "x"), TerminalError("422 invalid")))
        rig.queue.add(KEY)
        await rig.turn()
        rig.clock.step(BASE_DELAY)
        await rig.turn()
        assert len(rig.queue) == 0 and rig.clock.pending_timers() == 0
        assert rig.queue.num_requeues(KEY) == 0
        assert rig.count("controller_runtime_terminal_reconcile_errors_total") == 1
        assert rig.count("controller_runtime_reconcile_errors_total") == 2
        assert rig.results() == {"error": 2}

    run(main())


def test_a_user_error_that_escapes_a_reconcile_is_terminal_too() -> None:
    async def main() -> None:
        rig = Rig(Scripted(UserError("BuildNotFound", "no Build")))
        rig.queue.add(KEY)
        await rig.turn()
        assert len(rig.queue) == 0 and rig.clock.pending_timers() == 0
        assert rig.count("controller_runtime_terminal_reconcile_errors_total") == 1

    run(main())


def test_an_unexpected_exception_is_a_panic_retried_with_backoff() -> None:
    async def main() -> None:
        rig = Rig(Scripted(KeyError("status"), DONE))
        rig.queue.add(KEY)
        await rig.turn()
        assert rig.count("controller_runtime_reconcile_panics_total") == 1
        assert rig.retried == ["unexpected"]
        assert rig.due_after(BASE_DELAY)
        await rig.turn()
        assert rig.results() == {"error": 1, "success": 1}
        assert metric("controller_runtime_active_workers", controller=rig.name) == 0

    run(main())


def test_a_reconcile_over_its_timeout_is_cancelled_counted_and_retried() -> None:
    """As controller-runtime: counted in reconcile_timeouts_total besides the error, and
    retried as a "reconcile_timeout", not as an API request's "timeout"."""
    async def hang() -> Result:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def main() -> None:
        rig = Rig(Scripted(hang), reconcile_timeout=5.0)
        assert rig.count("controller_runtime_reconcile_timeouts_total") == 0  # a zero sample
        rig.queue.add(KEY)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await rig.turn()
        assert loop.time() - started == 5.0
        assert rig.reconciler.cancelled == 1
        assert rig.retried == ["reconcile_timeout"]
        assert rig.count("controller_runtime_reconcile_timeouts_total") == 1
        assert rig.count("controller_runtime_reconcile_errors_total") == 1
        assert rig.results() == {"error": 1}
        assert rig.count("controller_runtime_reconcile_panics_total") == 0
        assert rig.due_after(BASE_DELAY)
        assert metric("controller_runtime_reconcile_time_seconds_count",
                      controller=rig.name) == 1

    run(main())


def test_a_request_timing_out_inside_a_reconcile_is_no_reconcile_timeout() -> None:
    """A TimeoutError raised by the reconcile itself (an API request's own deadline)
    before the reconcile timeout fires stays an API "timeout", whether or not a
    reconcile timeout is set."""
    async def request_times_out() -> Result:
        await asyncio.sleep(1.0)
        raise TimeoutError()

    async def main() -> None:
        for limit in (5.0, None):
            rig = Rig(Scripted(request_times_out), reconcile_timeout=limit)
            rig.queue.add(KEY)
            await rig.turn()
            assert rig.retried == ["timeout"]
            assert rig.count("controller_runtime_reconcile_timeouts_total") == 0
            assert rig.count("controller_runtime_reconcile_errors_total") == 1
            assert rig.reconciler.cancelled == 0

    run(main())


def test_workers_stop_on_shutdown_and_a_stop_cancels_what_outlives_the_grace() -> None:
    async def hang() -> Result:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def main() -> None:
        rig = Rig(Scripted(hang), reconcile_timeout=None)
        rig.controller.start()
        rig.queue.add(KEY)
        await asyncio.sleep(0)
        assert rig.controller.running
        await rig.controller.stop(grace=2.0)
        assert rig.reconciler.cancelled == 1
        assert metric("controller_runtime_active_workers", controller=rig.name) == 0

    run(main())


def test_every_line_a_reconcile_writes_carries_its_reconcile_id() -> None:
    """As controller-runtime's reconcile logger: the reconciler's own lines, and the
    handler's, name the controller, the key and one id per reconcile; lines outside a
    reconcile carry none, and a field the line sets itself wins."""
    lines: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record)

    handler = Capture(logging.DEBUG)
    handler.addFilter(logs.ReconcileFields())
    domain = logging.getLogger("tests.a_reconciler")

    async def says_hello() -> Result:
        domain.warning("hello")
        domain.warning("about another", extra={"key": "ns/other"})
        return DONE

    async def main() -> None:
        rig = Rig(Scripted(says_hello, RetryableError("timeout", "slow")))
        for name in ("tests.a_reconciler", "controller.runtime.controller"):
            logging.getLogger(name).addHandler(handler)
        try:
            rig.controller.enqueue(KEY)
            await rig.turn()
            rig.controller.enqueue(KEY)
            await rig.turn()  # fails: the handler's "reconciled" line is a warning
            domain.warning("outside")
        finally:
            for name in ("tests.a_reconciler", "controller.runtime.controller"):
                logging.getLogger(name).removeHandler(handler)
        hello, other, failed, outside = lines
        assert (hello.controller, hello.key) == (rig.name, KEY)  # type: ignore[attr-defined]
        assert other.key == "ns/other"  # type: ignore[attr-defined]
        assert other.reconcile_id == hello.reconcile_id  # type: ignore[attr-defined]
        assert failed.getMessage() == "reconciled" and failed.key == KEY  # type: ignore[attr-defined]
        assert failed.reconcile_id != hello.reconcile_id  # type: ignore[attr-defined]
        assert not hasattr(outside, "reconcile_id")

    run(main())


def test_every_requeue_keeps_the_priority_the_key_came_with() -> None:
    """controller-runtime's reconcileHandler: a key from the initial list (low priority)
    retried or requeued stays behind new work; one queued by news stays ahead."""
    async def main() -> None:
        rig = Rig(Scripted(RetryableError("conflict", "lost a race"),
                           Result(requeue_after=5.0), DONE, DONE, DONE))
        rig.controller.enqueue(KEY, LOW_PRIORITY)
        await rig.turn()  # error: rate-limited, at its priority
        assert rig.due_after(BASE_DELAY)
        rig.controller.enqueue("ns/new")
        assert [await rig.queue.get_with_priority() for _ in range(2)] == [
            ("ns/new", 0), (KEY, LOW_PRIORITY)]
        rig.queue.done("ns/new")
        rig.queue.done(KEY)
        rig.queue.add(KEY, LOW_PRIORITY)
        await rig.turn()  # requeue_after: at its priority
        assert rig.due_after(5.0)
        assert await rig.queue.get_with_priority() == (KEY, LOW_PRIORITY)

    run(main())


def test_events_of_the_initial_list_and_resyncs_are_low_priority() -> None:
    obj = {"metadata": {"name": "a", "resourceVersion": "7"}}
    changed = {"metadata": {"name": "a", "resourceVersion": "8"}}
    assert event_priority(obj, None, True) == LOW_PRIORITY  # listed at start
    assert event_priority(obj, obj, False) == LOW_PRIORITY  # resync
    assert event_priority(obj, None, False) == 0  # created while we watch
    assert event_priority(changed, obj, False) == 0  # changed
