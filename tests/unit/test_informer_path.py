"""The informer path is total: whatever JSON a watched object holds, nothing the informers
run on it as it arrives raises (issue 39: a TaskRun whose status.conditions was a string
failed the TaskRun informer on every relist, and no BuildRun of its namespace finished).

The informer path is everything that reads an object between the API server's answer and
the work queue: the owner's transform, the freeze rule, strip_noise and the packing, the
indexers, the handlers and the predicates and `next_look` they call, for every kind the
process watches, wired as `controller.app.wire` wires them. Each property draws a small
world of objects of every watched kind, named so that they refer to one another (a
BuildRun's TaskRun, its generated ServiceAccount, its Build), with any JSON at all in
place of any field the code reads (`shaped`), and feeds it through the informers' own
event and list paths. It holds when no object was quarantined and no handler raised:
the quarantine (informers.Informer._admit) is the net under these functions, not a
licence for them to raise.

Beside the properties, the quarantine itself, with a transform that raises on purpose:
the object is held out (logged once, counted), the others keep flowing, the cache keeps
its last good version, and the next version that can be prepared is taken.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from controller.app import wire
from controller.buildrun.executors import TASKRUN_CANCELLED
from controller.runtime.events import EventRecorder
from controller.runtime.informers import HANDLER_FAILURES, Informer, InformerFactory
from controller.runtime.kube import JSON, PODS, SECRETS, SERVICEACCOUNTS, Resource
from controller.settings import Settings
from controller.shipwright.labels import LABEL_BUILD, LABEL_BUILD_GENERATION, LABEL_BUILDRUN
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    PIPELINERUNS,
    TASKRUNS,
)
from tests.fakekube import FakeKube
from tests.unit.runtime.test_informers import ScriptedKube, page
from tests.virtualtime import run

# -- any JSON, and JSON shaped like an object but for any field ----------------------------

ANY_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)

# The few strings the code compares fields with, so that drawn objects reach its branches.
NAMES = st.sampled_from(["a", "b", "a-tr"])
TIMES = st.sampled_from(["2026-12-04T00:00:00Z", "2026-12-04T00:00:00.5Z", "", "yesterday"])
DURATIONS = st.sampled_from(["1h", "10m0s", "", "-1s", "forever", "1"])
CONDITION = {"type": st.sampled_from(["Succeeded", "Ready", ""]),
             "status": st.sampled_from(["True", "False", "Unknown", ""]),
             "reason": st.sampled_from(["Running", "Succeeded", "Failed", "TaskRunCancelled",
                                         "TaskRunTimeout", "PodEvicted", "Pending"]),
             "message": st.text(max_size=8), "lastTransitionTime": TIMES}
OWNER = {"kind": st.sampled_from(["BuildRun", "Build", "Pod"]), "name": NAMES,
         "uid": st.sampled_from(["uid-a", "uid-b"]), "controller": st.booleans(),
         "apiVersion": st.sampled_from(["shipwright.io/v1beta1", "tekton.dev/v1"])}
LABELS = {LABEL_BUILDRUN: NAMES, LABEL_BUILD: NAMES, LABEL_BUILD_GENERATION: st.text(max_size=3)}
RETENTION = {"ttlAfterSucceeded": DURATIONS, "ttlAfterFailed": DURATIONS,
             "succeededLimit": st.integers(-1, 3), "failedLimit": st.integers(-1, 3),
             "atBuildDeletion": st.booleans()}
SECRET_REF = {"name": NAMES}


def shaped(template: Any) -> st.SearchStrategy[Any]:
    """Values shaped as `template` says at every level, but where any node, at any depth,
    may be any JSON instead. A dict template is an object whose keys may each be there or
    not; a one-item list template a list of such items; a strategy a leaf."""
    if isinstance(template, dict):
        inner: st.SearchStrategy[Any] = st.fixed_dictionaries(
            {}, optional={key: shaped(value) for key, value in template.items()})
    elif isinstance(template, list):
        inner = st.lists(shaped(template[0]), max_size=3)
    else:
        inner = template
    return st.one_of(inner, ANY_JSON)


def metadata(**more: Any) -> st.SearchStrategy[JSON]:
    """An object's metadata: a name, namespace and resourceVersion as every API server
    sends them (the cache's key), every other field the code reads shaped."""
    return st.builds(
        lambda name, rv, rest: {"name": name, "namespace": "ns", "resourceVersion": rv,
                                **rest},
        NAMES, st.sampled_from(["1", "2", "3"]),
        st.fixed_dictionaries({}, optional={key: shaped(value) for key, value in {
            "uid": st.sampled_from(["uid-a", "uid-b"]), "generation": st.integers(0, 3),
            "creationTimestamp": TIMES, "deletionTimestamp": TIMES, "labels": LABELS,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                            st.text(max_size=4)},
            "ownerReferences": [OWNER], "managedFields": [ANY_JSON], **more}.items()}))


def kind_of(meta: st.SearchStrategy[JSON], **fields: Any) -> st.SearchStrategy[JSON]:
    return st.builds(lambda m, rest: {"metadata": m, **rest}, meta,
                     st.fixed_dictionaries({}, optional={k: shaped(v)
                                                         for k, v in fields.items()}))


BUILD_SPEC = {"strategy": {"name": NAMES, "kind": st.sampled_from(["BuildStrategy",
                                                                  "ClusterBuildStrategy"])},
              "source": {"type": st.sampled_from(["Git", "OCI", "Local"]),
                         "git": {"url": st.text(max_size=8), "cloneSecret": NAMES},
                         "ociArtifact": {"image": st.text(max_size=8), "pullSecret": NAMES}},
              "output": {"image": st.text(max_size=8), "pushSecret": NAMES},
              "retention": RETENTION, "timeout": DURATIONS, "paramValues": [ANY_JSON]}
RUN_STATUS = {"conditions": [CONDITION], "startTime": TIMES, "completionTime": TIMES,
              "podName": NAMES, "results": [{"name": st.text(max_size=6), "value": ANY_JSON}],
              "steps": [ANY_JSON], "taskSpec": ANY_JSON, "provenance": ANY_JSON,
              "childReferences": [{"kind": st.just("TaskRun"), "name": NAMES}],
              "pipelineSpec": ANY_JSON}

OBJECTS: dict[Resource, st.SearchStrategy[JSON]] = {
    BUILDRUNS: kind_of(metadata(), spec={
        "build": {"name": NAMES, "spec": BUILD_SPEC}, "state": st.just("BuildRunCanceled"),
        "serviceAccount": st.sampled_from([".generate", "a", ""]), "retention": RETENTION,
        "timeout": DURATIONS}, status={
        "completionTime": TIMES, "startTime": TIMES, "taskRunName": NAMES,
        "executor": {"kind": st.sampled_from(["TaskRun", "PipelineRun", "Job"]),
                     "name": NAMES},
        "conditions": [CONDITION], "buildSpec": BUILD_SPEC}),
    BUILDS: kind_of(metadata(), spec=BUILD_SPEC, status={
        "registered": st.sampled_from(["True", "False", ""]), "reason": st.text(max_size=4)}),
    BUILDSTRATEGIES: kind_of(metadata(), spec={"steps": [ANY_JSON], "parameters": [ANY_JSON]}),
    CLUSTERBUILDSTRATEGIES: kind_of(
        metadata().map(lambda m: {k: v for k, v in m.items() if k != "namespace"}),
        spec={"steps": [ANY_JSON]}),
    TASKRUNS: kind_of(metadata(), spec={
        "status": st.just(TASKRUN_CANCELLED), "statusMessage": st.text(max_size=4),
        "timeout": DURATIONS, "taskSpec": ANY_JSON}, status=RUN_STATUS),
    PIPELINERUNS: kind_of(metadata(), spec={
        "status": st.just("Cancelled"), "timeouts": {"pipeline": DURATIONS},
        "pipelineSpec": ANY_JSON}, status=RUN_STATUS),
    SERVICEACCOUNTS: kind_of(metadata(), secrets=[SECRET_REF]),
    PODS: kind_of(metadata(), spec={"containers": [{"name": NAMES}]}, status={
        "reason": st.sampled_from(["Evicted", ""]),
        "initContainerStatuses": [{"state": {"terminated": {"finishedAt": TIMES,
                                                            "exitCode": st.integers(0, 2)}}}],
        "containerStatuses": [{"name": NAMES, "state": {"terminated": {
            "exitCode": st.integers(0, 2), "reason": st.just("OOMKilled")}}}]}),
    SECRETS: kind_of(metadata()),
}


# -- the process's informers, fed -----------------------------------------------------------

def wired(executor: str) -> InformerFactory:
    """The informers as `controller.app.wire` makes them, handlers and all; no client call
    is made (nothing runs them: events are fed below)."""
    informers = InformerFactory(None, None, None)  # type: ignore[arg-type]
    kube = FakeKube()
    recorder = EventRecorder(kube, "test", "test")  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BUILDRUN_EXECUTOR", executor)
        wire(kube, Settings(), recorder, informers)  # type: ignore[arg-type]
    return informers


def failures() -> dict[str, float]:
    """informer_handler_failures_total by resource (its own samples only: a collection of
    the whole registry cost more than the example)."""
    return {sample.labels["resource"]: sample.value
            for family in HANDLER_FAILURES.collect() for sample in family.samples
            if sample.name.endswith("_total")}


def feed(informer: Informer, versions: list[JSON]) -> None:
    """Each version as the watch brings it (ADDED, then MODIFIED), then a relist that
    finds the last one (the list path), then its deletion; the objects' resourceVersions
    moved on so every version is news."""
    for number, obj in enumerate(versions):
        obj["metadata"]["resourceVersion"] = f"{number + 10}"
        informer._on_event({"type": "MODIFIED", "object": obj})


def relist(informer: Informer, items: list[JSON]) -> None:
    informer.kube = ScriptedKube([page(items, "99")], [])  # type: ignore[assignment]
    run(informer._list())


# One world: up to a few versions of a few objects of every watched kind.
WORLD = st.fixed_dictionaries({resource: st.lists(objects, max_size=4)
                               for resource, objects in OBJECTS.items()})


def copies(world: dict[Resource, list[JSON]]) -> Iterator[tuple[Resource, list[JSON]]]:
    for resource, objects in world.items():
        yield resource, [_copy(o) for o in objects]


def _copy(obj: Any) -> Any:
    # Each informer prepares (transforms, strips) its objects in place.
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


@pytest.mark.parametrize("executor", ["TaskRun", "PipelineRun"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=WORLD)
def test_no_object_stops_an_informer(executor: str, world: dict[Resource, list[JSON]]) -> None:
    """Every watched kind at once, so that each handler reads the others' stores holding
    any JSON too (a BuildRun's next_look reads its TaskRun, its ServiceAccount)."""
    informers = wired(executor)
    before = failures()
    by_resource = {i.resource: i for i in informers.all()}
    for resource, objects in copies(world):
        if resource in by_resource:
            feed(by_resource[resource], objects)
    for resource, objects in copies(world):
        if resource in by_resource:
            # A relist finds the last version of each (and deletes the rest).
            last = {(o["metadata"].get("namespace", ""),
                     o["metadata"]["name"]): o for o in objects}
            relist(by_resource[resource], list(last.values()))
    for resource, objects in copies(world):
        if resource in by_resource:
            for obj in objects:
                by_resource[resource]._on_event({"type": "DELETED", "object": obj})
    assert {i.resource.plural: i.quarantined for i in informers.all()
            if i.quarantined} == {}
    assert failures() == before


def test_every_watched_kind_is_drawn() -> None:
    """The world above covers every kind the process watches, in either executor mode."""
    for executor in ("TaskRun", "PipelineRun"):
        assert {i.resource for i in wired(executor).all()} <= OBJECTS.keys()


# -- the quarantine -------------------------------------------------------------------------

THINGS = Resource("example.com", "v1", "quarantinethings", "Thing")


def thing(name: str, rv: str, good: bool = True) -> JSON:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
            "spec": {"good": good}}


def picky(obj: JSON) -> JSON:
    """A transform with a bug: it raises on some objects."""
    if not obj["spec"]["good"]:
        raise ValueError("cannot read this one")
    return obj


def test_an_object_that_cannot_be_prepared_is_held_out_and_the_rest_flow(
        caplog: pytest.LogCaptureFixture) -> None:
    informer = Informer(None, THINGS, transform=picky)  # type: ignore[arg-type]
    seen: list[tuple[str, str, str | None]] = []
    informer.add_handler(lambda kind, new, old, _: seen.append(
        (kind, new["metadata"]["resourceVersion"],
         old["metadata"]["resourceVersion"] if old else None)))

    def quarantines() -> float:
        return REGISTRY.get_sample_value("informer_quarantines_total",
                                         {"resource": THINGS.plural}) or 0.0

    counted = quarantines()
    with caplog.at_level(logging.WARNING):
        informer._on_event({"type": "ADDED", "object": thing("a", "1")})
        informer._on_event({"type": "MODIFIED", "object": thing("a", "2", good=False)})
        informer._on_event({"type": "MODIFIED", "object": thing("a", "3", good=False)})
        informer._on_event({"type": "ADDED", "object": thing("b", "4")})
    # The stream went on past it: b is cached, and the informer's version is b's.
    assert seen == [("ADDED", "1", None), ("ADDED", "4", None)]
    assert informer._rv == "4"
    # a is held out, its last good version cached; logged and counted once.
    assert list(informer.quarantined) == ["ns/a"]
    assert informer.store.get("ns/a") == {**thing("a", "1"), "apiVersion": "example.com/v1",
                                          "kind": "Thing"}
    assert quarantines() == counted + 1
    assert REGISTRY.get_sample_value("informer_quarantined_objects",
                                     {"resource": THINGS.plural}) == 1
    assert [r.message for r in caplog.records].count(
        "cannot cache this object: held out of the cache until a version of it can be") == 1
    # A relist that finds it still bad keeps it out, and still cached as it was.
    relist(informer, [thing("a", "5", good=False), thing("b", "4")])
    assert list(informer.quarantined) == ["ns/a"] and "ns/a" in informer.store
    # Its next good version is taken as news (old: the last version cached).
    informer._on_event({"type": "MODIFIED", "object": thing("a", "6")})
    assert seen[-1] == ("MODIFIED", "6", "1")
    assert informer.quarantined == {}
    assert REGISTRY.get_sample_value("informer_quarantined_objects",
                                     {"resource": THINGS.plural}) == 0


def test_a_quarantined_object_deleted_is_told_as_deleted() -> None:
    informer = Informer(None, THINGS, transform=picky)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, new, old, _: seen.append(
        (kind, new["metadata"]["resourceVersion"])))
    informer._on_event({"type": "ADDED", "object": thing("a", "1", good=False)})
    informer._on_event({"type": "ADDED", "object": thing("c", "2", good=False)})
    assert set(informer.quarantined) == {"ns/a", "ns/c"} and len(informer.store) == 0
    # Deleted while held out: the handlers hear of it (its metadata), and it is released.
    informer._on_event({"type": "DELETED", "object": thing("a", "3", good=False)})
    assert seen == [("DELETED", "3")]
    # Gone from a relist: released too.
    relist(informer, [])
    assert informer.quarantined == {}


def test_a_handler_that_raises_is_counted_and_the_others_still_run() -> None:
    informer = Informer(None, THINGS)  # type: ignore[arg-type]
    ran: list[str] = []

    def broken(*_: object) -> None:
        raise KeyError("bug")

    informer.add_handler(broken)
    informer.add_handler(lambda *_: ran.append("second"))
    counted = REGISTRY.get_sample_value("informer_handler_failures_total",
                                        {"resource": THINGS.plural}) or 0.0
    informer._on_event({"type": "ADDED", "object": thing("a", "1")})
    assert ran == ["second"] and "ns/a" in informer.store
    assert REGISTRY.get_sample_value("informer_handler_failures_total",
                                     {"resource": THINGS.plural}) == counted + 1


def test_a_store_that_raises_changes_nothing() -> None:
    """Store.upsert works out everything that can raise before it changes anything."""
    informer = Informer(None, THINGS, indexers={  # type: ignore[arg-type]
        "good": lambda o: [str(o["spec"]["good"])] if o["spec"]["good"] else [][0]})
    informer._on_event({"type": "ADDED", "object": thing("a", "1")})
    informer._on_event({"type": "MODIFIED", "object": thing("a", "2", good=False)})
    assert informer.store.index_keys("good", "True") == {"ns/a"}
    assert informer.store.get("ns/a")["metadata"]["resourceVersion"] == "1"  # type: ignore[index]



def test_a_taskrun_whose_conditions_are_a_string_stops_nothing() -> None:
    """The case issue 39 reported: the freeze rule read it on the informer path and
    raised, and the watch failed on it for ever. Now it is cached as a run without a
    condition, and the BuildRun of the next TaskRun event is queued as ever."""
    informers = wired("TaskRun")
    taskruns = informers.get(TASKRUNS)
    owned = {"labels": {LABEL_BUILDRUN: "a"},
             "ownerReferences": [{"kind": "BuildRun", "name": "a", "uid": "uid-a",
                                  "controller": True}]}
    garbage = {"metadata": {"name": "a-tr", "namespace": "ns", "resourceVersion": "1",
                            **owned},
               "status": {"conditions": "garbage"}}
    taskruns._on_event({"type": "ADDED", "object": garbage})
    relist(taskruns, [_copy(garbage)])
    good = {"metadata": {"name": "b-tr", "namespace": "ns", "resourceVersion": "2",
                         **{**owned, "labels": {LABEL_BUILDRUN: "b"}}},
            "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    taskruns._on_event({"type": "ADDED", "object": good})
    assert taskruns.quarantined == {} and taskruns._rv == "2"
    assert {"ns/a-tr", "ns/b-tr"} <= set(taskruns.store.keys())
