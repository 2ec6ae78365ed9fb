"""Interleavings explored, not hand-picked (issue 39, part 7).

A hypothesis rule-based state machine (`Interleavings`) runs the BuildRun controller as
setup.py wires it (its informers' stores and event handlers, its queue with the retry
budget and give_up, the reconciler) on the in-memory API server (tests/fakekube.py), and
plays everything around it, in any order. Its rules, as hypothesis prints a step:

- `create_buildrun`, `user`, `build_timeout`, `garbage_collector`: the user creates a
  BuildRun (of the Build, or of one that does not exist; run as the namespace's
  ServiceAccount or one generated for it; asking for infrastructure retries or not),
  cancels it, deletes it or recreates it (a namesake: another uid under the same name),
  deletes its TaskRun, sets the Build's timeout; the garbage collector deletes what a
  deleted BuildRun owned (its TaskRun, its generated ServiceAccount).
- `tekton_evicts`: the kubelet evicts a run's pod and Tekton fails the run PodEvicted (an
  infrastructure failure, retried where its BuildRun asks: issue 43 part 3).
- `tekton_progresses`, `tekton_times_out`, `tekton_cancels`: Tekton writes a TaskRun's
  status as it does: Pending (its first look sets startTime), Running, Succeeded (with
  the image digest result) or Failed, only within its own spec.timeout and only while
  no cancel was asked for (Tekton looks at the cancel first, then the timeout);
  TaskRunTimeout once that timeout has passed; TaskRunCancelled once spec.status asks,
  and only while it has not finished. Its webhooks default spec.timeout (an hour) and
  refuse any change to a finished TaskRun's spec.
- `work`, `old_leader_works`: the leader's worker runs its next reconcile (or the one in
  flight) one API call at a time (`Replica.gate`), so anything above or below can
  happen between any two calls of it; the replica that lost its lease goes on with the
  reconcile it had in flight.
- `process_dies`: a restart (a new replica: empty caches, a relist, then it leads) or a
  lost lease (a new replica leads while the old one still has its reconcile in flight).
- `watch`: the leader's watch of BuildRuns, TaskRuns, Builds or ServiceAccounts stalls
  (its events wait: the cache lags), resumes, delivers only the next event, loses it
  (the store stale until a later event of the object or a relist), delivers the last
  one again, or relists. A watch not stalled delivers every event after each step.
- `fault`: the next calls of a verb on a resource the reconciler uses fail with a
  conflict, a 5xx, a 504, a client timeout or a lost connection, before the call takes
  effect or after it (the write landed, its answer was lost).
- `time_passes`: virtual time (the queue's backoffs and requeues, the retry budget, the
  reconciler's clock, Tekton's timeouts): none of it costs a real second.

It keeps a record per BuildRun uid of what its TaskRun really did (`BuildRunTruth`, `Run`)
and after every step checks the promise (`Interleavings.promise`):

- (a) once completionTime is set, the BuildRun's status never changes;
- (b) its outcome is its run's, verdict by verdict (`verdict_problems`);
- (c) one TaskRun per BuildRun uid, ever, and a status names (and takes startTime from)
  only its own; with infrastructure retries asked for, the runs of one uid are
  sequential: a later one only once every earlier one finished and the last was evicted,
  within the limit its annotation sets, named for its attempt (`retry_problem`); the
  outcome is that of the run its final status names;
- (d) every write lands on the uid of the BuildRun it was decided on (Actions.act's), a
  TaskRun's or ServiceAccount's on one that uid owns;
- (f) no reconcile raises what the controller takes for a bug (logged with a traceback);
- (g) under the Build's run policy (`run_policy`, drawn first: none, Serial or
  SerialLatestOnly; issue 43), never two runs of the Build's BuildRuns going at once, and
  a BuildRun ends superseded only by a newer one of its Build that was there.

At the end of each example (`Interleavings.teardown`) the faults stop, the old leader's
reconcile ends, the leader's caches catch up and the controller runs until it is quiet,
Tekton up (cancelling what was asked, timing out what is due): (e) every BuildRun whose
run finished or was deleted, that was canceled or whose Build does not exist is finished,
none is left unstarted, and no finished one has a run still going or a generated
ServiceAccount left.

`make test` runs EXAMPLES examples, derandomized (the same ones on every run; 1,000 in
about 25 s here, some 40 a second); INTERLEAVINGS_EXAMPLES and INTERLEAVINGS_STEPS
explore further by hand, INTERLEAVINGS_RANDOM=1 with other examples on every run. The
counterexamples it found, shrunk (then cut by hand to what matters), are the regression
tests at the end of the file, each named for what holds now; what it still finds on
today's controller is KNOWN_GAPS there, strict xfails, which the machine tolerates (and
`replay(..., strict=True)` does not). tests/unit/buildrun/planted.py plants bugs to show
the invariants catch them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import functools
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, cast
from unittest import mock

import aiohttp
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from controller.buildrun import reasons, serviceaccounts
from controller.buildrun import setup as buildrun_setup
from controller.buildrun.annotations import INFRASTRUCTURE_RETRIES, RUN_POLICY
from controller.buildrun.buildruns import CANCELED
from controller.buildrun.executors import TASKRUN_CANCELLED
from controller.buildrun.outcomes import run_finished
from controller.buildrun.reconciler import BuildRunReconciler
from controller.buildrun.resources.phases import run_name
from controller.buildrun.spec import parse_duration
from controller.runtime import controller as runtime_controller
from controller.runtime.events import EventRecorder
from controller.runtime.informers import InformerFactory
from controller.runtime.kube import JSON, PODS, SERVICEACCOUNTS, ApiError, Resource
from controller.runtime.timestamps import format_time
from controller.settings import RetryBudget, Settings
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.recorded_executor import recorded_executor
from controller.shipwright.resources import BUILDRUNS, BUILDS, TASKRUNS
from devtools.cluster import fixtures
from tests import virtualtime
from tests.fakekube import FakeKube
from tests.unit.buildrun.world import seed_namespace, tekton_status
from workqueue import FakeClock

NAMES = ("a", "b")
# The Build's run policy in an example (its annotation, issue 43), by a name as hypothesis
# prints the step: under a serial one, (g) holds too.
POLICIES = {"none": None, "Serial": "Serial", "SerialLatestOnly": "SerialLatestOnly"}
# The user's settings of the Build's spec.timeout, by a name as hypothesis prints a step.
BUILD_TIMEOUTS = {"1m": "1m", "5m": "5m", "unset": None}
GHOST = "ghost"  # a Build that never exists: its BuildRuns end BuildNotFound
EPOCH = datetime.datetime(2026, 12, 4, 1, 0, 0, tzinfo=datetime.UTC)
# Tekton's webhook gives a TaskRun without spec.timeout its default, an hour.
TEKTON_DEFAULT_TIMEOUT = "1h0m0s"
# One worker: the machine decides when it runs. A spent budget after one retry, so that
# give_up is a few steps away; no reconcile timeout (virtual time jumps while a reconcile
# is parked between two calls).
SETTINGS = Settings(workers=1, reconcile_timeout=None,
                    budget=RetryBudget(max_retries=1, max_age=0),
                    infrastructure_retry_delay=1.0)
# The informers whose events the machine delivers, by plural (as hypothesis prints a
# step); the others list once, at a start.
WATCHED: dict[str, Resource] = {r.plural: r for r in (BUILDRUNS, TASKRUNS, BUILDS,
                                                      SERVICEACCOUNTS)}
# How often a rare event (the Build changed, a process died) may come in one example.
RARE = 2
# Each run of the settling loop at the end is one worker turn or one step of time.
SETTLE_ROUNDS = 200

# What a TaskRun really did, as the test plays Tekton.
NEW, PENDING, RUNNING = "new", "pending", "running"
SUCCEEDED, FAILED, TIMED_OUT, CANCELLED = "succeeded", "failed", "timed out", "cancelled"
# Its pod evicted (Tekton's PodEvicted): an infrastructure failure, retried where asked.
EVICTED = "evicted"
FINISHED = frozenset({SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, EVICTED})
# Ended by itself (its build's outcome), not by a cancel someone asked for.
ON_ITS_OWN = frozenset({SUCCEEDED, FAILED, TIMED_OUT, EVICTED})
# The infrastructure retries a BuildRun asks for (its annotation), by a name as hypothesis
# prints a step: none (off, as by default), or one or two.
RETRIES = {"off": None, "1": "1", "2": "2"}

# The API server's faults, on any call a reconcile makes: (verb, resource, subresource),
# by a name as hypothesis prints a step.
FAULT_CALLS: dict[str, tuple[str, Resource, str | None]] = {
    f"{verb} {resource.plural}{'/' + sub if sub else ''}": (verb, resource, sub)
    for verb, resource, sub in (
        ("get", BUILDRUNS, None), ("patch", BUILDRUNS, ""), ("put", BUILDRUNS, "status"),
        ("create", TASKRUNS, None), ("get", TASKRUNS, None), ("patch", TASKRUNS, None),
        ("get", BUILDS, None), ("patch", BUILDS, ""), ("get", PODS, None),
        ("create", SERVICEACCOUNTS, None), ("delete", SERVICEACCOUNTS, None))}


def _conflict() -> BaseException:
    return ApiError(409, "Conflict", "the object has been modified; please apply your "
                    "changes to the latest version and try again")


def _server_error() -> BaseException:
    return ApiError(500, "InternalError", "etcdserver: leader changed")


def _gateway_timeout() -> BaseException:
    return ApiError(504, "Timeout", "the server was unable to return a response in time")


def _client_timeout() -> BaseException:
    return TimeoutError()


def _disconnected() -> BaseException:
    return aiohttp.ServerDisconnectedError()


# By name: the error, and whether the call takes effect first (its answer is what is lost).
FAULTS: dict[str, tuple[Callable[[], BaseException], bool]] = {
    "conflict": (_conflict, False), "5xx": (_server_error, False),
    "504": (_gateway_timeout, False), "timeout": (_client_timeout, False),
    "disconnect": (_disconnected, False), "504 landed": (_gateway_timeout, True),
    "timeout landed": (_client_timeout, True), "disconnect landed": (_disconnected, True),
}


@dataclass
class Run:
    """What one TaskRun really did (Tekton's side of the truth). Ticks order every step
    of the machine and every write that landed (`Interleavings.tick`)."""

    name: str
    owner: str  # the uid of the BuildRun that owns it
    timeout: float  # seconds, Tekton's timeout (spec.timeout, its webhook's default if unset)
    created: float  # virtual seconds
    created_tick: int = 0
    state: str = NEW
    started: float | None = None  # virtual seconds, when Tekton set startTime
    start_time: str | None = None  # the startTime Tekton wrote
    completion_time: str | None = None  # the completionTime Tekton wrote
    digest: str | None = None  # the image it pushed, if it succeeded
    finished_tick: int | None = None
    cancel_tick: int | None = None  # when a cancel (spec.status) landed on it
    deleted_tick: int | None = None


@dataclass
class BuildRunTruth:
    """A BuildRun uid: what the user did to it and what it finished with."""

    uid: str
    name: str
    build: str
    runs: list[Run] = field(default_factory=list)  # TaskRuns created owned by it
    canceled_tick: int | None = None
    deleted_tick: int | None = None
    final: JSON | None = None  # the status the write that set completionTime left
    final_tick: int | None = None
    final_time: float | None = None  # virtual seconds at that write
    final_decided_tick: int | None = None  # when the reconcile that wrote it began
    recorded_tick: int | None = None  # when its status first named a run
    # It finished BuildRunCanceled as superseded (SerialLatestOnly, row 10) by a newer
    # BuildRun of its Build that was there then: its only BuildRunCanceled not asked for.
    superseded: bool = False
    order: tuple[str, str] = ("", "")  # (creationTimestamp, name): a serial Build's order
    retries: int = 0  # the infrastructure retries its annotation asks for
    # Its runs made as retries of an evicted one (issue 43 part 3): the runs of one
    # BuildRun are sequential, at most one unfinished, each named for its attempt.
    retried: list[str] = field(default_factory=list)


def verdict_problems(truth: BuildRunTruth, *, strict: bool = False) -> list[str]:
    """(b): how a finished BuildRun's outcome differs from what its run really did.

    - Succeeded (True) exactly when its run succeeded, with the run's digest. A run
      that succeeded is never reported otherwise, but for TaskRunIsMissing once it was
      deleted (it may be gone before the controller saw it finish).
    - The run's own outcomes: Failed only for a run that failed, TaskRunCancelled for one
      Tekton cancelled, BuildRunTimeout for one Tekton timed out, BuildRunCanceled for one
      Tekton cancelled after the user canceled the BuildRun. When the run had finished
      before the BuildRun did, the run decided: its completionTime is the BuildRun's.
    - The controller's own verdicts, only when no run of the uid had finished by itself
      when it was written (it may end cancelled, at the controller's request; `strict`:
      nor after, see KNOWN_GAPS): BuildRunCanceled
      (the user canceled it first), ReconcilerRetriesExhausted, the timeout backstop
      (BuildRunTimeout; its run had existed for its own timeout, spec.timeout: Tekton
      may start it late, but it never finished within that time), BuildNotFound (its Build does not
      exist), TaskRunIsMissing (its run was deleted first). Once the run was deleted
      before the BuildRun finished, what it did can no longer be told: any of these may
      then stand, but never Succeeded without it. A run made after the BuildRun finished
      (only a replica that lost its lease makes one, a START in flight) counts as none.
    - Nothing else: a reason this model never causes is reported as such.
    """
    if truth.final is None:
        return []
    assert truth.final_tick is not None and truth.final_time is not None
    status, when = truth.final, truth.final_tick
    cond = succeeded_condition(status) or {}
    verdict, reason = cond.get("status"), cond.get("reason")
    digest = (status.get("output") or {}).get("digest")
    # Its run: the last made before it finished (a second one only in KNOWN_GAPS'
    # GAP_UNRECORDED_RUN, under the same name). One made after it finished (by a replica
    # that lost its lease, its START in flight) had no part in the verdict, which is
    # frozen; (e) asks that it is stopped.
    # With infrastructure retries, the one its status names: a later attempt made as its
    # retry budget ran out (never recorded) is stopped, and had no part in the verdict.
    named = recorded_executor(status)
    run = next((r for r in reversed(truth.runs) if r.created_tick <= when
                and (named is None or r.name == named.name)), None) or next(
        (r for r in reversed(truth.runs) if r.created_tick <= when), None)
    gone = run is not None and run.deleted_tick is not None and run.deleted_tick < when
    # What the run had done when the BuildRun finished; `strict`, ever (a run that
    # finished after a verdict of the controller's own, between its status write and its
    # cancel: `KNOWN_GAPS`).
    # (Not `strict`: what it had done when the reconcile that finished the BuildRun began:
    # a run that ends between a backstop's reads and its cancel is KNOWN_GAPS'.)
    decided = truth.final_decided_tick if truth.final_decided_tick is not None else when
    ended = run is not None and not gone and (strict or (
        run.finished_tick is not None and run.finished_tick < decided))
    by_itself = ended and run is not None and run.state in ON_ITS_OWN
    problems = []
    said = f"it says {verdict} {reason} (digest {digest})"
    if ended and run is not None and run.state == SUCCEEDED and not (
            verdict == "True" and digest == run.digest):
        problems.append(f"its run succeeded with {run.digest}, {said}")
    if verdict == "True" and not (run is not None and run.state == SUCCEEDED
                                  and digest == run.digest):
        problems.append(f"{said}, but no run of it succeeded with that digest")
    canceled_first = truth.canceled_tick is not None and truth.canceled_tick < when
    if verdict == "True":
        pass  # above
    elif reason == reasons.FAILED:
        # (An evicted run's pod is gone here: Shipwright's Failed "pod not found".)
        if run is None or run.state not in (FAILED, EVICTED):
            problems.append(f"{said}, but its run did not fail ({run and run.state})")
    elif reason == reasons.TASK_RUN_CANCELLED:
        if run is None or run.state != CANCELLED:
            problems.append(f"{said}, but its run was not cancelled ({run and run.state})")
    elif reason == reasons.BUILD_RUN_CANCELED:
        if not canceled_first and not truth.superseded:
            problems.append(f"{said}, but the user had not canceled it nor a newer "
                            "BuildRun superseded it")
        if truth.superseded and not canceled_first and run is not None:
            problems.append(f"{said} superseded, but it had a run: {run.name}")
        if by_itself:
            problems.append(f"{said}, but its run finished by itself: {run and run.state}")
    elif reason == reasons.BUILD_RUN_TIMEOUT:
        if run is None:
            problems.append(f"{said}, but it never had a run")
        elif run.state != TIMED_OUT:
            if by_itself:
                problems.append(f"{said} (the backstop), but its run finished by itself: "
                                f"{run.state}")
            if truth.final_time < run.created + run.timeout:
                problems.append(f"{said} (the backstop) at {truth.final_time:g}s, before its "
                                f"run, created at {run.created:g}s, had run for its own "
                                f"timeout ({run.timeout:g}s)")
    elif reason == reasons.RECONCILER_RETRIES_EXHAUSTED:
        if by_itself:
            problems.append(f"{said}, but its run finished by itself: {run and run.state}")
    elif reason == reasons.TASK_RUN_IS_MISSING:
        if not gone:
            problems.append(f"{said}, but its run was not deleted before ({run})")
    elif reason == reasons.BUILD_NOT_FOUND:
        if truth.build != GHOST:
            problems.append(f"{said}, but its Build {truth.build!r} exists")
        if by_itself:
            problems.append(f"{said}, but its run finished by itself: {run and run.state}")
    else:
        problems.append(f"{said}: a verdict this model never causes")
    if run is not None and run.finished_tick is not None and run.finished_tick < when \
            and reason == _run_reason(run, canceled_first) \
            and status.get("completionTime") != run.completion_time:
        problems.append(f"its run decided ({reason}) and finished at {run.completion_time}, "
                        f"but its completionTime is {status.get('completionTime')}")
    return problems


def _run_reason(run: Run, canceled: bool) -> str:
    """The reason a finished run's own outcome gives its BuildRun."""
    return {SUCCEEDED: reasons.SUCCEEDED, FAILED: reasons.FAILED, EVICTED: reasons.FAILED,
            TIMED_OUT: reasons.BUILD_RUN_TIMEOUT,
            CANCELLED: reasons.BUILD_RUN_CANCELED if canceled
            else reasons.TASK_RUN_CANCELLED}[run.state]


def tekton_webhook(verb: str, stored: JSON | None, new: JSON) -> None:
    """Tekton's webhooks: a new TaskRun's timeout defaulted; no change to a finished
    TaskRun's spec."""
    if verb == "create":
        new.setdefault("spec", {}).setdefault("timeout", TEKTON_DEFAULT_TIMEOUT)
    if stored is not None and run_finished(stored) and stored.get("spec") != new.get("spec"):
        raise ApiError(400, "BadRequest", 'admission webhook "validation.webhook.pipeline.'
                       'tekton.dev" denied the request: validation failed: invalid value: '
                       "Once the TaskRun is complete, no updates are allowed: spec")


class ReplicaKube:
    """A replica's client: FakeKube's calls, each first through the replica's gate when its
    worker makes it, and every write reported to the machine with what it landed on."""

    def __init__(self, machine: Interleavings, replica: Replica, fake: FakeKube) -> None:
        self.machine = machine
        self.replica = replica
        self.fake = fake

    def with_field_manager(self, name: str) -> ReplicaKube:
        return ReplicaKube(self.machine, self.replica, self.fake.with_field_manager(name))

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        await self.replica.gate()
        return await self.fake.get(resource, namespace, name)

    async def get_or_none(self, resource: Resource, namespace: str | None,
                          name: str) -> JSON | None:
        await self.replica.gate()
        return await self.fake.get_or_none(resource, namespace, name)

    async def list(self, resource: Resource, namespace: str | None, **query: str | int) -> JSON:
        await self.replica.gate()
        return await self.fake.list(resource, namespace, **query)

    async def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        return await self._write("create", resource, namespace, body["metadata"]["name"],
                                 lambda: self.fake.create(resource, namespace, body))

    async def put(self, resource: Resource, namespace: str | None, name: str, body: JSON, *,
                  subresource: str = "") -> JSON:
        return await self._write("put", resource, namespace, name, lambda: self.fake.put(
            resource, namespace, name, body, subresource=subresource))

    async def patch(self, resource: Resource, namespace: str | None, name: str, body: Any,
                    **options: Any) -> JSON:
        return await self._write("patch", resource, namespace, name, lambda: self.fake.patch(
            resource, namespace, name, body, **options))

    async def delete(self, resource: Resource, namespace: str | None, name: str, *,
                     preconditions: JSON | None = None) -> JSON:
        return await self._write("delete", resource, namespace, name, lambda: self.fake.delete(
            resource, namespace, name, preconditions=preconditions))

    async def _write(self, verb: str, resource: Resource, namespace: str | None, name: str,
                     call: Callable[[], Awaitable[JSON]]) -> JSON:
        await self.replica.gate()
        before = self.fake.peek(resource, name, namespace)
        try:
            return await call()
        finally:
            after = self.fake.peek(resource, name, namespace)
            if before is not after:  # it landed (its answer may be lost): a new object
                self.machine.landed(self.replica, verb, resource, name, before, after)


def _owner(obj: JSON) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((ref.get("uid") for ref in refs if ref.get("controller")), None)


class Replica:
    """One controller process: setup.py's controller on informers of its own, fed by the
    machine, on the machine's clock; its worker runs when the machine says, one API call
    at a time."""

    def __init__(self, machine: Interleavings, number: int) -> None:
        self.machine = machine
        self.number = number
        self.kube = ReplicaKube(machine, self, machine.fake)
        self.informers = InformerFactory(self.kube, None, None)  # type: ignore[arg-type]
        recorder = EventRecorder(self.kube, "test", f"replica-{number}")  # type: ignore[arg-type]
        # The controller as setup.py makes it (on the machine's clock: `on_clock`).
        self.controller = buildrun_setup.setup(
            self.kube, SETTINGS, recorder, self.informers)  # type: ignore[arg-type]
        self.queue = self.controller.queue
        # The uid of the BuildRun the action in flight was decided on (Actions.act's).
        self.decided: str | None = None
        actions = cast(BuildRunReconciler, self.controller.reconciler).actions
        act = actions.act

        async def decided_act(seen: Any, decision: Any) -> Any:
            outer, self.decided = self.decided, seen.buildrun["metadata"].get("uid")
            try:
                return await act(seen, decision)
            finally:
                self.decided = outer

        actions.act = decided_act  # type: ignore[method-assign]
        # Per watched resource: the next event of FakeKube's history to deliver, and the
        # last one delivered (a duplicate is that one again).
        self.cursor: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self.stalled: set[str] = set()  # the watches whose events wait
        self.task: asyncio.Task[bool] | None = None  # the worker turn in flight
        self.turn_tick = 0  # the machine's tick when that turn began
        self.resume: asyncio.Future[None] | None = None  # set: the parked call goes on
        self.arrived: asyncio.Future[None] | None = None  # set by the worker at a call

    async def gate(self) -> None:
        """Parks the worker before each of its API calls until the machine resumes it."""
        if asyncio.current_task() is not self.task or self.task is None:
            return
        self.resume = asyncio.get_running_loop().create_future()
        assert self.arrived is not None
        self.arrived.set_result(None)
        await self.resume

    def busy(self) -> bool:
        return self.task is not None

    def can_work(self) -> bool:
        return self.task is not None or len(self.queue) > 0

    def advance(self) -> None:
        """The worker makes the call it is parked at and runs to its next one, or a new
        turn starts and runs to its first call; either may end the turn instead."""
        loop = self.machine.loop
        if self.task is None:
            if not len(self.queue):
                return
            self.task = loop.create_task(self.controller.process_next())
            self.turn_tick = self.machine.tick
        elif self.resume is not None:
            resume, self.resume = self.resume, None
            resume.set_result(None)
        arrived = self.arrived = loop.create_future()
        loop.run_until_complete(asyncio.wait([arrived, self.task],
                                             return_when=asyncio.FIRST_COMPLETED))
        if self.task.done():
            self.task.result()  # process_next handles every error of a reconcile
            self.task = self.resume = self.arrived = None

    def finish_turn(self) -> None:
        """The turn in flight, to its end."""
        while self.task is not None:
            self.advance()

    def turn(self) -> None:
        """A whole worker turn (the one in flight, else a new one)."""
        self.advance()
        self.finish_turn()

    def stop(self) -> None:
        """The process dies: the call it is parked at is never made."""
        if self.task is not None:
            self.task.cancel()
            self.machine.loop.run_until_complete(
                asyncio.gather(self.task, return_exceptions=True))
            self.task = self.resume = self.arrived = None

    def deliver(self, resource: Resource, *, lose: bool = False) -> bool:
        """The next watch event of `resource` reaches the informer (or, `lose`, never
        does); False when there is none."""
        position = self.cursor.get(resource.plural, 0)
        events = self.machine.fake.events(resource, position, position + 1)
        if not events:
            return False
        self.cursor[resource.plural] = position + 1
        if not lose:
            self.last[resource.plural] = position
            self.informers.get(resource)._on_event(events[0])
        return True

    def duplicate(self, resource: Resource) -> None:
        """The last event delivered, delivered again (the same resourceVersion)."""
        position = self.last.get(resource.plural)
        if position is not None:
            event, = self.machine.fake.events(resource, position, position + 1)
            self.informers.get(resource)._on_event(event)

    def relist(self, resource: Resource) -> None:
        self.caught_up(resource)
        self.machine.loop.run_until_complete(self.informers.get(resource)._list())

    def caught_up(self, resource: Resource) -> None:
        """A relist: the watch goes on from now, and what it delivered before is older than
        what the store now holds (a duplicate of it would go back in time, which no
        informer does)."""
        self.cursor[resource.plural] = self.machine.fake.event_count(resource)
        self.last.pop(resource.plural, None)

    def relist_all(self) -> None:
        """What a start does before any worker runs: every informer lists and syncs."""
        for informer in self.informers.all():
            self.caught_up(informer.resource)

        async def lists() -> None:
            for informer in self.informers.all():
                await informer._list()

        self.machine.loop.run_until_complete(lists())


@contextlib.contextmanager
def on_clock(machine: Interleavings) -> Iterator[None]:
    """What setup.py makes while it lasts runs on the machine's clock: the reconciler's
    time (machine.now), the queue's delays and the retry budget's age (machine.clock)."""
    clock = machine.clock
    with contextlib.ExitStack() as stack:
        for module, name, kwargs in (
                (buildrun_setup, "BuildRunReconciler", {"clock": machine.now}),
                (runtime_controller, "RateLimitingQueue", {"clock": clock}),
                (runtime_controller, "default_controller_rate_limiter", {"clock": clock}),
                (buildrun_setup, "Controller", {"clock": clock.now})):
            original = getattr(module, name)
            stack.enter_context(mock.patch.object(
                module, name, functools.partial(original, **kwargs)))
        yield


class PanicLog(logging.Handler):
    """Collects what the controller logs with a traceback: a reconcile that raised
    unexpectedly (Controller._invoke) is a bug, whatever the world did."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(self.format(record))


PANICS = PanicLog()
P = ParamSpec("P")


def stepped(
        body: Callable[Concatenate[Interleavings, P], None],
) -> Callable[Concatenate[Interleavings, P], None]:
    """A step of the machine: its body, then the watches not stalled catch up."""
    @functools.wraps(body)
    def step_then_watch(machine: Interleavings, /, *args: P.args, **kwargs: P.kwargs) -> None:
        body(machine, *args, **kwargs)
        machine.watches_catch_up()
        if machine.replaying:
            machine.promise()  # as hypothesis checks it after every step

    return step_then_watch


class Interleavings(RuleBasedStateMachine):
    """The world around the controller, the controller's replicas in it, and the truth
    (the module's docstring says what each rule does and what is checked)."""

    def __init__(self) -> None:
        super().__init__()
        PANICS.records.clear()  # this example's own
        self.loop = asyncio.new_event_loop()
        virtualtime._install(self.loop, 0.0)  # the conflict retries' sleeps cost nothing
        self.clock = FakeClock()  # the queue's, the budget's and (from EPOCH) the world's
        self.resources = contextlib.ExitStack()  # what teardown closes
        self.resources.callback(self.loop.close)
        self.resources.enter_context(on_clock(self))
        self.tick = 0
        self.problems: list[str] = []
        self.failed = False
        self.replaying = False  # `replay`: the invariants after each step, as hypothesis
        self.strict = False  # KNOWN_GAPS broken too
        self.fake = FakeKube()
        self.fake.created = format_time(self.now())
        seed_namespace(self.fake)
        self.fake.admit(TASKRUNS, tekton_webhook)
        self.buildruns: dict[str, BuildRunTruth] = {}  # by uid
        self.runs: dict[str, Run] = {}  # by TaskRun name
        self.replicas = 0
        self.leader = self.start_replica()
        self.old_leader: Replica | None = None  # lost its lease mid-reconcile
        self.rare = {"build": 0, "process": 0}  # how often each rare event came
        self.policy: str | None = None  # the Build's run policy (`run_policy`)

    # -- the world ------------------------------------------------------------------------

    def now(self) -> datetime.datetime:
        return EPOCH + datetime.timedelta(seconds=self.clock.now())

    def stamp(self) -> str:
        return format_time(self.now())

    def step(self) -> int:
        self.tick += 1
        return self.tick

    def start_replica(self) -> Replica:
        self.replicas += 1
        replica = Replica(self, self.replicas)
        replica.relist_all()
        return replica

    def live_runs(self, *states: str) -> list[Run]:
        return [run for run in self.runs.values()
                if run.deleted_tick is None and (not states or run.state in states)]

    def current(self, name: str) -> JSON | None:
        """The BuildRun named `name` as stored (FakeKube.peek: read, never changed)."""
        return self.fake.peek(BUILDRUNS, name)

    def has_buildruns(self) -> bool:
        return bool(self.buildruns)

    def landed(self, replica: Replica, verb: str, resource: Resource, name: str,
               before: JSON | None, after: JSON | None) -> None:
        """A controller's write took effect: (a), (c) and (d) on it, and the record."""
        tick = self.step()
        decided = replica.decided
        where = f"replica {replica.number}'s {verb} of {resource.plural}/{name}"
        if decided is None:
            self.problems.append(f"(d) {where} was made outside any decided action")
        if resource is BUILDRUNS:
            assert before is not None  # the controller never creates a BuildRun
            uid = before["metadata"]["uid"]
            if decided is not None and decided != uid:
                self.problems.append(f"(d) {where}, decided on BuildRun uid {decided}, "
                                     f"landed on uid {uid}")
            truth = self.buildruns[uid]
            if after is None:
                return
            status = after.get("status") or {}
            if truth.final is not None and status != truth.final:
                self.problems.append(f"(a) {where} changed the status of finished BuildRun "
                                     f"{uid}: {truth.final} -> {status}")
            recorded = recorded_executor(status)
            named = recorded.name if recorded is not None else None
            if named is not None and truth.recorded_tick is None:
                truth.recorded_tick = tick
            if named is not None and named not in {run.name for run in truth.runs}:
                self.problems.append(f"(c) {where} left BuildRun {uid} naming TaskRun "
                                     f"{named}, which it does not own")
            # Its run: the one it names, else (not recorded yet) the one it owns.
            own = next((run for run in reversed(truth.runs) if run.name == named),
                       None if named or not truth.runs else truth.runs[0])
            if status.get("startTime") and (own is None
                                            or status["startTime"] != own.start_time):
                self.problems.append(f"(c) {where} gave BuildRun {uid} startTime "
                                     f"{status['startTime']}, not its run's "
                                     f"({own and own.start_time})")
            if truth.final is None and status.get("completionTime"):
                truth.superseded = self.superseded(after, replica.turn_tick)
                truth.final, truth.final_tick = copy.deepcopy(status), tick
                truth.final_time = self.clock.now()
                truth.final_decided_tick = replica.turn_tick
        elif resource in (TASKRUNS, SERVICEACCOUNTS):
            obj = after if verb == "create" else before
            assert obj is not None
            owner = _owner(obj)
            if decided is not None and decided != owner:
                self.problems.append(f"(d) {where}, decided on BuildRun uid {decided}, "
                                     f"landed on a {resource.kind} of uid {owner}")
            if resource is SERVICEACCOUNTS:
                return
            if verb == "create" and after is not None:
                self.created_run(after, tick, replica)
            elif after is not None and (after.get("spec") or {}).get("status") == \
                    TASKRUN_CANCELLED and self.runs[name].cancel_tick is None:
                self.runs[name].cancel_tick = tick

    def superseded(self, buildrun: JSON, since: int) -> bool:
        """Whether a BuildRun finishing says it was superseded, and rightly: the Build is
        SerialLatestOnly and the BuildRun it names, of the same Build, comes after it in
        the order (creationTimestamp, then name) and was there when the reconcile that
        finished it began (tick `since`; the user may delete it after that look)."""
        message = (succeeded_condition(buildrun.get("status")) or {}).get("message") or ""
        prefix = "superseded by the newer BuildRun "
        if not message.startswith(prefix):
            return False
        named = message[len(prefix):].split(" ", 1)[0]
        key = (buildrun["metadata"]["creationTimestamp"], buildrun["metadata"]["name"])
        if self.policy == "SerialLatestOnly" and any(
                t.name == named and t.build == buildrun["spec"]["build"]["name"]
                and t.order > key and (t.deleted_tick is None or t.deleted_tick > since)
                for t in self.buildruns.values()):
            return True
        self.problems.append(f"(b) {message!r} under run policy {self.policy}: no newer "
                             f"BuildRun {named} of its Build was there")
        return False

    def serial_runs(self) -> list[Run]:
        """(g): the runs going of a serial Build's BuildRuns, but one made for a BuildRun
        that had finished (by a replica that lost its lease, its START in flight, the
        BuildRun canceled meanwhile: no write can be conditional on another object, so its
        turn is free once it finished; row 1 stops that run)."""
        if self.policy is None:
            return []
        going = []
        for run in self.live_runs(NEW, PENDING, RUNNING):
            truth = self.buildruns[run.owner]
            late = truth.final_tick is not None and run.created_tick > truth.final_tick
            if truth.build == fixtures.BUILD and (self.strict or not late):
                going.append(run)
        return going

    def created_run(self, taskrun: JSON, tick: int, replica: Replica) -> None:
        name, owner = taskrun["metadata"]["name"], _owner(taskrun)
        truth = self.buildruns.get(owner or "")
        if truth is None:
            self.problems.append(f"(c) TaskRun {name} was created for no BuildRun ({owner})")
            return
        run = Run(name, truth.uid, parse_duration(taskrun["spec"]["timeout"]),
                  self.clock.now(), tick)
        # (KNOWN_GAPS: a deleted run cannot be told from none by a try whose cache holds
        # no record of it: deleted before the status named it, the cache behind, or a
        # replica that lost its lease, its START in flight.)
        cached = replica.informers.get(BUILDRUNS).store.get(f"ns/{truth.name}")
        knew = cached is not None and cached["metadata"].get("uid") == truth.uid \
            and recorded_executor(cached.get("status") or {}) is not None
        unknown = not knew and all(r.deleted_tick is not None for r in truth.runs)
        # (The same gap for a retry's run: one deleted before the status named it is made
        # again under its name.)
        unknown = unknown or any(r.name == name and r.deleted_tick is not None
                                 for r in truth.runs)
        # A later attempt of an evicted run, where the BuildRun asks for it, is no second
        # run for one attempt (issue 43 part 3: `retry_problem`).
        retry = self.retry_problem(truth, name) if truth.runs else None
        if truth.runs and retry is None:
            truth.retried.append(name)
        elif truth.runs and truth.deleted_tick is None and (self.strict or not unknown):
            # (A run made once the BuildRun was deleted, from a stale cache, is the garbage
            # collector's: no create can be made conditional on its owner still existing.)
            self.problems.append(f"(c) a second TaskRun {name} for BuildRun {truth.uid} "
                                 f"(after {[r.name for r in truth.runs]}), at tick {tick}: "
                                 f"not a retry: {retry}")
        truth.runs.append(run)
        self.runs[name] = run

    def retry_problem(self, truth: BuildRunTruth, name: str) -> str | None:
        """Why TaskRun `name` may not be the next attempt of `truth` (None: it may): the
        BuildRun asks for retries and has attempts left, every run of it so far finished
        (at most one unfinished, ever), the last one evicted, and the name is the
        attempt's (resources.phases.run_name)."""
        if not truth.runs:
            return "no run to retry"
        attempt = len({r.name for r in truth.runs}) + 1
        expected = run_name({"metadata": {"name": truth.name, "uid": truth.uid}}, attempt)
        unfinished = [r.name for r in truth.runs if r.state not in FINISHED]
        if truth.retries < attempt - 1:
            return (f"attempt {attempt} ({name}) of BuildRun {truth.uid}, which asks for "
                    f"{truth.retries} retries (runs {[r.name for r in truth.runs]})")
        if unfinished:
            return (f"attempt {attempt} ({name}) of BuildRun {truth.uid} while {unfinished} "
                    "had not finished")
        if truth.runs[-1].state != EVICTED:
            return (f"attempt {attempt} ({name}) of BuildRun {truth.uid} after a run that "
                    f"was not evicted: {truth.runs[-1].state}")
        if name != expected:
            return f"attempt {attempt} of BuildRun {truth.uid} named {name}, not {expected}"
        return None

    def tekton(self, run: Run, state: str) -> None:
        """Tekton writes the TaskRun's status (its own writes: not the controller's)."""
        tick = self.step()
        run.state = state
        if run.start_time is None:
            run.started, run.start_time = self.clock.now(), self.stamp()
        if state in FINISHED:
            run.finished_tick, run.completion_time = tick, self.stamp()
        written = tekton_status(*state_reason(state), start_time=run.start_time,
                                completion_time=run.completion_time,
                                pod=f"{run.name}-pod", digest=run.digest)
        self.fake.modify(TASKRUNS, run.name, lambda obj: obj.update(status=written))

    # -- (a)-(d), (f): after every step ---------------------------------------------------

    @invariant()
    def promise(self) -> None:
        problems = list(self.problems)
        for truth in self.buildruns.values():
            problems += [f"(b) BuildRun {truth.name} ({truth.uid}): {p}"
                         for p in verdict_problems(truth, strict=self.strict)]
            if truth.deleted_tick is None and truth.final is not None:
                stored = self.current(truth.name)
                assert stored is not None and stored["metadata"]["uid"] == truth.uid
                if (stored.get("status") or {}) != truth.final:
                    problems.append(f"(a) BuildRun {truth.uid}'s finished status changed")
        problems += [f"(f) {record}" for record in PANICS.records]
        going = self.serial_runs()
        if len(going) > 1:
            problems.append(f"(g) run policy {self.policy}: {len(going)} runs of the Build "
                            f"at once: {[(r.name, r.state) for r in going]}")
        if problems:
            self.failed = True
            raise AssertionError("the promise broke:\n" + "\n".join(problems))

    # -- the user -------------------------------------------------------------------------

    @initialize(policy=st.sampled_from(tuple(POLICIES)))
    @stepped
    def run_policy(self, policy: str) -> None:
        """The Build's run policy for the example (its annotation): none, Serial or
        SerialLatestOnly."""
        self.step()
        value = self.policy = POLICIES[policy]
        if value is not None:
            self.fake.modify(BUILDS, fixtures.BUILD, lambda b: b["metadata"].setdefault(
                "annotations", {}).update({RUN_POLICY: value}))

    # A rule with nothing to act on is not drawn (its precondition), so that the steps of
    # an example go to what moves it; the rarer events (a Build's change, a process's
    # death) come at most twice in one.
    @precondition(lambda self: any(self.current(name) is None for name in NAMES))
    @rule(name=st.sampled_from(NAMES), build=st.sampled_from((fixtures.BUILD, GHOST)),
          timeout=st.sampled_from((None, "1m")),
          service_account=st.sampled_from((None, serviceaccounts.GENERATE)),
          retries=st.sampled_from(tuple(RETRIES)))
    @stepped
    def create_buildrun(self, name: str, build: str, timeout: str | None,
                        service_account: str | None = None, retries: str = "off") -> None:
        """A BuildRun of `build`, with its own timeout or none, run as the namespace's
        ServiceAccount or one generated for it (.generate), asking for infrastructure
        retries or not (its annotation)."""
        if self.current(name) is None:
            self.step()
            spec = {key: value for key, value in (("timeout", timeout),
                                                  ("serviceAccount", service_account)) if value}
            buildrun = fixtures.buildrun(name, build, **spec)
            if RETRIES[retries] is not None:
                buildrun["metadata"]["annotations"] = {INFRASTRUCTURE_RETRIES: RETRIES[retries]}
            self.create(buildrun)

    def create(self, buildrun: JSON) -> None:
        obj = self.fake.add(BUILDRUNS, buildrun)
        meta = obj["metadata"]
        asked = (meta.get("annotations") or {}).get(INFRASTRUCTURE_RETRIES)
        self.buildruns[meta["uid"]] = BuildRunTruth(
            meta["uid"], meta["name"], obj["spec"]["build"]["name"],
            retries=int(asked or 0), order=(meta["creationTimestamp"], meta["name"]))

    @precondition(lambda self: self.has_buildruns())
    @rule(act=st.sampled_from(("cancel", "delete", "recreate", "delete its TaskRun")),
          name=st.sampled_from(NAMES))
    @stepped
    def user(self, act: str, name: str) -> None:
        """The user cancels BuildRun `name`, deletes it, recreates it (deletes it and at
        once creates a namesake of the same spec: another uid), or deletes its TaskRun."""
        obj = self.current(name)
        if obj is None:
            return
        truth = self.buildruns[obj["metadata"]["uid"]]
        tick = self.step()
        if act == "cancel":
            if truth.canceled_tick is None:
                self.fake.modify(BUILDRUNS, name, lambda o: o["spec"].update(state=CANCELED))
                truth.canceled_tick = tick
        elif act in ("delete", "recreate"):
            self.fake.remove(BUILDRUNS, name)
            truth.deleted_tick = tick
            if act == "recreate":
                spec = {k: v for k, v in obj["spec"].items() if k != "state"}
                self.create({"metadata": {"name": name, "annotations": obj["metadata"].get(
                    "annotations") or {}}, "spec": spec})
        else:
            for run in truth.runs:
                if run.deleted_tick is None:
                    self.fake.remove(TASKRUNS, run.name)
                    run.deleted_tick = tick

    @precondition(lambda self: self.has_buildruns() and self.rare["build"] < RARE)
    @rule(timeout=st.sampled_from(tuple(BUILD_TIMEOUTS)))
    @stepped
    def build_timeout(self, timeout: str) -> None:
        """The user sets (or unsets) the Build's spec.timeout."""
        self.step()
        self.rare["build"] += 1
        value = BUILD_TIMEOUTS[timeout]
        self.fake.modify(BUILDS, fixtures.BUILD, lambda b: b["spec"].update(timeout=value))

    @precondition(lambda self: bool(self.orphans()))
    @rule()
    @stepped
    def garbage_collector(self) -> None:
        """The garbage collector deletes the TaskRuns and ServiceAccounts whose BuildRun is
        gone."""
        tick = self.step()
        for resource, name in self.orphans():
            self.fake.remove(resource, name)
            if resource is TASKRUNS:
                self.runs[name].deleted_tick = tick

    def orphans(self) -> list[tuple[Resource, str]]:
        uids = self.existing_uids()
        return [(resource, name) for resource in (TASKRUNS, SERVICEACCOUNTS)
                for name, obj in self.stored(resource).items()
                if _owner(obj) not in (None, *uids)]

    def stored(self, resource: Resource) -> dict[str, JSON]:
        """The objects of `resource` by name, as stored (read, never changed)."""
        kind = f"{resource.plural}.{resource.group}"
        return {name: obj for (plural, _, name), obj in self.fake.objects.items()
                if plural == kind}

    def existing_uids(self) -> set[str]:
        return {obj["metadata"]["uid"] for obj in self.stored(BUILDRUNS).values()}

    # -- Tekton ---------------------------------------------------------------------------

    @precondition(lambda self: bool(self.can_progress()))
    @rule(i=st.integers(0, 3), to=st.sampled_from((PENDING, RUNNING, SUCCEEDED, FAILED)))
    @stepped
    def tekton_progresses(self, i: int, to: str) -> None:
        """Tekton moves a run on: its first look (Pending, startTime set), Running, or its
        build's end, Succeeded or Failed. A build ends by itself only within its timeout
        (past it Tekton times the run out first) and only while no cancel was asked for
        (Tekton looks at that first)."""
        run = _pick(self.can_progress(), i)
        if run is None:
            return  # (a replayed step that no longer applies)
        order = (NEW, PENDING, RUNNING)
        if to in order and order.index(to) <= order.index(run.state):
            to = RUNNING
        if to == SUCCEEDED:
            run.digest = "sha256:" + hashlib.sha256(run.name.encode()).hexdigest()
        self.tekton(run, to)

    def can_progress(self) -> list[Run]:
        return [run for run in self.live_runs(NEW, PENDING, RUNNING) if run.cancel_tick is None
                and (run.started is None or self.clock.now() < run.started + run.timeout)]

    @precondition(lambda self: bool(self.can_progress()))
    @rule(i=st.integers(0, 3))
    @stepped
    def tekton_evicts(self, i: int) -> None:
        """The kubelet evicts a run's pod, and Tekton fails the run PodEvicted (an
        infrastructure failure: retried where the BuildRun asks for it)."""
        run = _pick(self.can_progress(), i)
        if run is not None:
            self.tekton(run, EVICTED)

    @precondition(lambda self: bool(self.can_time_out()))
    @rule(i=st.integers(0, 3))
    @stepped
    def tekton_times_out(self, i: int) -> None:
        """Tekton ends a run its own timeout has passed for: TaskRunTimeout."""
        run = _pick(self.can_time_out(), i)
        if run is not None:
            self.tekton(run, TIMED_OUT)

    def can_time_out(self) -> list[Run]:
        return [run for run in self.live_runs(PENDING, RUNNING) if run.cancel_tick is None
                and run.started is not None and self.clock.now() >= run.started + run.timeout]

    @precondition(lambda self: bool(self.can_cancel()))
    @rule(i=st.integers(0, 3))
    @stepped
    def tekton_cancels(self, i: int) -> None:
        """Tekton carries out a cancel the controller asked for: TaskRunCancelled."""
        run = _pick(self.can_cancel(), i)
        if run is not None:
            self.tekton(run, CANCELLED)

    def can_cancel(self) -> list[Run]:
        return [run for run in self.live_runs(NEW, PENDING, RUNNING)
                if run.cancel_tick is not None]

    # -- the controller -------------------------------------------------------------------

    @precondition(lambda self: self.leader.can_work())
    @rule(calls=st.sampled_from((1, 2, 100)))
    @stepped
    def work(self, calls: int) -> None:
        """The leader's worker: `calls` API calls of its reconcile (a new turn if none is in
        flight), 100 being to the end of it."""
        self.step()
        for _ in range(calls):
            self.leader.advance()
            if not self.leader.busy():
                break

    @precondition(lambda self: self.old_leader is not None and self.old_leader.busy())
    @rule(calls=st.sampled_from((1, 100)))
    @stepped
    def old_leader_works(self, calls: int) -> None:
        """The replica that lost its lease goes on with the reconcile it had in flight."""
        self.step()
        for _ in range(calls):
            if self.old_leader is None or not self.old_leader.busy():
                self.old_leader = None  # that reconcile ended: the process exits
                break
            self.old_leader.advance()

    @precondition(lambda self: self.has_buildruns() and self.rare["process"] < RARE)
    @rule(how=st.sampled_from(("restart", "lose lease")))
    @stepped
    def process_dies(self, how: str) -> None:
        """The leader's process dies (restart: a new one lists everything and leads), or
        cannot renew its lease (lose lease: a new replica leads while the old one still
        has its reconcile in flight; it stops once that ends)."""
        self.step()
        self.rare["process"] += 1
        if how == "restart" or not self.leader.busy():
            self.leader.stop()
        else:
            if self.old_leader is not None:
                self.old_leader.stop()
            self.old_leader = self.leader
        self.leader = self.start_replica()

    @precondition(lambda self: bool(self.clock.pending_timers() or self.live_runs()))
    @rule(seconds=st.sampled_from((0.01, 1.0, 30.0, 61.0, 125.0, 3601.0)))
    @stepped
    def time_passes(self, seconds: float) -> None:
        """Virtual time moves on: due backoffs and requeues come out of the queue."""
        self.step()
        self.clock.step(seconds)
        self.fake.created = self.stamp()

    # -- the watch ------------------------------------------------------------------------

    @precondition(lambda self: self.has_buildruns())
    @rule(resource=st.sampled_from(sorted(WATCHED)),
          how=st.sampled_from(("stall", "resume", "deliver one", "lose one", "duplicate",
                               "relist")))
    @stepped
    def watch(self, resource: str, how: str) -> None:
        """The leader's watch of `resource`: it stalls (its events wait: the cache lags
        until it resumes), resumes, delivers just the next event that waited, loses it
        (the store stale until a later event of the object or a relist), delivers the
        last one again, or relists (as after it expired)."""
        self.step()
        replica, watched = self.leader, WATCHED[resource]
        if how == "stall":
            replica.stalled.add(resource)
        elif how == "resume":
            replica.stalled.discard(resource)
        elif how in ("deliver one", "lose one"):
            replica.deliver(watched, lose=how == "lose one")
        elif how == "duplicate":
            replica.duplicate(watched)
        else:
            replica.relist(watched)

    def watches_catch_up(self) -> None:
        """Every event the leader's watches have not stalled on reaches its informer."""
        for plural, watched in WATCHED.items():
            if plural not in self.leader.stalled:
                while self.leader.deliver(watched):
                    pass

    # -- the API server's faults ----------------------------------------------------------

    @precondition(lambda self: self.has_buildruns())
    @rule(call=st.sampled_from(sorted(FAULT_CALLS)), fault=st.sampled_from(sorted(FAULTS)),
          times=st.sampled_from((1, 3)))
    @stepped
    def fault(self, call: str, fault: str, times: int) -> None:
        """The next `times` such calls fail (or, `landed`, take effect and then fail)."""
        verb, resource, subresource = FAULT_CALLS[call]
        error, landed = FAULTS[fault]

        def raise_it(_: object) -> None:
            raise error()

        (self.fake.after if landed else self.fake.before)(
            verb, resource, raise_it, times=times, subresource=subresource)

    # -- (e): the end of each example ------------------------------------------------------

    def teardown(self) -> None:
        try:
            if not self.failed:
                self.settle()
                self.promise()
                self.liveness()
        finally:
            for replica in (self.leader, self.old_leader):
                if replica is not None:
                    replica.stop()
            self.resources.close()

    def settle(self) -> None:
        """The faults stop, the old leader's reconcile ends, the leader's caches catch up,
        and the controller runs, Tekton up, until nothing is left to do."""
        self.fake.clear_hooks()
        if self.old_leader is not None:
            self.old_leader.finish_turn()
            self.old_leader = None
        leader = self.leader
        leader.finish_turn()
        leader.relist_all()
        step = 0.01
        for _ in range(SETTLE_ROUNDS):
            self.tekton_settles()
            leader.stalled.clear()
            self.watches_catch_up()
            if len(leader.queue):
                leader.turn()
                step = 0.01
            elif self.clock.pending_timers():
                self.clock.step(step)  # to the next backoff or requeue, roughly
                self.fake.created = self.stamp()
                step *= 2
            else:
                return
        self.problems.append(f"(e) the controller was still busy after {SETTLE_ROUNDS} "
                             "rounds of settling")

    def tekton_settles(self) -> None:
        """Tekton, up: every cancel asked for is carried out, every timeout due enforced."""
        for run in self.can_cancel():
            self.tekton(run, CANCELLED)
        for run in self.can_time_out():
            self.tekton(run, TIMED_OUT)

    def liveness(self) -> None:
        """(e), once the controller is quiet (`settle`)."""
        problems = []
        for name, obj in self.stored(BUILDRUNS).items():
            truth = self.buildruns[obj["metadata"]["uid"]]
            status = obj.get("status") or {}
            # Its run: the first, or the last of its retries (a run made again after its
            # deletion, KNOWN_GAPS', is not it).
            run = next((r for r in reversed(truth.runs) if r.name in truth.retried),
                       truth.runs[0] if truth.runs else None)
            done = bool(status.get("completionTime"))
            why = (f"its run {run.state}" if run is not None and run.state in FINISHED
                   else "its run was deleted" if run is not None and run.deleted_tick
                   else "it was canceled" if truth.canceled_tick is not None
                   else "its Build does not exist" if truth.build == GHOST else None)
            if why is not None and not done:
                problems.append(f"(e) BuildRun {name} ({truth.uid}) is not finished although "
                                f"{why}: {status}")
            waits = (succeeded_condition(status) or {}).get("reason") == \
                reasons.SERIAL_RUN_WAITING
            # Any run of the Build going holds it back, one the controller made late too
            # (an orphan the garbage collector, not run here, would delete).
            behind = [r.name for r in self.live_runs(NEW, PENDING, RUNNING)
                      if self.buildruns[r.owner].build == truth.build and r.owner != truth.uid]
            if not done and recorded_executor(status) is None and not (waits and behind):
                problems.append(f"(e) BuildRun {name} ({truth.uid}) never started: {status}"
                                + (" (it waits, but no run of its Build is going)"
                                   if waits else ""))
            if done and run is not None and run.deleted_tick is None \
                    and run.state not in FINISHED:
                problems.append(f"(e) BuildRun {name} ({truth.uid}) finished, but its run "
                                f"is still {run.state}")
            left = [sa for sa, account in self.stored(SERVICEACCOUNTS).items()
                    if _owner(account) == truth.uid]
            if done and left:
                problems.append(f"(e) BuildRun {name} ({truth.uid}) finished, but the "
                                f"ServiceAccount generated for it is left: {left}")
        if problems:
            raise AssertionError("\n".join(problems))


def _pick(runs: list[Run], i: int) -> Run | None:
    return runs[i % len(runs)] if runs else None


def state_reason(state: str) -> tuple[str, str]:
    """The Succeeded condition Tekton writes for a run in `state`."""
    return {PENDING: ("Unknown", "Pending"), RUNNING: ("Unknown", "Running"),
            SUCCEEDED: ("True", reasons.SUCCEEDED), FAILED: ("False", reasons.FAILED),
            EVICTED: ("False", reasons.POD_EVICTED),
            TIMED_OUT: ("False", reasons.TASK_RUN_TIMEOUT),
            CANCELLED: ("False", reasons.TASK_RUN_CANCELLED)}[state]


# -- running it -------------------------------------------------------------------------------

# Sized to run in about 25 s here when nothing fails; INTERLEAVINGS_EXAMPLES and
# INTERLEAVINGS_STEPS explore more by hand. Examples of up to sixty steps found each of
# the bugs below (and bugs planted on purpose) within 800 examples; of up to forty or
# twenty-five, some not within 2,000.
EXAMPLES = int(os.environ.get("INTERLEAVINGS_EXAMPLES", "1000"))
STEPS = int(os.environ.get("INTERLEAVINGS_STEPS", "60"))
# Other examples on every run (a long exploration by hand); `make test`'s are always the same.
RANDOM = os.environ.get("INTERLEAVINGS_RANDOM", "") not in ("", "0")


@contextlib.contextmanager
def quiet_controller() -> Iterator[PanicLog]:
    """The controller's logs off but for tracebacks, which are collected: thousands of
    examples log tens of thousands of retries."""
    logger = logging.getLogger("controller")
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.ERROR)
    logger.propagate = False
    logger.addHandler(PANICS)
    try:
        yield PANICS
    finally:
        logger.removeHandler(PANICS)
        logger.setLevel(level)
        logger.propagate = propagate


def test_interleavings() -> None:
    with quiet_controller():
        run_state_machine_as_test(Interleavings, settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
            derandomize=not RANDOM, database=None, suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False))


def replay(steps: Callable[[Interleavings], None], *, strict: bool = False) -> None:
    """A counterexample, replayed as hypothesis prints one (`state` the machine): the
    invariants after each step, then the end of the example (teardown: liveness)."""
    with quiet_controller():
        machine = Interleavings()
        machine.replaying = True
        machine.strict = strict
        try:
            machine.promise()
            steps(machine)
        except BaseException:
            machine.failed = True
            raise
        finally:
            machine.teardown()


# -- the counterexamples hypothesis found, shrunk (then cut by hand to what matters) ----------

# KNOWN_GAPS: what the machine still finds on today's controller, each kept as a strict
# xfail below (replayed `strict`), and tolerated by the machine itself, so that it looks
# for anything else. README says why each stays open.
GAP_UNRECORDED_RUN = (
    "a TaskRun deleted before the status recorded it (or before the cache held the record, "
    "or while a replica that lost its lease had a START in flight) cannot be told from one "
    "never made: the next try makes a second (the create and the "
    "status write cannot be one write; recording first would cost a status write per "
    "start and name a run not yet made)")
GAP_VERDICT_BEFORE_CANCEL = (
    "the backstops (rows 17, 19) and a spent budget (row 15) write their verdict, then "
    "cancel the run: a run that succeeds between their live read of it and the cancel is "
    "reported by the verdict (README: the windows that stay open)")

APP = fixtures.BUILD


def test_part_2_a_start_decided_on_a_deleted_buildrun_never_lands_on_its_namesake() -> None:
    """Holds since the writes are pinned to the uid decided on (conflict.pinned, reread). Before
    (found by the machine):
    The leader's cache still holds BuildRun a (uid A) when a is deleted and created again
    (uid B). Its START for A labels the BuildRun named a (B: no uid precondition), creates
    A's TaskRun, and its status write meets a conflict (A's resourceVersion); write_status
    reads a again, finds B, NEW, and records A's TaskRun on B. (d), (c)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.watch(resource="buildruns", how="stall")
        state.user(act="recreate", name="a")
        state.work(calls=100)

    replay(steps)


def test_part_2_a_user_error_decided_on_a_deleted_buildrun_never_ends_its_namesake() -> None:
    """Holds since the writes are pinned to the uid decided on (conflict.reread), and the namesake
    is then reconciled (buildrun_wakes compares uids). Before (found by the machine):
    The same, for a verdict: A's Build does not exist, the namesake B's does; the
    BuildNotFound decided on A lands on B after the conflict's re-read. (d), (b)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=GHOST, timeout=None)
        state.watch(resource="buildruns", how="stall")
        state.user(act="delete", name="a")
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=100)

    replay(steps)


def test_part_2_the_old_leader_never_finishes_a_start_on_the_namesake() -> None:
    """Holds since the writes are pinned to the uid decided on (conflict.pinned). Before (found by
    the machine):
    A lost lease: the old leader's reconcile of A is parked at its first call when A is
    deleted and B created; it then labels B and records A's TaskRun on B. (d), (c)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=1)
        state.process_dies(how="lose lease")
        state.user(act="recreate", name="a")
        state.old_leader_works(calls=100)

    replay(steps)


def test_part_3_a_cancel_seen_before_the_success_keeps_the_runs_outcome() -> None:
    """Holds since a cancel waits for the run's end (rows 14, 18). Before (found by the machine):
    The TaskRun succeeded (its image pushed) but the cache still says Running when the
    user's cancel arrives: row 17 finishes BuildRunCanceled at once and its cancel meets a
    finished TaskRun. (b): a run that succeeded reported canceled."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=100)
        state.tekton_progresses(i=0, to=RUNNING)
        state.watch(resource="taskruns", how="stall")
        state.tekton_progresses(i=0, to=SUCCEEDED)
        state.user(act="cancel", name="a")
        state.work(calls=100)

    replay(steps)


def test_part_3_a_run_that_succeeds_before_the_cancel_reaches_it_keeps_its_outcome() -> None:
    """Holds since a cancel waits for the run's end (rows 14, 18): no verdict is written before it.
    Before (found by the machine):
    No stale cache: row 17 writes BuildRunCanceled, and Tekton completes the TaskRun
    before the cancel patch reaches it (Tekton's webhook then refuses the patch). (b)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=100)
        state.tekton_progresses(i=0, to=RUNNING)
        state.user(act="cancel", name="a")
        state.work(calls=2)  # the status write made, the cancel not yet
        state.tekton_progresses(i=0, to=SUCCEEDED)
        state.work(calls=100)

    replay(steps, strict=True)  # nor after: a cancel writes no verdict first


def test_part_4_the_backstop_counts_from_the_runs_own_timeout() -> None:
    """Holds since the backstop reads the run's own spec.timeout (Executor.timeout). Before (found
    by the machine):
    A try creates the TaskRun (Tekton's default timeout, an hour) and dies before
    recording it; the Build's timeout is then set to 1m; the next try adopts the TaskRun
    and snapshots 1m, and the backstop ends the BuildRun BuildRunTimeout two minutes
    later, while its run has 58 minutes to go. (b)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=3)  # labelled, TaskRun created, its status write not made
        state.process_dies(how="restart")
        state.build_timeout(timeout="1m")
        state.work(calls=100)
        state.time_passes(seconds=125.0)
        state.work(calls=100)

    replay(steps)


def test_part_5_a_finish_the_run_decided_keeps_the_runs_completion_time() -> None:
    """The TaskRun failed a second before the controller looked: the BuildRun's
    completionTime is the controller's clock, not the run's. (b)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=100)
        state.tekton_progresses(i=0, to=FAILED)
        state.time_passes(seconds=1.0)
        state.work(calls=100)

    replay(steps)


def test_a_namesake_a_relist_brings_is_reconciled() -> None:
    """BuildRun a ends BuildNotFound, is deleted and created again, all while the watch of
    BuildRuns is stalled; the relist (the end's: the caches catch up) brings the namesake
    as an update of the cached a, which is NEW as the namesake is and of the same
    generation. buildrun_wakes passed it only once it compared uids: before, nothing
    queued it and it never started. (e)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=GHOST, timeout=None)
        state.watch(resource="buildruns", how="stall")
        state.work(calls=100)
        state.user(act="recreate", name="a")

    replay(steps)


@pytest.mark.xfail(strict=True, reason=GAP_UNRECORDED_RUN)
def test_a_taskrun_deleted_before_it_was_recorded_is_made_again() -> None:
    """A try creates the TaskRun and dies before recording it; the user deletes the
    TaskRun; the next try finds none and creates a second. (c): two runs for one uid."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=3)
        state.process_dies(how="restart")
        state.user(act="delete its TaskRun", name="a")
        state.work(calls=100)

    replay(steps, strict=True)


def test_a_buildrun_deleted_during_its_start_is_no_panic() -> None:
    """Holds since the label patch takes a 404 as gone (conflict.patch_pinned). Before (found by
    the machine):
    BuildRun a is deleted while its START is in flight: the label patch's 404 is no
    error the reconciler expects, so it is logged with a traceback and counted as a panic
    (Controller._invoke). (f)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=1)
        state.user(act="delete", name="a")
        state.work(calls=100)

    replay(steps)


def test_a_cancel_before_the_start_was_recorded_keeps_the_runs_outcome() -> None:
    """Holds since a run that exists decides (row 5, ADOPT, before row 7). Before (found by the
    machine):
    A try creates the TaskRun but loses the answer (the status never records it); the
    TaskRun succeeds; the user cancels: row 7 (NEW, canceled) ends the BuildRun
    BuildRunCanceled without looking at the unrecorded run's outcome, which only giving up
    does (row 5), and its cancel meets a finished TaskRun. (b)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.fault(call="create taskruns", fault="disconnect landed", times=1)
        state.work(calls=100)
        state.tekton_progresses(i=0, to=SUCCEEDED)
        state.user(act="cancel", name="a")
        state.work(calls=100)

    replay(steps)


@pytest.mark.xfail(strict=True, reason=GAP_VERDICT_BEFORE_CANCEL)
def test_the_run_succeeds_between_the_backstops_verdict_and_its_cancel() -> None:
    """Tekton never started the TaskRun; two minutes on, the backstop (row 18, counting from
    its creation) writes BuildRunTimeout; Tekton, back, starts the run and it succeeds
    before the cancel reaches it. (b): a run that succeeded reported timed out."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout="1m")
        state.work(calls=100)
        state.time_passes(seconds=125.0)
        state.work(calls=3)  # the backstop's live read and status write made, its cancel not
        state.tekton_progresses(i=0, to=SUCCEEDED)
        state.work(calls=100)

    replay(steps, strict=True)


@pytest.mark.xfail(strict=True, reason=GAP_VERDICT_BEFORE_CANCEL)
def test_the_run_succeeds_between_giving_up_and_its_cancel() -> None:
    """Two status writes of a running BuildRun fail: the retry budget (one retry here) is
    spent and give_up finishes it ReconcilerRetriesExhausted (row 15); the TaskRun
    succeeds before the cancel reaches it. (b)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=100)
        state.fault(call="put buildruns/status", fault="5xx", times=2)
        state.tekton_progresses(i=0, to=RUNNING)
        state.work(calls=100)
        state.time_passes(seconds=1.0)
        state.work(calls=100)  # the second failure: the budget is spent
        state.work(calls=4)  # give_up's reads (the run live) and status write made, not its
        # cancel
        state.tekton_progresses(i=0, to=SUCCEEDED)
        state.work(calls=100)

    replay(steps, strict=True)


@pytest.mark.xfail(strict=True, reason=GAP_VERDICT_BEFORE_CANCEL)
def test_the_run_succeeds_between_the_backstops_read_and_its_verdict() -> None:
    """Tekton never started the TaskRun; two minutes on, the backstop reads it Pending
    past its deadline; Tekton, back, starts the run and it succeeds before the backstop's
    BuildRunTimeout lands. (b). Found by the randomized long run."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.build_timeout(timeout="1m")
        state.process_dies(how="restart")
        state.work(calls=100)
        state.time_passes(seconds=125.0)
        state.work(calls=2)  # the backstop's reads made, its status write not yet
        state.tekton_progresses(i=0, to=SUCCEEDED)
        state.work(calls=100)

    replay(steps, strict=True)


@pytest.mark.xfail(strict=True, reason=GAP_UNRECORDED_RUN)
def test_the_old_leader_makes_the_run_again_once_the_recorded_one_is_deleted() -> None:
    """A lost lease: the old leader's START of b is parked at its first call; the new
    leader starts b (its TaskRun made and recorded); the user deletes that TaskRun; the
    old leader's START, decided before any of it, makes the TaskRun again. (c). Found by
    the machine in `make test`'s own examples under another hash seed."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="b", build=APP, timeout=None)
        state.work(calls=1)
        state.process_dies(how="lose lease")
        state.work(calls=100)
        state.old_leader_works(calls=1)
        state.user(act="delete its TaskRun", name="b")
        state.old_leader_works(calls=1)

    replay(steps, strict=True)


def test_the_backstop_on_a_stale_cache_keeps_the_runs_completion_time() -> None:
    """Holds since the backstops read the run live before their verdict. Before:
    The TaskRun times out (Tekton) while the TaskRun watch is stalled; a minute on, the
    backstop, its cache still saying Pending, finishes the BuildRun BuildRunTimeout with
    the controller's clock as completionTime, not the run's. (b). Found by the planted-bug
    script's control run."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.build_timeout(timeout="1m")
        state.work(calls=100)
        state.watch(resource="taskruns", how="stall")
        state.tekton_progresses(i=0, to=PENDING)
        state.time_passes(seconds=61.0)
        state.tekton_times_out(i=0)
        state.time_passes(seconds=61.0)
        state.work(calls=100)

    replay(steps, strict=True)


def test_the_backstop_on_a_stale_cache_reports_the_runs_success() -> None:
    """Holds since the backstops read the run live before their verdict. Before:
    The TaskRun succeeds while the TaskRun watch is stalled; two minutes on, the
    backstop, its cache still saying the run was never started, finishes the BuildRun
    BuildRunTimeout. (b). Found by the randomized long run."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.build_timeout(timeout="1m")
        state.process_dies(how="restart")
        state.work(calls=100)
        state.watch(resource="taskruns", how="stall")
        state.tekton_progresses(i=0, to=SUCCEEDED)
        state.time_passes(seconds=125.0)
        state.work(calls=100)

    replay(steps, strict=True)


def test_giving_up_on_a_buildrun_finished_meanwhile_looks_again_at_its_service_account(
) -> None:
    """Holds since giving up on a Done BuildRun looks again after the longest backoff.
    Before: the finish's status write lands but its answer is lost (a failure), and the next
    try's deletion of the generated ServiceAccount (row 3) fails: the budget is spent,
    and give_up leaves a DONE BuildRun alone, so rows 1-3 never run again for it and
    nothing else queues it: the ServiceAccount stays (had its TaskRun still been
    running, it would never be cancelled). (e)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None,
                              service_account=serviceaccounts.GENERATE)
        state.work(calls=100)
        state.tekton_progresses(i=0, to=FAILED)
        state.fault(call="put buildruns/status", fault="504 landed", times=1)
        state.work(calls=100)
        state.fault(call="delete serviceaccounts", fault="5xx", times=1)
        state.time_passes(seconds=0.01)
        state.work(calls=100)  # the second failure: the budget is spent
        state.work(calls=100)  # give_up

    replay(steps, strict=True)


def test_a_cancel_whose_verdict_write_is_lost_keeps_the_runs_outcome() -> None:
    """Holds since a cancel waits for the run's end (row 18 writes Unknown, no verdict). Before
    (found by the machine):
    The same path, on main, with a TaskRun: the canceled BuildRun's BuildRunCanceled
    lands unanswered (row 17), the next try's cancel of the still running TaskRun (row 1)
    fails, the budget is spent, give_up leaves the DONE BuildRun alone, and the TaskRun,
    never asked to stop, succeeds. (b)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=100)
        state.tekton_progresses(i=0, to=RUNNING)
        state.fault(call="put buildruns/status", fault="504 landed", times=1)
        state.user(act="cancel", name="a")
        state.work(calls=100)
        state.fault(call="patch taskruns", fault="5xx", times=1)
        state.time_passes(seconds=0.01)
        state.work(calls=100)  # the second failure: the budget is spent
        state.work(calls=100)  # give_up
        state.tekton_progresses(i=0, to=SUCCEEDED)

    replay(steps, strict=True)  # nor after: a cancel writes no verdict first


def test_serial_a_start_in_flight_on_a_replica_that_lost_its_lease_runs_alone() -> None:
    """Holds since a serial start takes the Build's turn in the API server first
    (Actions.take_turn). Before (built by hand; the machine's derandomized examples had not
    met it): b's START is parked at its TaskRun's create when the lease is lost; a,
    created in the same second (its name first), is started by the new leader, whose live
    look finds b new and without a run; then the old leader's create lands. (g): two runs
    at once. Now b's turn is written before its create: the new leader finds the turn
    held by b, which goes first, and a waits behind it."""
    def steps(state: Interleavings) -> None:
        state.run_policy(policy="Serial")
        state.create_buildrun(name="b", build=APP, timeout=None)
        state.work(calls=3)  # b's turn taken, its link made, parked at its TaskRun's create
        state.process_dies(how="lose lease")
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=100)
        state.work(calls=100)
        state.old_leader_works(calls=100)

    replay(steps, strict=True)


def test_serial_two_replicas_racing_for_the_turn_one_writes_it_the_other_waits() -> None:
    """A lost lease with b's START parked at its turn's write, decided on the Build as it
    was (no holder); the new leader starts a (its turn taken, its run made); then the old
    leader's write of b's turn meets a 409 Conflict (the Build's resourceVersion moved),
    reads the Build again, finds the turn a's (running) and b waits behind a. (g)."""
    def steps(state: Interleavings) -> None:
        state.run_policy(policy="Serial")
        state.create_buildrun(name="b", build=APP, timeout=None)
        state.work(calls=1)  # parked at b's turn's write
        state.process_dies(how="lose lease")
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=100)
        state.work(calls=100)
        state.old_leader_works(calls=100)
        waiting = succeeded_condition((state.current("b") or {}).get("status")) or {}
        assert waiting.get("reason") == reasons.SERIAL_RUN_WAITING, waiting
        assert [r.name for r in state.live_runs()] == [
            t.runs[0].name for t in state.buildruns.values() if t.name == "a"]

    replay(steps, strict=True)


def test_serial_a_superseding_buildrun_deleted_after_the_look_still_stands() -> None:
    """Found by the machine (its check was too strict, the controller right): a is
    superseded by b, looked at live; the user deletes b before a's verdict is written.
    The verdict rests on what the reconcile saw; (b) accepts a newer BuildRun that was
    there when it began."""
    def steps(state: Interleavings) -> None:
        state.run_policy(policy="SerialLatestOnly")
        state.create_buildrun(name="b", build=APP, timeout="1m",
                              service_account=serviceaccounts.GENERATE)
        state.watch(resource="taskruns", how="deliver one")
        state.process_dies(how="restart")
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.work(calls=1)
        state.work(calls=1)
        state.user(act="delete", name="b")
        state.work(calls=2)

    replay(steps)


def test_a_conflict_deleting_a_generated_service_account_still_there_is_retried() -> None:
    """Holds since the conflict is read again (actions._delete_service_account). Before
    (found by the machine once the run policy shifted its examples; main had it too):
    a 409 on the delete of b's generated ServiceAccount was taken for its namesake's
    precondition failing, and the ServiceAccount was left for good, nothing waking b
    again. (e)."""
    def steps(state: Interleavings) -> None:
        state.create_buildrun(name="b", build=APP, timeout=None,
                              service_account=serviceaccounts.GENERATE)
        state.build_timeout(timeout="1m")
        state.work(calls=1)
        state.work(calls=1)
        state.work(calls=1)
        state.fault(call="delete serviceaccounts", fault="conflict", times=1)
        state.build_timeout(timeout="1m")
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.process_dies(how="restart")
        state.work(calls=1)
        state.process_dies(how="restart")
        state.user(act="cancel", name="b")
        for _ in range(5):
            state.work(calls=1)

    replay(steps)


def test_serial_a_start_the_caches_do_not_show_yet_holds_back_an_earlier_named_one() -> None:
    """What the START's live look is for (observe.recheck_serial): b starts while the
    leader's BuildRun and TaskRun watches lag (b's writes and run not in its caches); a,
    created in the same second (its name first in the order), arrives. The caches show b
    new and after a, and no run: a would start beside b. The look, live, finds b running.
    (g). Without it (planted.py's 'START trusts the caches') this fails."""
    def steps(state: Interleavings) -> None:
        state.run_policy(policy="Serial")
        state.create_buildrun(name="b", build=APP, timeout=None)
        state.watch(resource="buildruns", how="stall")
        state.watch(resource="taskruns", how="stall")
        state.work(calls=100)
        state.create_buildrun(name="a", build=APP, timeout=None)
        state.watch(resource="buildruns", how="lose one")  # b's labels
        state.watch(resource="buildruns", how="lose one")  # b's status: its run recorded
        state.watch(resource="buildruns", how="deliver one")  # a
        state.work(calls=100)

    replay(steps)
