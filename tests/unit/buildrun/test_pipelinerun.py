"""controller.buildrun.resources.pipelinerun without a server: what the oracle cannot show (the
name, the reasons and words of a refusal, purity, our own differences) and fuzzing over
what the CRDs admit. (tests/oracle/test_pipelinerun_parity.py compares the whole
PipelineRun with Shipwright's own.)"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.buildrun import reasons
from controller.buildrun.resources.config import SHIPWRIGHT_DEFAULTS
from controller.buildrun.resources.phases import ANNOTATION_SC_PASSWD, run_name
from controller.buildrun.resources.pipelinerun import (
    PIPELINE_OUTPUT_DIRECTORY,
    SOURCE_TIMESTAMP_REFUSED,
    generate_pipelinerun,
)
from controller.buildrun.resources.taskrun import generate_taskrun
from controller.runtime.errors import UserError
from controller.runtime.name_rules import label_value_errors
from controller.shipwright.labels import LABEL_BUILDRUN_UID
from tests.unit.buildrun.test_taskrun import (
    MAX_TEXT,
    buildruns,
    builds,
    is_json,
    is_run_name,
    strategies,
)

UID = "0d3c5e3a-6a8e-4bd0-9a53-2bde0ab0f1a7"
CONFIG = SHIPWRIGHT_DEFAULTS
BUILDRUN: dict[str, Any] = {
    "apiVersion": "shipwright.io/v1beta1",
    "kind": "BuildRun",
    "metadata": {"name": "app-run-1", "namespace": "team-a", "uid": UID, "generation": 1},
    "spec": {"build": {"name": "app"}},
}
BUILD: dict[str, Any] = {"metadata": {"name": "app", "generation": 2}, "spec": {
    "strategy": {"name": "buildah"},
    "source": {"type": "Git", "git": {"url": "https://example.com/app.git"}},
    "output": {"image": "registry.example.com/app"},
}}
STRATEGY: dict[str, Any] = {
    "kind": "BuildStrategy",
    "metadata": {"name": "buildah", "generation": 5},
    "spec": {
        "parameters": [{"name": "dockerfile", "default": "Dockerfile"},
                       {"name": "flags", "type": "array", "defaults": []}],
        "steps": [
            {"name": "build", "image": "quay.io/buildah", "command": ["buildah"],
             "args": ["bud", "-f", "$(params.dockerfile)", "$(params.flags[*])",
                      "--push", "$(params.shp-output-directory)"]},
            {"name": "report", "image": "busybox", "args": ["done"]},
        ],
    },
}


def generate(buildrun: dict[str, Any] | None = None, build: dict[str, Any] | None = None,
             strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    return generate_pipelinerun(buildrun or BUILDRUN, build or BUILD, strategy or STRATEGY,
                                "builder", CONFIG)


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"].update(spec)
    return out


def tasks(pipelinerun: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in pipelinerun["spec"]["pipelineSpec"]["tasks"]}


def test_the_name_is_the_taskruns_derived_from_the_buildrun() -> None:
    pipelinerun = generate()
    assert pipelinerun["apiVersion"] == "tekton.dev/v1"
    assert pipelinerun["kind"] == "PipelineRun"
    taskrun = generate_taskrun(BUILDRUN, BUILD, STRATEGY, "sa", CONFIG)
    assert pipelinerun["metadata"]["name"] == run_name(BUILDRUN) == taskrun["metadata"]["name"]
    assert "generateName" not in pipelinerun["metadata"]
    other = copy.deepcopy(BUILDRUN)
    other["metadata"]["uid"] = "another"
    assert run_name(other) != run_name(BUILDRUN)


def test_metadata_is_the_taskruns() -> None:
    """Labels, owner and namespace exactly as the TaskRun for the same BuildRun."""
    ours, taskrun = generate(), generate_taskrun(BUILDRUN, BUILD, STRATEGY, "builder", CONFIG)
    assert ours["metadata"] == taskrun["metadata"]
    assert ours["metadata"]["labels"][LABEL_BUILDRUN_UID] == UID
    [owner] = ours["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("BuildRun", UID, True)


def test_three_tasks_in_order_sharing_the_source_workspace() -> None:
    pipelinerun = generate()
    found = tasks(pipelinerun)
    assert list(found) == ["source-acquisition", "build-strategy", "output-image"]
    assert "runAfter" not in found["source-acquisition"]
    assert found["build-strategy"]["runAfter"] == ["source-acquisition"]
    assert found["output-image"]["runAfter"] == ["build-strategy"]
    [source_binding, cache_binding] = pipelinerun["spec"]["workspaces"]
    assert source_binding["volumeClaimTemplate"]["spec"] == {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    assert cache_binding == {"name": "cache", "emptyDir": {}}
    assert pipelinerun["spec"]["taskRunTemplate"] == {"serviceAccountName": "builder"}
    assert pipelinerun["spec"]["timeouts"] == {}


def test_the_output_directory_is_a_folder_of_the_shared_workspace() -> None:
    """No emptyDir (the strategy's task and output-image run in different pods): the
    parameter points into the source workspace, and both tasks get it from the pipeline."""
    pipelinerun = generate()
    found = tasks(pipelinerun)
    values = {p["name"]: p["value"] for p in pipelinerun["spec"]["params"]}
    assert values["shp-output-directory"] == PIPELINE_OUTPUT_DIRECTORY
    assert PIPELINE_OUTPUT_DIRECTORY == "/workspace/source/output-image"
    for name in ("build-strategy", "output-image"):
        task = found[name]
        assert {"name": "shp-output-directory", "value": "$(params.shp-output-directory)"} \
            in task["params"]
        assert "shp-output-directory" not in {v["name"] for v in
                                              task["taskSpec"].get("volumes", [])}
    [push] = found["output-image"]["taskSpec"]["steps"]
    assert push["args"][:2] == ["--push", "$(params.shp-output-directory)"]


def test_array_parameters_pass_as_whole_arrays() -> None:
    params = {p["name"]: p["value"] for p in tasks(generate())["build-strategy"]["params"]}
    assert params["flags"] == "$(params.flags[*])"
    assert params["dockerfile"] == "$(params.dockerfile)"


def test_no_output_image_task_when_there_is_nothing_to_push() -> None:
    strategy = with_spec(STRATEGY, steps=[{"name": "build", "image": "b", "args": ["x"]}])
    pipelinerun = generate(strategy=strategy)
    assert list(tasks(pipelinerun)) == ["source-acquisition", "build-strategy"]
    assert "shp-output-directory" not in {p["name"] for p in pipelinerun["spec"]["params"]}


def test_a_source_timestamp_is_refused_with_its_reason() -> None:
    for where in ("build", "run"):
        build, buildrun = copy.deepcopy(BUILD), copy.deepcopy(BUILDRUN)
        target = build if where == "build" else buildrun
        target["spec"]["output"] = {"image": "registry.example.com/app",
                                    "timestamp": "SourceTimestamp"}
        with pytest.raises(UserError) as refused:
            generate(buildrun, build)
        assert refused.value.reason == reasons.TASK_RUN_GENERATION_FAILED
        assert refused.value.message == SOURCE_TIMESTAMP_REFUSED


@pytest.mark.parametrize(("change", "reason", "words"), [
    ({"env": [{"name": "HOME", "value": "x"}]}, reasons.TASK_RUN_GENERATION_FAILED,
     'environment variable "HOME" already exists'),
    ({"volumes": [{"name": "nope", "emptyDir": {}}]}, reasons.UNDEFINED_VOLUME,
     'Build volume "nope" is not defined in the strategy'),
    ({"output": {"image": "i", "timestamp": "yesterday"}}, reasons.TASK_RUN_GENERATION_FAILED,
     "cannot parse output timestamp yesterday"),
])
def test_what_the_taskrun_refuses_the_pipelinerun_refuses_alike(
    change: dict[str, Any], reason: str, words: str
) -> None:
    strategy = copy.deepcopy(STRATEGY)
    strategy["spec"]["steps"][0]["env"] = [{"name": "HOME", "value": "/home"}]
    build = with_spec(BUILD, **change)
    with pytest.raises(UserError) as as_taskrun:
        generate_taskrun(BUILDRUN, build, strategy, "builder", CONFIG)
    with pytest.raises(UserError) as as_pipelinerun:
        generate(build=build, strategy=strategy)
    assert as_pipelinerun.value.reason == as_taskrun.value.reason == reason
    assert as_pipelinerun.value.message == as_taskrun.value.message
    assert words in as_pipelinerun.value.message


def test_secret_values_reach_only_the_strategy_steps_that_use_them() -> None:
    build = with_spec(BUILD, paramValues=[{"name": "dockerfile", "secretValue": {
        "name": "creds", "key": "file", "format": "x/${SECRET_VALUE}"}}])
    pipelinerun = generate(build=build)
    found = tasks(pipelinerun)
    build_step, report_step = found["build-strategy"]["taskSpec"]["steps"]
    [var] = build_step["env"]
    assert var["valueFrom"] == {"secretKeyRef": {"name": "creds", "key": "file"}}
    assert "env" not in report_step
    values = {p["name"]: p["value"] for p in pipelinerun["spec"]["params"]}
    assert values["dockerfile"] == f"x/$({var['name']})"
    for name in ("source-acquisition", "output-image"):
        for s in found[name]["taskSpec"]["steps"]:
            assert var["name"] not in {v["name"] for v in s.get("env", [])}


def test_security_context_on_every_task_with_one_pair_of_annotations() -> None:
    strategy = with_spec(STRATEGY, securityContext={"runAsUser": 1000, "runAsGroup": 1001})
    pipelinerun = generate(strategy=strategy)
    annotations = pipelinerun["metadata"]["annotations"]
    assert annotations[ANNOTATION_SC_PASSWD] == "shp:x:1000:1001:shp:/shared-home:/sbin/nologin"
    for name in ("source-acquisition", "output-image"):
        task_spec = tasks(pipelinerun)[name]["taskSpec"]
        for s in task_spec["steps"]:
            assert (s["securityContext"]["runAsUser"], s["securityContext"]["runAsGroup"]) \
                == (1000, 1001)
        assert "shp-security-context" in {v["name"] for v in task_spec["volumes"]}


def test_pod_template_and_timeout_go_to_the_run_template_and_timeouts() -> None:
    build = with_spec(BUILD, nodeSelector={"disk": "ssd"}, timeout="10m", schedulerName="")
    buildrun = with_spec(BUILDRUN, tolerations=[{"key": "k", "operator": "Exists"}],
                         timeout="1h")
    pipelinerun = generate(buildrun, build)
    assert pipelinerun["spec"]["taskRunTemplate"]["podTemplate"] == {
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]}
    assert pipelinerun["spec"]["timeouts"] == {"pipeline": "1h"}


def test_the_context_dir_is_joined_as_shipwrights_pipelinerun_joins_it() -> None:
    build = copy.deepcopy(BUILD)
    build["spec"]["source"]["contextDir"] = "sub/../dir/"
    values = {p["name"]: p["value"] for p in generate(build=build)["spec"]["params"]}
    assert values["shp-source-context"] == "/workspace/source/sub/../dir/"


def test_output_does_not_alias_inputs_and_is_the_same_each_time() -> None:
    inputs = copy.deepcopy((BUILDRUN, BUILD, STRATEGY))
    first = generate()
    for task in first["spec"]["pipelineSpec"]["tasks"]:
        for s in task["taskSpec"]["steps"]:
            s.setdefault("env", []).append({"name": "Z"})
            s.setdefault("args", []).append("x")
    first["spec"]["pipelineSpec"]["params"].clear()
    assert inputs == (BUILDRUN, BUILD, STRATEGY)
    assert generate() == generate() != first


def check_pipelinerun(pipelinerun: dict[str, Any], buildrun: dict[str, Any]) -> None:
    assert is_json(pipelinerun)
    assert orjson.loads(orjson.dumps(pipelinerun)) == pipelinerun
    metadata = pipelinerun["metadata"]
    assert is_run_name(metadata["name"]), metadata["name"]
    assert metadata["name"] == run_name(buildrun)
    for key, value in metadata["labels"].items():
        assert not label_value_errors(value), (key, value)
    spec = pipelinerun["spec"]
    declared = [p["name"] for p in spec["pipelineSpec"]["params"]]
    given_ = [p["name"] for p in spec["params"]]
    assert len(given_) == len(set(given_)) and set(given_) <= set(declared)
    for task in spec["pipelineSpec"]["tasks"]:
        task_declared = {p["name"] for p in task["taskSpec"]["params"]}
        assert {p["name"] for p in task["params"]} <= task_declared
        assert {p["name"] for p in task["params"]} <= set(declared)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buildrun=buildruns, build=builds, strategy=strategies,
       service_account=st.text(max_size=MAX_TEXT))
def test_generate_pipelinerun_raises_only_user_errors_on_admitted_input(
    buildrun: dict[str, Any], build: dict[str, Any], strategy: dict[str, Any],
    service_account: str,
) -> None:
    """Straight into generate_pipelinerun, unvalidated: a PipelineRun or a UserError,
    never a crash, and the inputs untouched."""
    inputs = copy.deepcopy((buildrun, build, strategy))
    try:
        pipelinerun = generate_pipelinerun(buildrun, build, strategy, service_account, CONFIG)
    except UserError as exc:
        assert exc.reason and exc.message
    else:
        check_pipelinerun(pipelinerun, buildrun)
    assert (buildrun, build, strategy) == inputs
