"""What this controller does with every field of Shipwright's v1beta1 API, and the tests
that show it: one row per field path, covering that path and every path below it.

tests/unit/devtools/test_field_sweep.py walks every field path of Shipwright's own v1beta1 CRDs
(deploy/crds/ in the pinned module) and fails for:
- a path no row covers and our CRD does not refuse (a field admitted and then ignored);
- a row that covers no path of Shipwright's schema (a stale row);
- a row whose tests do not exist, or whose tests never mention the row's field;
- a TaskRun row (`oracle=True`) that no case of the oracle comparison
  (tests/oracle/test_parity.py: Shipwright's own generator against ours) sets.
docs/shipwright-api.md's "Every field, and what we do with it" is markdown_table()'s
output.

Paths are written as in devtools/crds/crd_differences.py: `.spec.volumes[].name`, `[]` for the
items of a list, `{}` for the values of a map. A BuildRun's embedded `.spec.build.spec` is
covered by the Build's rows for `.spec` (it is handed to the same code as a Build's spec),
except where a BuildRun row below `.spec.build.spec` says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ALL = ("Build", "BuildRun", "BuildStrategy", "ClusterBuildStrategy")
BUILD = ("Build",)
RUN = ("BuildRun",)
BOTH = ("Build", "BuildRun")
STRATEGIES = ("BuildStrategy", "ClusterBuildStrategy")

EMBEDDED = ".spec.build.spec"  # a BuildRun's embedded Build spec
ORACLE = "tests/oracle/test_parity.py::test_ours_is_valid_and_equals_shipwrights"

_P = "tests/oracle/test_parity.py::"
_TR = "tests/unit/buildrun/test_taskrun.py::"
_ST = "tests/unit/buildrun/test_outcomes.py::"
_SP = "tests/unit/buildrun/test_spec.py::"
_PA = "tests/unit/buildrun/test_params.py::"
_VA = "tests/unit/builds/test_validation.py::"
_DOM = "tests/cluster/test_shipwright_domain.py::"
_BR = "tests/cluster/test_buildrun.py::"
_PX = "tests/cluster/test_pipelinerun_executor.py::"
_LC = "tests/cluster/test_lifecycle.py::"
_TK = "tests/cluster/test_tekton.py::"
_SA = "tests/cluster/test_samples.py::"
_BC = "tests/cluster/test_build_controller.py::"
_CK = "tests/unit/buildrun/test_buildrun_checks.py::"


@dataclass(frozen=True)
class Field:
    kinds: tuple[str, ...]
    path: str
    does: str  # what we do with it, in a line
    tests: tuple[str, ...] = ()  # test node ids (file::function) that show it
    oracle: bool = False  # it shapes the TaskRun: shown by the oracle comparison too

    def shown_by(self) -> tuple[str, ...]:
        return (ORACLE, *self.tests) if self.oracle else self.tests

    def covers(self, path: str) -> bool:
        return is_at_or_below(path, self.path)


def is_at_or_below(path: str, prefix: str) -> bool:
    """`path` is `prefix` or a field, item or value beneath it."""
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in ".[{")


FIELDS: list[Field] = [
    # Every kind.
    Field(ALL, ".apiVersion", "Kubernetes' type fields: only `shipwright.io/v1beta1` is served",
          (_SA + "test_every_sample_kind_is_known",)),
    Field(ALL, ".kind", "Kubernetes' type field, as `.apiVersion`",
          (_SA + "test_every_sample_kind_is_known",)),
    Field(ALL, ".metadata", "names, uid and generations label the TaskRun and own it; a "
          "strategy's annotations are copied to the TaskRun but Shipwright's own; a BuildRun "
          "whose name is no valid label value (over 63 characters) fails at once with "
          "BuildRunNameInvalid, as Shipwright's", (
              _TR + "test_metadata_labels_and_owner",
              _TR + "test_strategy_annotations_are_copied_except_shipwrights_own",
              _BR + "test_a_name_over_63_characters_fails_as_shipwrights"),
          oracle=True),

    # Build and BuildRun specs (a BuildRun's fields of the same name override the Build's).
    Field(BOTH, ".spec.source", "the source step of the TaskRun (Git clone, OCI bundle pull, "
          "Local waiter), as Shipwright's generator writes it; the type must match the one "
          "source given (our CEL rule)", (_TR + "test_git_step",
                                          _TR + "test_bundle_step_and_local_waiter",
                                          _SA + "test_what_shipwright_refuses_is_refused"),
          oracle=True),
    Field(BUILD, ".spec.source.git.url", "Git clone URL; the Build is refused "
          "(RemoteRepositoryUnreachable) when `build.shipwright.io/verify.repository` asks "
          "and the remote does not answer",
          (_BC + "test_verify_repository_asks_the_git_remote",
           _VA + "test_repository_probe_splits_protocols_as_go_git"), oracle=True),
    Field(BUILD, ".spec.source.git.cloneSecret", "mounted into the clone step; a Secret that "
          "does not exist fails the Build (SpecSourceSecretRefNotFound)",
          (_VA + "test_refs", _TR + "test_git_step"), oracle=True),
    Field(BUILD, ".spec.source.ociArtifact.pullSecret", "mounted into the bundle step; a "
          "Secret that does not exist fails the Build (SpecSourceSecretRefNotFound)",
          (_TR + "test_bundle_step_and_local_waiter",), oracle=True),
    Field(BOTH, ".spec.source.local", "the Local source's waiter step (`shp build upload` "
          "streams into it); a BuildRun's Local source replaces the Build's source",
          (_TR + "test_bundle_step_and_local_waiter",), oracle=True),
    Field(BUILD, ".spec.source.contextDir", "`shp-source-context` joined and cleaned as Go's "
          "path.Join", (_TR + "test_context_dir_is_joined_and_cleaned_like_go_path_join",),
          oracle=True),
    Field(BUILD, ".spec.strategy", "the BuildStrategy or ClusterBuildStrategy (kind defaults "
          "to BuildStrategy) whose steps the TaskRun runs; a missing one fails the Build "
          "(BuildStrategyNotFound, ClusterBuildStrategyNotFound) and its BuildRuns",
          (_DOM + "test_a_cluster_build_strategy_runs_and_kind_defaults_to_build_strategy",
           _BC + "test_a_missing_strategy_then_a_fixed_spec"), oracle=True),
    Field(BUILD, ".spec.strategy.stepResources", "replaces the named strategy step's "
          "resources; a step the strategy lacks fails the Build (UndefinedStepResource)",
          (_TR + "test_step_resources_for_an_unknown_step_are_refused",), oracle=True),
    Field(BOTH, ".spec.paramValues", "TaskRun params (values of ConfigMaps and Secrets as env "
          "vars, with `format`); checked against the strategy's parameters with every "
          "parameter reason of Shipwright's", (
              _SP + "test_effective_build_applies_buildrun_overrides",
              _VA + "test_a_build_may_leave_required_parameters_to_its_buildruns"),
          oracle=True),
    Field(BOTH, ".spec.output", "the image the TaskRun pushes (`shp-output-image`, "
          "`shp-output-insecure`), its annotations, labels, timestamp and vulnerability scan "
          "(the image-processing step); a BuildRun's output wins",
          (_TR + "test_buildrun_output_wins_for_image_and_insecure",
           _TR + "test_managed_push_when_a_step_writes_the_output_directory",
           _TR + "test_vulnerability_scan_settings_and_count_limit",
           _TR + "test_output_timestamps"), oracle=True),
    Field(BOTH, ".spec.output.pushSecret", "mounted into the push steps and added to the "
          "BuildRun's ServiceAccount (a generated one is made with it); a Secret that does not "
          "exist fails the Build (SpecOutputSecretRefNotFound)",
          (_VA + "test_refs",
           _DOM + "test_generate_makes_an_owned_service_account_with_the_push_secret"),
          oracle=True),
    Field(BOTH, ".spec.output.platforms", "checked as Shipwright checks it (InvalidPlatform, "
          "NodeSelectorPlatformConflict); with the default TaskRun executor a BuildRun "
          "asking for platforms ends ExecutorNotPipelineRun, as Shipwright's; with "
          "`BUILDRUN_EXECUTOR=PipelineRun` each platform needs a Ready, schedulable Node of "
          "its os/arch (NodePlatformNotFound), and the PipelineRun builds one image, as "
          "Shipwright v0.20.13's",
          (_VA + "test_valid_optional_fields_register", _VA + "test_failures",
           _CK + "test_platforms_valid_end_in_executor_not_pipeline_run",
           _CK + "test_node_availability_as_shipwrights",
           _PX + "test_multi_arch_runs_where_nodes_of_each_platform_exist",
           _CK + "test_platforms_of_the_buildrun_replace_the_builds_when_not_empty",
           _BR + "test_user_errors_are_terminal_at_once")),
    Field(BOTH, ".spec.timeout", "the TaskRun's timeout; a BuildRun's wins; Tekton ends the "
          "TaskRun past it (TaskRunTimeout) and the BuildRun ends BuildRunTimeout; if Tekton "
          "has not `--timeout-grace` later, the controller ends it and cancels the TaskRun",
          (_SP + "test_effective_build_rejects_bad_build_timeout",
           _BR + "test_timeout_wins_and_a_late_success_never_flips_it",
           _TK + "test_timeout_tekton_stops_the_taskrun_and_deletes_its_pod",
           _TK + "test_the_timeout_backstop_when_tekton_never_ends_the_taskrun"), oracle=True),
    Field(BOTH, ".spec.env", "env of every strategy step; names checked as Shipwright checks "
          "them (our CEL rules refuse a blank name or value with valueFrom at admission); with "
          "`FORBIDDEN_ENV_VAR_NAMES`, main's blocklist too (\"Shipwright's main\" below)",
          (_SP + "test_effective_build_checks_env_as_shipwright",
           _TR + "test_env_named_twice_by_build_and_step_is_refused",
           "tests/cluster/test_shipwright_main.py::"
           "test_forbidden_env_names_are_main_s_with_the_setting"), oracle=True),
    Field(BOTH, ".spec.volumes", "replace the strategy's overridable volumes of the same name "
          "(UndefinedVolume, VolumeNotOverridable otherwise)",
          (_TR + "test_volume_overrides_are_checked",
           _TR + "test_volume_override_replaces_the_source_only"), oracle=True),
    Field(BOTH, ".spec.nodeSelector", "the TaskRun's pod template; checked as Shipwright checks "
          "it (NodeSelectorNotValid)",
          (_BC + "test_a_bad_node_selector_is_reported", _VA + "test_failures",
           _CK + "test_buildrun_node_selector_key_not_valid",
           _TR + "test_pod_template_buildrun_wins_and_tolerations_merge_by_key"), oracle=True),
    Field(BOTH, ".spec.tolerations", "the TaskRun's pod template, merged by key; checked as "
          "Shipwright checks them (TolerationNotValid)",
          (_TR + "test_pod_template_buildrun_wins_and_tolerations_merge_by_key",
           _VA + "test_failures", _CK + "test_buildrun_tolerations_not_valid",
           _BR + "test_user_errors_are_terminal_at_once"), oracle=True),
    Field(BOTH, ".spec.schedulerName", "the TaskRun's pod template; checked as Shipwright "
          "checks it (SchedulerNameNotValid)",
          (_TR + "test_pod_template_buildrun_wins_and_tolerations_merge_by_key",
           _VA + "test_failures", _CK + "test_buildrun_scheduler_name_not_valid"), oracle=True),
    Field(BOTH, ".spec.runtimeClassName", "the TaskRun's pod template; checked as Shipwright "
          "checks it (RuntimeClassNameNotValid)",
          (_TR + "test_pod_template_buildrun_wins_and_tolerations_merge_by_key",
           _VA + "test_failures", _CK + "test_buildrun_runtime_class_name_not_valid"),
          oracle=True),
    Field(BOTH, ".spec.retention.ttlAfterFailed", "a failed BuildRun is deleted this long after "
          "it finished (a BuildRun's wins), preconditioned on its uid and resourceVersion; a "
          "BuildRun's may be lowered or raised once it finished and is read live (as "
          "Shipwright's TTL cleanup reads it; a value that does not parse keeps the BuildRun)",
          (_LC + "test_ttl_survives_a_controller_restart",
           _LC + "test_ttl_falls_back_to_the_build_and_keeps_succeeded_runs",
           _LC + "test_a_finished_buildruns_ttl_may_be_lowered_or_raised")),
    Field(BOTH, ".spec.retention.ttlAfterSucceeded", "as `ttlAfterFailed`, for a succeeded "
          "BuildRun", (_LC + "test_ttl_after_succeeded_deletes_on_time",)),
    Field(BUILD, ".spec.retention.failedLimit", "the oldest failed BuildRuns of the Build beyond "
          "this count are deleted when one finishes (controller/buildlimit)",
          ("tests/cluster/test_build_limits.py::test_limits_delete_the_oldest_finished_and_nothing_else",
           "tests/unit/buildlimit/test_limits.py::test_limits_of_a_build")),
    Field(BUILD, ".spec.retention.succeededLimit", "as `failedLimit`, for succeeded BuildRuns",
          ("tests/cluster/test_build_limits.py::test_limits_delete_the_oldest_finished_and_nothing_else",
           "tests/unit/buildlimit/test_limits.py::test_limits_of_a_build")),
    Field(BUILD, ".spec.retention.atBuildDeletion", "true: the Build owns its BuildRuns, so "
          "deleting it deletes them (and back when set to false)",
          (_BC + "test_at_build_deletion_makes_the_build_own_its_buildruns_and_back",
           _TK + "test_build_deletion_cascades_with_retention_at_build_deletion")),
    Field(BUILD, ".spec.trigger", "validated as Shipwright's Build controller validates it "
          "(our CEL rules say the same at admission); running triggers is the job of "
          "Shipwright Triggers, a separate project, which reads them from the Build",
          (_VA + "test_valid_optional_fields_register",
           _SA + "test_what_shipwright_refuses_is_refused")),
    Field(BUILD, ".spec.trigger.triggerSecret", "kept for Shipwright Triggers (it names the "
          "Secret holding the webhook token); Shipwright's Build controller does not read it "
          "and neither does this one",
          (_SA + "test_what_shipwright_admits_near_our_rules_is_admitted",)),

    # BuildRun only.
    Field(RUN, ".spec.build.name", "the Build to run (BuildNotFound when missing; the "
          "BuildRun waits for a Build not yet validated and fails at once "
          "(BuildRegistrationFailed) for one that failed)",
          (_SP + "test_build_name_returns_referenced_build",
           _BR + "test_user_errors_are_terminal_at_once")),
    Field(RUN, EMBEDDED, "an embedded Build spec: validated as Shipwright validates one, then "
          "each field as the Build's field of the same name (rows above); a BuildRun may not "
          "also override it (BuildRunBuildFieldOverrideForbidden)",
          (_SP + "test_effective_build_embedded_spec",
           _DOM + "test_an_embedded_build_spec_is_validated_as_shipwright_validates_it")),
    Field(RUN, EMBEDDED + ".trigger", "refused (BuildRunBuildFieldOverrideForbidden), as "
          "Shipwright refuses it: triggers belong to a Build",
          (_SP + "test_effective_build_forbids_a_trigger_in_an_embedded_spec",)),
    Field(RUN, EMBEDDED + ".retention.failedLimit", "refused at admission (our CEL rule): "
          "limits count the BuildRuns of a Build and an embedded spec has none (Shipwright "
          "admits it and ignores it)", (_SA + "test_what_shipwright_refuses_is_refused",)),
    Field(RUN, EMBEDDED + ".retention.succeededLimit", "as `failedLimit` above",
          (_SA + "test_what_shipwright_refuses_is_refused",)),
    Field(RUN, EMBEDDED + ".retention.atBuildDeletion", "as `failedLimit` above: there is no "
          "Build to own the BuildRun", (_SA + "test_what_shipwright_refuses_is_refused",)),
    Field(RUN, ".spec.serviceAccount", "the ServiceAccount the TaskRun runs as: `.generate` "
          "makes one for the BuildRun (owned, with the push secret, deleted when it ends); "
          "unset: `pipeline` if it exists, else `default`; a missing one ends "
          "ServiceAccountNotFound", (
              _DOM + "test_generate_makes_an_owned_service_account_with_the_push_secret",
              _DOM + "test_a_named_service_account_gets_the_push_secret_added_and_keeps_its_own",
              "tests/unit/buildrun/test_serviceaccounts.py::test_choose")),
    Field(RUN, ".spec.state", "`BuildRunCanceled`: before the TaskRun exists, ends the "
          "BuildRun BuildRunCanceled; after, shows Unknown/BuildRunCanceled (Shipwright's "
          "words) and asks the TaskRun to stop, and the TaskRun's end decides, as under "
          "Shipwright: BuildRunCanceled, or Succeeded with its image when it completed before "
          "the cancel could be processed (README 'How a BuildRun moves', rows 17, 18); with "
          "`spec.retention` once the BuildRun finished, the one spec change allowed after "
          "creation (our CEL rules)",
          (_BR + "test_cancel_before_start_and_while_running",
           "tests/unit/buildrun/test_actions.py::"
           "test_row_16_a_cancel_while_running_asks_and_waits_for_the_taskrun",
           "tests/unit/devtools/test_crdgen.py::test_every_buildrun_spec_field_but_state_is_immutable")),
    Field(RUN, ".spec.stepResources", "replaces the named strategy step's resources; a step "
          "the strategy lacks ends UndefinedStepResource",
          (_TR + "test_step_resources_for_an_unknown_step_are_refused",), oracle=True),

    # Strategies.
    Field(STRATEGIES, ".spec.parameters", "the TaskRun's params, with their types, "
          "descriptions and defaults; a Build's or BuildRun's values are checked against them",
          (_BR + "test_user_errors_are_terminal_at_once",), oracle=True),
    Field(STRATEGIES, ".spec.steps", "the TaskRun's steps, with the Build's env, the step "
          "resource overrides and the strategy's security context applied",
          (_TR + "test_strategy_steps_carry_env_resources_security_and_mounts",), oracle=True),
    Field(STRATEGIES, ".spec.volumes", "the TaskRun's volumes (`overridable` ones may be "
          "replaced by a Build's or BuildRun's volume of the same name)",
          (_TR + "test_volume_overrides_are_checked",), oracle=True),
    Field(STRATEGIES, ".spec.volumes[].description", "documentation only: not part of a pod "
          "volume, and Shipwright's generator drops it too", (), oracle=True),
    Field(STRATEGIES, ".spec.securityContext", "runAsUser/runAsGroup for every step, "
          "Shipwright's own steps included, with the passwd and group files Shipwright writes",
          (_TR + "test_strategy_security_context_forces_shipwright_steps_and_names_the_user",),
          oracle=True),
    Field(STRATEGIES, ".status", "nothing: Shipwright's strategies have a status with no "
          "fields, and so do ours", ("tests/unit/devtools/test_crd_schema.py::"
                                     "test_a_strategys_status_has_no_fields_as_in_shipwright",)),

    # Statuses: written by this controller, read by users, `shp` and dashboards.
    Field(BUILD, ".status", "written by the Build controller alone: `registered`, `reason` "
          "and `message` with Shipwright's reasons and words",
          (_BC + "test_a_valid_build_is_registered_and_counted",
           _BC + "test_a_missing_strategy_then_a_fixed_spec")),
    Field(RUN, ".status.buildSpec", "the Build's spec as read when the TaskRun is created (an "
          "embedded spec: `spec.build.spec`), as Shipwright writes it: not the BuildRun's "
          "overrides merged in, so a finished BuildRun whose own retention is removed falls "
          "back to its Build's TTL, as under Shipwright",
          (_BR + "test_success_creates_one_owned_taskrun_and_reports_the_digest",
           "tests/unit/buildrun/test_actions.py::"
           "test_row_10_starts_labels_creates_and_records_in_one_status_write")),
    Field(RUN, ".status.startTime", "the TaskRun's (PipelineRun's) own startTime, copied once "
          "Tekton has started it, as Shipwright copies it",
          (_BR + "test_success_creates_one_owned_taskrun_and_reports_the_digest",
           _TK + "test_timeout_tekton_stops_the_taskrun_and_deletes_its_pod",
           "tests/unit/buildrun/test_actions.py::"
           "test_row_19_copies_the_taskruns_start_time_as_shipwright")),
    Field(RUN, ".status.taskRunName", "the TaskRun's name (deterministic from the BuildRun's "
          "uid); not written for a PipelineRun, as Shipwright",
          (_BR + "test_cancel_before_start_and_while_running",
           "tests/unit/buildrun/test_actions.py::"
           "test_pipelinerun_row_10_creates_a_pipelinerun_and_names_it_as_shipwright")),
    Field(RUN, ".status.executor", "`{kind: TaskRun, name}`, beside `taskRunName`; "
          "`{kind: PipelineRun, name}` with `BUILDRUN_EXECUTOR=PipelineRun`",
          ("tests/unit/buildrun/test_shipwright_domain.py::"
           "test_executor_is_filled_beside_an_older_taskrun_name",
           _PX + "test_a_buildrun_runs_as_an_owned_pipelinerun_to_succeeded")),
    Field(RUN, ".status.conditions", "the Succeeded condition with Shipwright's reasons; "
          "frozen once `completionTime` is set (our CEL rule)",
          (_BR + "test_api_server_rejects_spec_changes_and_status_flips",
           "tests/unit/buildrun/test_status_writes.py::"
           "test_with_condition_keeps_other_conditions_in_place")),
    Field(RUN, ".status.completionTime", "the TaskRun's (PipelineRun's) own completionTime "
          "when the run decided the outcome, as Shipwright copies it (the CompletionTime "
          "column, the duration metrics and the retention TTL count from when the build "
          "ended, not from when the controller saw it); when the controller decided (a user "
          "error, a cancel before start, a missing run, a backstop, a spent retry budget), "
          "when it did; after it nothing in the status changes",
          (_BR + "test_api_server_rejects_spec_changes_and_status_flips",
           _BR + "test_user_errors_are_terminal_at_once",
           "tests/unit/buildrun/test_actions.py::"
           "test_row_12_a_finished_taskruns_outcome_is_written_once")),
    Field(RUN, ".status.failureDetails", "the failed step's pod and container, with the "
          "reason and message the strategy wrote", (
              _LC + "test_failure_details_come_from_the_strategy_results",
              _TK + "test_failing_step_is_failed_with_failure_details")),
    Field(RUN, ".status.output", "digest, size and vulnerabilities from the TaskRun's results",
          (_ST + "test_output_and_source_from_results",
           _ST + "test_vulnerabilities_found_when_image_processing_exits_22")),
    Field(RUN, ".status.source", "the Git commit, author and branch or the bundle's digest, and "
          "the source timestamp, from the TaskRun's results",
          (_ST + "test_output_and_source_from_results", _ST + "test_bundle_source_and_bad_numbers",
           "tests/oracle/test_status_parity.py::test_status_from_results_equals_shipwrights")),
]


def covering(fields: Iterable[Field], kind: str, path: str) -> Field | None:
    """The row that says what happens to `path` of a `kind`: the longest that covers it; for
    a BuildRun's embedded spec, a BuildRun row below EMBEDDED, else the Build's row for the
    same field, else the EMBEDDED row itself."""
    rows = list(fields)

    def longest(k: str, p: str) -> Field | None:
        found = [f for f in rows if k in f.kinds and f.covers(p)]
        return max(found, key=lambda f: len(f.path)) if found else None

    own = longest(kind, path)
    if kind == "BuildRun" and (path == EMBEDDED or path.startswith(EMBEDDED + ".")):
        if own is not None and len(own.path) > len(EMBEDDED):
            return own
        return longest("Build", ".spec" + path[len(EMBEDDED):]) or own
    return own


def _test_name(node_id: str) -> str:
    return node_id.split("::")[-1]


def markdown_table() -> str:
    """FIELDS as docs/shipwright-api.md's table."""
    lines = ["| kinds | field | what we do with it | shown by |",
             "|-------|-------|--------------------|----------|"]
    for f in FIELDS:
        kinds = ("all four" if f.kinds == ALL else "strategies" if f.kinds == STRATEGIES
                 else ", ".join(f.kinds))
        shown = ", ".join(["oracle"] * f.oracle + [f"`{_test_name(t)}`" for t in f.tests])
        lines.append(f"| {kinds} | `{f.path}` | {f.does} | {shown} |")
    return "\n".join(lines) + "\n"
