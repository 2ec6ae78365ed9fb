"""The phases a TaskRun (taskrun.py) and a PipelineRun (pipelinerun.py) are both built
from, as Shipwright's generators share them (pkg/reconciler/buildrun/resources): the
run's name and metadata, the base task spec (system parameters, the `source` workspace,
results), the strategy's parameters and steps (env, resources and their `stepResources`
overrides, securityContext, volumeMounts) and the volumes, the pod template, labels and
annotations with the strategy's security context, the timeout and the system parameter
values. Each generator puts them together its own way: the TaskRun as steps of one
task, the PipelineRun as a pipeline task each.

Pure: no I/O. What Shipwright's generator refuses raises a UserError with its reason.
"""

from __future__ import annotations

import copy
import hashlib
import re

from controller.buildrun.reasons import (
    TASK_RUN_GENERATION_FAILED,
    UNDEFINED_STEP_RESOURCE,
    UNDEFINED_VOLUME,
    VOLUME_NOT_OVERRIDABLE,
)
from controller.buildrun.resources.results import (
    RESULT_ERROR_MESSAGE,
    RESULT_ERROR_REASON,
    RESULT_IMAGE_DIGEST,
    RESULT_IMAGE_SIZE,
    RESULT_IMAGE_VULNERABILITIES,
)
from controller.buildrun.resources.steps import (
    JSON,
    PARAM_OUTPUT_IMAGE,
    PARAM_OUTPUT_INSECURE,
    PARAM_SOURCE_CONTEXT,
    PARAM_SOURCE_ROOT,
    SECRET_MODE,
    SOURCE_ROOT,
    WORKSPACE_SOURCE,
    merge_maps,
)
from controller.runtime.errors import UserError
from controller.runtime.name_rules import (
    LABEL_VALUE_MAX,
    as_label_value,
    dns1123_subdomain_errors,
)
from controller.runtime.text import go_quote
from controller.shipwright.forbidden_env import (
    NO_FORBIDDEN_ENV,
    ForbiddenEnvNames,
    forbidden_message,
    forbidden_step_message,
)
from controller.shipwright.labels import (
    LABEL_BUILD,
    LABEL_BUILD_GENERATION,
    LABEL_BUILDRUN,
    LABEL_BUILDRUN_GENERATION,
    LABEL_BUILDRUN_UID,
)
from controller.shipwright.resources import CLUSTERBUILDSTRATEGIES

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


def run_name(buildrun: JSON, attempt: int = 1) -> str:
    """The TaskRun's or PipelineRun's name: what Shipwright's generateName makes of the
    BuildRun (its name and a dash, the API server adding five characters), with the five
    characters derived from the BuildRun's uid instead of drawn at random. A TaskRun and
    a PipelineRun are different kinds, so they never meet under it.

    Deterministic, so a restarted controller finds the run it already created and a
    racing create gets AlreadyExists; the uid keeps apart a BuildRun recreated under the
    same name while its old run is still being garbage-collected, and names cut to fit.
    Shaped as Shipwright's, so that after a rollback Shipwright finds the BuildRun of a
    deleted run by the name alone (VerifyRequestName strips `-[a-z0-9]{5}$`) and marks
    it TaskRunIsMissing. At most 63 characters (Tekton puts the name in a label on the
    pod): a BuildRun name over 57 is cut to 57 (generateName cuts it to 58, the dash
    lost), and then, as with Shipwright's, the name no longer leads back to the BuildRun.

    `attempt`: a later attempt's run after an infrastructure failure (retries.py), the
    five characters derived from the uid and the attempt's number, so a restart between
    recording the attempt and creating its run finds the run it made (AlreadyExists).
    """
    metadata = buildrun.get("metadata") or {}
    name = str(metadata.get("name") or "")
    prefix = name[:RUN_NAME_PREFIX_MAX].rstrip("-.")
    if dns1123_subdomain_errors(prefix):
        # Never for a name the API server admitted (a DNS-1123 subdomain, kept as it is).
        prefix = re.sub(r"[^a-z0-9-]", "-", name.lower())[:RUN_NAME_PREFIX_MAX].strip("-")
    uid = str(metadata.get("uid") or "")
    suffix = _suffix(uid if attempt == 1 else f"{uid}/attempt-{attempt}")
    return f"{prefix}-{suffix}" if prefix else suffix


# The API server's alphabet for generateName (k8s.io/apimachinery/pkg/util/rand): no
# vowels, no 0, 1 or 3; all in Shipwright's [a-z0-9].
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SUFFIX_LENGTH = 5
# generateName's limit: the prefix is cut to 63 - 5 characters, the dash included.
RUN_NAME_PREFIX_MAX = LABEL_VALUE_MAX - SUFFIX_LENGTH - 1


def _suffix(uid: str) -> str:
    """Five characters of _SUFFIX_ALPHABET from the uid's hash (27**5, 14 million values)."""
    value = int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big")
    chars = []
    for _ in range(SUFFIX_LENGTH):
        value, index = divmod(value, len(_SUFFIX_ALPHABET))
        chars.append(_SUFFIX_ALPHABET[index])
    return "".join(chars)


def base_task_spec() -> JSON:
    """Shipwright's createBaseTaskSpec: the system parameters, the `source` workspace and
    the results every task of the build declares; steps and volumes still empty."""
    return {
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


def drop_empty_lists(task_spec: JSON) -> None:
    """Steps and volumes left empty are left out, as Go's omitempty does."""
    for field in ("steps", "volumes"):
        if not task_spec[field]:
            del task_spec[field]


def effective_timeout(build_spec: JSON, run_spec: JSON) -> str | None:
    """The BuildRun's timeout over the Build's (Shipwright's effectiveTimeout)."""
    timeout: str | None = run_spec.get("timeout") or build_spec.get("timeout")
    return timeout


def source_context_dir(build_spec: JSON) -> str | None:
    """The Build's `source.contextDir`, None when unset."""
    context: str | None = (build_spec.get("source") or {}).get("contextDir")
    return context


# --- metadata


def executor_metadata(buildrun: JSON, build: JSON, executor_name: str) -> JSON:
    """The TaskRun's or PipelineRun's metadata (Shipwright's generateTaskRunMetadata, with
    `executor_name` for its generateName): namespace, the BuildRun's and Build's labels, and the
    BuildRun as controlling owner."""
    meta = buildrun.get("metadata") or {}
    name = meta.get("name") or ""
    uid = meta.get("uid") or ""
    labels = {
        LABEL_BUILDRUN: as_label_value(name),
        LABEL_BUILDRUN_GENERATION: str(meta.get("generation") or 0),
        # Not in Shipwright: the exact label to select a BuildRun's TaskRun by.
        LABEL_BUILDRUN_UID: as_label_value(uid),
    }
    build_meta = build.get("metadata") or {}
    if build_meta.get("name"):
        labels[LABEL_BUILD] = as_label_value(build_meta["name"])
        labels[LABEL_BUILD_GENERATION] = str(build_meta.get("generation") or 0)
    return {
        "name": executor_name,
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


def _param_spec(name: str, description: str) -> JSON:
    return {"name": name, "description": description, "type": "string"}


# --- the strategy


def _merge_env(new: list[JSON], into: list[JSON], overwrite: bool,
               forbidden: ForbiddenEnvNames = NO_FORBIDDEN_ENV) -> tuple[list[JSON], list[str]]:
    """Shipwright's env.MergeEnvVars: `new` into `into`; a name in both replaces (overwrite)
    or is an error, and (Shipwright main, #2275) a name of `new` on the blocklist is an
    error and left out."""
    merged = copy.deepcopy(into)
    index = {var.get("name"): i for i, var in enumerate(merged)}
    errors = []
    for var in new:
        name = var.get("name")
        if forbidden.forbids(str(name or "")):
            errors.append(forbidden_message(str(name or "")))
            continue
        if name in index and overwrite:
            merged[index[name]] = copy.deepcopy(var)
        elif name in index:
            errors.append(f"environment variable {go_quote(name)} already exists")
        else:
            merged.append(copy.deepcopy(var))
    return merged, errors


def strategy_param_specs(strategy_spec: JSON) -> list[JSON]:
    """The strategy's parameters as Tekton declares them, with their defaults (Shipwright's
    addStrategyParametersToTaskSpec and addStrategyParametersToPipelineSpec)."""
    specs = []
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
        specs.append(spec)
    return specs


def add_strategy_steps(task_spec: JSON, build: JSON, buildrun: JSON, strategy: JSON,
                       forbidden: ForbiddenEnvNames = NO_FORBIDDEN_ENV) -> None:
    """The strategy's steps (env, resources and their overrides, mounts) and the volumes
    they mount (Shipwright's applyBuildStrategySteps and generateTaskSpecVolumes).
    `forbidden` is FORBIDDEN_ENV_VAR_NAMES (Shipwright main, #2275): a step's own env,
    or the Build's merged into it, naming one fails generation as main's does."""
    build_spec = build.get("spec") or {}
    run_spec = buildrun.get("spec") or {}
    strategy_spec = strategy.get("spec") or {}
    # Main checks the BuildRun's env here too ("failed to merge environment variables"),
    # but its BuildRunFields refuses such a BuildRun first, as planning does here
    # (spec.check_forbidden_env): no blocklist for this merge, which cannot fail then.
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
                                f"{go_quote(name)} which does not exist in the build strategy")
            overrides[name] = entry.get("resources") or {}

    declared = {v.get("name") for v in strategy_spec.get("volumes") or []}
    mounts: dict[str, bool] = {}
    strategy_name = (build_spec.get("strategy") or {}).get("name") or ""
    for container in strategy_spec.get("steps") or []:
        for var in container.get("env") or []:
            if forbidden.forbids(str(var.get("name") or "")):
                raise UserError(TASK_RUN_GENERATION_FAILED, forbidden_step_message(
                    str(container.get("name") or ""), str(var.get("name") or "")))
        env, errors = _merge_env(combined, container.get("env") or [], False, forbidden)
        if errors:
            raise UserError(
                TASK_RUN_GENERATION_FAILED,
                "error(s) occurred merging environment variables into BuildStrategy "
                f"{go_quote(strategy_name)} steps: {_aggregate(errors)}",
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
                    f"volume for the Volume Mount {go_quote(mount.get('name'))} is not found",
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
                            f"{go_quote(volume.get('name'))} is listed more than once")
        merged.setdefault(volume.get("name") or "", copy.deepcopy(volume))
    volumes = list(merged.values()) if (build_volumes or run_volumes) else [
        copy.deepcopy(v) for v in strategy_volumes]
    for overrides, who in ((build_volumes, "Build"), (run_volumes, "BuildRun")):
        by_name = {v.get("name"): v for v in volumes}
        for override in overrides:
            name = override.get("name") or ""
            original = by_name.get(name)
            if original is None:
                raise UserError(UNDEFINED_VOLUME, f"{who} volume {go_quote(name)} is not "
                                "defined in the strategy")
            if not original.get("overridable"):
                raise UserError(VOLUME_NOT_OVERRIDABLE, f"{who} volume {go_quote(name)} is "
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
                            f"volume mount {go_quote(name)} must be read only")
        result.append({k: v for k, v in volume.items() if k not in ("description",
                                                                     "overridable")})
    return result


# --- pod template, labels, annotations, security context


def pod_template(build_spec: JSON, run_spec: JSON) -> JSON:
    """The pod template: node selector (merged, the BuildRun's wins), tolerations (the
    BuildRun's, then the Build's of other keys, effect defaulting to NoSchedule),
    runtimeClassName and schedulerName (the BuildRun's over the Build's). Empty when
    none is set."""
    template: JSON = {}
    node_selector = merge_maps(build_spec.get("nodeSelector"), run_spec.get("nodeSelector"))
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
    return template


def propagated_annotations(strategy: JSON) -> JSON:
    """The strategy's annotations but Shipwright's own and kubectl's last-applied."""
    meta = strategy.get("metadata") or {}
    return {k: v for k, v in (meta.get("annotations") or {}).items()
            if k != _LAST_APPLIED and not k.startswith(_UNPROPAGATED_PREFIXES)}


def strategy_labels(strategy: JSON) -> JSON:
    """The `(cluster)buildstrategy.shipwright.io/name` and `/generation` labels."""
    meta = strategy.get("metadata") or {}
    domain = ("clusterbuildstrategy.shipwright.io" if strategy.get("kind") ==
              CLUSTERBUILDSTRATEGIES.kind else "buildstrategy.shipwright.io")
    return {f"{domain}/name": as_label_value(meta.get("name") or ""),
            f"{domain}/generation": str(meta.get("generation") or 0)}


def apply_security_context(task_spec: JSON, annotations: JSON, strategy: JSON) -> None:
    """Shipwright's steps.UpdateSecurityContext on one task spec: nothing unless the
    strategy has a securityContext; the annotations it needs go into `annotations`."""
    strategy_spec = strategy.get("spec") or {}
    security = strategy_spec.get("securityContext")
    if security is not None:
        _apply_security_context(task_spec, annotations, strategy_spec.get("steps") or [],
                                security)


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
                    "defaultMode": SECRET_MODE,
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


def system_param_values(build_spec: JSON, run_spec: JSON, context_path: str) -> list[JSON]:
    """The values of the system parameters, `shp-source-context` being `context_path`."""
    build_output = build_spec.get("output") or {}
    run_output = run_spec.get("output")
    # A BuildRun's output, once set, supplies the image even if it leaves it empty (as
    # Shipwright: a non-nil pointer); insecure falls back field by field.
    image = (run_output if run_output is not None else build_output).get("image")
    insecure = (run_output or {}).get("insecure")
    if insecure is None:
        insecure = build_output.get("insecure")
    return [
        {"name": PARAM_OUTPUT_IMAGE, "value": image or ""},
        {"name": PARAM_OUTPUT_INSECURE, "value": "true" if insecure else "false"},
        {"name": PARAM_SOURCE_ROOT, "value": SOURCE_ROOT},
        {"name": PARAM_SOURCE_CONTEXT, "value": context_path},
    ]


def _aggregate(errors: list[str]) -> str:
    """k8s.io/apimachinery's errors.NewAggregate(...).Error()."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
