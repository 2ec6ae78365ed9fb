"""Prometheus metrics of the queues, named and bucketed as controller-runtime registers them.

Queues count in plain Python numbers, and one collector in the default registry turns
them into the metric families when scraped. prometheus-client's own metric objects
take a lock per update: with them a named queue did ~300k add/get/done cycles/s
against ~2.5M unnamed; with plain numbers ~900k (BENCHMARKS.md). Plain numbers are
safe because only the event loop's thread writes them; a scrape, possibly from
another thread, only reads them, copying each container in one C-level step.

Queues with the same ``name``/``controller`` labels share one series, like children
of a prometheus vector. A queue without a name gets no recorder (None) and records
nothing, the part of client-go's noopMetricsProvider that matters: it reads no clock
for metrics, registers nothing, and pays one ``is not None`` test per operation.
"""

from __future__ import annotations

import bisect
import itertools
import weakref
from collections.abc import Hashable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client import REGISTRY
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from workqueue.clock import Clock

__all__ = ["QueueMetrics", "RetryMetrics", "queue_metrics", "retry_metrics"]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)

_LABELS = ("name", "controller")
# prometheus.ExponentialBuckets(10e-9, 10, 12): 1e-8 s up to 1e3 s.
_BUCKETS = tuple(10e-9 * 10**i for i in range(12))
# Their "le" labels; for these values repr() is what prometheus-client writes.
_LE = (*(repr(bound) for bound in _BUCKETS), "+Inf")


class QueueMetrics(Protocol[T_contra]):
    """What the queue reports: an item became dirty at a priority, moved to a higher one,
    was handed out, was finished."""

    def add(self, item: T_contra, priority: int) -> None: ...

    def reprioritize(self, was: int, priority: int) -> None: ...

    def get(self, item: T_contra, priority: int) -> None: ...

    def done(self, item: T_contra) -> None: ...


class RetryMetrics(Protocol):
    def retry(self) -> None: ...


class _Histogram:
    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        # counts[i]: observations in (_BUCKETS[i-1], _BUCKETS[i]]; the last is +Inf.
        self.counts = [0] * (len(_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(_BUCKETS, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        counts = list(self.counts)  # one snapshot, so +Inf equals the sum of buckets
        return list(zip(_LE, itertools.accumulate(counts), strict=True))


# controller-runtime's cap on the priority label's values (maxRecommendedUniquePriorities):
# past it, depth is reported under one placeholder value.
_MAX_PRIORITIES = 25
_PRIORITY_OVERFLOW = "exceeded_cardinality_limit"


class _Series:
    """The numbers behind one name/controller label set, kept for the process's life
    so counters never go back when a queue goes away."""

    __slots__ = ("adds", "depth", "queue_duration", "queues", "retries", "work_duration")

    def __init__(self) -> None:
        # By priority label, as controller-runtime's depth of a priority queue: "0" is
        # there from the start, others once seen.
        self.depth: dict[str, int] = {"0": 0}
        self.adds = 0
        self.retries = 0
        self.queue_duration = _Histogram()
        self.work_duration = _Histogram()
        # Live queues, for the in-flight gauges. Weak: the registry must not keep a
        # dropped queue alive.
        self.queues: list[weakref.ref[_QueueRecorder[Any]]] = []


_SERIES: dict[tuple[str, str], _Series] = {}


def _series(name: str, controller: str) -> _Series:
    return _SERIES.setdefault((name, controller), _Series())


class _QueueRecorder(Generic[T]):
    """client-go's defaultQueueMetrics, counting into the queue's series."""

    __slots__ = ("__weakref__", "_add_times", "_clock", "_processing_start_times", "_series")

    def __init__(self, series: _Series, clock: Clock) -> None:
        self._series = series
        self._clock = clock
        # Only the first add since the last get counts towards queue duration.
        self._add_times: dict[T, float] = {}
        self._processing_start_times: dict[T, float] = {}
        series.queues = [ref for ref in series.queues if ref() is not None]
        series.queues.append(weakref.ref(self))

    def add(self, item: T, priority: int) -> None:
        series = self._series
        series.adds += 1
        label = _priority_label(series, priority)
        series.depth[label] += 1
        if item not in self._add_times:
            self._add_times[item] = self._clock.now()

    def reprioritize(self, was: int, priority: int) -> None:
        series = self._series
        series.depth[_priority_label(series, was)] -= 1
        series.depth[_priority_label(series, priority)] += 1

    def get(self, item: T, priority: int) -> None:
        now = self._clock.now()
        series = self._series
        series.depth[_priority_label(series, priority)] -= 1
        self._processing_start_times[item] = now
        added = self._add_times.pop(item, None)
        if added is not None:
            self._series.queue_duration.observe(now - added)

    def done(self, item: T) -> None:
        started = self._processing_start_times.pop(item, None)
        if started is not None:
            self._series.work_duration.observe(self._clock.now() - started)

    def processing_ages(self) -> list[float]:
        # list() copies in one step with no Python code in between, so a scrape from
        # another thread never sees the dict change under it.
        starts = list(self._processing_start_times.values())
        now = self._clock.now()
        return [now - started for started in starts]


def _priority_label(series: _Series, priority: int) -> str:
    """The depth series of `priority`, made on first use; past _MAX_PRIORITIES distinct
    values, the placeholder's (all of whose depth is counted there from then on)."""
    label = str(priority) if priority else "0"
    depth = series.depth
    if label in depth:
        return label
    if _PRIORITY_OVERFLOW in depth or len(depth) >= _MAX_PRIORITIES:
        depth.setdefault(_PRIORITY_OVERFLOW, 0)
        return _PRIORITY_OVERFLOW
    depth[label] = 0
    return label


class _RetryRecorder:
    __slots__ = ("_series",)

    def __init__(self, series: _Series) -> None:
        self._series = series

    def retry(self) -> None:
        self._series.retries += 1


class _Collector:
    """Builds the workqueue_* families from every series when the registry is scraped.

    The two in-flight gauges are computed here from the processing start times, rather
    than refreshed by a 500 ms loop as in client-go: nothing to run between scrapes,
    and never stale.
    """

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue by workqueue "
                                  "and priority", labels=(*_LABELS, "priority"))
        adds = CounterMetricFamily(
            "workqueue_adds", "Total number of adds handled by workqueue", labels=_LABELS
        )
        queue_duration = HistogramMetricFamily(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels=_LABELS,
        )
        work_duration = HistogramMetricFamily(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            labels=_LABELS,
        )
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration. Large values indicate stuck threads. One can deduce "
            "the number of stuck threads by observing the rate at which this increases.",
            labels=_LABELS,
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels=_LABELS,
        )
        retries = CounterMetricFamily(
            "workqueue_retries", "Total number of retries handled by workqueue", labels=_LABELS
        )
        for labels, series in list(_SERIES.items()):
            ages = [
                age
                for ref in list(series.queues)
                if (queue := ref()) is not None
                for age in queue.processing_ages()
            ]
            label_values = list(labels)
            for priority, count in list(series.depth.items()):
                depth.add_metric([*label_values, priority], count)
            adds.add_metric(label_values, series.adds)
            queue_duration.add_metric(
                label_values, series.queue_duration.cumulative(), series.queue_duration.sum
            )
            work_duration.add_metric(
                label_values, series.work_duration.cumulative(), series.work_duration.sum
            )
            unfinished.add_metric(label_values, sum(ages))
            longest.add_metric(label_values, max(ages, default=0.0))
            retries.add_metric(label_values, series.retries)
        yield from (depth, adds, queue_duration, work_duration, unfinished, longest, retries)


REGISTRY.register(_Collector())


def queue_metrics(name: str, controller: str, clock: Clock) -> QueueMetrics[T] | None:
    """Recorders for a queue; None (record nothing) without a name. ``controller``
    defaults to ``name``, which is what controller-runtime puts in both labels."""
    if not name:
        return None
    return _QueueRecorder(_series(name, controller or name), clock)


def retry_metrics(name: str, controller: str) -> RetryMetrics | None:
    if not name:
        return None
    return _RetryRecorder(_series(name, controller or name))
