"""The Tekton TaskRun that executes a BuildRun: what Shipwright v0.20 generates
(pkg/reconciler/buildrun/resources: GenerateTaskRun).

The phases (phases.py, which the PipelineRun shares) as steps of one task, in
Shipwright's order: the base task spec, the source step (Git, OCI bundle or the
local-source waiter: `sources.py`), the strategy's parameters and steps, the volumes,
managed push (`image-processing`: `image_processing.py`), the pod template, labels and
annotations with the strategy's security context, the timeout and the parameter values
(`params.py`). tests/oracle/ compares the result with Shipwright's own generator on
every official sample and on each field alone; docs/taskrun.md lists where we
differ on purpose.

Pure: no I/O. What Shipwright's generator refuses raises a UserError with its reason.
"""

from __future__ import annotations

import posixpath

from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.resources.image_processing import (
    add_image_processing,
    setup_output_directory,
)
from controller.buildrun.resources.params import apply_param_values
from controller.buildrun.resources.phases import (
    add_strategy_steps,
    apply_security_context,
    base_task_spec,
    drop_empty_lists,
    effective_timeout,
    executor_metadata,
    pod_template,
    propagated_annotations,
    run_name,
    source_context_dir,
    strategy_labels,
    strategy_param_specs,
    system_param_values,
)
from controller.buildrun.resources.sources import add_source
from controller.buildrun.resources.steps import JSON, SOURCE_ROOT, WORKSPACE_SOURCE
from controller.shipwright.resources import TASKRUNS


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
    task_spec = base_task_spec()
    taskrun: JSON = {
        "apiVersion": TASKRUNS.api_version,
        "kind": TASKRUNS.kind,
        "metadata": executor_metadata(buildrun, build, run_name(buildrun)),
        "spec": {
            "serviceAccountName": service_account,
            "taskSpec": task_spec,
            "workspaces": [{"name": WORKSPACE_SOURCE, "emptyDir": {}}],
            "params": [],
        },
    }

    add_source(task_spec, build_spec, run_spec, config)
    task_spec["params"] += strategy_param_specs(strategy_spec)
    add_strategy_steps(task_spec, build, buildrun, strategy, config.forbidden_env)
    has_output_directory = setup_output_directory(task_spec, taskrun["spec"]["params"])
    add_image_processing(task_spec, buildrun, build_spec, config, has_output_directory)
    template = pod_template(build_spec, run_spec)
    if template:
        taskrun["spec"]["podTemplate"] = template
    annotations = propagated_annotations(strategy)
    apply_security_context(task_spec, annotations, strategy)
    if annotations:
        taskrun["metadata"]["annotations"] = annotations
    taskrun["metadata"]["labels"].update(strategy_labels(strategy))
    timeout = effective_timeout(build_spec, run_spec)
    if timeout:
        taskrun["spec"]["timeout"] = timeout
    taskrun["spec"]["params"] += system_param_values(
        build_spec, run_spec, _go_path_join(SOURCE_ROOT, source_context_dir(build_spec)))
    apply_param_values(taskrun, build_spec.get("paramValues") or [],
                       run_spec.get("paramValues") or [],
                       strategy_spec.get("parameters") or [])

    drop_empty_lists(task_spec)
    if not taskrun["spec"]["params"]:
        del taskrun["spec"]["params"]
    return taskrun


def _go_path_join(*parts: str | None) -> str:
    """Go's path.Join: joined with '/', cleaned."""
    joined = "/".join(p for p in parts if p)
    if not joined:
        return ""
    cleaned = posixpath.normpath(joined)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned
