"""Reasons on a BuildRun's Succeeded condition, spelled as Shipwright spells them.

Users and tooling match on these strings, so each value is part of the API. Where a
BuildRun fails a check Shipwright's Build validations make (its BuildRun reconciler runs
them on the BuildRun's own fields and on an embedded spec), the reason is the Build's,
taken from controller.builds.reasons rather than spelled again.
"""

from __future__ import annotations

from controller.builds import reasons as build_reasons

# The parameter reasons are Shipwright's for Builds and BuildRuns alike: they are named
# in controller.shipwright.params, and USER_ERROR_REASONS includes them all.
from controller.shipwright.params import PARAMETER_REASONS

# The reason of a successful BuildRun, as in Shipwright (its condition type is spelled
# the same: controller.shipwright.conditions.CONDITION_SUCCEEDED).
SUCCEEDED = "Succeeded"

FAILED = "Failed"
PENDING = "Pending"
RUNNING = "Running"

BUILD_RUN_TIMEOUT = "BuildRunTimeout"
BUILD_RUN_CANCELED = "BuildRunCanceled"
TASK_RUN_IS_MISSING = "TaskRunIsMissing"
POD_EVICTED = "PodEvicted"
STEP_OUT_OF_MEMORY = "StepOutOfMemory"

BUILD_NOT_FOUND = "BuildNotFound"
BUILD_STRATEGY_NOT_FOUND = build_reasons.BUILD_STRATEGY_NOT_FOUND
SERVICE_ACCOUNT_NOT_FOUND = "ServiceAccountNotFound"
BUILD_RUN_AMBIGUOUS_BUILD = "BuildRunAmbiguousBuild"
BUILD_RUN_NO_REF_OR_SPEC = "BuildRunNoRefOrSpec"
BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN = "BuildRunBuildFieldOverrideForbidden"
INVALID_TIMEOUT = "InvalidTimeout"
INVALID_RETENTION = "InvalidRetention"
INVALID_REFERENCE = "InvalidReference"
# The BuildRun's name is no valid label value (over 63 characters): its TaskRun's
# buildrun.shipwright.io/name label could not name it (Shipwright's check and words).
BUILD_RUN_NAME_INVALID = "BuildRunNameInvalid"
# The BuildRun is too large for its build spec snapshot to fit in its status.
BUILD_RUN_TOO_LARGE = "BuildRunTooLarge"
# The API server refused the TaskRun we generated from what the user asked for.
TASK_RUN_GENERATION_FAILED = "TaskRunGenerationFailed"

# The BuildRun's volumes against its strategy's (issue 14 part 4, issue 15).
UNDEFINED_VOLUME = build_reasons.UNDEFINED_VOLUME
VOLUME_NOT_OVERRIDABLE = build_reasons.VOLUME_NOT_OVERRIDABLE
# stepResources names a step the strategy does not have.
UNDEFINED_STEP_RESOURCE = build_reasons.UNDEFINED_STEP_RESOURCE
# A Build's (or BuildRun's) env var without a name, or with both value and valueFrom.
SPEC_ENV_NAME_CAN_NOT_BE_BLANK = build_reasons.SPEC_ENV_NAME_CAN_NOT_BE_BLANK
SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED = (
    build_reasons.SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED
)
# The BuildRun's own env names a variable on the FORBIDDEN_ENV_VAR_NAMES blocklist
# (Shipwright main's validate.BuildRunFields, #2275; off unless that setting is set).
SPEC_ENV_NAME_FORBIDDEN = build_reasons.SPEC_ENV_NAME_FORBIDDEN
# image-processing found more vulnerabilities than allowed (its exit code 22), as Shipwright.
VULNERABILITIES_FOUND = "VulnerabilitiesFound"

RECONCILER_RETRIES_EXHAUSTED = "ReconcilerRetriesExhausted"

# Issue 43, one run at a time per Build (serial.py): a NEW BuildRun of a Serial Build
# waiting behind another (Unknown, state table row 11), and a Build's run-policy
# annotation that is no policy (a user error, row 8).
SERIAL_RUN_WAITING = "SerialRunWaiting"
INVALID_RUN_POLICY = "InvalidRunPolicy"
# Infrastructure retries (issue 43 part 3, retries.py): a run's failure the infrastructure
# caused, where neither Tekton nor Shipwright names it (its pod's DisruptionTarget
# condition, its pod deleted under it), in the BuildRun's record of its attempts and the
# metric; the Event of each retry, and the Event of an annotation that could not be read.
POD_DISRUPTED = "PodDisrupted"
POD_DELETED = "PodDeleted"
INFRASTRUCTURE_RETRY = "InfrastructureRetry"
INFRASTRUCTURE_RETRIES_INVALID = "InfrastructureRetriesInvalid"
# Ours, not Shipwright's (issue 43): the TaskRun never ran within the pending timeout
# (--pending-timeout, annotations.PENDING_TIMEOUT; state table row 20), and the
# annotation's value that is no duration (a user error, row 8).
BUILD_RUN_PENDING_TIMEOUT = "BuildRunPendingTimeout"
INVALID_PENDING_TIMEOUT = "InvalidPendingTimeout"

# Tekton's reasons on a TaskRun's Succeeded condition that Shipwright maps to its own.
TASK_RUN_CANCELLED = "TaskRunCancelled"
TASK_RUN_TIMEOUT = "TaskRunTimeout"
# Tekton v1.12's finer reasons for a failed pod (pkg/pod/status.go, getFailureInfo), which
# Shipwright v0.20.13 reads as Failed before its own OOM and eviction logic
# (resources/conditions.go); PodEvicted is spelled as Shipwright's POD_EVICTED.
STEP_FAILED = "StepFailed"
STEP_OOM = "StepOOM"
TEKTON_FAILED_REASONS: frozenset[str] = frozenset({FAILED, STEP_FAILED, STEP_OOM, POD_EVICTED})
# The same on a PipelineRun's (Tekton v1 writes "Cancelled"; Shipwright's code reads
# PipelineRunCancelled, so both are read).
PIPELINE_RUN_CANCELLED = "PipelineRunCancelled"
CANCELLED = "Cancelled"
PIPELINE_RUN_TIMEOUT = "PipelineRunTimeout"

# Every other reason Tekton sets on a finished TaskRun or PipelineRun is kept on the
# BuildRun as Tekton spelled it, as Shipwright v0.20.13 keeps it (TaskRunImagePullFailed,
# CreateContainerConfigError, PodCreationFailed, ExceededResourceQuota, InvalidParamValue,
# ...). These are Tekton's own, from v1.3 to v1.12 (pkg/apis/pipeline/v1 taskrun_types.go
# and pipelinerun_types.go, pkg/pod/status.go, pkg/reconciler/taskrun): the set
# `metric_reason` lets into a metric label as they are, so a reason nobody knows (a status
# patched by hand) cannot grow a label without bound.
TEKTON_REASONS: frozenset[str] = frozenset({
    # TaskRun
    "Started", "Running", "Succeeded", "Failed", "ToBeRetried", "TaskRunCancelled",
    "TaskRunTimeout", "ResolvingTaskRef", "ResolvingStepActionRef", "TaskRunImagePullFailed",
    "CreateContainerConfigError", "PodCreationFailed", "TaskRunResultLargerThanAllowedLimit",
    "TaskRunStopSidecarFailed", "InvalidParamValue", "TaskRunResolutionFailed",
    "TaskRunValidationFailed", "TaskValidationFailed", "ResourceVerificationFailed",
    "PodEvicted", "StepOOM", "StepFailed", "SidecarOOM", "SidecarFailed", "InitContainerOOM",
    "InitContainerFailed", "FailureIgnored", "TaskRunPending",
    # the TaskRun's pod (pkg/pod/status.go) and reconciler
    "ExceededResourceQuota", "ExceededNodeResources", "PullImageFailed",
    "PodAdmissionFailed", "Pending",
    # PipelineRun
    "Completed", "Cancelled", "PipelineRunPending", "PipelineRunTimeout", "PipelineRunStopping",
    "CancelledRunningFinally", "StoppedRunningFinally", "CouldntGetPipeline",
    "InvalidPipelineResourceBindings", "InvalidWorkspaceBindings", "InvalidTaskRunSpecs",
    "ParameterTypeMismatch", "ObjectParameterMissKeys", "ParamArrayIndexingInvalid",
    "CouldntGetTask", "ParameterMissing", "PipelineValidationFailed",
    "CouldntGetPipelineResult", "PipelineInvalidGraph", "PipelineRunCouldntCancel",
    "PipelineRunCouldntTimeOut", "InvalidMatrixParameterTypes", "InvalidTaskResultReference",
    "InvalidPipelineResultReference", "RequiredWorkspaceMarkedOptional",
    "ResolvingPipelineRef", "CreateRunFailed", "CELEvaluationFailed", "PipelineRunCancelled",
})
# The label value of a reason outside ours and Tekton's.
OTHER_REASON = "Other"
# Shipwright's reason for a PipelineRun that failed other than by OOM, eviction or
# vulnerabilities (resources/conditions.go); the PipelineRun executor's "Failed".
PIPELINE_RUN_FAILED = "PipelineRunFailed"

# Shipwright's reasons for a strategy of the other kind, a kind it does not know, and a
# Build that failed validation (pkg/reconciler/buildrun/resources/conditions.go).
CLUSTER_BUILD_STRATEGY_NOT_FOUND = build_reasons.CLUSTER_BUILD_STRATEGY_NOT_FOUND
UNKNOWN_STRATEGY_KIND = "UnknownStrategyKind"
BUILD_REGISTRATION_FAILED = "BuildRegistrationFailed"

# A BuildRun's own nodeSelector, tolerations, schedulerName and runtimeClassName, and the
# effective spec.output.platforms, checked before the TaskRun is generated as Shipwright's
# BuildRun reconciler checks them (validate.BuildRunNodeSelector, ...,
# ValidateMultiArchPreflight), with its Build reasons of the same names. Multi-arch builds
# need Shipwright's PipelineRun executor (BUILDRUN_EXECUTOR): with TaskRuns a BuildRun
# with platforms ends ExecutorNotPipelineRun; with PipelineRuns each platform needs a
# Ready, schedulable Node of its os/arch (NodePlatformNotFound).
NODE_SELECTOR_NOT_VALID = build_reasons.NODE_SELECTOR_NOT_VALID
TOLERATION_NOT_VALID = build_reasons.TOLERATION_NOT_VALID
SCHEDULER_NAME_NOT_VALID = build_reasons.SCHEDULER_NAME_NOT_VALID
RUNTIME_CLASS_NAME_NOT_VALID = build_reasons.RUNTIME_CLASS_NAME_NOT_VALID
INVALID_PLATFORM = build_reasons.INVALID_PLATFORM
NODE_SELECTOR_PLATFORM_CONFLICT = build_reasons.NODE_SELECTOR_PLATFORM_CONFLICT
EXECUTOR_NOT_PIPELINE_RUN = "ExecutorNotPipelineRun"
NODE_PLATFORM_NOT_FOUND = "NodePlatformNotFound"

# Another object controls the BuildRun, so its Build (retention.atBuildDeletion) cannot
# be made its controller: Shipwright main's BuildRun condition (#2252), with
# --fail-on-owner-conflict only; v0.20.13 runs such a BuildRun (docs/shipwright-api.md).
SET_OWNER_REFERENCE_FAILED = "SetOwnerReferenceFailed"

# Failures the user caused and only the user can fix: retrying would give the same answer.
# Exactly the reasons a UserError is raised with (state table row 8), so the set of
# reasons a BuildRun can fail with stays closed and documented; tests/unit/buildrun/
# test_reasons.py checks it against every `UserError(...)` in the package, both ways.
USER_ERROR_REASONS: frozenset[str] = frozenset(
    {
        BUILD_NOT_FOUND,
        BUILD_STRATEGY_NOT_FOUND,
        CLUSTER_BUILD_STRATEGY_NOT_FOUND,
        UNKNOWN_STRATEGY_KIND,
        BUILD_REGISTRATION_FAILED,
        SERVICE_ACCOUNT_NOT_FOUND,
        BUILD_RUN_AMBIGUOUS_BUILD,
        BUILD_RUN_NO_REF_OR_SPEC,
        BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN,
        INVALID_TIMEOUT,
        INVALID_RETENTION,
        INVALID_REFERENCE,
        BUILD_RUN_NAME_INVALID,
        BUILD_RUN_TOO_LARGE,
        TASK_RUN_GENERATION_FAILED,
        UNDEFINED_VOLUME,
        VOLUME_NOT_OVERRIDABLE,
        UNDEFINED_STEP_RESOURCE,
        SPEC_ENV_NAME_CAN_NOT_BE_BLANK,
        SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED,
        NODE_SELECTOR_NOT_VALID,
        TOLERATION_NOT_VALID,
        SCHEDULER_NAME_NOT_VALID,
        RUNTIME_CLASS_NAME_NOT_VALID,
        INVALID_PLATFORM,
        NODE_SELECTOR_PLATFORM_CONFLICT,
        EXECUTOR_NOT_PIPELINE_RUN,
        NODE_PLATFORM_NOT_FOUND,
        INVALID_RUN_POLICY,
        INVALID_PENDING_TIMEOUT,
        SPEC_ENV_NAME_FORBIDDEN,
        SET_OWNER_REFERENCE_FAILED,
        *PARAMETER_REASONS,
    }
)


def metric_reason(reason: str) -> str:
    """`reason` as a metric label: ours and Tekton's as they are, anything else
    OTHER_REASON (a TaskRun status is anyone's to patch; a label set must stay bounded)."""
    return reason if reason in _LABELLED else OTHER_REASON


# The reasons that are their own label: this module's constants, USER_ERROR_REASONS (the
# parameter reasons among them are named in controller.shipwright.params, not here) and
# Tekton's. tests/unit/buildrun/test_reasons.py holds it to every reason the code writes.
_LABELLED: frozenset[str] = TEKTON_REASONS | USER_ERROR_REASONS | frozenset(
    value for name, value in list(globals().items()) if name.isupper() and isinstance(value, str)
)
