"""Infrastructure failures retried, user failures never (controller/buildrun/retries.py,
state table row 13): the closed set of infrastructure failures, the limit asked for, the
attempts' names, and row 13 acted on the in-memory API server, as test_actions.py does
for the other rows. tests/cluster/test_real_builds.py evicts a real build's pod."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.annotations import INFRASTRUCTURE_ATTEMPTS, INFRASTRUCTURE_RETRIES
from controller.buildrun.caches import slim_pod
from controller.buildrun.resources.phases import run_name
from controller.buildrun.retries import (
    MAX_RETRIES,
    Failure,
    Limit,
    Policy,
    attempts_of,
    infrastructure_failure,
    limit_of,
    retry_run,
)
from controller.runtime.controller import DONE
from controller.runtime.kube import JSON, PODS
from controller.runtime.name_rules import LABEL_VALUE_MAX
from controller.runtime.timestamps import format_time
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from tests.harness import metric
from tests.unit.buildrun.test_actions import NOW, STATUS_WRITE, Rig, ago, started
from tests.unit.buildrun.world import tekton_status

# -- the closed set ------------------------------------------------------------------------


def failed_run(reason: str = "StepFailed", message: str = "m", ended: str = ago(1)) -> JSON:
    return {"metadata": {"name": "tr"},
            "status": tekton_status("False", reason, message=message, completion_time=ended,
                                    pod="tr-pod")}


def pod(**status: Any) -> JSON:
    return {"metadata": {"name": "tr-pod", "namespace": "ns"},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "step-build", "state": {"terminated": {"exitCode": 1}}}], **status}}


def deleted(p: JSON, asked: str, grace: int = 30) -> JSON:
    """`p` whose deletion was asked at `asked`, with `grace` seconds to go."""
    at = datetime.datetime.fromisoformat(asked.replace("Z", "+00:00"))
    p["metadata"]["deletionTimestamp"] = format_time(at + datetime.timedelta(seconds=grace))
    p["metadata"]["deletionGracePeriodSeconds"] = grace
    return p


EVICTION_API = {"type": "DisruptionTarget", "status": "True",
                "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}


@pytest.mark.parametrize(("run", "the_pod", "reason"), [
    # Tekton v1.12 names a kubelet eviction itself; older ones say Failed, the pod tells.
    (failed_run("PodEvicted"), pod(reason="Evicted", message="low on memory"),
     reasons.POD_EVICTED),
    (failed_run("PodEvicted"), None, reasons.POD_EVICTED),
    (failed_run("Failed"), pod(reason="Evicted", message="low on disk"), "Evicted"),
    (failed_run(), pod(reason="NodeLost"), "NodeLost"),
    (failed_run(), pod(reason="Terminated", message="Pod was terminated in response to "
                                                    "imminent node shutdown."), "Terminated"),
    (failed_run(), pod(reason="UnexpectedAdmissionError"), "UnexpectedAdmissionError"),
    # The eviction API, the taint manager, preemption: Kubernetes' DisruptionTarget.
    (failed_run(), pod(conditions=[EVICTION_API]), reasons.POD_DISRUPTED),
    # Deleted under the build (kubectl delete pod): asked before the run failed.
    (failed_run(ended=ago(5)), deleted(pod(), ago(20)), reasons.POD_DELETED),
    (failed_run(ended=ago(5)), deleted(pod(), ago(5)), reasons.POD_DELETED),
    # A pull that got no answer in time.
    (failed_run("TaskRunImagePullFailed", 'the step "build" in TaskRun "tr" failed to pull '
                'the image "r/x". The pod errored with the message: "Back-off pulling '
                'image: dial tcp 10.0.0.1:443: i/o timeout."'), None,
     "TaskRunImagePullFailed"),
    (failed_run("TaskRunImagePullFailed", "... 503 Service Unavailable ..."), None,
     "TaskRunImagePullFailed"),
])
def test_infrastructure_failures(run: JSON, the_pod: JSON | None, reason: str) -> None:
    failure = infrastructure_failure(run, the_pod)
    assert failure is not None and failure.reason == reason


@pytest.mark.parametrize(("run", "the_pod"), [
    # The build's own: a step's exit, its OOM, a failure the pod cannot explain.
    (failed_run(), pod()),
    (failed_run("StepOOM"), pod(containerStatuses=[{"name": "step-build", "state": {
        "terminated": {"exitCode": 137, "reason": "OOMKilled"}}}])),
    (failed_run("Failed"), None),
    # A timeout and a cancel, even though Tekton deletes the pod for them.
    (failed_run("TaskRunTimeout"), deleted(pod(conditions=[EVICTION_API]), ago(20))),
    (failed_run("TaskRunCancelled"), deleted(pod(reason="Evicted"), ago(20))),
    # Deleted after the run had failed on its own (a clean-up): not what failed it.
    (failed_run(ended=ago(60)), deleted(pod(), ago(20))),
    # An image that is not there, or not ours, whatever else the message says.
    (failed_run("TaskRunImagePullFailed", 'failed to pull "r/x:1.0": r/x:1.0: not found'),
     None),
    (failed_run("TaskRunImagePullFailed", "manifest unknown after i/o timeout"), None),
    (failed_run("TaskRunImagePullFailed", "unauthorized: authentication required"), None),
    (failed_run("TaskRunImagePullFailed", "InvalidImageName"), None),
    # Not failed.
    ({"status": tekton_status("True", "Succeeded")}, pod(reason="Evicted")),
    ({"status": tekton_status("Unknown", "Running")}, pod(reason="Evicted")),
    ({}, None),
])
def test_never_the_infrastructures(run: JSON, the_pod: JSON | None) -> None:
    assert infrastructure_failure(run, the_pod) is None


def test_a_deleted_pods_last_state_keeps_what_tells_the_infrastructure() -> None:
    """The pod informer's copy of a pod on its way out (EndedPods' once it is gone) holds
    what the classification reads."""
    evicted = deleted(pod(reason="Evicted", conditions=[EVICTION_API, {
        "type": "Ready", "status": "False"}]), ago(20))
    slim = slim_pod(evicted)
    assert slim["status"]["reason"] == "Evicted"
    assert slim["status"]["conditions"] == [EVICTION_API]
    assert infrastructure_failure(failed_run(), slim) == Failure("Evicted", "")
    assert infrastructure_failure(failed_run(ended=ago(5)), slim_pod(deleted(pod(), ago(20)))
                                  ) == Failure(reasons.POD_DELETED, "pod tr-pod was deleted "
                                               "while the build ran")


# -- the limit ------------------------------------------------------------------------------


def annotated(value: str | None) -> JSON:
    return {"metadata": {"annotations": {} if value is None
                         else {INFRASTRUCTURE_RETRIES: value}}}


def test_the_buildrun_over_the_build_over_the_flag() -> None:
    assert limit_of(annotated("2"), annotated("5"), 1) == Limit(2)
    assert limit_of(annotated(None), annotated("5"), 1) == Limit(5)
    assert limit_of(annotated(None), None, 1) == Limit(1)
    assert limit_of(annotated("0"), annotated("5"), 3) == Limit(0)


@pytest.mark.parametrize("value", ["-1", "two", "", "1.5", str(MAX_RETRIES + 1)])
def test_a_bad_value_is_off_and_says_why(value: str) -> None:
    limit = limit_of(annotated(value), annotated("5"), 3)
    assert limit.retries == 0
    assert INFRASTRUCTURE_RETRIES in limit.error and repr(value) in limit.error
    assert limit.error.startswith("the BuildRun's annotation")


def test_a_record_edited_by_hand_reads_as_what_it_holds() -> None:
    def record(value: str) -> JSON:
        return {"metadata": {"annotations": {INFRASTRUCTURE_ATTEMPTS: value}}}
    assert attempts_of(record("not json")) == []
    assert attempts_of(record('{"taskRun": "x"}')) == []
    assert [a.task_run for a in attempts_of(record('[{"taskRun": "x"}, 3, {"reason": "y"}]'))
            ] == ["x"]


# -- the attempts' runs ---------------------------------------------------------------------


def test_each_attempt_has_a_name_of_its_own_shaped_as_shipwrights() -> None:
    br = {"metadata": {"name": "b" * 70, "uid": "u-1"}}
    names = [run_name(br, attempt) for attempt in range(1, 5)]
    assert names[0] == run_name(br)
    assert len(set(names)) == 4
    assert all(len(n) <= LABEL_VALUE_MAX and n.startswith("b" * 57 + "-") for n in names)
    assert run_name(br, 2) == run_name({"metadata": {"name": "b" * 70, "uid": "u-1"}}, 2)
    assert run_name(br, 2) != run_name({"metadata": {"name": "b" * 70, "uid": "u-2"}}, 2)


def test_the_next_run_is_the_failed_ones_spec_and_labels_only() -> None:
    failed = {"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
              "metadata": {"name": "tr", "namespace": "ns", "uid": "x", "resourceVersion": "9",
                           "labels": {"buildrun.shipwright.io/name": "br"},
                           "annotations": {"a": "b"}, "creationTimestamp": ago(9),
                           "ownerReferences": [{"kind": "BuildRun", "uid": "u"}]},
              "spec": {"taskSpec": {"steps": []}, "timeout": "1h0m0s",
                       "status": "TaskRunCancelled"},
              "status": {"podName": "tr-pod"}}
    assert retry_run(failed, "tr-2") == {
        "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "tr-2", "namespace": "ns",
                     "labels": {"buildrun.shipwright.io/name": "br"},
                     "annotations": {"a": "b"},
                     "ownerReferences": [{"kind": "BuildRun", "uid": "u"}]},
        "spec": {"taskSpec": {"steps": []}, "timeout": "1h0m0s"}}


# -- row 13, acted on -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime.datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rig(clock: Clock) -> Rig:
    return Rig(clock=clock, retries=Policy(retries=0, delay=10.0))


def evicted(rig: Rig, br: JSON, name: str = "tr") -> None:
    """TaskRun `name` of `br`, Tekton's PodEvicted, and its pod as the kubelet left it."""
    rig.taskrun(br, name, spec={"taskSpec": {"steps": [{"name": "build"}]}},
                **tekton_status("False", "PodEvicted", message="evicted",
                                completion_time=ago(1), pod=f"{name}-pod"))
    rig.kube.add(PODS, {"metadata": {"name": f"{name}-pod",
                                     "labels": {"buildrun.shipwright.io/name": "br"}},
                        "spec": {"containers": [{"name": "step-build"}]},
                        "status": {"phase": "Failed", "reason": "Evicted",
                                   "message": "The node was low on resource: memory."}})


def retrying(rig: Rig, retries: str = "1") -> JSON:
    br = rig.buildrun(status=started())
    rig.kube.modify(BUILDRUNS, "br", lambda o: o["metadata"].setdefault(
        "annotations", {}).update({INFRASTRUCTURE_RETRIES: retries}))
    return br


def attempts(rig: Rig) -> list[JSON]:
    value = (rig.stored()["metadata"].get("annotations") or {}).get(INFRASTRUCTURE_ATTEMPTS)
    return json.loads(value) if value else []


async def test_row_11_records_the_attempt_then_runs_the_next_after_its_backoff(
        rig: Rig, clock: Clock) -> None:
    br = retrying(rig, "2")
    evicted(rig, br)
    before = metric("buildrun_infrastructure_retries_total", reason="PodEvicted")
    result = await rig.reconcile()
    # Recorded first, nothing run yet: the backoff (--infrastructure-retry-delay).
    assert rig.kube.writes() == [("patch", "buildruns", "br", "")]
    assert attempts(rig) == [{"taskRun": "tr", "reason": "PodEvicted",
                              "message": "The node was low on resource: memory.",
                              "time": format_time(NOW)}]
    assert result.requeue_after is not None and 10 <= result.requeue_after < 10.1
    assert metric("buildrun_infrastructure_retries_total", reason="PodEvicted") == before + 1
    assert rig.taskruns() == ["tr"]
    # Looked at early (another event): still waiting, nothing written again.
    clock.now = NOW + datetime.timedelta(seconds=4)
    result = await rig.reconcile()
    assert rig.kube.writes() == [] and result.requeue_after is not None
    assert 6 <= result.requeue_after < 6.1
    clock.now = NOW + datetime.timedelta(seconds=10)
    await rig.reconcile()
    second = run_name(rig.stored(), 2)
    assert rig.kube.writes() == [("create", "taskruns", second, ""), STATUS_WRITE]
    status = rig.stored()["status"]
    assert (status["taskRunName"], status["executor"]["name"]) == (second, second)
    assert "completionTime" not in status and "startTime" not in status
    assert rig.condition()["status"] == "Unknown"
    made = rig.kube.stored(TASKRUNS, second)
    assert made is not None and made["spec"] == {"taskSpec": {"steps": [{"name": "build"}]}}
    assert made["metadata"]["labels"] == {"buildrun.shipwright.io/name": "br"}
    assert metric("buildrun_infrastructure_retries_total", reason="PodEvicted") == before + 1


async def test_row_11_a_recorded_failure_stands_once_its_pod_is_gone(
        rig: Rig, clock: Clock) -> None:
    """A pod deleted under the build tells the failure (its deletion asked before the run
    failed) only while it is cached: it is removed within its grace period, before the
    backoff ends. The record written first decides from then on; without that, the
    reconcile after the pod's removal took the failure for the build's own and finished
    the BuildRun Failed on the run to be retried (a whole make test met it, 2026-12-06)."""
    br = retrying(rig, "2")
    rig.taskrun(br, "tr", spec={"taskSpec": {"steps": [{"name": "build"}]}},
                **tekton_status("False", "StepFailed", message="step-build failed",
                                completion_time=ago(1), pod="tr-pod"))
    the_pod = deleted(pod(), ago(5), grace=2)
    the_pod["metadata"]["labels"] = {"buildrun.shipwright.io/name": "br"}
    rig.kube.add(PODS, the_pod)
    await rig.reconcile()
    assert [a["reason"] for a in attempts(rig)] == [reasons.POD_DELETED]
    rig.kube.remove(PODS, "tr-pod")
    clock.now = NOW + datetime.timedelta(seconds=4)
    result = await rig.reconcile()  # the pod's removal wakes it within the backoff
    assert rig.kube.writes() == [] and result.requeue_after is not None
    clock.now = NOW + datetime.timedelta(seconds=10)
    await rig.reconcile()
    second = run_name(rig.stored(), 2)
    assert rig.kube.writes() == [("create", "taskruns", second, ""), STATUS_WRITE]
    assert "completionTime" not in rig.stored()["status"]


async def test_row_11_the_limit_spent_the_last_failure_is_the_outcome_written_once(
        rig: Rig, clock: Clock) -> None:
    br = retrying(rig, "1")
    evicted(rig, br)
    await rig.reconcile()
    clock.now = NOW + datetime.timedelta(seconds=10)
    await rig.reconcile()
    second = run_name(rig.stored(), 2)
    rig.kube.remove(TASKRUNS, second)
    evicted(rig, br, second)
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == [STATUS_WRITE]
    assert rig.condition()["reason"] == reasons.POD_EVICTED
    assert rig.stored()["status"]["completionTime"] == ago(1)
    assert [a["taskRun"] for a in attempts(rig)] == ["tr"]
    assert sorted(rig.taskruns()) == sorted(["tr", second])


async def test_row_11_a_run_made_before_its_status_write_was_lost_is_adopted(
        rig: Rig, clock: Clock) -> None:
    """A restart between the create and the status write: the next try's create meets
    AlreadyExists and records the run it made, no third run."""
    br = retrying(rig, "1")
    evicted(rig, br)
    await rig.reconcile()
    clock.now = NOW + datetime.timedelta(seconds=10)
    second = run_name(rig.stored(), 2)
    rig.taskrun(br, second, **tekton_status("Unknown", "Running"))
    await rig.reconcile()
    assert rig.kube.writes() == [("create", "taskruns", second, ""), STATUS_WRITE]
    assert rig.stored()["status"]["taskRunName"] == second
    assert sorted(rig.taskruns()) == sorted(["tr", second])


async def test_row_11_a_record_the_cache_has_not_seen_is_not_counted_twice(
        rig: Rig, clock: Clock) -> None:
    br = retrying(rig, "1")
    evicted(rig, br)
    await rig.reconcile()
    stale = rig.caches.buildruns.get("ns/br")
    assert stale is not None and not attempts_of(stale)
    before = metric("buildrun_infrastructure_retries_total", reason="PodEvicted")
    rig.kube.calls.clear()
    await rig.reconciler.reconcile("ns/br")  # the cache still without the record
    assert metric("buildrun_infrastructure_retries_total", reason="PodEvicted") == before
    assert len(attempts(rig)) == 1 and rig.taskruns() == ["tr"]


@pytest.mark.parametrize("reason", ["StepFailed", "TaskRunTimeout"])
async def test_row_11_never_a_builds_own_failure(rig: Rig, reason: str) -> None:
    br = retrying(rig, "3")
    rig.taskrun(br, **tekton_status("False", reason, completion_time=ago(1), pod="tr-pod"))
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == [STATUS_WRITE]
    assert rig.stored()["status"]["completionTime"] == ago(1)
    assert attempts(rig) == [] and rig.taskruns() == ["tr"]


async def test_row_11_never_a_canceled_buildruns_run(rig: Rig) -> None:
    br = retrying(rig, "3")
    rig.kube.modify(BUILDRUNS, "br", lambda o: o["spec"].update(state="BuildRunCanceled"))
    evicted(rig, br)
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.POD_EVICTED
    assert attempts(rig) == [] and rig.taskruns() == ["tr"]


async def test_row_11_off_by_default(rig: Rig) -> None:
    br = rig.buildrun(status=started())
    evicted(rig, br)
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.POD_EVICTED
    assert rig.taskruns() == ["tr"]


async def test_row_11_a_bad_annotation_is_off_and_said_in_an_event(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    br = retrying(rig, "many")
    evicted(rig, br)
    events: list[tuple[str, str]] = []
    recorder = rig.reconciler.actions.recorder

    def record(obj: JSON, kind: str, reason: str, message: str) -> None:
        events.append((reason, message))

    monkeypatch.setattr(recorder, "record", record)
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.POD_EVICTED
    assert (reasons.INFRASTRUCTURE_RETRIES_INVALID,
            f"the BuildRun's annotation {INFRASTRUCTURE_RETRIES}: 'many' is not a whole "
            f"number from 0 to {MAX_RETRIES}; infrastructure failures are not retried"
            ) in events


async def test_row_1_stops_a_later_attempts_run_the_status_never_named(rig: Rig) -> None:
    """The retry budget ran out between a retry's create and its status write: the
    recorded run's outcome is the BuildRun's, and the later attempt's run, owned but never
    named, is stopped (found by the interleavings machine: it ran on)."""
    br = rig.buildrun(status={**started(), "completionTime": ago(5), "conditions": [
        {"type": "Succeeded", "status": "False", "reason": "Failed"}]})
    rig.kube.modify(BUILDRUNS, "br", lambda o: o["metadata"].setdefault("annotations", {})
                    .update({INFRASTRUCTURE_ATTEMPTS: json.dumps([{"taskRun": "tr"}])}))
    evicted(rig, br)
    later = run_name(br, 2)
    rig.taskrun(br, later, **tekton_status("Unknown", "Running"))
    await rig.reconcile()
    assert rig.kube.writes() == [("patch", "taskruns", later, "")]


# -- the flags ------------------------------------------------------------------------------


def test_the_flags_are_off_by_default_and_read_into_the_settings() -> None:
    from controller.cli import parser, settings_from

    assert (settings_from(parser().parse_args([])).infrastructure_retries,
            settings_from(parser().parse_args([])).infrastructure_retry_delay) == (0, 10.0)
    got = settings_from(parser().parse_args(["--infrastructure-retries", "3",
                                             "--infrastructure-retry-delay", "2.5"]))
    assert (got.infrastructure_retries, got.infrastructure_retry_delay) == (3, 2.5)


@pytest.mark.parametrize(("flag", "value"), [
    ("--infrastructure-retries", "-1"), ("--infrastructure-retries", str(MAX_RETRIES + 1)),
    ("--infrastructure-retries", "x"), ("--infrastructure-retry-delay", "0")])
def test_a_bad_flag_is_refused_with_one_line(flag: str, value: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from controller.cli import parser

    with pytest.raises(SystemExit) as exited:
        parser().parse_args([flag, value])
    assert exited.value.code == 2
    assert f"argument {flag}: {value!r} is not a" in capsys.readouterr().err
