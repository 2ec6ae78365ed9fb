"""One run at a time per Build (issue 43; controller/buildrun/serial.py): the run policy
read off the Build's annotation, where a NEW BuildRun stands among its Build's, and the
rows it leads to on the in-memory API server (the caches lagging as a test chooses), the
wake-ups of setup.py. The same on the real API server and real Tekton:
tests/cluster/test_serial.py; every interleaving: test_interleavings.py's (g)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.annotations import RUN_POLICY
from controller.buildrun.buildruns import CANCELED
from controller.buildrun.resources.phases import run_name
from controller.buildrun.serial import RunPolicy, Standing, order_key, run_policy, standing
from controller.buildrun.setup import serial_frees
from controller.runtime.controller import DONE
from controller.runtime.errors import UserError
from controller.runtime.kube import JSON
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
