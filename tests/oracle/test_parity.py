"""Our TaskRun against Shipwright's own: the oracle (hack/oracle) runs Shipwright
v0.20.13's GenerateTaskRun and Tekton's SetDefaults + Validate on the same inputs.

For every official sample Build (with its sample strategy) and for each TaskRun-shaping
field alone, in one oracle process: Tekton's validation accepts our TaskRun; ours equals
Shipwright's after parity.normalise (each difference listed, with its reason, in
parity.NORMALISATION and docs/taskrun.md, "Where we differ on purpose"); and where
Shipwright's generator refuses, we refuse too, with a UserError.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.runtime.errors import UserError
from devtools.shipwright import oracle
from tests.doctext import section
from tests.oracle.parity import (
    Case,
    buildrun_for,
    compare,
    diff,
    normalise,
    sample_builds,
    sample_strategies,
    with_meta,
)

JSON = dict[str, Any]


def sample_cases() -> list[Case]:
    strategies = sample_strategies()
    cases: list[Case] = []
    for stem, build in sample_builds():
        ref = build["spec"]["strategy"]
        strategy = strategies[(ref.get("kind") or "BuildStrategy", ref["name"])]
        b = with_meta(build)
        cases.append((f"sample/{stem}", with_meta(strategy, generation=2), b, buildrun_for(b), {}))
    return cases


# Our own strategy (not Shipwright's): a managed-push step writing to the output
# directory, a parameter of each type, a volume, a step env var.
STRATEGY: JSON = {
    "apiVersion": "shipwright.io/v1beta1",
    "kind": "BuildStrategy",
    "metadata": {"name": "parity", "annotations": {
        "example.com/team": "builds",
        "buildstrategy.shipwright.io/internal": "x",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    }},
    "spec": {
        "parameters": [
            {"name": "flags", "type": "array", "defaults": []},
            {"name": "tool", "description": "which tool", "default": "make"},
            {"name": "target"},
        ],
        "volumes": [
            {"name": "cache", "overridable": True, "emptyDir": {}},
            {"name": "config", "overridable": False, "configMap": {"name": "cfg"}},
        ],
        "steps": [
            {
                "name": "build",
                "image": "example.com/builder:1",
                "imagePullPolicy": "IfNotPresent",
                "workingDir": "$(params.shp-source-context)",
                "command": ["build"],
                "args": ["--out", "$(params.shp-output-directory)", "--tool",
                         "$(params.tool)", "--target", "$(params.target)",
                         "$(params.flags[*])"],
                "env": [{"name": "STEP_ONLY", "value": "1"}],
                "resources": {"limits": {"memory": "1Gi"}, "requests": {"cpu": "250m"}},
                "securityContext": {"runAsUser": 0, "capabilities": {"add": ["SETFCAP"]}},
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"},
                                 {"name": "config", "mountPath": "/config", "readOnly": True}],
            },
            {"name": "report", "image": "example.com/report:1", "command": ["report"],
             "args": ["$(params.target)"]},
        ],
    },
}
BUILD: JSON = {
    "apiVersion": "shipwright.io/v1beta1",
    "kind": "Build",
    "metadata": {"name": "app"},
    "spec": {
        "source": {"type": "Git", "git": {"url": "https://example.com/app.git"}},
        "strategy": {"name": "parity", "kind": "BuildStrategy"},
        "paramValues": [{"name": "target", "value": "all"}],
        "output": {"image": "registry.example.com/app"},
    },
}


def variant(case_id: str, *, build: JSON | None = None, run: JSON | None = None,
            strategy: JSON | None = None, env: dict[str, str] | None = None,
            source: JSON | None = None) -> Case:
    """Our strategy and Build with `build` merged into the Build's spec (`source`
    replacing its source), `strategy` into the strategy's spec, `run` as BuildRun spec."""
    b = copy.deepcopy(BUILD)
    b["spec"].update(copy.deepcopy(build or {}))
    if source is not None:
        b["spec"]["source"] = copy.deepcopy(source)
    s = copy.deepcopy(STRATEGY)
    s["spec"].update(copy.deepcopy(strategy or {}))
    b = with_meta(b, generation=4)
    return (case_id, with_meta(s, generation=7), b, buildrun_for(b, **(run or {})), env or {})


CONFIGMAP = {"configMapValue": {"name": "settings", "key": "target"}}
SECRET = {"secretValue": {"name": "creds", "key": "token", "format": "--token=${SECRET_VALUE}"}}

FIELD_CASES: list[Case] = [
    variant("base"),
    # sources
    variant("git/revision", source={"type": "Git", "git": {
        "url": "https://example.com/app.git", "revision": "v1.2"}}),
    variant("git/depth-0", source={"type": "Git", "git": {
        "url": "https://example.com/app.git", "depth": 0}}),
    variant("git/depth-5", source={"type": "Git", "git": {
        "url": "https://example.com/app.git", "depth": 5}}),
    variant("git/cloneSecret", source={"type": "Git", "git": {
        "url": "git@example.com:app.git", "cloneSecret": "git.ssh_key"}}),
    variant("git/contextDir", source={"type": "Git", "contextDir": "sub/../dir/",
                                      "git": {"url": "https://example.com/app.git"}}),
    variant("git/rewrite-rule", env={"GIT_ENABLE_REWRITE_RULE": "true"}),
    variant("oci/plain", source={"type": "OCI", "ociArtifact": {"image": "example.com/src:1"}}),
    variant("oci/pullSecret-prune", source={"type": "OCI", "ociArtifact": {
        "image": "example.com/src:1", "pullSecret": "pull", "prune": "AfterPull"}}),
    variant("oci/prune-never", source={"type": "OCI", "ociArtifact": {
        "image": "example.com/src:1", "prune": "Never"}}),
    variant("local/build", source={"type": "Local", "local": {"name": "x", "timeout": "90s"}}),
    variant("local/buildrun-overrides-git",
            run={"source": {"type": "Local", "local": {"timeout": "1h30m"}}}),
    variant("local/no-timeout", source={"type": "Local", "local": {"name": "x"}}),
    # output and managed push
    variant("output/annotations-labels", build={"output": {
        "image": "registry.example.com/app", "annotations": {"b": "2", "a": "1"},
        "labels": {"team": "x", "app": "y"}}},
        run={"output": {"image": "registry.example.com/other", "labels": {"team": "z"}}}),
    variant("output/timestamp-zero", build={"output": {
        "image": "registry.example.com/app", "timestamp": "Zero"}}),
    variant("output/timestamp-source", build={"output": {
        "image": "registry.example.com/app", "timestamp": "SourceTimestamp"}}),
    variant("output/timestamp-build", build={"output": {
        "image": "registry.example.com/app", "timestamp": "BuildTimestamp"}}),
    variant("output/timestamp-number", run={"output": {
        "image": "registry.example.com/app", "timestamp": "1691234567"}}),
    variant("output/timestamp-garbage", build={"output": {
        "image": "registry.example.com/app", "timestamp": "yesterday"}}),
    variant("output/timestamp-source-without-source", source={},
            build={"output": {"image": "registry.example.com/app",
                              "timestamp": "SourceTimestamp"}}),
    variant("output/vulnerability-scan", build={"output": {
        "image": "registry.example.com/app", "vulnerabilityScan": {
            "enabled": True, "failOnFinding": True,
            "ignore": {"id": ["CVE-1", "GHSA-2"], "severity": "low", "unfixed": True}}}}),
    variant("output/vulnerability-scan-odd-ids", build={"output": {
        "image": "registry.example.com/app", "vulnerabilityScan": {
            "enabled": True, "ignore": {"id": ["a<b>&c", "é\u2028", '"q"\\']}}}}),
    variant("output/vulnerability-limit", env={"VULNERABILITY_COUNT_LIMIT": "7"},
            build={"output": {"image": "registry.example.com/app",
                              "vulnerabilityScan": {"enabled": True}}}),
    variant("output/insecure-build", build={"output": {
        "image": "registry.example.com/app", "insecure": True}}),
    variant("output/insecure-buildrun", run={"output": {
        "image": "registry.example.com/app", "insecure": True}}),
    variant("output/pushSecret", build={"output": {
        "image": "registry.example.com/app", "pushSecret": "push-creds"}}),
    variant("output/pushSecret-buildrun", run={"output": {
        "image": "registry.example.com/other", "pushSecret": "run-push-creds"}}),
    variant("output/no-output-directory-no-push", strategy={"steps": [
        {"name": "build", "image": "example.com/builder:1",
         "args": ["$(params.shp-output-image)", "$(params.target)"]}]}),
    # parameters
    variant("params/buildrun-overrides", run={"paramValues": [
        {"name": "target", "value": "test"}, {"name": "tool", "value": "ninja"}]}),
    variant("params/array", build={"paramValues": [
        {"name": "target", "value": "all"},
        {"name": "flags", "values": [{"value": "-v"}, CONFIGMAP, SECRET]}]}),
    variant("params/configMapValue", build={"paramValues": [{"name": "target", **CONFIGMAP}]}),
    variant("params/configMapValue-format", build={"paramValues": [{"name": "target",
        "configMapValue": {"name": "settings", "key": "t", "format": "x-${CONFIGMAP_VALUE}"}}]}),
    variant("params/secretValue", build={"paramValues": [{"name": "target", **SECRET}]}),
    variant("params/same-secret-twice", build={"paramValues": [
        {"name": "target", **SECRET}, {"name": "tool", **SECRET}]}),
    # steps and pod
    variant("env/build-and-buildrun", build={"env": [
        {"name": "A", "value": "build"}, {"name": "B", "value": "build"}]},
        run={"env": [{"name": "B", "value": "run"},
                     {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}),
    variant("env/conflict-with-step", build={"env": [{"name": "STEP_ONLY", "value": "x"}]}),
    variant("stepResources/build", build={"strategy": {"name": "parity", "kind":
        "BuildStrategy", "stepResources": [{"name": "build", "resources": {
            "limits": {"memory": "2Gi"}}}]}}),
    variant("stepResources/buildrun", run={"stepResources": [{"name": "report", "resources": {
        "requests": {"cpu": "1"}}}]}),
    variant("stepResources/unknown-step", run={"stepResources": [{"name": "nope",
                                                                   "resources": {}}]}),
    variant("securityContext", strategy={"securityContext": {"runAsUser": 1001,
                                                             "runAsGroup": 1002}}),
    variant("volumes/description", strategy={"volumes": [
        {"name": "cache", "overridable": True, "description": "the build cache", "emptyDir": {}},
        {"name": "config", "description": "settings", "configMap": {"name": "cfg"}}]}),
    variant("volumes/build-override", build={"volumes": [
        {"name": "cache", "persistentVolumeClaim": {"claimName": "pvc"}}]}),
    variant("volumes/buildrun-override", build={"volumes": [
        {"name": "cache", "persistentVolumeClaim": {"claimName": "pvc"}}]},
        run={"volumes": [{"name": "cache", "emptyDir": {"medium": "Memory"}}]}),
    variant("volumes/secret-mounted-writable", run={"volumes": [
        {"name": "cache", "secret": {"secretName": "s"}}]}),
    variant("volumes/not-overridable", build={"volumes": [
        {"name": "config", "emptyDir": {}}]}),
    variant("volumes/undefined", run={"volumes": [{"name": "nope", "emptyDir": {}}]}),
    variant("volumes/mount-undefined", strategy={"volumes": []}),
    variant("volumes/writable-configmap", strategy={"steps": [
        {"name": "build", "image": "example.com/builder:1",
         "volumeMounts": [{"name": "config", "mountPath": "/config"}]}]}),
    variant("pod/build", build={"nodeSelector": {"disk": "ssd"},
                                "tolerations": [{"key": "k", "operator": "Exists"}],
                                "schedulerName": "sched", "runtimeClassName": "kata"}),
    # Tolerations only as Shipwright's validation admits them (Build and BuildRun alike:
    # effect NoSchedule or unset, no tolerationSeconds); the others are refused before
    # generation ("tolerations/..." below).
    variant("pod/buildrun-wins", build={
        "nodeSelector": {"disk": "ssd", "zone": "a"},
        "tolerations": [{"key": "k", "operator": "Equal", "value": "1",
                         "effect": "NoSchedule"}, {"key": "j", "operator": "Exists"}],
        "schedulerName": "sched", "runtimeClassName": "kata"},
        run={"nodeSelector": {"zone": "b"},
             "tolerations": [{"key": "k", "operator": "Exists"}],
             "schedulerName": "other", "runtimeClassName": "gvisor"}),
    variant("timeout/build", build={"timeout": "10m"}),
    variant("timeout/buildrun", build={"timeout": "10m"}, run={"timeout": "1h30m"}),
    # settings, as Shipwright's controller reads them from its environment
    variant("settings/images", env={
        "GIT_CONTAINER_IMAGE": "example.com/git:2",
        "IMAGE_PROCESSING_CONTAINER_IMAGE": "example.com/ip:2"}),
    variant("settings/bundle-image", env={"BUNDLE_CONTAINER_IMAGE": "example.com/bundle:2"},
            source={"type": "OCI", "ociArtifact": {"image": "example.com/src:1"}}),
    variant("settings/waiter-image", env={"WAITER_CONTAINER_IMAGE": "example.com/waiter:2"},
            source={"type": "Local", "local": {}}),
    variant("settings/git-template", env={"GIT_CONTAINER_TEMPLATE": (
        '{"command": ["/git"], "imagePullPolicy": "Always", "resources": '
        '{"limits": {"cpu": "1"}}, "env": [{"name": "X", "value": "1"}], '
        '"securityContext": {"runAsNonRoot": true}, "workingDir": "/w"}')}),
    variant("settings/template-and-image", env={
        "IMAGE_PROCESSING_CONTAINER_TEMPLATE": '{"image": "a:1", "args": ["--x"]}',
        "IMAGE_PROCESSING_CONTAINER_IMAGE": "b:2"}),
    variant("settings/waiter-template", source={"type": "Local", "local": {"timeout": "5m"}},
            env={"WAITER_CONTAINER_TEMPLATE": '{"args": ["start"]}'}),
]

def embedded(case_id: str, **run: Any) -> Case:
    """The BuildRun embeds our Build's spec (spec.build.spec); the Build object handed to
    both generators is what Shipwright's GetBuildObject makes of it: no name."""
    _, strategy, build, buildrun, env = variant(case_id)
    buildrun["spec"] = {"build": {"spec": copy.deepcopy(build["spec"])}, **run}
    anonymous = {"apiVersion": build["apiVersion"], "kind": "Build",
                 "metadata": {"namespace": build["metadata"]["namespace"]},
                 "spec": build["spec"]}
    return case_id, strategy, anonymous, buildrun, env


def cluster_strategy(case_id: str) -> Case:
    _, strategy, build, buildrun, env = variant(case_id)
    strategy = copy.deepcopy(strategy)
    strategy["kind"] = "ClusterBuildStrategy"
    del strategy["metadata"]["namespace"]
    return case_id, strategy, build, buildrun, env


PLATFORMS = [{"os": "linux", "arch": "amd64"}, {"os": "linux", "arch": "arm64"}]
MULTI_ARCH = {"image": "registry.example.com/app", "platforms": PLATFORMS}

# One bad value of each BuildRun field Shipwright's reconciler checks before generating
# (buildrun.go: validate.BuildRunNodeSelector, ..., ValidateMultiArchPreflight).
FIELD_CASES += [
    variant("nodeSelector/buildrun-invalid-key", run={"nodeSelector": {"disk type": "ssd"}}),
    variant("tolerations/buildrun-noexecute", run={"tolerations": [
        {"key": "k", "operator": "Exists", "effect": "NoExecute"}]}),
    variant("tolerations/buildrun-tolerationSeconds", run={"tolerations": [
        {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}),
    variant("schedulerName/buildrun-invalid", run={"schedulerName": "my scheduler"}),
    variant("runtimeClassName/buildrun-invalid", run={"runtimeClassName": "Kata_Containers"}),
    variant("platforms/buildrun-invalid", run={"output": {
        "image": "registry.example.com/app", "platforms": [{"os": "Linux", "arch": "amd64"}]}}),
    variant("platforms/nodeSelector-conflict", build={"output": MULTI_ARCH},
            run={"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
    variant("platforms/build", build={"output": MULTI_ARCH}),
    variant("platforms/buildrun", run={"output": MULTI_ARCH}),
]

FIELD_CASES += [
    embedded("embedded/plain"),
    embedded("embedded/stepResources-in-spec"),
    cluster_strategy("clusterbuildstrategy"),
]
FIELD_CASES[-2][3]["spec"]["build"]["spec"]["strategy"]["stepResources"] = [
    {"name": "report", "resources": {"limits": {"memory": "64Mi"}}}]

# Cases where Shipwright's generator itself refuses: we must refuse too (a UserError).
REFUSED = {
    "output/timestamp-garbage",
    "output/timestamp-source-without-source",
    "env/conflict-with-step",
    "volumes/not-overridable",
    "volumes/undefined",
    "volumes/mount-undefined",
    "volumes/writable-configmap",
    "volumes/secret-mounted-writable",
}


# Cases Shipwright's reconciler refuses before it calls its generator (its
# validate.BuildRun* checks), with the reason it fails the BuildRun with: its generator
# would make a TaskRun, we refuse in ours with that reason.
REFUSED_BEFORE_GENERATION = {
    "stepResources/unknown-step": reasons.UNDEFINED_STEP_RESOURCE,
    "nodeSelector/buildrun-invalid-key": reasons.NODE_SELECTOR_NOT_VALID,
    "tolerations/buildrun-noexecute": reasons.TOLERATION_NOT_VALID,
    "tolerations/buildrun-tolerationSeconds": reasons.TOLERATION_NOT_VALID,
    "schedulerName/buildrun-invalid": reasons.SCHEDULER_NAME_NOT_VALID,
    "runtimeClassName/buildrun-invalid": reasons.RUNTIME_CLASS_NAME_NOT_VALID,
    "platforms/buildrun-invalid": reasons.INVALID_PLATFORM,
    "platforms/nodeSelector-conflict": reasons.NODE_SELECTOR_PLATFORM_CONFLICT,
    "platforms/build": reasons.EXECUTOR_NOT_PIPELINE_RUN,
    "platforms/buildrun": reasons.EXECUTOR_NOT_PIPELINE_RUN,
}


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[JSON, JSON | UserError]]:
    """Every case through the oracle in one process (about a second for all of them)."""
    return {case_id: (answer, mine)
            for case_id, answer, mine in compare(sample_cases() + FIELD_CASES)}


def test_there_are_eleven_sample_builds() -> None:
    assert len(sample_cases()) == 11


@pytest.mark.parametrize("case_id", [c[0] for c in sample_cases()] +
                         [c[0] for c in FIELD_CASES
                          if c[0] not in REFUSED and c[0] not in REFUSED_BEFORE_GENERATION])
def test_ours_is_valid_and_equals_shipwrights(
    results: dict[str, tuple[JSON, JSON | UserError]], case_id: str
) -> None:
    answer, mine = results[case_id]
    assert not answer["error"], answer["error"]
    assert not answer["shipwrightError"], answer["shipwrightError"]
    assert not answer["shipwrightInvalid"], answer["shipwrightInvalid"]
    assert isinstance(mine, dict), f"we refused: {mine}"
    assert answer["oursInvalid"] == "", answer["oursInvalid"]
    differences = diff(normalise(answer["shipwright"]), normalise(answer["oursDecoded"]))
    assert not differences, "\n".join(differences)


@pytest.mark.parametrize("case_id", sorted(REFUSED))
def test_we_refuse_what_shipwright_refuses(
    results: dict[str, tuple[JSON, JSON | UserError]], case_id: str
) -> None:
    answer, mine = results[case_id]
    assert answer["shipwrightError"], "Shipwright generated a TaskRun here"
    assert isinstance(mine, UserError), "we generated a TaskRun where Shipwright refused"


@pytest.mark.parametrize("case_id", sorted(REFUSED_BEFORE_GENERATION))
def test_we_refuse_what_shipwrights_reconciler_refuses_before_generating(
    results: dict[str, tuple[JSON, JSON | UserError]], case_id: str
) -> None:
    answer, mine = results[case_id]
    assert answer["shipwright"], "Shipwright's generator refused: move the case to REFUSED"
    assert isinstance(mine, UserError), "we generated a TaskRun"
    assert mine.reason == REFUSED_BEFORE_GENERATION[case_id]


def test_the_comparison_sees_a_difference(
    results: dict[str, tuple[JSON, JSON | UserError]]
) -> None:
    """The normalisation does not hide real differences: one changed argument shows."""
    answer, _ = results["base"]
    changed = copy.deepcopy(answer["oursDecoded"])
    changed["spec"]["taskSpec"]["steps"][0]["args"][1] = "https://example.com/other.git"
    assert diff(normalise(answer["shipwright"]), normalise(changed))
    assert normalise(answer["shipwright"])["spec"]["taskSpec"]["steps"], "nothing compared"


def test_the_oracle_sees_an_invalid_taskrun(
    results: dict[str, tuple[JSON, JSON | UserError]]
) -> None:
    """Tekton's validation in the oracle is live: it refuses a TaskRun we break on purpose
    (what issue 15 found: $(params.shp-source-root) with the parameter not declared)."""
    _, mine = results["base"]
    assert isinstance(mine, dict)
    broken = copy.deepcopy(mine)
    for where in (broken["spec"], broken["spec"]["taskSpec"]):
        where["params"] = [p for p in where["params"] if p["name"] != "shp-source-root"]
    [verdict] = oracle.ask([oracle.case(STRATEGY, BUILD, buildrun_for(with_meta(BUILD)),
                                        ours=broken)])
    assert "non-existent variable" in verdict["oursInvalid"], verdict["oursInvalid"]


def test_the_docs_list_every_deliberate_difference() -> None:
    from tests.oracle.parity import NORMALISATION

    shown = section("docs/taskrun.md", "Where we differ on purpose")
    for what, _ in NORMALISATION:
        assert what.split(" (")[0] in shown, what
