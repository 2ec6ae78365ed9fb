"""The source step of the generated TaskRun, as Shipwright's resources/sources: a Git
clone, an OCI bundle pull, or the waiter a local upload (`shp build upload`) targets.
Pure."""

from __future__ import annotations

from controller.buildrun.reasons import TASK_RUN_GENERATION_FAILED
from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.resources.results import (
    RESULT_ERROR_MESSAGE,
    RESULT_ERROR_REASON,
    RESULT_SOURCE_BRANCH_NAME,
    RESULT_SOURCE_COMMIT_AUTHOR,
    RESULT_SOURCE_COMMIT_SHA,
    RESULT_SOURCE_IMAGE_DIGEST,
    RESULT_SOURCE_TIMESTAMP,
)
from controller.buildrun.resources.steps import (
    JSON,
    PARAM_SOURCE_ROOT,
    STEP_LOCAL_SOURCE,
    STEP_SOURCE,
    mount_secret,
    result_path,
    setup_home_and_tmp,
    template_step,
)
from controller.buildrun.spec import go_duration, parse_duration
from controller.runtime.errors import UserError


def add_source(task_spec: JSON, build_spec: JSON, run_spec: JSON,
                config: ShipwrightConfig) -> None:
    """The step that puts the source into the `source` workspace, as Shipwright's
    AmendTaskSpecWithSources: the BuildRun's Local source wins over the Build's."""
    run_source = run_spec.get("source") or {}
    source = build_spec.get("source") or {}
    local = None
    if run_source.get("type") == "Local":
        local = run_source.get("local")
    elif source.get("type") == "Local":
        local = source.get("local")
    if local is not None:
        _add_waiter_step(task_spec, local, config)
    elif source.get("type") == "OCI" and source.get("ociArtifact") is not None:
        task_spec["results"].append(_source_timestamp_result())
        _add_bundle_step(task_spec, source["ociArtifact"], config)
    elif source.get("type") == "Git" and source.get("git") is not None:
        task_spec["results"].append(_source_timestamp_result())
        _add_git_step(task_spec, source["git"], config)


def _source_timestamp_result() -> JSON:
    return {"name": RESULT_SOURCE_TIMESTAMP, "description": "The timestamp of the source."}


def _add_git_step(task_spec: JSON, git: JSON, config: ShipwrightConfig) -> None:
    task_spec["results"] += [
        {"name": RESULT_SOURCE_COMMIT_SHA, "description": "The commit SHA of the cloned source."},
        {"name": RESULT_SOURCE_COMMIT_AUTHOR,
         "description": "The author of the last commit of the cloned source."},
        {"name": RESULT_SOURCE_BRANCH_NAME,
         "description": "The name of the branch used of the cloned source."},
    ]
    step = template_step(STEP_SOURCE, config.git)
    step["args"] = [
        "--url", git.get("url") or "",
        "--target", f"$(params.{PARAM_SOURCE_ROOT})",
        "--result-file-commit-sha", result_path(RESULT_SOURCE_COMMIT_SHA),
        "--result-file-commit-author", result_path(RESULT_SOURCE_COMMIT_AUTHOR),
        "--result-file-branch-name", result_path(RESULT_SOURCE_BRANCH_NAME),
        "--result-file-error-message", result_path(RESULT_ERROR_MESSAGE),
        "--result-file-error-reason", result_path(RESULT_ERROR_REASON),
        "--result-file-source-timestamp", result_path(RESULT_SOURCE_TIMESTAMP),
    ]
    if git.get("revision") is not None:
        step["args"] += ["--revision", str(git["revision"])]
    depth = git.get("depth")
    if isinstance(depth, int) and depth >= 0:
        step["args"] += ["--depth", str(depth)]
    if config.git_rewrite_rule:
        step["args"].append("--git-url-rewrite")
    if git.get("cloneSecret") is not None:
        mount_secret(task_spec, step, git["cloneSecret"], "/workspace/shp-source-secret")
    setup_home_and_tmp(task_spec, step)
    task_spec["steps"].append(step)


def _add_bundle_step(task_spec: JSON, oci: JSON, config: ShipwrightConfig) -> None:
    task_spec["results"].append(
        {"name": RESULT_SOURCE_IMAGE_DIGEST, "description": "The digest of the bundle image."}
    )
    step = template_step(STEP_SOURCE, config.bundle)
    step["args"] = [
        "--image", oci.get("image") or "",
        "--target", f"$(params.{PARAM_SOURCE_ROOT})",
        "--result-file-image-digest", result_path(RESULT_SOURCE_IMAGE_DIGEST),
        "--result-file-source-timestamp", result_path(RESULT_SOURCE_TIMESTAMP),
    ]
    if oci.get("pullSecret") is not None:
        mount_secret(task_spec, step, oci["pullSecret"], "/workspace/shp-pull-secret")
    if oci.get("prune") == "AfterPull":
        step["args"].append("--prune")
    setup_home_and_tmp(task_spec, step)
    task_spec["steps"].append(step)


def _add_waiter_step(task_spec: JSON, local: JSON, config: ShipwrightConfig) -> None:
    # The upload targets this container by name, so the name is fixed.
    step = template_step(STEP_LOCAL_SOURCE, config.waiter)
    if local.get("timeout"):
        try:
            seconds = parse_duration(str(local["timeout"]))
        except ValueError as exc:
            raise UserError(TASK_RUN_GENERATION_FAILED, f"source.local.timeout: {exc}") from None
        step.setdefault("args", []).append(f"--timeout={go_duration(seconds)}")
    setup_home_and_tmp(task_spec, step)
    task_spec["steps"].append(step)
