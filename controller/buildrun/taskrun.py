"""The Tekton TaskRun that executes a BuildRun: what Shipwright v0.20 generates.

Shipwright's pkg/reconciler/buildrun/resources is the reference, phase by phase:
the base task spec (system parameters, the `source` workspace, results), the
source step (Git, OCI bundle or the local-source waiter), the strategy's
parameters and steps (env, resources and their `stepResources` overrides,
securityContext, volumeMounts), the volumes, managed push (`image-processing`),
the pod template, labels and annotations with the strategy's security context,
the timeout and the parameter values. tests/oracle/ compares the result with
Shipwright's own generator on every official sample and on each field alone;
README "The TaskRun" lists where we differ on purpose.

Pure: no I/O. What Shipwright's generator refuses raises a UserError with its reason.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import posixpath
import re
from typing import Any

from controller.buildrun.config import ShipwrightConfig
from controller.buildrun.params import apply_param_values, references_param
from controller.buildrun.reasons import (
    TASK_RUN_GENERATION_FAILED,
    UNDEFINED_STEP_RESOURCE,
    UNDEFINED_VOLUME,
    VOLUME_NOT_OVERRIDABLE,
)
from controller.buildrun.spec import go_duration, parse_duration
from controller.buildrun.status import (
    RESULT_ERROR_MESSAGE,
    RESULT_ERROR_REASON,
    RESULT_IMAGE_DIGEST,
    RESULT_IMAGE_SIZE,
    RESULT_IMAGE_VULNERABILITIES,
    RESULT_SOURCE_BRANCH_NAME,
    RESULT_SOURCE_COMMIT_AUTHOR,
    RESULT_SOURCE_COMMIT_SHA,
    RESULT_SOURCE_IMAGE_DIGEST,
    RESULT_SOURCE_TIMESTAMP,
    STEP_IMAGE_PROCESSING,
)
from controller.runtime.errors import UserError
from controller.shipwright.labels import (
    LABEL_BUILD,
    LABEL_BUILD_GENERATION,
    LABEL_BUILDRUN,
    LABEL_BUILDRUN_GENERATION,
    LABEL_BUILDRUN_UID,
)

JSON = dict[str, Any]

PARAM_OUTPUT_IMAGE = "shp-output-image"
PARAM_OUTPUT_INSECURE = "shp-output-insecure"
PARAM_SOURCE_ROOT = "shp-source-root"
PARAM_SOURCE_CONTEXT = "shp-source-context"
PARAM_OUTPUT_DIRECTORY = "shp-output-directory"
SOURCE_ROOT = "/workspace/source"
OUTPUT_DIRECTORY = "/workspace/output-image"
WORKSPACE_SOURCE = "source"
STEP_SOURCE = "source-default"
STEP_LOCAL_SOURCE = "source-local"

ANNOTATION_SC_GROUP = "buildrun.shipwright.io/security-context-group"
ANNOTATION_SC_PASSWD = "buildrun.shipwright.io/security-context-passwd"
VOLUME_SECURITY_CONTEXT = "shp-security-context"

# Annotations of the strategy that are Shipwright's own bookkeeping, never copied.
_UNPROPAGATED_PREFIXES = (
    "clusterbuildstrategy.shipwright.io/",
    "buildstrategy.shipwright.io/",
    "build.shipwright.io/",
    "buildrun.shipwright.io/",
)
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

_LABEL_MAX = 63
_HASH_LENGTH = 8
_DNS1123_FORBIDDEN = re.compile(r"[^a-zA-Z0-9-]+")
_SECRET_MODE = 0o444


def taskrun_name(buildrun: JSON) -> str:
    """The TaskRun's name: derived from the BuildRun alone, so a restarted controller finds the
    TaskRun it already created and a racing create gets AlreadyExists.

    The uid hash keeps names apart when truncation makes two BuildRun names alike, and
    when a BuildRun is recreated under the same name while its old TaskRun is still
    being garbage-collected. The result is a DNS-1123 label (Tekton names the pod
    after it).
    """
    metadata = buildrun.get("metadata") or {}
    digest = hashlib.sha256((metadata.get("uid") or "").encode()).hexdigest()[:_HASH_LENGTH]
    prefix = re.sub(r"[^a-z0-9-]", "-", (metadata.get("name") or "").lower())
    prefix = prefix[: _LABEL_MAX - _HASH_LENGTH - 1].strip("-")
    return f"{prefix}-{digest}" if prefix else digest


def generate_taskrun(
    buildrun: JSON,
    build: JSON,
    strategy: JSON,
    service_account: str,
    config: ShipwrightConfig,
) -> JSON:
    """The tekton.dev/v1 TaskRun Shipwright would create for `buildrun`.

    `build` is the Build object (for a BuildRun embedding spec.build.spec, an object
    with that spec and no metadata); `strategy` the BuildStrategy or
    ClusterBuildStrategy; `service_account` the name the pod runs as. Parameter values
    are expected to have passed params.validate_params already.
    """
    build_spec = build.get("spec") or {}
    run_spec = buildrun.get("spec") or {}
    strategy_spec = strategy.get("spec") or {}
    task_spec: JSON = {
        "params": [
            _param_spec(PARAM_OUTPUT_IMAGE, "The URL of the image that the build produces"),
            _param_spec(PARAM_OUTPUT_INSECURE, "A flag indicating that the output image is "
                        "on an insecure container registry"),
            _param_spec(PARAM_SOURCE_CONTEXT, "The context directory inside the source "
                        "directory"),
            _param_spec(PARAM_SOURCE_ROOT, "The source directory"),
        ],
        "workspaces": [{"name": WORKSPACE_SOURCE}],
        "results": [
            {"name": RESULT_IMAGE_DIGEST, "description": "The digest of the image"},
            {"name": RESULT_IMAGE_SIZE, "description": "The compressed size of the image"},
            {"name": RESULT_IMAGE_VULNERABILITIES, "description": "List of vulnerabilities"},
            {"name": RESULT_ERROR_MESSAGE,
             "description": "The error description of the task run"},
            {"name": RESULT_ERROR_REASON, "description": "The error reason of the task run"},
        ],
        "steps": [],
        "volumes": [],
    }
    taskrun: JSON = {
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": _metadata(buildrun, build),
        "spec": {
            "serviceAccountName": service_account,
            "taskSpec": task_spec,
            "workspaces": [{"name": WORKSPACE_SOURCE, "emptyDir": {}}],
            "params": [],
        },
    }

    _add_source(task_spec, build_spec, run_spec, config)
    _add_strategy(task_spec, build, buildrun, strategy)
    has_output_directory = _setup_output_directory(task_spec, taskrun["spec"]["params"])
    _add_image_processing(task_spec, buildrun, build_spec, config, has_output_directory)
    _apply_pod_template(taskrun["spec"], build_spec, run_spec)
    _apply_annotations_and_labels(taskrun, strategy)
    timeout = run_spec.get("timeout") or build_spec.get("timeout")
    if timeout:
        taskrun["spec"]["timeout"] = timeout
    _apply_params(taskrun, build_spec, run_spec, strategy_spec)

    if not task_spec["volumes"]:
        del task_spec["volumes"]
    if not taskrun["spec"]["params"]:
        del taskrun["spec"]["params"]
    return taskrun


# --- metadata


def _metadata(buildrun: JSON, build: JSON) -> JSON:
    meta = buildrun.get("metadata") or {}
    name = meta.get("name") or ""
    uid = meta.get("uid") or ""
    labels = {
        LABEL_BUILDRUN: _label_value(name),
        LABEL_BUILDRUN_GENERATION: str(meta.get("generation") or 0),
        # Not in Shipwright: the exact label to select a BuildRun's TaskRun by.
        LABEL_BUILDRUN_UID: _label_value(uid),
    }
    build_meta = build.get("metadata") or {}
    if build_meta.get("name"):
        labels[LABEL_BUILD] = _label_value(build_meta["name"])
        labels[LABEL_BUILD_GENERATION] = str(build_meta.get("generation") or 0)
    return {
        "name": taskrun_name(buildrun),
        "namespace": meta.get("namespace") or "",
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "shipwright.io/v1beta1",
                "kind": "BuildRun",
                "name": name,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def _label_value(text: str) -> str:
    """`text` made a valid label value: allowed characters only, at most 63, alphanumeric
    at both ends."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:_LABEL_MAX].strip("-_.")


def _param_spec(name: str, description: str) -> JSON:
    return {"name": name, "description": description, "type": "string"}


# --- sources


def _add_source(task_spec: JSON, build_spec: JSON, run_spec: JSON,
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


def _template_step(name: str, template: JSON) -> JSON:
    step: JSON = {"name": name}
    for field in ("image", "imagePullPolicy", "command", "args", "env", "securityContext",
                  "workingDir"):
        if template.get(field):
            step[field] = copy.deepcopy(template[field])
    if template.get("resources"):
        step["computeResources"] = copy.deepcopy(template["resources"])
    return step


def _add_git_step(task_spec: JSON, git: JSON, config: ShipwrightConfig) -> None:
    task_spec["results"] += [
        {"name": RESULT_SOURCE_COMMIT_SHA, "description": "The commit SHA of the cloned source."},
        {"name": RESULT_SOURCE_COMMIT_AUTHOR,
         "description": "The author of the last commit of the cloned source."},
        {"name": RESULT_SOURCE_BRANCH_NAME,
         "description": "The name of the branch used of the cloned source."},
    ]
    step = _template_step(STEP_SOURCE, config.git)
    step["args"] = [
        "--url", git.get("url") or "",
        "--target", f"$(params.{PARAM_SOURCE_ROOT})",
        "--result-file-commit-sha", _result_path(RESULT_SOURCE_COMMIT_SHA),
        "--result-file-commit-author", _result_path(RESULT_SOURCE_COMMIT_AUTHOR),
        "--result-file-branch-name", _result_path(RESULT_SOURCE_BRANCH_NAME),
        "--result-file-error-message", _result_path(RESULT_ERROR_MESSAGE),
        "--result-file-error-reason", _result_path(RESULT_ERROR_REASON),
        "--result-file-source-timestamp", _result_path(RESULT_SOURCE_TIMESTAMP),
    ]
    if git.get("revision") is not None:
        step["args"] += ["--revision", str(git["revision"])]
    depth = git.get("depth")
    if isinstance(depth, int) and depth >= 0:
        step["args"] += ["--depth", str(depth)]
    if config.git_rewrite_rule:
        step["args"].append("--git-url-rewrite")
    if git.get("cloneSecret") is not None:
        _mount_secret(task_spec, step, git["cloneSecret"], "/workspace/shp-source-secret")
    _setup_home_and_tmp(task_spec, step)
    task_spec["steps"].append(step)


def _add_bundle_step(task_spec: JSON, oci: JSON, config: ShipwrightConfig) -> None:
    task_spec["results"].append(
        {"name": RESULT_SOURCE_IMAGE_DIGEST, "description": "The digest of the bundle image."}
    )
    step = _template_step(STEP_SOURCE, config.bundle)
    step["args"] = [
        "--image", oci.get("image") or "",
        "--target", f"$(params.{PARAM_SOURCE_ROOT})",
        "--result-file-image-digest", _result_path(RESULT_SOURCE_IMAGE_DIGEST),
        "--result-file-source-timestamp", _result_path(RESULT_SOURCE_TIMESTAMP),
    ]
    if oci.get("pullSecret") is not None:
        _mount_secret(task_spec, step, oci["pullSecret"], "/workspace/shp-pull-secret")
    if oci.get("prune") == "AfterPull":
        step["args"].append("--prune")
    _setup_home_and_tmp(task_spec, step)
    task_spec["steps"].append(step)


def _add_waiter_step(task_spec: JSON, local: JSON, config: ShipwrightConfig) -> None:
    # The upload targets this container by name, so the name is fixed.
    step = _template_step(STEP_LOCAL_SOURCE, config.waiter)
    if local.get("timeout"):
        try:
            seconds = parse_duration(str(local["timeout"]))
        except ValueError as exc:
            raise UserError(TASK_RUN_GENERATION_FAILED, f"source.local.timeout: {exc}") from None
        step.setdefault("args", []).append(f"--timeout={go_duration(seconds)}")
    _setup_home_and_tmp(task_spec, step)
    task_spec["steps"].append(step)


def _result_path(result: str) -> str:
    return f"$(results.{result}.path)"


def secret_volume_name(secret: str) -> str:
    """The volume a Secret is mounted from: `shp-<secret>` made a DNS-1123 label."""
    return _DNS1123_FORBIDDEN.sub("-", f"shp-{secret}")[:_LABEL_MAX].removesuffix("-")


def _mount_secret(task_spec: JSON, step: JSON, secret: str, path: str) -> None:
    name = secret_volume_name(secret)
    if not any(v.get("secret") and v.get("name") == name for v in task_spec["volumes"]):
        task_spec["volumes"].append(
            {"name": name, "secret": {"secretName": secret, "defaultMode": _SECRET_MODE}}
        )
    step.setdefault("volumeMounts", []).append({"name": name, "mountPath": path,
                                                "readOnly": True})
    step["args"] += ["--secret-path", path]


def _step_volume_name(prefix: str, step_name: str) -> str:
    name = _DNS1123_FORBIDDEN.sub("-", prefix + step_name).lower().strip("-")
    digest = hashlib.sha256(step_name.encode()).hexdigest()[:_HASH_LENGTH]
    return f"{name[: _LABEL_MAX - _HASH_LENGTH - 1]}-{digest}"


def _setup_home_and_tmp(task_spec: JSON, step: JSON) -> None:
    """Writable /shp-tmp and home emptyDirs for a helper step (read-only root)."""
    for prefix, path, variable in (("shp-tmp-", "/shp-tmp", "TMPDIR"),
                                   ("shp-home-", "/shp-writable-home", "HOME")):
        name = _step_volume_name(prefix, step["name"])
        if not any(v.get("name") == name for v in task_spec["volumes"]):
            task_spec["volumes"].append({"name": name, "emptyDir": {}})
        mounts = step.setdefault("volumeMounts", [])
        if not any(m.get("name") == name for m in mounts):
            mounts.append({"name": name, "mountPath": path})
        env = step.setdefault("env", [])
        for var in env:
            if var.get("name") == variable:
                var["value"] = path
                break
        else:
            env.append({"name": variable, "value": path})


# --- the strategy


def _merge_env(new: list[JSON], into: list[JSON], overwrite: bool) -> tuple[list[JSON], list[str]]:
    """Shipwright's env.MergeEnvVars: `new` into `into`; a name in both replaces (overwrite)
    or is an error."""
    merged = copy.deepcopy(into)
    index = {var.get("name"): i for i, var in enumerate(merged)}
    errors = []
    for var in new:
        name = var.get("name")
        if name in index and overwrite:
            merged[index[name]] = copy.deepcopy(var)
        elif name in index:
            errors.append(f"environment variable {_go_quote(name)} already exists")
        else:
            merged.append(copy.deepcopy(var))
    return merged, errors


def _add_strategy(task_spec: JSON, build: JSON, buildrun: JSON, strategy: JSON) -> None:
    build_spec = build.get("spec") or {}
    run_spec = buildrun.get("spec") or {}
    strategy_spec = strategy.get("spec") or {}
    for param in strategy_spec.get("parameters") or []:
        spec: JSON = {"name": param.get("name") or "", "description":
                      param.get("description") or ""}
        if param.get("type") == "array":
            spec["type"] = "array"
            if param.get("defaults") is not None:
                spec["default"] = list(param["defaults"])
        else:
            spec["type"] = "string"
            if param.get("default") is not None:
                spec["default"] = param["default"]
        task_spec["params"].append(spec)

    combined, _ = _merge_env(run_spec.get("env") or [], build_spec.get("env") or [], True)
    overrides: dict[str, JSON] = {}
    embedded = (run_spec.get("build") or {}).get("spec") or {}
    step_names = {step.get("name") for step in strategy_spec.get("steps") or []}
    for entries, field in (
        ((build_spec.get("strategy") or {}).get("stepResources"), "strategy.stepResources"),
        ((embedded.get("strategy") or {}).get("stepResources"),
         "spec.build.spec.strategy.stepResources"),
        (run_spec.get("stepResources"), "spec.stepResources"),
    ):
        for entry in entries or []:
            name = entry.get("name") or ""
            if name not in step_names:  # Shipwright's validate.BuildRunStepResources
                raise UserError(UNDEFINED_STEP_RESOURCE, f"{field} references step "
                                f"{_go_quote(name)} which does not exist in the build strategy")
            overrides[name] = entry.get("resources") or {}

    declared = {v.get("name") for v in strategy_spec.get("volumes") or []}
    mounts: dict[str, bool] = {}
    strategy_name = (build_spec.get("strategy") or {}).get("name") or ""
    for container in strategy_spec.get("steps") or []:
        env, errors = _merge_env(combined, container.get("env") or [], False)
        if errors:
            raise UserError(
                TASK_RUN_GENERATION_FAILED,
                "error(s) occurred merging environment variables into BuildStrategy "
                f"{_go_quote(strategy_name)} steps: {_aggregate(errors)}",
            )
        step: JSON = {"name": container.get("name") or ""}
        for field in ("image", "imagePullPolicy", "volumeMounts", "command", "args",
                      "securityContext", "workingDir"):
            if container.get(field):
                step[field] = copy.deepcopy(container[field])
        resources = overrides.get(step["name"], container.get("resources"))
        if resources:
            step["computeResources"] = copy.deepcopy(resources)
        if env:
            step["env"] = env
        task_spec["steps"].append(step)
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in declared:
                raise UserError(
                    TASK_RUN_GENERATION_FAILED,
                    f"volume for the Volume Mount {_go_quote(mount.get('name'))} is not found",
                )
            mounts[mount["name"]] = bool(mount.get("readOnly"))

    task_spec["volumes"] += _task_volumes(
        mounts, strategy_spec.get("volumes") or [], build_spec.get("volumes") or [],
        run_spec.get("volumes") or []
    )


def _task_volumes(mounts: dict[str, bool], strategy_volumes: list[JSON],
                  build_volumes: list[JSON], run_volumes: list[JSON]) -> list[JSON]:
    """Strategy volumes with the Build's, then the BuildRun's, overrides (Shipwright's
    volumes.TaskSpecVolumes); only volumes the strategy marks overridable may be."""
    merged: dict[str, JSON] = {}
    for volume in strategy_volumes:
        if volume.get("name") in merged and (build_volumes or run_volumes):
            raise UserError(TASK_RUN_GENERATION_FAILED, "BuildStrategy Volume "
                            f"{_go_quote(volume.get('name'))} is listed more than once")
        merged.setdefault(volume.get("name") or "", copy.deepcopy(volume))
    volumes = list(merged.values()) if (build_volumes or run_volumes) else [
        copy.deepcopy(v) for v in strategy_volumes]
    for overrides, who in ((build_volumes, "Build"), (run_volumes, "BuildRun")):
        by_name = {v.get("name"): v for v in volumes}
        for override in overrides:
            name = override.get("name") or ""
            original = by_name.get(name)
            if original is None:
                raise UserError(UNDEFINED_VOLUME, f"{who} volume {_go_quote(name)} is not "
                                "defined in the strategy")
            if not original.get("overridable"):
                raise UserError(VOLUME_NOT_OVERRIDABLE, f"{who} volume {_go_quote(name)} is "
                                "not overridable in the strategy")
            source = {k: v for k, v in override.items() if k not in ("name", "description")}
            keep: JSON = {k: original[k] for k in ("name", "description", "overridable")
                          if k in original}
            original.clear()
            original.update(keep)
            original.update(copy.deepcopy(source))
    result = []
    for volume in volumes:
        read_only_kind = any(volume.get(k) is not None
                             for k in ("configMap", "secret", "downwardAPI", "projected"))
        name = volume.get("name") or ""
        if name in mounts and not mounts[name] and read_only_kind:
            raise UserError(TASK_RUN_GENERATION_FAILED,
                            f"volume mount {_go_quote(name)} must be read only")
        result.append({k: v for k, v in volume.items() if k not in ("description",
                                                                     "overridable")})
    return result


# --- managed push


def _setup_output_directory(task_spec: JSON, params: list[JSON]) -> bool:
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


def _merge_maps(first: JSON | None, second: JSON | None) -> JSON:
    return {**(first or {}), **(second or {})}


def image_processing_args(build_output: JSON, run_output: JSON, config: ShipwrightConfig,
                          creation_timestamp: str | None, has_output_directory: bool,
                          has_source_timestamp: bool) -> list[str]:
    """The image-processing step's arguments, empty when it has nothing to do."""
    args: list[str] = []
    if has_output_directory:
        args += ["--push", f"$(params.{PARAM_OUTPUT_DIRECTORY})"]
    for flag, field in (("--annotation", "annotations"), ("--label", "labels")):
        for key, value in sorted(_merge_maps(build_output.get(field),
                                             run_output.get(field)).items()):
            args += [flag, f"{key}={value}"]
    scan = run_output.get("vulnerabilityScan") or build_output.get("vulnerabilityScan")
    if scan is not None and scan.get("enabled"):
        args += ["--vuln-settings", _vuln_settings(scan)]
        if config.vulnerability_count_limit > 0:
            args += ["--vuln-count-limit", str(config.vulnerability_count_limit)]
    timestamp = run_output.get("timestamp") or build_output.get("timestamp")
    if timestamp is not None:
        if timestamp == "Zero":
            args += ["--image-timestamp", "0"]
        elif timestamp == "SourceTimestamp":
            if not has_source_timestamp:
                raise UserError(TASK_RUN_GENERATION_FAILED, "cannot use SourceTimestamp "
                                "setting, because there is no source timestamp available for "
                                "this source")
            args += ["--image-timestamp-file", _result_path(RESULT_SOURCE_TIMESTAMP)]
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
            "--result-file-image-digest", _result_path(RESULT_IMAGE_DIGEST),
            "--result-file-image-size", _result_path(RESULT_IMAGE_SIZE),
            "--result-file-image-vulnerabilities", _result_path(RESULT_IMAGE_VULNERABILITIES),
        ]
    return args


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


def _unix(timestamp: str | None) -> int:
    if not timestamp:
        return int(datetime.datetime(1, 1, 1, tzinfo=datetime.UTC).timestamp())
    moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return int(moment.timestamp())


def _add_image_processing(task_spec: JSON, buildrun: JSON, build_spec: JSON,
                          config: ShipwrightConfig, has_output_directory: bool) -> None:
    build_output = build_spec.get("output") or {}
    run_output = (buildrun.get("spec") or {}).get("output") or {}
    has_source_timestamp = any(r["name"] == RESULT_SOURCE_TIMESTAMP
                               for r in task_spec["results"])
    args = image_processing_args(build_output, run_output, config,
                                 (buildrun.get("metadata") or {}).get("creationTimestamp"),
                                 has_output_directory, has_source_timestamp)
    if not args:
        return
    step = _template_step(STEP_IMAGE_PROCESSING, config.image_processing)
    step["args"] = args
    mounts = step.setdefault("volumeMounts", [])
    if has_output_directory:
        mounts.append({"name": PARAM_OUTPUT_DIRECTORY, "mountPath": OUTPUT_DIRECTORY,
                       "readOnly": True})
    # Only the Build's pushSecret: Shipwright ignores a BuildRun's spec.output.pushSecret here.
    if build_output.get("pushSecret") is not None:
        _mount_secret(task_spec, step, build_output["pushSecret"], "/workspace/shp-push-secret")
    task_spec["volumes"].append({"name": "shp-trivy-cache-data", "emptyDir": {}})
    mounts.append({"name": "shp-trivy-cache-data", "mountPath": "/trivy-cache-data"})
    step.setdefault("env", []).append({"name": "TRIVY_CACHE_DIR", "value": "/trivy-cache-data"})
    _setup_home_and_tmp(task_spec, step)
    task_spec["steps"].append(step)


# --- pod template, labels, annotations, security context


def _apply_pod_template(spec: JSON, build_spec: JSON, run_spec: JSON) -> None:
    template: JSON = {}
    node_selector = _merge_maps(build_spec.get("nodeSelector"), run_spec.get("nodeSelector"))
    if node_selector:
        template["nodeSelector"] = node_selector
    tolerations = [copy.deepcopy(t) for t in run_spec.get("tolerations") or []]
    for toleration in build_spec.get("tolerations") or []:
        if not any(t.get("key") == toleration.get("key") for t in tolerations):
            tolerations.append(copy.deepcopy(toleration))
    for toleration in tolerations:
        if not toleration.get("effect"):
            toleration["effect"] = "NoSchedule"
    if tolerations:
        template["tolerations"] = tolerations
    for field in ("runtimeClassName", "schedulerName"):
        value = run_spec.get(field)
        if value is None:
            value = build_spec.get(field)
        if value is not None:
            template[field] = value
    if template:
        spec["podTemplate"] = template


def _apply_annotations_and_labels(taskrun: JSON, strategy: JSON) -> None:
    meta = strategy.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != _LAST_APPLIED and not k.startswith(_UNPROPAGATED_PREFIXES)}
    strategy_spec = strategy.get("spec") or {}
    security = strategy_spec.get("securityContext")
    if security is not None:
        _apply_security_context(taskrun["spec"]["taskSpec"], annotations,
                                strategy_spec.get("steps") or [], security)
    if annotations:
        taskrun["metadata"]["annotations"] = annotations
    domain = ("clusterbuildstrategy.shipwright.io" if strategy.get("kind") ==
              "ClusterBuildStrategy" else "buildstrategy.shipwright.io")
    taskrun["metadata"]["labels"][f"{domain}/name"] = _label_value(meta.get("name") or "")
    taskrun["metadata"]["labels"][f"{domain}/generation"] = str(meta.get("generation") or 0)


def _apply_security_context(task_spec: JSON, annotations: JSON, strategy_steps: list[JSON],
                            security: JSON) -> None:
    """The strategy's runAsUser/runAsGroup on every step: strategy steps keep their own;
    Shipwright's steps get them forced, with /etc/passwd and /etc/group naming that user
    (from the pod's annotations through a downward API volume)."""
    user = security.get("runAsUser", 0)
    group = security.get("runAsGroup", 0)
    names = {s.get("name") for s in strategy_steps}
    added = False
    for step in task_spec["steps"]:
        context = step.setdefault("securityContext", {})
        if step["name"] in names:
            context.setdefault("runAsUser", user)
            context.setdefault("runAsGroup", group)
            continue
        context["runAsUser"] = user
        context["runAsGroup"] = group
        if not added:
            annotations[ANNOTATION_SC_GROUP] = f"shp:x:{group}"
            annotations[ANNOTATION_SC_PASSWD] = (
                f"shp:x:{user}:{group}:shp:/shared-home:/sbin/nologin"
            )
            task_spec["volumes"].append({
                "name": VOLUME_SECURITY_CONTEXT,
                "downwardAPI": {
                    "defaultMode": _SECRET_MODE,
                    "items": [
                        {"path": "group", "fieldRef": {
                            "fieldPath": f"metadata.annotations['{ANNOTATION_SC_GROUP}']"}},
                        {"path": "passwd", "fieldRef": {
                            "fieldPath": f"metadata.annotations['{ANNOTATION_SC_PASSWD}']"}},
                    ],
                },
            })
            added = True
        step.setdefault("volumeMounts", []).extend([
            {"name": VOLUME_SECURITY_CONTEXT, "mountPath": "/etc/group", "subPath": "group"},
            {"name": VOLUME_SECURITY_CONTEXT, "mountPath": "/etc/passwd", "subPath": "passwd"},
        ])


# --- parameters


def _apply_params(taskrun: JSON, build_spec: JSON, run_spec: JSON, strategy_spec: JSON) -> None:
    build_output = build_spec.get("output") or {}
    run_output = run_spec.get("output")
    # A BuildRun's output, once set, supplies the image even if it leaves it empty (as
    # Shipwright: a non-nil pointer); insecure falls back field by field.
    image = (run_output if run_output is not None else build_output).get("image")
    insecure = (run_output or {}).get("insecure")
    if insecure is None:
        insecure = build_output.get("insecure")
    context = (build_spec.get("source") or {}).get("contextDir")
    context_path = SOURCE_ROOT if context is None else _go_path_join(SOURCE_ROOT, context)
    taskrun["spec"]["params"] += [
        {"name": PARAM_OUTPUT_IMAGE, "value": image or ""},
        {"name": PARAM_OUTPUT_INSECURE, "value": "true" if insecure else "false"},
        {"name": PARAM_SOURCE_ROOT, "value": SOURCE_ROOT},
        {"name": PARAM_SOURCE_CONTEXT, "value": context_path},
    ]
    apply_param_values(taskrun, build_spec.get("paramValues") or [],
                       run_spec.get("paramValues") or [],
                       strategy_spec.get("parameters") or [])


def _go_path_join(*parts: str) -> str:
    """Go's path.Join: joined with '/', cleaned."""
    joined = "/".join(p for p in parts if p)
    if not joined:
        return ""
    cleaned = posixpath.normpath(joined)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def _go_quote(text: object) -> str:
    """Go's %q for the plain strings in these messages."""
    return json.dumps(str(text), ensure_ascii=False)


def _aggregate(errors: list[str]) -> str:
    """k8s.io/apimachinery's errors.NewAggregate(...).Error()."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
