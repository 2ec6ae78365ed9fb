"""Reasons on a Build's `status.reason`, spelled as Shipwright v0.20 spells them
(pkg/apis/build/v1beta1/build_types.go, `BuildReason`).

Users, `shp` and the BuildRun side (`BuildRegistrationFailed`) read these strings,
so each value is part of the API.
"""

from __future__ import annotations

# The parameter reasons are Shipwright's for Builds and BuildRuns alike: they are named
# in controller.shipwright.params, and FAILURE_REASONS includes them (but one).
from controller.shipwright.params import MISSING_PARAMETER_VALUES, PARAMETER_REASONS

# status.registered, a corev1.ConditionStatus.
REGISTERED_TRUE = "True"
REGISTERED_FALSE = "False"

# The reason of a Build that passed every validation, and its message.
SUCCEEDED = "Succeeded"
ALL_VALIDATIONS_SUCCEEDED = "all validations succeeded"

# Strategy reference (pkg/validate/strategies.go).
UNKNOWN_BUILD_STRATEGY_KIND = "UnknownBuildStrategyKind"
BUILD_STRATEGY_NOT_FOUND = "BuildStrategyNotFound"
CLUSTER_BUILD_STRATEGY_NOT_FOUND = "ClusterBuildStrategyNotFound"

# Secret references (pkg/validate/secrets.go).
SPEC_SOURCE_SECRET_REF_NOT_FOUND = "SpecSourceSecretRefNotFound"
SPEC_OUTPUT_SECRET_REF_NOT_FOUND = "SpecOutputSecretRefNotFound"
MULTIPLE_SECRET_REF_NOT_FOUND = "MultipleSecretRefNotFound"

# spec.env (pkg/validate/envvars.go).
SPEC_ENV_NAME_CAN_NOT_BE_BLANK = "SpecEnvNameCanNotBeBlank"
SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED = (
    "SpecEnvOnlyOneOfValueOrValueFromMustBeSpecified"
)
# A name on the FORBIDDEN_ENV_VAR_NAMES blocklist: Shipwright's main (#2275), not v0.20.13;
# only with that setting (controller.shipwright.forbidden_env).
SPEC_ENV_NAME_FORBIDDEN = "SpecEnvNameForbidden"

# spec.paramValues against the strategy's parameters (pkg/validate/params.go).

# The build.shipwright.io/verify.repository annotation (pkg/validate/sourceurl.go).
REMOTE_REPOSITORY_UNREACHABLE = "RemoteRepositoryUnreachable"

# metadata.name must be a label value (pkg/validate/buildname.go).
BUILD_NAME_INVALID = "BuildNameInvalid"

# spec.volumes against the strategy's volumes (pkg/validate/volumes.go).
UNDEFINED_VOLUME = "UndefinedVolume"
VOLUME_NOT_OVERRIDABLE = "VolumeNotOverridable"

# spec.strategy.stepResources against the strategy's steps (pkg/validate/stepresources.go).
UNDEFINED_STEP_RESOURCE = "UndefinedStepResource"

# spec.trigger.when (pkg/validate/trigger.go).
TRIGGER_NAME_CAN_NOT_BE_BLANK = "TriggerNameCanNotBeBlank"
TRIGGER_INVALID_TYPE = "TriggerInvalidType"
TRIGGER_INVALID_GITHUB_WEBHOOK = "TriggerInvalidGitHubWebHook"
TRIGGER_INVALID_IMAGE = "TriggerInvalidImage"
TRIGGER_INVALID_PIPELINE = "TriggerInvalidPipeline"

# spec.output (pkg/validate/output.go).
OUTPUT_TIMESTAMP_NOT_SUPPORTED = "OutputTimestampNotSupported"
OUTPUT_TIMESTAMP_NOT_VALID = "OutputTimestampNotValid"
INVALID_PLATFORM = "InvalidPlatform"
NODE_SELECTOR_PLATFORM_CONFLICT = "NodeSelectorPlatformConflict"

# Pod scheduling fields (pkg/validate/nodeselector.go, tolerations.go,
# scheduler_name.go, runtime_class_name.go).
NODE_SELECTOR_NOT_VALID = "NodeSelectorNotValid"
TOLERATION_NOT_VALID = "TolerationNotValid"
SCHEDULER_NAME_NOT_VALID = "SchedulerNameNotValid"
RUNTIME_CLASS_NAME_NOT_VALID = "RuntimeClassNameNotValid"

# Every reason a Build that fails validation can carry; tests/unit/builds/test_validation.py
# checks that each one is produced by some input, and nothing else is.
FAILURE_REASONS: frozenset[str] = frozenset(
    {
        UNKNOWN_BUILD_STRATEGY_KIND,
        BUILD_STRATEGY_NOT_FOUND,
        CLUSTER_BUILD_STRATEGY_NOT_FOUND,
        SPEC_SOURCE_SECRET_REF_NOT_FOUND,
        SPEC_OUTPUT_SECRET_REF_NOT_FOUND,
        MULTIPLE_SECRET_REF_NOT_FOUND,
        SPEC_ENV_NAME_CAN_NOT_BE_BLANK,
        SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED,
        REMOTE_REPOSITORY_UNREACHABLE,
        BUILD_NAME_INVALID,
        UNDEFINED_VOLUME,
        VOLUME_NOT_OVERRIDABLE,
        UNDEFINED_STEP_RESOURCE,
        TRIGGER_NAME_CAN_NOT_BE_BLANK,
        TRIGGER_INVALID_TYPE,
        TRIGGER_INVALID_GITHUB_WEBHOOK,
        TRIGGER_INVALID_IMAGE,
        TRIGGER_INVALID_PIPELINE,
        OUTPUT_TIMESTAMP_NOT_SUPPORTED,
        OUTPUT_TIMESTAMP_NOT_VALID,
        INVALID_PLATFORM,
        NODE_SELECTOR_PLATFORM_CONFLICT,
        NODE_SELECTOR_NOT_VALID,
        TOLERATION_NOT_VALID,
        SCHEDULER_NAME_NOT_VALID,
        RUNTIME_CLASS_NAME_NOT_VALID,
        SPEC_ENV_NAME_FORBIDDEN,
    }
) | (PARAMETER_REASONS - {MISSING_PARAMETER_VALUES})
