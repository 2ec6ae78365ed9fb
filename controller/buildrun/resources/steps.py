"""The names and helpers every part of the generated TaskRun shares: Shipwright's
system parameters, workspace and step names, and how a step gets a Secret, a writable
home and /tmp, or a result path (Shipwright's resources/steps and sources/utils.go).
Pure."""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

from controller.runtime.name_rules import DNS1123_LABEL_MAX

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

HASH_LENGTH = 8
_DNS1123_FORBIDDEN = re.compile(r"[^a-zA-Z0-9-]+")
SECRET_MODE = 0o444


def template_step(name: str, template: JSON) -> JSON:
    step: JSON = {"name": name}
    for field in ("image", "imagePullPolicy", "command", "args", "env", "securityContext",
                  "workingDir"):
        if template.get(field):
            step[field] = copy.deepcopy(template[field])
    if template.get("resources"):
        step["computeResources"] = copy.deepcopy(template["resources"])
    return step


def result_path(result: str) -> str:
    return f"$(results.{result}.path)"


def secret_volume_name(secret: str) -> str:
    """The volume a Secret is mounted from: `shp-<secret>` made a DNS-1123 label."""
    return _DNS1123_FORBIDDEN.sub("-", f"shp-{secret}")[:DNS1123_LABEL_MAX].removesuffix("-")


def mount_secret(task_spec: JSON, step: JSON, secret: str, path: str) -> None:
    name = secret_volume_name(secret)
    if not any(v.get("secret") and v.get("name") == name for v in task_spec["volumes"]):
        task_spec["volumes"].append(
            {"name": name, "secret": {"secretName": secret, "defaultMode": SECRET_MODE}}
        )
    step.setdefault("volumeMounts", []).append({"name": name, "mountPath": path,
                                                "readOnly": True})
    step["args"] += ["--secret-path", path]


def _step_volume_name(prefix: str, step_name: str) -> str:
    name = _DNS1123_FORBIDDEN.sub("-", prefix + step_name).lower().strip("-")
    digest = hashlib.sha256(step_name.encode()).hexdigest()[:HASH_LENGTH]
    return f"{name[: DNS1123_LABEL_MAX - HASH_LENGTH - 1]}-{digest}"


def setup_home_and_tmp(task_spec: JSON, step: JSON) -> None:
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


def merge_maps(first: JSON | None, second: JSON | None) -> JSON:
    return {**(first or {}), **(second or {})}
