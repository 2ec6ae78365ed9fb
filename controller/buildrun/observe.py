"""Observing a BuildRun: the facts `states.decide` reads, and the objects the decided
action works on. Reads only: the caches first, the API server where a verdict must not
rest on a cache that may lag (a NEW BuildRun's references, a failed TaskRun's pod).

What the BuildRun runs as (a TaskRun, or a PipelineRun and its TaskRuns) is the
`Executor`'s to say (executors.py); this module reads what it names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from controller.buildrun import serviceaccounts
from controller.buildrun.buildruns import (
    canceled,
    deadline_left,
    phase_of,
    recorded_executor_name,
    run_timeout,
    ttl_left,
)
from controller.buildrun.caches import BY_BUILDRUN, UNWATCHED_POLL, Caches
from controller.buildrun.executors import TASKRUN, Executor, executor_of
from controller.buildrun.plan import Plan, Planner
from controller.buildrun.states import Observation, Phase
from controller.buildrun.status import Outcome, run_finished, timeout_message
from controller.runtime.errors import UserError
from controller.runtime.kube import JSON, PODS, Kube
from controller.runtime.timestamps import Clock
from controller.shipwright.resources import BUILDRUNS, TASKRUNS


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


class Observer:
    def __init__(self, kube: Kube, caches: Caches, planner: Planner, clock: Clock,
                 executor: Executor, timeout_grace: float) -> None:
        self.kube = kube
        self.caches = caches
        self.planner = planner
        self.clock = clock
        # What a new BuildRun runs as (BUILDRUN_EXECUTOR).
        self.executor = executor
        # Row 15 is a backstop: this long past the timeout Tekton enforces itself.
        self.timeout_grace = timeout_grace

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
        deadline_passed = deadline_left(buildrun, seen.run, self.clock(),
                                        self.timeout_grace) == 0.0
        observation = replace(
            seen.observation,
            canceled=canceled(buildrun),
            deadline_passed=deadline_passed,
            timeout_message=timeout_message(buildrun["metadata"]["name"],
                                            run_timeout(buildrun) or 0.0)
            if deadline_passed else "",
            run_missing=seen.run is None,
            run_running=seen.run is not None and not run_finished(seen.run),
        )
        return replace(seen, observation=observation)

    def observe_done(self, buildrun: JSON) -> Seen:
        """A finished BuildRun, from the caches only: it costs no API call unless there is
        work. Also what the event mapper asks when a finished BuildRun is seen
        (BuildRunReconciler.next_look), so both judge from the same facts."""
        executor = self.executor_of(buildrun)
        run = self._cached_run(buildrun, executor)
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
        namespace = buildrun["metadata"]["namespace"]
        executor = self.executor_of(buildrun)
        existing = (self._cached_run(buildrun, executor)
                    or self._unrecorded_run(buildrun, executor))
        if existing is not None:
            # A TaskRun of it exists, so the cached BuildRun may predate the status write
            # that records it (ours, or Shipwright's, if it stopped in between).
            fresh = await self.kube.get_or_none(BUILDRUNS, namespace,
                                                buildrun["metadata"]["name"])
            if fresh is None:
                return None
            if phase_of(fresh) is not Phase.NEW:
                return await self.observe(fresh)
        is_canceled = canceled(buildrun)
        user_error = None
        plan = None
        build = None
        unregistered = False
        if not is_canceled:
            try:
                build, unregistered = await self.planner.validated_build(buildrun)
                if not unregistered:
                    plan = await self.planner.prepare(buildrun, build, executor)
            except UserError as exc:
                user_error = exc
        if plan is not None and existing is not None:
            # START adopts it (its create meets AlreadyExists, and the owner is checked)
            # rather than making a second one under our own name.
            plan = plan.adopting(existing["metadata"]["name"])
        observation = Observation(Phase.NEW, canceled=is_canceled, user_error=user_error,
                                  build_unregistered=unregistered, executor_kind=executor.kind)
        # `existing` is one an earlier try created but never recorded: a FINISH stops it too.
        return Seen(buildrun, observation, existing, plan,
                    build=None if unregistered else build, executor=executor)

    async def observe_run(self, buildrun: JSON) -> Seen:
        """What the BuildRun runs as, if it exists, with its outcome if it finished
        (Observation.outcome; the phase is the BuildRun's). Once it finished, a
        PipelineRun's TaskRuns are read (their results, the failed one's pod), and the
        pod of a failed one: only that pod can tell eviction apart from a plain failure."""
        executor = self.executor_of(buildrun)
        namespace = buildrun["metadata"]["namespace"]
        run = await self.caches.read(self.kube, executor.resource, namespace,
                                     recorded_executor_name(buildrun))
        observation = Observation(phase_of(buildrun), executor_kind=executor.kind)
        poll = UNWATCHED_POLL if executor.resource in self.caches.unwatched else None
        if run is None or not run_finished(run):
            return Seen(buildrun, observation, run, executor=executor, poll=poll)
        children = [child for name in executor.children(run)
                    if (child := await self.caches.read(self.kube, TASKRUNS, namespace,
                                                        name)) is not None]
        pod_name = executor.failed_pod(run, children)
        # Live: a failure verdict cannot be taken back, and the pod cache may lag its
        # eviction. The ramp-up pod is only a metric: the cache's copy serves.
        pod = await self.kube.get_or_none(PODS, namespace, pod_name) if pod_name else None
        outcome: Outcome | None = executor.outcome(run, children, pod, canceled(buildrun))
        rampup = executor.pod_name(run, children)
        return Seen(buildrun, replace(observation, outcome=outcome), run, executor=executor,
                    children=tuple(children),
                    rampup_pod=self.caches.pods.get(f"{namespace}/{rampup}") if rampup else None)

    def _unrecorded_run(self, buildrun: JSON, executor: Executor) -> JSON | None:
        """A TaskRun (PipelineRun) the BuildRun owns under another name than ours, not
        recorded in its status: Shipwright names them with generateName and records the
        name in a second write, so a switch from Shipwright's controller between the two
        leaves one (its own buildrun.go warns of the same window across its restarts).
        A PipelineRun's own TaskRuns are owned by it, not the BuildRun, so never match."""
        meta = buildrun["metadata"]
        store = self.caches.store(executor.resource)
        owned = [run for run in store.by_index(BY_BUILDRUN, f"{meta['namespace']}/{meta['name']}")
                 if any(o.get("uid") == meta.get("uid")
                        for o in run["metadata"].get("ownerReferences") or [])]
        return min(owned, key=lambda run: run["metadata"].get("creationTimestamp") or "",
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
        return sa if serviceaccounts.owned_by(sa, buildrun) else None
