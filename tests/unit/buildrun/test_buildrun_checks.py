"""controller.buildrun.validation.validate_buildrun without a server: the checks Shipwright's
BuildRun reconciler makes of a BuildRun's own fields before it generates the TaskRun
(pkg/reconciler/buildrun/buildrun.go, v0.20.13), each field alone, then their order, then
that the reconciler's preparation of a new BuildRun runs them (from warm caches, so no
API server is asked anything).

The expected messages are Kubernetes' validation words (k8s.io/apimachinery's
IsQualifiedName, IsValidLabelValue, IsDNS1123Subdomain) inside Shipwright's sentences.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from kubernetes_asyncio import client

from controller.buildrun import reasons
from controller.buildrun.caches import Caches
from controller.buildrun.executors import PIPELINERUN, TASKRUN
from controller.buildrun.reconciler import BuildRunReconciler
from controller.buildrun.validation import check_nodes, validate_buildrun
from controller.builds import validation as build_validation
from controller.runtime.errors import UserError
from controller.runtime.events import EventRecorder
from controller.runtime.kube import Kube
from tests.unit.buildrun.test_taskrun import buildruns, builds, strategies

JSON = dict[str, Any]

NAMESPACE = "team-a"
STRATEGY: JSON = {
    "apiVersion": "shipwright.io/v1beta1",
    "kind": "BuildStrategy",
    "metadata": {"name": "kaniko", "namespace": NAMESPACE, "generation": 1},
    "spec": {
        "volumes": [{"name": "cache", "overridable": True, "emptyDir": {}},
                    {"name": "fixed", "overridable": False, "emptyDir": {}}],
        "steps": [{"name": "build-and-push", "image": "kaniko",
                   "volumeMounts": [{"name": "cache", "mountPath": "/cache"},
                                    {"name": "fixed", "mountPath": "/fixed"}]}],
    },
}
BUILD_SPEC: JSON = {
    "source": {"type": "Git", "git": {"url": "https://example.com/app.git"}},
    "strategy": {"name": "kaniko", "kind": "BuildStrategy"},
    "output": {"image": "registry.example.com/app"},
}
PLATFORMS = [{"os": "linux", "arch": "amd64"}, {"os": "linux", "arch": "arm64"}]

# k8s.io/apimachinery's words, as Shipwright quotes them.
QNAME = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must "
         "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
         "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, "
               "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
               "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
               "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
DNS1123 = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
           "characters, '-' or '.', and must start and end with an alphanumeric character "
           "(e.g. 'example.com', regex used for validation is "
           "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
EXECUTOR = ('multi-arch builds require PipelineRun executor mode, current executor mode: '
            '"TaskRun"')


def buildrun(**spec: Any) -> JSON:
    return {"apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun",
            "metadata": {"name": "app-run-1", "namespace": NAMESPACE,
                         "uid": "0d3c5e3a-6a8e-4bd0-9a53-2bde0ab0f1a7",
                         "resourceVersion": "1"},
            "spec": {"build": {"name": "app"}, **spec}}


def build_spec(**fields: Any) -> JSON:
    return {**copy.deepcopy(BUILD_SPEC), **fields}


def refused(run: JSON, spec: JSON | None = None) -> UserError:
    with pytest.raises(UserError) as caught:
        validate_buildrun(run, BUILD_SPEC if spec is None else spec, STRATEGY)
    return caught.value


# -- nodeSelector (validate.BuildRunNodeSelector) -----------------------------------------


def test_buildrun_node_selector_key_not_valid() -> None:
    error = refused(buildrun(nodeSelector={"disk type": "ssd"}))
    assert (error.reason, error.message) == (
        reasons.NODE_SELECTOR_NOT_VALID, f"Node selector key not valid: {QNAME}")


def test_buildrun_node_selector_value_not_valid() -> None:
    error = refused(buildrun(nodeSelector={"disk": "s s d"}))
    assert (error.reason, error.message) == (
        reasons.NODE_SELECTOR_NOT_VALID, f"Node selector value not valid: {LABEL_VALUE}")


def test_buildrun_node_selector_value_too_long_and_prefixed_keys() -> None:
    error = refused(buildrun(nodeSelector={"example.com/disk": "x" * 64}))
    assert error.reason == reasons.NODE_SELECTOR_NOT_VALID
    assert error.message == "Node selector value not valid: must be no more than 63 bytes"
    validate_buildrun(buildrun(nodeSelector={"example.com/disk": "x" * 63, "zone": ""}),
                      BUILD_SPEC, STRATEGY)


def test_buildrun_node_selector_of_several_bad_keys_names_the_first_sorted() -> None:
    # Go's map order makes Shipwright's pick random; sorted here, as for a Build.
    error = refused(buildrun(nodeSelector={"zone": "a b", "disk": "c d"}))
    assert error.message.startswith("Node selector value not valid")
    assert refused(buildrun(nodeSelector={"b": "x y", "a!": "z"})).message.startswith(
        "Node selector key not valid"), "nodeSelector key a! sorts first"


# -- tolerations (validate.BuildRunTolerations) -------------------------------------------


@pytest.mark.parametrize(("toleration", "message"), [
    ({"key": "a b", "operator": "Exists"}, f"Toleration key not valid: {QNAME}"),
    ({"key": "", "operator": "Exists"},
     "Toleration key not valid: name part must be non-empty, " + QNAME),
    ({"key": "k"}, "Toleration operator not valid. Must be one of: 'Exists', 'Equal'"),
    ({"key": "k", "operator": "Gt"},
     "Toleration operator not valid. Must be one of: 'Exists', 'Equal'"),
    ({"key": "k", "operator": "Equal", "value": "a b"},
     f"Toleration value not valid: {LABEL_VALUE}"),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"},
     "Only the 'NoSchedule' toleration effect is supported."),
    ({"key": "k", "operator": "Exists", "effect": "PreferNoSchedule"},
     "Only the 'NoSchedule' toleration effect is supported."),
    ({"key": "k", "operator": "Exists", "tolerationSeconds": 0},
     "Specifying TolerationSeconds is not supported."),
], ids=["key", "empty-key", "no-operator", "operator", "value", "NoExecute",
        "PreferNoSchedule", "tolerationSeconds"])
def test_buildrun_tolerations_not_valid(toleration: JSON, message: str) -> None:
    error = refused(buildrun(tolerations=[{"key": "ok", "operator": "Exists"}, toleration]))
    assert (error.reason, error.message) == (reasons.TOLERATION_NOT_VALID, message), \
        "tolerations"


def test_buildrun_tolerations_checks_one_toleration_key_first_and_effect_before_seconds() -> None:
    # Within one of the tolerations: key, operator, value, effect, tolerationSeconds.
    error = refused(buildrun(tolerations=[{"key": "a b", "operator": "Gt", "value": "x y",
                                           "effect": "NoExecute", "tolerationSeconds": 1}]))
    assert error.message.startswith("Toleration key not valid")
    error = refused(buildrun(tolerations=[{"key": "k", "operator": "Exists",
                                           "effect": "NoExecute", "tolerationSeconds": 1}]))
    assert error.message == "Only the 'NoSchedule' toleration effect is supported."


def test_buildrun_tolerations_that_shipwright_admits_pass() -> None:
    validate_buildrun(buildrun(tolerations=[
        {"key": "k", "operator": "Exists"},
        {"key": "example.com/gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
        {"key": "e", "operator": "Equal", "value": ""}]), BUILD_SPEC, STRATEGY)


# -- schedulerName (validate.BuildRunSchedulerName) ---------------------------------------


def test_buildrun_scheduler_name_not_valid() -> None:
    error = refused(buildrun(schedulerName="my scheduler"))
    assert (error.reason, error.message) == (
        reasons.SCHEDULER_NAME_NOT_VALID, f"Scheduler name not valid: {QNAME}")


def test_buildrun_scheduler_name_empty_is_refused_unset_is_not() -> None:
    error = refused(buildrun(schedulerName=""))
    assert error.reason == reasons.SCHEDULER_NAME_NOT_VALID
    assert error.message == f"Scheduler name not valid: name part must be non-empty, {QNAME}"
    validate_buildrun(buildrun(schedulerName="example.com/my-scheduler"), BUILD_SPEC, STRATEGY)
    validate_buildrun(buildrun(schedulerName=None), BUILD_SPEC, STRATEGY)


# -- runtimeClassName (validate.BuildRunRuntimeClassName) ---------------------------------


def test_buildrun_runtime_class_name_not_valid() -> None:
    error = refused(buildrun(runtimeClassName="Kata_Containers"))
    assert (error.reason, error.message) == (
        reasons.RUNTIME_CLASS_NAME_NOT_VALID, f"RuntimeClassName not valid: {DNS1123}")


def test_buildrun_runtime_class_name_too_long_or_empty() -> None:
    error = refused(buildrun(runtimeClassName="a" * 254))
    assert error.message == "RuntimeClassName not valid: must be no more than 253 characters"
    assert refused(buildrun(runtimeClassName="")).reason == reasons.RUNTIME_CLASS_NAME_NOT_VALID
    validate_buildrun(buildrun(runtimeClassName="kata.example.com"), BUILD_SPEC, STRATEGY)


# -- the same words as the Build's checks of the same field -------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("nodeSelector", {"disk type": "ssd"}),
    ("tolerations", [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]),
    ("schedulerName", "my scheduler"),
    ("runtimeClassName", "Kata_Containers"),
])
def test_buildrun_node_selector_tolerations_scheduler_name_runtime_class_name_word_as_build(
        field: str, value: Any) -> None:
    """Shipwright's Build check of nodeSelector, tolerations, schedulerName and
    runtimeClassName is its BuildRun function on the Build's field: same reason, same words."""
    error = refused(buildrun(**{field: value}))
    verdict = build_validation.validate(
        {"metadata": {"name": "app", "namespace": NAMESPACE}, "spec": {field: value}},
        build_validation.Lookups(strategy=STRATEGY))
    assert (error.reason, error.message) == (verdict.reason, verdict.message)


# -- volumes and stepResources (validate.BuildRunVolumes, BuildRunStepResources) ----------


def test_buildrun_volumes_and_step_resources_in_shipwrights_words() -> None:
    error = refused(buildrun(volumes=[{"name": "nope", "emptyDir": {}}]))
    assert (error.reason, error.message) == (
        reasons.UNDEFINED_VOLUME, 'Volume "nope" is not defined in the Strategy'), "volumes"
    error = refused(buildrun(volumes=[{"name": "fixed", "emptyDir": {}}]))
    assert (error.reason, error.message) == (
        reasons.VOLUME_NOT_OVERRIDABLE, 'Volume "fixed" is not overridable in the Strategy')
    error = refused(buildrun(stepResources=[{"name": "nope", "resources": {}}]))
    assert (error.reason, error.message) == (
        reasons.UNDEFINED_STEP_RESOURCE,
        'stepResources references step "nope" which does not exist in the build strategy')
    validate_buildrun(buildrun(volumes=[{"name": "cache", "emptyDir": {}}],
                               stepResources=[{"name": "build-and-push", "resources": {}}]),
                      BUILD_SPEC, STRATEGY)


# -- platforms (validate.ValidateMultiArchPreflight) --------------------------------------


@pytest.mark.parametrize(("platforms", "message"), [
    ([{"os": "linux"}], "spec.output.platforms[0] must specify both os and arch"),
    ([{"os": "linux", "arch": "amd64"}, {"os": "Linux", "arch": "amd64"}],
     'spec.output.platforms[1].os "Linux": invalid; use the value your Nodes have for label '
     '"kubernetes.io/os"'),
    ([{"os": "linux", "arch": "amd-64"}],
     'spec.output.platforms[0].arch "amd-64": invalid; use the value your Nodes have for '
     'label "kubernetes.io/arch"'),
    ([{"os": "linux", "arch": "amd64"}, {"os": "linux", "arch": "amd64"}],
     "spec.output.platforms[1] is a duplicate of linux/amd64"),
], ids=["no-arch", "os", "arch", "duplicate"])
def test_platforms_of_the_buildrun_not_valid(platforms: list[JSON], message: str) -> None:
    error = refused(buildrun(output={"image": "registry.example.com/app",
                                     "platforms": platforms}))
    assert (error.reason, error.message) == (reasons.INVALID_PLATFORM, message), "platforms"


def test_platforms_valid_end_in_executor_not_pipeline_run() -> None:
    """A multi-arch request never silently builds one arch: Shipwright needs its
    PipelineRun executor for platforms, and with TaskRuns (the default) refuses them."""
    for run, spec in [
        (buildrun(output={"image": "registry.example.com/app", "platforms": PLATFORMS}),
         BUILD_SPEC),
        (buildrun(), build_spec(output={"image": "i", "platforms": PLATFORMS})),
    ]:
        error = refused(run, spec)
        assert (error.reason, error.message) == (reasons.EXECUTOR_NOT_PIPELINE_RUN, EXECUTOR)


def test_platforms_valid_with_pipelineruns_go_on_to_the_node_check() -> None:
    """With BUILDRUN_EXECUTOR=PipelineRun the preflight passes and the platforms are
    returned for the Node check (Shipwright lists Nodes only then); none without them,
    and the preflight's own refusals still come first."""
    spec = build_spec(output={"image": "i", "platforms": PLATFORMS})
    assert validate_buildrun(buildrun(), spec, STRATEGY, PIPELINERUN) == PLATFORMS
    assert validate_buildrun(buildrun(), BUILD_SPEC, STRATEGY, PIPELINERUN) == []
    with pytest.raises(UserError) as conflict:
        validate_buildrun(buildrun(nodeSelector={"kubernetes.io/os": "linux"}), spec,
                          STRATEGY, PIPELINERUN)
    assert conflict.value.reason == reasons.NODE_SELECTOR_PLATFORM_CONFLICT


def node(name: str, os_: str | None = "linux", arch: str | None = "amd64", *,
         ready: str = "True", unschedulable: bool = False) -> JSON:
    labels = {k: v for k, v in (("kubernetes.io/os", os_), ("kubernetes.io/arch", arch)) if v}
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": unschedulable} if unschedulable else {},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": ready}]}}


@pytest.mark.parametrize(("nodes", "missing"), [
    ([node("a"), node("b", arch="arm64")], None),
    ([node("a")], "linux/arm64"),
    ([], "linux/amd64"),
    ([node("a", ready="False"), node("b", arch="arm64")], "linux/amd64"),
    ([node("a", ready="Unknown"), node("b", arch="arm64")], "linux/amd64"),
    ([node("a", unschedulable=True), node("b", arch="arm64")], "linux/amd64"),
    ([node("a", os_=None), node("b", arch="arm64")], "linux/amd64"),
    ([node("a", arch=None), node("b", arch="arm64")], "linux/amd64"),
    ([node("a", os_="windows"), node("b", arch="arm64")], "linux/amd64"),
    ([{"metadata": {"name": "bare"}}, node("a"), node("b", arch="arm64")], None),
], ids=["both", "no-arm64", "no-nodes", "not-ready", "ready-unknown", "cordoned",
        "no-os-label", "no-arch-label", "other-os", "a-bare-node-is-skipped"])
def test_node_availability_as_shipwrights(nodes: list[JSON], missing: str | None) -> None:
    """Shipwright's ValidateNodeAvailability (pkg/validate/output.go): each of the output's
    platforms needs a Node that is Ready, not unschedulable, with both labels matching;
    the first platform without one is named."""
    if missing is None:
        check_nodes(PLATFORMS, nodes)
        return
    with pytest.raises(UserError) as refusal:
        check_nodes(PLATFORMS, nodes)
    assert (refusal.value.reason, refusal.value.message) == (
        reasons.NODE_PLATFORM_NOT_FOUND, f"no schedulable node found for platform {missing}")


def test_platforms_of_the_buildrun_replace_the_builds_when_not_empty() -> None:
    spec = build_spec(output={"image": "i", "platforms": PLATFORMS})
    bad = [{"os": "linux", "arch": "x86_64"}]
    error = refused(buildrun(output={"image": "i", "platforms": bad}), spec)
    assert error.reason == reasons.INVALID_PLATFORM, "the BuildRun's platforms were not used"
    # An empty list on the BuildRun leaves the Build's in force.
    error = refused(buildrun(output={"image": "i", "platforms": []}),
                    build_spec(output={"image": "i", "platforms": bad}))
    assert error.reason == reasons.INVALID_PLATFORM, "the Build's platforms were not used"


@pytest.mark.parametrize(("build_selector", "run_selector", "label"), [
    ({"kubernetes.io/os": "linux"}, {}, "kubernetes.io/os"),
    ({}, {"kubernetes.io/arch": "arm64"}, "kubernetes.io/arch"),
    ({"kubernetes.io/arch": "arm64"}, {"kubernetes.io/os": "linux"}, "kubernetes.io/os"),
], ids=["build", "buildrun", "merged-os-first"])
def test_platforms_with_a_merged_node_selector_conflict(
        build_selector: JSON, run_selector: JSON, label: str) -> None:
    spec = build_spec(nodeSelector=build_selector,
                      output={"image": "i", "platforms": PLATFORMS})
    error = refused(buildrun(nodeSelector=run_selector), spec)
    assert (error.reason, error.message) == (
        reasons.NODE_SELECTOR_PLATFORM_CONFLICT,
        f'nodeSelector must not contain "{label}" when spec.output.platforms is set; the '
        "build controller manages os/arch scheduling")


def test_platforms_of_an_embedded_spec_are_checked_with_its_node_selector() -> None:
    """An embedded spec's output is not checked with it (EMBEDDED_CHECKS has no output
    check, as Shipwright's validate.All for it), so its platforms meet the preflight."""
    embedded = build_spec(nodeSelector={"kubernetes.io/arch": "amd64"},
                          output={"image": "i", "platforms": PLATFORMS})
    run = buildrun()
    run["spec"]["build"] = {"spec": embedded}
    error = refused(run, embedded)
    assert error.reason == reasons.NODE_SELECTOR_PLATFORM_CONFLICT, "nodeSelector"
    del embedded["nodeSelector"]
    assert refused(run, embedded).reason == reasons.EXECUTOR_NOT_PIPELINE_RUN, "platforms"


def test_platforms_absent_and_every_field_valid_passes() -> None:
    """Without spec.output.platforms the Build's kubernetes.io/os nodeSelector is fine."""
    validate_buildrun(buildrun(nodeSelector={"disk": "ssd"},
                               tolerations=[{"key": "k", "operator": "Exists"}],
                               schedulerName="sched", runtimeClassName="kata",
                               output={"image": "registry.example.com/other"}),
                      build_spec(nodeSelector={"kubernetes.io/os": "linux"}), STRATEGY)


# -- the order --------------------------------------------------------------------------


def test_buildrun_volumes_step_resources_node_selector_tolerations_scheduler_name_runtime_class_name_platforms_order() -> None:  # noqa: E501
    """Shipwright's order (buildrun.go): volumes, stepResources, nodeSelector,
    tolerations, schedulerName, runtimeClassName, then platforms; the first failure wins.
    Fixing each field in turn shows the next one's reason."""
    bad: list[tuple[str, Any, str]] = [
        ("volumes", [{"name": "nope", "emptyDir": {}}], reasons.UNDEFINED_VOLUME),
        ("stepResources", [{"name": "nope", "resources": {}}], reasons.UNDEFINED_STEP_RESOURCE),
        ("nodeSelector", {"kubernetes.io/arch": "a b"}, reasons.NODE_SELECTOR_NOT_VALID),
        ("tolerations", [{"key": "k", "operator": "Exists", "tolerationSeconds": 1}],
         reasons.TOLERATION_NOT_VALID),
        ("schedulerName", "my scheduler", reasons.SCHEDULER_NAME_NOT_VALID),
        ("runtimeClassName", "Kata", reasons.RUNTIME_CLASS_NAME_NOT_VALID),
        ("output", {"image": "i", "platforms": [{"os": "linux", "arch": "amd64"}] * 2},
         reasons.INVALID_PLATFORM),
    ]
    spec = {field: value for field, value, _ in bad}
    seen = []
    for field, _, _ in bad:
        seen.append(refused(buildrun(**spec)).reason)
        del spec[field]
    validate_buildrun(buildrun(**spec), BUILD_SPEC, STRATEGY)
    assert seen == [reason for _, _, reason in bad]


def test_platforms_preflight_order_invalid_then_node_selector_then_executor() -> None:
    """ValidateMultiArchPreflight: the platforms, then the merged nodeSelector, then the
    executor."""
    selector = {"kubernetes.io/os": "linux"}
    run = buildrun(nodeSelector=selector, output={"image": "i", "platforms": [{"os": "x"}]})
    assert refused(run).reason == reasons.INVALID_PLATFORM
    run["spec"]["output"]["platforms"] = PLATFORMS
    assert refused(run).reason == reasons.NODE_SELECTOR_PLATFORM_CONFLICT
    del run["spec"]["nodeSelector"]
    assert refused(run).reason == reasons.EXECUTOR_NOT_PIPELINE_RUN


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buildrun=buildruns, build=builds, strategy=strategies)
def test_buildrun_node_selector_tolerations_scheduler_name_runtime_class_name_platforms_fuzz(
        buildrun: JSON, build: JSON, strategy: JSON) -> None:
    """Over what the CRDs admit (nodeSelector, tolerations, schedulerName,
    runtimeClassName, output.platforms, volumes, stepResources of any shape): nothing
    but a UserError with one of the closed set of reasons, and the inputs untouched."""
    inputs = copy.deepcopy((buildrun, build, strategy))
    try:
        validate_buildrun(buildrun, build["spec"], strategy)
    except UserError as exc:
        assert exc.reason in reasons.USER_ERROR_REASONS and exc.message
    assert (buildrun, build, strategy) == inputs


# -- the reconciler runs them when it prepares a new BuildRun ----------------------------


async def _observed(run: JSON, spec: JSON) -> Any:
    """What the reconciler's look at a NEW BuildRun finds, from caches holding everything
    it reads. Its client points at a closed loopback port: any request would fail."""
    caches = Caches()
    caches.builds.upsert({"apiVersion": "shipwright.io/v1beta1", "kind": "Build",
                          "metadata": {"name": "app", "namespace": NAMESPACE,
                                       "generation": 2, "uid": "b"},
                          "spec": spec, "status": {"registered": "True"}})
    caches.strategies.upsert(copy.deepcopy(STRATEGY))
    caches.service_accounts.upsert({"apiVersion": "v1", "kind": "ServiceAccount",
                                    "metadata": {"name": "pipeline", "namespace": NAMESPACE}})
    kube = Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    try:
        reconciler = BuildRunReconciler(kube, caches, EventRecorder(kube, "t", "t"),
                                        executor=TASKRUN)
        return await reconciler.observer.observe(run)
    finally:
        await kube.close()


async def test_platforms_and_tolerations_of_a_new_buildrun_fail_it_before_any_taskrun() -> None:
    seen = await _observed(buildrun(), build_spec())
    assert seen.observation.user_error is None and seen.plan is not None, "the control case"
    assert seen.plan.run["spec"]["taskSpec"]["steps"]

    seen = await _observed(buildrun(), build_spec(output={"image": "i", "platforms": PLATFORMS}))
    assert seen.plan is None, "a TaskRun was planned for a multi-arch BuildRun"
    assert seen.observation.user_error.reason == reasons.EXECUTOR_NOT_PIPELINE_RUN, "platforms"

    run = buildrun(tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute"}])
    seen = await _observed(run, build_spec())
    assert seen.plan is None
    assert seen.observation.user_error.reason == reasons.TOLERATION_NOT_VALID, "tolerations"
