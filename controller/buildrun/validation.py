"""What Shipwright's BuildRun reconciler checks of a BuildRun before it runs, beyond its
own fields (spec.py): an embedded Build spec, the strategy kind, and the BuildRun's
volumes, resources, scheduling and platforms against its strategy. Pure: every failure
is a UserError with Shipwright's reason and words."""

from __future__ import annotations

from controller.buildrun import reasons
from controller.buildrun.buildruns import spec_of
from controller.buildrun.executors import TASKRUN, Executor
from controller.builds import validation as build_validation
from controller.runtime.errors import UserError
from controller.runtime.kube import JSON
from controller.runtime.text import truncate

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


def strategy_kind(ref: JSON) -> str:
    """spec.strategy.kind, unset meaning BuildStrategy as in Shipwright; UserError
    UnknownStrategyKind for any kind but the two."""
    kind = ref.get("kind") or build_validation.NAMESPACED_STRATEGY
    if kind in (build_validation.NAMESPACED_STRATEGY, build_validation.CLUSTER_STRATEGY):
        return str(kind)
    raise UserError(reasons.UNKNOWN_STRATEGY_KIND,
                    f"unknown strategy kind {truncate(str(kind), 64)!r}: spec.strategy.kind "
                    f"is {build_validation.NAMESPACED_STRATEGY} (the default) or "
                    f"{build_validation.CLUSTER_STRATEGY}")


def validate_buildrun(buildrun: JSON, build_spec: JSON, strategy: JSON,
                      executor: Executor = TASKRUN) -> list[JSON]:
    """What Shipwright's BuildRun reconciler checks after the parameters and before it
    generates the executor (buildrun.go), in its order; raises the first failure as a
    UserError with its reason and words. `build_spec` is the referenced Build's spec or
    the embedded one; `executor` what the BuildRun would run as (BUILDRUN_EXECUTOR).

    Returns the platforms whose Nodes must be checked next (`check_nodes`, on the Nodes
    the caller lists, as Shipwright lists them only then): empty without platforms.

    The BuildRun's own volumes and stepResources against the strategy
    (validate.BuildRunVolumes, BuildRunStepResources), its own nodeSelector, tolerations,
    schedulerName and runtimeClassName (validate.BuildRun*: an embedded spec's are
    validated with it, EMBEDDED_CHECKS, and the BuildRun may set none beside one); then,
    when the effective spec.output.platforms is non-empty (the BuildRun's if it gives
    any, else the Build's or the embedded spec's), ValidateMultiArchPreflight on the
    Build's nodeSelector merged with the BuildRun's: the platforms, their nodeSelector,
    and the executor, which must build multi-arch (`Executor.multi_arch`: a PipelineRun):
    with TaskRuns (Shipwright's default) a BuildRun with valid platforms ends
    ExecutorNotPipelineRun instead of silently building one arch.
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
        return []
    node_selector = {**(build_spec.get("nodeSelector") or {}), **(run.get("nodeSelector") or {})}
    preflight = build_validation.platforms_verdict(platforms, node_selector)
    _refuse(reasons.INVALID_PLATFORM, preflight)
    _refuse(reasons.NODE_SELECTOR_PLATFORM_CONFLICT, preflight)
    if not executor.multi_arch:
        raise UserError(reasons.EXECUTOR_NOT_PIPELINE_RUN,
                        "multi-arch builds require PipelineRun executor mode, current "
                        f'executor mode: "{executor.kind}"')
    return list(platforms)


# The well-known Node labels a platform is matched by (corev1.LabelOSStable, LabelArchStable).
LABEL_OS = "kubernetes.io/os"
LABEL_ARCH = "kubernetes.io/arch"


def available_platforms(nodes: list[JSON]) -> set[str]:
    """"os/arch" of every Node that is Ready, not unschedulable and has both labels
    (Shipwright's availablePlatforms)."""
    found = set()
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        conditions = (node.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_OS) and labels.get(LABEL_ARCH):
            found.add(f"{labels[LABEL_OS]}/{labels[LABEL_ARCH]}")
    return found


def check_nodes(platforms: list[JSON], nodes: list[JSON]) -> None:
    """Shipwright's ValidateNodeAvailability: every platform needs a Node it can run on,
    else NodePlatformNotFound naming the first that has none. Pure: the caller lists."""
    available = available_platforms(nodes)
    for platform in platforms:
        key = f"{platform.get('os') or ''}/{platform.get('arch') or ''}"
        if key not in available:
            raise UserError(reasons.NODE_PLATFORM_NOT_FOUND,
                            f"no schedulable node found for platform {key}")


def _refuse(reason: str, verdict: build_validation.Verdict | None) -> None:
    """Raises `verdict` as a UserError when it failed with `reason` (a check that can fail
    two ways is passed to this twice, once with each); the message is cut to the Build
    status's bound, as an embedded spec's verdict is."""
    if verdict is not None and verdict.reason == reason:
        raise UserError(reason, truncate(verdict.message, build_validation.MESSAGE_MAX))

