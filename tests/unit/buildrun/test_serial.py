"""One run at a time per Build (issue 43; controller/buildrun/serial.py): the run policy
read off the Build's annotation, where a NEW BuildRun stands among its Build's, and the
rows it leads to on the in-memory API server (the caches lagging as a test chooses), the
wake-ups of setup.py. The same on the real API server and real Tekton:
tests/cluster/test_serial.py; every interleaving: test_interleavings.py's (g)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.annotations import RUN_POLICY, SERIAL_TURN
from controller.buildrun.buildruns import CANCELED
from controller.buildrun.resources.phases import run_name
from controller.buildrun.serial import (
    RunPolicy,
    Standing,
    Turn,
    claim,
    order_key,
    run_policy,
    standing,
    turn_of,
    turn_value,
)
from controller.buildrun.setup import serial_frees, turn_moved_only
from controller.runtime.controller import DONE
from controller.runtime.errors import RetryableError, UserError, classify
from controller.runtime.kube import JSON, ApiError
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.resources import BUILDRUNS, BUILDS, TASKRUNS
from devtools.cluster import fixtures
from tests.unit.buildrun.test_actions import Rig

T0, T1, T2 = "2026-12-04T01:00:00Z", "2026-12-04T01:00:01Z", "2026-12-04T01:00:02Z"


def br(name: str, created: str = T0, *, uid: str = "", state: str = "", running: bool = False,
       done: bool = False) -> JSON:
    """A BuildRun of the Build as a cache holds it: NEW, RUNNING (a TaskRun recorded) or
    DONE, canceled if `state` says so."""
    obj = fixtures.buildrun(name, **({"state": state} if state else {}))
    obj["metadata"].update(namespace="ns", uid=uid or f"uid-{name}", creationTimestamp=created)
    status: JSON = {}
    if running or done:
        status["taskRunName"] = f"{name}-run"
    if done:
        status["completionTime"] = T2
    obj["status"] = status
    return obj


def annotated(policy: str | None) -> JSON:
    build = fixtures.build()
    if policy is not None:
        build["metadata"]["annotations"] = {RUN_POLICY: policy}
    return build


# -- the annotation ---------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "policy"), [
    (None, RunPolicy.PARALLEL), ("Parallel", RunPolicy.PARALLEL),
    ("Serial", RunPolicy.SERIAL), ("SerialLatestOnly", RunPolicy.SERIAL_LATEST_ONLY)])
def test_the_run_policy_is_the_build_s_annotation(value: str | None,
                                                  policy: RunPolicy) -> None:
    assert run_policy(annotated(value)) is policy


def test_an_embedded_build_has_no_run_policy() -> None:
    assert run_policy(None) is RunPolicy.PARALLEL


@pytest.mark.parametrize("value", ["serial", "Serial ", "", "OneAtATime"])
def test_a_value_that_is_no_policy_is_the_user_s_to_fix(value: str) -> None:
    with pytest.raises(UserError) as caught:
        run_policy(annotated(value))
    assert caught.value.reason == reasons.INVALID_RUN_POLICY
    assert caught.value.message == (
        f"the Build's annotation buildrun-controller.dev/run-policy is {value!r}; it may be "
        "one of 'Parallel', 'Serial', 'SerialLatestOnly', or absent")


# -- where a NEW BuildRun stands ---------------------------------------------------------------

def test_the_order_is_creation_then_name() -> None:
    assert sorted([br("b", T0), br("a", T1), br("a", T0)], key=order_key) == [
        br("a", T0), br("b", T0), br("a", T1)]


def test_without_a_serial_policy_nothing_waits() -> None:
    assert standing(br("b", T1), RunPolicy.PARALLEL, [br("a", T0, running=True)],
                    [("a", "uid-a")]) == Standing()


def test_serial_the_first_starts_the_others_wait_each_behind_the_one_just_ahead() -> None:
    queue = [br("a", T0), br("b", T0), br("c", T1)]
    assert standing(queue[0], RunPolicy.SERIAL, queue, []) == Standing()
    assert standing(queue[1], RunPolicy.SERIAL, queue, []) == Standing(behind="a")
    assert standing(queue[2], RunPolicy.SERIAL, queue, []) == Standing(behind="b")


def test_serial_a_running_buildrun_holds_back_even_an_earlier_one() -> None:
    """Started before the Build was annotated (or by Shipwright's controller): it runs,
    so nothing else starts until it ends."""
    assert standing(br("a", T0), RunPolicy.SERIAL, [br("z", T1, running=True)],
                    []) == Standing(behind="z")


def test_serial_the_one_named_is_the_nearest_in_the_queue_running_ones_first() -> None:
    """z runs (created in the same second as a and b, but first): it is at the head of
    the queue, a and b follow in the order; b names a, a names z."""
    queue = [br("z", T0, running=True), br("a", T0), br("b", T0)]
    assert standing(queue[1], RunPolicy.SERIAL, queue, []) == Standing(behind="z")
    assert standing(queue[2], RunPolicy.SERIAL, queue, []) == Standing(behind="a")


def test_serial_a_canceled_new_one_holds_nothing_back() -> None:
    """Row 7 finishes it without a run."""
    assert standing(br("b", T1), RunPolicy.SERIAL, [br("a", T0, state=CANCELED)],
                    []) == Standing()


def test_serial_a_run_going_holds_back_whoever_owns_it_but_oneself() -> None:
    """A run whose BuildRun a backstop finished, or whose status write the cache lacks;
    a namesake's (another uid) counts, one's own does not (row 5 adopts it first)."""
    me = br("b", T1)
    assert standing(me, RunPolicy.SERIAL, [me], [("a", "uid-a")]) == Standing(behind="a")
    assert standing(me, RunPolicy.SERIAL, [me], [("b", "old-uid")]) == Standing(behind="b")
    assert standing(me, RunPolicy.SERIAL, [me], [("b", "uid-b")]) == Standing()


def test_serial_latest_only_the_newest_waiting_supersedes_the_older_ones() -> None:
    queue = [br("a", T0, running=True), br("b", T0), br("c", T1), br("d", T2)]
    assert standing(queue[1], RunPolicy.SERIAL_LATEST_ONLY, queue, []) == Standing(
        superseded_by="d")
    assert standing(queue[2], RunPolicy.SERIAL_LATEST_ONLY, queue, []) == Standing(
        superseded_by="d")
    assert standing(queue[3], RunPolicy.SERIAL_LATEST_ONLY, queue, []) == Standing(
        behind="a")


def test_serial_latest_only_a_canceled_newer_one_supersedes_nothing() -> None:
    queue = [br("b", T0), br("c", T1, state=CANCELED)]
    assert standing(queue[0], RunPolicy.SERIAL_LATEST_ONLY, queue, []) == Standing()


def test_serial_the_holder_of_the_turn_goes_first_whatever_the_order() -> None:
    """b holds the Build's turn (its start may be in flight on a replica that lost its
    lease), a comes before it in the order: a waits behind b, and b waits for nobody
    NEW."""
    queue = [br("a", T0), br("b", T0), br("c", T1)]
    assert standing(queue[0], RunPolicy.SERIAL, queue, [], "uid-b") == Standing(behind="b")
    assert standing(queue[1], RunPolicy.SERIAL, queue, [], "uid-b") == Standing()
    assert standing(queue[2], RunPolicy.SERIAL, queue, [], "uid-b") == Standing(behind="a")


def test_serial_the_holder_still_waits_for_a_run_going() -> None:
    me = br("b", T1)
    assert standing(me, RunPolicy.SERIAL, [me], [("a", "uid-a")], "uid-b") == Standing(
        behind="a")


def test_serial_latest_only_the_holder_is_never_superseded_and_goes_first() -> None:
    queue = [br("b", T0), br("c", T1), br("d", T2)]
    assert standing(queue[0], RunPolicy.SERIAL_LATEST_ONLY, queue, [], "uid-b") == Standing()
    assert standing(queue[1], RunPolicy.SERIAL_LATEST_ONLY, queue, [], "uid-b") == Standing(
        superseded_by="d")
    assert standing(queue[2], RunPolicy.SERIAL_LATEST_ONLY, queue, [], "uid-b") == Standing(
        behind="b")


# -- the Build's turn ----------------------------------------------------------------------------

def held_by(holder: str | None) -> JSON:
    build = annotated("Serial")
    build["metadata"].update(namespace="ns", uid="uid-build", resourceVersion="7")
    if holder is not None:
        build["metadata"]["annotations"][SERIAL_TURN] = holder
    return build


def test_the_turn_names_the_buildrun_by_name_and_uid() -> None:
    assert turn_value(br("b")) == "b/uid-b"
    assert turn_of(held_by("b/uid-b")) == ("b", "uid-b")
    for value in (None, "", "b", "/uid-b", "b/"):
        assert turn_of(held_by(value)) is None, value


def test_a_turn_nobody_holds_is_taken() -> None:
    assert claim(br("b"), held_by(None), None) == Turn(take=True)
    assert claim(br("b"), held_by("garbage"), None) == Turn(take=True)


def test_a_turn_held_already_starts_without_a_write() -> None:
    """An earlier try's write landed, its answer lost."""
    assert claim(br("b"), held_by("b/uid-b"), br("b")) == Turn()


def test_a_turn_held_by_an_unfinished_buildrun_is_waited_for() -> None:
    for holder in (br("a"), br("a", running=True), br("a", state=CANCELED)):
        assert claim(br("b"), held_by("a/uid-a"), holder) == Turn(behind="a")


@pytest.mark.parametrize(("holder", "why"), [
    (br("a", done=True), "it finished"),
    (None, "it is gone"),
    (br("a", uid="namesake"), "its name holds another BuildRun"),
    ({**br("a"), "spec": {"build": {"name": "another"}}}, "it is another Build's now"),
])
def test_a_turn_held_by_one_that_is_done_with_it_is_taken(holder: JSON | None,
                                                          why: str) -> None:
    assert claim(br("b"), held_by("a/uid-a"), holder) == Turn(take=True), why


def test_a_turn_held_by_one_done_whose_run_is_still_going_is_waited_for() -> None:
    """Its run stopping after a backstop's verdict, or left to the garbage collector after
    its deletion: that run's end wakes the next one."""
    assert claim(br("b"), held_by("a/uid-a"), br("a", done=True), True) == Turn(behind="a")
    assert claim(br("b"), held_by("a/uid-a"), None, True) == Turn(behind="a")


def test_only_the_turn_moving_is_no_news_for_the_other_buildruns() -> None:
    before = held_by("a/uid-a")
    after = held_by("b/uid-b")
    after["metadata"]["resourceVersion"] = "8"
    assert turn_moved_only(after, before)
    assert not turn_moved_only(after, None)
    assert not turn_moved_only(before, before)  # a resync
    changed = {**after, "spec": {**after["spec"], "timeout": "1m"}}
    assert not turn_moved_only(changed, before)
    relabelled = held_by("a/uid-a")
    relabelled["metadata"]["annotations"][RUN_POLICY] = "SerialLatestOnly"
    relabelled["metadata"]["resourceVersion"] = "8"
    assert not turn_moved_only(relabelled, before)


# -- the rows, on the in-memory API server -------------------------------------------------------

def serial_rig(policy: str = "Serial") -> Rig:
    rig = Rig()
    rig.kube.modify(BUILDS, fixtures.BUILD, lambda b: b["metadata"].update(
        annotations={RUN_POLICY: policy}))
    return rig


def add(rig: Rig, name: str, created: str) -> JSON:
    rig.kube.created = created
    return rig.kube.add(BUILDRUNS, fixtures.buildrun(name))


def condition(rig: Rig, name: str) -> JSON:
    stored = rig.kube.stored(BUILDRUNS, name)
    assert stored is not None
    return succeeded_condition(stored.get("status")) or {}


async def test_serial_the_first_starts_and_the_second_waits_naming_it_once() -> None:
    rig = serial_rig()
    add(rig, "first", T0)
    add(rig, "second", T1)
    rig.sync()
    await rig.reconciler.reconcile("ns/first")
    rig.sync()
    assert await rig.reconciler.reconcile("ns/second") == DONE
    assert rig.taskruns() == [run_name(rig.kube.stored(BUILDRUNS, "first") or {})]
    assert {k: condition(rig, "second")[k] for k in ("status", "reason", "message")} == {
        "status": "Unknown", "reason": reasons.SERIAL_RUN_WAITING,
        "message": "the Build's run policy is Serial: waiting for BuildRun first to finish"}
    # Written once: another look writes nothing.
    rig.sync()
    rig.kube.calls.clear()
    await rig.reconciler.reconcile("ns/second")
    assert not rig.kube.writes()


async def test_serial_the_next_starts_once_the_one_ahead_finished() -> None:
    rig = serial_rig()
    add(rig, "first", T0)
    add(rig, "second", T1)
    rig.sync()
    await rig.reconciler.reconcile("ns/first")
    rig.sync()
    await rig.reconciler.reconcile("ns/second")
    rig.kube.modify(BUILDRUNS, "first", lambda b: b["status"].update(completionTime=T2))
    rig.kube.modify(TASKRUNS, rig.taskruns()[0], lambda t: t.update(
        status={"conditions": [{"type": "Succeeded", "status": "True"}], "completionTime": T2}))
    rig.sync()
    await rig.reconciler.reconcile("ns/second")
    assert len(rig.taskruns()) == 2
    assert condition(rig, "second")["reason"] == "Pending"


async def test_serial_a_start_the_cache_does_not_show_yet_holds_the_next_back() -> None:
    """The cache still shows `later` NEW (its status write, recording its run, not
    delivered yet), and `earlier` comes first in the order (the same second, its name
    first): the start's look again, live, finds `later` running and waits behind it."""
    rig = serial_rig()
    add(rig, "later", T0)
    rig.sync()
    add(rig, "earlier", T0)
    await rig.reconciler.reconcile("ns/later")  # starts: nothing ahead of it in its cache
    stale: Any = rig.kube.stored(BUILDRUNS, "earlier")
    rig.caches.buildruns.upsert(stale)  # `earlier` arrives; `later`'s write and run do not
    assert await rig.reconciler.reconcile("ns/earlier") == DONE
    assert len(rig.taskruns()) == 1
    assert condition(rig, "earlier")["message"] == (
        "the Build's run policy is Serial: waiting for BuildRun later to finish")


async def test_serial_latest_only_an_older_waiting_one_is_canceled_naming_the_newer() -> None:
    rig = serial_rig("SerialLatestOnly")
    add(rig, "running", T0)
    rig.sync()
    await rig.reconciler.reconcile("ns/running")
    add(rig, "older", T1)
    add(rig, "newer", T2)
    rig.sync()
    assert await rig.reconciler.reconcile("ns/older") == DONE
    assert await rig.reconciler.reconcile("ns/newer") == DONE
    older, newer = condition(rig, "older"), condition(rig, "newer")
    assert (older["status"], older["reason"], older["message"]) == (
        "False", reasons.BUILD_RUN_CANCELED, "superseded by the newer BuildRun newer (the "
        "Build's run policy is SerialLatestOnly); canceled before it started")
    assert (newer["status"], newer["reason"]) == ("Unknown", reasons.SERIAL_RUN_WAITING)
    assert len(rig.taskruns()) == 1


async def test_serial_latest_only_a_newer_one_gone_supersedes_nothing() -> None:
    """The cache still holds `newer`, deleted meanwhile: the terminal verdict waits for a
    live look at it, which finds it gone."""
    rig = serial_rig("SerialLatestOnly")
    add(rig, "older", T0)
    add(rig, "newer", T1)
    rig.sync()
    rig.kube.remove(BUILDRUNS, "newer")
    await rig.reconciler.reconcile("ns/older")
    assert condition(rig, "older")["reason"] == "Pending"


async def test_a_bad_run_policy_fails_the_buildrun_naming_the_annotation() -> None:
    rig = serial_rig("serial")
    add(rig, "br", T0)
    assert await rig.reconcile() == DONE
    cond = condition(rig, "br")
    assert (cond["status"], cond["reason"]) == ("False", reasons.INVALID_RUN_POLICY)
    assert not rig.taskruns()


# -- the wake-ups (setup.py) ---------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "old", "new", "frees"), [
    ("DELETED", None, br("a"), True),
    ("ADDED", None, br("a"), False),
    ("MODIFIED", br("a", running=True), br("a", done=True), True),
    ("MODIFIED", br("a"), br("a", running=True), False),
    ("MODIFIED", br("a"), br("a", state=CANCELED), True),
    ("MODIFIED", br("a"), br("a", uid="namesake"), True),
])
def test_what_frees_a_serial_build_s_next_buildrun(kind: Any, old: JSON | None, new: JSON,
                                                   frees: bool) -> None:
    assert serial_frees(kind, new, old) is frees


async def test_serial_latest_only_an_older_one_whose_run_the_cache_lacks_is_not_canceled(
) -> None:
    """`older`'s create landed and its status write did not, and the TaskRun cache does
    not hold the run yet: superseding it would say "canceled before it started" of a run
    that goes on. The verdict waits for a live look at its own run, which finds it; the
    start then adopts it."""
    rig = serial_rig("SerialLatestOnly")
    older = add(rig, "older", T0)
    add(rig, "newer", T1)
    rig.sync()
    planned = await rig.reconciler.planner.prepare(
        older, rig.kube.stored(BUILDS, fixtures.BUILD) or {},
        rig.reconciler.observer.executor)
    rig.kube.add(TASKRUNS, planned.run)  # the cache does not hold it
    await rig.reconciler.reconcile("ns/older")
    assert condition(rig, "older")["reason"] == "Pending"
    stored = rig.kube.stored(BUILDRUNS, "older") or {}
    assert stored["status"]["taskRunName"] == planned.run["metadata"]["name"]
    assert len(rig.taskruns()) == 1


def build_writes(rig: Rig) -> list[Any]:
    return [c for c in rig.kube.writes() if c[1] == BUILDS.plural]


async def test_a_serial_start_takes_the_turn_in_one_write_over_the_resource_version() -> None:
    rig = serial_rig()
    first = add(rig, "first", T0)
    rig.sync()
    rig.kube.calls.clear()
    await rig.reconciler.reconcile("ns/first")
    assert build_writes(rig) == [("patch", BUILDS.plural, fixtures.BUILD, "")]
    build = rig.kube.stored(BUILDS, fixtures.BUILD) or {}
    assert build["metadata"]["annotations"][SERIAL_TURN] == turn_value(first)
    assert len(rig.taskruns()) == 1
    # Held now: a try again (its status write lost) writes no turn.
    rig.kube.modify(BUILDRUNS, "first", lambda b: b.update(status={}))
    rig.sync()
    rig.caches.taskruns.remove(f"ns/{rig.taskruns()[0]}")
    rig.kube.calls.clear()
    await rig.reconciler.reconcile("ns/first")
    assert build_writes(rig) == []
    assert len(rig.taskruns()) == 1


async def test_a_parallel_start_writes_nothing_to_its_build() -> None:
    for policy in ("Parallel", None):
        rig = Rig() if policy is None else serial_rig(policy)
        add(rig, "br", T0)
        await rig.reconcile()
        assert len(rig.taskruns()) == 1
        assert [c for c in rig.kube.calls if c[1] == BUILDS.plural] == [], policy


async def test_a_turn_taken_meanwhile_by_another_replica_is_a_conflict_then_a_wait() -> None:
    """The cache's Build says nobody holds the turn; another replica wrote `other` into
    it meanwhile (the Build's resourceVersion moved): the write is refused 409, the Build
    read again, and `mine` waits behind `other`, no run made."""
    rig = serial_rig()
    mine = add(rig, "mine", T0)
    other = add(rig, "other", T1)
    rig.sync()
    rig.kube.modify(BUILDS, fixtures.BUILD, lambda b: b["metadata"]["annotations"].update(
        {SERIAL_TURN: turn_value(other)}))
    rig.kube.calls.clear()
    assert await rig.reconciler.reconcile("ns/mine") == DONE
    assert build_writes(rig) == [("patch", BUILDS.plural, fixtures.BUILD, "")]  # the 409
    assert rig.taskruns() == []
    assert condition(rig, "mine")["message"] == (
        "the Build's run policy is Serial: waiting for BuildRun other to finish")
    build = rig.kube.stored(BUILDS, fixtures.BUILD) or {}
    assert build["metadata"]["annotations"][SERIAL_TURN] == turn_value(other)
    assert mine["metadata"]["uid"] != other["metadata"]["uid"]


async def test_a_turn_that_keeps_conflicting_is_a_system_error() -> None:
    rig = serial_rig()
    add(rig, "mine", T0)
    rig.sync()

    def conflict(_: object) -> None:
        raise ApiError(409, "Conflict", "the object has been modified")

    rig.kube.before("patch", BUILDS, conflict, times=None)
    with pytest.raises(ApiError) as caught:
        await rig.reconciler.reconcile("ns/mine")
    error = classify(caught.value)
    assert isinstance(error, RetryableError) and error.error_class == "conflict"
    assert rig.taskruns() == []
    assert (rig.kube.stored(BUILDRUNS, "mine") or {}).get("status") in (None, {})
