"""controller.buildrun.taskrun: the TaskRun's name and content, fuzzed over what the CRDs admit."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.buildrun.spec import (
    EffectiveBuild,
    effective_build,
    parse_duration,
    resolve_params,
)
from controller.buildrun.taskrun import (
    LABEL_BUILD,
    LABEL_BUILDRUN,
    LABEL_BUILDRUN_UID,
    generate_taskrun,
    taskrun_name,
)
from controller.runtime.errors import UserError

CRDS = Path(__file__).resolve().parents[3] / "manifests" / "crds"
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
UID = "0d3c5e3a-6a8e-4bd0-9a53-2bde0ab0f1a7"
# Caps keep fuzz examples small; 300 still reaches the 253-character name limit.
MAX_TEXT = 300
MAX_ITEMS = 4

BUILDRUN: dict[str, Any] = {
    "apiVersion": "shipwright.io/v1beta1",
    "kind": "BuildRun",
    "metadata": {"name": "app-run-1", "namespace": "team-a", "uid": UID},
    "spec": {"build": {"name": "app"}},
}
BUILD_SPEC: dict[str, Any] = {
    "strategy": {"name": "kaniko"},
    "source": {"git": {"url": "https://example.com/app.git", "revision": "main"}},
    "output": {"image": "registry.example.com/app"},
    "timeout": "10m",
}
STRATEGY: dict[str, Any] = {
    "metadata": {"name": "kaniko"},
    "spec": {
        "parameters": [{"name": "dockerfile", "default": "Dockerfile"}],
        "steps": [
            {
                "name": "build",
                "image": "gcr.io/kaniko-project/executor",
                "command": ["/kaniko/executor"],
                "args": ["--dockerfile", "$(params.dockerfile)"],
                "workingDir": "/workspace/source",
            }
        ],
    },
}


def is_dns1123_label(name: str) -> bool:
    return len(name) <= 63 and DNS1123_LABEL.fullmatch(name) is not None


# --- taskrun_name


def test_taskrun_name_is_deterministic_and_keeps_short_names() -> None:
    name = taskrun_name(BUILDRUN)
    assert name == taskrun_name(copy.deepcopy(BUILDRUN))
    assert re.fullmatch(r"app-run-1-[0-9a-f]{8}", name)


def test_taskrun_name_depends_on_uid() -> None:
    other = copy.deepcopy(BUILDRUN)
    other["metadata"]["uid"] = "another-uid"
    assert taskrun_name(other) != taskrun_name(BUILDRUN)


@pytest.mark.parametrize(
    "name",
    [
        "a" * 250,
        "a" * 53 + "-" + "b" * 196,  # cut lands right after a '-'
        "a" * 53 + "." + "b" * 196,  # cut lands right after a '.'
        ("abc.def-" * 32)[:250].rstrip("-."),
        "x",
    ],
)
def test_taskrun_name_is_a_dns1123_label_for_long_names(name: str) -> None:
    buildrun = {"metadata": {"name": name, "uid": UID}}
    result = taskrun_name(buildrun)
    assert is_dns1123_label(result), result
    assert result == taskrun_name(copy.deepcopy(buildrun))


def test_taskrun_name_keeps_long_names_with_common_prefix_apart() -> None:
    first = {"metadata": {"name": "a" * 240 + "1", "uid": "uid-1"}}
    second = {"metadata": {"name": "a" * 240 + "2", "uid": "uid-2"}}
    assert taskrun_name(first) != taskrun_name(second)
    assert len(taskrun_name(first)) == 63


@given(name=st.text(max_size=MAX_TEXT), uid=st.text())
def test_taskrun_name_is_a_dns1123_label_whatever_the_name(name: str, uid: str) -> None:
    assert is_dns1123_label(taskrun_name({"metadata": {"name": name, "uid": uid}}))


# --- generate_taskrun


def generate(buildrun: dict[str, Any] = BUILDRUN, build_spec: dict[str, Any] = BUILD_SPEC) -> Any:
    effective = effective_build(buildrun, build_spec)
    params = resolve_params(effective.param_values, STRATEGY["spec"]["parameters"])
    return generate_taskrun(buildrun, effective, STRATEGY, params)


def test_generate_taskrun_metadata() -> None:
    taskrun = generate()
    assert taskrun["apiVersion"] == "tekton.dev/v1"
    assert taskrun["kind"] == "TaskRun"
    metadata = taskrun["metadata"]
    assert metadata["name"] == taskrun_name(BUILDRUN)
    assert metadata["namespace"] == "team-a"
    assert metadata["labels"] == {
        LABEL_BUILDRUN: "app-run-1",
        LABEL_BUILDRUN_UID: UID,
        LABEL_BUILD: "app",
    }
    assert metadata["ownerReferences"] == [
        {
            "apiVersion": "shipwright.io/v1beta1",
            "kind": "BuildRun",
            "name": "app-run-1",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_generate_taskrun_spec() -> None:
    spec = generate()["spec"]
    assert spec["timeout"] == "600s"
    assert "serviceAccountName" not in spec
    assert spec["taskSpec"]["steps"] == STRATEGY["spec"]["steps"]
    assert spec["taskSpec"]["results"] == [
        {"name": "shp-image-digest"},
        {"name": "shp-error-reason"},
        {"name": "shp-error-message"},
    ]
    assert spec["taskSpec"]["params"] == [
        {"name": "dockerfile", "type": "string"},
        {"name": "shp-output-image", "type": "string"},
        {"name": "shp-source-url", "type": "string"},
        {"name": "shp-source-revision", "type": "string"},
    ]
    assert spec["params"] == [
        {"name": "dockerfile", "value": "Dockerfile"},
        {"name": "shp-output-image", "value": "registry.example.com/app"},
        {"name": "shp-source-url", "value": "https://example.com/app.git"},
        {"name": "shp-source-revision", "value": "main"},
    ]


def test_generate_taskrun_with_overrides_and_array_param() -> None:
    buildrun = copy.deepcopy(BUILDRUN)
    buildrun["spec"].update(serviceAccount="builder", timeout="1.5h")
    build_spec = {**BUILD_SPEC, "source": {"contextDir": "sub/dir"}}
    effective = effective_build(buildrun, build_spec)
    spec = generate_taskrun(buildrun, effective, STRATEGY, {"flags": ["-a", "-b"]})["spec"]
    assert spec["serviceAccountName"] == "builder"
    assert spec["timeout"] == "5400s"
    assert {"name": "flags", "type": "array"} in spec["taskSpec"]["params"]
    assert {"name": "flags", "value": ["-a", "-b"]} in spec["params"]
    # Only known source params are passed.
    names = [p["name"] for p in spec["params"]]
    assert names == ["flags", "shp-output-image", "shp-source-context"]
    assert {"name": "shp-source-context", "value": "sub/dir"} in spec["params"]


def test_generate_taskrun_without_timeout_or_build_name() -> None:
    buildrun = copy.deepcopy(BUILDRUN)
    build_spec = {k: v for k, v in BUILD_SPEC.items() if k != "timeout"}
    buildrun["spec"] = {"build": {"spec": build_spec}}
    taskrun = generate(buildrun, build_spec)
    assert "timeout" not in taskrun["spec"]
    assert LABEL_BUILD not in taskrun["metadata"]["labels"]


def test_generate_taskrun_system_params_win_over_strategy_params() -> None:
    effective = effective_build(BUILDRUN, BUILD_SPEC)
    params: dict[str, str | list[str]] = {"shp-output-image": "evil", "x": "1"}
    spec = generate_taskrun(BUILDRUN, effective, STRATEGY, params)["spec"]
    assert {"name": "shp-output-image", "value": "registry.example.com/app"} in spec["params"]
    assert [p["name"] for p in spec["params"]].count("shp-output-image") == 1
    assert [p["name"] for p in spec["taskSpec"]["params"]].count("shp-output-image") == 1


def test_generate_taskrun_truncates_label_values_of_long_names() -> None:
    buildrun = copy.deepcopy(BUILDRUN)
    buildrun["metadata"]["name"] = "r" * 62 + "." + "s" * 100
    buildrun["spec"]["build"]["name"] = "b" * 253
    labels = generate(buildrun)["metadata"]["labels"]
    assert labels[LABEL_BUILDRUN] == "r" * 62
    assert labels[LABEL_BUILD] == "b" * 63
    assert labels[LABEL_BUILDRUN_UID] == UID


def test_generate_taskrun_output_does_not_alias_inputs() -> None:
    strategy, buildrun = copy.deepcopy(STRATEGY), copy.deepcopy(BUILDRUN)
    effective = effective_build(buildrun, BUILD_SPEC)
    params: dict[str, str | list[str]] = {"flags": ["-a"]}
    taskrun = generate_taskrun(buildrun, effective, strategy, params)
    taskrun["spec"]["taskSpec"]["steps"][0]["args"].append("--more")
    taskrun["spec"]["params"][0]["value"].append("-b")
    assert strategy == STRATEGY
    assert params == {"flags": ["-a"]}
    assert buildrun == BUILDRUN


# --- fuzzing over what the CRD schemas admit


def crd_schema(filename: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / filename).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


# The API server guarantees metadata.name is a DNS-1123 subdomain and sets uid.
SUBDOMAIN_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
object_names = st.from_regex(
    rf"{SUBDOMAIN_LABEL}(\.{SUBDOMAIN_LABEL}){{0,4}}", fullmatch=True
).filter(lambda n: len(n) <= 253)
metadata = st.fixed_dictionaries(
    {"name": object_names, "namespace": st.from_regex(SUBDOMAIN_LABEL, fullmatch=True)},
    optional={"uid": st.uuids().map(str)},
)
# Plausible values for some string fields, mixed with arbitrary text, so that the fuzz
# also gets past validation: arbitrary text is almost never a valid name or duration.
durations = st.sampled_from(["90s", "10m", "1h30m", "0.5s", "0s"])
HINTS: dict[str, st.SearchStrategy[str]] = {
    "name": st.one_of(st.sampled_from(["a", "b", "shp-x"]), object_names),
    "serviceAccount": object_names,
    "pushSecret": object_names,
    "timeout": durations,
    "ttlAfterFailed": durations,
    "ttlAfterSucceeded": durations,
}


def from_schema(schema: dict[str, Any], key: str = "") -> st.SearchStrategy[Any]:
    """Values a structural OpenAPI schema admits (the subset our CRDs use)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if schema.get("x-kubernetes-int-or-string"):  # a Quantity or an IntOrString
        return st.one_of(st.integers(min_value=0, max_value=2**31), st.text(max_size=MAX_TEXT))
    kind = schema["type"]
    if kind == "string":
        max_length = schema.get("maxLength", MAX_TEXT)
        text = st.text(max_size=min(max_length, MAX_TEXT))
        if key in HINTS:
            text = st.one_of(HINTS[key].filter(lambda s: len(s) <= max_length), text)
        return text
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(min_value=-(2**63), max_value=2**63 - 1)
    if kind == "array":
        items = from_schema(schema["items"])
        return st.lists(items, max_size=min(schema.get("maxItems", MAX_ITEMS), MAX_ITEMS))
    assert kind == "object", schema
    if isinstance(schema.get("additionalProperties"), dict):  # a map
        values = from_schema(schema["additionalProperties"])
        return st.dictionaries(st.text(max_size=MAX_TEXT), values, max_size=MAX_ITEMS)
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {k: from_schema(v, k) for k, v in properties.items() if k in required},
        optional={k: from_schema(v, k) for k, v in properties.items() if k not in required},
    )


def with_metadata(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    spec = from_schema(schema["properties"]["spec"])
    return st.fixed_dictionaries({"metadata": metadata, "spec": spec})


buildruns = with_metadata(crd_schema("shipwright.io_buildruns.yaml"))
builds = with_metadata(crd_schema("shipwright.io_builds.yaml"))
strategies = with_metadata(crd_schema("shipwright.io_buildstrategies.yaml"))
param_maps = st.dictionaries(
    st.text(max_size=MAX_TEXT), st.one_of(st.text(), st.lists(st.text(), max_size=MAX_ITEMS))
)
# Anything effective_build can hand over: a timeout is positive and a Go duration.
timeouts = st.one_of(st.none(), st.floats(min_value=1e-9, max_value=9.2e9))


def is_json(value: Any) -> bool:
    """Only JSON types, all the way down (no tuples, no non-string keys)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(is_json(v) for v in value)
    return value is None or isinstance(value, str | bool | int | float)


def check_taskrun(taskrun: dict[str, Any], buildrun: dict[str, Any]) -> None:
    assert is_json(taskrun)
    assert orjson.loads(orjson.dumps(taskrun)) == taskrun
    metadata = taskrun["metadata"]
    assert is_dns1123_label(metadata["name"]), metadata["name"]
    assert metadata["name"] == taskrun_name(buildrun)
    assert metadata["namespace"] == buildrun["metadata"]["namespace"]
    for key, value in metadata["labels"].items():
        assert key in (LABEL_BUILDRUN, LABEL_BUILDRUN_UID, LABEL_BUILD)
        assert len(value) <= 63 and LABEL_VALUE.fullmatch(value), (key, value)
    [owner] = metadata["ownerReferences"]
    assert owner["apiVersion"] == "shipwright.io/v1beta1"
    assert owner["kind"] == "BuildRun"
    assert owner["name"] == buildrun["metadata"]["name"]
    assert owner["uid"] == buildrun["metadata"].get("uid", "")
    assert owner["controller"] is True
    names = [p["name"] for p in taskrun["spec"]["params"]]
    assert names == [p["name"] for p in taskrun["spec"]["taskSpec"]["params"]]
    assert len(names) == len(set(names))
    if "timeout" in taskrun["spec"]:
        assert parse_duration(taskrun["spec"]["timeout"]) > 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    buildrun=buildruns,
    build=builds,
    strategy=strategies,
    params=param_maps,
    timeout=timeouts,
    service_account=st.one_of(st.none(), st.text(max_size=MAX_TEXT)),
)
def test_generate_taskrun_never_raises_on_admitted_input(
    buildrun: dict[str, Any],
    build: dict[str, Any],
    strategy: dict[str, Any],
    params: dict[str, str | list[str]],
    timeout: float | None,
    service_account: str | None,
) -> None:
    """Straight into generate_taskrun, with an EffectiveBuild made of arbitrary parts."""
    output = build["spec"]["output"]
    effective = EffectiveBuild(
        spec=build["spec"],
        strategy_name=build["spec"]["strategy"]["name"],
        timeout=timeout,
        service_account=service_account,
        param_values=build["spec"].get("paramValues", []),
        output_image=output["image"],
        push_secret=output.get("pushSecret"),
        retention=build["spec"].get("retention", {}),
    )
    inputs = copy.deepcopy((buildrun, build, strategy, params))
    taskrun = generate_taskrun(buildrun, effective, strategy, params)
    check_taskrun(taskrun, buildrun)
    assert (buildrun, build, strategy, params) == inputs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buildrun=buildruns, build=builds, strategy=strategies)
def test_pipeline_rejects_with_user_error_or_generates_valid_taskrun(
    buildrun: dict[str, Any], build: dict[str, Any], strategy: dict[str, Any]
) -> None:
    """The whole pure path, as the reconciler runs it: only UserError may stop it."""
    embedded = (buildrun["spec"].get("build") or {}).get("spec")
    build_spec = embedded if embedded is not None else build["spec"]
    try:
        effective = effective_build(buildrun, build_spec)
        params = resolve_params(effective.param_values, strategy["spec"].get("parameters", []))
    except UserError as exc:
        assert exc.reason and exc.message
        return
    check_taskrun(generate_taskrun(buildrun, effective, strategy, params), buildrun)
