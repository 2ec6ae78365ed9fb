"""The BuildRun reconciler: observe, decide with the state table, act.

I/O lives here; what to do lives in `states.decide`, and how specs, TaskRuns
and statuses are shaped lives in the pure modules beside this one. Both entry
points, `reconcile` and `give_up` (the retry budget is spent), run the same
three steps: `_observe` (or give_up's own smaller look) builds an Observation,
`decide` picks the row, `_act` carries out its Action, each Action in one
`case`. Every status write goes through `_write_status`, which refuses to touch
a BuildRun whose completionTime is set, re-reading it on conflict.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, assert_never

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random

from controller.buildrun import metrics, reasons, serviceaccounts
from controller.buildrun.config import ShipwrightConfig
from controller.buildrun.spec import (
    build_name,
    effective_build,
    parse_duration,
)
from controller.buildrun.states import Action, Decision, Observation, Phase, decide
from controller.buildrun.status import (
    Outcome,
    outcome_from_taskrun,
    running_reason,
    succeeded_condition,
    taskrun_finished,
    with_condition,
)
from controller.buildrun.taskrun import generate_taskrun, taskrun_name
from controller.builds import validation as build_validation
from controller.runtime.errors import (
    RetryableError,
    UserError,
    is_already_exists,
    is_conflict,
    is_invalid,
    is_not_found,
    is_too_large,
)
from controller.runtime.events import EventRecorder
from controller.runtime.kube import (
    JSON,
    PODS,
    SECRETS,
    SERVICEACCOUNTS,
    ApiError,
    Kube,
    Resource,
    split_key,
)
from controller.runtime.reconcile import DONE, Result
from controller.runtime.store import Store
from controller.runtime.text import truncate
from controller.runtime.timestamps import format_time, parse_time
from controller.shipwright import metrics as shipwright_metrics
from controller.shipwright.labels import LABEL_BUILD, LABEL_BUILD_GENERATION
from controller.shipwright.params import validate_params
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    TASKRUNS,
)

log = logging.getLogger(__name__)

# spec.state of a BuildRun the user cancels (Shipwright spells the reason the same).
CANCELED = "BuildRunCanceled"
# spec.status that cancels a Tekton TaskRun (Tekton spells the reason the same).
TASKRUN_CANCELLED = "TaskRunCancelled"
# spec.strategy.kind of a Build; unset means BuildStrategy, as in Shipwright.
BUILD_STRATEGY = "BuildStrategy"
CLUSTER_BUILD_STRATEGY = "ClusterBuildStrategy"
# status.executor.kind of the object running a BuildRun (Shipwright can also use PipelineRuns).
EXECUTOR_KIND = "TaskRun"
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
# What Shipwright's BuildRun reconciler validates of an embedded spec.build.spec before
# it runs (buildrun.go: validate.All), in its order: the Build controller's checks of
# the same names, minus output, triggers and runtimeClassName, which it leaves out.
EMBEDDED_CHECKS: tuple[build_validation.Check, ...] = (
    build_validation.check_source_url,
    build_validation.check_secrets,
    build_validation.check_strategy,
    build_validation.check_build_name,
    build_validation.check_env,
    build_validation.check_node_selector,
    build_validation.check_tolerations,
    build_validation.check_scheduler_name,
)

Clock = Callable[[], datetime.datetime]


def _on_conflict() -> AsyncRetrying:
    """Optimistic concurrency for one write: up to 5 tries while the API server answers
    409 Conflict, 0-50 ms apart; the caller re-reads the object before each retry."""
    return AsyncRetrying(retry=retry_if_exception(is_conflict), stop=stop_after_attempt(5),
                         wait=wait_random(0, 0.05), reraise=True)


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def spec_of(buildrun: JSON) -> JSON:
    """The spec, or {}: the schema admits a BuildRun without one (or `spec: null`)."""
    spec: JSON = buildrun.get("spec") or {}
    return spec


def phase_of(buildrun: JSON) -> Phase:
    status = buildrun.get("status") or {}
    if status.get("completionTime"):
        return Phase.DONE
    return Phase.RUNNING if status.get("taskRunName") else Phase.NEW


def run_timeout(buildrun: JSON) -> float | None:
    """The effective timeout, from the snapshot taken when the TaskRun was created."""
    text = ((buildrun.get("status") or {}).get("buildSpec") or {}).get("timeout")
    return parse_duration(text) if text else None


def retention_ttl(buildrun: JSON) -> float | None:
    """ttlAfterSucceeded or ttlAfterFailed: the effective one snapshotted at start (BuildRun
    over Build), else the BuildRun's own (a run that failed before it had a snapshot)."""
    status = buildrun.get("status") or {}
    succeeded = (succeeded_condition(status) or {}).get("status") == "True"
    key = "ttlAfterSucceeded" if succeeded else "ttlAfterFailed"
    for retention in ((status.get("buildSpec") or {}).get("retention"),
                      spec_of(buildrun).get("retention")):
        text = (retention or {}).get(key)
        if text:
            try:
                return parse_duration(text)
            except ValueError:
                return None  # reported as InvalidRetention when the run started
    return None


@dataclass(frozen=True)
class _Plan:
    """What row 10 (START) creates and records, resolved while observing a NEW BuildRun."""

    taskrun: JSON
    snapshot: JSON  # status.buildSpec: the effective Build spec, with its retention
    # The ServiceAccount to create (`.generate`), or the existing one's name and the
    # secrets it lacks (serviceaccounts.py).
    create_service_account: JSON | None
    service_account: str
    add_secrets: list[str]


@dataclass(frozen=True)
class _Seen:
    """One reconcile's look at the world: the facts `decide` reads, and the objects the
    decided action works on (the BuildRun copy, its TaskRun, what START would create)."""

    buildrun: JSON
    observation: Observation
    taskrun: JSON | None = None
    plan: _Plan | None = None
    # NEW: the referenced Build, once found and validated (its labels go on the BuildRun).
    build: JSON | None = None
    # DONE: the ServiceAccount generated for the BuildRun, if it is still there.
    service_account: JSON | None = None


@dataclass(frozen=True)
class Caches:
    """The informers' stores the reconciler reads. A miss is asked of the API server
    (`_read`), so an empty store is slower, never wrong."""

    buildruns: Store = field(default_factory=Store)
    taskruns: Store = field(default_factory=Store)
    builds: Store = field(default_factory=Store)
    strategies: Store = field(default_factory=Store)
    cluster_strategies: Store = field(default_factory=Store)
    service_accounts: Store = field(default_factory=Store)


class BuildRunReconciler:
    def __init__(
        self,
        kube: Kube,
        caches: Caches,
        recorder: EventRecorder,
        *,
        clock: Clock = utcnow,
        taskrun_config: ShipwrightConfig | None = None,
    ) -> None:
        self.taskrun_config = taskrun_config or ShipwrightConfig.from_env()
        self.kube = kube
        self.caches = caches
        self.recorder = recorder
        self.clock = clock

    # -- entry points called by the Controller --------------------------------------

    async def reconcile(self, key: str) -> Result:
        buildrun = self.caches.buildruns.get(key)
        if buildrun is None:
            return DONE  # deleted; its TaskRun goes with it (ownerReference)
        seen = await self._observe(buildrun)
        if seen is None:
            return DONE
        return await self._act(seen, decide(seen.observation))

    async def give_up(self, key: str, error: RetryableError) -> None:
        """The retry budget is spent: observe once more with the last error, and act on
        the table's decision (a finished TaskRun's outcome, else ReconcilerRetriesExhausted).

        A DONE BuildRun is left alone: its outcome is written already, and another try
        at cancelling or deleting would only fail the way the spent budget did.
        """
        namespace, name = split_key(key)
        buildrun = await self.kube.get_or_none(BUILDRUNS, namespace, name)
        if buildrun is None:
            return
        phase = phase_of(buildrun)
        if phase is Phase.DONE:
            return
        # Also in NEW: a try may have created the TaskRun and then failed to say so.
        taskrun, outcome = await self._observe_taskrun(buildrun)
        observation = Observation(phase, outcome=outcome, retries_exhausted=error)
        await self._act(_Seen(buildrun, observation, taskrun), decide(observation))

    # -- observing ----------------------------------------------------------------

    async def _observe(self, buildrun: JSON) -> _Seen | None:
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
                ttl_passed=self._ttl_remaining(buildrun) == 0.0,
                generated_sa_left=service_account is not None,
            )
            return _Seen(buildrun, observation, taskrun, service_account=service_account)
        taskrun, outcome = await self._observe_taskrun(buildrun)
        observation = Observation(
            phase=phase,
            canceled=spec_of(buildrun).get("state") == CANCELED,
            deadline_passed=self._remaining(buildrun) == 0.0,
            outcome=outcome,
            taskrun_missing=taskrun is None,
            taskrun_running=taskrun is not None and not taskrun_finished(taskrun),
        )
        return _Seen(buildrun, observation, taskrun)

    @staticmethod
    def _taskrun_name(buildrun: JSON) -> str:
        """status.taskRunName, else the deterministic name (a TaskRun created by a try
        whose status write was lost)."""
        return (buildrun.get("status") or {}).get("taskRunName") or taskrun_name(buildrun)

    def _cached_taskrun(self, buildrun: JSON) -> JSON | None:
        name = self._taskrun_name(buildrun)
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

    async def _read(
        self, store: Store, resource: Resource, namespace: str, name: str
    ) -> JSON | None:
        """From the cache; a miss is asked of the API server, so an object the watch
        has not delivered yet is found and an absence is confirmed before any verdict
        (a terminal status cannot be taken back)."""
        cached = store.get(f"{namespace}/{name}" if resource.namespaced else name)
        if cached is not None:
            return cached
        return await self.kube.get_or_none(resource, namespace, name)

    async def _observe_taskrun(self, buildrun: JSON) -> tuple[JSON | None, Outcome | None]:
        """The BuildRun's TaskRun, if it exists, and its outcome, if it finished."""
        taskrun = await self._read(self.caches.taskruns, TASKRUNS,
                                   buildrun["metadata"]["namespace"], self._taskrun_name(buildrun))
        if taskrun is None or not taskrun_finished(taskrun):
            return taskrun, None
        pod = None
        pod_name = (taskrun.get("status") or {}).get("podName")
        cond = succeeded_condition(taskrun.get("status")) or {}
        if cond.get("status") == "False" and pod_name:
            # Only a failed TaskRun's pod can tell eviction apart from a plain failure.
            pod = await self.kube.get_or_none(PODS, taskrun["metadata"]["namespace"], pod_name)
        return taskrun, outcome_from_taskrun(taskrun, pod)

    def _remaining(self, buildrun: JSON) -> float | None:
        """Seconds until the timeout deadline (0.0 once passed), None without a timeout."""
        start = (buildrun.get("status") or {}).get("startTime")
        return self._until(start, run_timeout(buildrun))

    def _ttl_remaining(self, buildrun: JSON) -> float | None:
        """Seconds until the retention TTL deletes the BuildRun (0.0 once due), or None."""
        completed = (buildrun.get("status") or {}).get("completionTime")
        return self._until(completed, retention_ttl(buildrun))

    def _until(self, since: str | None, seconds: float | None) -> float | None:
        start = parse_time(since)
        if seconds is None or start is None:
            return None
        left = (start + datetime.timedelta(seconds=seconds) - self.clock()).total_seconds()
        return max(left, 0.0)

    # -- NEW: resolve everything, or fail with a user error --------------------------

    async def _observe_new(self, buildrun: JSON) -> _Seen | None:
        namespace = buildrun["metadata"]["namespace"]
        existing = self._cached_taskrun(buildrun)
        if existing is not None:
            # Our TaskRun exists, so the cached BuildRun predates our own status write.
            fresh = await self.kube.get_or_none(BUILDRUNS, namespace, buildrun["metadata"]["name"])
            if fresh is None:
                return None
            if phase_of(fresh) is not Phase.NEW:
                return await self._observe(fresh)
        canceled = spec_of(buildrun).get("state") == CANCELED
        user_error = None
        plan = None
        build = None
        unregistered = False
        if not canceled:
            try:
                build, unregistered = await self._validated_build(buildrun)
                if not unregistered:
                    plan = await self._prepare(buildrun, build)
            except UserError as exc:
                user_error = exc
        observation = Observation(Phase.NEW, canceled=canceled, user_error=user_error,
                                  build_unregistered=unregistered)
        # `existing` is a TaskRun an earlier try created but never recorded: a FINISH
        # stops it too.
        return _Seen(buildrun, observation, existing, plan,
                     build=None if unregistered else build)

    async def _validated_build(self, buildrun: JSON) -> tuple[JSON | None, bool]:
        """The referenced Build (None when spec.build.spec embeds one), and whether it
        still waits for validation (no status.registered yet: row 9). An embedded spec
        is validated here, as Shipwright validates it (EMBEDDED_CHECKS).

        As Shipwright's BuildRun reconciler: a Build whose status.registered is set but
        not "True" failed validation, and so does every BuildRun of it, at once, with
        BuildRegistrationFailed. That verdict is terminal, so a cached failure is
        confirmed by a live GET first (the cache may not have the Build's newer status).
        """
        namespace = buildrun["metadata"]["namespace"]
        name = build_name(buildrun)
        if name is None:
            embedded = spec_of(buildrun)["build"]["spec"]
            # Shipwright checks the BuildRun's own fields (validate.BuildRunFields: no
            # overrides beside an embedded spec) before it validates the spec.
            effective_build(_without_service_account(buildrun), embedded)
            failed = await self._embedded_verdict(namespace, embedded)
            if failed is not None:
                # As Shipwright: the transient Build's message alone.
                raise UserError(reasons.BUILD_REGISTRATION_FAILED, failed.message)
            return None, False
        build = await self._read(self.caches.builds, BUILDS, namespace, name)
        if build is None:
            raise UserError(reasons.BUILD_NOT_FOUND, f"Build {name!r} not found in "
                            f"namespace {namespace!r}")
        registered = (build.get("status") or {}).get("registered")
        if registered and registered != "True":
            build = await self.kube.get_or_none(BUILDS, namespace, name)
            if build is None:
                raise UserError(reasons.BUILD_NOT_FOUND, f"Build {name!r} not found in "
                                f"namespace {namespace!r}")
        status = build.get("status") or {}
        registered = status.get("registered")
        if not registered:
            return build, True
        if registered != "True":
            # Shipwright's message, and the Build's own, which says what to fix.
            message = (f"the Build is not registered correctly, build: {name}, registered "
                       f"status: {registered}, reason: {status.get('reason') or ''}")
            if status.get("message"):
                message += f", message: {truncate(str(status['message']), 1024)}"
            raise UserError(reasons.BUILD_REGISTRATION_FAILED, message)
        return build, False

    async def _embedded_verdict(self, namespace: str,
                                spec: JSON) -> build_validation.Verdict | None:
        """The first of EMBEDDED_CHECKS an embedded Build spec fails, or None. Its Secrets
        are looked up by name, its strategy in the caches (a miss confirmed by a GET)."""
        transient = {"metadata": {"name": "", "namespace": namespace}, "spec": spec}
        missing = frozenset([
            name for name in build_validation.secret_refs(transient)
            if await self.kube.get_or_none(SECRETS, namespace, name) is None])
        ref = build_validation.strategy_ref(transient)
        strategy = None
        if ref.known and ref.name:
            if ref.kind == CLUSTER_BUILD_STRATEGY:
                strategy = await self._read(self.caches.cluster_strategies,
                                            CLUSTERBUILDSTRATEGIES, namespace, ref.name)
            else:
                strategy = await self._read(self.caches.strategies, BUILDSTRATEGIES,
                                            namespace, ref.name)
        lookups = build_validation.Lookups(missing, strategy)
        for check in EMBEDDED_CHECKS:
            verdict = check(transient, lookups)
            if verdict is not None:
                return build_validation.Verdict(
                    verdict.reason, truncate(verdict.message, build_validation.MESSAGE_MAX))
        return None

    async def _prepare(self, buildrun: JSON, build: JSON | None) -> _Plan:
        """What row 10 (START) would create and record; raises UserError for anything
        the user must fix. `build` is the validated Build, None for an embedded spec.

        Build, strategies and ServiceAccounts come from the caches, as Shipwright reads
        them; a missing reference is confirmed by a live GET (`_read`). The
        ServiceAccount is checked before the strategy, in Shipwright's order.
        """
        namespace = buildrun["metadata"]["namespace"]
        if build is None:
            build_spec = spec_of(buildrun)["build"]["spec"]
        else:
            build_spec = build.get("spec") or {}
        choice = serviceaccounts.choose(buildrun)
        # ".generate" is no object name: the choice is made here, not by spec.py.
        effective = effective_build(
            _without_service_account(buildrun) if choice.generated else buildrun, build_spec)
        create_sa, sa_name, add_secrets = await self._plan_service_account(
            buildrun, choice, effective.push_secret)
        effective = replace(effective, service_account=sa_name)
        strategy = await self._strategy(namespace, effective.spec.get("strategy") or {},
                                        effective.strategy_name)
        build_obj = build if build is not None else {
            "metadata": {"namespace": namespace}, "spec": build_spec}
        validate_params((build_obj.get("spec") or {}).get("paramValues") or [],
                        spec_of(buildrun).get("paramValues") or [],
                        (strategy.get("spec") or {}).get("parameters") or [])
        validate_buildrun(buildrun, build_spec, strategy)
        snapshot = dict(effective.spec)
        if effective.retention:
            snapshot["retention"] = effective.retention
        taskrun = generate_taskrun(buildrun, build_obj, strategy, sa_name, self.taskrun_config)
        return _Plan(taskrun, snapshot, create_sa, sa_name, add_secrets)

    async def _strategy(self, namespace: str, ref: JSON, name: str) -> JSON:
        """The strategy spec.strategy names: a BuildStrategy in the namespace when its kind
        is BuildStrategy or unset (Shipwright's default), else a ClusterBuildStrategy."""
        kind = strategy_kind(ref)
        if kind == BUILD_STRATEGY:
            strategy = await self._read(self.caches.strategies, BUILDSTRATEGIES, namespace,
                                        name)
            if strategy is None:
                raise UserError(reasons.BUILD_STRATEGY_NOT_FOUND,
                                f"BuildStrategy {name!r} not found in namespace "
                                f"{namespace!r}")
            return strategy
        strategy = await self._read(self.caches.cluster_strategies, CLUSTERBUILDSTRATEGIES,
                                    namespace, name)
        if strategy is None:
            raise UserError(reasons.CLUSTER_BUILD_STRATEGY_NOT_FOUND,
                            f"ClusterBuildStrategy {name!r} not found")
        return strategy

    async def _plan_service_account(
        self, buildrun: JSON, choice: serviceaccounts.Choice, push_secret: str | None
    ) -> tuple[JSON | None, str, list[str]]:
        """(the ServiceAccount to create, the name the TaskRun runs as, the secrets to add
        to it), as Shipwright chooses: serviceaccounts.py."""
        namespace = buildrun["metadata"]["namespace"]
        store = self.caches.service_accounts
        if choice.generated:
            existing = store.get(f"{namespace}/{choice.name}")
            if existing is None:
                return (serviceaccounts.generated_service_account(buildrun, push_secret),
                        choice.name, [])
            # Made by an earlier try (or a namesake, which Shipwright uses as it is).
            return None, choice.name, []
        if choice.explicit:
            sa = await self._read(store, SERVICEACCOUNTS, namespace, choice.name)
            if sa is None:
                raise UserError(reasons.SERVICE_ACCOUNT_NOT_FOUND,
                                f"ServiceAccount {choice.name!r} not found in namespace "
                                f"{namespace!r}")
            return None, choice.name, serviceaccounts.missing_secrets(sa, push_secret)
        # The namespace's own: from the cache alone, since "pipeline" is absent from most
        # clusters and a GET per start to confirm that would double a start's reads.
        for name in choice.candidates:
            sa = store.get(f"{namespace}/{name}")
            if sa is not None:
                return None, name, serviceaccounts.missing_secrets(sa, push_secret)
        # Neither exists (yet: kube-controller-manager makes "default" with the
        # namespace). Shipwright would wait; the TaskRun runs as "default", as Tekton's own
        # default would have it, and Tekton reports a pod that cannot be made.
        return None, choice.name, []

    async def _start(self, buildrun: JSON, plan: _Plan) -> Result:
        """Row 10: make the ServiceAccount ready, create (or adopt) the TaskRun and record
        it in one status write.

        Raises UserError when the API server's answer is the user's to fix (the TaskRun
        is invalid, its name is taken, the snapshot does not fit, the ServiceAccount is
        gone); the caller decides again with it (row 8)."""
        namespace = buildrun["metadata"]["namespace"]
        await self._ready_service_account(namespace, plan)
        try:
            created = await self.kube.create(TASKRUNS, namespace, plan.taskrun)
        except ApiError as exc:
            if is_already_exists(exc):
                created = await self._adopt(buildrun, plan.taskrun["metadata"]["name"])
            elif is_invalid(exc):
                # The TaskRun's own validation (CRD schema or Tekton's webhook) refused
                # what the user asked for: retrying cannot change the answer.
                raise UserError(reasons.TASK_RUN_GENERATION_FAILED,
                                f"the TaskRun was rejected: {exc.message}") from exc
            else:
                raise
        now = format_time(self.clock())

        def started(status: JSON) -> JSON:
            if status.get("taskRunName"):
                return status  # recorded already (we read a stale copy); keep its progress
            status = dict(status)
            status.setdefault("startTime", now)
            status["taskRunName"] = created["metadata"]["name"]
            status["executor"] = {"kind": EXECUTOR_KIND, "name": created["metadata"]["name"]}
            status.setdefault("buildSpec", plan.snapshot)
            # What the first reconcile of the running BuildRun would write, so it
            # finds nothing to change: one status write per start, not two.
            return with_condition(status, "Unknown", *running_reason(created), now)

        try:
            written = await self._write_status(buildrun, started)
        except ApiError as exc:
            if not is_too_large(exc):
                raise
            # The snapshot of a BuildRun near etcd's size limit does not fit in its
            # status: no retry can change that. Stop the TaskRun; the user must shrink it.
            await self._cancel_taskrun(created)
            raise UserError(reasons.BUILD_RUN_TOO_LARGE,
                            f"the BuildRun is too large to record its build spec: {exc.message}"
                            ) from exc
        # No Event for a start: the status says it, and one Event per start cost about
        # 15% of the API server's throughput (BENCHMARKS.md). Running and the outcome get one.
        if written is not None:
            created_at = parse_time(buildrun["metadata"].get("creationTimestamp"))
            if created_at is not None:
                metrics.buildrun_started(
                    written, max((self.clock() - created_at).total_seconds(), 0.0))
        return self._requeue_at_deadline(written or buildrun)

    async def _link_to_build(self, buildrun: JSON, build: JSON) -> JSON:
        """What Shipwright writes on a BuildRun of a validated Build before it runs: the
        labels `build.shipwright.io/name` and `/generation` (clients select a Build's
        BuildRuns by them), and with retention.atBuildDeletion the Build as an owner, so
        the garbage collector deletes the BuildRun with it. One metadata patch, only if
        something is missing; returns the BuildRun as it now is.

        The Build controller sets the same owner reference on a Build's BuildRuns
        (Shipwright's ownerreferences step), so the two may race: on a conflict the
        BuildRun is read again and the change worked out anew, as `_write_status` does."""
        namespace, name = buildrun["metadata"]["namespace"], buildrun["metadata"]["name"]
        current: JSON | None = buildrun
        async for attempt in _on_conflict():
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    current = await self.kube.get_or_none(BUILDRUNS, namespace, name)
                if current is None:
                    return buildrun  # deleted: the status write will find it gone
                change = build_link(current, build)
                if not change:
                    return current
                return await self.kube.patch(BUILDRUNS, namespace, name, {"metadata": change})
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def _ready_service_account(self, namespace: str, plan: _Plan) -> None:
        """Creates the generated ServiceAccount, or adds the Build's secrets to the chosen
        one (a strategic merge patch: the list is merged by name, nothing is dropped)."""
        if plan.create_service_account is not None:
            try:
                await self.kube.create(SERVICEACCOUNTS, namespace, plan.create_service_account)
            except ApiError as exc:
                if not is_already_exists(exc):
                    raise
            return
        if not plan.add_secrets:
            return
        try:
            await self.kube.patch(SERVICEACCOUNTS, namespace, plan.service_account,
                                  serviceaccounts.secrets_patch(plan.add_secrets),
                                  content_type=serviceaccounts.STRATEGIC_MERGE_PATCH)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            raise UserError(reasons.SERVICE_ACCOUNT_NOT_FOUND,
                            f"ServiceAccount {plan.service_account!r} not found in namespace "
                            f"{namespace!r}") from exc
        log.info("added the Build's secrets to the ServiceAccount",
                 extra={"key": f"{namespace}/{plan.service_account}",
                        "secrets": plan.add_secrets})

    async def _adopt(self, buildrun: JSON, name: str) -> JSON:
        """A TaskRun with our deterministic name exists: ours from an earlier try, or not."""
        existing = await self.kube.get(TASKRUNS, buildrun["metadata"]["namespace"], name)
        owners = existing["metadata"].get("ownerReferences") or []
        if not any(o.get("uid") == buildrun["metadata"]["uid"] for o in owners):
            raise UserError(reasons.TASK_RUN_GENERATION_FAILED,
                            f"TaskRun {name!r} exists but belongs to another object")
        return existing

    # -- acting on a decision ------------------------------------------------------

    async def _act(self, seen: _Seen, decision: Decision) -> Result:
        """Carries out the decided row's action; the one place each Action is handled."""
        buildrun, taskrun = seen.buildrun, seen.taskrun
        match decision.action:
            case Action.NOTHING:
                return self._requeue_at(self._ttl_remaining(buildrun))  # row 2, when due
            case Action.STOP_TASKRUN:
                assert taskrun is not None
                await self._cancel_taskrun(taskrun)
                return self._requeue_at(self._ttl_remaining(buildrun))
            case Action.DELETE:
                await self._delete(buildrun)
                return DONE
            case Action.START:
                plan = seen.plan
                assert plan is not None
                if seen.build is not None:
                    buildrun = await self._link_to_build(buildrun, seen.build)
                    seen = replace(seen, buildrun=buildrun, build=None)
                try:
                    return await self._start(buildrun, plan)
                except UserError as exc:
                    # The API server's answer to the start is the user's to fix: the
                    # table decides again with it (row 8).
                    observation = replace(seen.observation, user_error=exc)
                    return await self._act(seen, decide(observation))
            case Action.FINISH:
                if seen.build is not None:
                    # A user error after the Build resolved: labelled as Shipwright does.
                    buildrun = await self._link_to_build(buildrun, seen.build)
                await self._finish(buildrun, taskrun, decision)
                return DONE
            case Action.DELETE_SERVICE_ACCOUNT:
                assert seen.service_account is not None
                await self._delete_service_account(seen.service_account)
                return self._requeue_at(self._ttl_remaining(buildrun))
            case Action.PROGRESS:
                assert taskrun is not None
                written = await self._progress(buildrun, taskrun)
                return self._requeue_at_deadline(written or buildrun)
            case _:
                assert_never(decision.action)

    async def _delete(self, buildrun: JSON) -> None:
        """Retention: the preconditions make sure a recreated namesake is never deleted."""
        meta = buildrun["metadata"]
        try:
            await self.kube.delete(BUILDRUNS, meta["namespace"], meta["name"], preconditions={
                "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
        except ApiError as exc:
            if not is_not_found(exc):
                raise
        metrics.DELETED.inc()
        log.info("deleted BuildRun after its retention TTL",
                 extra={"key": f"{meta['namespace']}/{meta['name']}"})

    async def _delete_service_account(self, service_account: JSON) -> None:
        """Row 3: the generated ServiceAccount goes once its BuildRun is done. The uid
        precondition spares a namesake created since."""
        meta = service_account["metadata"]
        try:
            await self.kube.delete(SERVICEACCOUNTS, meta["namespace"], meta["name"],
                                   preconditions={"uid": meta["uid"]})
        except ApiError as exc:
            if not (is_not_found(exc) or is_conflict(exc)):
                raise
        log.info("deleted the ServiceAccount generated for the BuildRun",
                 extra={"key": f"{meta['namespace']}/{meta['name']}"})

    async def _progress(self, buildrun: JSON, taskrun: JSON) -> JSON | None:
        reason, message = running_reason(taskrun)
        current = succeeded_condition(buildrun.get("status")) or {}
        if current.get("reason") == reason and current.get("message") == message:
            return None
        now = format_time(self.clock())
        written = await self._write_status(
            buildrun, lambda s: with_condition(_with_executor(s), "Unknown", reason, message,
                                               now)
        )
        if written is not None and reason == reasons.RUNNING and current.get("reason") != reason:
            start = parse_time((buildrun.get("status") or {}).get("startTime"))
            if start is not None:
                metrics.RAMPUP.observe(max((self.clock() - start).total_seconds(), 0.0))
            self.recorder.record(buildrun, "Normal", reasons.RUNNING, message or "running")
        return written

    def _requeue_at_deadline(self, buildrun: JSON) -> Result:
        return self._requeue_at(self._remaining(buildrun))

    @staticmethod
    def _requeue_at(remaining: float | None) -> Result:
        if remaining is None:
            return DONE
        # Wake a hair after the deadline so the clock has surely passed it.
        return Result(requeue_after=remaining + 0.05)

    async def _finish(self, buildrun: JSON, taskrun: JSON | None, decision: Decision) -> None:
        """Writes the terminal status once; then makes sure the TaskRun stops."""
        outcome = decision.outcome
        now_t = self.clock()
        now = format_time(now_t)

        def finished(status: JSON) -> JSON:
            status = with_condition(_with_executor(status), decision.succeeded,
                                    decision.reason, decision.message, now)
            status["completionTime"] = now
            if outcome is not None and outcome.failure_details:
                status["failureDetails"] = outcome.failure_details
            if outcome is not None and outcome.output:
                status["output"] = outcome.output
            if outcome is not None and outcome.source:
                status["source"] = outcome.source
            return status

        written = await self._write_status(buildrun, finished)
        if written is None:
            return
        meta = buildrun["metadata"]
        metrics.COMPLETED.labels(decision.reason, meta["namespace"]).inc()
        if decision.reason == reasons.RECONCILER_RETRIES_EXHAUSTED:
            metrics.RETRY_EXHAUSTED.inc()
        created_at = parse_time(meta.get("creationTimestamp"))
        if created_at is not None:
            metrics.buildrun_finished(written, decision.reason,
                                      max((now_t - created_at).total_seconds(), 0.0))
        self.recorder.record(
            buildrun, "Normal" if decision.succeeded == "True" else "Warning",
            decision.reason, decision.message or decision.reason,
        )
        if taskrun is not None and not taskrun_finished(taskrun):
            await self._cancel_taskrun(taskrun)
        pod_name = ((taskrun or {}).get("status") or {}).get("podName")
        if taskrun is not None and pod_name and taskrun_finished(taskrun):
            # Shipwright's pod ramp-up metrics, read (as Shipwright does) from a finished
            # TaskRun's pod; last, so nothing above waits for this extra GET.
            with contextlib.suppress(ApiError):
                pod = await self.kube.get_or_none(PODS, meta["namespace"], pod_name)
                if pod is not None:
                    shipwright_metrics.taskrun_pod_seen(written, taskrun, pod)

    async def _cancel_taskrun(self, taskrun: JSON) -> None:
        meta = taskrun["metadata"]
        if (taskrun.get("spec") or {}).get("status") == TASKRUN_CANCELLED:
            return
        body = {"spec": {"status": TASKRUN_CANCELLED,
                         "statusMessage": "the BuildRun finished before its TaskRun did"}}
        try:
            await self.kube.patch(TASKRUNS, meta["namespace"], meta["name"], body)
        except ApiError as exc:
            if is_not_found(exc):
                return
            # Tekton's webhook refuses any change to a finished TaskRun (400, "Once the
            # TaskRun is complete, no updates are allowed"): when Tekton finished it after
            # our read, there is nothing left to cancel. 51 such refusals in the 5,000
            # soak were retried as system errors before this check (RELIABILITY.md).
            if is_invalid(exc):
                current = await self.kube.get_or_none(TASKRUNS, meta["namespace"], meta["name"])
                if current is None or taskrun_finished(current):
                    return
            raise

    async def _write_status(self, buildrun: JSON, change: Callable[[JSON], JSON]) -> JSON | None:
        """The one way status is written: `change` applied to the current status.

        Optimistic concurrency: the patch carries the resourceVersion we read; on a
        conflict the BuildRun is read again and `change` re-applied. Returns the
        written object, or None when nothing was written because the BuildRun is
        gone, already complete (its outcome is frozen), or already as wanted.
        """
        namespace, name = buildrun["metadata"]["namespace"], buildrun["metadata"]["name"]
        current: JSON | None = buildrun
        async for attempt in _on_conflict():
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    current = await self.kube.get_or_none(BUILDRUNS, namespace, name)
                if current is None or phase_of(current) is Phase.DONE:
                    return None
                old: JSON = current.get("status") or {}
                new = change(old)
                if new == old:
                    return None
                body: dict[str, Any] = {
                    "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                    "status": new,
                }
                try:
                    return await self.kube.patch(BUILDRUNS, namespace, name, body,
                                                 subresource="status")
                except ApiError as exc:
                    if is_not_found(exc):
                        return None
                    raise
        raise AssertionError("unreachable: tenacity reraises the last error")


def _with_executor(status: JSON) -> JSON:
    """A copy of `status`, with `executor` beside a `taskRunName` written before it was
    (a BuildRun started by an older version of this controller), as Shipwright fills it."""
    status = dict(status)
    name = status.get("taskRunName")
    if name and not status.get("executor"):
        status["executor"] = {"kind": EXECUTOR_KIND, "name": name}
    return status


def _without_service_account(buildrun: JSON) -> JSON:
    """The BuildRun with spec.serviceAccount left out (a shallow copy)."""
    spec = {k: v for k, v in spec_of(buildrun).items() if k != "serviceAccount"}
    return {**buildrun, "spec": spec}


def strategy_kind(ref: JSON) -> str:
    """spec.strategy.kind, unset meaning BuildStrategy as in Shipwright; UserError
    UnknownStrategyKind for any kind but the two."""
    kind = ref.get("kind") or BUILD_STRATEGY
    if kind in (BUILD_STRATEGY, CLUSTER_BUILD_STRATEGY):
        return str(kind)
    raise UserError(reasons.UNKNOWN_STRATEGY_KIND,
                    f"unknown strategy kind {truncate(str(kind), 64)!r}: spec.strategy.kind "
                    f"is {BUILD_STRATEGY} (the default) or {CLUSTER_BUILD_STRATEGY}")


def validate_buildrun(buildrun: JSON, build_spec: JSON, strategy: JSON) -> None:
    """What Shipwright's BuildRun reconciler checks after the parameters and before it
    generates the executor (buildrun.go), in its order; raises the first failure as a
    UserError with its reason and words. `build_spec` is the referenced Build's spec or
    the embedded one.

    The BuildRun's own volumes and stepResources against the strategy
    (validate.BuildRunVolumes, BuildRunStepResources), its own nodeSelector, tolerations,
    schedulerName and runtimeClassName (validate.BuildRun*: an embedded spec's are
    validated with it, EMBEDDED_CHECKS, and the BuildRun may set none beside one); then,
    when the effective spec.output.platforms is non-empty (the BuildRun's if it gives
    any, else the Build's or the embedded spec's), ValidateMultiArchPreflight on the
    Build's nodeSelector merged with the BuildRun's: the platforms, their nodeSelector,
    and the executor, which must be a PipelineRun. This controller runs TaskRuns only,
    as Shipwright does by default (BUILDRUN_EXECUTOR=TaskRun), so a BuildRun with valid
    platforms ends ExecutorNotPipelineRun instead of silently building one arch.
    """
    run = spec_of(buildrun)
    strategy_spec = strategy.get("spec") or {}
    volumes = build_validation.volumes_verdict(run.get("volumes") or [], strategy_spec)
    _refuse(reasons.UNDEFINED_VOLUME, volumes)
    _refuse(reasons.VOLUME_NOT_OVERRIDABLE, volumes)
    _refuse(reasons.UNDEFINED_STEP_RESOURCE, build_validation.step_resources_verdict(
        run.get("stepResources") or [], strategy_spec))
    _refuse(reasons.NODE_SELECTOR_NOT_VALID,
            build_validation.node_selector_verdict(run.get("nodeSelector") or {}))
    _refuse(reasons.TOLERATION_NOT_VALID,
            build_validation.tolerations_verdict(run.get("tolerations") or []))
    _refuse(reasons.SCHEDULER_NAME_NOT_VALID,
            build_validation.scheduler_name_verdict(run.get("schedulerName")))
    _refuse(reasons.RUNTIME_CLASS_NAME_NOT_VALID,
            build_validation.runtime_class_name_verdict(run.get("runtimeClassName")))
    platforms = ((run.get("output") or {}).get("platforms")
                 or (build_spec.get("output") or {}).get("platforms") or [])
    if not platforms:
        return
    node_selector = {**(build_spec.get("nodeSelector") or {}), **(run.get("nodeSelector") or {})}
    preflight = build_validation.platforms_verdict(platforms, node_selector)
    _refuse(reasons.INVALID_PLATFORM, preflight)
    _refuse(reasons.NODE_SELECTOR_PLATFORM_CONFLICT, preflight)
    raise UserError(reasons.EXECUTOR_NOT_PIPELINE_RUN,
                    "multi-arch builds require PipelineRun executor mode, current executor "
                    f'mode: "{EXECUTOR_KIND}"')


def _refuse(reason: str, verdict: build_validation.Verdict | None) -> None:
    """Raises `verdict` as a UserError when it failed with `reason` (a check that can fail
    two ways is passed to this twice, once with each); the message is cut to the Build
    status's bound, as an embedded spec's verdict is."""
    if verdict is not None and verdict.reason == reason:
        raise UserError(reason, truncate(verdict.message, build_validation.MESSAGE_MAX))


def build_link(buildrun: JSON, build: JSON) -> JSON:
    """The metadata merge patch `_link_to_build` sends ({} when nothing is missing): the
    Build's name and generation labels, and with retention.atBuildDeletion the Build as
    an owner (over the resourceVersion read: a list is replaced whole)."""
    meta = buildrun["metadata"]
    bmeta = build["metadata"]
    change: JSON = {}
    labels = {LABEL_BUILD: bmeta["name"],
              LABEL_BUILD_GENERATION: str(bmeta.get("generation") or "")}
    # A validated Build's name is a label value (Shipwright's BuildNameInvalid otherwise).
    if (bmeta.get("generation") and _LABEL_VALUE.fullmatch(bmeta["name"])
            and any((meta.get("labels") or {}).get(k) != v for k, v in labels.items())):
        change["labels"] = labels
    refs = meta.get("ownerReferences") or []
    if ((build.get("spec") or {}).get("retention") or {}).get("atBuildDeletion") and not any(
            r.get("uid") == bmeta["uid"] for r in refs):
        refs = [r for r in refs if r.get("kind") != "Build"]
        refs.append({"apiVersion": build["apiVersion"], "kind": "Build",
                     "name": bmeta["name"], "uid": bmeta["uid"]})
        change["ownerReferences"] = refs
        change["resourceVersion"] = meta["resourceVersion"]
    return change
