"""Planning a new BuildRun: find and check what it references, and work out what row 12
(START) will create, or the UserError the user must fix.

Build, strategies and ServiceAccounts come from the caches, as Shipwright reads them;
a missing reference is confirmed by a live GET (`Caches.read`) before any verdict.
Nothing here writes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from controller.buildrun import reasons, serviceaccounts
from controller.buildrun.buildruns import (
    owner_conflict,
    pending_timeout,
    spec_of,
    without_service_account,
)
from controller.buildrun.caches import Caches
from controller.buildrun.executors import TASKRUN, Executor
from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.spec import build_name, check_forbidden_env, effective_build
from controller.buildrun.validation import (
    EMBEDDED_CHECKS,
    check_nodes,
    strategy_kind,
    validate_buildrun,
)
from controller.builds import validation as build_validation
from controller.runtime.errors import UserError
from controller.runtime.kube import JSON, SECRETS, SERVICEACCOUNTS, Kube, Resource
from controller.runtime.name_rules import label_value_errors
from controller.runtime.text import truncate
from controller.shipwright.params import validate_params
from controller.shipwright.resources import BUILDS, BUILDSTRATEGIES, CLUSTERBUILDSTRATEGIES

# Listed (never watched) when a BuildRun with output.platforms starts as a PipelineRun.
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


@dataclass(frozen=True)
class Plan:
    """What row 12 (START) creates and records, worked out while observing a NEW BuildRun."""

    # The TaskRun or PipelineRun to create (its kind is the observed Executor's).
    run: JSON
    # status.buildSpec, as snapshot_of makes it: what Shipwright's TTL cleanup falls back
    # to when a finished BuildRun's own retention is removed.
    snapshot: JSON
    # The ServiceAccount to create (`.generate`), or the existing one's name and the
    # secrets it lacks (serviceaccounts.py).
    create_service_account: JSON | None
    service_account: str
    add_secrets: list[str]
    # The uid of the ServiceAccount read, to which adding `add_secrets` is pinned.
    service_account_uid: str = ""


def build_spec_of(buildrun: JSON, build: JSON | None) -> JSON:
    """The Build's spec as read: the referenced Build's (`build`), or for None the spec
    the BuildRun embeds (spec.build.spec), as Shipwright's GetBuildObject reads it."""
    if build is None:
        embedded: JSON = spec_of(buildrun)["build"]["spec"]
        return embedded
    return build.get("spec") or {}


def snapshot_of(buildrun: JSON, build: JSON | None) -> JSON:
    """status.buildSpec (Plan.snapshot): a copy of the Build's spec as read, no override
    of the BuildRun merged in, as Shipwright writes it (buildrun.go:
    `buildRun.Status.BuildSpec = &build.Spec`)."""
    return copy.deepcopy(build_spec_of(buildrun, build))


class Planner:
    def __init__(self, kube: Kube, caches: Caches, config: ShipwrightConfig,
                 fail_on_owner_conflict: bool = False) -> None:
        """`fail_on_owner_conflict`: --fail-on-owner-conflict (buildruns.owner_conflict)."""
        self.kube = kube
        self.caches = caches
        self.config = config
        self.fail_on_owner_conflict = fail_on_owner_conflict

    async def validated_build(self, buildrun: JSON) -> tuple[JSON | None, bool]:
        """The referenced Build (None when spec.build.spec embeds one), and whether it
        still waits for validation (no status.registered yet: row 9). The BuildRun's
        name is checked first (BuildRunNameInvalid), and an embedded spec is validated
        here, as Shipwright validates it (EMBEDDED_CHECKS).

        As Shipwright's BuildRun reconciler: a Build whose status.registered is set but
        not "True" failed validation, and so does every BuildRun of it, at once, with
        BuildRegistrationFailed. That verdict is terminal, so a cached failure is
        confirmed by a live GET first (the cache may not have the Build's newer status).
        """
        namespace = buildrun["metadata"]["namespace"]
        # Shipwright's first check of a BuildRun (buildrun.go): its name goes into the
        # buildrun.shipwright.io/name label of the TaskRun, its pod and every lookup by it
        # (shp's, the integration suite's), so it must be a valid label value.
        invalid = label_value_errors(buildrun["metadata"]["name"])
        if invalid:
            raise UserError(reasons.BUILD_RUN_NAME_INVALID, ", ".join(invalid))
        name = build_name(buildrun)
        if name is None:
            embedded = spec_of(buildrun)["build"]["spec"]
            # Shipwright checks the BuildRun's own fields (validate.BuildRunFields: no
            # overrides beside an embedded spec) before it validates the spec.
            effective_build(without_service_account(buildrun), embedded)
        # BuildRunFields' last check in Shipwright's main, before the Build is read.
        check_forbidden_env(buildrun, self.config.forbidden_env)
        if name is None:
            failed = await self._embedded_verdict(namespace, embedded)
            if failed is not None:
                # As Shipwright: the transient Build's message alone.
                raise UserError(reasons.BUILD_REGISTRATION_FAILED, failed.message)
            return None, False
        build = await self.caches.read(self.kube, BUILDS, namespace, name)
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

    async def prepare(self, buildrun: JSON, build: JSON | None,
                      executor: Executor = TASKRUN) -> Plan:
        """What row 12 (START) would create and record; raises UserError for anything
        the user must fix. `build` is the validated Build, None for an embedded spec;
        `executor` says what it runs as (a TaskRun or PipelineRun is generated).

        Build, strategies and ServiceAccounts come from the caches, as Shipwright reads
        them; a missing reference is confirmed by a live GET (`Caches.read`). The
        ServiceAccount is checked before the strategy, in Shipwright's order.
        """
        namespace = buildrun["metadata"]["namespace"]
        if build is not None and self.fail_on_owner_conflict:
            # Shipwright main's order: after the Build's registration and the cancel
            # (rows 7, 9), before anything else is read (#2252).
            conflict = owner_conflict(buildrun, build)
            if conflict is not None:
                raise UserError(reasons.SET_OWNER_REFERENCE_FAILED,
                                truncate(conflict, build_validation.MESSAGE_MAX))
        # Only its check: a pending timeout that is no duration fails the start.
        pending_timeout(buildrun, build, None)
        build_spec = build_spec_of(buildrun, build)
        choice = serviceaccounts.choose(buildrun)
        # ".generate" is no object name: the choice is made here, not by spec.py.
        effective = effective_build(
            without_service_account(buildrun) if choice.generated else buildrun, build_spec)
        create_sa, sa_name, add_secrets, sa_uid = await self._plan_service_account(
            buildrun, choice, effective.push_secret)
        effective = replace(effective, service_account=sa_name)
        strategy = await self._strategy(namespace, effective.spec.get("strategy") or {},
                                        effective.strategy_name)
        build_obj = build if build is not None else {
            "metadata": {"namespace": namespace}, "spec": build_spec}
        validate_params((build_obj.get("spec") or {}).get("paramValues") or [],
                        spec_of(buildrun).get("paramValues") or [],
                        (strategy.get("spec") or {}).get("parameters") or [])
        platforms = validate_buildrun(buildrun, build_spec, strategy, executor)
        if platforms:
            # As Shipwright: listed at each multi-arch start, only after the preflight.
            nodes = (await self.kube.list(NODES, None)).get("items") or []
            check_nodes(platforms, nodes)
        snapshot = snapshot_of(buildrun, build)
        run = executor.generate(buildrun, build_obj, strategy, sa_name, self.config)
        return Plan(run, snapshot, create_sa, sa_name, add_secrets, sa_uid)

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
            if ref.kind == build_validation.CLUSTER_STRATEGY:
                strategy = await self.caches.read(self.kube, CLUSTERBUILDSTRATEGIES,
                                                  namespace, ref.name)
            else:
                strategy = await self.caches.read(self.kube, BUILDSTRATEGIES,
                                            namespace, ref.name)
        lookups = build_validation.Lookups(missing, strategy,
                                           forbidden_env=self.config.forbidden_env)
        for check in EMBEDDED_CHECKS:
            verdict = check(transient, lookups)
            if verdict is not None:
                return build_validation.Verdict(
                    verdict.reason, truncate(verdict.message, build_validation.MESSAGE_MAX))
        return None

    async def _strategy(self, namespace: str, ref: JSON, name: str) -> JSON:
        """The strategy spec.strategy names: a BuildStrategy in the namespace when its kind
        is BuildStrategy or unset (Shipwright's default), else a ClusterBuildStrategy."""
        kind = strategy_kind(ref)
        if kind == build_validation.NAMESPACED_STRATEGY:
            strategy = await self.caches.read(self.kube, BUILDSTRATEGIES, namespace,
                                        name)
            if strategy is None:
                raise UserError(reasons.BUILD_STRATEGY_NOT_FOUND,
                                f"BuildStrategy {name!r} not found in namespace "
                                f"{namespace!r}")
            return strategy
        strategy = await self.caches.read(self.kube, CLUSTERBUILDSTRATEGIES,
                                    namespace, name)
        if strategy is None:
            raise UserError(reasons.CLUSTER_BUILD_STRATEGY_NOT_FOUND,
                            f"ClusterBuildStrategy {name!r} not found")
        return strategy

    async def _plan_service_account(
        self, buildrun: JSON, choice: serviceaccounts.Choice, push_secret: str | None
    ) -> tuple[JSON | None, str, list[str], str]:
        """(the ServiceAccount to create, the name the TaskRun runs as, the secrets to add
        to it, the uid of the one read), as Shipwright chooses: serviceaccounts.py."""
        namespace = buildrun["metadata"]["namespace"]
        store = self.caches.service_accounts
        if choice.generated:
            existing = store.get(f"{namespace}/{choice.name}")
            if existing is None:
                return (serviceaccounts.generated_service_account(buildrun, push_secret),
                        choice.name, [], "")
            # Made by an earlier try (or a namesake, which Shipwright uses as it is).
            return None, choice.name, [], ""
        if choice.explicit:
            sa = await self.caches.read(self.kube, SERVICEACCOUNTS, namespace, choice.name)
            if sa is None:
                raise UserError(reasons.SERVICE_ACCOUNT_NOT_FOUND,
                                f"ServiceAccount {choice.name!r} not found in namespace "
                                f"{namespace!r}")
            return (None, choice.name, serviceaccounts.missing_secrets(sa, push_secret),
                    str(sa["metadata"].get("uid") or ""))
        # The namespace's own: from the cache alone, since "pipeline" is absent from most
        # clusters and a GET per start to confirm that would double a start's reads.
        for name in choice.candidates:
            sa = store.get(f"{namespace}/{name}")
            if sa is not None:
                return (None, name, serviceaccounts.missing_secrets(sa, push_secret),
                        str(sa["metadata"].get("uid") or ""))
        # Neither exists (yet: kube-controller-manager makes "default" with the
        # namespace). Shipwright would wait; the TaskRun runs as "default", as Tekton's own
        # default would have it, and Tekton reports a pod that cannot be made.
        return None, choice.name, [], ""
