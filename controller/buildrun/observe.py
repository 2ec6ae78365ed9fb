"""Observing a BuildRun: the facts `states.decide` reads, and the objects the decided
action works on. Reads only: the caches first, the API server where a verdict must not
rest on a cache that may lag (a NEW BuildRun's references, a failed TaskRun's pod).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.buildrun import serviceaccounts
from controller.buildrun.buildruns import (
    canceled,
    phase_of,
    recorded_taskrun_name,
    run_timeout,
    timeout_left,
    ttl_left,
)
from controller.buildrun.caches import BY_BUILDRUN, Caches
from controller.buildrun.plan import Plan, Planner
from controller.buildrun.states import Observation, Phase
from controller.buildrun.status import (
    Outcome,
    outcome_from_taskrun,
    succeeded_condition,
    taskrun_finished,
    timeout_message,
)
from controller.runtime.errors import UserError
from controller.runtime.kube import JSON, PODS, Kube
from controller.runtime.timestamps import Clock
from controller.shipwright.resources import BUILDRUNS, TASKRUNS


@dataclass(frozen=True)
class Seen:
    """One reconcile's look at the world: the facts `decide` reads, and the objects the
    decided action works on (the BuildRun copy, its TaskRun, what START would create)."""

    buildrun: JSON
    observation: Observation
    taskrun: JSON | None = None
    plan: Plan | None = None
    # NEW: the referenced Build, once found and validated (its labels go on the BuildRun).
    build: JSON | None = None
    # DONE: the ServiceAccount generated for the BuildRun, if it is still there.
    service_account: JSON | None = None


class Observer:
    def __init__(self, kube: Kube, caches: Caches, planner: Planner, clock: Clock) -> None:
        self.kube = kube
        self.caches = caches
        self.planner = planner
        self.clock = clock

    async def observe(self, buildrun: JSON) -> Seen | None:
        """What `decide` needs, and what the action will work on; None when the
        BuildRun turns out to be gone."""
        phase = phase_of(buildrun)
        if phase is Phase.NEW:
            return await self._observe_new(buildrun)
        if phase is Phase.DONE:
            # Cache only: a finished BuildRun costs no API call unless there is work.
            taskrun = self._cached_taskrun(buildrun)
            service_account = self._generated_service_account(buildrun)
            observation = Observation(
                phase=phase,
                taskrun_running=taskrun is not None and not taskrun_finished(taskrun),
                ttl_passed=ttl_left(buildrun, self.clock()) == 0.0,
                generated_sa_left=service_account is not None,
            )
            return Seen(buildrun, observation, taskrun, service_account=service_account)
        taskrun, outcome = await self.observe_taskrun(buildrun)
        deadline_passed = timeout_left(buildrun, self.clock()) == 0.0
        observation = Observation(
            phase=phase,
            canceled=canceled(buildrun),
            deadline_passed=deadline_passed,
            timeout_message=timeout_message(buildrun["metadata"]["name"],
                                            run_timeout(buildrun) or 0.0)
            if deadline_passed else "",
            outcome=outcome,
            taskrun_missing=taskrun is None,
            taskrun_running=taskrun is not None and not taskrun_finished(taskrun),
        )
        return Seen(buildrun, observation, taskrun)

    async def _observe_new(self, buildrun: JSON) -> Seen | None:
        namespace = buildrun["metadata"]["namespace"]
        existing = self._cached_taskrun(buildrun) or self._unrecorded_taskrun(buildrun)
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
                    plan = await self.planner.prepare(buildrun, build)
            except UserError as exc:
                user_error = exc
        if plan is not None and existing is not None:
            # START adopts it (its create meets AlreadyExists, and the owner is checked)
            # rather than making a second TaskRun under our own name.
            plan = plan.adopting(existing["metadata"]["name"])
        observation = Observation(Phase.NEW, canceled=is_canceled, user_error=user_error,
                                  build_unregistered=unregistered)
        # `existing` is a TaskRun an earlier try created but never recorded: a FINISH
        # stops it too.
        return Seen(buildrun, observation, existing, plan,
                    build=None if unregistered else build)

    async def observe_taskrun(self, buildrun: JSON) -> tuple[JSON | None, Outcome | None]:
        """The BuildRun's TaskRun, if it exists, and its outcome, if it finished."""
        taskrun = await self.caches.read(self.kube, TASKRUNS, buildrun["metadata"]["namespace"],
                                         recorded_taskrun_name(buildrun))
        if taskrun is None or not taskrun_finished(taskrun):
            return taskrun, None
        pod = None
        pod_name = (taskrun.get("status") or {}).get("podName")
        cond = succeeded_condition(taskrun.get("status")) or {}
        if cond.get("status") == "False" and pod_name:
            # Only a failed TaskRun's pod can tell eviction apart from a plain failure.
            pod = await self.kube.get_or_none(PODS, taskrun["metadata"]["namespace"], pod_name)
        return taskrun, outcome_from_taskrun(taskrun, pod)

    def _unrecorded_taskrun(self, buildrun: JSON) -> JSON | None:
        """A TaskRun the BuildRun owns under another name than ours, not recorded in its
        status: Shipwright names its TaskRuns with generateName and records the name in a
        second write, so a switch from Shipwright's controller between the two leaves
        one (its own buildrun.go warns of the same window across its restarts)."""
        meta = buildrun["metadata"]
        owned = [tr for tr in self.caches.taskruns.by_index(
                     BY_BUILDRUN, f"{meta['namespace']}/{meta['name']}")
                 if any(o.get("uid") == meta.get("uid")
                        for o in tr["metadata"].get("ownerReferences") or [])]
        return min(owned, key=lambda tr: tr["metadata"].get("creationTimestamp") or "",
                   default=None)

    def _cached_taskrun(self, buildrun: JSON) -> JSON | None:
        name = recorded_taskrun_name(buildrun)
        return self.caches.taskruns.get(f"{buildrun['metadata']['namespace']}/{name}")

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
