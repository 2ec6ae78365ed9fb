"""Shipwright's build_* metrics (pkg/metrics/metrics.go, docs/metrics.md, v0.20.13).

Same names, types, default buckets, optional labels and environment settings, so
Shipwright's dashboards work unchanged. Labels are off unless PROMETHEUS_ENABLED_LABELS
names them (buildstrategy, namespace, build, buildrun); buckets come from
PROMETHEUS_BR_EST_DUR_BUCKETS, PROMETHEUS_BR_COMP_DUR_BUCKETS and
PROMETHEUS_BR_RAMPUP_DUR_BUCKETS. Both are read once, when the process starts, as
Shipwright reads them. The reconcilers call the functions below, never the objects;
the Build controller (`build_registered`) and the BuildRun controller (through
`controller.buildrun.metrics`, which records our own series at the same moments) share it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import Counter, Histogram

from controller.runtime.kube import JSON
from controller.runtime.timestamps import parse_time

ENV_ENABLED_LABELS = "PROMETHEUS_ENABLED_LABELS"
ENV_ESTABLISH_BUCKETS = "PROMETHEUS_BR_EST_DUR_BUCKETS"
ENV_COMPLETION_BUCKETS = "PROMETHEUS_BR_COMP_DUR_BUCKETS"
ENV_RAMPUP_BUCKETS = "PROMETHEUS_BR_RAMPUP_DUR_BUCKETS"

SHIPWRIGHT_LABELS = ("buildstrategy", "namespace", "build", "buildrun")
# Shipwright's defaults (pkg/config/config.go).
SHIPWRIGHT_ESTABLISH_BUCKETS = (0.0, 1, 2, 3, 5, 7, 10, 15, 20, 30)
SHIPWRIGHT_COMPLETION_BUCKETS = tuple(float(50 * i) for i in range(1, 11))  # 50..500
SHIPWRIGHT_RAMPUP_BUCKETS = tuple(float(i) for i in range(10))  # 0..9


def enabled_labels(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The optional labels switched on, in Shipwright's order; unknown names are ignored."""
    wanted = {name.strip() for name in environ.get(ENV_ENABLED_LABELS, "").split(",")}
    return tuple(label for label in SHIPWRIGHT_LABELS if label in wanted)


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
SHP_TASKRUN_POD_RAMPUP = Histogram(
    "build_buildrun_taskrun_pod_rampup_duration_seconds",
    "BuildRun taskrun pod ramp-up duration in seconds (time between pod creation and last "
    "init container completion).", _LABELS, buckets=_RAMPUP_BUCKETS)


def _values(labels: Sequence[str], strategy: str, namespace: str, build: str,
            buildrun: str = "") -> dict[str, str]:
    every = {"buildstrategy": strategy, "namespace": namespace, "build": build,
             "buildrun": buildrun}
    return {label: every[label] for label in labels}


def _buildrun_values(buildrun: JSON) -> dict[str, str]:
    """Shipwright's labels for a BuildRun: the strategy of its build spec snapshot, its
    namespace, the Build it names (empty for an embedded spec) and its own name."""
    meta = buildrun["metadata"]
    snapshot = (buildrun.get("status") or {}).get("buildSpec") or {}
    strategy = str((snapshot.get("strategy") or {}).get("name") or "")
    build = str(((buildrun.get("spec") or {}).get("build") or {}).get("name") or "")
    return _values(_LABELS, strategy, meta["namespace"], build, meta["name"])


def _child(metric: Counter | Histogram, buildrun: JSON) -> Any:
    return metric.labels(**_buildrun_values(buildrun)) if _LABELS else metric


def build_registered(strategy: str, namespace: str, build: str) -> None:
    """A Build passed validation (Shipwright's BuildCountInc)."""
    values = _values(_BUILD_LABELS, strategy, namespace, build)
    (SHP_BUILDS_REGISTERED.labels(**values) if values else SHP_BUILDS_REGISTERED).inc()


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
