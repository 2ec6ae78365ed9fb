"""The Tekton TaskRun that executes a BuildRun."""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

from controller.buildrun.spec import EffectiveBuild, format_duration
from controller.buildrun.status import (
    RESULT_ERROR_MESSAGE,
    RESULT_ERROR_REASON,
    RESULT_IMAGE_DIGEST,
)

LABEL_BUILDRUN = "buildrun.shipwright.io/name"
LABEL_BUILDRUN_UID = "buildrun.shipwright.io/uid"
LABEL_BUILD = "build.shipwright.io/name"

_LABEL_MAX = 63
_HASH_LENGTH = 8
_STEP_FIELDS = ("name", "image", "command", "args", "workingDir")


def taskrun_name(buildrun: dict[str, Any]) -> str:
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
    buildrun: dict[str, Any],
    effective: EffectiveBuild,
    strategy: dict[str, Any],
    params: dict[str, str | list[str]],
) -> dict[str, Any]:
    """A tekton.dev/v1 TaskRun running `strategy`'s steps with the resolved `params`.

    Never raises on what the CRD schemas admit: what can be wrong with a BuildRun was
    rejected earlier, with a reason, by spec.py.
    """
    metadata = buildrun.get("metadata") or {}
    name = metadata.get("name") or ""
    uid = metadata.get("uid") or ""
    # Label values are at most 63 characters; the uid label is the exact one to select by.
    labels = {LABEL_BUILDRUN: _label_value(name), LABEL_BUILDRUN_UID: _label_value(uid)}
    build_ref = ((buildrun.get("spec") or {}).get("build") or {}).get("name")
    if build_ref:
        labels[LABEL_BUILD] = _label_value(build_ref)

    source = effective.spec.get("source") or {}
    git = source.get("git") or {}
    system = {
        "shp-output-image": effective.output_image,
        "shp-source-url": git.get("url"),
        "shp-source-revision": git.get("revision"),
        "shp-source-context": source.get("contextDir"),
    }
    # System values win over a strategy parameter of the same name.
    values = {**params, **{k: v for k, v in system.items() if v}}

    steps = [
        {field: copy.deepcopy(step[field]) for field in _STEP_FIELDS if field in step}
        for step in (strategy.get("spec") or {}).get("steps") or []
    ]
    spec: dict[str, Any] = {
        "taskSpec": {
            "params": [
                {"name": k, "type": "array" if isinstance(v, list) else "string"}
                for k, v in values.items()
            ],
            "steps": steps,
            "results": [
                {"name": RESULT_IMAGE_DIGEST},
                {"name": RESULT_ERROR_REASON},
                {"name": RESULT_ERROR_MESSAGE},
            ],
        },
        "params": [
            {"name": k, "value": list(v) if isinstance(v, list) else v} for k, v in values.items()
        ],
    }
    if effective.service_account:
        spec["serviceAccountName"] = effective.service_account
    if effective.timeout is not None:
        spec["timeout"] = format_duration(effective.timeout)

    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {
            "name": taskrun_name(buildrun),
            "namespace": metadata.get("namespace") or "",
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
        },
        "spec": spec,
    }


def _label_value(text: str) -> str:
    """`text` made a valid label value: allowed characters only, at most 63, alphanumeric
    at both ends."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:_LABEL_MAX].strip("-_.")
