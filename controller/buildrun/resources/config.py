"""Shipwright's build-controller settings that shape the TaskRun (or PipelineRun), read
from the same environment variables as Shipwright v0.20's controller (its pkg/config),
once at start: BUILDRUN_EXECUTOR picks which of the two a BuildRun runs as.

Each helper step (Git clone, OCI bundle pull, local-source waiter, image processing)
starts from a container template: Shipwright's default, replaced wholesale by the
JSON of `*_CONTAINER_TEMPLATE` (a missing image falls back to the default image),
whose image `*_CONTAINER_IMAGE` then overrides.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The CLI prints a ConfigError as one line and exits 2; here it names the variable.
from controller.runtime.kube import ConfigError
from controller.shipwright.forbidden_env import NO_FORBIDDEN_ENV, ForbiddenEnvNames
from controller.shipwright.resources import PIPELINERUNS, TASKRUNS

GIT_IMAGE = "ghcr.io/shipwright-io/build/git:latest"
BUNDLE_IMAGE = "ghcr.io/shipwright-io/build/bundle:latest"
WAITER_IMAGE = "ghcr.io/shipwright-io/build/waiter:latest"
IMAGE_PROCESSING_IMAGE = "ghcr.io/shipwright-io/build/image-processing:latest"
VULNERABILITY_COUNT_LIMIT = 50
# BUILDRUN_EXECUTOR: what a BuildRun runs as (Shipwright's RunnerFactories); TaskRun unless set.
TASKRUN_EXECUTOR = TASKRUNS.kind
PIPELINERUN_EXECUTOR = PIPELINERUNS.kind
EXECUTOR_KINDS = (TASKRUN_EXECUTOR, PIPELINERUN_EXECUTOR)

_RESTRICTED: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "readOnlyRootFilesystem": True,
}
_SHARED_HOME = {"name": "HOME", "value": "/shared-home"}

# Shipwright's NewDefaultConfig, field by field (Kubernetes container field names).
_DEFAULT_TEMPLATES: dict[str, dict[str, Any]] = {
    "GIT": {
        "image": GIT_IMAGE,
        "command": ["/ko-app/git"],
        "env": [_SHARED_HOME, {"name": "GIT_SHOW_LISTING", "value": "false"}],
        "securityContext": _RESTRICTED,
    },
    "BUNDLE": {
        "image": BUNDLE_IMAGE,
        "command": ["/ko-app/bundle"],
        "env": [_SHARED_HOME, {"name": "BUNDLE_SHOW_LISTING", "value": "false"}],
        "securityContext": _RESTRICTED,
    },
    "WAITER": {
        "image": WAITER_IMAGE,
        "command": ["/ko-app/waiter"],
        "args": ["start", "--lock-file=/shp-tmp/waiter.lock"],
        "env": [_SHARED_HOME],
        "securityContext": _RESTRICTED,
    },
    # Runs as root with DAC_OVERRIDE: it overwrites result files any strategy user wrote.
    "IMAGE_PROCESSING": {
        "image": IMAGE_PROCESSING_IMAGE,
        "command": ["/ko-app/image-processing"],
        "env": [_SHARED_HOME],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsUser": 0,
            "runAsGroup": 0,
            "readOnlyRootFilesystem": True,
            "capabilities": {"add": ["DAC_OVERRIDE"], "drop": ["ALL"]},
        },
    },
}
_TEMPLATE_FIELDS = ("args", "command", "env", "image", "imagePullPolicy", "resources",
                    "securityContext", "workingDir")


@dataclass(frozen=True)
class ShipwrightConfig:
    """The settings the TaskRun generator reads; `from_env()` builds it as Shipwright does."""

    git: dict[str, Any]
    bundle: dict[str, Any]
    waiter: dict[str, Any]
    image_processing: dict[str, Any]
    vulnerability_count_limit: int = VULNERABILITY_COUNT_LIMIT
    git_rewrite_rule: bool = False
    # What a new BuildRun runs as (BUILDRUN_EXECUTOR); one already started keeps the kind
    # its status.executor names.
    executor: str = TASKRUN_EXECUTOR
    # FORBIDDEN_ENV_VAR_NAMES: Shipwright main's blocklist (#2275); none unless set, as
    # v0.20.13 has none (controller.shipwright.forbidden_env).
    forbidden_env: ForbiddenEnvNames = NO_FORBIDDEN_ENV

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ShipwrightConfig:
        env = os.environ if environ is None else environ
        templates = {kind: _template(env, kind) for kind in _DEFAULT_TEMPLATES}
        limit = VULNERABILITY_COUNT_LIMIT
        if env.get("VULNERABILITY_COUNT_LIMIT"):
            try:
                limit = int(env["VULNERABILITY_COUNT_LIMIT"])
            except ValueError:
                raise ConfigError("VULNERABILITY_COUNT_LIMIT must be an integer, not "
                                  f"{env['VULNERABILITY_COUNT_LIMIT']!r}") from None
        rewrite = env.get("GIT_ENABLE_REWRITE_RULE") or ""
        # As Shipwright: unset or empty means TaskRun. Shipwright takes any other value and
        # fails to start its controller ("unsupported BuildrunExecutor"); so do we, in a line.
        executor = env.get("BUILDRUN_EXECUTOR") or TASKRUN_EXECUTOR
        if executor not in EXECUTOR_KINDS:
            raise ConfigError(f"BUILDRUN_EXECUTOR must be {TASKRUN_EXECUTOR} (the default) or "
                              f"{PIPELINERUN_EXECUTOR}, not {executor!r}")
        return cls(
            git=templates["GIT"],
            bundle=templates["BUNDLE"],
            waiter=templates["WAITER"],
            image_processing=templates["IMAGE_PROCESSING"],
            vulnerability_count_limit=limit,
            git_rewrite_rule=rewrite.lower() == "true",
            executor=executor,
            forbidden_env=ForbiddenEnvNames.from_env(env),
        )


def _template(env: Mapping[str, str], kind: str) -> dict[str, Any]:
    default = _DEFAULT_TEMPLATES[kind]
    template = copy.deepcopy(default)
    raw = env.get(f"{kind}_CONTAINER_TEMPLATE")
    if raw:
        name = f"{kind}_CONTAINER_TEMPLATE"
        try:
            given = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"{name} is not JSON: {exc}") from None
        if not isinstance(given, dict):
            raise ConfigError(f"{name} must be a JSON object (a container's fields)")
        # Shipwright decodes into its Step type, which keeps these fields only.
        template = {k: given[k] for k in _TEMPLATE_FIELDS if given.get(k) not in (None, "")}
        template.setdefault("image", default["image"])
    image = env.get(f"{kind}_CONTAINER_IMAGE")
    if image:
        template["image"] = image
    return template


# Shipwright's settings where no variable sets one (its NewDefaultConfig): what a
# reconciler made without the process's settings generates with (a test's, which the
# environment it runs in must not change).
SHIPWRIGHT_DEFAULTS = ShipwrightConfig.from_env({})
