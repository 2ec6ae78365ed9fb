"""Observing a BuildRun: the facts `states.decide` reads, and the objects the decided
action works on. Reads only: the caches first, the API server where a verdict must not
rest on a cache that may lag (a NEW BuildRun's references, a failed TaskRun's pod).

What the BuildRun runs as (a TaskRun, or a PipelineRun and its TaskRuns) is the
`Executor`'s to say (executors.py); this module reads what it names.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace

from controller.buildrun import serviceaccounts
from controller.buildrun.buildruns import (
    cancel_left,
    canceled,
    deadline_left,
    owned_by,
    pending_left,
    pending_timeout,
    phase_of,
    pod_wait_left,
    recorded_executor_name,
    ttl_left,
)
from controller.buildrun.caches import (
    BY_BUILDRUN,
    GOING_BY_BUILD,
    UNFINISHED_BY_BUILD,
    UNWATCHED_POLL,
    Caches,
    ending,
)
from controller.buildrun.executors import TASKRUN, Executor, executor_of
from controller.buildrun.outcomes import (
    Outcome,
    completed_pod_outcome,
    pending_timeout_message,
    run_finished,
    running_reason,
    timeout_message,
)
from controller.buildrun.plan import Plan, Planner
from controller.buildrun.reasons import TASK_RUN_CANCELLED
from controller.buildrun.retries import (
    OFF,
    Failure,
    Policy,
    attempts_of,
    infrastructure_failure,
    limit_of,
)
from controller.buildrun.serial import (
    RunPolicy,
    Standing,
    order_key,
    run_owner,
    run_policy,
    standing,
    turn_of,
)
from controller.buildrun.spec import build_name
from controller.buildrun.states import Observation, Phase
from controller.runtime.conflict import reread
from controller.runtime.errors import UserError
from controller.runtime.kube import JSON, PODS, Kube
from controller.runtime.shapes import at, text
from controller.runtime.timestamps import Clock
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.indexes import build_names
from controller.shipwright.resources import BUILDRUNS, BUILDS, TASKRUNS


@dataclass(frozen=True)
class Seen:
    """One reconcile's look at the world: the facts `decide` reads, and the objects the
    decided action works on (the BuildRun copy, what it runs as, what START would
    create)."""

    buildrun: JSON
    observation: Observation
    # The TaskRun or PipelineRun (as `executor` says) the BuildRun runs as, if it exists.
    run: JSON | None = None
    plan: Plan | None = None
    # NEW: the referenced Build, once found and validated (its labels go on the BuildRun).
    build: JSON | None = None
    # DONE: the ServiceAccount generated for the BuildRun, if it is still there.
    service_account: JSON | None = None
    executor: Executor = TASKRUN
    # A finished PipelineRun's TaskRuns that could be read (childReferences order).
    children: tuple[JSON, ...] = ()
    # Seconds until the next look although nothing wakes it: a run of an unwatched kind
    # (Caches.unwatched), followed by polling.
    poll: float | None = None
    # A finished run's pod as the pod cache holds it, for Shipwright's ramp-up metrics
    # (None when it is not cached: as Shipwright, whose cached client finds none then).
    rampup_pod: JSON | None = None
    # RUNNING, its run failed for the infrastructure (retries.py): why, the attempt the
    # next run would be (2 is the first retry) and how many runs it may have in all.
    failure: Failure | None = None
    next_attempt: int = 0
    attempts_allowed: int = 1
    # Why the infrastructure-retries annotation was not read (a bad value), if it matters.
    retry_error: str = ""
    # RUNNING, the run not finished: its pod as the pod cache keeps it (caches.slim_pod:
    # why it waits, if it cannot start), for the message (outcomes.running_reason).
    pod: JSON | None = None
    # RUNNING: seconds until the pending deadline (row 20), None without one.
    pending_left: float | None = None


class Observer:
    def __init__(self, kube: Kube, caches: Caches, planner: Planner, clock: Clock,
                 executor: Executor, timeout_grace: float,
                 pending_timeout: float | None = None,
                 retries: Policy = OFF) -> None:
        self.kube = kube
        self.caches = caches
        self.planner = planner
        self.clock = clock
        # What a new BuildRun runs as (BUILDRUN_EXECUTOR).
        self.executor = executor
        # Rows 17 and 19 are backstops: this long past the timeout Tekton enforces itself,
        # or after a cancel it confirms itself.
        self.timeout_grace = timeout_grace
        # Row 20's limit when neither the BuildRun nor its Build has the annotation
        # (--pending-timeout; None: none).
        self.pending_timeout = pending_timeout
        # Infrastructure retries' defaults (--infrastructure-retries, its delay).
        self.retries = retries

    def executor_of(self, buildrun: JSON) -> Executor:
        return executor_of(buildrun, self.executor)

    async def observe(self, buildrun: JSON) -> Seen | None:
        """What `decide` needs, and what the action will work on; None when the
        BuildRun turns out to be gone."""
        phase = phase_of(buildrun)
        if phase is Phase.NEW:
            return await self._observe_new(buildrun)
        if phase is Phase.DONE:
            return self.observe_done(buildrun)
        seen = await self.observe_run(buildrun)
        now = self.clock()
        is_canceled = canceled(buildrun)
        cancel_overdue = cancel_left(buildrun, now, self.timeout_grace) == 0.0
        deadline_passed = self._deadline_passed(buildrun, seen, now)
        pending = self._pending_timeout(buildrun)
        if (seen.run is not None and not run_finished(seen.run)
                and (deadline_passed or (is_canceled and cancel_overdue)
                     or pending_left(seen.run, pending, now) == 0.0)):
            # A backstop is due, and its verdict cannot be taken back: the run is read
            # live first, so one that ended while its watch lagged by more than the grace
            # reports its own outcome and completionTime (the interleavings machine found
            # a success reported BuildRunTimeout so, docs/development.md).
            seen = await self.observe_run(buildrun, fresh=True)
            deadline_passed = self._deadline_passed(buildrun, seen, now)
        run, executor = seen.run, seen.executor
        timeout = executor.timeout(run) if run is not None else None
        running = run is not None and not run_finished(run)
        pod = self._cached_pod(executor, run) if running else None
        left = pending_left(run, pending, now) if running else None
        # The pod is read only when it can change the decision: a cancel about to be sent
        # on, a backstop due.
        pod_matters = run is not None and running and (
            (is_canceled and not executor.cancelled(run)) or deadline_passed or cancel_overdue)
        observation = replace(
            seen.observation,
            canceled=is_canceled,
            cancel_unconfirmed=cancel_overdue,
            pod_outcome=(await self._completed_pod(executor, run, is_canceled)
                         if pod_matters else None),
            deadline_passed=deadline_passed,
            timeout_message=timeout_message(buildrun["metadata"]["name"], timeout or 0.0)
            if deadline_passed else "",
            run_missing=run is None,
            run_running=running,
            pending_deadline_passed=left == 0.0,
            pending_message=pending_timeout_message(
                buildrun["metadata"]["name"], pending or 0.0, *running_reason(run, pod))
            if left == 0.0 and run is not None else "",
        )
        return replace(seen, observation=observation, pod=pod, pending_left=left)

    def _pending_timeout(self, buildrun: JSON) -> float | None:
        """Row 20's limit: the BuildRun's annotation, its Build's (from the cache: the
        Build a started BuildRun names may be gone, or changed since), --pending-timeout."""
        keys = build_names(buildrun)
        build = self.caches.builds.get(keys[0]) if keys else None
        return pending_timeout(buildrun, build, self.pending_timeout, started=True)

    def _cached_pod(self, executor: Executor, run: JSON | None) -> JSON | None:
        """A running TaskRun's pod, from the pod cache (which keeps why it waits). A
        PipelineRun's pods are its TaskRuns' and not read."""
        pod_name = _taskrun_pod(executor, run)
        if not pod_name:
            return None
        assert run is not None
        return self.caches.pods.get(f"{run['metadata']['namespace']}/{pod_name}")

    def _deadline_passed(self, buildrun: JSON, seen: Seen, now: datetime.datetime) -> bool:
        """Row 19's guard: the run's own timeout plus the grace has passed."""
        timeout = seen.executor.timeout(seen.run) if seen.run is not None else None
        return deadline_left(buildrun, seen.run, timeout, now, self.timeout_grace) == 0.0

    async def _completed_pod(self, executor: Executor, run: JSON | None,
                             canceled: bool) -> Outcome | None:
        """What the pod of a run Tekton has not ended shows, if it has completed
        (Observation.pod_outcome), read live: asked when a cancel is about to be sent on
        (Tekton would report a build that is done, its image pushed, as cancelled) and
        when a backstop is due (the build may have ended while Tekton could not say so).
        A PipelineRun's pods are its TaskRuns' and not read."""
        pod_name = _taskrun_pod(executor, run)
        if not pod_name:
            return None
        assert run is not None
        return completed_pod_outcome(await self.kube.get_or_none(
            PODS, run["metadata"]["namespace"], pod_name), canceled=canceled)

    def observe_done(self, buildrun: JSON) -> Seen:
        """A finished BuildRun, from the caches only: it costs no API call unless there is
        work. Also what the event mapper asks when a finished BuildRun is seen
        (BuildRunReconciler.next_look), so both judge from the same facts."""
        executor = self.executor_of(buildrun)
        run = self._cached_run(buildrun, executor)
        if (run is None or run_finished(run)) and attempts_of(buildrun):
            # A BuildRun that retried may own a later attempt's run its status never named
            # (created as its retry budget ran out: the recorded run's outcome is the
            # BuildRun's); row 1 stops that one too. Looked for only then: a lookup per
            # finished BuildRun at every start is what next_look must not cost.
            meta = buildrun["metadata"]
            run = next((other for other in self.caches.store(executor.resource).by_index(
                BY_BUILDRUN, f"{meta['namespace']}/{meta['name']}")
                if owned_by(other, buildrun) and not run_finished(other)), run)
        service_account = self._generated_service_account(buildrun)
        observation = Observation(
            phase=Phase.DONE,
            run_running=run is not None and not run_finished(run),
            ttl_passed=ttl_left(buildrun, self.clock()) == 0.0,
            generated_sa_left=service_account is not None,
            executor_kind=executor.kind,
        )
        return Seen(buildrun, observation, run, service_account=service_account,
                    executor=executor)

    async def _observe_new(self, buildrun: JSON) -> Seen | None:
        executor = self.executor_of(buildrun)
        existing = self._existing_run(buildrun, executor)
        if existing is not None:
            # A TaskRun of it exists, so the cached BuildRun may predate the status write
            # that records it (ours, or Shipwright's, if it stopped in between).
            fresh = await reread(self.kube, BUILDRUNS, buildrun)
            if fresh is None:
                return None
            if phase_of(fresh) is not Phase.NEW:
                return await self.observe(fresh)
        is_canceled = canceled(buildrun)
        user_error = None
        plan = None
        build = None
        unregistered = False
        policy = RunPolicy.PARALLEL
        if not is_canceled:
            try:
                build, unregistered = await self.planner.validated_build(buildrun)
                if not unregistered:
                    plan = await self.planner.prepare(buildrun, build, executor)
                    policy = run_policy(build)
            except UserError as exc:
                user_error = exc
        where = (await self._standing(buildrun, policy, executor, build)
                 if policy is not RunPolicy.PARALLEL and user_error is None else Standing())
        observation = Observation(Phase.NEW, canceled=is_canceled,
                                  unrecorded_run=existing is not None, user_error=user_error,
                                  build_unregistered=unregistered, executor_kind=executor.kind,
                                  run_policy="" if policy is RunPolicy.PARALLEL
                                  else policy.value,
                                  superseded_by=where.superseded_by,
                                  serial_behind=where.behind)
        # `existing`: one an earlier try created but never recorded, which row 5 records.
        return Seen(buildrun, observation, existing, plan,
                    build=None if unregistered else build, executor=executor)

    def serial_rivals(self, buildrun: JSON, executor: Executor
                      ) -> tuple[list[JSON], list[tuple[str, str]]]:
        """What serial.standing weighs a NEW BuildRun against, from the caches: its Build's
        unfinished BuildRuns, and the owners (name, uid) of its Build's runs not finished."""
        key = f"{buildrun['metadata']['namespace']}/{build_name(buildrun)}"
        others = self.caches.buildruns.by_index(UNFINISHED_BY_BUILD, key)
        runs = self.caches.store(executor.resource).by_index(GOING_BY_BUILD, key)
        return others, [owner for run in runs if (owner := run_owner(run)) is not None]

    async def _standing(self, buildrun: JSON, policy: RunPolicy, executor: Executor,
                        build: JSON | None) -> Standing:
        """serial.standing on the caches, with the turn `build` names; a verdict that it
        is superseded (row 10, which cannot be taken back) only once the newer BuildRun is
        confirmed live: one the cache still holds may be gone, finished or canceled (then
        it supersedes nothing, and the next newer one is asked)."""
        others, owners = self.serial_rivals(buildrun, executor)
        held = turn_of(build)
        holder = held[1] if held is not None else ""
        while True:
            where = standing(buildrun, policy, others, owners, holder)
            newer = next((o for o in others
                          if o["metadata"]["name"] == where.superseded_by), None)
            if newer is None:
                return where
            live = await reread(self.kube, BUILDRUNS, newer)
            if live is not None and phase_of(live) is not Phase.DONE and not canceled(live):
                # Nor has it a run of its own the caches lack (its create landed, the write
                # recording it did not): then it is not canceled but started (START meets
                # AlreadyExists and adopts it).
                own = await self.caches.read(self.kube, executor.resource,
                                             buildrun["metadata"]["namespace"],
                                             recorded_executor_name(buildrun))
                return Standing() if own is not None and owned_by(own, buildrun) else where
            others = [o for o in others if o is not newer]

    async def recheck_serial(self, seen: Seen) -> Seen:
        """A NEW BuildRun of a serial Build about to start, looked at again under its Build's
        turn (the reconciler's lock, so no other worker of this process starts a run of the
        Build meanwhile): the caches again (another worker may have started one while this
        waited for the turn), then, live, the rivals a lagging cache may show wrongly. A
        cached BuildRun that is running or finished is so (neither goes back), and a cached
        run that has finished has; but one the cache shows NEW may have started: its
        status write (or our own, moments ago) not delivered yet, or its run created and
        the write that records it lost. Those ordered after this one (standing passes over
        them) are read from the API server, and their runs by the name START gives them.
        Returns `seen` with Observation.serial_behind set when one of them runs, and its
        Build as the cache now holds it (the turn another worker may have taken: the
        start's write of the turn, `Actions.take_turn`, is worked out from it)."""
        buildrun, executor = seen.buildrun, seen.executor
        policy = RunPolicy(seen.observation.run_policy)
        others, _ = self.serial_rivals(buildrun, executor)
        build = self.caches.builds.get(
            f"{buildrun['metadata']['namespace']}/{build_name(buildrun)}") or seen.build
        where = await self._standing(buildrun, policy, executor, build)
        behind = where.behind or where.superseded_by
        uid, key = buildrun["metadata"].get("uid"), order_key(buildrun)
        for other in sorted(others, key=order_key):
            if behind:
                break
            if (other["metadata"].get("uid") == uid or phase_of(other) is not Phase.NEW
                    or canceled(other) or order_key(other) < key):
                continue
            live = await reread(self.kube, BUILDRUNS, other)
            if live is None or phase_of(live) is Phase.DONE:
                continue
            if phase_of(live) is Phase.RUNNING:
                behind = other["metadata"]["name"]
                continue
            run = await self.kube.get_or_none(executor.resource, other["metadata"]["namespace"],
                                              recorded_executor_name(live))
            if run is not None and owned_by(run, live) and not run_finished(run):
                behind = other["metadata"]["name"]
        return replace(seen, build=build, observation=replace(
            seen.observation, superseded_by=where.superseded_by,
            serial_behind="" if where.superseded_by else behind))

    async def turn_holder(self, build: JSON) -> tuple[JSON | None, bool]:
        """What serial.claim weighs of the BuildRun that holds the Build's turn
        (serial.turn_of): that BuildRun, the cache's copy when it holds that uid (one it
        shows finished has; one it shows unfinished may have finished since, and its end
        wakes whoever waits behind it), else read live, since the cache may not hold it
        yet (None when none holds the turn, or it is gone: its name holds another uid, or
        none); and, once it has finished or gone, whether a run of it is still going (a
        backstop's verdict leaves one stopping, a deletion one the garbage collector has
        yet to delete): a run the cache shows finished has, else it is read live."""
        held = turn_of(build)
        if held is None:
            return None, False
        name, uid = held
        namespace = build["metadata"]["namespace"]
        ref = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
        cached = self.caches.buildruns.get(f"{namespace}/{name}")
        holder = (cached if cached is not None and cached["metadata"].get("uid") == uid
                  else await reread(self.kube, BUILDRUNS, ref))
        if holder is not None and phase_of(holder) is not Phase.DONE:
            return holder, False
        executor = self.executor_of(holder or ref)
        run_name = recorded_executor_name(holder or ref)
        cached_run = self.caches.store(executor.resource).get(f"{namespace}/{run_name}")
        if cached_run is not None and owned_by(cached_run, ref) and run_finished(cached_run):
            return holder, False
        run = await self.kube.get_or_none(executor.resource, namespace, run_name)
        return holder, run is not None and owned_by(run, ref) and not run_finished(run)

    async def observe_unrecorded(self, buildrun: JSON) -> Seen:
        """A NEW BuildRun given up on: whether a run of it exists (row 5 records it), read
        live where the caches lack it, since the verdict that follows otherwise
        (ReconcilerRetriesExhausted) cannot be taken back. No planning: that is what kept
        failing."""
        executor = self.executor_of(buildrun)
        existing = self._existing_run(buildrun, executor)
        if existing is None:
            run = await self.caches.read(self.kube, executor.resource,
                                         buildrun["metadata"]["namespace"],
                                         recorded_executor_name(buildrun))
            existing = run if run is not None and owned_by(run, buildrun) else None
        observation = Observation(Phase.NEW, canceled=canceled(buildrun),
                                  unrecorded_run=existing is not None,
                                  executor_kind=executor.kind)
        return Seen(buildrun, observation, existing, executor=executor)

    async def observe_run(self, buildrun: JSON, *, fresh: bool = False) -> Seen:
        """What the BuildRun runs as, if it exists, with its outcome if it finished
        (Observation.outcome; the phase is the BuildRun's). Once it finished, a
        PipelineRun's TaskRuns are read (their results, the failed one's pod), and the
        pod of a failed one: only that pod can tell eviction apart from a plain failure.
        `fresh`: the run is read from the API server, not the cache (before a verdict
        that does not wait for the run: a backstop's, a spent budget's)."""
        executor = self.executor_of(buildrun)
        namespace = buildrun["metadata"]["namespace"]
        name = recorded_executor_name(buildrun)
        run = (await self.kube.get_or_none(executor.resource, namespace, name) if fresh
               else await self.caches.read(self.kube, executor.resource, namespace, name))
        observation = Observation(phase_of(buildrun), executor_kind=executor.kind)
        poll = UNWATCHED_POLL if executor.resource in self.caches.unwatched else None
        if run is None or not run_finished(run):
            return Seen(buildrun, observation, run, executor=executor, poll=poll)
        children = [child for name in executor.children(run)
                    if (child := await self.caches.read(self.kube, TASKRUNS, namespace,
                                                        name)) is not None]
        pod_name = executor.failed_pod(run, children)
        # Live: a failure verdict cannot be taken back, and the pod cache may lag its
        # eviction; one gone is known by its last state if it went while it ended (a
        # cancel's). The ramp-up pod is only a metric: the cache's copy serves.
        live = await self.kube.get_or_none(PODS, namespace, pod_name) if pod_name else None
        pod = live or (self.caches.ended_pods.get(f"{namespace}/{pod_name}")
                       if pod_name else None)
        is_canceled = canceled(buildrun)
        outcome: Outcome | None = executor.outcome(run, children, pod, is_canceled)
        # Only a pod that is still there can still be ending: one gone has ended, as its
        # last state says (a pod deleted with a container running was killed).
        observation = replace(observation, pod_ending=(
            is_canceled and text(at(succeeded_condition(run.get("status")), "reason"))
            == TASK_RUN_CANCELLED and ending(live)
            and (pod_wait_left(run, self.clock(), self.timeout_grace) or 0.0) > 0.0))
        rampup = executor.pod_name(run, children)
        seen = Seen(buildrun, replace(observation, outcome=outcome), run, executor=executor,
                    children=tuple(children),
                    rampup_pod=self.caches.pods.get(f"{namespace}/{rampup}") if rampup else None)
        if (executor is TASKRUN and outcome is not None and outcome.status == "False"
                and not is_canceled):
            seen = self._infrastructure(seen, pod)
        return seen

    def _infrastructure(self, seen: Seen, pod: JSON | None) -> Seen:
        """A failed TaskRun: whether the infrastructure failed it and an attempt is left
        (row 13), from the BuildRun's record of its attempts and the retries asked for (its
        annotation, its Build's as cached, the flag)."""
        assert seen.run is not None
        buildrun = seen.buildrun
        attempts = attempts_of(buildrun)
        failed = seen.run["metadata"]["name"]
        recorded = next((a for a in attempts if a.task_run == failed), None)
        # A failure recorded is decided: the record is written before the next attempt
        # runs, and the pod that told it may be gone from the cache since (a pod deleted
        # under the build is removed within its grace period, seconds before the backoff
        # ends), which would read as the build's own failure and finish it on the run
        # the record says is to be retried (a whole make test met it, 2026-12-06).
        failure = (Failure(recorded.reason, recorded.message) if recorded is not None
                   else infrastructure_failure(seen.run, pod))
        if failure is None:
            return seen
        namespace = buildrun["metadata"]["namespace"]
        name = text(at(buildrun, "spec", "build", "name"))
        build = self.caches.store(BUILDS).get(f"{namespace}/{name}") if name else None
        limit = limit_of(buildrun, build, self.retries.retries)
        names = [a.task_run for a in attempts]
        # This run's place among the failed attempts (recorded already, or next).
        place = names.index(failed) + 1 if failed in names else len(names) + 1
        left = place <= limit.retries
        return replace(seen, failure=failure, next_attempt=place + 1,
                       attempts_allowed=limit.retries + 1, retry_error=limit.error,
                       observation=replace(seen.observation, infrastructure_failure=(
                           failure.reason if left else "")))

    def _existing_run(self, buildrun: JSON, executor: Executor) -> JSON | None:
        """A TaskRun (PipelineRun) of a NEW BuildRun, from the caches: one under the name an
        earlier try of ours gave it, or the oldest it owns under another (Shipwright names
        them with generateName and records the name in a second write, so a switch from
        Shipwright's controller between the two leaves one; its own buildrun.go warns of
        the same window across its restarts). Only one the BuildRun owns (its uid): a
        PipelineRun's own TaskRuns are owned by it, not the BuildRun, so never match."""
        ours = self._cached_run(buildrun, executor)
        if ours is not None and owned_by(ours, buildrun):
            return ours
        meta = buildrun["metadata"]
        store = self.caches.store(executor.resource)
        owned = [run for run in store.by_index(BY_BUILDRUN, f"{meta['namespace']}/{meta['name']}")
                 if owned_by(run, buildrun)]
        return min(owned, key=lambda run: text(run["metadata"].get("creationTimestamp")),
                   default=None)

    def _cached_run(self, buildrun: JSON, executor: Executor) -> JSON | None:
        name = recorded_executor_name(buildrun)
        return self.caches.store(executor.resource).get(
            f"{buildrun['metadata']['namespace']}/{name}")

    def _generated_service_account(self, buildrun: JSON) -> JSON | None:
        """The ServiceAccount `.generate` made for this BuildRun, from the cache, if it is
        there and not on its way out. One the BuildRun does not own is never returned."""
        if not serviceaccounts.is_generated(buildrun):
            return None
        name = serviceaccounts.generated_name(buildrun)
        sa = self.caches.service_accounts.get(f"{buildrun['metadata']['namespace']}/{name}")
        if sa is None or sa["metadata"].get("deletionTimestamp"):
            return None
        return sa if owned_by(sa, buildrun) else None



def _taskrun_pod(executor: Executor, run: JSON | None) -> str:
    """The name of a TaskRun's pod ("" for none yet, or for a PipelineRun, whose pods are
    its TaskRuns')."""
    return executor.pod_name(run, []) if run is not None and executor is TASKRUN else ""
