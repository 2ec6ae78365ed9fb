"""Managed push in the generated TaskRun, as Shipwright's resources/image_processing.go:
the `image-processing` step that pushes what the strategy left in the output
directory, mutates labels and annotations, and runs the vulnerability scan. Pure."""

from __future__ import annotations

import datetime
import json
import re

from controller.buildrun.reasons import TASK_RUN_GENERATION_FAILED
from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.resources.params import references_param
from controller.buildrun.resources.results import (
    RESULT_IMAGE_DIGEST,
    RESULT_IMAGE_SIZE,
    RESULT_IMAGE_VULNERABILITIES,
    RESULT_SOURCE_TIMESTAMP,
)
from controller.buildrun.resources.steps import (
    JSON,
    OUTPUT_DIRECTORY,
    PARAM_OUTPUT_DIRECTORY,
    PARAM_OUTPUT_IMAGE,
    PARAM_OUTPUT_INSECURE,
    merge_maps,
    mount_secret,
    result_path,
    setup_home_and_tmp,
    template_step,
)
from controller.runtime.errors import UserError
from controller.runtime.timestamps import parse_time

STEP_IMAGE_PROCESSING = "image-processing"
# The step exits with this code when it found more vulnerabilities than allowed
# (--vuln-settings failOnFinding): the BuildRun then ends VulnerabilitiesFound.
EXIT_VULNERABILITIES_FOUND = 22


def setup_output_directory(task_spec: JSON, params: list[JSON]) -> bool:
    """The TaskRun's output directory (Shipwright's SetupOutputDirectory): when a step
    references `shp-output-directory`, an emptyDir mounted there on those steps, the
    parameter declared and valued in `params`. Whether it was."""
    added = False
    for step in task_spec["steps"]:
        if not references_param(step, PARAM_OUTPUT_DIRECTORY):
            continue
        if not added:
            added = True
            task_spec["volumes"].append({"name": PARAM_OUTPUT_DIRECTORY, "emptyDir": {}})
            task_spec["params"].append({"name": PARAM_OUTPUT_DIRECTORY, "type": "string"})
            params.append({"name": PARAM_OUTPUT_DIRECTORY, "value": OUTPUT_DIRECTORY})
        step.setdefault("volumeMounts", []).append(
            {"name": PARAM_OUTPUT_DIRECTORY, "mountPath": OUTPUT_DIRECTORY}
        )
    return added


def image_processing_args(build_output: JSON, run_output: JSON, config: ShipwrightConfig,
                          creation_timestamp: str | None, has_output_directory: bool,
                          has_source_timestamp: bool) -> list[str]:
    """The image-processing step's arguments, empty when it has nothing to do."""
    args: list[str] = []
    if has_output_directory:
        args += ["--push", f"$(params.{PARAM_OUTPUT_DIRECTORY})"]
    for flag, field in (("--annotation", "annotations"), ("--label", "labels")):
        for key, value in sorted(merge_maps(build_output.get(field),
                                             run_output.get(field)).items()):
            args += [flag, f"{key}={value}"]
    scan = run_output.get("vulnerabilityScan") or build_output.get("vulnerabilityScan")
    if scan is not None and scan.get("enabled"):
        args += ["--vuln-settings", _vuln_settings(scan)]
        if config.vulnerability_count_limit > 0:
            args += ["--vuln-count-limit", str(config.vulnerability_count_limit)]
    timestamp = image_timestamp(build_output, run_output)
    if timestamp is not None:
        if timestamp == "Zero":
            args += ["--image-timestamp", "0"]
        elif timestamp == "SourceTimestamp":
            if not has_source_timestamp:
                raise UserError(TASK_RUN_GENERATION_FAILED, "cannot use SourceTimestamp "
                                "setting, because there is no source timestamp available for "
                                "this source")
            args += ["--image-timestamp-file", result_path(RESULT_SOURCE_TIMESTAMP)]
        elif timestamp == "BuildTimestamp":
            args += ["--image-timestamp", str(_unix(creation_timestamp))]
        elif re.fullmatch(r"[+-]?[0-9]+", str(timestamp)) and -2**63 <= int(timestamp) < 2**63:
            args += ["--image-timestamp", str(timestamp)]
        else:
            raise UserError(TASK_RUN_GENERATION_FAILED, f"cannot parse output timestamp "
                            f"{timestamp} as a number, must be Zero, SourceTimestamp, "
                            "BuildTimestamp, or a an integer")
    if args:
        args += [
            "--image", f"$(params.{PARAM_OUTPUT_IMAGE})",
            f"--insecure=$(params.{PARAM_OUTPUT_INSECURE})",
            "--result-file-image-digest", result_path(RESULT_IMAGE_DIGEST),
            "--result-file-image-size", result_path(RESULT_IMAGE_SIZE),
            "--result-file-image-vulnerabilities", result_path(RESULT_IMAGE_VULNERABILITIES),
        ]
    return args


def image_timestamp(build_output: JSON, run_output: JSON) -> str | None:
    """The image's `timestamp` setting, the BuildRun's over the Build's."""
    timestamp: str | None = run_output.get("timestamp") or build_output.get("timestamp")
    return timestamp


def _vuln_settings(scan: JSON) -> str:
    """Shipwright's VulnerabilityScanOptions as Go's encoding/json writes it."""
    body: JSON = {"enabled": bool(scan.get("enabled"))}
    if scan.get("failOnFinding"):
        body["failOnFinding"] = True
    ignore = scan.get("ignore") or {}
    ignored: JSON = {}
    if ignore.get("id"):
        ignored["id"] = list(ignore["id"])
    if ignore.get("severity") is not None:
        ignored["severity"] = ignore["severity"]
    if ignore.get("unfixed") is not None:
        ignored["unfixed"] = ignore["unfixed"]
    if scan.get("ignore") is not None:
        body["ignore"] = ignored
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    # Go's encoding/json also escapes these (HTML safety, JavaScript line separators).
    for char in "<>&\u2028\u2029":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


# Go's zero time.Time: what Shipwright's CreationTimestamp.Unix() reads when none is set.
_GO_ZERO_TIME = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)


def _unix(timestamp: str | None) -> int:
    """The BuildRun's creationTimestamp in Unix seconds (BuildTimestamp)."""
    return int((parse_time(timestamp) or _GO_ZERO_TIME).timestamp())


def add_image_processing(task_spec: JSON, buildrun: JSON, build_spec: JSON,
                          config: ShipwrightConfig, has_output_directory: bool) -> None:
    """The TaskRun's managed push (Shipwright's SetupImageProcessing, after its
    SetupOutputDirectory): the step, if it has anything to do."""
    build_output = build_spec.get("output") or {}
    run_output = (buildrun.get("spec") or {}).get("output") or {}
    has_source_timestamp = any(r["name"] == RESULT_SOURCE_TIMESTAMP
                               for r in task_spec["results"])
    args = image_processing_args(build_output, run_output, config,
                                 (buildrun.get("metadata") or {}).get("creationTimestamp"),
                                 has_output_directory, has_source_timestamp)
    if args:
        add_image_processing_step(task_spec, args, config, build_output.get("pushSecret"),
                                  has_output_directory)


def add_image_processing_step(task_spec: JSON, args: list[str], config: ShipwrightConfig,
                              push_secret: str | None, mount_output_directory: bool) -> None:
    """The `image-processing` step with `args` (Shipwright's CreateImageProcessingStep):
    the output directory mounted read-only if `mount_output_directory`, the push secret,
    the Trivy cache, a writable home and /tmp."""
    step = template_step(STEP_IMAGE_PROCESSING, config.image_processing)
    step["args"] = args
    mounts = step.setdefault("volumeMounts", [])
    if mount_output_directory:
        mounts.append({"name": PARAM_OUTPUT_DIRECTORY, "mountPath": OUTPUT_DIRECTORY,
                       "readOnly": True})
    # Only the Build's pushSecret: Shipwright ignores a BuildRun's spec.output.pushSecret here.
    if push_secret is not None:
        mount_secret(task_spec, step, push_secret, "/workspace/shp-push-secret")
    task_spec["volumes"].append({"name": "shp-trivy-cache-data", "emptyDir": {}})
    mounts.append({"name": "shp-trivy-cache-data", "mountPath": "/trivy-cache-data"})
    step.setdefault("env", []).append({"name": "TRIVY_CACHE_DIR", "value": "/trivy-cache-data"})
    setup_home_and_tmp(task_spec, step)
    task_spec["steps"].append(step)
