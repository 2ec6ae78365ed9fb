"""The Controller: its workers, the reconcile results, and the one place that decides what
they mean.

Reconcilers never touch the queue. They return a `Result` or raise one of
the errors in `controller.runtime.errors`; `Controller._handle` alone turns that into
queue operations and metrics, as controller-runtime's reconcileHandler does:

| outcome                      | queue                              | result label  |
|------------------------------|------------------------------------|---------------|
| Result() (done)              | forget                             | success       |
| Result(requeue_after=s)      | forget, add_after(s)               | requeue_after |
| RetryableError, budget left  | add_rate_limited (backoff)         | error         |
| RetryableError, budget spent | add now; next turn calls give_up,  | error         |
|                              | whose Result is handled as above   |               |
| TerminalError                | forget, never requeued             | error         |

Every requeue keeps the priority the key was handed out with (controller-runtime's
reconcileHandler): a key from the initial list stays behind new work on its retries and
its requeue_after too.

Any other exception is a bug: it is logged with its traceback, counted as a
panic, and retried like a system error, so it never kills a worker. A reconcile
that outlives `reconcile_timeout` is cancelled, counted on its own as
controller-runtime counts it (controller_runtime_reconcile_timeouts_total, besides the
error), and retried as a "reconcile_timeout" error: an API request that timed out
inside it is a "timeout", told apart by which deadline fired.

There is no `Result(requeue=True)`: nothing returned it, and controller-runtime
deprecated Result.Requeue in v0.21. A reconciler that wants backoff raises a
RetryableError (which counts against the retry budget); one that wants to look
again later returns requeue_after.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from controller.runtime import logs, metrics
from controller.runtime.errors import ReconcileError, RetryableError, classify
from controller.runtime.kube import JSON
from controller.runtime.settings import QueueSettings, RetryBudget
from workqueue import (
    DEFAULT_PRIORITY,
    RateLimitingQueue,
    ShutDown,
    default_controller_rate_limiter,
)

log = logging.getLogger(__name__)

# controller-runtime's handler.LowPriority: what an event that brings no news is queued at.
LOW_PRIORITY = -100


def event_priority(obj: JSON, old: JSON | None, initial: bool) -> int:
    """The priority of the key an informer event queues: LOW_PRIORITY for an object of the
    informer's initial list or a resync (the same resourceVersion), as controller-runtime's
    handlers give them (WithLowPriorityWhenUnchanged), so that after a restart new work
    (a creation, any change the watch brings) is served before the backlog the list
    queued; DEFAULT_PRIORITY for the rest."""
    if initial or (old is not None and obj["metadata"].get("resourceVersion")
                   == old["metadata"].get("resourceVersion")):
        return LOW_PRIORITY
    return DEFAULT_PRIORITY


@dataclass(frozen=True)
class Result:
    """What a successful reconcile asks of the queue; the default means done."""

    requeue_after: float | None = None


DONE = Result()


def controller_queue(name: str, q: QueueSettings) -> RateLimitingQueue[str]:
    """A controller's queue, as controller-runtime makes one: client-go's default
    controller rate limiter with `q`'s numbers, metrics labelled `name`."""
    return RateLimitingQueue(
        default_controller_rate_limiter(
            base_delay=q.base_delay, max_delay=q.max_delay, qps=q.qps, burst=q.burst,
            jitter=q.jitter,
        ),
        name=name,
        controller=name,
    )


class Reconciler(Protocol):
    async def reconcile(self, key: str) -> Result: ...

    async def give_up(self, key: str, error: RetryableError) -> Result:
        """Called instead of reconcile once a key's retry budget is spent; its Result is
        handled as a reconcile's (with a fresh budget: requeue_after looks again later)."""
        ...


@dataclass
class _Failure:
    first_at: float
    error: RetryableError
    exhausted: bool = False


class Controller:
    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        queue: RateLimitingQueue[str],
        *,
        workers: int = 4,
        budget: RetryBudget | None = None,
        reconcile_timeout: float | None = 60.0,
        clock: Callable[[], float] = time.monotonic,
        on_retry: Callable[[str, RetryableError], None] | None = None,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.queue = queue
        self.workers = workers
        self.budget = budget or RetryBudget()
        self.reconcile_timeout = reconcile_timeout
        self._clock = clock
        self._on_retry = on_retry
        self._failures: dict[str, _Failure] = {}
        self._tasks: list[asyncio.Task[None]] = []
        metrics.MAX_CONCURRENT_RECONCILES.labels(name).set(workers)
        metrics.ACTIVE_WORKERS.labels(name).set(0)
        # Zero samples from the start, as controller-runtime does, so rate() sees the
        # first error instead of only the second.
        for counter in (metrics.RECONCILE_ERRORS, metrics.TERMINAL_RECONCILE_ERRORS,
                        metrics.RECONCILE_PANICS, metrics.RECONCILE_TIMEOUTS,
                        metrics.RETRY_BUDGET_EXHAUSTED):
            counter.labels(name)
        # "requeue" is never counted (see the module docstring); its zero sample keeps
        # controller-runtime's four series for dashboards that sum by result. The children
        # every reconcile updates are looked up once (labels() takes a lock and a dict
        # lookup each call: 1.5-2% of the controller's time in a burst, py-spy).
        self._totals = {result: metrics.RECONCILE_TOTAL.labels(name, result)
                        for result in ("success", "error", "requeue", "requeue_after")}
        self._active = metrics.ACTIVE_WORKERS.labels(name)
        self._reconcile_time = metrics.RECONCILE_TIME.labels(name)

    def enqueue(self, key: str, priority: int = DEFAULT_PRIORITY) -> None:
        self.queue.add(key, priority)

    def enqueue_after(self, key: str, delay: float, priority: int = DEFAULT_PRIORITY) -> None:
        """Queues `key` once `delay` seconds have passed, at once if <= 0 (then a plain add:
        add_after counts every call in workqueue_retries_total, and this is no retry): for
        a mapper that knows from an event when an object next needs a look."""
        if delay > 0:
            self.queue.add_after(key, delay, priority)
        else:
            self.queue.add(key, priority)

    @property
    def running(self) -> bool:
        """True once workers run, i.e. on the leader."""
        return bool(self._tasks)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}")
            for i in range(self.workers)
        ]

    async def stop(self, grace: float) -> None:
        """Takes no new keys, lets in-flight reconciles finish within `grace`, then cancels."""
        try:
            await asyncio.wait_for(self.queue.shutdown_with_drain(), grace)
        except TimeoutError:
            log.warning("reconciles still running after the grace period, cancelling",
                        extra={"controller": self.name})
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []  # `running` no more: what reads it (a gauge) sees a stopped one

    async def _worker(self) -> None:
        while await self.process_next():
            pass

    async def process_next(self) -> bool:
        """One worker turn: waits for a key and reconciles it, with all the queue
        bookkeeping; False once the queue is shut down and empty."""
        try:
            key, priority = await self.queue.get_with_priority()
        except ShutDown:
            return False
        await self._process(key, priority)
        return True

    async def _process(self, key: str, priority: int) -> None:
        with logs.reconcile_fields(controller=self.name, key=key,
                                   reconcile_id=str(uuid.uuid4())):
            start = time.perf_counter()
            active = self._active
            active.inc()
            try:
                outcome = await self._invoke(key)
                label = self._handle(key, outcome, priority)
            finally:
                self.queue.done(key)
                active.dec()
            elapsed = time.perf_counter() - start
            self._reconcile_time.observe(elapsed)
            level = logging.DEBUG if label != "error" else logging.WARNING
            if log.isEnabledFor(level):
                log.log(level, "reconciled", extra={
                    "result": label, "duration": round(elapsed, 6),
                    **({"error": str(outcome)} if isinstance(outcome, ReconcileError) else {}),
                })

    async def _invoke(self, key: str) -> Result | ReconcileError:
        failure = self._failures.get(key)
        deadline = asyncio.timeout(self.reconcile_timeout)  # None: no limit
        try:
            if failure is not None and failure.exhausted:
                return await self.reconciler.give_up(key, failure.error)
            async with deadline:
                return await self.reconciler.reconcile(key)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                # Ours fired (controller-runtime checks its own timeout cause the same
                # way), not the timeout of a request inside the reconcile.
                metrics.RECONCILE_TIMEOUTS.labels(self.name).inc()
                return RetryableError("reconcile_timeout", "the reconcile did not finish "
                                      f"within {self.reconcile_timeout:g}s")
            error = classify(exc)
            if isinstance(error, RetryableError) and error.error_class == "unexpected":
                metrics.RECONCILE_PANICS.labels(self.name).inc()
                log.exception("reconciler raised unexpectedly", extra={"key": key})
            return error

    def _handle(self, key: str, outcome: Result | ReconcileError, priority: int) -> str:
        if isinstance(outcome, Result):
            self._failures.pop(key, None)
            if outcome.requeue_after is not None and outcome.requeue_after > 0:
                self.queue.forget(key)
                self.queue.add_after(key, outcome.requeue_after, priority)
                return self._count("requeue_after")
            self.queue.forget(key)
            return self._count("success")

        metrics.RECONCILE_ERRORS.labels(self.name).inc()
        if isinstance(outcome, RetryableError):
            self._retry(key, outcome, priority)
        else:
            # TerminalError, or a UserError a reconciler failed to turn into a status.
            metrics.TERMINAL_RECONCILE_ERRORS.labels(self.name).inc()
            self._failures.pop(key, None)
            self.queue.forget(key)
        return self._count("error")

    def _retry(self, key: str, error: RetryableError, priority: int) -> None:
        now = self._clock()
        failure = self._failures.get(key)
        if failure is None:
            failure = self._failures[key] = _Failure(now, error)
        failure.error = error
        if not failure.exhausted and self._budget_spent(key, failure, now):
            failure.exhausted = True
            metrics.RETRY_BUDGET_EXHAUSTED.labels(self.name).inc()
            log.warning("retry budget spent, giving up", extra={
                "controller": self.name, "key": key, "retries": self.queue.num_requeues(key),
                "error": str(error),
            })
            self.queue.add(key, priority)
            return
        self.queue.add_rate_limited(key, priority)
        if self._on_retry is not None:
            self._on_retry(key, error)

    def _budget_spent(self, key: str, failure: _Failure, now: float) -> bool:
        b = self.budget
        return (b.max_retries > 0 and self.queue.num_requeues(key) >= b.max_retries) or (
            b.max_age > 0 and now - failure.first_at >= b.max_age
        )

    def _count(self, label: str) -> str:
        self._totals[label].inc()
        return label
