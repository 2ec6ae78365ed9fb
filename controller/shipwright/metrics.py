"""Shipwright's build_* metrics (pkg/metrics/metrics.go, docs/metrics.md, v0.20.13).

Same names, types, default buckets, optional labels and environment settings, so
Shipwright's dashboards work unchanged. Labels are off unless PROMETHEUS_ENABLED_LABELS
names them (buildstrategy, namespace, build, buildrun); buckets come from
PROMETHEUS_BR_EST_DUR_BUCKETS, PROMETHEUS_BR_COMP_DUR_BUCKETS and
PROMETHEUS_BR_RAMPUP_DUR_BUCKETS. Both are read once, when the process starts, as
Shipwright reads them. The reconcilers call the functions below, never the objects;
the Build controller (`build_registered`) and the BuildRun controller (through
`controller.buildrun.metrics`, which records our own series at the same moments) share it.

Beside v0.20.13's names, the outcome series of Shipwright's #2187 (an open pull request on
its main, not in any release): build_buildrun_result_total, build_buildrun_failure_reason_total
and build_buildruns_active, with its label names. Its three new optional labels
(strategy_kind, executor, source_type) and `result` are switched on by the same
PROMETHEUS_ENABLED_LABELS, on these series only: v0.20.13's keep v0.20.13's labels.
build_buildruns_active is counted from the BuildRun cache when scraped (#2187 adds and
subtracts in its reconciler, which a restart sets back to 0 and then below), and only
where the BuildRun controller runs (the leader): a standby shows 0.
"""

from __future__ import annotations

import os
import weakref
from collections import Counter as Tally
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controller.runtime.controller import Controller
from controller.runtime.kube import JSON
from controller.runtime.shapes import at, mapping, text
from controller.runtime.store import Store
from controller.runtime.timestamps import parse_time
from controller.shipwright.indexes import ACTIVE
from controller.shipwright.recorded_executor import recorded_executor

ENV_ENABLED_LABELS = "PROMETHEUS_ENABLED_LABELS"
ENV_ESTABLISH_BUCKETS = "PROMETHEUS_BR_EST_DUR_BUCKETS"
ENV_COMPLETION_BUCKETS = "PROMETHEUS_BR_COMP_DUR_BUCKETS"
ENV_RAMPUP_BUCKETS = "PROMETHEUS_BR_RAMPUP_DUR_BUCKETS"

SHIPWRIGHT_LABELS = ("buildstrategy", "namespace", "build", "buildrun")
# #2187's labels, in its order after v0.20.13's, on its outcome series only; and `result`,
# on build_buildrun_result_total (optional too, as #2187 has it).
OUTCOME_LABELS = (*SHIPWRIGHT_LABELS, "strategy_kind", "executor", "source_type")
RESULT_LABEL = "result"
# build_buildrun_failure_reason_total's own label, always there (#2187).
REASON_LABEL = "reason"
# #2187's values of `result`.
RESULT_SUCCEEDED = "succeeded"
RESULT_FAILED = "failed"
RESULT_CANCELLED = "cancelled"
RESULT_TIMEOUT = "timeout"
# Shipwright's defaults (pkg/config/config.go).
SHIPWRIGHT_ESTABLISH_BUCKETS = (0.0, 1, 2, 3, 5, 7, 10, 15, 20, 30)
SHIPWRIGHT_COMPLETION_BUCKETS = tuple(float(50 * i) for i in range(1, 11))  # 50..500
SHIPWRIGHT_RAMPUP_BUCKETS = tuple(float(i) for i in range(10))  # 0..9


def enabled_labels(environ: Mapping[str, str] = os.environ,
                   known: Sequence[str] = SHIPWRIGHT_LABELS) -> tuple[str, ...]:
    """The optional labels of `known` switched on, in its order; unknown names are ignored
    (v0.20.13's four by default; OUTCOME_LABELS and RESULT_LABEL for #2187's series)."""
    wanted = {name.strip() for name in environ.get(ENV_ENABLED_LABELS, "").split(",")}
    return tuple(label for label in known if label in wanted)


def buckets_from_env(name: str, default: Sequence[float],
                     environ: Mapping[str, str] = os.environ) -> tuple[float, ...]:
    """Comma-separated numbers from `name` if it is set, else `default`; ValueError
    naming the variable for anything else (Shipwright refuses to start then too)."""
    if name not in environ:
        return tuple(float(b) for b in default)
    text = environ[name]
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected comma-separated numbers, "
                         "e.g. 30,60,90,120") from None
    if list(values) != sorted(set(values)):
        raise ValueError(f"{name}={text!r}: buckets must be in increasing order, each once")
    return values


_LABELS = enabled_labels()
_BUILD_LABELS = tuple(label for label in _LABELS if label != "buildrun")
_RAMPUP_BUCKETS = buckets_from_env(ENV_RAMPUP_BUCKETS, SHIPWRIGHT_RAMPUP_BUCKETS)

SHP_BUILDS_REGISTERED = Counter(
    "build_builds_registered_total", "Number of total registered Builds.", _BUILD_LABELS)
SHP_BUILDRUNS_COMPLETED = Counter(
    "build_buildruns_completed_total", "Number of total completed BuildRuns.", _LABELS)
SHP_ESTABLISH = Histogram(
    "build_buildrun_establish_duration_seconds", "BuildRun establish duration in seconds.",
    _LABELS, buckets=buckets_from_env(ENV_ESTABLISH_BUCKETS, SHIPWRIGHT_ESTABLISH_BUCKETS))
SHP_COMPLETION = Histogram(
    "build_buildrun_completion_duration_seconds", "BuildRun completion duration in seconds.",
    _LABELS, buckets=buckets_from_env(ENV_COMPLETION_BUCKETS, SHIPWRIGHT_COMPLETION_BUCKETS))
SHP_RAMPUP = Histogram(
    "build_buildrun_rampup_duration_seconds",
    "BuildRun ramp-up duration in seconds (time between buildrun creation and taskrun "
    "creation).", _LABELS, buckets=_RAMPUP_BUCKETS)
SHP_TASKRUN_RAMPUP = Histogram(
    "build_buildrun_taskrun_rampup_duration_seconds",
    "BuildRun taskrun ramp-up duration in seconds (time between taskrun creation and taskrun "
    "pod creation).", _LABELS, buckets=_RAMPUP_BUCKETS)
_OUTCOME_LABELS = enabled_labels(known=OUTCOME_LABELS)
_RESULT_LABELS = (*_OUTCOME_LABELS, *enabled_labels(known=(RESULT_LABEL,)))
SHP_RESULT = Counter(
    "build_buildrun_result_total", "Number of total completed BuildRuns by result.",
    _RESULT_LABELS)
SHP_FAILURE_REASON = Counter(
    "build_buildrun_failure_reason_total", "Number of total failed BuildRuns by failure reason.",
    (*_OUTCOME_LABELS, REASON_LABEL))
SHP_TASKRUN_POD_RAMPUP = Histogram(
    "build_buildrun_taskrun_pod_rampup_duration_seconds",
    "BuildRun taskrun pod ramp-up duration in seconds (time between pod creation and last "
    "init container completion).", _LABELS, buckets=_RAMPUP_BUCKETS)


def _values(labels: Sequence[str], strategy: str, namespace: str, build: str,
            buildrun: str = "") -> dict[str, str]:
    every = {"buildstrategy": strategy, "namespace": namespace, "build": build,
             "buildrun": buildrun}
    return {label: every[label] for label in labels}


def _every_value(buildrun: JSON) -> dict[str, str]:
    """Every label's value for a BuildRun: the strategy of its build spec snapshot, its
    namespace, the Build it names (empty for an embedded spec) and its own name; and
    #2187's: the snapshot's strategy kind (BuildStrategy unless set) and source type, the
    kind of run its status names, each empty where the BuildRun has none (one that failed
    before it ran, as #2187 records those)."""
    meta = buildrun["metadata"]
    # Total (a field of the wrong type reads as absent): a scrape reads every running one.
    status = mapping(buildrun.get("status"))
    snapshot = mapping(status.get("buildSpec"))
    strategy = mapping(snapshot.get("strategy"))
    recorded = recorded_executor(status)
    return {
        **_values(SHIPWRIGHT_LABELS, text(strategy.get("name")), meta["namespace"],
                  text(at(buildrun, "spec", "build", "name")), meta["name"]),
        "strategy_kind": (text(strategy.get("kind")) or "BuildStrategy") if snapshot else "",
        "executor": recorded.kind if recorded is not None else "",
        "source_type": text(at(snapshot, "source", "type")),
    }


def _buildrun_values(buildrun: JSON) -> dict[str, str]:
    """v0.20.13's labels for a BuildRun (those switched on)."""
    every = _every_value(buildrun)
    return {label: every[label] for label in _LABELS}


def _child(metric: Counter | Histogram, buildrun: JSON) -> Any:
    return metric.labels(**_buildrun_values(buildrun)) if _LABELS else metric


def build_registered(strategy: str, namespace: str, build: str) -> None:
    """A Build passed validation (Shipwright's BuildCountInc)."""
    values = _values(_BUILD_LABELS, strategy, namespace, build)
    (SHP_BUILDS_REGISTERED.labels(**values) if values else SHP_BUILDS_REGISTERED).inc()


def buildrun_result(buildrun: JSON, result: str, reason: str) -> None:
    """A BuildRun got its completionTime with `result` (RESULT_*): #2187's
    build_buildrun_result_total, and but for a success its
    build_buildrun_failure_reason_total under `reason` (a bounded label value)."""
    every = {**_every_value(buildrun), RESULT_LABEL: result, REASON_LABEL: reason}
    result_child: Any = SHP_RESULT.labels(
        **{label: every[label] for label in _RESULT_LABELS}) if _RESULT_LABELS else SHP_RESULT
    result_child.inc()
    if result != RESULT_SUCCEEDED:
        SHP_FAILURE_REASON.labels(
            **{label: every[label] for label in (*_OUTCOME_LABELS, REASON_LABEL)}).inc()


class _Active(Collector):
    """build_buildruns_active (#2187): the BuildRuns running now, by #2187's labels, read
    from the BuildRun cache's ACTIVE index at each scrape, where the BuildRun controller
    runs. Each source is held weakly: a process that made several (tests) keeps none."""

    def __init__(self) -> None:
        self._sources: list[tuple[weakref.ref[Store], weakref.ref[Controller]]] = []

    def watch(self, buildruns: Store, controller: Controller) -> None:
        self._sources.append((weakref.ref(buildruns), weakref.ref(controller)))

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("build_buildruns_active",
                                   "Number of currently running BuildRuns.",
                                   labels=_OUTCOME_LABELS)
        counts: Tally[tuple[str, ...]] = Tally()
        live = [(s(), c()) for s, c in self._sources]
        self._sources = [src for src, (s, c) in zip(self._sources, live, strict=True)
                         if s is not None and c is not None]
        for store, controller in live:
            if store is None or controller is None or not controller.running:
                continue
            if not _OUTCOME_LABELS:  # the default: a count, nothing read
                counts[()] += store.index_counts(ACTIVE).get(ACTIVE, 0)
                continue
            # With labels each running BuildRun is read, which the event loop waits for: on
            # the 2-core machine at load 5, beside 20,000 finished, 2-7 ms a scrape with 500
            # running, 45-115 ms with 5,000 (without labels 0.05 ms at 5,000).
            for key in store.index_keys(ACTIVE, ACTIVE):
                buildrun = store.get(key)
                if buildrun is not None:
                    every = _every_value(buildrun)
                    counts[tuple(every[label] for label in _OUTCOME_LABELS)] += 1
        if not _OUTCOME_LABELS:  # one series, 0 on a standby as #2187's would be
            family.add_metric([], float(sum(counts.values())))
        else:
            for values, count in sorted(counts.items()):
                family.add_metric(list(values), float(count))
        yield family

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("build_buildruns_active", "Number of currently running "
                                "BuildRuns.", labels=_OUTCOME_LABELS)


_ACTIVE = _Active()
REGISTRY.register(_ACTIVE)


def count_active(buildruns: Store, controller: Controller) -> None:
    """build_buildruns_active counts the running BuildRuns of `buildruns` (an informer's
    store with BUILDRUN_INDEXERS) while `controller` (the BuildRun controller) runs."""
    _ACTIVE.watch(buildruns, controller)


def buildrun_started(buildrun: JSON, seconds: float) -> None:
    """A BuildRun's executor was created and recorded, `seconds` after the BuildRun was:
    Shipwright's BuildRunCountInc (build_buildruns_completed_total: despite the name,
    Shipwright counts a BuildRun when its TaskRun is created) and its ramp-up
    (build_buildrun_rampup_duration_seconds)."""
    _child(SHP_BUILDRUNS_COMPLETED, buildrun).inc()
    _child(SHP_RAMPUP, buildrun).observe(seconds)


def buildrun_established(buildrun: JSON, seconds: float) -> None:
    """A BuildRun got its startTime (its executor's, once Tekton started it), `seconds`
    after it was created: Shipwright's build_buildrun_establish_duration_seconds."""
    _child(SHP_ESTABLISH, buildrun).observe(seconds)


def buildrun_finished(buildrun: JSON, seconds: float) -> None:
    """A BuildRun got its completionTime, `seconds` after it was created
    (build_buildrun_completion_duration_seconds, every outcome)."""
    _child(SHP_COMPLETION, buildrun).observe(seconds)


def taskrun_pod_seen(buildrun: JSON, taskrun: JSON, pod: JSON) -> None:
    """Shipwright's two pod ramp-ups, from a finished TaskRun's pod: TaskRun creation to
    pod creation, and pod creation to its last init container finishing (if it has
    init containers and the last one finished)."""
    taskrun_created = parse_time(taskrun["metadata"].get("creationTimestamp"))
    pod_created = parse_time(pod["metadata"].get("creationTimestamp"))
    if pod_created is None:
        return
    inits = (pod.get("status") or {}).get("initContainerStatuses") or []
    finished = parse_time(((inits[-1].get("state") or {}).get("terminated") or {})
                          .get("finishedAt")) if inits else None
    if finished is not None:
        _child(SHP_TASKRUN_POD_RAMPUP, buildrun).observe(
            max((finished - pod_created).total_seconds(), 0.0))
    if taskrun_created is not None:
        _child(SHP_TASKRUN_RAMPUP, buildrun).observe(
            max((pod_created - taskrun_created).total_seconds(), 0.0))
