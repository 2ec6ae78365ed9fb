"""controller.buildrun.resources.taskrun without a server: the TaskRun's name, each phase of
Shipwright's generator on its own, and fuzzing over what the CRDs admit. (tests/oracle/
compares the whole TaskRun with Shipwright's own.)"""

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

from controller.buildrun import reasons
from controller.buildrun.resources.config import SHIPWRIGHT_DEFAULTS, ShipwrightConfig
from controller.buildrun.resources.phases import ANNOTATION_SC_PASSWD, run_name
from controller.buildrun.resources.steps import secret_volume_name
from controller.buildrun.resources.taskrun import generate_taskrun
from controller.buildrun.spec import effective_build
from controller.runtime.errors import UserError
from controller.runtime.name_rules import (
    DNS1123_SUBDOMAIN_MAX,
    LABEL_VALUE_MAX,
    dns1123_subdomain_errors,
    label_value_errors,
)
from controller.shipwright.labels import (
    LABEL_BUILD,
    LABEL_BUILD_GENERATION,
    LABEL_BUILDRUN,
    LABEL_BUILDRUN_GENERATION,
    LABEL_BUILDRUN_UID,
)
from controller.shipwright.params import validate_params

CRDS = Path(__file__).resolve().parents[3] / "manifests" / "crds"
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
    "source": {"type": "Git", "git": {"url": "https://example.com/app.git", "revision": "main"}},
    "output": {"image": "registry.example.com/app"},
    "timeout": "10m",
}
BUILD: dict[str, Any] = {"metadata": {"name": "app", "generation": 2}, "spec": BUILD_SPEC}
CONFIG = SHIPWRIGHT_DEFAULTS
STRATEGY: dict[str, Any] = {
    "kind": "BuildStrategy",
    "metadata": {"name": "kaniko", "generation": 5},
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


def is_run_name(name: str) -> bool:
    """A DNS-1123 subdomain of at most 63 characters: a TaskRun name Tekton can put in its
    pod's tekton.dev/taskRun label."""
    return len(name) <= LABEL_VALUE_MAX and not dns1123_subdomain_errors(name)


def shipwrights_buildrun_of(taskrun_name: str) -> str | None:
    """What Shipwright's VerifyRequestName (pkg/reconciler/buildrun/buildrun.go) takes for
    the BuildRun of a deleted TaskRun: the name before `-[a-z0-9]{5,5}$`, if it matches."""
    return re.split(r"-[a-z0-9]{5,5}$", taskrun_name, maxsplit=1)[0] if re.search(
        r"-[a-z0-9]{5,5}$", taskrun_name) else None


# --- run_name


def test_taskrun_name_is_the_buildrun_name_and_five_characters() -> None:
    name = run_name(BUILDRUN)
    assert name == run_name(copy.deepcopy(BUILDRUN))
    assert re.fullmatch(r"app-run-1-[bcdfghjklmnpqrstvwxz2456789]{5}", name), name
    assert shipwrights_buildrun_of(name) == "app-run-1"


def test_taskrun_name_depends_on_uid() -> None:
    other = copy.deepcopy(BUILDRUN)
    other["metadata"]["uid"] = "another-uid"
    assert run_name(other) != run_name(BUILDRUN)
    assert run_name(other)[:-5] == run_name(BUILDRUN)[:-5]


@given(name=st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]{1,10}){0,3}",
                          fullmatch=True).filter(lambda n: len(n) <= 57),
       uid=st.uuids())
def test_shipwright_finds_the_buildrun_of_any_name_that_fits(name: str, uid: Any) -> None:
    """Every BuildRun name of up to 57 characters (dots included) is kept whole, so
    Shipwright's VerifyRequestName leads back to it after a rollback."""
    taskrun = run_name({"metadata": {"name": name, "uid": str(uid)}})
    assert is_run_name(taskrun), taskrun
    assert shipwrights_buildrun_of(taskrun) == name


@pytest.mark.parametrize(
    "name",
    [
        "a" * 250,
        "a" * 56 + "-" + "b" * 193,  # cut lands right after a '-'
        "a" * 56 + "." + "b" * 193,  # cut lands right after a '.'
        ("abc.def-" * 32)[:250].rstrip("-."),
        "a" * 63,
        "x",
    ],
)
def test_taskrun_name_fits_for_long_names(name: str) -> None:
    buildrun = {"metadata": {"name": name, "uid": UID}}
    result = run_name(buildrun)
    assert is_run_name(result), result
    assert result == run_name(copy.deepcopy(buildrun))


def test_taskrun_name_keeps_long_names_with_common_prefix_apart() -> None:
    first = {"metadata": {"name": "a" * 60 + "1", "uid": "uid-1"}}
    second = {"metadata": {"name": "a" * 60 + "2", "uid": "uid-2"}}
    assert run_name(first) != run_name(second)
    assert len(run_name(first)) == 63
    assert run_name(first).startswith("a" * 57 + "-")


@given(name=st.text(max_size=MAX_TEXT), uid=st.text())
def test_taskrun_name_fits_whatever_the_name(name: str, uid: str) -> None:
    assert is_run_name(run_name({"metadata": {"name": name, "uid": uid}}))


# --- generate_taskrun, phase by phase


def generate(buildrun: dict[str, Any] | None = None, build: dict[str, Any] | None = None,
             strategy: dict[str, Any] | None = None,
             config: ShipwrightConfig = CONFIG) -> dict[str, Any]:
    return generate_taskrun(buildrun or BUILDRUN, build or BUILD, strategy or STRATEGY,
                            "builder", config)


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"].update(spec)
    return out


def step(taskrun: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        s for s in taskrun["spec"]["taskSpec"]["steps"] if s["name"] == name]
    assert len(found) == 1, [s["name"] for s in taskrun["spec"]["taskSpec"]["steps"]]
    return found[0]


def values(taskrun: dict[str, Any]) -> dict[str, Any]:
    return {p["name"]: p["value"] for p in taskrun["spec"]["params"]}


def test_metadata_labels_and_owner() -> None:
    buildrun = copy.deepcopy(BUILDRUN)
    buildrun["metadata"]["generation"] = 3
    metadata = generate(buildrun)["metadata"]
    assert metadata["name"] == run_name(buildrun)
    assert metadata["namespace"] == "team-a"
    assert metadata["labels"] == {
        LABEL_BUILDRUN: "app-run-1", LABEL_BUILDRUN_GENERATION: "3", LABEL_BUILDRUN_UID: UID,
        LABEL_BUILD: "app", LABEL_BUILD_GENERATION: "2",
        "buildstrategy.shipwright.io/name": "kaniko",
        "buildstrategy.shipwright.io/generation": "5",
    }
    [owner] = metadata["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "BuildRun", "app-run-1", UID, True)


def test_cluster_strategy_labels_and_embedded_build_has_no_build_label() -> None:
    strategy = {**STRATEGY, "kind": "ClusterBuildStrategy"}
    labels = generate(build={"spec": BUILD_SPEC}, strategy=strategy)["metadata"]["labels"]
    assert labels["clusterbuildstrategy.shipwright.io/name"] == "kaniko"
    assert LABEL_BUILD not in labels


def test_system_params_are_declared_and_valued() -> None:
    taskrun = generate()
    declared = [p["name"] for p in taskrun["spec"]["taskSpec"]["params"]]
    assert declared == ["shp-output-image", "shp-output-insecure", "shp-source-context",
                        "shp-source-root", "dockerfile"]
    assert values(taskrun) == {
        "shp-output-image": "registry.example.com/app", "shp-output-insecure": "false",
        "shp-source-root": "/workspace/source", "shp-source-context": "/workspace/source",
    }
    assert taskrun["spec"]["taskSpec"]["workspaces"] == [{"name": "source"}]
    assert taskrun["spec"]["workspaces"] == [{"name": "source", "emptyDir": {}}]
    assert taskrun["spec"]["serviceAccountName"] == "builder"
    assert taskrun["spec"]["timeout"] == "10m"


def test_context_dir_is_joined_and_cleaned_like_go_path_join() -> None:
    build = with_spec(BUILD, source={**BUILD_SPEC["source"], "contextDir": "a/../b/"})
    assert values(generate(build=build))["shp-source-context"] == "/workspace/source/b"


def test_buildrun_output_wins_for_image_and_insecure() -> None:
    build = with_spec(BUILD, output={"image": "r/app", "insecure": True})
    buildrun = with_spec(BUILDRUN, output={"image": "r/other"})
    params = values(generate(buildrun, build))
    assert (params["shp-output-image"], params["shp-output-insecure"]) == ("r/other", "true")


def test_git_step() -> None:
    git = {"url": "https://example.com/app.git", "revision": "main", "depth": 1,
           "cloneSecret": "my.secret"}
    taskrun = generate(build=with_spec(BUILD, source={"type": "Git", "git": git}))
    source = step(taskrun, "source-default")
    assert source["image"] == "ghcr.io/shipwright-io/build/git:latest"
    assert source["command"] == ["/ko-app/git"]
    args = source["args"]
    assert args[:4] == ["--url", "https://example.com/app.git", "--target",
                        "$(params.shp-source-root)"]
    assert args[-6:] == ["--revision", "main", "--depth", "1", "--secret-path",
                         "/workspace/shp-source-secret"]
    assert {"name": "shp-my-secret", "secret": {"secretName": "my.secret", "defaultMode": 0o444}
            } in taskrun["spec"]["taskSpec"]["volumes"]
    env = {e["name"]: e["value"] for e in source["env"]}
    assert env == {"HOME": "/shp-writable-home", "GIT_SHOW_LISTING": "false",
                   "TMPDIR": "/shp-tmp"}
    results = [r["name"] for r in taskrun["spec"]["taskSpec"]["results"]]
    assert results[-4:] == ["shp-source-default-source-timestamp",
                            "shp-source-default-commit-sha",
                            "shp-source-default-commit-author",
                            "shp-source-default-branch-name"]
    assert taskrun["spec"]["taskSpec"]["steps"][0] is source


def test_secret_volume_name_is_a_dns1123_label() -> None:
    assert secret_volume_name("a.b_c") == "shp-a-b-c"
    assert len(secret_volume_name("x" * 300)) == 63


def test_bundle_step_and_local_waiter() -> None:
    oci = {"image": "r/src:1", "pullSecret": "pull", "prune": "AfterPull"}
    bundle = step(generate(build=with_spec(BUILD, source={"type": "OCI", "ociArtifact": oci})),
                  "source-default")
    assert bundle["args"][:2] == ["--image", "r/src:1"]
    assert bundle["args"][-3:] == ["--secret-path", "/workspace/shp-pull-secret", "--prune"]
    # A BuildRun's Local source wins over the Build's Git source.
    buildrun = with_spec(BUILDRUN, source={"type": "Local", "local": {"timeout": "90m"}})
    taskrun = generate(buildrun)
    waiter = step(taskrun, "source-local")
    assert waiter["args"] == ["start", "--lock-file=/shp-tmp/waiter.lock", "--timeout=1h30m0s"]
    assert not any(s["name"] == "source-default" for s in taskrun["spec"]["taskSpec"]["steps"])


def test_strategy_steps_carry_env_resources_security_and_mounts() -> None:
    strategy = copy.deepcopy(STRATEGY)
    strategy["spec"]["volumes"] = [{"name": "cache", "emptyDir": {}}]
    strategy["spec"]["steps"][0].update(
        env=[{"name": "S", "value": "1"}], resources={"limits": {"cpu": "1"}},
        securityContext={"runAsUser": 0}, volumeMounts=[{"name": "cache", "mountPath": "/c"}],
        imagePullPolicy="Always")
    build = with_spec(BUILD, env=[{"name": "B", "value": "b"}, {"name": "O", "value": "b"}])
    buildrun = with_spec(BUILDRUN, env=[{"name": "O", "value": "r"}],
                         stepResources=[{"name": "build", "resources": {"limits": {"cpu": "2"}}}])
    built = step(generate(buildrun, build, strategy), "build")
    assert built["env"] == [{"name": "S", "value": "1"}, {"name": "B", "value": "b"},
                            {"name": "O", "value": "r"}]
    assert built["computeResources"] == {"limits": {"cpu": "2"}}
    assert built["securityContext"] == {"runAsUser": 0}
    assert built["volumeMounts"] == [{"name": "cache", "mountPath": "/c"}]
    assert built["imagePullPolicy"] == "Always"


@pytest.mark.parametrize("where", ["build", "embedded", "run"])
def test_step_resources_for_an_unknown_step_are_refused(where: str) -> None:
    entry = [{"name": "nope", "resources": {}}]
    build, buildrun = copy.deepcopy(BUILD), copy.deepcopy(BUILDRUN)
    if where == "build":
        build["spec"]["strategy"]["stepResources"] = entry
    elif where == "embedded":
        buildrun["spec"]["build"] = {"spec": {**BUILD_SPEC, "strategy": {
            "name": "kaniko", "stepResources": entry}}}
    else:
        buildrun["spec"]["stepResources"] = entry
    with pytest.raises(UserError) as exc:
        generate(buildrun, build)
    assert exc.value.reason == reasons.UNDEFINED_STEP_RESOURCE
    assert '"nope"' in exc.value.message


def test_env_named_twice_by_build_and_step_is_refused() -> None:
    strategy = copy.deepcopy(STRATEGY)
    strategy["spec"]["steps"][0]["env"] = [{"name": "X", "value": "1"}]
    with pytest.raises(UserError) as exc:
        generate(build=with_spec(BUILD, env=[{"name": "X", "value": "2"}]), strategy=strategy)
    assert exc.value.reason == reasons.TASK_RUN_GENERATION_FAILED
    assert '"X" already exists' in exc.value.message


@pytest.mark.parametrize(("volumes", "reason"), [
    ([{"name": "nope", "emptyDir": {}}], reasons.UNDEFINED_VOLUME),
    ([{"name": "fixed", "emptyDir": {}}], reasons.VOLUME_NOT_OVERRIDABLE),
])
def test_volume_overrides_are_checked(volumes: list[dict[str, Any]], reason: str) -> None:
    strategy = with_spec(STRATEGY, volumes=[{"name": "fixed", "emptyDir": {}},
                                            {"name": "open", "overridable": True,
                                             "emptyDir": {}}])
    with pytest.raises(UserError) as exc:
        generate(with_spec(BUILDRUN, volumes=volumes), strategy=strategy)
    assert exc.value.reason == reason


def test_volume_override_replaces_the_source_only() -> None:
    strategy = with_spec(STRATEGY, volumes=[{"name": "open", "overridable": True,
                                             "description": "d", "emptyDir": {}}])
    buildrun = with_spec(BUILDRUN, volumes=[{"name": "open", "configMap": {"name": "c"}}])
    volumes = generate(buildrun, strategy=strategy)["spec"]["taskSpec"]["volumes"]
    assert {"name": "open", "configMap": {"name": "c"}} in volumes


OUTPUT_STRATEGY = with_spec(STRATEGY, steps=[{"name": "build", "image": "b",
                                              "args": ["$(params.shp-output-directory)"]}])


def test_managed_push_when_a_step_writes_the_output_directory() -> None:
    build = with_spec(BUILD, output={"image": "r/app", "pushSecret": "push",
                                     "labels": {"b": "2", "a": "1"}, "timestamp": "Zero"})
    taskrun = generate(build=build, strategy=OUTPUT_STRATEGY)
    push = step(taskrun, "image-processing")
    assert push["args"] == [
        "--push", "$(params.shp-output-directory)", "--label", "a=1", "--label", "b=2",
        "--image-timestamp", "0", "--image", "$(params.shp-output-image)",
        "--insecure=$(params.shp-output-insecure)",
        "--result-file-image-digest", "$(results.shp-image-digest.path)",
        "--result-file-image-size", "$(results.shp-image-size.path)",
        "--result-file-image-vulnerabilities", "$(results.shp-image-vulnerabilities.path)",
        "--secret-path", "/workspace/shp-push-secret"]
    assert push["securityContext"]["runAsUser"] == 0
    assert values(taskrun)["shp-output-directory"] == "/workspace/output-image"
    assert {"name": "shp-output-directory", "mountPath": "/workspace/output-image"} in step(
        taskrun, "build")["volumeMounts"]


def test_no_image_processing_step_when_there_is_nothing_to_do() -> None:
    names = [s["name"] for s in generate()["spec"]["taskSpec"]["steps"]]
    assert names == ["source-default", "build"]


def test_vulnerability_scan_settings_and_count_limit() -> None:
    build = with_spec(BUILD, output={"image": "r/app", "vulnerabilityScan": {
        "enabled": True, "ignore": {"id": ["CVE-1"], "unfixed": True}}})
    config = ShipwrightConfig.from_env({"VULNERABILITY_COUNT_LIMIT": "9"})
    args = step(generate(build=build, config=config), "image-processing")["args"]
    assert args[:4] == ["--vuln-settings",
                        '{"enabled":true,"ignore":{"id":["CVE-1"],"unfixed":true}}',
                        "--vuln-count-limit", "9"]


@pytest.mark.parametrize(("timestamp", "expected"), [
    ("BuildTimestamp", ["--image-timestamp", "1767236645"]),
    ("SourceTimestamp", ["--image-timestamp-file",
                         "$(results.shp-source-default-source-timestamp.path)"]),
    ("123", ["--image-timestamp", "123"]),
])
def test_output_timestamps(timestamp: str, expected: list[str]) -> None:
    buildrun = copy.deepcopy(BUILDRUN)
    buildrun["metadata"]["creationTimestamp"] = "2026-01-01T03:04:05Z"
    build = with_spec(BUILD, output={"image": "r/app", "timestamp": timestamp})
    assert step(generate(buildrun, build), "image-processing")["args"][:2] == expected


def test_source_timestamp_without_a_source_is_refused() -> None:
    build = with_spec(BUILD, source={"type": "Local", "local": {}},
                      output={"image": "r/app", "timestamp": "SourceTimestamp"})
    with pytest.raises(UserError) as exc:
        generate(build=build)
    assert exc.value.reason == reasons.TASK_RUN_GENERATION_FAILED


def test_strategy_security_context_forces_shipwright_steps_and_names_the_user() -> None:
    strategy = with_spec(STRATEGY, securityContext={"runAsUser": 1001, "runAsGroup": 1002})
    taskrun = generate(strategy=strategy)
    source, built = step(taskrun, "source-default"), step(taskrun, "build")
    assert (source["securityContext"]["runAsUser"], source["securityContext"]["runAsGroup"]) \
        == (1001, 1002)
    assert {"name": "shp-security-context", "mountPath": "/etc/passwd", "subPath": "passwd"
            } in source["volumeMounts"]
    assert built["securityContext"] == {"runAsUser": 1001, "runAsGroup": 1002}
    assert taskrun["metadata"]["annotations"][ANNOTATION_SC_PASSWD] == (
        "shp:x:1001:1002:shp:/shared-home:/sbin/nologin")


def test_pod_template_buildrun_wins_and_tolerations_merge_by_key() -> None:
    build = with_spec(BUILD, nodeSelector={"a": "1", "b": "1"}, schedulerName="s",
                      tolerations=[{"key": "k", "operator": "Exists"},
                                   {"key": "j", "operator": "Exists", "effect": "NoExecute"}])
    buildrun = with_spec(BUILDRUN, nodeSelector={"b": "2"}, runtimeClassName="kata",
                         tolerations=[{"key": "k", "operator": "Equal", "value": "v"}])
    template = generate(buildrun, build)["spec"]["podTemplate"]
    assert template == {
        "nodeSelector": {"a": "1", "b": "2"},
        "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
                        {"key": "j", "operator": "Exists", "effect": "NoExecute"}],
        "runtimeClassName": "kata", "schedulerName": "s",
    }


def test_strategy_annotations_are_copied_except_shipwrights_own() -> None:
    strategy = copy.deepcopy(STRATEGY)
    strategy["metadata"]["annotations"] = {
        "team": "x", "buildrun.shipwright.io/y": "1",
        "kubectl.kubernetes.io/last-applied-configuration": "{}"}
    assert generate(strategy=strategy)["metadata"]["annotations"] == {"team": "x"}


def test_settings_images_and_templates() -> None:
    config = ShipwrightConfig.from_env({
        "GIT_CONTAINER_TEMPLATE": '{"command": ["/git"], "workingDir": "/w"}',
        "GIT_CONTAINER_IMAGE": "r/git:2"})
    source = step(generate(config=config), "source-default")
    assert (source["image"], source["command"], source["workingDir"]) == (
        "r/git:2", ["/git"], "/w")
    assert "securityContext" not in source  # the template replaces the default wholesale


@pytest.mark.parametrize("env", [{"VULNERABILITY_COUNT_LIMIT": "many"},
                                 {"BUNDLE_CONTAINER_TEMPLATE": "{not json"},
                                 {"WAITER_CONTAINER_TEMPLATE": "[]"}])
def test_bad_settings_are_one_clear_error(env: dict[str, str]) -> None:
    """The CLI's ConfigError: one line naming the variable, exit code 2."""
    from controller.runtime.kube import ConfigError

    with pytest.raises(ConfigError, match=next(iter(env))):
        ShipwrightConfig.from_env(env)


def test_generate_taskrun_output_does_not_alias_inputs() -> None:
    inputs = copy.deepcopy((BUILDRUN, BUILD, STRATEGY))
    taskrun = generate(strategy=OUTPUT_STRATEGY)
    taskrun["spec"]["taskSpec"]["steps"][1]["args"].append("x")
    taskrun = generate()
    for s in taskrun["spec"]["taskSpec"]["steps"]:
        s.setdefault("env", []).append({"name": "Z"})
        s.get("securityContext", {}).clear()
    assert inputs == (BUILDRUN, BUILD, STRATEGY)
    assert generate()["spec"]["taskSpec"]["steps"][0]["env"][0]["name"] == "HOME"


# --- fuzzing over what the CRD schemas admit


def crd_schema(filename: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / filename).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


# The API server guarantees metadata.name is a DNS-1123 subdomain and sets uid.
SUBDOMAIN_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
object_names = st.from_regex(
    rf"{SUBDOMAIN_LABEL}(\.{SUBDOMAIN_LABEL}){{0,4}}", fullmatch=True
).filter(lambda n: len(n) <= DNS1123_SUBDOMAIN_MAX)
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
    assert is_run_name(metadata["name"]), metadata["name"]
    assert metadata["name"] == run_name(buildrun)
    assert metadata["namespace"] == buildrun["metadata"]["namespace"]
    for key, value in metadata["labels"].items():
        assert not label_value_errors(value), (key, value)
    [owner] = metadata["ownerReferences"]
    assert owner["apiVersion"] == "shipwright.io/v1beta1"
    assert owner["kind"] == "BuildRun"
    assert owner["name"] == buildrun["metadata"]["name"]
    assert owner["uid"] == buildrun["metadata"].get("uid", "")
    assert owner["controller"] is True
    given = [p["name"] for p in taskrun["spec"].get("params", [])]
    declared = [p["name"] for p in taskrun["spec"]["taskSpec"]["params"]]
    assert len(given) == len(set(given))
    assert set(given) <= set(declared)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buildrun=buildruns, build=builds, strategy=strategies,
       service_account=st.text(max_size=MAX_TEXT))
def test_generate_taskrun_raises_only_user_errors_on_admitted_input(
    buildrun: dict[str, Any], build: dict[str, Any], strategy: dict[str, Any],
    service_account: str,
) -> None:
    """Straight into generate_taskrun, unvalidated: a TaskRun or a UserError, never a crash,
    and the inputs untouched."""
    inputs = copy.deepcopy((buildrun, build, strategy))
    try:
        taskrun = generate_taskrun(buildrun, build, strategy, service_account, CONFIG)
    except UserError as exc:
        assert exc.reason and exc.message
    else:
        check_taskrun(taskrun, buildrun)
    assert (buildrun, build, strategy) == inputs


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buildrun=buildruns, build=builds, strategy=strategies)
def test_pipeline_rejects_with_user_error_or_generates_valid_taskrun(
    buildrun: dict[str, Any], build: dict[str, Any], strategy: dict[str, Any]
) -> None:
    """The whole pure path, as the reconciler runs it: only UserError may stop it."""
    embedded = (buildrun["spec"].get("build") or {}).get("spec")
    if embedded is not None:
        build = {"metadata": {}, "spec": embedded}
    try:
        effective_build(buildrun, build["spec"])
        validate_params(build["spec"].get("paramValues") or [],
                        buildrun["spec"].get("paramValues") or [],
                        strategy["spec"].get("parameters") or [])
        taskrun = generate_taskrun(buildrun, build, strategy, "default", CONFIG)
    except UserError as exc:
        assert exc.reason and exc.message
        return
    check_taskrun(taskrun, buildrun)


def test_the_deployment_sets_only_settings_we_read_and_they_parse() -> None:
    deployment = yaml.safe_load((CRDS.parent / "deployment" / "deployment.yaml").read_text())
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    read = {f"{kind}_CONTAINER_{form}" for kind in ("GIT", "BUNDLE", "WAITER",
                                                     "IMAGE_PROCESSING")
            for form in ("IMAGE", "TEMPLATE")} | {"VULNERABILITY_COUNT_LIMIT",
                                                   "GIT_ENABLE_REWRITE_RULE",
                                                   "BUILDRUN_EXECUTOR"}
    assert set(env) <= read
    config = ShipwrightConfig.from_env(env)
    assert config == SHIPWRIGHT_DEFAULTS  # the defaults, spelled out
