"""What setup.py wires: which informer events queue which BuildRun, at which priority, and
when (issue 34: after a restart new work first, a finished BuildRun needing nothing costs
no reconcile, one with a TTL waits for it; one reconcile per finish). Events are fed to
the informers' handlers as the informers would emit them; no server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.buildrun import setup as buildrun_setup
from controller.buildrun.annotations import RUN_POLICY
from controller.buildrun.caches import OWN_RUNS, slim_pod
from controller.buildrun.outcomes import waiting_words
from controller.buildrun.reconciler import BuildRunReconciler
from controller.buildrun.setup import FINISH_PRIORITY, PROGRESS_PRIORITY
from controller.runtime.controller import LOW_PRIORITY, Controller
from controller.runtime.informers import EventType, Informer, InformerFactory
from controller.runtime.kube import JSON, PODS
from controller.runtime.timestamps import format_time, now
from controller.settings import Settings
from controller.shipwright.resources import BUILDRUNS, BUILDS, PIPELINERUNS, TASKRUNS
from tests.fakekube import FakeKube
from tests.harness import metric

DONE_AT = format_time(now())  # a retention TTL of an hour has not run out


class Wired:
    def __init__(self) -> None:
        self.informers = InformerFactory(None, None, None)  # type: ignore[arg-type]
        # No call reaches the client: the informers never start and no worker runs.
        self.controller: Controller = buildrun_setup.setup(
            FakeKube(), Settings(), None, self.informers)  # type: ignore[arg-type]

    def emit(self, resource: Any, kind: EventType, obj: JSON, old: JSON | None = None, *,
             initial: bool = False) -> None:
        """What the informer does with an event: the store first, then the handlers."""
        informer: Informer = self.informers.get(resource)
        if kind == "DELETED":
            informer.store.remove(f"ns/{obj['metadata']['name']}")
        else:
            informer.store.upsert(obj)
        informer._emit(kind, obj, old, initial)

    async def queued(self) -> list[tuple[str, int]]:
        q = self.controller.queue
        return [await q.get_with_priority() for _ in range(len(q))]

    def waiting(self) -> dict[str, int]:
        """Keys waiting in add_after, with the priority they will be queued at."""
        return dict(self.controller.queue._priority)


def buildrun(name: str, rv: str = "1", **status: Any) -> JSON:
    return {"apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun",
            "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}",
                         "resourceVersion": rv, "generation": 1},
            "spec": {"build": {"name": "b"}}, "status": status}


def finished(name: str, **spec: Any) -> JSON:
    br = buildrun(name, taskRunName=f"{name}-tr", executor={"kind": "TaskRun",
                                                          "name": f"{name}-tr"},
                  completionTime=DONE_AT, conditions=[
                      {"type": "Succeeded", "status": "True", "reason": "Succeeded"}])
    br["spec"].update(spec)
    return br


def taskrun(owner: str, state: str, rv: str = "1") -> JSON:
    status: JSON = {"conditions": [{"type": "Succeeded", "status": state, "reason": state}]}
    if state != "Unknown":
        status["completionTime"] = DONE_AT
    return {"metadata": {"namespace": "ns", "name": f"{owner}-tr", "resourceVersion": rv,
                         "labels": {"buildrun.shipwright.io/name": owner},
                         "ownerReferences": [{"kind": "BuildRun", "name": owner,
                                              "uid": f"uid-{owner}", "controller": True}]},
            "spec": {}, "status": status}


@pytest.fixture
def wired() -> Wired:
    return Wired()


def test_runs_and_pods_are_cached_by_the_buildrun_label_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUILDRUN_EXECUTOR", "PipelineRun")
    w = Wired()
    for resource in (TASKRUNS, PIPELINERUNS, PODS):
        assert w.informers.get(resource).label_selector == OWN_RUNS == (
            "buildrun.shipwright.io/name")
    assert w.informers.get(PODS).transform is slim_pod
    assert w.informers.get(BUILDRUNS).label_selector is None


async def test_after_a_restart_new_work_comes_before_the_listed_backlog(wired: Wired) -> None:
    wired.emit(BUILDRUNS, "ADDED", buildrun("listed-new"), initial=True)
    wired.emit(BUILDRUNS, "ADDED", buildrun("listed-running", taskRunName="x"), initial=True)
    wired.emit(BUILDRUNS, "ADDED", buildrun("created"))  # from the watch, after the list
    assert await wired.queued() == [("ns/created", 0), ("ns/listed-new", LOW_PRIORITY),
                                    ("ns/listed-running", LOW_PRIORITY)]


async def test_a_listed_finished_buildrun_costs_no_reconcile_and_a_ttl_waits(
        wired: Wired) -> None:
    for i in range(3):
        wired.emit(TASKRUNS, "ADDED", taskrun(f"done-{i}", "True"), initial=True)
        wired.emit(BUILDRUNS, "ADDED", finished(f"done-{i}"), initial=True)
    wired.emit(BUILDRUNS, "ADDED", finished("kept", retention={"ttlAfterSucceeded": "1h"}),
               initial=True)
    assert await wired.queued() == []
    assert wired.waiting() == {"ns/kept": LOW_PRIORITY}
    # Its run still going: row 1, now, whichever of the two is listed first.
    wired.emit(BUILDRUNS, "ADDED", finished("stop-me"), initial=True)
    wired.emit(TASKRUNS, "ADDED", taskrun("stop-me", "Unknown"), initial=True)
    assert await wired.queued() == [("ns/stop-me", LOW_PRIORITY)]
    wired.emit(TASKRUNS, "ADDED", taskrun("stop-me-too", "Unknown"), initial=True)
    wired.emit(BUILDRUNS, "ADDED", finished("stop-me-too"), initial=True)
    assert await wired.queued() == [("ns/stop-me-too", LOW_PRIORITY)]


async def test_a_finish_is_one_reconcile(wired: Wired) -> None:
    """The TaskRun's finish queues the BuildRun; the BuildRun's own completion write (a
    phase change) queues nothing more when nothing is left to do."""
    running = buildrun("br", taskRunName="br-tr", conditions=[
        {"type": "Succeeded", "status": "Unknown", "reason": "Running"}])
    wired.emit(BUILDRUNS, "ADDED", running)
    wired.emit(TASKRUNS, "ADDED", taskrun("br", "Unknown"))
    assert await wired.queued() == [("ns/br", 0)]
    wired.controller.queue.done("ns/br")
    wired.emit(TASKRUNS, "MODIFIED", taskrun("br", "True", rv="2"), taskrun("br", "Unknown"))
    assert await wired.queued() == [("ns/br", FINISH_PRIORITY)]
    wired.controller.queue.done("ns/br")
    done = finished("br")
    done["metadata"]["resourceVersion"] = "3"
    wired.emit(BUILDRUNS, "MODIFIED", done, running)
    assert await wired.queued() == []
    assert wired.waiting() == {}
    # With a retention TTL, the completion leaves a wake at the TTL, not a reconcile.
    kept = copy.deepcopy(done)
    kept["spec"]["retention"] = {"ttlAfterSucceeded": "1h"}
    kept["metadata"]["resourceVersion"] = "4"
    wired.emit(BUILDRUNS, "MODIFIED", kept, running)
    assert await wired.queued() == []
    assert wired.waiting() == {"ns/br": 0}


async def test_a_run_s_end_goes_first_new_work_next_and_progress_last(wired: Wired) -> None:
    """Issue 42 part 3: with more queued than the workers take, a run's end (its outcome is
    what a user waits for) goes before new BuildRuns, and those (nothing builds until their
    TaskRun exists) before a run's progress, which only tells; a key queued again at a
    higher priority moves up; the first list's backlog stays behind all."""
    wired.emit(BUILDRUNS, "ADDED", buildrun("listed"), initial=True)
    for name in ("a", "b"):
        wired.emit(BUILDRUNS, "ADDED", buildrun(name, taskRunName=f"{name}-tr"))
        wired.emit(TASKRUNS, "ADDED", taskrun(name, "Unknown"))
    wired.emit(TASKRUNS, "ADDED", taskrun("running", "Unknown"))
    wired.emit(TASKRUNS, "ADDED", taskrun("slow", "Unknown"))
    wired.emit(BUILDRUNS, "ADDED", buildrun("new"))
    wired.emit(TASKRUNS, "MODIFIED", taskrun("ended", "False", rv="2"),
               taskrun("ended", "Unknown"))
    wired.emit(TASKRUNS, "MODIFIED", taskrun("running", "True", rv="2"),
               taskrun("running", "Unknown"))  # ended too: moves up, behind "ended"
    wired.emit(TASKRUNS, "DELETED", taskrun("gone", "Unknown"))  # row 16: an end
    assert await wired.queued() == [
        ("ns/ended", FINISH_PRIORITY), ("ns/running", FINISH_PRIORITY),
        ("ns/gone", FINISH_PRIORITY), ("ns/a", 0), ("ns/b", 0), ("ns/new", 0),
        ("ns/slow", PROGRESS_PRIORITY), ("ns/listed", LOW_PRIORITY)]
    assert FINISH_PRIORITY > 0 > PROGRESS_PRIORITY > LOW_PRIORITY


async def test_a_builds_event_wakes_its_new_buildruns_and_reads_no_finished_one(
        wired: Wired) -> None:
    """Row 9: a BuildRun waiting for its Build's validation is woken by the Build's
    status write; the Build's finished BuildRuns (frozen in the cache) are not even read."""
    for i in range(3):
        wired.emit(BUILDRUNS, "ADDED", finished(f"done-{i}"), initial=True)
    wired.emit(BUILDRUNS, "ADDED", buildrun("waiting"), initial=True)
    wired.emit(BUILDRUNS, "ADDED", buildrun("started", taskRunName="x"), initial=True)
    await wired.queued()
    wired.controller.queue.done("ns/waiting")
    wired.controller.queue.done("ns/started")
    store = wired.informers.get(BUILDRUNS).store
    assert sum(isinstance(v, bytes) for v in store._objects.values()) == 3
    decoded: list[str] = []
    get, by_index = store.get, store.by_index
    store.get = lambda key: decoded.append(key) or get(key)  # type: ignore[method-assign,func-returns-value]
    store.by_index = lambda *a: decoded.append(str(a)) or by_index(*a)  # type: ignore[method-assign,func-returns-value]
    build = {"metadata": {"namespace": "ns", "name": "b", "resourceVersion": "9"},
             "status": {"registered": "True"}}
    wired.emit(BUILDS, "MODIFIED", build, {**build, "metadata": {**build["metadata"],
                                                                  "resourceVersion": "8"}})
    assert await wired.queued() == [("ns/waiting", 0)]
    assert decoded == []


async def test_a_pod_wakes_its_buildrun_only_on_its_way_out(wired: Wired) -> None:
    """A running pod's events wake nothing, but those of one on its way out (Tekton deletes
    the pod of a run it cancels): its BuildRun awaits its end, and once it is gone its last
    state is kept (row 14). (One that cannot start: the test below.)"""
    pods = wired.informers.get(PODS)
    pod: JSON = {"metadata": {"namespace": "ns", "name": "br-pod", "resourceVersion": "1",
                              "labels": {"buildrun.shipwright.io/name": "br"}},
                 "status": {"phase": "Running"}}
    pods._on_event({"type": "ADDED", "object": copy.deepcopy(pod)})
    assert await wired.queued() == []
    going = copy.deepcopy(pod)
    going["metadata"].update(resourceVersion="2", deletionTimestamp=DONE_AT)
    pods._on_event({"type": "MODIFIED", "object": copy.deepcopy(going)})
    assert await wired.queued() == [("ns/br", FINISH_PRIORITY)]
    wired.controller.queue.done("ns/br")
    ended = copy.deepcopy(going)
    ended["metadata"]["resourceVersion"] = "3"
    ended["status"] = {"phase": "Succeeded", "containerStatuses": [
        {"name": "step-push", "state": {"terminated": {"exitCode": 0, "message": "[]",
                                                       "finishedAt": DONE_AT}}}]}
    pods._on_event({"type": "DELETED", "object": copy.deepcopy(ended)})
    assert await wired.queued() == [("ns/br", FINISH_PRIORITY)]
    # Kept as slim_pod keeps a pod on its way out: its label, phase, containers' ends.
    reconciler = wired.controller.reconciler
    assert isinstance(reconciler, BuildRunReconciler)
    assert reconciler.caches.ended_pods.get("ns/br-pod") == {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "ns", "name": "br-pod", "resourceVersion": "3",
                     "deletionTimestamp": DONE_AT,
                     "labels": {"buildrun.shipwright.io/name": "br"}},
        "status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "step-push", "state": {"terminated": {"exitCode": 0, "message": "[]"}}}]}}


async def test_a_pod_wakes_its_buildrun_when_why_it_waits_changes_its_meaning(
        wired: Wired) -> None:
    """The scheduler's and the kubelet's words reach the BuildRun's message (row 21): a
    pod event wakes it when they change their meaning, not when only a back-off's duration
    or a timestamp moves, and the pod cache keeps them (slim_pod)."""
    pods = wired.informers.get(PODS)
    rv = iter(range(1, 100))

    async def send(status: JSON) -> list[tuple[str, int]]:
        pod = {"metadata": {"namespace": "ns", "name": "br-pod", "resourceVersion":
                            str(next(rv)), "labels": {"buildrun.shipwright.io/name": "br"}},
               "status": {"phase": "Pending", **status}}
        pods._on_event({"type": "MODIFIED" if "ns/br-pod" in pods.store else "ADDED",
                        "object": pod})
        queued = await wired.queued()
        for key, _ in queued:
            wired.controller.queue.done(key)
        return queued

    def unschedulable(at: str) -> JSON:
        return {"conditions": [{"type": "PodScheduled", "status": "False",
                                "reason": "Unschedulable", "lastTransitionTime": at,
                                "message": "0/1 nodes are available: 1 Insufficient cpu."}]}

    def backoff(seconds: int) -> JSON:
        return {"conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "step-build", "state": {"waiting": {
                    "reason": "ImagePullBackOff",
                    "message": f'Back-off {seconds}s pulling image "r/x:1"'}}}]}

    assert await send(unschedulable("2026-12-06T08:00:00Z")) == [("ns/br", PROGRESS_PRIORITY)]
    assert await send(unschedulable("2026-12-06T08:00:09Z")) == []
    assert await send(backoff(10)) == [("ns/br", PROGRESS_PRIORITY)]
    assert await send(backoff(20)) == []
    assert pods.store.get("ns/br-pod")["status"]["containerStatuses"] == [  # type: ignore[index]
        {"name": "step-build", "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": 'Back-off 20s pulling image "r/x:1"'}}}]
    # Pulled: nothing to say any more, the BuildRun says Tekton's words again.
    assert await send({"conditions": [{"type": "PodScheduled", "status": "True"}]}) == [
        ("ns/br", PROGRESS_PRIORITY)]
    assert await send({"conditions": [{"type": "PodScheduled", "status": "True"}]}) == []


def test_buildrun_waiting_counts_the_buildruns_waiting_now_by_reason(wired: Wired) -> None:
    """The gauge is read off the BuildRun cache's index at scrape time: a BuildRun counts
    under the reason its condition shows while its run has not reported Running, and no
    more once it runs, is being cancelled or has finished."""
    def started(name: str, reason: str, status: str = "Unknown") -> JSON:
        return buildrun(name, taskRunName=f"{name}-tr", conditions=[
            {"type": "Succeeded", "status": status, "reason": reason, "message": "m"}])

    def waiting() -> dict[str, float]:
        return {reason: metric("buildrun_waiting", reason=reason) for reason in (
            "ExceededNodeResources", "PullImageFailed", "Pending", "Running",
            "BuildRunCanceled", "Other")}

    for br in (started("a", "ExceededNodeResources"), started("b", "ExceededNodeResources"),
               started("c", "PullImageFailed"), started("d", "Running"),
               started("e", "BuildRunCanceled"), started("f", "made up by hand"),
               buildrun("new"), finished("done")):
        wired.emit(BUILDRUNS, "ADDED", br)
    assert waiting() == {"ExceededNodeResources": 2, "PullImageFailed": 1, "Pending": 0,
                         "Running": 0, "BuildRunCanceled": 0, "Other": 1}
    wired.emit(BUILDRUNS, "MODIFIED", started("a", "Running"), started("a", "x"))
    wired.emit(BUILDRUNS, "DELETED", started("c", "PullImageFailed"))
    assert waiting()["ExceededNodeResources"] == 1
    assert waiting()["PullImageFailed"] == 0


@pytest.mark.parametrize("deleting", [False, True], ids=["live", "on-its-way-out"])
@pytest.mark.parametrize("status", [
    {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/1 nodes are available: 1 Insufficient cpu.",
         "lastTransitionTime": "2026-12-06T08:00:00Z"}]},
    {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
     "containerStatuses": [
         {"name": "step-source-default", "state": {"running": {"startedAt": "x"}}},
         {"name": "step-build", "state": {"waiting": {
             "reason": "ImagePullBackOff", "message": 'Back-off pulling image "r/x:1"'}},
          "image": "r/x:1", "imageID": "", "ready": False, "restartCount": 0}]},
    {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}],
     "containerStatuses": [{"name": "step-build", "state": {"running": {}}}]},
], ids=["unschedulable", "image", "running"])
def test_the_pod_cache_keeps_why_a_pod_waits_and_no_more(status: JSON, deleting: bool) -> None:
    """slim_pod keeps what waiting_words reads (Tekton deletes the pod of a run it fails:
    the words stay until it is gone), and nothing of a pod that waits for neither."""
    pod: JSON = {"metadata": {"namespace": "ns", "name": "p", "resourceVersion": "1",
                              "labels": {"buildrun.shipwright.io/name": "br", "x": "y"}},
                 "spec": {"containers": [{"name": "step-build", "image": "r/x:1"}]},
                 "status": status}
    if deleting:
        pod["metadata"]["deletionTimestamp"] = DONE_AT
    slim = slim_pod(copy.deepcopy(pod))
    assert waiting_words(slim) == waiting_words(pod)
    assert slim["metadata"]["labels"] == {"buildrun.shipwright.io/name": "br"}
    if waiting_words(pod) is None and not deleting:
        assert "status" not in slim, slim


def serial_build(policy: str | None) -> JSON:
    meta: JSON = {"namespace": "ns", "name": "b", "resourceVersion": "1"}
    if policy is not None:
        meta["annotations"] = {RUN_POLICY: policy}
    return {"metadata": meta, "status": {"registered": "True"}}


async def test_a_serial_build_s_buildrun_that_ends_wakes_the_build_s_waiting_ones(
        wired: Wired) -> None:
    """Issue 43: the waiting BuildRuns of a Serial Build are woken when the one ahead
    finishes, is deleted, or its run ends (one a backstop's verdict left stopping); not
    when it merely starts. Without the annotation, none of that."""
    wired.emit(BUILDS, "ADDED", serial_build("Serial"), initial=True)
    running = buildrun("first", taskRunName="first-tr")
    wired.emit(BUILDRUNS, "ADDED", running, initial=True)
    wired.emit(BUILDRUNS, "ADDED", buildrun("waiting"), initial=True)
    await wired.queued()
    for key in ("ns/first", "ns/waiting"):
        wired.controller.queue.done(key)
    done = finished("first")
    done["metadata"]["resourceVersion"] = "2"
    wired.emit(BUILDRUNS, "MODIFIED", done, running)
    assert await wired.queued() == [("ns/waiting", 0)]
    wired.controller.queue.done("ns/waiting")
    wired.emit(TASKRUNS, "MODIFIED", {**taskrun("first", "True", rv="2"), "metadata": {
        **taskrun("first", "True", rv="2")["metadata"],
        "labels": {"buildrun.shipwright.io/name": "first", "build.shipwright.io/name": "b"}}},
        taskrun("first", "Unknown"))
    assert ("ns/waiting", 0) in await wired.queued()
    for key in ("ns/waiting", "ns/first"):
        wired.controller.queue.done(key)
    wired.emit(BUILDRUNS, "DELETED", done)
    assert await wired.queued() == [("ns/waiting", 0)]
    wired.controller.queue.done("ns/waiting")
    # Without the annotation, a finish wakes no other BuildRun.
    wired.emit(BUILDS, "MODIFIED", serial_build(None), serial_build("Serial"))
    await wired.queued()
    wired.controller.queue.done("ns/waiting")
    again = buildrun("second", taskRunName="second-tr")
    wired.emit(BUILDRUNS, "ADDED", again)
    await wired.queued()
    wired.controller.queue.done("ns/second")
    wired.emit(BUILDRUNS, "MODIFIED", {**finished("second"), "metadata": {
        **finished("second")["metadata"], "resourceVersion": "5"}}, again)
    assert await wired.queued() == []


def created(name: str, at: str) -> JSON:
    br = buildrun(name)
    br["metadata"]["creationTimestamp"] = at
    return br


async def test_a_new_buildrun_of_a_serial_build_wakes_the_waiting_ones_it_changes(
        wired: Wired) -> None:
    """SerialLatestOnly: those before it (superseded, row 10). Serial: only those after it
    in the order (created in the same second, its name first: it is now just ahead of
    them); one created after them changes nothing for them."""
    wired.emit(BUILDS, "ADDED", serial_build("SerialLatestOnly"), initial=True)
    wired.emit(BUILDRUNS, "ADDED", created("older", "2026-12-04T01:00:00Z"), initial=True)
    await wired.queued()
    wired.controller.queue.done("ns/older")
    wired.emit(BUILDRUNS, "ADDED", created("newer", "2026-12-04T01:00:01Z"))
    assert sorted(await wired.queued()) == [("ns/newer", 0), ("ns/older", 0)]
    for key in ("ns/newer", "ns/older"):
        wired.controller.queue.done(key)
    wired.emit(BUILDS, "MODIFIED", serial_build("Serial"), serial_build("SerialLatestOnly"))
    await wired.queued()
    for key in ("ns/newer", "ns/older"):
        wired.controller.queue.done(key)
    wired.emit(BUILDRUNS, "ADDED", created("newest", "2026-12-04T01:00:02Z"))
    assert await wired.queued() == [("ns/newest", 0)]
    wired.controller.queue.done("ns/newest")
    wired.emit(BUILDRUNS, "ADDED", created("a-first", "2026-12-04T01:00:01Z"))
    assert sorted(await wired.queued()) == [("ns/a-first", 0), ("ns/newer", 0),
                                            ("ns/newest", 0)]


def test_the_serial_queues_gauge_counts_the_waiting_buildruns_of_the_cache(
        wired: Wired) -> None:
    """buildrun_serial_waiting: NEW BuildRuns whose condition says SerialRunWaiting, by
    namespace, read off the BuildRun cache when scraped; one that starts leaves it."""
    waiting = buildrun("w", conditions=[{"type": "Succeeded", "status": "Unknown",
                                         "reason": "SerialRunWaiting"}])
    wired.emit(BUILDRUNS, "ADDED", waiting, initial=True)
    wired.emit(BUILDRUNS, "ADDED", buildrun("new"), initial=True)
    assert metric("buildrun_serial_waiting", namespace="ns") == 1
    started = buildrun("w", rv="2", taskRunName="w-tr", conditions=[
        {"type": "Succeeded", "status": "Unknown", "reason": "Pending"}])
    wired.emit(BUILDRUNS, "MODIFIED", started, waiting)
    assert metric("buildrun_serial_waiting", namespace="ns") == 0
