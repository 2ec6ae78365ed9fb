"""The Tekton PipelineRun that executes a BuildRun: what Shipwright v0.20's PipelineRun
executor generates (pkg/reconciler/buildrun/resources: GeneratePipelineRun,
pipelinerun_generator.go, resource_builders.go).

The same phases as the TaskRun (phases.py), each in a pipeline task of its own
instead of steps of one task, sharing the `source` workspace (a 1Gi ReadWriteOnce
volume claim template, since the tasks run in different pods):

- `source-acquisition`: the source step (sources.py);
- `build-strategy`, after it: the strategy's parameters, steps and volumes, the
  pipeline's parameters passed through (an array one as `$(params.NAME[*])`), with
  the `cache` workspace (an emptyDir) bound too;
- `output-image`, after that, only when image processing has arguments: the
  `image-processing` step (image_processing.py), pushing from
  `/workspace/source/output-image`, a folder of the shared workspace, rather than
  from an emptyDir of its own.

Each task starts from the same base task spec and gets the strategy's security
context; the pipeline declares the system parameters, `shp-output-directory` when
the strategy uses it and the strategy's parameters. The ServiceAccount and pod
template (node selector, tolerations, scheduler, runtime class) go into
`taskRunTemplate`, the timeout into `timeouts.pipeline`; labels and annotations
are the TaskRun's.

Pure: no I/O. What Shipwright's generator refuses raises a UserError with its
reason, and so does an output SourceTimestamp, which Shipwright's PipelineRun could
not apply (SOURCE_TIMESTAMP_REFUSED). Parameter values from a ConfigMap or Secret are
resolved as in the TaskRun, where Shipwright's PipelineRun drops them. tests/oracle/
compares the result with Shipwright's own GeneratePipelineRun; docs/taskrun.md, "The
PipelineRun", lists where we differ on purpose.
"""

from __future__ import annotations

from controller.buildrun.reasons import TASK_RUN_GENERATION_FAILED
from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.resources.image_processing import (
    add_image_processing_step,
    image_processing_args,
    image_timestamp,
)
from controller.buildrun.resources.params import add_param_values, references_param
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
from controller.buildrun.resources.steps import (
    JSON,
    PARAM_OUTPUT_DIRECTORY,
    PARAM_OUTPUT_IMAGE,
    PARAM_OUTPUT_INSECURE,
    PARAM_SOURCE_CONTEXT,
    PARAM_SOURCE_ROOT,
    SOURCE_ROOT,
    WORKSPACE_SOURCE,
)
from controller.runtime.errors import UserError
from controller.shipwright.resources import PIPELINERUNS

TASK_SOURCE = "source-acquisition"
TASK_STRATEGY = "build-strategy"
TASK_OUTPUT = "output-image"
WORKSPACE_CACHE = "cache"
SOURCE_VOLUME_SIZE = "1Gi"
# The output directory is a folder of the shared source workspace: the strategy's task
# writes it, the output-image task (another pod) pushes it.
PIPELINE_OUTPUT_DIRECTORY = f"{SOURCE_ROOT}/output-image"

SOURCE_TIMESTAMP = "SourceTimestamp"
# Shipwright's PipelineRun generator takes a source timestamp as given whatever the
# source, and points image-processing at $(results.shp-source-default-source-timestamp.path)
# in the output-image task, which declares no such result: Tekton leaves the reference
# unreplaced (v1.10.3 and v1.12.0: getTaskResultReplacements covers declared results
# only) and the step fails after the whole build has run. The timestamp is the source-acquisition
# task's, written in another pod. So it is refused before anything runs.
SOURCE_TIMESTAMP_REFUSED = (
    "cannot use SourceTimestamp setting with the PipelineRun executor: the output-image "
    "task cannot read the source timestamp the source-acquisition task records"
)

# The system parameters each task gets from the pipeline's, in Shipwright's order.
_SYSTEM_PARAMS = (PARAM_OUTPUT_IMAGE, PARAM_OUTPUT_INSECURE, PARAM_SOURCE_ROOT,
                  PARAM_SOURCE_CONTEXT)


def generate_pipelinerun(
    buildrun: JSON,
    build: JSON,
    strategy: JSON,
    service_account: str,
    config: ShipwrightConfig,
) -> JSON:
    """The tekton.dev/v1 PipelineRun Shipwright's PipelineRun executor would create for
    `buildrun`; the arguments are generate_taskrun's."""
    build_spec = build.get("spec") or {}
    run_spec = buildrun.get("spec") or {}
    strategy_spec = strategy.get("spec") or {}
    annotations: JSON = {}
    pipeline_spec: JSON = {
        "tasks": [],
        "params": base_task_spec()["params"],
        "workspaces": [
            {"name": WORKSPACE_SOURCE,
             "description": "Workspace for source code and build artifacts"},
            {"name": WORKSPACE_CACHE, "description": "Cache workspace for build artifacts",
             "optional": True},
        ],
    }
    pipelinerun: JSON = {
        "apiVersion": PIPELINERUNS.api_version,
        "kind": PIPELINERUNS.kind,
        "metadata": executor_metadata(buildrun, build, run_name(buildrun)),
        "spec": {
            "pipelineSpec": pipeline_spec,
            "taskRunTemplate": {"serviceAccountName": service_account},
            "workspaces": [
                {"name": WORKSPACE_SOURCE, "volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": SOURCE_VOLUME_SIZE}},
                }}},
                {"name": WORKSPACE_CACHE, "emptyDir": {}},
            ],
        },
    }
    spec = pipelinerun["spec"]

    # source-acquisition
    source_task = base_task_spec()
    add_source(source_task, build_spec, run_spec, config)
    apply_security_context(source_task, annotations, strategy)
    pipeline_spec["tasks"].append(_pipeline_task(TASK_SOURCE, source_task, []))

    # build-strategy
    strategy_task = base_task_spec()
    strategy_task["params"] += strategy_param_specs(strategy_spec)
    add_strategy_steps(strategy_task, build, buildrun, strategy, config.forbidden_env)
    has_output_directory = any(references_param(step, PARAM_OUTPUT_DIRECTORY)
                               for step in strategy_task["steps"])
    passed = [(p["name"], f"$(params.{p['name']}[*])" if p["type"] == "array" else
               f"$(params.{p['name']})") for p in strategy_param_specs(strategy_spec)]
    if has_output_directory:
        strategy_task["params"].append(_output_directory_spec())
        pipeline_spec["params"].append(_output_directory_spec())
        passed.append((PARAM_OUTPUT_DIRECTORY, f"$(params.{PARAM_OUTPUT_DIRECTORY})"))
    pipeline_spec["params"] += strategy_param_specs(strategy_spec)
    apply_security_context(strategy_task, annotations, strategy)
    pipeline_spec["tasks"].append(_pipeline_task(
        TASK_STRATEGY, strategy_task, passed, after=TASK_SOURCE,
        workspaces=(WORKSPACE_SOURCE, WORKSPACE_CACHE)))

    # output-image
    build_output = build_spec.get("output") or {}
    run_output = run_spec.get("output") or {}
    if image_timestamp(build_output, run_output) == SOURCE_TIMESTAMP:
        raise UserError(TASK_RUN_GENERATION_FAILED, SOURCE_TIMESTAMP_REFUSED)
    args = image_processing_args(build_output, run_output, config,
                                 (buildrun.get("metadata") or {}).get("creationTimestamp"),
                                 has_output_directory, has_source_timestamp=False)
    if args:
        output_task = base_task_spec()
        passed = []
        if has_output_directory:
            output_task["params"].append(_output_directory_spec())
            passed.append((PARAM_OUTPUT_DIRECTORY, f"$(params.{PARAM_OUTPUT_DIRECTORY})"))
        add_image_processing_step(output_task, args, config, build_output.get("pushSecret"),
                                  mount_output_directory=False)
        apply_security_context(output_task, annotations, strategy)
        pipeline_spec["tasks"].append(_pipeline_task(TASK_OUTPUT, output_task, passed,
                                                     after=TASK_STRATEGY))

    template = pod_template(build_spec, run_spec)
    if not template.get("schedulerName"):  # Shipwright sets only a non-empty one here
        template.pop("schedulerName", None)
    if template:
        spec["taskRunTemplate"]["podTemplate"] = template
    annotations.update(propagated_annotations(strategy))
    if annotations:
        pipelinerun["metadata"]["annotations"] = annotations
    pipelinerun["metadata"]["labels"].update(strategy_labels(strategy))
    timeout = effective_timeout(build_spec, run_spec)
    spec["timeouts"] = {"pipeline": timeout} if timeout else {}
    # shp-source-context: the root and contextDir joined as they are (Shipwright's
    # generateBaseParamValues), not cleaned as in the TaskRun.
    context = source_context_dir(build_spec)
    params = system_param_values(build_spec, run_spec,
                                 SOURCE_ROOT if context is None else f"{SOURCE_ROOT}/{context}")
    add_param_values(strategy_task.get("steps") or [], params,
                     build_spec.get("paramValues") or [], run_spec.get("paramValues") or [],
                     strategy_spec.get("parameters") or [])
    if has_output_directory:
        params.append({"name": PARAM_OUTPUT_DIRECTORY, "value": PIPELINE_OUTPUT_DIRECTORY})
    spec["params"] = params
    return pipelinerun


def _output_directory_spec() -> JSON:
    return {"name": PARAM_OUTPUT_DIRECTORY, "type": "string"}


def _pipeline_task(name: str, task_spec: JSON, passed: list[tuple[str, str]], *,
                   after: str | None = None,
                   workspaces: tuple[str, ...] = (WORKSPACE_SOURCE,)) -> JSON:
    """A pipeline task embedding `task_spec`: the system parameters and `passed` (name,
    value) from the pipeline's, the `workspaces` bound under their own names."""
    drop_empty_lists(task_spec)
    task: JSON = {
        "name": name,
        "taskSpec": task_spec,
        "params": [{"name": p, "value": f"$(params.{p})"} for p in _SYSTEM_PARAMS]
        + [{"name": p, "value": value} for p, value in passed],
        "workspaces": [{"name": w, "workspace": w} for w in workspaces],
    }
    if after is not None:
        task["runAfter"] = [after]
    return task
