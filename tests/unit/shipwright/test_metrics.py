"""Shipwright's build_* metrics in controller/shipwright/metrics.py: names, types, buckets,
optional labels and the environment settings, as Shipwright v0.20.13 exports them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from controller.buildrun import metrics as buildrun_metrics
from controller.shipwright import metrics
from controller.shipwright.indexes import ACTIVE, active

BUILDRUN: dict[str, Any] = {
    "metadata": {"name": "br", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"build": {"name": "b"}},
    "status": {"buildSpec": {"strategy": {"name": "kaniko"}}},
}


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_names_types_and_default_buckets() -> None:
    families = {m.name: m for m in REGISTRY.collect()}
    assert families["build_builds_registered"].type == "counter"
    assert families["build_buildruns_completed"].type == "counter"
    expected = {
        "build_buildrun_establish_duration_seconds": [0, 1, 2, 3, 5, 7, 10, 15, 20, 30],
        "build_buildrun_completion_duration_seconds": list(range(50, 501, 50)),
        "build_buildrun_rampup_duration_seconds": list(range(10)),
        "build_buildrun_taskrun_rampup_duration_seconds": list(range(10)),
        "build_buildrun_taskrun_pod_rampup_duration_seconds": list(range(10)),
    }
    for name, buckets in expected.items():
        assert families[name].type == "histogram"
        les = sorted({float(s.labels["le"]) for s in families[name].samples
                      if s.name.endswith("_bucket")})
        assert les == [float(b) for b in buckets] + [float("inf")], name


def test_labels_are_off_by_default() -> None:
    before = sample("build_buildruns_completed_total")
    buildrun_metrics.buildrun_started(BUILDRUN, 4.0)
    assert sample("build_buildruns_completed_total") == before + 1
    metrics.build_registered("kaniko", "ns", "b")
    assert sample("build_builds_registered_total") >= 1


def test_started_and_finished_record_ours_and_shipwrights() -> None:
    ours = sample("buildrun_establish_duration_seconds_count")
    theirs = sample("build_buildrun_rampup_duration_seconds_count")
    establish = sample("build_buildrun_establish_duration_seconds_count")
    buildrun_metrics.buildrun_started(BUILDRUN, 2.5)
    assert sample("buildrun_establish_duration_seconds_count") == ours + 1
    assert sample("build_buildrun_rampup_duration_seconds_count") == theirs + 1
    # Shipwright's establish ends at startTime, the TaskRun's own, which comes later.
    assert sample("build_buildrun_establish_duration_seconds_count") == establish
    buildrun_metrics.buildrun_established(BUILDRUN, 3.0)
    assert sample("build_buildrun_establish_duration_seconds_count") == establish + 1

    ours = sample("buildrun_completion_duration_seconds_count", {"reason": "Succeeded"})
    theirs = sample("build_buildrun_completion_duration_seconds_count")
    buildrun_metrics.buildrun_finished(BUILDRUN, "Succeeded", 120.0)
    assert sample("buildrun_completion_duration_seconds_count",
                  {"reason": "Succeeded"}) == ours + 1
    assert sample("build_buildrun_completion_duration_seconds_count") == theirs + 1


def test_pod_rampups() -> None:
    taskrun = {"metadata": {"creationTimestamp": "2026-01-01T00:00:10Z"}}
    pod: dict[str, Any] = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:13Z"},
        "status": {"initContainerStatuses": [
            {"state": {"terminated": {"finishedAt": "2026-01-01T00:00:14Z"}}},
            {"state": {"terminated": {"finishedAt": "2026-01-01T00:00:18Z"}}},
        ]},
    }
    tr = sample("build_buildrun_taskrun_rampup_duration_seconds_sum")
    tr_pod = sample("build_buildrun_taskrun_pod_rampup_duration_seconds_sum")
    metrics.taskrun_pod_seen(BUILDRUN, taskrun, pod)
    assert sample("build_buildrun_taskrun_rampup_duration_seconds_sum") == tr + 3.0
    assert sample("build_buildrun_taskrun_pod_rampup_duration_seconds_sum") == tr_pod + 5.0
    # Without a finished init container only the TaskRun ramp-up is known.
    count = sample("build_buildrun_taskrun_pod_rampup_duration_seconds_count")
    metrics.taskrun_pod_seen(BUILDRUN, taskrun, {"metadata": pod["metadata"]})
    assert sample("build_buildrun_taskrun_pod_rampup_duration_seconds_count") == count


def test_enabled_labels() -> None:
    env = {metrics.ENV_ENABLED_LABELS: "buildrun,nonsense, namespace"}
    assert metrics.enabled_labels(env) == ("namespace", "buildrun")
    assert metrics.enabled_labels({}) == ()


def test_buckets_from_env() -> None:
    name = metrics.ENV_COMPLETION_BUCKETS
    assert metrics.buckets_from_env(name, (1, 2), {}) == (1.0, 2.0)
    assert metrics.buckets_from_env(name, (1, 2), {name: "30,60,90"}) == (30.0, 60.0, 90.0)
    with pytest.raises(ValueError, match="PROMETHEUS_BR_COMP_DUR_BUCKETS='a,b'"):
        metrics.buckets_from_env(name, (1,), {name: "a,b"})
    with pytest.raises(ValueError, match="increasing order"):
        metrics.buckets_from_env(name, (1,), {name: "60,30"})


def test_the_environment_is_read_at_start() -> None:
    """A fresh process with Shipwright's variables set exports what they ask for."""
    script = textwrap.dedent("""
        from prometheus_client import generate_latest
        from controller.buildrun import metrics as buildrun_metrics
        from controller.shipwright import metrics
        br = {"metadata": {"name": "br", "namespace": "ns"}, "spec": {"build": {"name": "b"}},
              "status": {"buildSpec": {"strategy": {"name": "kaniko"}}}}
        buildrun_metrics.buildrun_finished(br, "Succeeded", 45.0)
        metrics.build_registered("kaniko", "ns", "b")
        print(generate_latest().decode())
    """)
    env = {**os.environ, "PROMETHEUS_ENABLED_LABELS": "buildstrategy,namespace,build,buildrun",
           "PROMETHEUS_BR_COMP_DUR_BUCKETS": "30,60"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout
    families = {f.name: f for f in text_string_to_metric_families(out)}
    buckets = [s for s in families["build_buildrun_completion_duration_seconds"].samples
               if s.name.endswith("_bucket")]
    assert [(s.labels["le"], s.value) for s in buckets] == [
        ("30.0", 0.0), ("60.0", 1.0), ("+Inf", 1.0)]
    assert buckets[0].labels == {"buildstrategy": "kaniko", "namespace": "ns", "build": "b",
                                 "buildrun": "br", "le": "30.0"}
    registered = [s for s in families["build_builds_registered"].samples
                  if s.name == "build_builds_registered_total"]
    assert [s.labels for s in registered] == [
        {"buildstrategy": "kaniko", "namespace": "ns", "build": "b"}]


def test_a_bad_bucket_setting_stops_the_process_with_its_name() -> None:
    env = {**os.environ, "PROMETHEUS_BR_EST_DUR_BUCKETS": "1,x"}
    proc = subprocess.run([sys.executable, "-c", "import controller.shipwright.metrics"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "PROMETHEUS_BR_EST_DUR_BUCKETS='1,x': expected comma-separated numbers" in proc.stderr


# --- Shipwright #2187's outcome series, beside v0.20.13's names


@pytest.mark.parametrize(("succeeded", "reason", "result"), [
    (True, "Succeeded", "succeeded"),
    (False, "BuildRunCanceled", "cancelled"),
    (False, "BuildRunTimeout", "timeout"),
    (False, "Failed", "failed"),
    (False, "BuildNotFound", "failed"),
    (False, "TaskRunTimeout", "failed"),  # #2187 names Shipwright's reason only
])
def test_result_is_2187s_classification(succeeded: bool, reason: str, result: str) -> None:
    assert buildrun_metrics.result_of(succeeded, reason) == result


def test_results_and_failure_reasons_unlabelled_by_default() -> None:
    """Without PROMETHEUS_ENABLED_LABELS the result counter counts every outcome (as
    #2187's does: `result` is one of its optional labels) and the failure counter has
    only its `reason`."""
    total = sample("build_buildrun_result_total")
    failed = sample("build_buildrun_failure_reason_total", {"reason": "BuildNotFound"})
    succeeded = sample("build_buildrun_failure_reason_total", {"reason": "Succeeded"})
    buildrun_metrics.buildrun_concluded(BUILDRUN, True, "Succeeded")
    buildrun_metrics.buildrun_concluded(BUILDRUN, False, "BuildNotFound")
    assert sample("build_buildrun_result_total") == total + 2
    assert sample("build_buildrun_failure_reason_total", {"reason": "BuildNotFound"}) == \
        failed + 1
    # A success is no failure.
    assert sample("build_buildrun_failure_reason_total", {"reason": "Succeeded"}) == succeeded


def test_2187s_labels_are_switched_on_by_the_same_variable() -> None:
    """A fresh process with #2187's labels named: they label its series only, v0.20.13's
    keep theirs; `result` splits the result counter."""
    script = textwrap.dedent("""
        from prometheus_client import generate_latest
        from controller.buildrun import metrics as buildrun_metrics
        br = {"metadata": {"name": "br", "namespace": "ns"}, "spec": {"build": {"name": "b"}},
              "status": {"buildSpec": {"strategy": {"name": "buildah",
                                                    "kind": "ClusterBuildStrategy"},
                                       "source": {"type": "Git"}},
                         "executor": {"kind": "TaskRun", "name": "br-x"}}}
        early = {"metadata": {"name": "early", "namespace": "ns"},
                 "spec": {"build": {"name": "gone"}}}
        buildrun_metrics.buildrun_concluded(br, False, "BuildRunTimeout")
        buildrun_metrics.buildrun_concluded(early, False, "BuildNotFound")
        buildrun_metrics.buildrun_finished(br, "BuildRunTimeout", 45.0)
        print(generate_latest().decode())
    """)
    env = {**os.environ, "PROMETHEUS_ENABLED_LABELS":
           "namespace,result,executor,strategy_kind,source_type"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout
    families = {f.name: f for f in text_string_to_metric_families(out)}
    results = {s.labels["result"]: (s.labels, s.value)
               for s in families["build_buildrun_result"].samples
               if s.name == "build_buildrun_result_total"}
    assert results == {
        "timeout": ({"namespace": "ns", "strategy_kind": "ClusterBuildStrategy",
                     "executor": "TaskRun", "source_type": "Git", "result": "timeout"}, 1.0),
        # Failed before it ran: no snapshot, no run (#2187 records "" for both).
        "failed": ({"namespace": "ns", "strategy_kind": "", "executor": "",
                    "source_type": "", "result": "failed"}, 1.0),
    }
    reasons = {s.labels["reason"]: s.labels for s in
               families["build_buildrun_failure_reason"].samples
               if s.name == "build_buildrun_failure_reason_total"}
    assert set(reasons) == {"BuildRunTimeout", "BuildNotFound"}
    assert "result" not in reasons["BuildRunTimeout"]
    completion = [s for s in families["build_buildrun_completion_duration_seconds"].samples
                  if s.name.endswith("_count")]
    assert [s.labels for s in completion] == [{"namespace": "ns"}]  # v0.20.13's labels
    active = families["build_buildruns_active"]
    assert active.type == "gauge"
    assert active.samples == []  # labelled, and no BuildRun controller runs here


def test_the_active_index_holds_the_running_buildruns_only() -> None:
    """What build_buildruns_active counts: a run recorded, no completionTime."""
    meta = {"name": "br", "namespace": "ns"}
    assert active({"metadata": meta}) == []
    running = {"metadata": meta, "status": {"executor": {"kind": "PipelineRun", "name": "x"}}}
    assert active(running) == [ACTIVE]
    assert active({"metadata": meta, "status": {"taskRunName": "x"}}) == [ACTIVE]
    done = {"metadata": meta, "status": {"taskRunName": "x",
                                         "completionTime": "2026-01-01T00:00:00Z"}}
    assert active(done) == []
    # A user error finishes a BuildRun that never ran: never counted.
    assert active({"metadata": meta, "status": {"completionTime": "2026-01-01T00:00:00Z"}}) == []
