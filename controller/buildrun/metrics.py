"""BuildRun metrics SREs chart, after Shipwright's. No BuildRun names as labels.

Shipwright's own build_* series live in `controller.shipwright.metrics`; where one of ours
measures the same moment, one call here records both."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controller.buildrun import reasons
from controller.runtime.kube import JSON
from controller.runtime.store import Store
from controller.shipwright import metrics as shipwright_metrics

# Builds take seconds to hours.
_DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)

COMPLETED = Counter(
    "buildrun_completed_total",
    "BuildRuns that reached a terminal status, by reason",
    ["reason", "namespace"],
)
RETRIES = Counter(
    "buildrun_retries_total",
    "System errors that sent a BuildRun back to the queue with backoff, by error class",
    ["error_class"],
)
RETRY_EXHAUSTED = Counter(
    "buildrun_retry_exhausted_total",
    "BuildRuns failed with ReconcilerRetriesExhausted after their retry budget was spent",
)
ESTABLISH = Histogram(
    "buildrun_establish_duration_seconds",
    "From BuildRun creation to its TaskRun being created",
    buckets=_DURATION_BUCKETS,
)
COMPLETION = Histogram(
    "buildrun_completion_duration_seconds",
    "From BuildRun creation to its completionTime",
    ["reason"],
    buckets=_DURATION_BUCKETS,
)
RAMPUP = Histogram(
    "buildrun_rampup_duration_seconds",
    "From TaskRun creation to the TaskRun reporting Running",
    buckets=_DURATION_BUCKETS,
)
DELETED = Counter(
    "buildrun_deleted_total",
    "BuildRuns deleted by the controller when their retention TTL ran out",
)
# Issue 43 part 3: a closed set of reasons (retries.infrastructure_failure's).
INFRASTRUCTURE_RETRIES = Counter(
    "buildrun_infrastructure_retries_total",
    "Runs that failed for the infrastructure and were run again as a new TaskRun, by reason",
    ["reason"],
)
# --failure-log-snippet: a failed step's log read for its Event (read), not read (the pod
# gone, RBAC, no answer: unreadable) or not tried (too many reads waiting: skipped).
LOG_SNIPPETS = Counter(
    "buildrun_failure_log_snippets_total",
    "Failed steps' logs read for their BuildRun's Warning Event (--failure-log-snippet), "
    "by result",
    ["result"],
)


class IndexGauge(Collector):
    """A gauge counted at scrape time from an index of the BuildRun cache: one sample per
    index value, the number of BuildRuns under it (Store.index_counts). So it is right
    from the first list on, on a standby too, and costs nothing between scrapes.
    setup.py points it at the informer's store."""

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self._family = (name, documentation, label)
        self._source: tuple[Store, str] | None = None

    def watch(self, store: Store, index: str) -> None:
        self._source = (store, index)

    def collect(self) -> Iterator[Metric]:
        name, documentation, label = self._family
        family = GaugeMetricFamily(name, documentation, labels=[label])
        if self._source is not None:
            store, index = self._source
            for value, count in sorted(store.index_counts(index).items()):
                family.add_metric([value], count)
        yield family


# buildrun_waiting{reason} (caches.WAITING): the BuildRuns whose run has not reported
# Running, by the reason their condition shows (Tekton's: Pending, ExceededNodeResources,
# PullImageFailed, ...).
WAITING = IndexGauge(
    "buildrun_waiting", "Started BuildRuns whose run has not reported Running yet, by the "
    "reason on their Succeeded condition", "reason")
REGISTRY.register(WAITING)

# Issue 43, one run at a time per Build (serial.py): what an SRE watches of serial queues.
SERIAL_WAITS = Counter(
    "buildrun_serial_waits_total",
    "BuildRuns of a Build with a serial run policy that began waiting behind another",
    ["namespace"],
)
SERIAL_SUPERSEDED = Counter(
    "buildrun_serial_superseded_total",
    "Waiting BuildRuns of a SerialLatestOnly Build canceled because a newer one came",
    ["namespace"],
)


# buildrun_serial_waiting{namespace} (caches.SERIAL_WAITING): the BuildRuns waiting in
# serial queues now.
SERIAL_QUEUES = IndexGauge(
    "buildrun_serial_waiting",
    "BuildRuns of Builds with a serial run policy waiting behind another, now", "namespace")
REGISTRY.register(SERIAL_QUEUES)


def buildrun_started(buildrun: JSON, seconds: float) -> None:
    """A BuildRun's TaskRun was created and recorded, `seconds` after the BuildRun was:
    ours (buildrun_establish_duration_seconds) and Shipwright's two series of the same
    moment (`shipwright.metrics.buildrun_started`)."""
    ESTABLISH.observe(seconds)
    shipwright_metrics.buildrun_started(buildrun, seconds)


def buildrun_established(buildrun: JSON, seconds: float) -> None:
    """A BuildRun got its startTime (its run's, Tekton's start), `seconds` after it was
    created: Shipwright's series of that moment (`shipwright.metrics.buildrun_established`)."""
    shipwright_metrics.buildrun_established(buildrun, seconds)


def buildrun_finished(buildrun: JSON, reason: str, seconds: float) -> None:
    """A BuildRun got its completionTime, `seconds` after it was created: ours by
    reason, Shipwright's build_buildrun_completion_duration_seconds with its labels."""
    COMPLETION.labels(reason).observe(seconds)
    shipwright_metrics.buildrun_finished(buildrun, seconds)


def buildrun_concluded(buildrun: JSON, succeeded: bool, reason: str) -> None:
    """A BuildRun got its completionTime, whatever the row (a user error's, a cancel before
    it ran and a spent budget's too, as #2187 records those): Shipwright #2187's result and
    failure reason series. `reason` is the bounded label (reasons.metric_reason)."""
    shipwright_metrics.buildrun_result(buildrun, result_of(succeeded, reason), reason)


def result_of(succeeded: bool, reason: str) -> str:
    """#2187's classifyBuildRunResult: succeeded, cancelled, timeout, else failed."""
    if succeeded:
        return shipwright_metrics.RESULT_SUCCEEDED
    if reason == reasons.BUILD_RUN_CANCELED:
        return shipwright_metrics.RESULT_CANCELLED
    if reason == reasons.BUILD_RUN_TIMEOUT:
        return shipwright_metrics.RESULT_TIMEOUT
    return shipwright_metrics.RESULT_FAILED
