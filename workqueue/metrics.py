"""Prometheus metrics of the queues, named and bucketed as controller-runtime registers them.

The families live at module level in the default registry, so every queue in the
process shares them and tells itself apart by its ``name``/``controller`` labels.
A queue without a name gets the no-op recorders below instead, as client-go does
(noopMetricsProvider): it then never reads the clock for metrics and registers nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from workqueue.clock import Clock

__all__ = [
    "ADDS",
    "DEPTH",
    "LONGEST_RUNNING_PROCESSOR",
    "QUEUE_DURATION",
    "RETRIES",
    "UNFINISHED_WORK",
    "WORK_DURATION",
    "QueueMetrics",
    "RetryMetrics",
    "queue_metrics",
    "retry_metrics",
]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)

_LABELS = ("name", "controller")
# prometheus.ExponentialBuckets(10e-9, 10, 12): 1e-8 s up to 1e3 s.
_BUCKETS = tuple(10e-9 * 10**i for i in range(12))

DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", _LABELS)
ADDS = Counter("workqueue_adds", "Total number of adds handled by workqueue", _LABELS)
QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    _LABELS,
    buckets=_BUCKETS,
)
WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    _LABELS,
    buckets=_BUCKETS,
)
UNFINISHED_WORK = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed "
    "by work_duration. Large values indicate stuck threads. One can deduce the number of "
    "stuck threads by observing the rate at which this increases.",
    _LABELS,
)
LONGEST_RUNNING_PROCESSOR = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    _LABELS,
)
RETRIES = Counter("workqueue_retries", "Total number of retries handled by workqueue", _LABELS)


class QueueMetrics(Protocol[T_contra]):
    """What the queue reports: an item became dirty, was handed out, was finished."""

    def add(self, item: T_contra) -> None: ...

    def get(self, item: T_contra) -> None: ...

    def done(self, item: T_contra) -> None: ...


class RetryMetrics(Protocol):
    def retry(self) -> None: ...


class _NoopMetrics:
    """For unnamed queues: every recorder is an empty method, so nothing is timed or stored."""

    def add(self, item: object) -> None:
        pass

    def get(self, item: object) -> None:
        pass

    def done(self, item: object) -> None:
        pass

    def retry(self) -> None:
        pass


_NOOP = _NoopMetrics()


class _PrometheusQueueMetrics(Generic[T]):
    """client-go's defaultQueueMetrics on the shared families above."""

    __slots__ = (
        "__weakref__",
        "_add_times",
        "_adds",
        "_clock",
        "_depth",
        "_processing_start_times",
        "_queue_duration",
        "_work_duration",
    )

    def __init__(self, name: str, controller: str, clock: Clock) -> None:
        self._clock = clock
        self._depth = DEPTH.labels(name, controller)
        self._adds = ADDS.labels(name, controller)
        self._queue_duration = QUEUE_DURATION.labels(name, controller)
        self._work_duration = WORK_DURATION.labels(name, controller)
        # Only the first add since the last get counts towards queue duration.
        self._add_times: dict[T, float] = {}
        self._processing_start_times: dict[T, float] = {}
        # The two in-flight gauges are computed when scraped rather than refreshed by
        # a 500 ms loop as in client-go: that costs nothing between scrapes, needs no
        # task, and is never stale. The callback holds the recorder weakly so that a
        # dropped queue is not kept alive by the registry; it then reads zero.
        ref = weakref.ref(self)
        UNFINISHED_WORK.labels(name, controller).set_function(
            lambda: m.unfinished_work_seconds() if (m := ref()) is not None else 0.0
        )
        LONGEST_RUNNING_PROCESSOR.labels(name, controller).set_function(
            lambda: m.longest_running_processor_seconds() if (m := ref()) is not None else 0.0
        )

    def add(self, item: T) -> None:
        self._adds.inc()
        self._depth.inc()
        if item not in self._add_times:
            self._add_times[item] = self._clock.now()

    def get(self, item: T) -> None:
        now = self._clock.now()
        self._depth.dec()
        self._processing_start_times[item] = now
        added = self._add_times.pop(item, None)
        if added is not None:
            self._queue_duration.observe(now - added)

    def done(self, item: T) -> None:
        started = self._processing_start_times.pop(item, None)
        if started is not None:
            self._work_duration.observe(self._clock.now() - started)

    def unfinished_work_seconds(self) -> float:
        now = self._clock.now()
        return sum(now - started for started in self._processing_start_times.values())

    def longest_running_processor_seconds(self) -> float:
        if not self._processing_start_times:
            return 0.0
        return self._clock.now() - min(self._processing_start_times.values())


class _PrometheusRetryMetrics:
    __slots__ = ("_retries",)

    def __init__(self, name: str, controller: str) -> None:
        self._retries = RETRIES.labels(name, controller)

    def retry(self) -> None:
        self._retries.inc()


def queue_metrics(name: str, controller: str, clock: Clock) -> QueueMetrics[T]:
    """Recorders for a queue; no-op without a name. ``controller`` defaults to ``name``,
    which is what controller-runtime puts in both labels."""
    if not name:
        return _NOOP
    return _PrometheusQueueMetrics(name, controller or name, clock)


def retry_metrics(name: str, controller: str) -> RetryMetrics:
    if not name:
        return _NOOP
    return _PrometheusRetryMetrics(name, controller or name)
